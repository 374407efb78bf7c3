//! `gpusched hold JOB…` and `gpusched release JOB…` (docs/BEHAVIOUR.md
//! "Queue policy"): keep waiting jobs from starting, and let them go
//! again. Like `cancel`, they never write the jobs file: the `held` or
//! `released` event is journaled through the running scheduler, or under
//! the log directory's lock when none runs ([`super::request`]), so a
//! restart keeps it.

use super::cancel::{deliver_to, select};
use super::request::{Delivery, JobRequest, PICKUP_WAIT, pid_text};
use crate::cli::JobSelection;

/// Holds (`hold`) or releases the jobs `args.jobs` name.
///
/// Errors: [`crate::error::Error::Usage`] for an unknown job or a log
/// directory that does not exist (nothing is changed then); I/O errors on
/// the log directory.
pub fn run(args: &JobSelection, hold: bool) -> anyhow::Result<i32> {
    run_to(args, hold, &mut std::io::stdout(), &mut std::io::stderr())
}

/// [`run`], saying what it did on `out` and `err`. Every reference is
/// resolved before anything changes: one unknown job changes none. A job
/// that runs cannot be held; one already held (or not held, for
/// `release`) is said and left as it is.
///
/// Errors: as [`run`].
pub fn run_to(
    args: &JobSelection,
    hold: bool,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> anyhow::Result<i32> {
    let verb = if hold { "hold" } else { "release" };
    let mut targets = select(args, verb, out)?;
    let mut code = 0;
    targets.retain(|t| {
        let why = if t.running {
            Some("it is running; only a waiting job can be held")
        } else if t.held == hold {
            Some(if hold {
                "it is held already"
            } else {
                "it is not held"
            })
        } else {
            None
        };
        if let Some(why) = why {
            let _ = writeln!(err, "gpusched: job {}: {why}; left as it is", t.called);
            code = code.max(i32::from(t.running));
        }
        why.is_none()
    });
    if targets.is_empty() {
        return Ok(code);
    }
    let request = if hold {
        JobRequest::Hold
    } else {
        JobRequest::Release
    };
    let deliveries = deliver_to(&args.log_dir, &targets, request)?;
    let done = if hold {
        "held: it will not start until `gpusched release`"
    } else {
        "released: it starts when it fits"
    };
    for (target, delivery) in targets.iter().zip(deliveries) {
        let no = &target.called;
        match delivery {
            Delivery::Journaled => writeln!(out, "job {no} {done} (no scheduler runs now)")?,
            Delivery::Taken(pid) => {
                writeln!(out, "job {no} {done} (scheduler pid {})", pid_text(pid))?
            }
            Delivery::NotTaken(pid) => {
                writeln!(
                    err,
                    "gpusched: asked the scheduler (pid {}) to {verb} job {no}; it has not done so within {} s (see its output)",
                    pid_text(pid),
                    PICKUP_WAIT.as_secs()
                )?;
                code = 1;
            }
        }
    }
    Ok(code)
}
