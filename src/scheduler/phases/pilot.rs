//! The pilot's side of the loop (docs/BEHAVIOUR.md "Inside a Slurm
//! allocation"): at start the allocation's GPUs are matched to NVML's and
//! become the only ones placement, sampling and the views use; every tick
//! (phase 0, with the signals) the allocation's end is looked at, and at
//! its wrap-up, or on Slurm's SIGUSR2 warning, the scheduler stops what
//! runs (journaled `interrupted`, so the next allocation runs it again)
//! and exits [`crate::pilot::EXIT_FOR_NEXT_ALLOCATION`]. Dispatch keeps
//! back a job that could not end in time ([`Scheduler::allocation_keeps_back`]).
//! The rules are pure, in [`crate::pilot`].

use crate::allocation::WaitReason;
use crate::error::Error;
use crate::gpu::GpuSnapshot;
use crate::launcher::slurm;
use crate::pilot::{Allocation, WRAP_UP_S, fits_before};
use crate::scheduler::Scheduler;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often the pilot asks Slurm again when its allocation ends: an
/// admin may change the time limit (`scontrol update TimeLimit=`).
const END_CHECK: Duration = Duration::from_secs(60);

/// [`Pilot`]'s end while unknown.
const UNKNOWN: u64 = 0;
/// [`Pilot`]'s end when the allocation has no time limit.
const UNLIMITED: u64 = u64::MAX;

/// A scheduler running inside a Slurm allocation.
#[derive(Debug)]
pub struct Pilot {
    /// What the environment says of the allocation.
    pub allocation: Allocation,
    /// The allocation's GPUs (NVML indices; on several nodes, device ids
    /// of [`crate::pilot::node_device_id`]), once the first snapshot
    /// matched them.
    pub gpus: Vec<u32>,
    /// The allocation's end in Unix milliseconds ([`UNKNOWN`],
    /// [`UNLIMITED`]), written by a thread that asks `squeue` every
    /// [`END_CHECK`].
    end_ms: Arc<AtomicU64>,
    /// Slurm's warning signal (SIGUSR2) came: nothing more starts.
    pub warned: bool,
    /// The wrap-up began: the scheduler exits
    /// [`crate::pilot::EXIT_FOR_NEXT_ALLOCATION`].
    pub wrapped_up: bool,
}

impl Pilot {
    /// The pilot of `allocation`: asks Slurm when it ends now, and again
    /// every [`END_CHECK`] on a thread of its own (a failed ask keeps
    /// what was known). Returns the first answer too, for the caller to
    /// say: the end (Unix seconds, `None` without a limit) or why it is
    /// unknown.
    pub fn start(allocation: Allocation) -> (Pilot, Result<Option<f64>, String>) {
        let end_ms = Arc::new(AtomicU64::new(UNKNOWN));
        let first = ask_end(allocation.job_id, &end_ms);
        let (id, shared) = (allocation.job_id, Arc::clone(&end_ms));
        let _ = std::thread::Builder::new()
            .name("slurm-end".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(END_CHECK);
                    let _ = ask_end(id, &shared);
                }
            });
        let pilot = Pilot {
            allocation,
            gpus: Vec::new(),
            end_ms,
            warned: false,
            wrapped_up: false,
        };
        (pilot, first)
    }

    /// When the allocation ends (Unix seconds), if known and limited.
    pub fn end(&self) -> Option<f64> {
        match self.end_ms.load(Ordering::Relaxed) {
            UNKNOWN | UNLIMITED => None,
            ms => Some(ms as f64 / 1000.0),
        }
    }

    /// `inside Slurm job 1234: GPUs 2,3 of node gpu07`; on several
    /// nodes (`others`, the other nodes used, in Slurm's order:
    /// [`crate::launcher::steps::Steps::others`]) each node's GPUs by
    /// device id, with that node's own numbers: `…: GPUs 0,1 of node
    /// gpu07; GPUs 8,9 (0,1) of node gpu08`.
    pub fn words(&self, others: &[String]) -> String {
        let here: Vec<u32> = self
            .gpus
            .iter()
            .copied()
            .filter(|&id| others.is_empty() || crate::pilot::device_node(id).0 == 0)
            .collect();
        let mut words = self.allocation.describe(&here);
        for (n, node) in others.iter().enumerate() {
            let ids: Vec<u32> = self
                .gpus
                .iter()
                .copied()
                .filter(|&id| crate::pilot::device_node(id).0 == n as u32 + 1)
                .collect();
            let own: Vec<u32> = ids
                .iter()
                .map(|&id| crate::pilot::device_node(id).1)
                .collect();
            words.push_str(&match ids.len() {
                0 => format!("; no GPU of node {node}"),
                n => format!(
                    "; GPU{} {} ({}) of node {node}",
                    if n == 1 { "" } else { "s" },
                    crate::console::gpu_ids(&ids, ","),
                    crate::console::gpu_ids(&own, ",")
                ),
            });
        }
        words
    }
}

