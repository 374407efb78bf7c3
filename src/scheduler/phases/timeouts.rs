//! Phase 4, timeouts (docs/BEHAVIOUR.md "Out of memory and timeouts"): `timeout=` is strictly opt-in; at the limit
//! the job's group gets SIGTERM, then SIGKILL after the grace, and the job
//! ends `timeout`. No heuristic ever kills a job.

use crate::policy::kill::KillReason;
use crate::process;
use crate::scheduler::Scheduler;
use std::time::Instant;

impl Scheduler {
    /// Begins the kill of jobs whose `timeout=` is reached.
    pub(in crate::scheduler) fn enforce_timeouts(&mut self, now: Instant) {
        for job in self.core.running.values_mut() {
            if job.kill.is_none()
                && job.timeout_at.is_some_and(|t| now >= t)
                && job.begin_kill(KillReason::Timeout, now, &mut self.io.launcher)
            {
                self.report.warn(format!(
                    "job {} reached its timeout after {}: SIGTERM to its process group {}, SIGKILL in {}s",
                    job.no,
                    crate::console::human_duration(job.started.elapsed().as_secs_f64()),
                    job.pgid,
                    process::KILL_GRACE.as_secs()
                ));
            }
        }
    }
}
