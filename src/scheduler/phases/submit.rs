//! Phase 7 on a cluster (docs/BEHAVIOUR.md "Slurm"): Slurm places the jobs, so instead of
//! [`super::dispatch`]'s placement every ready pending job is submitted,
//! in queue order (priority, then line) — a job whose `after=` dependencies are submitted but not
//! done goes with `--dependency=afterok` on them. Submissions pause after a
//! failed `sbatch` (the job stays pending) and while the queue is paused.

use crate::scheduler::Scheduler;

impl Scheduler {
    /// Submits every ready pending job; records why the others wait.
    ///
    /// Errors: a job's log or the journal cannot be written.
    pub(in crate::scheduler) fn submit_ready(&mut self) -> anyhow::Result<()> {
        if self.core.control.paused {
            self.wait_paused();
            return Ok(());
        }
        if !self.io.launcher.may_start(self.now().instant) {
            return Ok(());
        }
        self.recheck_submissions()?;
        let (indices, requests, mut blocked) = self.ready_requests();
        // A full group's jobs are not submitted (docs/BEHAVIOUR.md
        // "Groups"): Slurm would run them all.
        let mut in_group = self.running_per_group();
        let mut chosen = Vec::new();
        for (index, request) in indices.into_iter().zip(requests) {
            let group = self.core.jobs.specs[index].group();
            match crate::policy::round::group_wait(&self.core.jobs.groups, &mut in_group, group) {
                Some(reason) => blocked.push((self.core.jobs.specs[index].key.to_string(), reason)),
                None => chosen.push((index, request)),
            }
        }
        // Jobs of the file that are running or done, for "n/N dispatched".
        let mut dispatched = self.core.jobs.specs.len() - chosen.len() - blocked.len();
        self.set_wait_reasons(blocked.into_iter().collect());
        self.round.pending_at_last_round = chosen.len();
        let mut launches = Vec::new();
        for (index, request) in chosen {
            if !self.io.launcher.may_start(self.now().instant) {
                break; // sbatch failed: the rest wait for the next poll
            }
            dispatched += 1;
            self.round.pending_at_last_round -= 1;
            let spec = self.core.jobs.specs[index].clone();
            if spec.on_mask().is_some() {
                self.report.warn(format!(
                    "job line {}: on= is ignored on a Slurm cluster, where Slurm picks the GPUs",
                    spec.line
                ));
            }
            launches.extend(self.launch(spec, request, Vec::new(), dispatched)?);
        }
        if !launches.is_empty() {
            self.commit_launches(launches)?;
        }
        Ok(())
    }
}