/// Asks `squeue` how long Slurm job `id` has left and stores its end in
/// `end_ms`; returns the end (Unix seconds; `None` without a limit).
fn ask_end(id: u64, end_ms: &AtomicU64) -> Result<Option<f64>, String> {
    let left = slurm::time_left(id).map_err(|e| format!("{e:#}"))?;
    let end = left.map(|left| crate::clock::now_ts() + left);
    let stored = end.map_or(UNLIMITED, |end| (end * 1000.0) as u64);
    end_ms.store(stored, Ordering::Relaxed);
    Ok(end)
}

impl Scheduler {
    /// Matches the allocation's GPUs to the first snapshot's devices and
    /// keeps the scheduler to them (as `--gpus` would); `--gpus` inside an
    /// allocation must name some of them. Says which, and when the
    /// allocation ends.
    ///
    /// Errors ([`Error::Gpu`], exit 2): the allocation's GPUs cannot be
    /// matched ([`Allocation::gpus`]), or `--gpus` names one outside it.
    pub(in crate::scheduler) fn match_allocation(
        &mut self,
        snapshot: &GpuSnapshot,
        first_end: &Result<Option<f64>, String>,
    ) -> anyhow::Result<()> {
        let Some(pilot) = self.io.pilot.as_mut() else {
            return Ok(());
        };
        // This node's GPUs are matched here; the other nodes' agents
        // matched theirs (docs/BEHAVIOUR.md "Several nodes").
        let steps = self.io.launcher.steps();
        let remote: Vec<u32> = snapshot
            .gpus
            .iter()
            .map(|g| g.index)
            .filter(|&id| steps.is_some_and(|s| s.is_remote(id)))
            .collect();
        let mut here = snapshot.clone();
        here.gpus.retain(|g| !remote.contains(&g.index));
        here.faults
            .retain(|f| steps.is_none_or(|s| !s.is_remote(f.index)));
        let (mut gpus, how) =
            crate::gpu::nodes::allocated_gpus(&pilot.allocation, &here).map_err(Error::Gpu)?;
        if !remote.is_empty()
            && let Some(far) = gpus.iter().find(|&&i| i >= crate::pilot::NODE_GPU_SLOTS)
        {
            return Err(Error::Gpu(format!(
                "Slurm job {} has GPU {far} of node {}, and a pilot on several nodes numbers each node's GPUs 0 to {}: ask for nodes whose GPUs are numbered so, or leave --job-steps out to use this node only",
                pilot.allocation.job_id,
                pilot.allocation.node,
                crate::pilot::NODE_GPU_SLOTS - 1
            ))
            .into());
        }
        gpus.extend(&remote);
        if let Some(asked) = &self.cfg.allowed
            && let Some(outside) = asked.iter().find(|i| !gpus.contains(i))
        {
            return Err(Error::Gpu(format!(
                "--gpus names GPU {outside}, which is not Slurm job {}'s (it has GPU {})",
                pilot.allocation.job_id,
                crate::console::gpu_ids(&gpus, ",")
            ))
            .into());
        }
        pilot.gpus = self.cfg.allowed.clone().unwrap_or(gpus);
        self.cfg.allowed = Some(pilot.gpus.clone());
        let ends = match first_end {
            Ok(Some(end)) => format!(
                "the allocation ends at {}; a job that cannot end {} s before that waits for the next one",
                crate::console::clock_seconds(*end),
                WRAP_UP_S
            ),
            Ok(None) => "the allocation has no time limit".into(),
            Err(why) => format!(
                "when the allocation ends is unknown ({why}); SIGUSR2 (sbatch --signal=B:USR2@120) stops the jobs in time"
            ),
        };
        let others = steps.map_or(&[][..], |s| s.others.as_slice());
        let words = pilot.words(others);
        let spread = match (pilot.allocation.nodes, others.len()) {
            (1, _) => String::new(),
            (n, 0) => format!(
                "; the allocation spans {n} nodes, and only this node's GPUs are used (--job-steps uses every node's)"
            ),
            (n, others) if others + 1 < n as usize => format!(
                "; the allocation spans {n} nodes, and its first {} are used",
                others + 1
            ),
            (n, _) => format!("; jobs run on all {n} nodes"),
        };
        let steps = match self.io.launcher.steps() {
            Some(steps) => format!(
                "; each job runs as a job step (sacct -j {} lists them)",
                steps.job_id
            ),
            None => String::new(),
        };
        self.report.say(format!(
            "{words} ({}); {ends}; the box ledger is off{spread}{steps}",
            how.words()
        ));
        Ok(())
    }

