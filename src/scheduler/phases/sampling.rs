//! Phase 6, sampling (docs/BEHAVIOUR.md "Monitoring", "NVML"): when the poll interval has passed (or
//! something changed), query the GPU backend and take the snapshot in:
//! attribute processes to jobs by process group, keep per-job peaks and
//! external peaks, warn at once when a job exceeds its declaration, report
//! `-v` peak growth, read progress markers, and keep per-GPU statistics. A
//! failed query is warned about; after several in a row dispatch pauses.

use crate::files;
use crate::gpu::attribution;
use crate::gpu::health::{HealthChange, REOPEN_AFTER_SAMPLES};
use crate::gpu::{GpuSnapshot, HostFault};
use crate::process;
use crate::progress;
use crate::scheduler::Scheduler;
use crate::scheduler::parts::Reporting;
use crate::state::{Mode, Running};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

/// When after a job's start it is sampled, whatever `--poll`: its first
/// allocations show within a second, and the board and the timeline do
/// not wait a whole poll for a new job's memory.
const EARLY_SAMPLES: [Duration; 2] = [Duration::from_millis(500), Duration::from_secs(2)];

/// Early samples closer than this to one already asked for are shared.
const EARLY_SAMPLE_SLACK: Duration = Duration::from_millis(250);

/// The longest time between samples while a job runs under
/// `enforce=stop` (docs/BEHAVIOUR.md "Declarations that hold").
pub const ENFORCE_POLL: Duration = Duration::from_millis(500);

/// Failed GPU queries in a row after which dispatch pauses (docs/BEHAVIOUR.md "NVML").
const MAX_GPU_FAILURES: u32 = 5;

/// Bytes of a running job's log searched for a progress marker each round.
const PROGRESS_TAIL_BYTES: u64 = 8 * 1024;

/// Growth of a running job's peak (MiB) that `-v` reports (docs/BEHAVIOUR.md "Board and terminal").
const VERBOSE_STEP_MIB: u64 = 256;

impl Scheduler {
    /// Whether a GPU sample is due now: `--poll` passed, something asked
    /// for one, or a job started a moment ago ([`EARLY_SAMPLES`]).
    pub(in crate::scheduler) fn sample_due(&self, now: Instant) -> bool {
        self.due.sample_now
            || self
                .core
                .gpu
                .early_samples
                .front()
                .is_some_and(|&t| t <= now)
            || self
                .core
                .gpu
                .last_sample
                .is_none_or(|t| now >= t + self.sample_every())
    }

    /// The time between samples: `--poll`, at most [`ENFORCE_POLL`] while
    /// a job runs under `enforce=stop` (or `auto`, sharing a GPU), so that
    /// an over-use is caught
    /// before it takes a neighbour down (docs/BEHAVIOUR.md "Declarations
    /// that hold").
    pub(in crate::scheduler) fn sample_every(&self) -> Duration {
        use crate::jobspec::Enforce;
        let booked = std::cell::OnceCell::new();
        let enforced = self.core.running.iter().any(|(key, job)| {
            job.request.vram_mib.is_some()
                && match self.enforce_mode(key) {
                    Enforce::Stop => true,
                    Enforce::Auto => self
                        .shares_a_gpu(key, booked.get_or_init(|| self.booked_by_others()))
                        .is_some(),
                    Enforce::Warn | Enforce::Mps => false,
                }
        });
        if enforced {
            self.cfg.poll.min(ENFORCE_POLL)
        } else {
            self.cfg.poll
        }
    }

    /// Asks for the samples of [`EARLY_SAMPLES`] after a job started at
    /// `started`. Starts in the same moment share them.
    pub(in crate::scheduler) fn sample_soon_after(&mut self, started: Instant) {
        for after in EARLY_SAMPLES {
            let due = started + after;
            if self.cfg.poll <= after {
                continue; // --poll samples as soon anyway
            }
            let near = |t: Instant| {
                due.saturating_duration_since(t) < EARLY_SAMPLE_SLACK
                    && t.saturating_duration_since(due) < EARLY_SAMPLE_SLACK
            };
            if !self.core.gpu.early_samples.iter().any(|&t| near(t)) {
                self.core.gpu.early_samples.push_back(due);
            }
        }
        let queued = self.core.gpu.early_samples.make_contiguous();
        queued.sort_unstable();
    }

