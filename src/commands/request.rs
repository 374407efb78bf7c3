//! How verbs change a job's state without writing the user's jobs file
//! (docs/BEHAVIOUR.md "Cancel", "Retry"): with a scheduler running on the
//! log directory, the change is a request file in `<log_dir>/requests/`
//! that the scheduler checks, journals and removes; with none, the command
//! takes the log directory's lock — the one a scheduler holds for its whole
//! life — and journals the event itself, so the two can never race.

#![expect(
    clippy::disallowed_methods,
    reason = "requests/ in a log directory of the caller's own (refuse_foreign, or root acting as its owner)"
)]

use super::index::JournalTail;
use crate::error::Error;
use crate::journal::Journal;
use crate::lockfile::{self, SchedulerLock};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use crate::control::{JobRequest, ROOT_MARK, requests_dir};

/// How long to wait for a running scheduler to take a request.
pub const PICKUP_WAIT: Duration = Duration::from_secs(10);

/// Refuses a log directory that does not exist: a verb that changes a
/// scheduler's state never creates one (a typo in `--log-dir` must not
/// report success).
///
/// Errors: [`Error::Usage`] naming the directory.
pub fn require_log_dir(log_dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::MetadataExt;
    let Some(meta) = std::fs::metadata(log_dir).ok().filter(|m| m.is_dir()) else {
        return Err(Error::Usage(format!(
            "no log directory {}: is --log-dir right? (nothing was changed; to prepare a new one, `mkdir` it first)",
            log_dir.display()
        )));
    };
    // Only its owner and root may change a scheduler's queue.
    let me = nix::unistd::geteuid().as_raw();
    if me != 0 && meta.uid() != me {
        let owner = crate::files::user_name(meta.uid());
        return Err(Error::Usage(format!(
            "the jobs of {} belong to {owner}: only {owner} or root may change them (nothing was changed)",
            log_dir.display()
        )));
    }
    Ok(())
}

/// Writes a request file named `<stem>.json` into `dir` (a log
/// directory's `requests/`) for the scheduler there, and returns its path.
/// A process that root started and that now acts as the directory's owner
/// (docs/SECURITY.md "Root's verbs") names it `<stem>.by-root.json`, so
/// the scheduler can say who asked; the file is its owner's either way.
///
/// Errors: [`Error::Io`] when the file cannot be written.
pub fn write_request(dir: &Path, stem: &str, bytes: &[u8]) -> Result<PathBuf, Error> {
    let by = if crate::trust::acting_for_root() {
        ROOT_MARK
    } else {
        ""
    };
    let path = dir.join(format!("{stem}{by}.json"));
    crate::files::write_atomic(&path, bytes)
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    Ok(path)
}

/// A scheduler's pid as the verbs say it: `?` when it is not known.
pub fn pid_text(pid: Option<u32>) -> String {
    pid.map_or("?".to_string(), |p| p.to_string())
}

/// What became of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// No scheduler runs: the command journaled it under the lock.
    Journaled,
    /// The running scheduler (this pid, if known) journaled it.
    Taken(Option<u32>),
    /// The running scheduler did not journal it within [`PICKUP_WAIT`]
    /// (it may still; the request file stays for it).
    NotTaken(Option<u32>),
}

/// Journals each request itself when no scheduler runs on `log_dir`, else
/// leaves them for the running scheduler and waits (up to [`PICKUP_WAIT`])
/// until it journaled each. Returns what became of each, in order.
/// `unseen` gives the command of a job whose line no scheduler has read
/// yet (key, command): it is journaled `seen` first, with the next number.
///
/// Errors: [`Error::Usage`] for a log directory that does not exist (it is
/// never created here); I/O errors on the journal or the requests.
pub fn deliver(
    log_dir: &Path,
    requests: &[JobRequest],
    unseen: &[(&str, &str)],
) -> anyhow::Result<Vec<Delivery>> {
    require_log_dir(log_dir)?;
    let pid = match SchedulerLock::acquire(log_dir) {
        Ok(lock) => {
            let (mut journal, _) = Journal::open(&log_dir.join("journal.jsonl"))?;
            for request in requests {
                if journal.state(request.key()).is_none()
                    && let Some((key, command)) = unseen.iter().find(|(k, _)| *k == request.key())
                {
                    let no = journal.next_no();
                    journal.append_seen(crate::clock::now_ts(), &[(key, no, command)])?;
                }
                journal.append(request.key(), request.event())?;
            }
            drop(lock);
            return Ok(vec![Delivery::Journaled; requests.len()]);
        }
        Err(Error::AlreadyRunning(_)) => lockfile::holder(log_dir),
        Err(e) => return Err(e.into()),
    };
    let dir = requests_dir(log_dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    let mut tail = JournalTail::new(log_dir);
    for (i, request) in requests.iter().enumerate() {
        let stem = format!(
            "{}-{}-{}-{i}",
            request.verb(),
            request.key(),
            std::process::id()
        );
        write_request(&dir, &stem, &serde_json::to_vec(request)?)?;
    }
    let mut taken = vec![false; requests.len()];
    let deadline = Instant::now() + PICKUP_WAIT;
    while taken.iter().any(|t| !t) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        let news = tail.records();
        for (request, taken) in requests.iter().zip(&mut taken) {
            *taken |= news
                .iter()
                .any(|r| r.key == request.key() && r.event == request.event());
        }
    }
    Ok(taken
        .into_iter()
        .map(|t| {
            if t {
                Delivery::Taken(pid)
            } else {
                Delivery::NotTaken(pid)
            }
        })
        .collect())
}
