//! The status document of one round (status.json, docs/BEHAVIOUR.md "Board and terminal"): built from the
//! journal's fold, the jobs file's specs, the running attempts and the GPU
//! state. The waiting and finished part ([`QueueView`]) changes only when
//! the journal or the queue does, so it is cached by the caller and rebuilt
//! only then.

use crate::allocation::{self, GpuLoad};
use crate::clock::now_ts;
use crate::jobspec::JobSpec;
use crate::journal::{Journal, KeyState, Phase};
use crate::model::{JobState, SchedulerState};
use crate::policy::learned;
use crate::policy::queue;
use crate::process::Pgid;
use crate::progress;
use crate::state::{Config, Core, LastRound, Proc, Running};
use crate::view::report;
use crate::view::status::StarvationHoldStatus;
use crate::view::status::{self, GpuStatus, JobStatus, ProgressStatus, SchedulerStatus, StatusDoc};
use std::collections::BTreeMap;

/// Which journal, queue and running set a [`QueueView`] was built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueGeneration {
    /// [`Journal::generation`].
    pub journal: u64,
    /// [`JobsFile::generation`].
    pub jobs_file: u64,
    /// Number of running attempts (a job stopped at shutdown leaves
    /// `running` without a journal event).
    pub running: usize,
    /// Bumped when the pending jobs' wait reasons change.
    pub reasons: u64,
    /// Bumped when a learned prediction may have changed (docs/BEHAVIOUR.md "Learned VRAM").
    pub learned: u64,
}

/// Waiting and finished jobs as `status.json` lists them, with the counts.
pub struct QueueView {
    /// What it was built from.
    pub generation: QueueGeneration,
    /// Jobs per state word, running ones excluded.
    pub counts: BTreeMap<String, usize>,
    /// The first [`status::JSON_LIST_LIMIT`] waiting jobs in queue order.
    pub waiting: Vec<JobStatus>,
    /// The last [`status::JSON_LIST_LIMIT`] finished jobs in file order.
    pub finished: Vec<JobStatus>,
}

/// Everything a view is built from, borrowed from the scheduler.
pub struct ViewInput<'a> {
    /// The run's settings.
    pub cfg: &'a Config,
    /// The journal and its fold.
    pub journal: &'a Journal,
    /// The decision state: the jobs file, running attempts, GPUs, learned
    /// sizes, the mode, pause and drain.
    pub core: &'a Core,
    /// What the last placement round decided: why jobs wait.
    pub round: &'a LastRound,
    /// The GPU loads placement sees now.
    pub loads: Vec<GpuLoad>,
    /// What ended and went wrong during this run.
    pub this_run: &'a crate::state::ThisRun,
    /// Expected ends, starts and free GPUs (docs/BEHAVIOUR.md "Expected
    /// times").
    pub expected: &'a crate::policy::expected::Expectations,
    /// The scheduler's state word.
    pub state: SchedulerState,
    /// When the scheduler started (Unix seconds).
    pub started_ts: f64,
    /// Ticks of the loop so far.
    pub ticks: u64,
    /// Whether the backend is the simulator, and its description.
    pub backend: (bool, String),
    /// Other schedulers' trusted bookings (docs/BEHAVIOUR.md "Sharing a box").
    pub foreign: &'a [crate::ledger::Foreign],
    /// The simulated GPUs' directory, with `--sim`.
    pub sim_dir: Option<&'a std::path::Path>,
}

impl ViewInput<'_> {
    /// Which journal, queue and running set the view reflects.
    pub fn generation(&self) -> QueueGeneration {
        QueueGeneration {
            journal: self.journal.generation(),
            jobs_file: self.core.jobs.generation,
            running: self.core.running.len(),
            reasons: self.round.reasons_generation,
            learned: self.core.learned.generation,
        }
    }
}

