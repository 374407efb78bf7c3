//! What a signal to the scheduler asks for (docs/BEHAVIOUR.md
//! "Stopping"), decided from the signal, whether a stop is already under
//! way and the time: pure, so every signal at every moment is a table
//! test. The loop's side (`scheduler/phases/stopping.rs`) says it and
//! applies it through the launcher.

use std::time::{Duration, Instant};

/// How long after the grace a stopping scheduler waits for the last
/// reports before it exits anyway.
pub const STOP_MARGIN: Duration = Duration::from_secs(1);

/// How long after a second Ctrl-C the scheduler waits for the reports of
/// the jobs it just killed before it exits anyway.
pub const HURRIED_STOP: Duration = Duration::from_secs(1);

/// The answer to one signal.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGHUP: the terminal went away; keep scheduling and say so.
    KeepScheduling,
    /// SIGUSR1 (`gpusched stop --keep-jobs`): exit at once and leave the
    /// running jobs to their supervisor.
    LeaveJobs,
    /// The first SIGINT or SIGTERM: SIGTERM every job of ours now, SIGKILL
    /// after the grace, and exit by `give_up_at` whatever is in flight.
    Begin {
        /// `now` + the kill grace + [`STOP_MARGIN`].
        give_up_at: Instant,
    },
    /// SIGINT or SIGTERM again while stopping: kill at once and exit by
    /// `give_up_at`.
    Hurry {
        /// The earlier of the stop's deadline and `now` + [`HURRIED_STOP`].
        give_up_at: Instant,
    },
    /// SIGUSR2, the warning Slurm sends before an allocation's end
    /// (`sbatch --signal=B:USR2@120`; docs/BEHAVIOUR.md "Inside a Slurm
    /// allocation"): start nothing more, and stop the jobs in time for
    /// the next allocation.
    AllocationEnding,
    /// Nothing to do: SIGUSR1 or SIGUSR2 while a stop is already under
    /// way.
    Nothing,
}

/// The answer to `signal` (a libc signal number) at `now`; `stopping` is
/// the deadline of the stop under way, if one is; `grace` the SIGTERM →
/// SIGKILL grace. Any signal but SIGHUP, SIGUSR1 and SIGUSR2 is taken as a request
/// to stop (the loop only forwards SIGINT and SIGTERM besides them).
pub fn on_signal(signal: i32, stopping: Option<Instant>, now: Instant, grace: Duration) -> Stop {
    match (signal, stopping) {
        (libc::SIGHUP, _) => Stop::KeepScheduling,
        (libc::SIGUSR1, None) => Stop::LeaveJobs,
        (libc::SIGUSR1, Some(_)) => Stop::Nothing,
        (libc::SIGUSR2, None) => Stop::AllocationEnding,
        (libc::SIGUSR2, Some(_)) => Stop::Nothing,
        (_, None) => Stop::Begin {
            give_up_at: now + grace + STOP_MARGIN,
        },
        (_, Some(give_up_at)) => Stop::Hurry {
            give_up_at: give_up_at.min(now + HURRIED_STOP),
        },
    }
}

/// How people name `signal` in the stop's messages.
pub fn signal_name(signal: i32) -> &'static str {
    if signal == libc::SIGINT {
        "Ctrl-C"
    } else {
        "SIGTERM"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(10);

    #[test]
    fn every_signal_while_scheduling_and_while_stopping() {
        let now = Instant::now();
        let later = now + Duration::from_secs(30);
        let soon = now + Duration::from_millis(300);
        let begin = Stop::Begin {
            give_up_at: now + GRACE + STOP_MARGIN,
        };
        let cases: [(i32, Option<Instant>, Stop); 10] = [
            (libc::SIGHUP, None, Stop::KeepScheduling),
            (libc::SIGHUP, Some(later), Stop::KeepScheduling),
            (libc::SIGUSR1, None, Stop::LeaveJobs),
            (libc::SIGUSR1, Some(later), Stop::Nothing),
            (libc::SIGUSR2, None, Stop::AllocationEnding),
            (libc::SIGUSR2, Some(later), Stop::Nothing),
            (libc::SIGINT, None, begin),
            (libc::SIGTERM, None, begin),
            // A second Ctrl-C: a second at most, never later than before.
            (
                libc::SIGINT,
                Some(later),
                Stop::Hurry {
                    give_up_at: now + HURRIED_STOP,
                },
            ),
            (libc::SIGTERM, Some(soon), Stop::Hurry { give_up_at: soon }),
        ];
        for (signal, stopping, want) in cases {
            assert_eq!(
                on_signal(signal, stopping, now, GRACE),
                want,
                "signal {signal} with {stopping:?}"
            );
        }
    }

    #[test]
    fn a_stop_never_gives_up_before_the_grace_ends() {
        let now = Instant::now();
        for grace_s in [0, 1, 10, 3600] {
            let grace = Duration::from_secs(grace_s);
            let Stop::Begin { give_up_at } = on_signal(libc::SIGTERM, None, now, grace) else {
                panic!("a first SIGTERM begins a stop");
            };
            assert!(give_up_at >= now + grace + STOP_MARGIN);
        }
    }

    #[test]
    fn signals_are_named_as_people_know_them() {
        assert_eq!(signal_name(libc::SIGINT), "Ctrl-C");
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
    }
}
