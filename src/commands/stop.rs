//! `gpusched stop` (docs/BEHAVIOUR.md "Board and terminal", "Exactly once"): stops the scheduler running on a log
//! directory as Ctrl-C would — SIGTERM to it, which stops every running
//! job's group (SIGKILL after the grace) and exits — and waits until it
//! has let go of the directory's lock. With `--keep-jobs` (SIGUSR1) it
//! exits at once and leaves its jobs running, for the next start to adopt.

use crate::cli::StopArgs;
use crate::lockfile;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::time::{Duration, Instant};

/// Sends SIGTERM to the scheduler holding `--log-dir`'s lock and waits for
/// it to exit. Exit 0 once it has stopped; 1 when none runs there or it is
/// still running after `--timeout`.
///
/// Errors: the signal cannot be sent (e.g. another user's scheduler).
pub fn run(args: &StopArgs) -> anyhow::Result<i32> {
    let Some(pid) = lockfile::holder(&args.log_dir) else {
        eprintln!(
            "gpusched: no scheduler is running with log directory {} (nobody holds {})",
            args.log_dir.display(),
            lockfile::lock_path(&args.log_dir).display()
        );
        return Ok(1);
    };
    let target = i32::try_from(pid).ok().filter(|&p| p > 1).ok_or_else(|| {
        anyhow::anyhow!(
            "{} names pid {pid}, which is not a scheduler",
            lockfile::lock_path(&args.log_dir).display()
        )
    })?;
    let signal = if args.keep_jobs {
        Signal::SIGUSR1
    } else {
        Signal::SIGTERM
    };
    kill(Pid::from_raw(target), signal)
        .map_err(|e| anyhow::anyhow!("cannot signal gpusched pid {pid}: {e}"))?;
    if args.keep_jobs {
        println!(
            "asked gpusched pid {pid} to exit and leave its running jobs running; the next start on {} adopts them",
            args.log_dir.display()
        );
    } else {
        println!(
            "sent SIGTERM to gpusched pid {pid}; it stops its running jobs (SIGKILL after {} s) and exits",
            crate::process::KILL_GRACE.as_secs()
        );
    }
    let deadline = Instant::now() + Duration::from_secs_f64(args.timeout);
    while lockfile::holder(&args.log_dir).is_some() {
        if Instant::now() >= deadline {
            eprintln!(
                "gpusched: pid {pid} is still running after {} s",
                args.timeout
            );
            return Ok(1);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("gpusched pid {pid} has stopped");
    Ok(0)
}
