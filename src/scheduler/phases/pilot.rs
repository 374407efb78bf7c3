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

/// How close to the wrap-up (seconds) a job with no known run time is
/// said when it starts ([`Scheduler::tell_start_without_bound`]).
pub const NO_BOUND_NEAR_END_S: f64 = 300.0;

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
    /// The cluster's `KillWait` (seconds), if `scontrol` said it: the
    /// stop's grace fits in it ([`crate::pilot::stop_grace`]).
    pub kill_wait_s: Option<u64>,
    /// The jobs last said to wait for the next allocation, with what
    /// bounds them: said again only when this changes.
    pub said_waiting: Vec<(u32, Option<u64>, Option<u64>)>,
    /// The wait reasons' generation ([`crate::state::LastRound`]) those
    /// were read from: unchanged reasons are not read again.
    pub said_generation: Option<u64>,
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
            kill_wait_s: slurm::kill_wait_s().ok(),
            said_waiting: Vec::new(),
            said_generation: None,
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
        let (bound, siblings_s) = self.allocation_bound_s(index);
        // After Slurm's warning only a job known to end in time starts.
        if pilot.warned && (end.is_none() || bound.is_none()) {
            return Some(WaitReason::AllocationEnds {
                job_id,
                at,
                needs_s: None,
                siblings_s: None,
            });
        }
        (!fits_before(now, end?, bound)).then(|| WaitReason::AllocationEnds {
            job_id,
            at,
            needs_s: bound.map(|b| b.ceil() as u64),
            siblings_s: siblings_s.map(|s| s.ceil() as u64),
        })
    }

    /// How long the job of line `index` may run, for the allocation's
    /// end (seconds): its own bound ([`Scheduler::run_estimate_s`]: its
    /// family's typical run, its `timeout=`), else, when its own family
    /// never ran, the longest run of its siblings
    /// ([`crate::policy::learned::siblings_of`]: `s1` bounds `s3`) with
    /// the history margin — returned second, for the reason's words.
    pub(in crate::scheduler) fn allocation_bound_s(
        &self,
        index: usize,
    ) -> (Option<f64>, Option<f64>) {
        if let Some(own) = self.run_estimate_s(index) {
            return (Some(own), None);
        }
        let spec = &self.core.jobs.specs[index];
        let family = crate::policy::learned::family_of(&spec.command, spec.family());
        match self.core.run_times.longest_sibling(&family) {
            Some(longest) => (
                Some(crate::policy::expected::with_margin(longest)),
                Some(longest),
            ),
            None => (None, None),
        }
    }

    /// Inside an allocation, after a round: says in the pilot's output
    /// (the allocation's `.out`) which jobs wait for the next allocation
    /// and why — `job 7 needs up to 5m00s, 1m40s left before the
    /// wrap-up: for the next allocation` — when that list changed.
    pub(in crate::scheduler) fn tell_waiting_for_next_allocation(&mut self) {
        let generation = self.round.reasons_generation;
        // Every tick calls this: only a round that changed the reasons
        // is read.
        let seen = self
            .io
            .pilot
            .as_mut()
            .is_none_or(|p| p.said_generation.replace(generation) == Some(generation));
        if seen {
            return;
        }
        let Some(pilot) = self.io.pilot.as_ref() else {
            return;
        };
        let mut waiting: Vec<(u32, Option<u64>, Option<u64>)> = self
            .round
            .wait_reasons
            .iter()
            .filter_map(|(key, reason)| match reason {
                WaitReason::AllocationEnds {
                    needs_s,
                    siblings_s,
                    ..
                } => Some((self.io.journal.state(key)?.no, *needs_s, *siblings_s)),
                _ => None,
            })
            .collect();
        waiting.sort_unstable();
        if waiting == pilot.said_waiting {
            return;
        }
        let left = pilot
            .end()
            .map(|end| (end - WRAP_UP_S - self.now().ts).max(0.0));
        let left_words = left.map_or("the allocation is ending".to_string(), |left| {
            format!(
                "{} left before the wrap-up",
                crate::console::human_duration(left)
            )
        });
        let mut lines = Vec::new();
        for (no, needs, siblings) in &waiting {
            let bound = match (needs, siblings) {
                (Some(needs), Some(siblings)) => format!(
                    "has no run of its own family; its siblings took up to {}, so it needs up to {}",
                    crate::console::human_duration(*siblings as f64),
                    crate::console::human_duration(*needs as f64)
                ),
                (Some(needs), None) => format!(
                    "needs up to {}",
                    crate::console::human_duration(*needs as f64)
                ),
                (None, _) => "has no known run time after Slurm's warning".into(),
            };
            lines.push(format!(
                "job {no} {bound}, {left_words}: for the next allocation"
            ));
        }
        if waiting.is_empty() && !pilot.said_waiting.is_empty() {
            lines.push("no job waits for the next allocation any more".into());
        }
        if let Some(pilot) = self.io.pilot.as_mut() {
            pilot.said_waiting = waiting;
        }
        for line in lines {
            self.report.say(line);
        }
    }

    /// Inside an allocation with a time limit, when job `no` of line
    /// `index` starts with no known bound (no `timeout=`, no run of its
    /// family or siblings) and less than [`NO_BOUND_NEAR_END_S`] is left
    /// before the wrap-up: says so (the wrap-up stops it in time if it
    /// runs long, and the next allocation runs it again).
    pub(in crate::scheduler) fn tell_start_without_bound(&mut self, index: usize, no: u32) {
        let Some(end) = self.io.pilot.as_ref().and_then(Pilot::end) else {
            return;
        };
        let left = end - WRAP_UP_S - self.now().ts;
        if left >= NO_BOUND_NEAR_END_S || self.allocation_bound_s(index).0.is_some() {
            return;
        }
        self.report.say(format!(
            "job {no} starts with no known run time (no timeout=, no run of its family or its siblings) and {} left before the wrap-up: if it runs long, the wrap-up stops it and the next allocation runs it again",
            crate::console::human_duration(left.max(0.0))
        ));
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

    /// Called when a job failed (a signal none of ours sent, a step Slurm
    /// would not start), or the supervisor died, while no stop is under
    /// way: inside an allocation
    /// that may be Slurm ending it (`scancel`, the time limit, a node
    /// failure), whose SIGTERM reaches every process of the allocation at
    /// once and the jobs' deaths may be read before the pilot's own
    /// signal. So the end comes first: a SIGTERM that came meanwhile is
    /// applied now, else the allocation's end time or Slurm's state of it
    /// (`squeue`) says whether it is over; if so the stop begins here and
    /// the jobs it lost are journaled `interrupted` (`completion.rs`),
    /// nothing more
    /// starts, and the next allocation runs them (docs/BEHAVIOUR.md
    /// "Inside a Slurm allocation"). Outside an allocation, or while Slurm
    /// says it runs, the deaths are the jobs' own.
    pub(in crate::scheduler) fn notice_allocation_end(&mut self) {
        if self.io.pilot.is_none() || self.core.mode.is_stopping() {
            return;
        }
        let Some(pilot) = self.io.pilot.as_ref() else {
            return;
        };
        let id = pilot.allocation.job_id;
        let time_limit = pilot.end().is_some_and(|end| self.now().ts >= end - 1.0);
        let over = if time_limit {
            Some(format!("Slurm job {id} reached its time limit"))
        } else {
            match slurm::job_state(id) {
                Ok(state) if crate::pilot::allocation_over(state.as_deref()) => Some(format!(
                    "Slurm job {id} is {}",
                    state.as_deref().unwrap_or("gone")
                )),
                _ => None,
            }
        };
        // Its SIGTERM may have come while squeue answered.
        if self.stop_signal_came() {
            return;
        }
        if let Some(why) = over {
            if time_limit && let Some(pilot) = self.io.pilot.as_mut() {
                pilot.wrapped_up = true;
            }
            let now = self.now().instant;
            self.report.say(format!(
                "{why}: its end cut a job short; nothing more starts here"
            ));
            self.begin_wrap_up(&why, now);
        }
    }

    /// Inside an allocation, shortens a stop that began at `now` to what
    /// Slurm's `KillWait` leaves ([`crate::pilot::stop_grace`]): every
    /// job's SIGKILL, and the scheduler's exit, come before Slurm's
    /// SIGKILL of the pilot. Returns the stop's grace.
    pub(in crate::scheduler) fn fit_stop_in_kill_wait(&mut self, now: Instant) -> Duration {
        let Some(pilot) = self.io.pilot.as_ref() else {
            return crate::process::KILL_GRACE;
        };
        let grace = crate::pilot::stop_grace(pilot.kill_wait_s, crate::process::KILL_GRACE);
        for job in self.core.running.values_mut() {
            if let Some(termination) = job.kill.as_mut().and_then(|k| k.termination.as_mut()) {
                termination.hurry(now + grace);
            }
        }
        if let crate::state::Mode::Stopping { give_up_at, .. } = &mut self.core.mode {
            *give_up_at = (*give_up_at).min(now + grace + crate::policy::stop::STOP_MARGIN);
        }
        grace
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
                "SIGUSR2: Slurm job {id} ends at {}; only jobs known to end {} s before that start now, and {} go on until then",
                crate::console::clock_seconds(end),
                WRAP_UP_S,
                crate::words::count(running, "running job")
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
