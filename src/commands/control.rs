//! `gpusched pause`, `resume`, `drain GPU…`, `undrain GPU…` (docs/BEHAVIOUR.md "Queue policy"):
//! with a scheduler running, the change goes through
//! `<log_dir>/requests/` and the command waits (up to 10 s) until the
//! scheduler has it in force; with none, the command takes the log
//! directory's lock and records it in `<log_dir>/control.json` for the
//! next start. Running jobs are never touched.

#![expect(
    clippy::disallowed_methods,
    reason = "control.json in a log directory of the caller's own (refuse_foreign, check_own_dir)"
)]

use super::request::requests_dir;
use crate::control::{Control, ControlChange, control_path};
use crate::error::Error;
use crate::lockfile::{self, SchedulerLock};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long to wait for a running scheduler to take the change.
const PICKUP_WAIT: Duration = Duration::from_secs(10);

/// Applies `change` to the queue of the scheduler with `log_dir`.
///
/// Errors: [`Error::Usage`] for a log directory that does not exist (a
/// typo must not create one and report success; nothing is created);
/// the log directory cannot be written.
pub fn run(log_dir: &Path, change: ControlChange) -> anyhow::Result<i32> {
    super::request::require_log_dir(log_dir)?;
    match SchedulerLock::acquire(log_dir) {
        Ok(lock) => {
            let (mut control, problem) = Control::load(log_dir);
            if let Some(problem) = problem {
                eprintln!("gpusched: {problem}");
            }
            let said = control.apply(&change);
            control.save(log_dir).map_err(|e| {
                Error::io(
                    format!("cannot write {}", control_path(log_dir).display()),
                    e,
                )
            })?;
            drop(lock);
            println!("{said} — no scheduler is running; recorded for the next start");
            Ok(0)
        }
        Err(Error::AlreadyRunning(_)) => ask_scheduler(log_dir, &change),
        Err(e) => Err(e.into()),
    }
}

/// Leaves the change for the running scheduler and waits until it holds.
fn ask_scheduler(log_dir: &Path, change: &ControlChange) -> anyhow::Result<i32> {
    let pid = super::request::pid_text(lockfile::holder(log_dir));
    let dir = requests_dir(log_dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    let stem = format!(
        "control-{}-{}",
        std::process::id(),
        crate::clock::now_ts().to_bits()
    );
    let path = super::request::write_request(&dir, &stem, &serde_json::to_vec(change)?)?;
    let deadline = Instant::now() + PICKUP_WAIT;
    while Instant::now() < deadline {
        if !path.exists() && Control::load(log_dir).0.shows(change) {
            let said = Control::default().apply(change);
            println!("{said} (scheduler pid {pid})");
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "gpusched: asked the scheduler (pid {pid}) to apply this; it has not done so within {} s (see its output)",
        PICKUP_WAIT.as_secs()
    );
    Ok(1)
}
