//! `after=` (docs/BEHAVIOUR.md "Queue policy"), afterok: a pending job whose dependency ended in
//! anything but `ok` — or can never run, its line gone — ends at once as
//! `dependency_failed`, naming the dependency. Jobs still waiting on a
//! dependency are held back from placement by [`Scheduler::readiness_of`].

use crate::journal::Phase;
use crate::model::DoneStatus;
use crate::policy::dependencies::{self, Readiness};
use crate::scheduler::Scheduler;

impl Scheduler {
    /// Where job `key`'s dependencies stand.
    pub(in crate::scheduler) fn readiness_of(&self, key: &str) -> Readiness {
        if self.core.jobs.after.is_empty() {
            // No line has `after=`: skip hashing every pending key.
            return Readiness::Ready;
        }
        match self.core.jobs.after.get(key) {
            None => Readiness::Ready,
            Some(deps) => dependencies::readiness(
                deps,
                |k| self.io.journal.state(k),
                |k| self.core.running.contains_key(k),
                |k| self.core.jobs.deps_in_file.contains(k),
                |k| {
                    self.core
                        .running
                        .get(k)
                        .is_some_and(|j| j.proc.holds_dependents())
                },
            ),
        }
    }

    /// The Slurm job ids of job `key`'s dependencies that run on the
    /// cluster now, for its `--dependency=afterok` (docs/BEHAVIOUR.md "Slurm"); empty when
    /// they are all done (always, for local jobs).
    pub(in crate::scheduler) fn submitted_dependencies(&self, key: &str) -> Vec<u64> {
        self.core
            .jobs
            .after
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|dep| match &self.io.journal.state(dep)?.phase {
                Phase::Started(info) => info.slurm_job_id,
                _ => None,
            })
            .collect()
    }

    /// Ends pending jobs whose dependency failed.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn fail_broken_dependencies(&mut self) -> anyhow::Result<()> {
        if self.core.jobs.after.is_empty() {
            return Ok(());
        }
        let waiting: Vec<String> = self
            .core
            .jobs
            .after
            .keys()
            .filter(|key| !self.core.running.contains_key(*key))
            .filter(|key| {
                self.io
                    .journal
                    .state(key)
                    .is_some_and(|s| matches!(s.phase, Phase::Waiting))
            })
            .cloned()
            .collect();
        for key in waiting {
            if let Readiness::Failed { no, why } = self.readiness_of(&key) {
                let own = self.io.journal.state(&key).map_or(0, |s| s.no);
                self.record_unrun(&key, DoneStatus::DependencyFailed)?;
                self.report.say(format!(
                    "✗ job {own} dependency_failed: it runs after job {no}, which {}",
                    if why.contains(' ') {
                        format!("is {why}")
                    } else {
                        format!("ended {why}")
                    }
                ));
            }
        }
        Ok(())
    }
}
