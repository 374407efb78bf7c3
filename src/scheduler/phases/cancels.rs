//! Phase 5, cancels (docs/BEHAVIOUR.md "Out of memory and timeouts"): the `cancel` flag kills a running job (it
//! ends `cancelled`, using no retry) and ends a pending one unrun. Removing
//! the flag later does not bring the job back.

use crate::journal::Phase;
use crate::model::DoneStatus;
use crate::policy::kill::KillReason;
use crate::scheduler::Scheduler;
use std::time::Instant;

impl Scheduler {
    /// Applies every `cancel` flag of the jobs file.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn apply_cancels(&mut self, now: Instant) -> anyhow::Result<()> {
        // Flagged lines, and jobs `gpusched cancel` journaled (whose line
        // may be anywhere in the file, or gone).
        let jobs = &self.core.jobs;
        let mut cancelled: Vec<String> = (jobs.cancel_flagged.iter())
            .map(|&i| jobs.specs[i].key.to_string())
            .collect();
        self.core.cancel_requests.retain(|key| {
            self.io
                .journal
                .state(key)
                .is_some_and(|s| s.cancel_requested && !matches!(s.phase, Phase::Done(_)))
        });
        cancelled.extend(self.core.cancel_requests.iter().cloned());
        for key in cancelled {
            if let Some(job) = self.core.running.get_mut(&key) {
                if job.begin_kill(KillReason::Cancel, now, &mut self.io.launcher) {
                    self.report.say(format!(
                        "job {} cancelled: stopping {}",
                        job.no,
                        job.handle_text()
                    ));
                }
                continue;
            }
            let Some(state) = self.io.journal.state(&key) else {
                continue;
            };
            if matches!(state.phase, Phase::Waiting) {
                let no = state.no;
                self.record_unrun(&key, DoneStatus::Cancelled)?;
                self.report
                    .say(format!("⊘ job {no} cancelled before it started"));
            }
        }
        Ok(())
    }
}
