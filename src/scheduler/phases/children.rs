//! Phase 2, children: asks the launcher for the state of a cluster's jobs
//! ([`crate::launcher::Launcher::poll`]) and for the ends our supervisor
//! reported ([`crate::launcher::Launcher::take_ended`], a dead
//! supervisor's last reports first). An attempt ends at once when no kill
//! is under way, or when its end came before the kill reached it (an end
//! beats a kill); one the kill reached ends in [`super::kills`] once its
//! group is gone. If the supervisor died, its jobs that had not ended are
//! handed over to adoption — after its reports were applied, so a job is
//! never taken for running once it ended, nor for ended while it may run.
//! The round's outcomes are journaled with one fsync, and only then does
//! the supervisor hear that it needs no exit records.

use crate::policy::outcome::Exit;
use crate::scheduler::Scheduler;
use crate::state::Proc;

/// What [`Scheduler::take_reports`] found.
#[derive(Debug, Default, Clone, Copy)]
pub(in crate::scheduler) struct Taken {
    /// The supervisor had died (its unended jobs are adopted).
    pub supervisor_died: bool,
    /// A reported end is a failure: an exit but 0, or a signal.
    pub a_job_failed: bool,
}

impl Scheduler {
    /// Takes the reported ends and completes the attempts they end.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn reap_children(&mut self) -> anyhow::Result<()> {
        // A cluster's jobs are asked for (at most every --poll).
        self.io.launcher.poll(
            self.core.running.values_mut().map(|job| &mut job.proc),
            self.cfg.clock.now().instant,
        );
        let taken = self.take_reports();
        // A job that failed or a supervisor gone may be a stop that
        // signals every process at once (systemd, Slurm), seen before the
        // scheduler's own signal: that signal is looked for first, and
        // inside an allocation whether it is ending, before anything is
        // recorded.
        if !self.core.mode.is_stopping()
            && (taken.supervisor_died || taken.a_job_failed)
            && !self.stop_signal_came()
        {
            self.notice_allocation_end();
        }
        // Every ended attempt that no kill reached ends now, including one
        // whose outcome could not be journaled in an earlier round.
        let ended: Vec<String> = self
            .core
            .running
            .iter()
            .filter(|(_, j)| j.proc.ended() && (j.kill.is_none() || j.proc.ended_before_kill()))
            .map(|(k, _)| k.clone())
            .collect();
        self.complete_all(&ended)
    }

    /// Applies the supervisor's reports to the running attempts, then hands
    /// a dead supervisor's unended jobs over to adoption. Returns what
    /// that found.
    pub(in crate::scheduler) fn take_reports(&mut self) -> Taken {
        let (reports, died_below) = self.io.launcher.take_ended();
        let mut taken = Taken::default();
        for (id, record) in reports {
            taken.a_job_failed |= record.exit().is_some_and(|e| e != Exit::Code(0));
            match self
                .core
                .running
                .get_mut(&record.key)
                .map(|job| &mut job.proc)
            {
                Some(Proc::Supervised {
                    id: running, ended, ..
                }) if *running == id => *ended = Some(record),
                // No attempt waits for it (none should): without an ack the
                // supervisor keeps it and records it once we are gone, so
                // an outcome the journal did not take is never dropped.
                _ => {}
            }
        }
        let Some(below) = died_below else {
            return taken;
        };
        taken.supervisor_died = true;
        let steps = self.io.launcher.steps().is_some();
        for (key, job) in &mut self.core.running {
            if let Proc::Supervised {
                id,
                identity,
                ended: None,
            } = &job.proc
                && *id < below
            {
                self.report.warn(format!(
                    "job {}'s supervisor ended before the job (process group {}); watching the group instead",
                    job.no, job.pgid
                ));
                job.proc = Proc::Adopted {
                    identity: identity.clone(),
                    supervisor: None,
                    step: steps.then(|| crate::launcher::steps::step_name(key, job.attempt)),
                };
            }
        }
        taken
    }

    /// Completes the attempts of `keys` with one fsync for all their
    /// outcomes (group commit); the supervisor hears `ack` only once it
    /// succeeded, else it writes exit records.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn complete_all(&mut self, keys: &[String]) -> anyhow::Result<()> {
        self.io.journal.defer_sync();
        let completed = keys.iter().try_for_each(|key| self.complete_attempt(key));
        let synced = self.io.journal.sync();
        let unacked = std::mem::take(&mut self.io.unacked);
        if synced.is_ok() {
            self.io.launcher.ack_all(&unacked);
        }
        completed.and(synced)
    }
}