/// The waiting and finished jobs of the queue (running ones excluded).
pub fn queue_view(input: &ViewInput) -> QueueView {
    let mut view = QueueView {
        generation: input.generation(),
        counts: BTreeMap::new(),
        waiting: Vec::new(),
        finished: Vec::new(),
    };
    let mut last_finished = std::collections::VecDeque::new();
    // Counted by the state's word without a string per job: a sweep has
    // a million lines.
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    let ranked = input.core.jobs.rank.is_some();
    for (index, spec) in input.core.jobs.specs.iter().enumerate() {
        let Some(state) = input.core.jobs.state_of(index, input.journal) else {
            continue;
        };
        // Only a started job can be running (an attempt enters `running`
        // after its `started` event): no lookup of every waiting key.
        if matches!(state.phase, Phase::Started(_))
            && input.core.running.contains_key(spec.key.as_str())
        {
            continue;
        }
        let job_state = queue::job_state(state, false);
        if job_state.is_terminal() {
            if last_finished.len() == status::JSON_LIST_LIMIT {
                last_finished.pop_front();
            }
            last_finished.push_back(index);
        } else if !ranked && view.waiting.len() < status::JSON_LIST_LIMIT {
            view.waiting
                .push(job_status(input, &spec.key, Some(spec), state));
        }
        *counts.entry(job_state.as_str()).or_default() += 1;
    }
    view.counts = counts
        .into_iter()
        .map(|(k, n)| (k.to_string(), n))
        .collect();
    if ranked {
        // The first waiting jobs in queue order (docs/BEHAVIOUR.md "Queue
        // policy"): by priority, then line.
        for index in input.core.jobs.in_queue_order() {
            if view.waiting.len() == status::JSON_LIST_LIMIT {
                break;
            }
            let spec = &input.core.jobs.specs[index];
            let Some(state) = input.core.jobs.state_of(index, input.journal) else {
                continue;
            };
            let running = matches!(state.phase, Phase::Started(_))
                && input.core.running.contains_key(spec.key.as_str());
            if !running && !queue::job_state(state, false).is_terminal() {
                view.waiting
                    .push(job_status(input, &spec.key, Some(spec), state));
            }
        }
    }
    for index in last_finished {
        let spec = &input.core.jobs.specs[index];
        if let Some(state) = input.core.jobs.state_of(index, input.journal) {
            view.finished
                .push(job_status(input, &spec.key, Some(spec), state));
        }
    }
    view
}

/// One job as `status.json` shows it, from its spec (if its line is in the
/// file), its journal state and its running attempt.
pub fn job_status(
    input: &ViewInput,
    key: &str,
    spec: Option<&JobSpec>,
    state: &KeyState,
) -> JobStatus {
    let mut job = JobStatus {
        no: state.no,
        key: key.to_string(),
        state: queue::job_state(state, false),
        command: spec
            .map(|s| crate::console::shown_command(&s.command).into_owned())
            .unwrap_or_default(),
        name: spec.and_then(|s| s.name().map(str::to_string)),
        gpus: Vec::new(),
        gpus_wanted: spec.map_or(1, |s| s.gpus),
        vram_mib: spec.and_then(|s| s.vram_mib).max(state.next_vram()),
        current_mib: BTreeMap::new(),
        peak_mib: BTreeMap::new(),
        attempt: state.attempts,
        retries_used: state.retries_used,
        exceeded_declaration: false,
        no_gpu_memory: false,
        last_line: None,
        declaration: None,
        queued: Some(state.seen_ts),
        started: state.first_started_ts(),
        finished: None,
        returncode: None,
        duration_s: None,
        avg_util: None,
        log: None,
        progress: None,
        note: None,
        reason: None,
        preempted_s: (state.preempted_s() > 0.0).then_some(state.preempted_s()),
        vram_source: None,
        expected_end: None,
        expected_start: None,
        expected_source: None,
    };
    if let Some(run) = input.core.running.get(key) {
        fill_running(&mut job, run, input.cfg.tolerance);
    } else if job.state.is_waiting() {
        job.reason = input.round.wait_reasons.get(key).map(ToString::to_string);
        if let Some(spec) = spec.filter(|s| input.cfg.is_auto(s)) {
            let family = learned::family_of(&spec.command, spec.family());
            let prediction = input
                .core
                .learned
                .families
                .predict(&family, input.cfg.place.spike_buffer);
            job.vram_mib = prediction.mib.max(state.next_vram());
            job.vram_source = Some(prediction.to_string());
        }
    } else if let Phase::Done(done) = &state.phase {
        job.gpus = crate::model::gpus_of_mask(done.gpu_mask);
        job.vram_mib = done.vram_mib;
        job.peak_mib = BTreeMap::from([("max".to_string(), done.peak_mib)]);
        job.finished = Some(done.ts);
        job.returncode = done.returncode;
        job.duration_s = Some(done.duration_s);
        job.avg_util = done.avg_util;
        job.no_gpu_memory = done.no_gpu_memory;
        job.last_line = done.last_line.as_deref().map(str::to_string);
        job.declaration = done.declaration;
        job.exceeded_declaration = done
            .declaration
            .is_some_and(|d| d.fit == crate::model::Fit::Exceeded);
        // A job that ran has a log (a CPU-only or Slurm job's without GPUs
        // in its name); one that never started has none.
        if state.attempts > 0 {
            let log = input
                .cfg
                .log_dir
                .join(report::log_name(state.no, &job.gpus));
            job.log = Some(log.display().to_string());
        }
    }
    job
}

