//! Preemption (docs/BEHAVIOUR.md "Queue policy"): a blocked job may stop running `preemptible`
//! jobs ranked after it in the queue (priority, then line) when that lets it start. The choice is the
//! pure [`preemption::choose_victims`]; the stopping is the one kill path
//! with [`KillReason::Preempt`]; the outcome (`preempted`, pending again,
//! no retry used) is decided in [`crate::policy::outcome`].

use crate::policy::kill::KillReason;
use crate::policy::preemption::{self, Candidate};
use crate::policy::queue;
use crate::process;
use crate::scheduler::Scheduler;
use std::time::Instant;

impl Scheduler {
    /// Preemption (docs/BEHAVIOUR.md "Queue policy"): for the first blocked job in queue order, stops
    /// the running `preemptible` jobs ranked after it that let it start — the
    /// fewest, then the least run time lost ([`preemption::choose_victims`]).
    /// One preemption at a time: none while a victim is still stopping.
    pub(in crate::scheduler) fn preempt_for_first_blocked(
        &mut self,
        planned: &[crate::allocation::Planned],
        now: Instant,
    ) {
        if self
            .core
            .running
            .values()
            .any(|j| j.kill_reason() == Some(KillReason::Preempt))
        {
            return;
        }
        let Some(first) = planned.iter().find(|p| p.waits()) else {
            return;
        };
        let file_index = first.index;
        let keys: Vec<String> = self.core.running.keys().cloned().collect();
        let candidates: Vec<Candidate> = keys
            .iter()
            .enumerate()
            .filter(|(_, key)| {
                self.core.running[*key].kill.is_none() && self.core.running[*key].may_signal()
            })
            .map(|(id, key)| {
                let line = self.core.jobs.index_of(key);
                Candidate {
                    id,
                    rank: line.map(|i| queue::rank_key(&self.core.jobs.specs[i], i)),
                    preemptible: line.is_some_and(|i| self.core.jobs.specs[i].preemptible),
                    run_time_s: self.core.running[key].started.elapsed().as_secs_f64(),
                }
            })
            .collect();
        if !candidates.iter().any(|c| c.preemptible) {
            return;
        }
        let ends = self.running_ends();
        let victims = preemption::choose_victims(
            &first.request,
            queue::rank_key(&self.core.jobs.specs[file_index], file_index),
            &candidates,
            &self.cfg.place,
            |ids| {
                let without: Vec<&str> = ids.iter().map(|&i| keys[i].as_str()).collect();
                self.gpu_loads_ending(&without, &ends)
            },
        );
        let Some(victims) = victims else {
            return;
        };
        let for_no = self
            .io
            .journal
            .state(&self.core.jobs.specs[file_index].key)
            .map_or(0, |s| s.no);
        for id in victims {
            if let Some(job) = self.core.running.get_mut(&keys[id])
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
}
