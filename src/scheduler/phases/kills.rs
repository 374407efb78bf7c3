//! Phase 3, kills in progress (docs/BEHAVIOUR.md "Stopping"): SIGKILL
//! through the launcher to groups whose grace has expired, and the end of
//! killed attempts once their leader ended and nothing of the group is
//! left (whatever is left after the leader gets a SIGKILL sweep). One read
//! of `/proc` serves every group of the round.

use crate::process::ProcTable;
use crate::scheduler::Scheduler;
use nix::sys::signal::Signal;
use std::time::Instant;

impl Scheduler {
    /// Escalates kills whose grace expired and ends killed attempts whose
    /// group is gone.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn drive_kills(&mut self, now: Instant) -> anyhow::Result<()> {
        if self.core.running.values().all(|j| j.kill.is_none()) {
            return Ok(());
        }
        for job in self.core.running.values_mut() {
            let Some(kill) = &mut job.kill else {
                continue;
            };
            if let Some(signal) = kill.termination.as_mut().and_then(|t| t.due(now)) {
                self.io.launcher.signal(&mut job.proc, signal);
            }
        }
        let table = ProcTable::scan();
        let mut ended = Vec::new();
        for (key, job) in &mut self.core.running {
            let Some(kill) = &job.kill else {
                continue;
            };
            if !job.settled(&table) {
                continue;
            }
            let group_alive = job.identity().is_some_and(|id| table.group_alive(id));
            if !group_alive {
                ended.push(key.clone());
            } else if kill.termination.as_ref().is_some_and(|t| t.sigkill_sent()) {
                // Final sweep: what is left of the group after its leader
                // (a late fork) gets SIGKILL.
                self.io.launcher.signal(&mut job.proc, Signal::SIGKILL);
            }
        }
        self.complete_all(&ended)
    }
}
