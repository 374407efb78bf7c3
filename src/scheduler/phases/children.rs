//! Phase 2, children: reaps jobs of ours that exited. A job not being
//! killed ends at once; one being killed ends in [`super::kills`] once its
//! whole group is gone.

use crate::scheduler::Scheduler;
use crate::scheduler::state::Proc;

impl Scheduler {
    /// Reaps exited children and ends the attempts not being killed.
    ///
    /// Errors: waiting on a child fails, or the journal cannot be written.
    pub(in crate::scheduler) fn reap_children(&mut self) -> anyhow::Result<()> {
        let mut ended = Vec::new();
        for (key, job) in &mut self.running {
            if let Proc::Child { child, exit, .. } = &mut job.proc
                && exit.is_none()
                && let Some(status) = child.try_wait()?
            {
                *exit = Some(status);
                if job.kill.is_none() {
                    ended.push(key.clone());
                }
            }
        }
        for key in ended {
            self.complete_attempt(&key)?;
        }
        Ok(())
    }
}
