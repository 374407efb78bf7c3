//! `gpusched cancel JOB` (docs/BEHAVIOUR.md "Cancel"): stops a running job
//! (it ends `cancelled`, using no retry) or ends a waiting one unrun. It
//! never writes the jobs file — a rewrite could lose a line someone appends
//! at the same moment (`echo … >> jobs.txt`, over ssh) — but journals a
//! `cancel` event: through the running scheduler, or under the log
//! directory's lock when none runs ([`super::request`]). `gpusched retry`
//! undoes it as for any finished job. (A `cancel` flag written into the
//! line by hand works as before.)

use super::index::{JobIndex, LastWord, find_jobs_file, specs_of};
use super::request::{Delivery, JobRequest, PICKUP_WAIT, deliver};
use crate::cli::CancelArgs;

/// Cancels the job `args.job` names.
///
/// Errors: [`Error::Usage`] for an unknown job or a log directory that does
/// not exist; I/O errors on the log directory.
pub fn run(args: &CancelArgs) -> anyhow::Result<i32> {
    run_to(args, &mut std::io::stdout(), &mut std::io::stderr())
}

/// [`run`], saying what it did on `out` and `err` (the terminal's stdout
/// and stderr, or an MCP tool's result: the same words either way).
///
/// Errors: as [`run`].
pub fn run_to(
    args: &CancelArgs,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> anyhow::Result<i32> {
    super::request::require_log_dir(&args.log_dir)?;
    let index = JobIndex::read(&args.log_dir)?;
    let specs = match &args.file {
        Some(file) => specs_of(file),
        None => find_jobs_file(&args.log_dir)
            .map(|f| specs_of(&f))
            .unwrap_or_default(),
    };
    let (key, no, running, unseen) = match index.resolve_in(&args.job, &specs) {
        Ok(job) => {
            if let LastWord::Done { status, .. } = &job.last {
                writeln!(
                    out,
                    "job {} already ended ({status}); nothing to cancel (`gpusched retry {}` runs it again)",
                    job.no, job.no
                )?;
                return Ok(0);
            }
            (
                job.key.clone(),
                job.no.to_string(),
                job.last == LastWord::Started,
                None,
            )
        }
        // A line no scheduler has read yet, by its name or key prefix.
        Err(e) => match unseen_line(&args.job, &specs) {
            Some(spec) => (
                spec.key.clone(),
                format!("on line {}", spec.line),
                false,
                Some(spec.command.clone()),
            ),
            None => return Err(e.into()),
        },
    };
    let unseen: Vec<(&str, &str)> = unseen
        .as_deref()
        .map(|command| (key.as_str(), command))
        .into_iter()
        .collect();
    let delivery = deliver(&args.log_dir, &[JobRequest::Cancel(key.clone())], &unseen)?;
    let pid = |pid: Option<u32>| pid.map_or("?".to_string(), |p| p.to_string());
    match delivery.first().copied().unwrap_or(Delivery::Journaled) {
        Delivery::Journaled => writeln!(
            out,
            "job {} cancelled: {}",
            no,
            if running {
                "the next scheduler on this log directory stops it"
            } else {
                "it will not start (`gpusched retry` undoes this)"
            }
        )?,
        Delivery::Taken(p) => writeln!(
            out,
            "job {} cancelled (scheduler pid {}){}",
            no,
            pid(p),
            if running {
                ": stopping it (SIGTERM, SIGKILL after the grace)"
            } else {
                ": it will not start"
            }
        )?,
        Delivery::NotTaken(p) => {
            writeln!(
                err,
                "gpusched: asked the scheduler (pid {}) to cancel job {}; it has not done so within {} s (see its output)",
                pid(p),
                no,
                PICKUP_WAIT.as_secs()
            )?;
            return Ok(1);
        }
    }
    Ok(0)
}

/// The line `reference` names by its `name=` or a unique key prefix, among
/// lines the journal does not know yet (a bare number is always a job
/// number, never a key prefix).
fn unseen_line<'a>(
    reference: &str,
    specs: &'a [crate::jobspec::JobSpec],
) -> Option<&'a crate::jobspec::JobSpec> {
    let reference = reference.trim();
    if reference.parse::<u32>().is_ok() {
        return None;
    }
    if let Some(spec) = specs.iter().find(|s| s.name() == Some(reference)) {
        return Some(spec);
    }
    let mut matches = specs
        .iter()
        .filter(|s| !reference.is_empty() && s.key.starts_with(reference));
    let one = matches.next()?;
    matches.next().is_none().then_some(one)
}
