//! `gpusched cancel JOB…` (docs/BEHAVIOUR.md "Cancel"): stops running jobs
//! (it ends `cancelled`, using no retry) or ends a waiting one unrun. It
//! never writes the jobs file — a rewrite could lose a line someone appends
//! at the same moment (`echo … >> jobs.txt`, over ssh) — but journals a
//! `cancel` event: through the running scheduler, or under the log
//! directory's lock when none runs ([`super::request`]). `gpusched retry`
//! undoes it as for any finished job. (A `cancel` flag written into the
//! line by hand works as before.)

use super::index::{JobIndex, LastWord, find_jobs_file, specs_of};
use super::request::{Delivery, JobRequest, PICKUP_WAIT, deliver, pid_text};
use crate::cli::JobSelection;

/// Cancels the jobs `args.jobs` name.
///
/// Errors: [`Error::Usage`] for an unknown job or a log directory that does
/// not exist; I/O errors on the log directory.
pub fn run(args: &JobSelection) -> anyhow::Result<i32> {
    run_to(args, &mut std::io::stdout(), &mut std::io::stderr())
}

/// One job a reference named: its key, how it is called in messages
/// (`7`, `on line 3`), whether it runs, whether `gpusched hold` holds it,
/// and its command when no scheduler has read its line yet.
pub(super) struct Target {
    pub(super) key: String,
    pub(super) called: String,
    pub(super) running: bool,
    pub(super) held: bool,
    pub(super) unseen: Option<String>,
}

/// [`run`], saying what it did on `out` and `err` (the terminal's stdout
/// and stderr, or an MCP tool's result: the same words either way). Every
/// reference is resolved before anything is cancelled: one unknown job
/// cancels none.
///
/// Errors: as [`run`].
pub fn run_to(
    args: &JobSelection,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> anyhow::Result<i32> {
    let targets = select(args, "cancel", out)?;
    if targets.is_empty() {
        return Ok(0);
    }
    let deliveries = deliver_to(&args.log_dir, &targets, JobRequest::Cancel)?;
    let mut code = 0;
    for (target, delivery) in targets.iter().zip(deliveries) {
        let (no, running) = (&target.called, target.running);
        match delivery {
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
                pid_text(p),
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
                    pid_text(p),
                    no,
                    PICKUP_WAIT.as_secs()
                )?;
                code = 1;
            }
        }
    }
    Ok(code)
}

/// Asks for `request` of each of `targets` ([`deliver`]); a line no
/// scheduler has read yet is journaled `seen` first. Returns what became
/// of each, in order.
///
/// Errors: as [`deliver`].
pub(super) fn deliver_to(
    log_dir: &std::path::Path,
    targets: &[Target],
    request: fn(String) -> JobRequest,
) -> anyhow::Result<Vec<Delivery>> {
    let unseen: Vec<(&str, &str)> = targets
        .iter()
        .filter_map(|t| Some((t.key.as_str(), t.unseen.as_deref()?)))
        .collect();
    let requests: Vec<JobRequest> = targets.iter().map(|t| request(t.key.clone())).collect();
    deliver(log_dir, &requests, &unseen)
}