/// The fields of a running job.
fn fill_running(job: &mut JobStatus, run: &Running, tolerance: f64) {
    let elapsed = run.started.elapsed().as_secs_f64();
    job.state = JobState::Running;
    job.command = crate::console::shown_command(&run.command).into_owned();
    job.gpus = run.gpus.clone();
    job.vram_mib = run.request.vram_mib;
    job.vram_source = run.learned.as_ref().map(|(_, p)| p.to_string());
    job.attempt = run.attempt;
    job.current_mib = run
        .usage
        .current_mib
        .iter()
        .map(|(g, m)| (g.to_string(), *m))
        .collect();
    job.peak_mib = run
        .gpus
        .iter()
        .map(|g| (g.to_string(), run.usage.peak_mib.get(g).copied()))
        .collect();
    job.exceeded_declaration = run
        .request
        .vram_mib
        .zip(run.usage.peak_max_mib())
        .is_some_and(|(declared, peak)| {
            crate::policy::outcome::beyond_declaration(declared, peak, tolerance)
        });
    job.duration_s = Some(elapsed);
    job.avg_util = run.usage.avg_util();
    job.log = Some(run.log.path.display().to_string());
    job.progress = run.usage.progress.as_ref().map(|p| ProgressStatus {
        percent: (p.fraction * 1000.0).round() / 10.0,
        label: p.label.clone(),
        eta_s: progress::eta_s(p, elapsed).map(|e| e.round()),
    });
    job.note = match (&run.proc, run.kill_reason()) {
        (_, Some(reason)) => Some(format!("stopping: {}", reason.as_str())),
        (Proc::Adopted { .. }, None) => Some(orphan_note(run.pgid)),
        (Proc::Slurm(_), None) => Some(match run.attempt {
            1 => run.handle_text(),
            n => format!("{}, attempt {n}", run.handle_text()),
        }),
        _ if run.attempt > 1 => Some(format!("attempt {}", run.attempt)),
        _ => None,
    };
    if let Some(unenforced) = &run.unenforced {
        job.note = Some(match job.note.take() {
            Some(note) => format!("{note}; {unenforced}"),
            None => unenforced.clone(),
        });
    }
}

fn orphan_note(pgid: Pgid) -> String {
    format!("from a previous scheduler, pgid {pgid}")
}

/// The starvation hold in force, while its job still waits in the file.
fn starvation_hold_status(input: &ViewInput) -> Option<StarvationHoldStatus> {
    let (key, gpus) = input.journal.starvation_hold()?;
    let state = input.journal.state(key)?;
    let waiting = !input.core.running.contains_key(key)
        && matches!(state.phase, Phase::Waiting)
        && input.core.jobs.spec(key).is_some();
    waiting.then(|| StarvationHoldStatus {
        job: state.no,
        gpus: gpus.clone(),
    })
}

