//! Job containment in the loop (docs/BEHAVIOUR.md "Containment"): each
//! local job of a round is put in its own cgroup while it waits at its
//! gate, with its `mem=` and `cpus=` (or the per-GPU defaults); when an
//! attempt ends, for any reason, whatever it left in its cgroup is
//! killed and said, and a host OOM within its limit is counted.

use super::launch::Launch;
use crate::containment::{Containment, Leftovers, Limits};
use crate::launcher::Ready;
use crate::scheduler::Scheduler;
use crate::state::Running;

/// A round's containment ([`Scheduler::containing`]).
pub(super) struct Containing {
    containment: std::sync::Arc<Containment>,
    /// CPUs given to running jobs and to this round's so far.
    taken: Vec<u32>,
}

impl Scheduler {
    /// What [`Scheduler::contain`] needs for a round: the containment in
    /// use and the CPUs running jobs were given; `None` without one.
    pub(super) fn containing(&self) -> Option<Containing> {
        let Ok(Some(containment)) = &self.cfg.containment else {
            return None;
        };
        let taken = self
            .core
            .running
            .values()
            .filter_map(|r| r.cgroup.as_ref())
            .flat_map(|c| c.cpus.iter().copied())
            .collect();
        Some(Containing {
            containment: std::sync::Arc::clone(containment),
            taken,
        })
    }

    /// Puts a local job of a round, held at its gate, in its own cgroup
    /// (a spare one when it has no limits); a job whose cgroup cannot be
    /// made runs without one, said. Called as each job reaches its gate,
    /// so that the supervisor starts the round's next jobs meanwhile.
    pub(super) fn contain(&mut self, round: &mut Containing, launch: &mut Launch, started: &Ready) {
        let Ready::Local { job, .. } = started else {
            return;
        };
        let containment = std::sync::Arc::clone(&round.containment);
        let limits = self.limits_for(launch, &containment, &round.taken);
        let (key, attempt) = (&launch.spec.key, launch.attempt);
        let reused = (limits == Limits::default())
            .then(|| self.io.spare_cgroups.pop())
            .flatten()
            .and_then(|spare| containment.reuse(spare, key, attempt, job.pid).ok());
        let made = match reused {
            Some(cgroup) => Ok(cgroup),
            None => containment.contain(key, attempt, &limits, job.pid),
        };
        match made {
            Ok(cgroup) => {
                round.taken.extend(cgroup.cpus.iter().copied());
                launch.cgroup = Some(cgroup);
            }
            Err(e) => self.report.warn(format!(
                "job {} runs without its own cgroup: {} ({})",
                launch.no,
                e,
                containment.describe()
            )),
        }
    }

    /// What `launch` asked for (its own `mem=` and `cpus=`) that nothing
    /// enforces: no cgroup could be made for it, or its cgroup lacks the
    /// controller; `None` when all it asked holds, or it asked nothing.
    /// A Slurm job's limits are Slurm's.
    pub(super) fn unenforced_limits(&self, launch: &Launch) -> Option<String> {
        if !self.io.launcher.places_jobs() {
            return None;
        }
        let containment = self.cfg.containment.as_ref().ok().and_then(Option::as_ref);
        let contained = launch.cgroup.is_some();
        let mem = launch.spec.mem_mib().is_some()
            && !(contained && containment.is_some_and(|c| c.memory));
        let cpus =
            launch.spec.cpus().is_some() && !(contained && containment.is_some_and(|c| c.cpuset));
        let asked: Vec<&str> = [(mem, "mem="), (cpus, "cpus=")]
            .into_iter()
            .filter_map(|(unheld, name)| unheld.then_some(name))
            .collect();
        if asked.is_empty() {
            return None;
        }
        let why = match containment {
            None => "no cgroup can be made here; gpusched doctor says how to get one",
            Some(_) if !contained => "its cgroup could not be made",
            Some(_) => "the controller is missing in this cgroup hierarchy",
        };
        Some(format!("{} not enforced: {why}", asked.join(" and ")))
    }

    /// The limits of `launch`'s cgroup: its `mem=` and `cpus=`, else
    /// `--mem-per-gpu` and `--cpus-per-gpu` times its GPUs (once for a
    /// CPU-only job); CPUs from those nearest its GPUs not `taken` by
    /// another job. A limit the box cannot enforce is said, not set.
    fn limits_for(&mut self, launch: &Launch, containment: &Containment, taken: &[u32]) -> Limits {
        let per_gpu = launch.gpus.len().max(1) as u64;
        let mem_mib = launch
            .spec
            .mem_mib()
            .or(self.cfg.mem_per_gpu_mib.map(|m| m.saturating_mul(per_gpu)));
        let cpus = launch.spec.cpus().or(self
            .cfg
            .cpus_per_gpu
            .map(|n| n.saturating_mul(per_gpu as u32)));
        // Said once a run: every job after it would say the same.
        let unenforced = [
            (
                mem_mib.is_some() && !containment.memory,
                "host memory limits (mem=, --mem-per-gpu) are not enforced: no memory",
            ),
            (
                cpus.is_some() && !containment.cpuset,
                "CPUs (cpus=, --cpus-per-gpu) are not pinned: no cpuset",
            ),
        ];
        for ((asked, what), said) in unenforced.into_iter().zip(&mut self.io.unenforced_said) {
            if asked && !std::mem::replace(said, true) {
                let place = containment.describe();
                self.report
                    .warn(format!("job {}: {what} controller in {place}", launch.no));
            }
        }
        let cpus = match cpus.filter(|_| containment.cpuset) {
            Some(wanted) => {
                let near: Vec<u32> = launch
                    .gpus
                    .iter()
                    .filter_map(|&g| self.io.backend.cpu_affinity(g))
                    .flatten()
                    .collect();
                let near = if near.is_empty() {
                    containment.cpus.clone()
                } else {
                    near
                };
                crate::containment::choose_cpus(wanted, &near, taken, &containment.cpus)
            }
            None => Vec::new(),
        };
        Limits {
            mem_mib: mem_mib.filter(|_| containment.memory),
            cpus,
        }
    }

