//! Phase 5, cancels (SPEC §6): the `cancel` flag kills a running job (it
//! ends `cancelled`, using no retry) and ends a pending one unrun. Removing
//! the flag later does not bring the job back.

use crate::journal::Phase;
use crate::model::DoneStatus;
use crate::policy::kill::KillReason;
use crate::scheduler::Scheduler;
use crate::view::report::say;
use std::time::Instant;

impl Scheduler {
    /// Applies every `cancel` flag of the jobs file.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn apply_cancels(&mut self, now: Instant) -> anyhow::Result<()> {
        let cancelled: Vec<String> = self
            .jobs
            .specs
            .iter()
            .filter(|s| s.cancel)
            .map(|s| s.key.clone())
            .collect();
        for key in cancelled {
            if let Some(job) = self.running.get_mut(&key) {
                if job.begin_kill(KillReason::Cancel, now) {
                    say(&format!(
                        "job {} cancelled: stopping {}",
                        job.no,
                        job.handle_text()
                    ));
                }
                continue;
            }
            let Some(state) = self.journal.state(&key) else {
                continue;
            };
            if matches!(state.phase, Phase::Waiting) {
                let no = state.no;
                self.record_unrun(&key, DoneStatus::Cancelled)?;
                say(&format!("⊘ job {no} cancelled before it started"));
            }
        }
        Ok(())
    }
}
