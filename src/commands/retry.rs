//! `gpusched retry JOB…` (docs/BEHAVIOUR.md "Everyday verbs"): puts finished jobs (any terminal
//! status) back in the queue as a new attempt with the same key. Refused,
//! with the fix, while the job's line carries `cancel` or is gone from the
//! jobs file. With a scheduler running, the request goes through
//! `<log_dir>/requests/` and the scheduler journals it; with none, the
//! command takes the log directory's lock and journals it itself.

use super::index::{JobIndex, LastWord, find_jobs_file};
use super::request::{Delivery, JobRequest, PICKUP_WAIT, deliver, pid_text};
use crate::cli::JobSelection;
use crate::error::Error;
use crate::jobspec;

/// Queues the named finished jobs again.
///
/// Errors: [`Error::Usage`] for an unknown, unfinished, cancelled or
/// deleted job (nothing is queued then); I/O errors on the log directory.
pub fn run(args: &JobSelection) -> anyhow::Result<i32> {
    run_to(args, &mut std::io::stdout(), &mut std::io::stderr())
}

/// [`run`], saying what it did on `out` and `err` (the terminal's stdout
/// and stderr, or an MCP tool's result: the same words either way).
///
/// Errors: as [`run`].
pub fn run_to(
    args: &JobSelection,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> anyhow::Result<i32> {
    let index = JobIndex::read(&args.log_dir)?;
    let file = match &args.file {
        Some(file) => file.clone(),
        None => find_jobs_file(&args.log_dir)?,
    };
    let (bytes, _) = crate::trust::read_untrusted(&file, crate::trust::MAX_JOBS_FILE_BYTES)
        .map_err(|e| Error::JobsFile(format!("cannot read jobs file {}: {e}", file.display())))?;
    let specs = jobspec::decode(bytes)
        .and_then(|text| jobspec::parse_jobs(&text))
        .map_err(|e| Error::JobsFile(format!("{}: {e} — fix it first", file.display())))?;
    let mut chosen = Vec::new();
    for reference in &args.jobs {
        let job = index.resolve_in(reference, &specs)?;
        if !matches!(job.last, LastWord::Done { .. }) {
            return Err(Error::Usage(format!(
                "job {} has not finished (it is {}); only finished jobs can be retried",
                job.no,
                if job.last == LastWord::Started {
                    "running"
                } else {
                    "waiting"
                }
            ))
            .into());
        }
        let spec = specs
            .iter()
            .find(|s| {
                s.key == job.key || s.legacy_key().map(String::as_str) == Some(job.key.as_str())
            })
            .ok_or_else(|| {
                Error::Usage(format!(
                    "job {}'s line is no longer in {}: add it back (`{}`), then retry",
                    job.no,
                    file.display(),
                    job.command
                ))
            })?;
        if spec.cancel {
            return Err(Error::Usage(format!(
                "job {}'s line (line {} of {}) carries `cancel`: remove the flag from the line, then retry",
                job.no,
                spec.line,
                file.display()
            ))
            .into());
        }
        chosen.push(job);
    }
    let requests: Vec<JobRequest> = chosen
        .iter()
        .map(|job| JobRequest::Retry(job.key.clone()))
        .collect();
    let mut code = 0;
    for (job, delivery) in chosen.iter().zip(deliver(&args.log_dir, &requests, &[])?) {
        match delivery {
            Delivery::Journaled => writeln!(
                out,
                "job {} queued again; it runs as attempt {} when a scheduler starts on {}",
                job.no,
                job.attempts.len() + 1,
                file.display()
            )?,
            Delivery::Taken(pid) => writeln!(
                out,
                "job {} queued again (scheduler pid {})",
                job.no,
                pid_text(pid)
            )?,
            Delivery::NotTaken(pid) => {
                writeln!(
                    err,
                    "gpusched: asked the scheduler (pid {}) to retry job {}; it has not done so within {} s (see its output)",
                    pid_text(pid),
                    job.no,
                    PICKUP_WAIT.as_secs()
                )?;
                code = 1;
            }
        }
    }
    Ok(code)
}