    /// At the end of `job`'s attempt: kills what it left in its cgroup
    /// (said: "job 3 left 12 processes behind: killed") and removes the
    /// cgroup, or keeps it to remove once its last processes are gone.
    /// Returns what was found, for the outcome (a host OOM).
    pub(in crate::scheduler) fn finish_cgroup(&mut self, job: &Running) -> Option<Leftovers> {
        let cgroup = job.cgroup.as_ref()?;
        let found = cgroup.finish();
        if found.killed > 0 {
            self.report.warn(format!(
                "job {} left {} process{} behind: killed",
                job.no,
                found.killed,
                if found.killed == 1 { "" } else { "es" }
            ));
        }
        if cgroup.spare(&found)
            && self.io.spare_cgroups.len() < crate::scheduler::parts::SPARE_CGROUPS
        {
            self.io.spare_cgroups.push(cgroup.clone());
        } else if !cgroup.remove() {
            self.io.busy_cgroups.push(cgroup.clone());
        }
        Some(found)
    }

    /// Removes the spare cgroups (the queue drained, or the scheduler
    /// exits).
    pub(in crate::scheduler) fn remove_spare_cgroups(&mut self) {
        let spares = std::mem::take(&mut self.io.spare_cgroups);
        self.io
            .busy_cgroups
            .extend(spares.into_iter().filter(|c| !c.remove()));
    }

    /// Removes the cgroups of ended attempts whose last processes were
    /// still dying at the end; at exit, also the spares and this
    /// scheduler's own.
    pub(in crate::scheduler) fn remove_busy_cgroups(&mut self, exiting: bool) {
        self.io.busy_cgroups.retain(|c| !c.remove());
        if exiting {
            self.remove_spare_cgroups();
        }
        if exiting
            && self.core.running.is_empty()
            && let Ok(Some(containment)) = &self.cfg.containment
        {
            // Their last processes are dying: a moment for them, not more
            // (one stuck in the kernel keeps its cgroup, and it is left).
            let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
            while !self.io.busy_cgroups.is_empty() && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(10));
                self.io.busy_cgroups.retain(|c| !c.remove());
            }
            containment.remove_bases();
        }
    }
}

impl Scheduler {
    /// From a sample's processes that are no running job's (`external`):
    /// those a finished job of ours left behind — their environment names
    /// this log directory and a job that runs no more — go on the board,
    /// said once each: memory nobody will free until they are killed.
    pub(in crate::scheduler) fn note_left_behind(
        &mut self,
        external: &[(crate::gpu::attribution::GpuPid, Option<u64>)],
    ) {
        let gpu = &mut self.core.gpu;
        if external.is_empty() && gpu.left_by.is_empty() && gpu.left_behind.is_empty() {
            return;
        }
        let log_dir = self.cfg.log_dir.as_os_str().as_encoded_bytes();
        let mut now = Vec::new();
        let steps = self.io.launcher.steps();
        // Another node's pid names nothing in this node's /proc.
        let here = external
            .iter()
            .filter(|(p, _)| steps.is_none_or(|s| !s.is_remote(p.gpu)));
        for (process, mib) in here {
            let job = *gpu
                .left_by
                .entry(process.pid)
                .or_insert_with(|| job_of(process.pid, log_dir));
            let running = |no: &u32| self.core.running.values().any(|r| r.no == *no);
            if let Some(job) = job.filter(|no| !running(no)) {
                now.push(crate::view::status::LeftBehind {
                    gpu: process.gpu,
                    pid: process.pid,
                    mib: *mib,
                    job,
                });
            }
        }
        let pids: std::collections::HashSet<u32> = external.iter().map(|(p, _)| p.pid).collect();
        self.core.gpu.left_by.retain(|pid, _| pids.contains(pid));
        for left in &now {
            let known = self
                .core
                .gpu
                .left_behind
                .iter()
                .any(|l| l.pid == left.pid && l.gpu == left.gpu);
            if !known {
                self.report.warn(format!(
                    "GPU {}: pid {} of finished job {} still holds {}: left behind; kill it (in its own cgroup it would have been)",
                    crate::model::device_label(left.gpu),
                    left.pid,
                    left.job,
                    left.mib.map_or("memory".to_string(), |m| format!("{m} MiB"))
                ));
            }
        }
        self.core.gpu.left_behind = now;
    }
}

/// The job of ours process `pid` was started by: `GPUSCHED_JOB` of its
/// environment when its `GPUSCHED_LOG_DIR` is `log_dir`, for a process
/// of the scheduler's own user only (`process::environ::own_environ`: a
/// process of another user may name our log directory in its
/// environment, and root may read it; one in another PID namespace
/// cannot be read: `None`).
fn job_of(pid: u32, log_dir: &[u8]) -> Option<u32> {
    let environ = crate::process::environ::own_environ(pid)?;
    let mut job = None;
    let mut ours = false;
    for var in environ.split(|b| *b == 0) {
        if let Some(value) = var.strip_prefix(b"GPUSCHED_JOB=") {
            job = std::str::from_utf8(value).ok()?.parse().ok();
        } else if let Some(value) = var.strip_prefix(b"GPUSCHED_LOG_DIR=") {
            ours = value == log_dir;
        }
    }
    job.filter(|_| ours)
}
