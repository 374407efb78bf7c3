//! What the deciding phases return (docs/ARCHITECTURE.md "Decide, then
//! act"): dispatch's decisions for the jobs that do not wait and
//! preemption's choice are [`Action`] values, built by functions over
//! [`crate::state::Core`] and the round's inputs; [`Scheduler::apply`] is
//! the one place that carries them out, through the launcher and the
//! journal.

use crate::model::DoneStatus;
use crate::policy::kill::KillReason;
use crate::process;
use crate::scheduler::Scheduler;
use std::time::Instant;

pub(in crate::scheduler) use super::phases::Start;

/// One thing a phase decided to do; nothing happens until
/// [`Scheduler::apply`] carries it out.
#[must_use = "an action does nothing until Scheduler::apply carries it out"]
#[derive(Debug, PartialEq)]
pub(in crate::scheduler) enum Action {
    /// Launch a booked start: the job on line `index` on its GPUs.
    Start(Start),
    /// End the job on line `index` without running it, with `status`
    /// (`infeasible`: no GPU can ever hold it, for the reason `why`).
    EndUnrun {
        /// The job's index in the specs.
        index: usize,
        /// Its outcome.
        status: DoneStatus,
        /// Why, for the terminal line.
        why: String,
    },
    /// Stop the running job `key` so that the blocked job `for_key` can
    /// start (docs/BEHAVIOUR.md "Queue policy"): SIGTERM to its process
    /// group, SIGKILL after the grace; it is pending again, no retry used.
    Preempt {
        /// The running job to stop.
        key: String,
        /// The blocked job it makes room for.
        for_key: String,
    },
}

impl Scheduler {
    /// Carries out `actions` in order, at `now`: a preemption begins the
    /// kill and says so, a job ended unrun is journaled and said; the
    /// starts (already booked) are launched together last, journaled and
    /// released as one batch, and the round's `starting` bookings become
    /// running ones (`launch_round`, also with no start).
    ///
    /// Errors: the journal or a job's log cannot be written (what was not
    /// done stays pending for the next round).
    pub(in crate::scheduler) fn apply(
        &mut self,
        actions: Vec<Action>,
        now: Instant,
    ) -> anyhow::Result<()> {
        let mut starts = Vec::new();
        let mut result = Ok(());
        for action in actions {
            match action {
                Action::Start(start) => starts.push(start),
                Action::EndUnrun { index, status, why } => {
                    if result.is_ok() {
                        result = self.end_unrun(index, status, &why);
                    }
                }
                Action::Preempt { key, for_key } => self.preempt(&key, &for_key, now),
            }
        }
        // A failed write stops here, as it stops the round: the starts
        // stay pending.
        result?;
        self.launch_round(starts)
    }

    /// Ends the job on line `index` without running it, and says why.
    ///
    /// Errors: the journal cannot be written.
    fn end_unrun(&mut self, index: usize, status: DoneStatus, why: &str) -> anyhow::Result<()> {
        let spec = &self.core.jobs.specs[index];
        let (key, command) = (spec.key.clone(), spec.command.clone());
        let no = self.io.journal.state(&key).map_or(0, |s| s.no);
        self.record_unrun(&key, status)?;
        self.report
            .say(format!("✗ job {no} {}: {why}: {command}", status.as_str()));
        Ok(())
    }

    /// Begins the preemption of running job `key` for `for_key`, once.
    fn preempt(&mut self, key: &str, for_key: &str, now: Instant) {
        let for_no = self.io.journal.state(for_key).map_or(0, |s| s.no);
        if let Some(job) = self.core.running.get_mut(key)
            && job.begin_kill(KillReason::Preempt, now, &mut self.io.launcher)
        {
            self.report.say(format!(
                "job {} preempted for job {for_no}: SIGTERM to its process group {} (its chance to checkpoint), SIGKILL in {}s",
                job.no,
                job.pgid,
                process::KILL_GRACE.as_secs()
            ));
        }
    }
}

#[cfg(test)]
mod tests;