    /// Samples now, or `gap` after the last sample if that was less than
    /// `gap` ago (so a burst of wakes costs one sample per `gap`).
    pub(in crate::scheduler) fn sample_soon(&mut self, gap: std::time::Duration) {
        let now = self.now().instant;
        match self
            .core
            .gpu
            .last_sample
            .map(|t| t + gap)
            .filter(|due| *due > now)
        {
            None => self.due.sample_now = true,
            Some(due) => {
                if !self.core.gpu.early_samples.iter().any(|&t| t <= due) {
                    self.core.gpu.early_samples.push_back(due);
                    self.core
                        .gpu
                        .early_samples
                        .make_contiguous()
                        .sort_unstable();
                }
            }
        }
    }

    /// The next early sample's moment, if one is due.
    pub(in crate::scheduler) fn next_early_sample(&self) -> Option<Instant> {
        self.core.gpu.early_samples.front().copied()
    }

    /// Asks the backend for a snapshot and takes it in; a failed query is
    /// warned about and, after several in a row, pauses dispatch (docs/BEHAVIOUR.md "NVML").
    pub(in crate::scheduler) fn sample_gpus(&mut self, now: Instant) {
        self.due.sample_now = false;
        self.core.gpu.last_sample = Some(now);
        while self
            .core
            .gpu
            .early_samples
            .front()
            .is_some_and(|&t| t <= now)
        {
            self.core.gpu.early_samples.pop_front();
        }
        let query_started = Instant::now();
        let result = self.io.backend.snapshot();
        tracing::debug!(
            "GPU snapshot in {:.2} ms",
            query_started.elapsed().as_secs_f64() * 1000.0
        );
        match result {
            Ok(snapshot) => {
                self.record_snapshot(snapshot);
                self.refresh_ledger();
                self.learn_from_overruns();
                self.read_history();
            }
            Err(e) => self.record_gpu_failure(&e),
        }
    }

    /// Counts a failed query; warns up to the pause, then once every 60
    /// rounds, so a dead driver does not flood the pane. A fault of the
    /// host's whole GPU stack ([`HostFault`]) pauses at once, with its
    /// hint (docs/HARDWARE.md "Host-wide faults").
    fn record_gpu_failure(&mut self, error: &anyhow::Error) {
        self.core.gpu.failures += 1;
        let failures = self.core.gpu.failures;
        let host = error.downcast_ref::<HostFault>();
        if self.core.mode == Mode::Scheduling
            && let Some(fault) = host
        {
            let reason =
                format!("GPU stack fault: {fault}; no new job starts until NVML answers again");
            self.report.warn(&reason);
            self.core.mode = Mode::PausedOnGpuErrors { reason };
            return;
        }
        if host.is_none() && (failures <= MAX_GPU_FAILURES || failures.is_multiple_of(60)) {
            self.report.warn(format!(
                "GPU query failed ({failures} in a row): {error:#}; running jobs keep running"
            ));
        }
        if failures >= MAX_GPU_FAILURES && self.core.mode == Mode::Scheduling {
            let reason = format!(
                "GPU queries failed {failures} times in a row; no new job starts until they answer again"
            );
            self.report.warn(&reason);
            self.core.mode = Mode::PausedOnGpuErrors { reason };
        }
    }

    /// Closes the GPUs that stopped answering and opens those that answer
    /// again (docs/HARDWARE.md "A sick GPU"), saying so.
    fn record_health(&mut self, snapshot: &GpuSnapshot) {
        let changes = self.core.gpu.health.observe(
            snapshot,
            self.core.gpu.snapshot.as_ref(),
            self.cfg.clock.now().ts,
        );
        if changes.is_empty() {
            return;
        }
        for change in changes {
            match change {
                HealthChange::Closed {
                    index,
                    reason,
                    lasting,
                } => {
                    let on_it: Vec<u32> = self
                        .core
                        .running
                        .values()
                        .filter(|j| j.gpus.contains(&index))
                        .map(|j| j.no)
                        .collect();
                    let left_alone = match on_it.len() {
                        0 => String::new(),
                        1 => format!("; job {} on it is left alone", on_it[0]),
                        _ => format!(
                            "; jobs {} on it are left alone",
                            crate::console::numbers(&on_it, ", ")
                        ),
                    };
                    let opens = if lasting {
                        format!("it stays closed until `gpusched undrain {index}`")
                    } else {
                        format!(
                            "it opens again after {REOPEN_AFTER_SAMPLES} good samples in a row, or with `gpusched undrain {index}`"
                        )
                    };
                    let said = format!(
                        "GPU {index} closed: {reason}; no new job starts there, the other GPUs go on{left_alone}; {opens}"
                    );
                    self.report.warn(&said);
                    self.report
                        .told
                        .tell(crate::notifier::NotifyOn::Gpu, "gpu_closed", &said);
                }
                HealthChange::Reopened { index, was } => self.report.say(format!(
                    "GPU {index} answers again ({REOPEN_AFTER_SAMPLES} good samples in a row since {was}); open to new jobs"
                )),
            }
        }
        self.closed_gpus_changed();
    }

