//! Phase 0: the signals the last wait recorded (docs/BEHAVIOUR.md
//! "Stopping", "Board and terminal"). The wake source only records them;
//! [`crate::policy::stop::on_signal`] decides; this phase says it and
//! applies it: SIGHUP keeps scheduling, SIGUSR1 leaves the jobs to their
//! supervisor, the first SIGINT/SIGTERM stops every running group through
//! the launcher (SIGTERM, SIGKILL after the grace; a job that already
//! exited keeps its real outcome), the second kills them all at once.

use crate::policy::kill::KillReason;
use crate::policy::stop::{Stop, on_signal, signal_name};
use crate::process;
use crate::scheduler::Scheduler;
use crate::state::Mode;
use std::time::Instant;

impl Scheduler {
    /// Applies the signals recorded since the last tick, in order.
    pub(in crate::scheduler) fn apply_signals(&mut self) {
        self.check_allocation_end(self.now().instant);
        for signal in std::mem::take(&mut self.due.signals) {
            let now = self.now().instant;
            let stopping = match self.core.mode {
                Mode::Stopping { give_up_at, .. } => Some(give_up_at),
                _ => None,
            };
            // Inside an allocation a SIGTERM may come twice, Slurm's and
            // the one the script's shell passes on: the stop under way
            // already fits in KillWait, so the second changes nothing.
            if signal == libc::SIGTERM && stopping.is_some() && self.io.pilot.is_some() {
                continue;
            }
            match on_signal(signal, stopping, now, process::KILL_GRACE) {
                Stop::KeepScheduling => self.report.say(format!(
                    "SIGHUP: the terminal went away; gpusched keeps scheduling (stop it with `gpusched stop --log-dir {}`)",
                    self.cfg.log_dir.display()
                )),
                Stop::LeaveJobs => self.leave_jobs(),
                Stop::Begin { give_up_at } => self.begin_stop(signal_name(signal), give_up_at, now),
                Stop::Hurry { give_up_at } => {
                    self.report.say(format!(
                        "{} again: killing every running job now",
                        signal_name(signal)
                    ));
                    self.core.mode = Mode::Stopping {
                        hurried: true,
                        give_up_at,
                    };
                    for job in self.core.running.values_mut() {
                        if let Some(termination) =
                            job.kill.as_mut().and_then(|k| k.termination.as_mut())
                        {
                            termination.hurry(now);
                        }
                    }
                }
                Stop::AllocationEnding => self.allocation_warning(now),
                Stop::Nothing => {}
            }
        }
    }

    /// SIGUSR1, from `gpusched stop --keep-jobs`: exit at once without
    /// touching the running jobs. Ends already reported are recorded
    /// first; the others run on under their supervisor, which writes each
    /// one's exit record, and the next start on this log directory adopts
    /// them and records their outcomes once.
    fn leave_jobs(&mut self) {
        self.take_reports();
        let left = self.core.running.len();
        self.report.say(format!(
            "gpusched stop --keep-jobs: the scheduler exits and leaves {} running; the next start on {} adopts them and records how they end: start it again {}",
            crate::words::count(left, "job"),
            self.cfg.log_dir.display(),
            crate::view::screen::restart_hint(
                &self.core.jobs.path.display().to_string(),
                self.cfg.workdir.as_deref().map(|d| d.to_string_lossy()).as_deref(),
                &self.cfg.command
            )
        ));
        // Forgotten here, not ended: the journal says they started, and
        // their supervisor outlives us.
        self.core.running.clear();
        self.core.mode = Mode::Stopping {
            hurried: false,
            give_up_at: self.now().instant,
        };
    }

    /// The first SIGINT or SIGTERM (`name`): every running group of ours
    /// gets SIGTERM through the launcher now and SIGKILL after the grace;
    /// the scheduler exits by `give_up_at` (`phases/exit.rs`).
    pub(in crate::scheduler) fn begin_stop(
        &mut self,
        name: &str,
        give_up_at: Instant,
        now: Instant,
    ) {
        // Ends already reported are taken first: their real outcome is
        // recorded, and they are not signalled.
        self.take_reports();
        // A cluster's jobs are not ours to stop.
        let before = self.core.running.len();
        self.core
            .running
            .retain(|_, job| !job.proc.outlives_scheduler());
        if self.core.running.len() < before {
            self.report.say(format!(
                "{name}: gpusched stops; {} on the Slurm cluster keep running there (the next start picks them up; `gpusched cancel` or scancel stops them)",
                crate::words::count(before - self.core.running.len(), "job")
            ));
        }
        // Inside an allocation the grace fits in Slurm's KillWait.
        let grace = self.io.pilot.as_ref().map_or(process::KILL_GRACE, |p| {
            crate::pilot::stop_grace(p.kill_wait_s, process::KILL_GRACE)
        });
        self.report.say(format!(
            "{name}: stopping {} (SIGTERM now, SIGKILL after {}; press Ctrl-C again to kill at once); they will run again on the next start",
            crate::words::count(self.core.running.len(), "running job"),
            crate::console::human_duration(grace.as_secs_f64())
        ));
        self.core.mode = Mode::Stopping {
            hurried: false,
            give_up_at,
        };
        // An adopted group we cannot verify is never signalled: leave it
        // running; the next start adopts it.
        self.core.running.retain(|_, job| {
            if !job.may_signal() {
                self.report.say(format!(
                    "job {} (process group {}) cannot be verified as ours; leaving it running",
                    job.no, job.pgid
                ));
            }
            job.may_signal()
        });
        for job in self.core.running.values_mut() {
            let _ = job.begin_kill(KillReason::Shutdown, now, &mut self.io.launcher);
        }
        self.fit_stop_in_kill_wait(now);
    }

    /// While the scheduler stops, an end by a signal none of ours sent
    /// is the stop's reaching the job first: Slurm at an allocation's
    /// end, and systemd stopping a unit, signal every process at once
    /// (docs/BEHAVIOUR.md "Stopping"). Inside an allocation, any failure
    /// then is its end's (a step Slurm no longer starts, `Job/step
    /// already completing`). Such an end gets the stop's kill reason in
    /// `facts`: it runs again, never `failed`.
    pub(in crate::scheduler) fn stop_reached_it_first(
        &self,
        facts: &mut crate::launcher::EndFacts,
    ) {
        use crate::policy::outcome::Exit;
        let ending_under_it =
            |exit: Exit| exit.by_a_signal() || (self.io.pilot.is_some() && exit != Exit::Code(0));
        if self.core.mode.is_stopping()
            && facts.kill.is_none()
            && facts.verdict.is_none()
            && facts.exit.is_some_and(ending_under_it)
        {
            facts.kill = Some(KillReason::Shutdown);
        }
    }
}
