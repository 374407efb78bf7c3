//! Phase 2, children: asks the launcher for the state of a cluster's jobs
//! ([`crate::launcher::Launcher::poll`]) and for the ends our supervisor
//! reported ([`crate::launcher::Launcher::take_ended`]). A job not being
//! killed ends at once; one being killed ends in [`super::kills`] once its
//! whole group is gone. If the supervisor died, its jobs that had not
//! ended are handed over to adoption, so a job is never taken for ended
//! while it may run. The round's outcomes are journaled with one fsync,
//! and only then does the supervisor hear that it needs no exit records.

use crate::scheduler::Scheduler;
use crate::scheduler::state::Proc;
use crate::view::report::warn;

impl Scheduler {
    /// Takes the reported ends and completes the attempts not being killed.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn reap_children(&mut self) -> anyhow::Result<()> {
        // A cluster's jobs are asked for (at most every --poll).
        self.launcher
            .poll(&mut self.running, std::time::Instant::now());
        let (reports, died_below) = self.launcher.take_ended();
        for (id, record) in reports {
            match self.running.get_mut(&record.key).map(|job| &mut job.proc) {
                Some(Proc::Supervised {
                    id: running,
                    reaped,
                    ..
                }) if *running == id => *reaped = Some(record.exit()),
                // No attempt waits for it (none should): without an ack the
                // supervisor keeps it and records it once we are gone, so
                // an outcome the journal did not take is never dropped.
                _ => {}
            }
        }
        if let Some(below) = died_below {
            for job in self.running.values_mut() {
                if let Proc::Supervised {
                    id,
                    identity,
                    reaped: None,
                } = &job.proc
                    && *id < below
                {
                    warn(&format!(
                        "job {}'s supervisor ended before the job (process group {}); watching the group instead",
                        job.no, job.pgid
                    ));
                    job.proc = Proc::Adopted {
                        identity: identity.clone(),
                        supervisor: None,
                    };
                }
            }
        }
        // Every reaped attempt not being killed ends now, including one
        // whose outcome could not be journaled in an earlier round.
        let ended: Vec<String> = self
            .running
            .iter()
            .filter(|(_, j)| j.kill.is_none() && j.proc.ended())
            .map(|(k, _)| k.clone())
            .collect();
        // One fsync for the round's outcomes (group commit); the supervisor
        // hears `ack` only once it succeeded, else it writes exit records.
        self.journal.defer_sync();
        let completed = ended.iter().try_for_each(|key| self.complete_attempt(key));
        let synced = self.journal.sync();
        let unacked = std::mem::take(&mut self.unacked);
        if synced.is_ok() {
            for id in unacked {
                self.launcher.ack(id);
            }
        }
        completed.and(synced)
    }
}