    /// Placement's closed set after `drain`, `undrain` or a GPU's health
    /// changed: drained GPUs and GPUs that stopped answering; the next
    /// round places again.
    pub(in crate::scheduler) fn closed_gpus_changed(&mut self) {
        self.cfg.place.drained_mask =
            self.core.control.drained_mask() | self.core.gpu.health.mask();
        self.due.dispatch_needed = true;
        self.round.last_dispatch_loads = None;
    }

    /// Which of our jobs each GPU process of `snapshot` is
    /// ([`Processes`]).
    fn attribute_processes(&self, snapshot: &GpuSnapshot) -> Processes {
        // Map each GPU process to one of our jobs through its process group
        // or, for jobs run as Slurm job steps (children of slurmstepd), the
        // job its environment names; on another node of the allocation,
        // the job that node's agent read there (docs/BEHAVIOUR.md "Several
        // nodes"): this node's /proc knows nothing of that node's pids.
        let steps = self.io.launcher.steps();
        let running = &self.core.running;
        let ours = |key: &str, attempt: u32| {
            running
                .get(key)
                .is_some_and(|job| job.attempt == attempt)
                .then(|| key.to_string())
        };
        let named: HashMap<(u32, u32), (&str, u32)> = snapshot
            .named
            .iter()
            .map(|n| ((n.gpu, n.pid), (n.key.as_str(), n.attempt)))
            .collect();
        let by_pgid: HashMap<u32, String> = self
            .core
            .running
            .iter()
            .map(|(key, job)| (job.pgid.0, key.clone()))
            .collect();
        let mut group_of: HashMap<u32, u32> = HashMap::new();
        let mut hidden: HashSet<u32> = HashSet::new();
        // Which job each (GPU, pid) is, for the processes' own utilisation.
        let mut owner: HashMap<(u32, u32), String> = HashMap::new();
        let mut job_of = |process: &crate::gpu::GpuProcess| {
            let pid = process.pid;
            if steps.is_some_and(|s| s.is_remote(process.gpu)) {
                let (key, attempt) = named.get(&(process.gpu, pid))?;
                return ours(key, *attempt);
            }
            let Some(stat) = process::read_stat(pid) else {
                hidden.insert(pid);
                return None;
            };
            group_of.insert(pid, stat.pgrp);
            by_pgid.get(&stat.pgrp).cloned().or_else(|| {
                let (key, attempt) =
                    steps.and_then(|_| crate::process::environ::job_of_environ(pid))?;
                ours(&key, attempt)
            })
        };
        let seen = attribution::attribute(&snapshot.processes, |process| {
            let job = job_of(process);
            if let Some(key) = &job {
                owner.insert((process.gpu, process.pid), key.clone());
            }
            job
        });
        let hidden_on: HashSet<u32> = snapshot
            .processes
            .iter()
            .filter(|p| hidden.contains(&p.pid))
            .map(|p| p.gpu)
            .collect();
        let own_util = attribution::own_util(&snapshot.process_util, &owner, hidden_on);
        Processes {
            seen,
            group_of,
            hidden,
            own_util,
        }
    }

