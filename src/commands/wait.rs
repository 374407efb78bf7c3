//! `gpusched wait [JOB…] [--timeout SEC]` (docs/BEHAVIOUR.md "Being
//! told"): blocks until the jobs have ended — by default every job of the
//! jobs file — and exits 0 when all ended `ok`, 1 otherwise, 124 when
//! `--timeout` passed first. It sleeps on a watch of the log directory
//! (the journal is appended to when a job ends), with a slow look every
//! few seconds in case the watch misses something; it never polls fast.

use super::index::{IndexedJob, JobIndex, JournalTail, LastWord, find_jobs_file, specs_of};
use crate::cli::WaitArgs;
use crate::error::Error;
use crate::journal::Event;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The exit status after `--timeout` (as `timeout(1)`).
pub const TIMED_OUT: i32 = 124;

/// How often the journal is read without a wake.
const SLOW_LOOK: Duration = Duration::from_secs(2);

/// Waits for the jobs to end.
///
/// Errors ([`Error::Usage`]): no log directory, a job that does not exist,
/// no jobs file to take the jobs from.
pub fn run(args: &WaitArgs) -> anyhow::Result<i32> {
    super::request::require_log_dir(&args.log_dir)?;
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    // Set up before the first read, so no append is missed in between.
    let _watch = watch(&args.log_dir, tx);
    let mut tail = JournalTail::new(&args.log_dir);
    let index = JobIndex::read(&args.log_dir)?;
    let file = match &args.file {
        Some(file) => Some(file.clone()),
        None => find_jobs_file(&args.log_dir).ok(),
    };
    let specs = file.as_deref().map(specs_of).unwrap_or_default();
    // Key → the job as the journal says (`None` until a scheduler saw it).
    let mut waited: BTreeMap<String, Option<IndexedJob>> = BTreeMap::new();
    if args.jobs.is_empty() {
        if specs.is_empty() {
            return Err(Error::Usage(format!(
                "no jobs to wait for: {} has none (name jobs, or give --file)",
                file.map_or("the jobs file".into(), |f| f.display().to_string())
            ))
            .into());
        }
        for spec in &specs {
            let known = index.jobs.iter().find(|j| j.key == spec.key).cloned();
            waited.insert(spec.key.to_string(), known);
        }
    } else {
        for reference in &args.jobs {
            let job = index.resolve_in(reference, &specs)?;
            waited.insert(job.key.clone(), Some(job.clone()));
        }
    }
    let deadline = args
        .timeout
        .map(|t| Instant::now() + Duration::from_secs_f64(t));
    let mut warned = false;
    loop {
        for record in tail.records() {
            let Some(slot) = waited.get_mut(&record.key) else {
                continue;
            };
            match (slot, &record.event) {
                (slot @ None, Event::Seen { no, command }) => {
                    *slot = Some(IndexedJob::seen(*no, &record.key, command));
                }
                (Some(job), event) => job.apply(event, record.ts),
                _ => {}
            }
        }
        let left: Vec<String> = waited
            .iter()
            .filter(|(_, job)| job.as_ref().and_then(|j| final_status(&j.last)).is_none())
            .map(|(key, job)| {
                job.as_ref()
                    .map_or_else(|| key.clone(), |j| j.no.to_string())
            })
            .collect();
        if left.is_empty() {
            return Ok(report(&waited));
        }
        if !warned && crate::lockfile::holder(&args.log_dir).is_none() {
            warned = true;
            eprintln!(
                "gpusched: no scheduler is running with log directory {}; waiting for one to run {} {}",
                args.log_dir.display(),
                crate::words::noun_for(left.len(), "job"),
                left.join(", ")
            );
        }
        let now = Instant::now();
        let mut sleep = SLOW_LOOK;
        if let Some(deadline) = deadline {
            if now >= deadline {
                eprintln!(
                    "gpusched: gave up after {} s; still waiting for {} {}",
                    args.timeout.unwrap_or_default(),
                    crate::words::noun_for(left.len(), "job"),
                    left.join(", ")
                );
                return Ok(TIMED_OUT);
            }
            sleep = sleep.min(deadline - now);
        }
        let _ = rx.recv_timeout(sleep);
        while rx.try_recv().is_ok() {}
    }
}

/// The final status a journal index gives, if the job ended.
fn final_status(last: &LastWord) -> Option<String> {
    match last {
        LastWord::Done { status, .. } => Some(status.clone()),
        _ => None,
    }
}

/// Says how the jobs ended; 0 when every one ended ok, else 1.
fn report(waited: &BTreeMap<String, Option<IndexedJob>>) -> i32 {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for job in waited.values() {
        let status = job.as_ref().and_then(|j| final_status(&j.last));
        *counts
            .entry(status.unwrap_or_else(|| "?".into()))
            .or_default() += 1;
    }
    let summary: Vec<String> = counts
        .iter()
        .map(|(status, n)| format!("{n} {status}"))
        .collect();
    println!(
        "{} ended: {}",
        crate::words::count(waited.len(), "job"),
        summary.join(", ")
    );
    i32::from(counts.keys().any(|s| s != "ok"))
}

/// A watch of the log directory that sends on `tx` whenever a file in it
/// changes; `None` when no watch can be set up (the slow look remains).
fn watch(
    log_dir: &std::path::Path,
    tx: std::sync::mpsc::Sender<()>,
) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Only changes of the journal matter (status.json is rewritten
        // every second); opening and reading it are events too, and our
        // own reads would wake us at once, for ever (a core spent).
        let journal = |e: &notify::Event| {
            !matches!(e.kind, notify::EventKind::Access(_))
                && e.paths
                    .iter()
                    .any(|p| p.file_name() == Some(std::ffi::OsStr::new("journal.jsonl")))
        };
        if event.as_ref().map_or(true, journal) {
            let _ = tx.send(());
        }
    })
    .ok()?;
    watcher
        .watch(log_dir, notify::RecursiveMode::NonRecursive)
        .ok()?;
    Some(watcher)
}