    /// Why the pending job on line `index` may not start at `now` (Unix
    /// seconds) inside an allocation: Slurm warned that it ends, or the
    /// job's run-time bound reaches past the wrap-up. `None` outside an
    /// allocation, or when it may start.
    pub(in crate::scheduler) fn allocation_keeps_back(
        &self,
        index: usize,
        now: f64,
    ) -> Option<WaitReason> {
        let pilot = self.io.pilot.as_ref()?;
        let end = pilot.end();
        let at = end.map(|end| end.round() as u64);
        let job_id = pilot.allocation.job_id;
        let bound = self.run_estimate_s(index);
        // After Slurm's warning only a job known to end in time starts.
        if pilot.warned && (end.is_none() || bound.is_none()) {
            return Some(WaitReason::AllocationEnds {
                job_id,
                at,
                needs_s: None,
            });
        }
        (!fits_before(now, end?, bound)).then(|| WaitReason::AllocationEnds {
            job_id,
            at,
            needs_s: bound.map(|b| b.ceil() as u64),
        })
    }

    /// When the wrap-up is due (the loop wakes for it).
    pub(in crate::scheduler) fn wrap_up_due(&self) -> Option<Instant> {
        let pilot = self.io.pilot.as_ref().filter(|p| !p.wrapped_up)?;
        let now = self.now();
        let ahead = pilot.end()? - WRAP_UP_S - now.ts;
        Some(now.instant + Duration::from_secs_f64(ahead.max(0.0)))
    }

    /// Phase 0: begins the wrap-up once the allocation's end is
    /// [`WRAP_UP_S`] away, or at once after Slurm's warning when the end
    /// is unknown.
    pub(in crate::scheduler) fn check_allocation_end(&mut self, now: Instant) {
        let Some(pilot) = self.io.pilot.as_ref() else {
            return;
        };
        if pilot.wrapped_up || self.core.mode.is_stopping() {
            return;
        }
        let due = match pilot.end() {
            Some(end) => self.now().ts >= end - WRAP_UP_S,
            None => pilot.warned,
        };
        if due {
            let name = match pilot.end() {
                Some(end) => format!(
                    "Slurm job {} ends at {}",
                    pilot.allocation.job_id,
                    crate::console::clock_seconds(end)
                ),
                None => format!("Slurm job {} is ending (SIGUSR2)", pilot.allocation.job_id),
            };
            if let Some(pilot) = self.io.pilot.as_mut() {
                pilot.wrapped_up = true;
            }
            self.begin_wrap_up(&name, now);
        }
    }

    /// The wrap-up (`name` says why): the stop of SIGTERM, its jobs
    /// journaled `interrupted` for the next start.
    fn begin_wrap_up(&mut self, name: &str, now: Instant) {
        let give_up_at = now + crate::process::KILL_GRACE + crate::policy::stop::STOP_MARGIN;
        self.begin_stop(name, give_up_at, now);
    }

    /// SIGUSR2, Slurm's warning that the allocation ends soon (sent up
    /// to a minute earlier than asked, sbatch(1) `--signal`): from now on
    /// only jobs known to end before the wrap-up start (their `timeout=`
    /// or their family's run time); running jobs go on until the wrap-up,
    /// which comes at once when the end is unknown. Outside an
    /// allocation, a stop that leaves the rest for the next start.
    pub(in crate::scheduler) fn allocation_warning(&mut self, now: Instant) {
        let Some(pilot) = self.io.pilot.as_mut() else {
            self.begin_wrap_up("SIGUSR2", now);
            return;
        };
        pilot.warned = true;
        let id = pilot.allocation.job_id;
        let (end, running) = (pilot.end(), self.core.running.len());
        match end {
            Some(end) => self.report.say(format!(
                "SIGUSR2: Slurm job {id} ends at {}; only jobs known to end {} s before that start now, and {running} running job(s) go on until then",
                crate::console::clock_seconds(end),
                WRAP_UP_S
            )),
            None => self.report.say(format!(
                "SIGUSR2: Slurm job {id} is ending; nothing more starts"
            )),
        }
        self.check_allocation_end(now);
    }

    /// What the GPUs are, for the board and status.json: the backend's
    /// words, and inside an allocation which of them are ours.
    pub(in crate::scheduler) fn backend_words(&self) -> String {
        let described = self.io.backend.describe();
        match &self.io.pilot {
            Some(pilot) => {
                let others = self.io.launcher.steps().map_or(&[][..], |s| &s.others);
                format!("{described} — {}", pilot.words(others))
            }
            None => described,
        }
    }
}