/// The status document of this round, from the cached queue part `view`
/// and the live running jobs and GPUs.
pub fn status_doc(input: &ViewInput, view: &QueueView) -> StatusDoc {
    let mut counts = view.counts.clone();
    let mut jobs: Vec<JobStatus> = Vec::new();
    for (key, run) in &input.core.running {
        *counts.entry(JobState::Running.as_str().into()).or_default() += 1;
        if let Some(state) = input.journal.state(key) {
            jobs.push(job_status(input, key, input.core.jobs.spec(key), state));
        } else {
            tracing::debug!("running job {} has no journal state", run.no);
        }
    }
    jobs.sort_by_key(|j| j.no);
    jobs.extend(view.waiting.iter().cloned());
    for job in &mut jobs {
        let (end, start) = (
            input.expected.running.get(&job.key),
            input.expected.waiting.get(&job.key),
        );
        if let Some(estimate) = end.or(start) {
            job.expected_end = end.map(|e| e.at.round());
            job.expected_start = start.map(|e| e.at.round());
            job.expected_source = Some(estimate.source.as_str().to_string());
        }
    }
    jobs.extend(view.finished.iter().cloned());
    let mut finished_this_run: BTreeMap<String, u64> = BTreeMap::new();
    for (status, _) in input.this_run.ended.values() {
        *finished_this_run.entry(status.as_str().into()).or_default() += 1;
    }
    StatusDoc {
        schema: status::SCHEMA.into(),
        updated: now_ts(),
        scheduler: SchedulerStatus {
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").into(),
            started: input.started_ts,
            poll_s: input.cfg.poll.as_secs_f64(),
            backend: if input.backend.0 { "sim" } else { "nvml" }.into(),
            backend_detail: input.backend.1.clone(),
            sim_dir: input.sim_dir.map(|d| d.display().to_string()),
            state: input.state,
            paused_reason: input.core.mode.paused_reason().map(str::to_string),
            jobs_file_problem: input.core.jobs.source.last_error.clone(),
            queue_paused: input.core.control.paused,
            drained: input.core.control.drained.iter().copied().collect(),
            hidden_processes: input.core.gpu.hidden.detected.then(|| {
                "NVML reports GPU processes this PID namespace cannot see; a job alone on its GPU is measured by that GPU's memory, others show n/a (run in the host's PID namespace to measure every job)".to_string()
            }),
            starvation_hold: starvation_hold_status(input),
            backfill: input.round.head.as_ref().and_then(|(key, start, gpus)| {
                Some(status::BackfillStatus {
                    job: input.journal.state(key)?.no,
                    start: *start,
                    gpus: gpus.clone(),
                })
            }),
            cwd: input.cfg.workdir.as_ref().map(|d| d.display().to_string()),
            command: input.cfg.command.clone(),
            jobs_file: input.core.jobs.path.display().to_string(),
            log_dir: input.cfg.log_dir.display().to_string(),
            watch: input.cfg.watch,
            ticks: input.ticks,
        },
        counts,
        finished_this_run,
        gpus: gpu_statuses(input),
        jobs,
        box_rules: None,
        oom_blame: input
            .this_run
            .culprits
            .iter()
            .map(|(victim, c)| status::OomBlame {
                victim: *victim,
                culprit: c.job,
                peak_mib: c.peak_mib,
                declared_mib: c.declared_mib,
            })
            .collect(),
    }
}

/// Every GPU the scheduler may use, with its load and this run's figures.
fn gpu_statuses(input: &ViewInput) -> Vec<GpuStatus> {
    let snapshot_gpus = input
        .core
        .gpu
        .snapshot
        .as_ref()
        .map(|s| s.gpus.as_slice())
        .unwrap_or_default();
    let spike_buffer = input.cfg.place.spike_buffer;
    input
        .loads
        .iter()
        .map(|load| {
            let info = snapshot_gpus.iter().find(|g| g.index == load.index);
            let fault = input.core.gpu.health.faulted.get(&load.index);
            let stats = input
                .core
                .gpu
                .stats
                .get(&load.index)
                .filter(|s| s.samples > 0);
            GpuStatus {
                index: load.index,
                label: crate::model::device_label(load.index),
                profile: info.and_then(|g| g.profile.clone()),
                uuid: info.map(|g| g.uuid.clone()).unwrap_or_default(),
                name: info.map(|g| g.name.clone()).unwrap_or_default(),
                // A GPU that never answered has no size to show.
                total_mib: match (info, fault) {
                    (None, Some(f)) => f.total_mib,
                    _ => load.total_mib,
                },
                used_mib: load.used_mib,
                external_mib: allocation::effective_external_mib(load, spike_buffer),
                headroom_mib: allocation::open_headroom_mib(load, &input.cfg.place),
                closed: allocation::is_closed(load, &input.cfg.place),
                drained: input.core.control.drained.contains(&load.index),
                fault: fault.map(|f| status::GpuFaultStatus {
                    reason: f.reason.clone(),
                    since: f.since,
                    good_samples: f.good_samples,
                    reopen_after: crate::gpu::health::REOPEN_AFTER_SAMPLES,
                    lasting: f.lasting,
                }),
                util_percent: info.and_then(|g| g.util_percent),
                jobs: input
                    .core
                    .running
                    .values()
                    .filter(|j| j.gpus.contains(&load.index))
                    .map(|j| j.no)
                    .collect(),
                busy_fraction: stats.map(|s| f64::from(s.busy) / f64::from(s.samples)),
                mean_used_mib: stats.map(|s| (s.used_sum_mib / f64::from(s.samples)).round()),
                booked_by_others: info
                    .map(|g| crate::ledger::per_user(input.foreign, &g.uuid))
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(user, mib, jobs)| status::OtherBooking { user, mib, jobs })
                    .collect(),
                left_behind: input
                    .core
                    .gpu
                    .left_behind
                    .iter()
                    .filter(|l| l.gpu == load.index)
                    .cloned()
                    .collect(),
                expected_free: input.expected.gpus.get(&load.index).map(|e| e.at.round()),
                expected_free_source: input
                    .expected
                    .gpus
                    .get(&load.index)
                    .map(|e| e.source.as_str().to_string()),
            }
        })
        .collect()
}
