//! `--on-finish CMD` (docs/BEHAVIOUR.md "Being told"): a command run for
//! every attempt that ends. CMD is split once, at start, into words as a
//! shell would (quotes respected, nothing expanded) and run without a
//! shell; what it learns of the job comes only through its environment
//! ([`super::JobFacts::environment`]), so no text of a job — its command,
//! its name — is ever read as shell code by us. Hooks run on a few
//! threads of their own, at most [`HOOK_LIMIT`] each, with their output
//! appended to `<log_dir>/hooks.log`.

use super::JobFacts;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest a hook may run before its process group is killed.
pub const HOOK_LIMIT: Duration = Duration::from_secs(30);

/// Hooks that may run at once.
const RUNNERS: usize = 4;

/// The hook runners.
pub struct Hooks {
    tx: Option<Sender<JobFacts>>,
    /// Hooks queued or running.
    busy: Arc<Mutex<usize>>,
    /// What the runners said, for the loop's reporter.
    said: crate::console::SaidLater,
}

/// Splits `--on-finish`'s text into words as a shell would, without
/// expanding anything.
///
/// Errors: unbalanced quotes, or no word at all.
pub fn split(command: &str) -> Result<Vec<String>, String> {
    match shlex::split(command) {
        Some(words) if !words.is_empty() => Ok(words),
        Some(_) => Err("--on-finish needs a command".into()),
        None => Err(format!(
            "--on-finish {command:?}: unbalanced quotes (it is split into words once, like a shell would, and run without a shell)"
        )),
    }
}

impl Hooks {
    /// Starts the runners for `argv`, logging to `<log_dir>/hooks.log`.
    ///
    /// Errors: a thread cannot be started.
    pub fn start(argv: Vec<String>, log_dir: &Path) -> anyhow::Result<Hooks> {
        let (tx, rx) = std::sync::mpsc::channel::<JobFacts>();
        let rx = Arc::new(Mutex::new(rx));
        let busy = Arc::new(Mutex::new(0usize));
        let log = log_dir.join("hooks.log");
        let said = crate::console::SaidLater::default();
        for n in 0..RUNNERS {
            let (rx, busy, argv, log) = (rx.clone(), busy.clone(), argv.clone(), log.clone());
            let said = said.clone();
            std::thread::Builder::new()
                .name(format!("hook-{n}"))
                .spawn(move || {
                    loop {
                        let next = rx.lock().map(|rx| rx.recv());
                        let Ok(Ok(job)) = next else {
                            break;
                        };
                        run_one(&argv, &job, &log, &said);
                        if let Ok(mut busy) = busy.lock() {
                            *busy = busy.saturating_sub(1);
                        }
                    }
                })?;
        }
        Ok(Hooks {
            tx: Some(tx),
            busy,
            said,
        })
    }

    /// Queues the hook for one ended attempt.
    pub fn run(&self, job: JobFacts) {
        if let Some(tx) = &self.tx
            && let Ok(mut busy) = self.busy.lock()
            && tx.send(job).is_ok()
        {
            *busy += 1;
        }
    }

    /// What the runners said since the last call, for the loop's
    /// reporter.
    pub fn take_said(&self) -> Vec<crate::console::Said> {
        self.said.take()
    }

    /// Waits until no hook is queued or running, or `deadline`.
    pub fn flush(&self, deadline: Instant) {
        while self.busy.lock().map_or(0, |b| *b) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Hooks {
    fn drop(&mut self) {
        self.tx = None;
    }
}

/// Runs the hook for `job`: its own process group, stdin from
/// `/dev/null`, output appended to `log` after a header line; killed
/// (the whole group) past [`HOOK_LIMIT`].
fn run_one(argv: &[String], job: &JobFacts, log: &Path, said: &crate::console::SaidLater) {
    let header = format!(
        "==== gpusched: hook for job {} attempt {} ({}) at {}\n",
        job.no,
        job.attempt,
        job.status,
        crate::console::date_time(crate::clock::now_ts())
    );
    let Ok(mut out) = crate::files::open_append(log) else {
        said.warn(format!("--on-finish: cannot open {}", log.display()));
        return;
    };
    let _ = out.write_all(header.as_bytes());
    let (Ok(stdout), Ok(stderr)) = (out.try_clone(), out.try_clone()) else {
        return;
    };
    let started = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .envs(job.environment())
        .stdin(std::process::Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .spawn();
    let mut child = match started {
        Ok(child) => child,
        Err(e) => {
            let _ = writeln!(out, "cannot start {:?}: {e}", argv[0]);
            return;
        }
    };
    let deadline = Instant::now() + HOOK_LIMIT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                if !status.success() {
                    let _ = writeln!(out, "hook ended with {status}");
                }
                return;
            }
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => break,
        }
    }
    let group = nix::unistd::Pid::from_raw(-(child.id() as i32));
    let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
    let _ = writeln!(
        out,
        "hook killed after {} s (the limit)",
        HOOK_LIMIT.as_secs()
    );
}