    /// Takes a snapshot in: attribution, peaks, utilization, warnings,
    /// progress, per-GPU statistics (docs/BEHAVIOUR.md "Monitoring").
    pub(in crate::scheduler) fn record_snapshot(&mut self, snapshot: GpuSnapshot) {
        if self.core.gpu.failures > 0 {
            if matches!(self.core.mode, Mode::PausedOnGpuErrors { .. }) {
                self.core.mode = Mode::Scheduling;
                self.report
                    .say("GPU queries answer again; dispatching resumes");
            }
            self.core.gpu.failures = 0;
        }
        self.record_health(&snapshot);
        let Processes {
            mut seen,
            group_of,
            hidden,
            own_util,
        } = self.attribute_processes(&snapshot);
        self.measure_hidden(&mut seen, &hidden);
        self.note_left_behind(&seen.external);
        self.core.gpu.external_peaks.observe(&seen.external);
        self.core.gpu.external_by_group = attribution::by_group(&seen.external, &group_of);
        let util: HashMap<u32, Option<u32>> = snapshot
            .gpus
            .iter()
            .map(|g| (g.index, g.util_percent))
            .collect();
        // How many of our jobs each GPU holds: a job alone on its GPUs
        // shows its own utilisation where they cannot report it per
        // process.
        let mut ours_on: HashMap<u32, u32> = HashMap::new();
        for gpu in self.core.running.values().flat_map(|job| &job.gpus) {
            *ours_on.entry(*gpu).or_default() += 1;
        }
        for (key, job) in &mut self.core.running {
            let current = seen.per_job.remove(key);
            job.usage.seen_on_gpu |= current.is_some();
            let alone = job
                .gpus
                .iter()
                .all(|g| ours_on.get(g).is_none_or(|&n| n <= 1));
            // Its own utilisation: what the driver measured of its
            // processes where that is known; else its GPUs' when it is
            // alone on them.
            let own = own_util.mean_over(key, &job.gpus);
            observe_usage(job, current.unwrap_or_default(), &util, own, alone);
            check_declaration(&mut self.report, job, self.cfg.tolerance, self.cfg.verbose);
        }
        self.record_usage(&snapshot);
        self.record_gpu_stats(&snapshot);
        self.read_progress();
        self.core.gpu.snapshot = Some(snapshot);
    }

    /// Processes `/proc` does not show (docs/HARDWARE.md "Containers"):
    /// says once when they persist, then measures a job alone on its GPU
    /// by what hidden processes hold there beyond what they held when it
    /// started.
    fn measure_hidden(
        &mut self,
        seen: &mut attribution::Attribution<String>,
        hidden: &HashSet<u32>,
    ) {
        if self.core.gpu.hidden.observe(&seen.external, hidden) {
            let pids: Vec<u32> = hidden
                .iter()
                .copied()
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            self.report.warn(format!(
                "NVML reports GPU processes this PID namespace cannot see (pid {}): gpusched seems to run in a container without the host's PID namespace; a job alone on its GPU is measured by that GPU's memory, others show n/a; run gpusched in the host's PID namespace (docker run --pid=host) to measure every job",
                crate::console::numbers(&pids, ", ")
            ));
        }
        if !self.core.gpu.hidden.detected {
            return;
        }
        let mut jobs_on: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for (key, job) in &self.core.running {
            for gpu in &job.gpus {
                jobs_on.entry(*gpu).or_default().push(key.clone());
            }
        }
        let running = &self.core.running;
        attribution::per_gpu_fallback(seen, hidden, &jobs_on, |key, gpu| {
            let baseline = running.get(key)?.usage.hidden_baseline_mib.as_ref()?;
            Some(baseline.get(&gpu).copied().unwrap_or(0))
        });
    }

    /// Feeds the usage record (docs/BEHAVIOUR.md "Timeline"): each running job's MiB per GPU,
    /// and others' MiB per GPU (used less ours).
    fn record_usage(&mut self, snapshot: &GpuSnapshot) {
        let mut series: HashMap<(u32, Option<String>), u64> = HashMap::new();
        let mut ours: HashMap<u32, u64> = HashMap::new();
        for (key, job) in &self.core.running {
            for (&gpu, &mib) in &job.usage.current_mib {
                series.insert((gpu, Some(key.clone())), mib);
                *ours.entry(gpu).or_default() += mib;
            }
        }
        for gpu in snapshot.gpus.iter().filter(|g| self.cfg.allows(g.index)) {
            let others = gpu
                .used_mib
                .saturating_sub(ours.get(&gpu.index).copied().unwrap_or(0));
            series.insert((gpu.index, None), others);
        }
        self.io.usage.observe(self.now().ts, &series);
        // Personal reservations on our GPUs, for the timeline.
        let seen: Vec<(u32, u64, crate::timeline::usage::SeenReservation)> = self
            .ledger_side
            .ledger
            .iter()
            .flat_map(|ledger| &ledger.reservations)
            .filter_map(|held| {
                let r = &held.reservation;
                let gpu = snapshot.gpus.iter().find(|g| g.uuid == r.gpu_uuid)?;
                self.cfg.allows(gpu.index).then(|| {
                    let seen = crate::timeline::usage::SeenReservation {
                        user: held.user.clone(),
                        id: r.id,
                        since: r.since_ms as f64 / 1000.0,
                        until: r.until_ms as f64 / 1000.0,
                        note: r.note.clone(),
                    };
                    (gpu.index, r.mib, seen)
                })
            })
            .collect();
        self.io.usage.observe_reservations(self.now().ts, &seen);
    }