/// Every job `args` names, each once, in the order named: the jobs file is
/// `--file`, else the one the log directory's scheduler runs (or
/// `./jobs.txt`); a job already ended is said on `out` and left out
/// ([`resolve`]). Shared by `cancel`, `hold` and `release`.
///
/// Errors: [`Error::Usage`] when the log directory does not exist or a
/// reference names no job (nothing is changed then); the journal cannot
/// be read.
pub(super) fn select(
    args: &JobSelection,
    verb: &str,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<Vec<Target>> {
    super::request::require_log_dir(&args.log_dir)?;
    let index = JobIndex::read(&args.log_dir)?;
    let specs = match &args.file {
        Some(file) => specs_of(file),
        None => find_jobs_file(&args.log_dir)
            .map(|f| specs_of(&f))
            .unwrap_or_default(),
    };
    let mut targets: Vec<Target> = Vec::new();
    for reference in &args.jobs {
        for target in resolve(reference, &index, &specs, verb, out)? {
            if !targets.iter().any(|t| t.key == target.key) {
                targets.push(target);
            }
        }
    }
    Ok(targets)
}

/// The jobs `reference` names: a job number, `name=`, key (or unique
/// prefix), `group=NAME` (every line of that group not yet ended), or a
/// glob of names (`'lr0.1-*'`: every line whose `name=` matches, not yet
/// ended). A job that already ended is said on `out` (nothing to `verb`)
/// and left out.
///
/// Errors: [`Error::Usage`] when it names no job.
fn resolve(
    reference: &str,
    index: &JobIndex,
    specs: &[crate::jobspec::JobSpec],
    verb: &str,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<Vec<Target>> {
    let many: Option<(Vec<&crate::jobspec::JobSpec>, String)> =
        if let Some(group) = reference.strip_prefix("group=") {
            let members = specs.iter().filter(|s| s.group() == Some(group)).collect();
            Some((members, format!("group={group}")))
        } else if reference.contains(['*', '?']) {
            let pattern = name_glob(reference)?;
            let members = specs
                .iter()
                .filter(|s| s.name().is_some_and(|n| pattern.is_match(n)))
                .collect();
            Some((members, format!("name {reference}")))
        } else {
            None
        };
    if let Some((members, what)) = many {
        if members.is_empty() {
            return Err(
                crate::error::Error::Usage(format!("no line of the jobs file has {what}")).into(),
            );
        }
        let mut targets = Vec::new();
        for spec in members {
            match index.jobs.iter().find(|j| j.key == spec.key) {
                Some(job) if matches!(job.last, LastWord::Done { .. }) => {}
                Some(job) => targets.push(Target {
                    key: job.key.clone(),
                    called: job.no.to_string(),
                    running: job.last == LastWord::Started,
                    held: job.held,
                    unseen: None,
                }),
                None => targets.push(Target {
                    key: spec.key.to_string(),
                    called: format!("on line {}", spec.line),
                    running: false,
                    held: false,
                    unseen: Some(spec.command.to_string()),
                }),
            }
        }
        if targets.is_empty() {
            writeln!(
                out,
                "every job with {what} already ended; nothing to {verb}"
            )?;
        }
        return Ok(targets);
    }
    match index.resolve_in(reference, specs) {
        Ok(job) => {
            if let LastWord::Done { status, .. } = &job.last {
                writeln!(
                    out,
                    "job {} already ended ({status}); nothing to {verb} (`gpusched retry {}` runs it again)",
                    job.no, job.no
                )?;
                return Ok(Vec::new());
            }
            Ok(vec![Target {
                key: job.key.clone(),
                called: job.no.to_string(),
                running: job.last == LastWord::Started,
                held: job.held,
                unseen: None,
            }])
        }
        // A line no scheduler has read yet, by its name or key prefix.
        Err(e) => match unseen_line(reference, specs) {
            Some(spec) => Ok(vec![Target {
                key: spec.key.to_string(),
                called: format!("on line {}", spec.line),
                running: false,
                held: false,
                unseen: Some(spec.command.to_string()),
            }]),
            None => Err(e.into()),
        },
    }
}

/// A `name=` glob (`lr0.1-*`: `*` any run of characters, `?` one) as an
/// anchored pattern.
///
/// Errors: [`Error::Usage`] for a glob that makes no pattern.
fn name_glob(glob: &str) -> Result<regex_lite::Regex, crate::error::Error> {
    let pattern: String = glob
        .split('*')
        .map(|part| {
            part.split('?')
                .map(regex_lite::escape)
                .collect::<Vec<_>>()
                .join(".")
        })
        .collect::<Vec<_>>()
        .join(".*");
    regex_lite::Regex::new(&format!("^{pattern}$"))
        .map_err(|e| crate::error::Error::Usage(format!("bad name glob '{glob}': {e}")))
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
