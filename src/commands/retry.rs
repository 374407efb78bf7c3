//! `gpusched retry JOB…` (SPEC §13): puts finished jobs (any terminal
//! status) back in the queue as a new attempt with the same key. Refused,
//! with the fix, while the job's line carries `cancel` or is gone from the
//! jobs file. With a scheduler running, the request goes through
//! `<log_dir>/requests/` and the scheduler journals it; with none, the
//! command takes the log directory's lock and journals it itself.

use super::index::{JobIndex, JournalTail, LastWord, find_jobs_file};
use crate::cli::RetryArgs;
use crate::error::Error;
use crate::jobspec;
use crate::journal::{Event, Journal};
use crate::lockfile::{self, SchedulerLock};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long to wait for a running scheduler to take the request.
const PICKUP_WAIT: Duration = Duration::from_secs(10);

/// A retry request for a running scheduler.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct RetryRequest {
    /// The job's key.
    pub retry: String,
}

/// The directory where commands leave requests for the scheduler.
pub fn requests_dir(log_dir: &Path) -> PathBuf {
    log_dir.join("requests")
}

/// Queues the named finished jobs again.
///
/// Errors: [`Error::Usage`] for an unknown, unfinished, cancelled or
/// deleted job (nothing is queued then); I/O errors on the log directory.
pub fn run(args: &RetryArgs) -> anyhow::Result<i32> {
    let index = JobIndex::read(&args.log_dir)?;
    let file = match &args.file {
        Some(file) => file.clone(),
        None => find_jobs_file(&args.log_dir)?,
    };
    let bytes = std::fs::read(&file)
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
    let scheduler = match SchedulerLock::acquire(&args.log_dir) {
        Ok(lock) => {
            let (mut journal, _) = Journal::open(&args.log_dir.join("journal.jsonl"))?;
            for job in &chosen {
                journal.append(&job.key, Event::Retry {})?;
                println!(
                    "job {} queued again; it runs as attempt {} when a scheduler starts on {}",
                    job.no,
                    job.attempts.len() + 1,
                    file.display()
                );
            }
            drop(lock);
            return Ok(0);
        }
        Err(Error::AlreadyRunning(_)) => lockfile::holder(&args.log_dir),
        Err(e) => return Err(e.into()),
    };
    let pid = scheduler.map_or("?".to_string(), |p| p.to_string());
    let dir = requests_dir(&args.log_dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    let mut tail = JournalTail::new(&args.log_dir);
    for job in &chosen {
        let request = serde_json::to_vec(&RetryRequest {
            retry: job.key.clone(),
        })?;
        let path = dir.join(format!("retry-{}-{}.json", job.key, std::process::id()));
        crate::files::write_atomic(&path, &request)
            .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    }
    let deadline = Instant::now() + PICKUP_WAIT;
    let mut waiting: Vec<_> = chosen.iter().collect();
    while !waiting.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        let news = tail.records();
        waiting.retain(|job| {
            let taken = news
                .iter()
                .any(|r| r["key"] == job.key.as_str() && r["event"] == "retry");
            if taken {
                println!("job {} queued again (scheduler pid {pid})", job.no);
            }
            !taken
        });
    }
    for job in &waiting {
        eprintln!(
            "gpusched: asked the scheduler (pid {pid}) to retry job {}; it has not done so within {} s (see its output)",
            job.no,
            PICKUP_WAIT.as_secs()
        );
    }
    Ok(if waiting.is_empty() { 0 } else { 1 })
}