    /// Per-GPU accumulators for the summary: samples, busy samples, used MiB.
    fn record_gpu_stats(&mut self, snapshot: &GpuSnapshot) {
        for gpu in &snapshot.gpus {
            if !self.cfg.allows(gpu.index) {
                continue;
            }
            let busy = self
                .core
                .running
                .values()
                .any(|j| j.gpus.contains(&gpu.index));
            let stats = self.core.gpu.stats.entry(gpu.index).or_default();
            stats.samples += 1;
            stats.used_sum_mib += gpu.used_mib as f64;
            if busy {
                stats.busy += 1;
            }
        }
    }

    /// The last progress marker in each running job's log; a log that
    /// has not grown since it was last looked at is not opened (a flood
    /// of short jobs that print nothing costs one `stat` each).
    fn read_progress(&mut self) {
        for job in self.core.running.values_mut() {
            let len = std::fs::symlink_metadata(&job.log.path)
                .ok()
                .filter(std::fs::Metadata::is_file)
                .map(|m| m.len());
            let Some(len) = len.filter(|&len| len != job.log.looked_at) else {
                continue;
            };
            job.log.looked_at = len;
            if let Some(progress) = progress::parse(&files::read_tail(
                &job.log.path,
                job.log.offset,
                PROGRESS_TAIL_BYTES,
            )) {
                job.usage.progress = Some(progress);
            }
        }
    }
}

/// What one snapshot's GPU processes say of our jobs.
struct Processes {
    /// Memory per job and GPU, and everyone else's processes.
    seen: attribution::Attribution<String>,
    /// The process group of each pid that could be read.
    group_of: HashMap<u32, u32>,
    /// The pids this PID namespace cannot see (a container's).
    hidden: HashSet<u32>,
    /// Each job's own utilisation where its GPUs report it per process.
    own_util: attribution::OwnUtil<String>,
}

/// Takes one sample of a job in: its current MiB per GPU (from
/// attribution), its peaks, and the mean utilization of its GPUs; and
/// its own utilisation: `own` (percent, what the driver measured of its
/// processes) when known, else its GPUs' when it is `alone` on them.
fn observe_usage(
    job: &mut Running,
    current: BTreeMap<u32, u64>,
    util: &HashMap<u32, Option<u32>>,
    own: Option<f64>,
    alone: bool,
) {
    job.usage.samples += 1;
    for (&gpu, &mib) in &current {
        let peak = job.usage.peak_mib.entry(gpu).or_insert(0);
        *peak = (*peak).max(mib);
    }
    job.usage.current_mib = current;
    let utils: Vec<f64> = job
        .gpus
        .iter()
        .filter_map(|g| util.get(g).copied().flatten())
        .map(f64::from)
        .collect();
    let mut own = own;
    if !utils.is_empty() {
        let mean = utils.iter().sum::<f64>() / utils.len() as f64;
        job.usage.util_sum += mean;
        job.usage.util_samples += 1;
        if alone {
            own = own.or(Some(mean));
        }
    }
    if let Some(own) = own {
        job.usage.own_util_sum += own;
        job.usage.own_util_samples += 1;
    }
}

/// The "exceeds declared VRAM" warning (at once, docs/BEHAVIOUR.md "Monitoring") and `-v`
/// growth lines for one job.
fn check_declaration(report: &mut Reporting, job: &mut Running, tolerance: f64, verbose: bool) {
    let Some(peak) = job.usage.peak_max_mib() else {
        return;
    };
    if let Some(declared) = job.request.vram_mib
        && !job.usage.warned_over
        && crate::policy::outcome::beyond_declaration(declared, peak, tolerance)
    {
        job.usage.warned_over = true;
        report.warn(format!(
            "job {} exceeds declared VRAM: peak {peak} MiB > {declared} MiB declared (+{:.0}%); its GPU neighbours may run out of memory — raise vram= for this job",
            job.no,
            (peak as f64 / declared as f64 - 1.0) * 100.0
        ));
    }
    if verbose && peak >= job.usage.reported_peak_mib + VERBOSE_STEP_MIB {
        job.usage.reported_peak_mib = peak;
        report.say(format!(
            "job {} VRAM peak {peak} MiB ({})",
            job.no,
            job.usage
                .current_mib
                .iter()
                .map(|(g, m)| format!("GPU{g} now {m} MiB"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
}
