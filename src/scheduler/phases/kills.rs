//! Phase 3, kills in progress (SPEC §3): SIGKILL to groups whose grace has
//! expired, and the end of killed attempts once the leader is reaped and
//! nothing of the group is left (the final sweep lives in
//! [`crate::process::Termination`]).

use crate::scheduler::Scheduler;
use std::time::Instant;

impl Scheduler {
    /// Escalates kills whose grace expired and ends killed attempts whose
    /// group is gone.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn drive_kills(&mut self, now: Instant) -> anyhow::Result<()> {
        let mut ended = Vec::new();
        for (key, job) in &mut self.running {
            let Some(kill) = &mut job.kill else {
                continue;
            };
            if kill.group_gone(now) && job.proc.leader_gone() {
                ended.push(key.clone());
            }
        }
        for key in ended {
            self.complete_attempt(&key)?;
        }
        Ok(())
    }
}
