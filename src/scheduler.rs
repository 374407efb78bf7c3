//! The scheduler's loop (SPEC §2–§7). It blocks until something happens — a
//! job exited (SIGCHLD), the jobs file changed, a signal arrived, a kill or
//! timeout deadline is due, or the next GPU sample is due — then runs one
//! tick: a fixed list of named phases over one [`Scheduler`]. The order of
//! the calls in [`Scheduler::tick`] is the documentation of the loop.

use crate::allocation::{self, GpuLoad, Occupant, PlaceOptions, Placement, Request};
use crate::cli::RunArgs;
use crate::gpu::{GpuBackend, GpuSnapshot};
use crate::jobspec::{self, JobSpec};
use crate::journal::{DoneStatus, Event, Journal, KeyState, Phase, Record, now_ts};
use crate::process::{self, GroupIdentity, Pgid, Termination};
use crate::progress::{self, Progress};
use crate::report::{self, BoardRow, BoardSection, BoardState, say, warn};
use crate::status::{self, GpuStatus, JobStatus, ProgressStatus, SchedulerStatus, StatusDoc};
use anyhow::Context;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

/// An error the user must fix before the scheduler can start (bad jobs
/// file, bad `--gpus`, no GPU backend). Exit code 2 (SPEC §7).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StartError(pub String);

/// Bytes of a failed job's log searched for a CUDA OOM signature (SPEC §6).
const OOM_TAIL_BYTES: u64 = 16 * 1024;

/// CUDA out-of-memory signatures, matched case-insensitively (SPEC §6).
const OOM_SIGNATURES: [&str; 6] = [
    "cuda out of memory",
    "torch.outofmemoryerror",
    "cuda error: out of memory",
    "cuda_error_out_of_memory",
    "cudaerrormemoryallocation",
    "resource_exhausted",
];

/// Bytes of a running job's log searched for a progress marker each round.
const PROGRESS_TAIL_BYTES: u64 = 8 * 1024;

/// Growth of a running job's peak (MiB) that `-v` reports (SPEC §7).
const VERBOSE_STEP_MIB: u64 = 256;

/// Failed GPU queries in a row after which dispatch pauses (SPEC §10).
const MAX_GPU_FAILURES: u32 = 5;

/// How often the jobs file's metadata is checked when no file watch could
/// be set up.
const FILE_POLL_FALLBACK: Duration = Duration::from_secs(1);

/// How long an empty jobs file, or one whose last line has no newline, must
/// stay unchanged before it is believed: such a read may have caught an
/// editor's save between truncate and write, and a half-written last line
/// must never run as a command.
const SETTLE: Duration = Duration::from_millis(250);

/// Whether a failed job's log tail shows a CUDA out-of-memory error.
pub fn is_oom(log_tail: &str) -> bool {
    let lower = log_tail.to_ascii_lowercase();
    OOM_SIGNATURES.iter().any(|sig| lower.contains(sig))
}

/// The declaration for the attempt after an OOM (SPEC §6): ceil(1.25 ×
/// max(peak, declaration)), at least ceil(1.25 × declaration). With neither
/// known the job stays undeclared.
pub fn oom_bump(declared_mib: Option<u64>, peak_mib: Option<u64>) -> Option<u64> {
    let base = declared_mib.max(peak_mib)?;
    Some((base * 5).div_ceil(4))
}

/// What woke the loop.
#[derive(Debug)]
enum Wake {
    /// SIGINT, SIGTERM or SIGCHLD.
    Signal(i32),
    /// Something happened to the jobs file or its directory.
    FileChanged,
}

/// Settings of one run, from the command line.
struct Config {
    log_dir: PathBuf,
    place: PlaceOptions,
    tolerance: f64,
    poll: Duration,
    watch: bool,
    oom_retries: u32,
    verbose: bool,
    allowed: Option<Vec<u32>>,
}

/// Why we are killing a running job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KillReason {
    Timeout,
    Cancel,
    Shutdown,
}

/// The process behind a running job.
enum Proc {
    /// Spawned by this scheduler.
    Child {
        child: Child,
        /// Where this attempt's output starts in the log (for the OOM tail).
        log_offset: u64,
        /// Set once the leader has been reaped.
        exit: Option<ExitStatus>,
    },
    /// A live process group left by a previous scheduler (SPEC §5).
    Orphan { identity: GroupIdentity },
}

/// VRAM and utilization observed for one running job.
#[derive(Default)]
struct Usage {
    /// Highest MiB seen per GPU (only from known per-process memory).
    peak: BTreeMap<u32, u64>,
    /// MiB in use per GPU at the last sample.
    current: BTreeMap<u32, u64>,
    util_sum: f64,
    util_samples: u32,
    /// GPU samples taken while it ran.
    samples: u32,
    warned_over: bool,
    reported_peak: u64,
}

/// One running attempt (States carry their data: everything about it lives
/// here, removed as a whole when it ends).
struct Running {
    no: u32,
    command: String,
    gpus: Vec<u32>,
    vram_mib: Option<u64>,
    attempt: u32,
    pgid: Pgid,
    started: Instant,
    log_path: Option<PathBuf>,
    proc: Proc,
    usage: Usage,
    timeout_at: Option<Instant>,
    kill: Option<(KillReason, Termination)>,
    /// The last progress marker read from its log.
    progress: Option<Progress>,
}

impl Running {
    fn peak_max(&self) -> Option<u64> {
        self.usage.peak.values().copied().max()
    }
}

/// The jobs file as last read successfully.
struct JobsFile {
    path: PathBuf,
    specs: Vec<JobSpec>,
    /// Hash of the last text read (parsed or not), to skip re-parsing.
    text_hash: Option<u64>,
    /// The last error reported, so each distinct error is warned once.
    last_error: Option<String>,
    /// (mtime, len, inode) at the last read.
    stamp: Option<(std::time::SystemTime, u64, u64)>,
    /// Bumped whenever the queue is replaced.
    generation: u64,
    /// A read that may have caught a save mid-write (empty file, or a last
    /// line without its newline): its stamp and when it was first seen.
    unsettled: Option<((std::time::SystemTime, u64, u64), Instant)>,
}

impl JobsFile {
    fn stamp_of(path: &Path) -> Option<(std::time::SystemTime, u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).ok()?;
        Some((meta.modified().ok()?, meta.len(), meta.ino()))
    }

    /// The line of job `key`, if it is in the file. A scan: look-ups by key
    /// are rare (completions, cancels, orphans) and a map of every key would
    /// cost more memory than the scan costs time.
    fn spec(&self, key: &str) -> Option<&JobSpec> {
        self.specs.iter().find(|s| s.key == key)
    }
}

/// GPU state carried between rounds.
#[derive(Default)]
struct GpuState {
    snapshot: Option<GpuSnapshot>,
    last_sample: Option<Instant>,
    /// Observed peak (MiB) of each external process, by (GPU, pid); a pid
    /// is forgotten when it disappears (SPEC §2).
    external_peaks: HashMap<(u32, u32), u64>,
    /// Failed queries in a row.
    failures: u32,
    /// Per-GPU accumulators for the summary.
    stats: BTreeMap<u32, GpuStats>,
}

/// What the summary says about a GPU over the run.
#[derive(Default)]
struct GpuStats {
    samples: u32,
    /// Samples in which a job of ours was on it.
    busy: u32,
    used_sum_mib: f64,
}

/// The whole scheduler state.
pub struct Scheduler {
    cfg: Config,
    backend: Box<dyn GpuBackend>,
    sim_dir: Option<PathBuf>,
    journal: Journal,
    jobs: JobsFile,
    running: BTreeMap<String, Running>,
    gpu: GpuState,
    wakes: Receiver<Wake>,
    /// Kept alive for the run; `None` when the watch could not be set up.
    _watcher: Option<notify::RecommendedWatcher>,
    file_poll: Option<Duration>,
    /// Number of SIGINT/SIGTERM received.
    stop_signals: u32,
    /// Set when a sample should be taken now rather than at the next poll.
    sample_now: bool,
    /// Set when the queue or the GPUs changed since the last dispatch.
    dispatch_needed: bool,
    /// Keys that ended during this run, with their outcome.
    ended_this_run: HashMap<String, (DoneStatus, Option<i32>)>,
    dispatched_this_run: u32,
    paused_reason: Option<String>,
    started_ts: f64,
    /// The GPU loads placement last saw (to skip rounds that cannot differ).
    last_dispatch_loads: Option<Vec<GpuLoad>>,
    /// The waiting and finished part of the status document, which changes
    /// only when the journal or the queue does.
    queue_view: Option<QueueView>,
}

/// Waiting and finished jobs as `status.json` lists them, with the counts,
/// for one (journal generation, queue generation, running jobs).
struct QueueView {
    generation: (u64, u64, usize),
    counts: BTreeMap<String, usize>,
    waiting: Vec<JobStatus>,
    finished: Vec<JobStatus>,
}

/// Runs the scheduler until the queue drains (or forever with `--watch`)
/// and returns the exit code (SPEC §7).
///
/// Errors: [`StartError`] for problems the user must fix before starting
/// (exit 2); other errors are failures of the machine (journal not
/// writable, …).
pub fn run(
    args: &RunArgs,
    backend: Box<dyn GpuBackend>,
    sim_dir: Option<PathBuf>,
) -> anyhow::Result<i32> {
    let mut scheduler = Scheduler::start(args, backend, sim_dir)?;
    loop {
        if let Some(code) = scheduler.tick()? {
            return Ok(code);
        }
        scheduler.wait();
    }
}

impl Scheduler {
    /// Sets everything up: log dir, journal (with `--fresh`), the jobs file,
    /// the first GPU snapshot, signal handling and the file watch; then
    /// resolves orphans of a previous scheduler.
    fn start(
        args: &RunArgs,
        backend: Box<dyn GpuBackend>,
        sim_dir: Option<PathBuf>,
    ) -> anyhow::Result<Scheduler> {
        let jobs_path = args
            .jobs_file
            .clone()
            .ok_or_else(|| StartError("no jobs file given".into()))?;
        let cfg = Config {
            log_dir: absolute(&args.log_dir),
            place: PlaceOptions {
                idle_threshold_mib: args.idle_threshold,
                margin_mib: args.margin,
                spike_buffer: args.spike_buffer,
                exclusive: args.exclusive,
            },
            tolerance: args.tolerance,
            poll: Duration::from_secs_f64(args.poll),
            watch: args.watch,
            oom_retries: args.oom_retries,
            verbose: args.verbose,
            allowed: args.gpus.as_ref().map(|g| g.0.clone()),
        };

        // The jobs file must be readable and valid to start (SPEC §7: exit 2).
        let text = std::fs::read_to_string(&jobs_path).map_err(|e| {
            StartError(format!(
                "cannot read jobs file {}: {e}",
                jobs_path.display()
            ))
        })?;
        let specs = jobspec::parse_jobs(&text)
            .map_err(|e| StartError(format!("{}: {e}", jobs_path.display())))?;
        if specs.is_empty() && !cfg.watch {
            return Err(StartError(format!(
                "{} has no jobs (add one command per line, or use --watch to wait for lines)",
                jobs_path.display()
            ))
            .into());
        }

        std::fs::create_dir_all(&cfg.log_dir)
            .with_context(|| format!("cannot create log directory {}", cfg.log_dir.display()))?;
        let journal_path = cfg.log_dir.join("journal.jsonl");
        if args.fresh && journal_path.exists() {
            std::fs::remove_file(&journal_path)
                .with_context(|| format!("cannot remove {}", journal_path.display()))?;
            say(&format!(
                "--fresh: removed {}; every job runs again",
                journal_path.display()
            ));
        }
        let replay_started = Instant::now();
        let (journal, replay) = Journal::open(&journal_path)?;
        tracing::info!(
            "journal replay: {} events in {:.0} ms",
            replay.events,
            replay_started.elapsed().as_secs_f64() * 1000.0
        );
        if !replay.bad_lines.is_empty() {
            warn(&format!(
                "{}: skipped {} torn or garbled line(s) (line {}); the rest of the journal is used",
                journal_path.display(),
                replay.bad_lines.len(),
                replay
                    .bad_lines
                    .iter()
                    .take(5)
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }

        let (tx, rx) = channel();
        spawn_signal_thread(tx.clone())?;
        let (watcher, file_poll) = match watch_jobs_file(&jobs_path, tx) {
            Ok(w) => (Some(w), None),
            Err(e) => {
                warn(&format!(
                    "cannot watch {} for changes ({e}); checking it every {}s instead",
                    jobs_path.display(),
                    FILE_POLL_FALLBACK.as_secs()
                ));
                (None, Some(FILE_POLL_FALLBACK))
            }
        };

        let mut scheduler = Scheduler {
            jobs: JobsFile {
                path: jobs_path.clone(),
                specs: Vec::new(),
                text_hash: None,
                last_error: None,
                stamp: None,
                unsettled: None,
                generation: 0,
            },
            cfg,
            backend,
            sim_dir,
            journal,
            running: BTreeMap::new(),
            gpu: GpuState::default(),
            wakes: rx,
            _watcher: watcher,
            file_poll,
            stop_signals: 0,
            sample_now: true,
            dispatch_needed: true,
            ended_this_run: HashMap::new(),
            dispatched_this_run: 0,
            paused_reason: None,
            started_ts: now_ts(),
            last_dispatch_loads: None,
            queue_view: None,
        };
        scheduler.jobs.stamp = JobsFile::stamp_of(&jobs_path);
        scheduler.install_specs(text, specs)?;

        // The first snapshot must work: it tells us the GPUs (SPEC §10).
        let snapshot = scheduler
            .backend
            .snapshot()
            .map_err(|e| StartError(format!("cannot read GPU state: {e:#}")))?;
        if snapshot.gpus.is_empty() {
            return Err(StartError(
                "no GPUs found (use --sim N to try gpusched without GPUs)".into(),
            )
            .into());
        }
        if let Some(allowed) = &scheduler.cfg.allowed {
            let present: Vec<u32> = snapshot.gpus.iter().map(|g| g.index).collect();
            if let Some(missing) = allowed.iter().find(|i| !present.contains(i)) {
                return Err(StartError(format!(
                    "--gpus names GPU {missing}, but this machine has GPU {}",
                    report::gpu_ids(&present, ", ")
                ))
                .into());
            }
        }
        say(&format!(
            "gpusched {} on {}; jobs file {}; logs in {}",
            env!("CARGO_PKG_VERSION"),
            scheduler.backend.describe(),
            jobs_path.display(),
            scheduler.cfg.log_dir.display()
        ));
        scheduler.resolve_orphans();
        scheduler.report_resume();
        // The first round works from this snapshot rather than asking the
        // GPUs again; taken in after the orphans, so their memory is theirs.
        scheduler.absorb(snapshot);
        scheduler.gpu.last_sample = Some(Instant::now());
        scheduler.sample_now = false;
        Ok(scheduler)
    }

    /// One tick: the phases in order.
    fn tick(&mut self) -> anyhow::Result<Option<i32>> {
        let now = Instant::now();
        self.reload_jobs_file()?;
        self.reap_children()?;
        self.drive_kills(now)?;
        self.enforce_timeouts(now);
        self.apply_cancels(now)?;
        if self.sample_due(now) {
            self.sample_gpus(now);
            self.check_orphans()?;
        }
        self.dispatch()?;
        self.publish();
        Ok(self.finished())
    }

    /// Blocks until the next wake or deadline, then records what woke us.
    fn wait(&mut self) {
        let now = Instant::now();
        let mut deadline = self.gpu.last_sample.map_or(now, |t| t + self.cfg.poll);
        for job in self.running.values() {
            if let Some((_, term)) = &job.kill {
                deadline = deadline.min(term.next_wake(now));
            }
            if let Some(t) = job.timeout_at {
                deadline = deadline.min(t);
            }
        }
        if let Some(every) = self.file_poll {
            deadline = deadline.min(now + every);
        }
        if let Some((_, since)) = self.jobs.unsettled {
            deadline = deadline.min((since + SETTLE).max(now + Duration::from_millis(10)));
        }
        let timeout = deadline.saturating_duration_since(now);
        let first = match self.wakes.recv_timeout(timeout) {
            Ok(wake) => Some(wake),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                std::thread::sleep(timeout);
                None
            }
        };
        for wake in first
            .into_iter()
            .chain(self.wakes.try_iter().collect::<Vec<_>>())
        {
            match wake {
                Wake::Signal(signal_hook::consts::SIGCHLD) => self.sample_now = true,
                Wake::Signal(signal) => self.on_stop_signal(signal),
                Wake::FileChanged => self.jobs.stamp = None,
            }
        }
    }

    /// SIGINT / SIGTERM (SPEC §7): the first stops every running group
    /// (SIGTERM, SIGKILL after the grace); the second skips the grace.
    fn on_stop_signal(&mut self, signal: i32) {
        self.stop_signals += 1;
        let name = if signal == signal_hook::consts::SIGINT {
            "Ctrl-C"
        } else {
            "SIGTERM"
        };
        let now = Instant::now();
        if self.stop_signals == 1 {
            say(&format!(
                "{name}: stopping {} running job(s) (SIGTERM now, SIGKILL after {}s; press Ctrl-C again to kill at once); they will run again on the next start",
                self.running.len(),
                process::KILL_GRACE.as_secs()
            ));
            for job in self.running.values_mut() {
                match &mut job.kill {
                    Some((reason, _)) => *reason = KillReason::Shutdown,
                    None => {
                        job.kill = Some((
                            KillReason::Shutdown,
                            Termination::start(job.pgid, process::KILL_GRACE, now),
                        ));
                    }
                }
            }
        } else {
            say(&format!("{name} again: killing every running job now"));
            for job in self.running.values_mut() {
                if let Some((_, term)) = &mut job.kill {
                    term.hurry();
                }
            }
        }
    }

    // ----- phase: jobs file -------------------------------------------------

    /// Re-reads the jobs file when it changed (SPEC §5). A file that fails to
    /// parse or disappears keeps the last good queue, with one warning per
    /// distinct problem.
    fn reload_jobs_file(&mut self) -> anyhow::Result<()> {
        let stamp = JobsFile::stamp_of(&self.jobs.path);
        if stamp.is_some() && stamp == self.jobs.stamp {
            return Ok(());
        }
        let text = match std::fs::read_to_string(&self.jobs.path) {
            Ok(text) => text,
            Err(e) => {
                self.jobs.stamp = stamp;
                self.warn_file_problem(format!(
                    "cannot read {} ({e}); keeping the last good queue, running jobs are unaffected",
                    self.jobs.path.display()
                ));
                return Ok(());
            }
        };
        let text_hash = hash_text(&text);
        if self.jobs.text_hash == Some(text_hash) {
            self.jobs.stamp = stamp;
            self.jobs.unsettled = None;
            return Ok(());
        }
        if text.is_empty() || !text.ends_with('\n') {
            let now = Instant::now();
            match (&self.jobs.unsettled, stamp) {
                (Some((seen, since)), Some(stamp)) if *seen == stamp && now >= *since + SETTLE => {}
                (Some((seen, _)), Some(stamp)) if *seen == stamp => return Ok(()),
                (_, Some(stamp)) => {
                    self.jobs.unsettled = Some((stamp, now));
                    return Ok(());
                }
                (_, None) => {}
            }
        }
        self.jobs.unsettled = None;
        self.jobs.stamp = stamp;
        match jobspec::parse_jobs(&text) {
            Ok(specs) => {
                if self.jobs.last_error.take().is_some() {
                    say(&format!(
                        "{} parses again; queue updated",
                        self.jobs.path.display()
                    ));
                }
                self.install_specs(text, specs)?;
            }
            Err(e) => {
                self.jobs.text_hash = Some(text_hash);
                self.warn_file_problem(format!(
                    "{}: {e} — edit ignored, keeping the last good queue",
                    self.jobs.path.display()
                ));
            }
        }
        Ok(())
    }

    fn warn_file_problem(&mut self, message: String) {
        if self.jobs.last_error.as_deref() != Some(message.as_str()) {
            warn(&message);
            self.jobs.last_error = Some(message);
        }
    }

    /// Makes `specs` the queue and records first sight of new jobs (one
    /// batch of `seen` events, one fsync).
    fn install_specs(&mut self, text: String, specs: Vec<JobSpec>) -> anyhow::Result<()> {
        let mut next_no = self.journal.next_no();
        let ts = now_ts();
        let new: Vec<&JobSpec> = specs
            .iter()
            .filter(|s| self.journal.state(&s.key).is_none())
            .collect();
        self.journal.reserve(new.len());
        // In chunks, so that a file of 20,000 new lines never holds 20,000
        // records in memory at once.
        for chunk in new.chunks(512) {
            let seen: Vec<Record> = chunk
                .iter()
                .map(|s| {
                    next_no += 1;
                    Record {
                        ts,
                        key: s.key.clone(),
                        event: Event::Seen {
                            no: next_no - 1,
                            command: s.command.clone(),
                        },
                    }
                })
                .collect();
            self.journal.append_all(&seen)?;
        }
        self.jobs.specs = specs;
        self.jobs.generation += 1;
        self.jobs.text_hash = Some(hash_text(&text));
        self.dispatch_needed = true;
        self.sample_now = true;
        Ok(())
    }

    // ----- phase: children ---------------------------------------------------

    /// Reaps children that exited. A job not being killed completes at once;
    /// one being killed completes when its whole group is gone.
    fn reap_children(&mut self) -> anyhow::Result<()> {
        let mut done = Vec::new();
        for (key, job) in &mut self.running {
            if let Proc::Child { child, exit, .. } = &mut job.proc
                && exit.is_none()
                && let Some(status) = child.try_wait()?
            {
                *exit = Some(status);
                if job.kill.is_none() {
                    done.push(key.clone());
                }
            }
        }
        for key in done {
            self.complete(&key)?;
        }
        Ok(())
    }

    /// Escalates kills whose grace expired and completes killed jobs whose
    /// group is gone (SPEC §3).
    fn drive_kills(&mut self, now: Instant) -> anyhow::Result<()> {
        let mut done = Vec::new();
        for (key, job) in &mut self.running {
            let Some((_, term)) = &mut job.kill else {
                continue;
            };
            term.poll(now);
            let leader_gone = match &job.proc {
                Proc::Child { exit, .. } => exit.is_some(),
                Proc::Orphan { identity } => !identity.is_alive(),
            };
            if leader_gone && term.group_gone(now) {
                done.push(key.clone());
            }
        }
        for key in done {
            self.complete(&key)?;
        }
        Ok(())
    }

    /// Starts the kill of jobs whose `timeout=` is reached (SPEC §6).
    fn enforce_timeouts(&mut self, now: Instant) {
        for job in self.running.values_mut() {
            if job.kill.is_none() && job.timeout_at.is_some_and(|t| now >= t) {
                warn(&format!(
                    "job {} reached its timeout after {}: SIGTERM to its process group {}, SIGKILL in {}s",
                    job.no,
                    report::human_duration(job.started.elapsed().as_secs_f64()),
                    job.pgid,
                    process::KILL_GRACE.as_secs()
                ));
                job.kill = Some((
                    KillReason::Timeout,
                    Termination::start(job.pgid, process::KILL_GRACE, now),
                ));
            }
        }
    }

    /// The `cancel` flag (SPEC §6): kills a running job, ends a pending one
    /// unrun.
    fn apply_cancels(&mut self, now: Instant) -> anyhow::Result<()> {
        let cancelled: Vec<String> = self
            .jobs
            .specs
            .iter()
            .filter(|s| s.cancel)
            .map(|s| s.key.clone())
            .collect();
        for key in cancelled {
            if let Some(job) = self.running.get_mut(&key) {
                if !matches!(
                    job.kill,
                    Some((KillReason::Cancel | KillReason::Shutdown, _))
                ) {
                    say(&format!(
                        "job {} cancelled: stopping process group {}",
                        job.no, job.pgid
                    ));
                    match &mut job.kill {
                        Some((reason, _)) => *reason = KillReason::Cancel,
                        None => {
                            job.kill = Some((
                                KillReason::Cancel,
                                Termination::start(job.pgid, process::KILL_GRACE, now),
                            ))
                        }
                    }
                }
                continue;
            }
            let Some(state) = self.journal.state(&key) else {
                continue;
            };
            if matches!(state.phase, Phase::Waiting) {
                let no = state.no;
                self.record_done(
                    &key,
                    DoneStatus::Cancelled,
                    None,
                    BTreeMap::new(),
                    None,
                    0.0,
                )?;
                say(&format!("⊘ job {no} cancelled before it started"));
            }
        }
        Ok(())
    }

    // ----- phase: GPUs --------------------------------------------------------

    fn sample_due(&self, now: Instant) -> bool {
        self.sample_now
            || self
                .gpu
                .last_sample
                .is_none_or(|t| now >= t + self.cfg.poll)
    }

    /// Asks the backend for a snapshot and takes it in; a failed query is
    /// warned about and, after several in a row, pauses dispatch (SPEC §10).
    fn sample_gpus(&mut self, now: Instant) {
        self.sample_now = false;
        self.gpu.last_sample = Some(now);
        let query_started = Instant::now();
        let result = self.backend.snapshot();
        tracing::debug!(
            "GPU snapshot in {:.2} ms",
            query_started.elapsed().as_secs_f64() * 1000.0
        );
        let snapshot = match result {
            Ok(snapshot) => snapshot,
            Err(e) => {
                self.gpu.failures += 1;
                // Every failure up to the pause, then one line a minute's
                // worth of rounds, so a dead driver does not flood the pane.
                if self.gpu.failures <= MAX_GPU_FAILURES || self.gpu.failures % 60 == 0 {
                    warn(&format!(
                        "GPU query failed ({} in a row): {e:#}; running jobs keep running",
                        self.gpu.failures
                    ));
                }
                if self.gpu.failures >= MAX_GPU_FAILURES && self.paused_reason.is_none() {
                    let reason = format!(
                        "GPU queries failed {} times in a row; no new job starts until they answer again",
                        self.gpu.failures
                    );
                    warn(&reason);
                    self.paused_reason = Some(reason);
                }
                return;
            }
        };
        self.absorb(snapshot);
    }

    /// Takes a snapshot in: attribution, peaks, utilization, warnings,
    /// progress, per-GPU statistics (SPEC §4).
    fn absorb(&mut self, snapshot: GpuSnapshot) {
        if self.gpu.failures > 0 {
            if self.paused_reason.take().is_some() {
                say("GPU queries answer again; dispatching resumes");
            }
            self.gpu.failures = 0;
        }
        // Map each GPU process to one of our jobs through its process group.
        let by_pgid: HashMap<i32, String> = self
            .running
            .iter()
            .map(|(key, job)| (job.pgid.0, key.clone()))
            .collect();
        let mut current: HashMap<String, BTreeMap<u32, u64>> = HashMap::new();
        let mut external_present: HashSet<(u32, u32)> = HashSet::new();
        for proc_ in &snapshot.processes {
            let owner = process::read_stat(proc_.pid as i32).and_then(|s| by_pgid.get(&s.pgrp));
            match owner {
                Some(key) => {
                    let entry = current.entry(key.clone()).or_default();
                    let slot = entry.entry(proc_.gpu).or_insert(0);
                    // Unknown per-process memory adds nothing: never a zero
                    // or bogus number, and the job's peak stays n/a.
                    if let Some(mib) = proc_.used_mib {
                        *slot += mib;
                    }
                    if proc_.used_mib.is_none() && *slot == 0 {
                        entry.remove(&proc_.gpu);
                    }
                }
                None => {
                    external_present.insert((proc_.gpu, proc_.pid));
                    if let Some(mib) = proc_.used_mib {
                        let peak = self
                            .gpu
                            .external_peaks
                            .entry((proc_.gpu, proc_.pid))
                            .or_insert(0);
                        *peak = (*peak).max(mib);
                    }
                }
            }
        }
        self.gpu
            .external_peaks
            .retain(|k, _| external_present.contains(k));
        let util: HashMap<u32, Option<u32>> = snapshot
            .gpus
            .iter()
            .map(|g| (g.index, g.util_percent))
            .collect();
        for (key, job) in &mut self.running {
            job.usage.samples += 1;
            job.usage.current = current.remove(key).unwrap_or_default();
            for (&gpu, &mib) in &job.usage.current {
                let peak = job.usage.peak.entry(gpu).or_insert(0);
                *peak = (*peak).max(mib);
            }
            let utils: Vec<f64> = job
                .gpus
                .iter()
                .filter_map(|g| util.get(g).copied().flatten())
                .map(f64::from)
                .collect();
            if !utils.is_empty() {
                job.usage.util_sum += utils.iter().sum::<f64>() / utils.len() as f64;
                job.usage.util_samples += 1;
            }
            let Some(peak) = job.peak_max() else { continue };
            if let Some(declared) = job.vram_mib
                && !job.usage.warned_over
                && peak as f64 > declared as f64 * (1.0 + self.cfg.tolerance)
            {
                job.usage.warned_over = true;
                warn(&format!(
                    "job {} exceeds declared VRAM: peak {peak} MiB > {declared} MiB declared (+{:.0}%); its GPU neighbours may run out of memory — raise vram= for this job",
                    job.no,
                    (peak as f64 / declared as f64 - 1.0) * 100.0
                ));
            }
            if self.cfg.verbose && peak >= job.usage.reported_peak + VERBOSE_STEP_MIB {
                job.usage.reported_peak = peak;
                say(&format!(
                    "job {} VRAM peak {peak} MiB ({})",
                    job.no,
                    job.usage
                        .current
                        .iter()
                        .map(|(g, m)| format!("GPU{g} now {m} MiB"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        for gpu in &snapshot.gpus {
            if self
                .cfg
                .allowed
                .as_ref()
                .is_some_and(|a| !a.contains(&gpu.index))
            {
                continue;
            }
            let stats = self.gpu.stats.entry(gpu.index).or_default();
            stats.samples += 1;
            stats.used_sum_mib += gpu.used_mib as f64;
            if self.running.values().any(|j| j.gpus.contains(&gpu.index)) {
                stats.busy += 1;
            }
        }
        for job in self.running.values_mut() {
            if let (Some(path), Proc::Child { log_offset, .. }) = (&job.log_path, &job.proc) {
                if let Some(progress) =
                    progress::parse(&read_tail(path, *log_offset, PROGRESS_TAIL_BYTES))
                {
                    job.progress = Some(progress);
                }
            }
        }
        self.gpu.snapshot = Some(snapshot);
    }

    // ----- phase: orphans -----------------------------------------------------

    /// At start: every job whose last journal word is `started` belonged to a
    /// previous scheduler. A live group keeps its GPUs and is waited for; a
    /// dead one is recorded `interrupted` and the job is pending again.
    fn resolve_orphans(&mut self) {
        let started: Vec<(String, KeyState)> = self
            .journal
            .states()
            .filter(|(_, s)| matches!(s.phase, Phase::Started(_)))
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        for (key, state) in started {
            let Phase::Started(info) = &state.phase else {
                continue;
            };
            let identity = GroupIdentity {
                pgid: Pgid(info.pgid),
                start_ticks: info.start_ticks,
                boot_id: info.boot_id.clone(),
            };
            if identity.is_alive() {
                say(&format!(
                    "job {} is still running from a previous scheduler (process group {}); not starting it again, its GPU {} stay reserved until it ends",
                    state.no,
                    info.pgid,
                    report::gpu_ids(&info.gpus, ",")
                ));
                let elapsed = (now_ts() - info.ts).max(0.0);
                let timeout_at = self
                    .jobs
                    .spec(&key)
                    .and_then(|s| s.timeout_s)
                    .map(|t| Instant::now() + Duration::from_secs_f64((t - elapsed).max(0.0)));
                self.running.insert(
                    key.clone(),
                    Running {
                        no: state.no,
                        command: info
                            .command
                            .clone()
                            .or_else(|| self.jobs.spec(&key).map(|s| s.command.clone()))
                            .unwrap_or_default(),
                        gpus: info.gpus.clone(),
                        vram_mib: info.vram_mib,
                        attempt: state.attempts,
                        pgid: identity.pgid,
                        started: Instant::now()
                            .checked_sub(Duration::from_secs_f64(elapsed))
                            .unwrap_or_else(Instant::now),
                        log_path: None,
                        proc: Proc::Orphan { identity },
                        usage: Usage::default(),
                        timeout_at,
                        kill: None,
                        progress: None,
                    },
                );
            } else if let Err(e) = self.journal.append(&key, Event::Interrupted {}) {
                warn(&format!(
                    "cannot record job {} as interrupted: {e:#}",
                    state.no
                ));
            } else {
                say(&format!(
                    "job {} was interrupted with a previous scheduler (process group {} is gone); it is pending again",
                    state.no, info.pgid
                ));
            }
        }
    }

    /// Each sampling round: an orphan whose group is gone completes.
    fn check_orphans(&mut self) -> anyhow::Result<()> {
        let gone: Vec<String> = self
            .running
            .iter()
            .filter(|(_, j)| j.kill.is_none())
            .filter(|(_, j)| matches!(&j.proc, Proc::Orphan { identity } if !identity.is_alive()))
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            self.complete(&key)?;
        }
        Ok(())
    }

    /// Says once at start how many jobs of the file the journal already
    /// finished (SPEC §5 "Resume").
    fn report_resume(&self) {
        let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
        for spec in &self.jobs.specs {
            if let Some(KeyState {
                phase: Phase::Done(finished),
                ..
            }) = self.journal.state(&spec.key)
            {
                *counts.entry(finished.status.as_str()).or_default() += 1;
            }
        }
        let total: usize = counts.values().sum();
        if total > 0 {
            say(&format!(
                "resuming: {total} of {} job(s) already finished in {} ({}); skipping them (--fresh runs everything again)",
                self.jobs.specs.len(),
                self.journal.path().display(),
                counts
                    .iter()
                    .map(|(s, n)| format!("{n} {s}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }

    // ----- phase: completion --------------------------------------------------

    /// Ends a running attempt: decides its outcome, journals it, prints the
    /// completion line (SPEC §4, §6).
    fn complete(&mut self, key: &str) -> anyhow::Result<()> {
        let Some(job) = self.running.remove(key) else {
            return Ok(());
        };
        self.sample_now = true;
        self.dispatch_needed = true;
        let duration = job.started.elapsed().as_secs_f64();
        let reason = job.kill.as_ref().map(|(r, _)| *r);
        if reason == Some(KillReason::Shutdown) {
            return Ok(()); // nothing recorded: the next start re-runs it
        }
        let peaks: BTreeMap<u32, Option<u64>> = job
            .gpus
            .iter()
            .map(|g| (*g, job.usage.peak.get(g).copied()))
            .collect();
        let avg_util = (job.usage.util_samples > 0)
            .then(|| job.usage.util_sum / f64::from(job.usage.util_samples));
        let (returncode, exit_text) = match &job.proc {
            Proc::Child {
                exit: Some(status), ..
            } => exit_code(status),
            _ => (None, "exit status unknown".to_string()),
        };
        let status = match (reason, &job.proc) {
            (Some(KillReason::Cancel), _) => DoneStatus::Cancelled,
            (Some(KillReason::Timeout), _) => DoneStatus::Timeout,
            (_, Proc::Orphan { .. }) => {
                // An orphan's exit status died with the previous scheduler.
                self.journal.append(key, Event::Interrupted {})?;
                say(&format!(
                    "job {} from a previous scheduler ended (process group {} is gone); its outcome is unknown, so it runs again",
                    job.no, job.pgid
                ));
                return Ok(());
            }
            _ if returncode == Some(0) => DoneStatus::Ok,
            (_, Proc::Child { log_offset, .. }) => {
                let tail = job
                    .log_path
                    .as_deref()
                    .map(|p| read_tail(p, *log_offset, OOM_TAIL_BYTES))
                    .unwrap_or_default();
                if is_oom(&tail) {
                    let state = self.journal.state(key);
                    let used = state.map_or(0, |s| s.oom_attempts);
                    let allowed = self
                        .jobs
                        .spec(key)
                        .and_then(|s| s.retries)
                        .unwrap_or(self.cfg.oom_retries);
                    if used < allowed {
                        let next = oom_bump(job.vram_mib, job.peak_max());
                        self.journal.append(
                            key,
                            Event::Oom {
                                attempts: used + 1,
                                next_vram: next,
                            },
                        )?;
                        warn(&format!(
                            "↻ job {} ran out of CUDA memory after {} ({}); retry {} of {allowed} with vram {}",
                            job.no,
                            report::human_duration(duration),
                            report::peaks_text(&peaks),
                            used + 1,
                            next.map_or("undeclared".to_string(), |v| format!("{v} MiB")),
                        ));
                        return Ok(());
                    }
                    DoneStatus::FailedOom
                } else {
                    DoneStatus::Failed
                }
            }
        };
        self.record_done(key, status, returncode, peaks.clone(), avg_util, duration)?;
        let mark = status.mark();
        let mut line = format!(
            "{mark} job {} {} in {} ({exit_text}), {}, util {} ({} GPU sample{})",
            job.no,
            status.as_str(),
            report::human_duration(duration),
            report::peaks_text(&peaks),
            avg_util.map_or("n/a".to_string(), |u| format!("{u:.0}%")),
            job.usage.samples,
            if job.usage.samples == 1 { "" } else { "s" },
        );
        let peak = peaks.values().copied().max().flatten();
        match (job.vram_mib, peak) {
            (Some(_), _) => {
                if let Some(v) = report::verdict(job.vram_mib, peak, self.cfg.tolerance) {
                    line.push_str(" — ");
                    line.push_str(&v);
                }
            }
            (None, Some(p)) => {
                line.push_str(&format!(
                    " — undeclared; [vram={}] would fit",
                    allocation::buffered_mib(p, self.cfg.tolerance)
                ));
            }
            (None, None) => {}
        }
        if status == DoneStatus::FailedOom {
            line.push_str(
                " — CUDA out of memory, no retries left (add retries=N or --oom-retries N)",
            );
        }
        if let Some(path) = &job.log_path
            && status.is_failure()
        {
            line.push_str(&format!("; log {}", path.display()));
        }
        say(&line);
        Ok(())
    }

    fn record_done(
        &mut self,
        key: &str,
        status: DoneStatus,
        returncode: Option<i32>,
        peaks: BTreeMap<u32, Option<u64>>,
        avg_util: Option<f64>,
        duration_s: f64,
    ) -> anyhow::Result<()> {
        self.journal.append(
            key,
            Event::Done {
                status,
                returncode,
                peak_mib: peaks.into_iter().map(|(g, p)| (g.to_string(), p)).collect(),
                avg_util: avg_util.map(|u| (u * 10.0).round() / 10.0),
                duration_s: (duration_s * 1000.0).round() / 1000.0,
            },
        )?;
        self.ended_this_run
            .insert(key.to_string(), (status, returncode));
        self.dispatch_needed = true;
        Ok(())
    }

    // ----- phase: dispatch ----------------------------------------------------

    /// The GPUs placement may use, as [`GpuLoad`]s from the last snapshot and
    /// our running jobs.
    fn gpu_loads(&self) -> Vec<GpuLoad> {
        let Some(snapshot) = &self.gpu.snapshot else {
            return Vec::new();
        };
        snapshot
            .gpus
            .iter()
            .filter(|g| {
                self.cfg
                    .allowed
                    .as_ref()
                    .is_none_or(|a| a.contains(&g.index))
            })
            .map(|g| GpuLoad {
                index: g.index,
                total_mib: g.total_mib,
                used_mib: g.used_mib,
                external_peak_sum_mib: self
                    .gpu
                    .external_peaks
                    .iter()
                    .filter(|((gpu, _), _)| *gpu == g.index)
                    .map(|(_, peak)| peak)
                    .sum(),
                occupants: self
                    .running
                    .values()
                    .filter(|j| j.gpus.contains(&g.index))
                    .map(|j| Occupant {
                        declared_mib: j.vram_mib,
                        peak_mib: j.usage.peak.get(&g.index).copied(),
                        current_mib: j.usage.current.get(&g.index).copied(),
                    })
                    .collect(),
            })
            .collect()
    }

    /// The pending jobs in priority (file) order, as indices into the specs,
    /// with their requests (an OOM bump from the journal raises the file's
    /// declaration).
    fn pending(&self) -> impl Iterator<Item = (usize, Request)> + '_ {
        self.jobs.specs.iter().enumerate().filter_map(|(index, s)| {
            if s.cancel || self.running.contains_key(&s.key) {
                return None;
            }
            let state = self.journal.state(&s.key)?;
            matches!(state.phase, Phase::Waiting).then(|| {
                let vram_mib = match (s.vram_mib, state.next_vram) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                (
                    index,
                    Request {
                        vram_mib,
                        gpus: s.gpus,
                    },
                )
            })
        })
    }

    /// Places pending jobs in file order with backfill and starts those that
    /// fit (SPEC §2); ends infeasible ones at once. Placement is pure, so
    /// when neither the queue nor the GPU loads changed since the last
    /// round, its answer cannot have changed either and the round is
    /// skipped.
    fn dispatch(&mut self) -> anyhow::Result<()> {
        if self.stop_signals > 0 || self.paused_reason.is_some() || self.gpu.snapshot.is_none() {
            return Ok(());
        }
        let mut loads = self.gpu_loads();
        if !self.dispatch_needed && self.last_dispatch_loads.as_ref() == Some(&loads) {
            return Ok(());
        }
        self.dispatch_needed = false;
        self.last_dispatch_loads = Some(loads.clone());
        let (indices, requests): (Vec<usize>, Vec<Request>) = self.pending().unzip();
        if requests.is_empty() {
            return Ok(());
        }
        let placements = allocation::plan(&requests, &mut loads, &self.cfg.place);
        // Jobs of the file that are running or done, for "n/N dispatched".
        let mut dispatched = self.jobs.specs.len() - requests.len();
        for ((index, request), placement) in indices.into_iter().zip(&requests).zip(placements) {
            match placement {
                Placement::NotNow => {}
                Placement::Start(gpus) => {
                    dispatched += 1;
                    let spec = self.jobs.specs[index].clone();
                    self.start_job(&spec, request, &gpus, dispatched)?;
                }
                Placement::Infeasible(reason) => {
                    let spec = &self.jobs.specs[index];
                    let (key, command) = (spec.key.clone(), spec.command.clone());
                    let no = self.journal.state(&key).map_or(0, |s| s.no);
                    self.record_done(
                        &key,
                        DoneStatus::Infeasible,
                        None,
                        BTreeMap::new(),
                        None,
                        0.0,
                    )?;
                    say(&format!("✗ job {no} infeasible: {reason}: {command}"));
                }
            }
        }
        Ok(())
    }

    /// Spawns one attempt (SPEC §3) and journals `started`.
    /// `dispatched` counts the file's jobs started or done, this one included.
    fn start_job(
        &mut self,
        spec: &JobSpec,
        request: &Request,
        gpus: &[u32],
        dispatched: usize,
    ) -> anyhow::Result<()> {
        let state = self
            .journal
            .state(&spec.key)
            .context("job without journal state")?
            .clone();
        let attempt = state.attempts + 1;
        let log_path = self.cfg.log_dir.join(format!(
            "job{:03}_gpu{}.log",
            state.no,
            report::gpu_ids(gpus, "-")
        ));
        let vram_text = request
            .vram_mib
            .map_or("undeclared".to_string(), |v| format!("vram {v} MiB"));
        let header = format!(
            "==== gpusched: job {} attempt {attempt} on GPU {} at {} ({vram_text}): {}\n",
            state.no,
            report::gpu_ids(gpus, ","),
            report::date_time(now_ts()),
            spec.command
        );
        let log_offset = append_to(&log_path, header.as_bytes())?;
        let uuids: Vec<String> = gpus
            .iter()
            .filter_map(|i| {
                self.gpu
                    .snapshot
                    .as_ref()?
                    .gpus
                    .iter()
                    .find(|g| g.index == *i)
                    .map(|g| g.uuid.clone())
            })
            .collect();
        let mut env = vec![
            (
                "CUDA_VISIBLE_DEVICES".to_string(),
                report::gpu_ids(gpus, ","),
            ),
            ("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".to_string()),
            ("GPUSCHED_JOB".to_string(), state.no.to_string()),
            ("GPUSCHED_KEY".to_string(), spec.key.clone()),
            ("GPUSCHED_ATTEMPT".to_string(), attempt.to_string()),
            (
                "GPUSCHED_LOG_DIR".to_string(),
                self.cfg.log_dir.display().to_string(),
            ),
            ("GPUSCHED_GPU_UUIDS".to_string(), uuids.join(",")),
        ];
        if let Some(dir) = &self.sim_dir {
            env.push(("GPUSCHED_SIM_DIR".to_string(), dir.display().to_string()));
            // So that `gpusched simjob` in a job runs this very binary.
            if let Some(bin_dir) = std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(Path::to_path_buf))
            {
                let path = std::env::var_os("PATH").unwrap_or_default();
                let mut dirs = vec![bin_dir];
                dirs.extend(std::env::split_paths(&path));
                if let Ok(joined) = std::env::join_paths(dirs) {
                    env.push(("PATH".to_string(), joined.to_string_lossy().into_owned()));
                }
            }
        }
        let spawned = match process::spawn(&process::SpawnRequest {
            command: &spec.command,
            env,
            log: &log_path,
        }) {
            Ok(spawned) => spawned,
            Err(e) => {
                warn(&format!("cannot start job {}: {e}", state.no));
                self.record_done(
                    &spec.key,
                    DoneStatus::Failed,
                    None,
                    BTreeMap::new(),
                    None,
                    0.0,
                )?;
                return Ok(());
            }
        };
        let started = Instant::now();
        self.journal.append(
            &spec.key,
            Event::Started {
                pgid: spawned.pgid.0,
                gpus: gpus.to_vec(),
                attempt,
                vram_mib: request.vram_mib,
                start_ticks: spawned.start_ticks,
                boot_id: process::boot_id(),
            },
        )?;
        self.dispatched_this_run += 1;
        say(&format!(
            "▶ job {} started on GPU {} ({dispatched}/{} dispatched, {vram_text}{}): {}",
            state.no,
            report::gpu_ids(gpus, ","),
            self.jobs.specs.len(),
            if attempt > 1 {
                format!(", attempt {attempt}")
            } else {
                String::new()
            },
            spec.command
        ));
        self.running.insert(
            spec.key.clone(),
            Running {
                no: state.no,
                command: spec.command.clone(),
                gpus: gpus.to_vec(),
                vram_mib: request.vram_mib,
                attempt,
                pgid: spawned.pgid,
                started,
                log_path: Some(log_path),
                proc: Proc::Child {
                    child: spawned.child,
                    log_offset,
                    exit: None,
                },
                usage: Usage::default(),
                timeout_at: spec.timeout_s.map(|t| started + Duration::from_secs_f64(t)),
                kill: None,
                progress: None,
            },
        );
        Ok(())
    }

    // ----- phase: board and exit ------------------------------------------------

    /// The scheduler's state word for `status.json`.
    fn state_word(&self) -> &'static str {
        if self.stop_signals > 0 {
            if self.running.is_empty() {
                "stopped"
            } else {
                "stopping"
            }
        } else if self.paused_reason.is_some() {
            "paused-by-errors"
        } else if !self.cfg.watch && self.pending().next().is_none() {
            if self.running.is_empty() {
                "finished"
            } else {
                "draining"
            }
        } else {
            "running"
        }
    }

    /// One job as `status.json` shows it, from its spec (if its line is in
    /// the file), its journal state and its running attempt.
    fn job_status(&self, key: &str, spec: Option<&JobSpec>, state: &KeyState) -> JobStatus {
        let mut job = JobStatus {
            no: state.no,
            key: key.to_string(),
            state: "pending".into(),
            command: spec.map(|s| s.command.clone()).unwrap_or_default(),
            gpus: Vec::new(),
            gpus_wanted: spec.map_or(1, |s| s.gpus),
            vram_mib: spec.and_then(|s| s.vram_mib).max(state.next_vram),
            current_mib: BTreeMap::new(),
            peak_mib: BTreeMap::new(),
            attempt: state.attempts,
            oom_attempts: state.oom_attempts,
            queued: Some(state.seen_ts),
            started: state.first_started_ts,
            finished: None,
            returncode: None,
            duration_s: None,
            avg_util: None,
            log: None,
            progress: None,
            note: None,
        };
        if let Some(run) = self.running.get(key) {
            let elapsed = run.started.elapsed().as_secs_f64();
            job.state = "running".into();
            job.command = run.command.clone();
            job.gpus = run.gpus.clone();
            job.vram_mib = run.vram_mib;
            job.attempt = run.attempt;
            job.current_mib = run
                .usage
                .current
                .iter()
                .map(|(g, m)| (g.to_string(), *m))
                .collect();
            job.peak_mib = run
                .gpus
                .iter()
                .map(|g| (g.to_string(), run.usage.peak.get(g).copied()))
                .collect();
            job.duration_s = Some(elapsed);
            job.avg_util = (run.usage.util_samples > 0)
                .then(|| run.usage.util_sum / f64::from(run.usage.util_samples));
            job.log = run.log_path.as_ref().map(|p| p.display().to_string());
            job.progress = run.progress.as_ref().map(|p| ProgressStatus {
                percent: (p.fraction * 1000.0).round() / 10.0,
                label: p.label.clone(),
                eta_s: progress::eta_s(p, elapsed).map(|e| e.round()),
            });
            job.note = match (&run.proc, &run.kill) {
                (_, Some((reason, _))) => Some(format!("stopping: {reason:?}").to_lowercase()),
                (Proc::Orphan { .. }, None) => {
                    Some(format!("from a previous scheduler, pgid {}", run.pgid))
                }
                _ if run.attempt > 1 => Some(format!("attempt {}", run.attempt)),
                _ => None,
            };
        } else if let Phase::Done(done) = &state.phase {
            job.state = done.status.as_str().into();
            job.gpus = (0..64)
                .filter(|i| done.gpu_mask & (1u64 << i) != 0)
                .collect();
            job.vram_mib = done.vram_mib;
            job.peak_mib = BTreeMap::from([("max".to_string(), done.peak_mib)]);
            job.finished = Some(done.ts);
            job.returncode = done.returncode;
            job.duration_s = Some(done.duration_s);
            job.avg_util = done.avg_util;
            if !job.gpus.is_empty() {
                let log = self.cfg.log_dir.join(format!(
                    "job{:03}_gpu{}.log",
                    state.no,
                    report::gpu_ids(&job.gpus, "-")
                ));
                job.log = Some(log.display().to_string());
            }
        } else if state.oom_attempts > 0 {
            job.state = "retry_wait".into();
        }
        job
    }

    /// The waiting and finished jobs of the queue, rebuilt only when the
    /// journal or the jobs file changed since the last round.
    fn refresh_queue_view(&mut self) {
        // A job stopped at shutdown leaves `running` without a journal event.
        let generation = (
            self.journal.generation(),
            self.jobs.generation,
            self.running.len(),
        );
        if self
            .queue_view
            .as_ref()
            .is_some_and(|v| v.generation == generation)
        {
            return;
        }
        let mut view = QueueView {
            generation,
            counts: BTreeMap::new(),
            waiting: Vec::new(),
            finished: Vec::new(),
        };
        let mut last_finished = std::collections::VecDeque::new();
        for (index, spec) in self.jobs.specs.iter().enumerate() {
            if self.running.contains_key(&spec.key) {
                continue;
            }
            let Some(state) = self.journal.state(&spec.key) else {
                continue;
            };
            let word = match &state.phase {
                Phase::Done(done) => {
                    if last_finished.len() == status::JSON_LIST_LIMIT {
                        last_finished.pop_front();
                    }
                    last_finished.push_back(index);
                    done.status.as_str()
                }
                _ => {
                    if view.waiting.len() < status::JSON_LIST_LIMIT {
                        view.waiting
                            .push(self.job_status(&spec.key, Some(spec), state));
                    }
                    if state.oom_attempts > 0 {
                        "retry_wait"
                    } else {
                        "pending"
                    }
                }
            };
            *view.counts.entry(word.into()).or_default() += 1;
        }
        for index in last_finished {
            let spec = &self.jobs.specs[index];
            if let Some(state) = self.journal.state(&spec.key) {
                view.finished
                    .push(self.job_status(&spec.key, Some(spec), state));
            }
        }
        self.queue_view = Some(view);
    }

    /// The status document of this round (status issue).
    fn status_doc(&mut self) -> StatusDoc {
        self.refresh_queue_view();
        let view = self.queue_view.as_ref().expect("refreshed above");
        let mut counts = view.counts.clone();
        let mut jobs: Vec<JobStatus> = Vec::new();
        for (key, run) in &self.running {
            *counts.entry("running".into()).or_default() += 1;
            if let Some(state) = self.journal.state(key) {
                jobs.push(self.job_status(key, self.jobs.spec(key), state));
            } else {
                tracing::debug!("running job {} has no journal state", run.no);
            }
        }
        jobs.sort_by_key(|j| j.no);
        jobs.extend(view.waiting.iter().cloned());
        jobs.extend(view.finished.iter().cloned());
        let snapshot_gpus = self
            .gpu
            .snapshot
            .as_ref()
            .map(|s| s.gpus.as_slice())
            .unwrap_or_default();
        let gpus = self
            .gpu_loads()
            .into_iter()
            .map(|load| {
                let info = snapshot_gpus.iter().find(|g| g.index == load.index);
                let stats = self.gpu.stats.get(&load.index);
                GpuStatus {
                    index: load.index,
                    uuid: info.map(|g| g.uuid.clone()).unwrap_or_default(),
                    name: info.map(|g| g.name.clone()).unwrap_or_default(),
                    total_mib: load.total_mib,
                    used_mib: load.used_mib,
                    external_mib: allocation::effective_external_mib(
                        &load,
                        self.cfg.place.spike_buffer,
                    ),
                    headroom_mib: allocation::headroom_mib(&load, self.cfg.place.spike_buffer),
                    util_percent: info.and_then(|g| g.util_percent),
                    jobs: self
                        .running
                        .values()
                        .filter(|j| j.gpus.contains(&load.index))
                        .map(|j| j.no)
                        .collect(),
                    busy_fraction: stats
                        .filter(|s| s.samples > 0)
                        .map(|s| f64::from(s.busy) / f64::from(s.samples)),
                    mean_used_mib: stats
                        .filter(|s| s.samples > 0)
                        .map(|s| (s.used_sum_mib / f64::from(s.samples)).round()),
                }
            })
            .collect();
        let mut finished_this_run: BTreeMap<String, u64> = BTreeMap::new();
        for (status, _) in self.ended_this_run.values() {
            *finished_this_run.entry(status.as_str().into()).or_default() += 1;
        }
        StatusDoc {
            schema: status::SCHEMA.into(),
            updated: now_ts(),
            scheduler: SchedulerStatus {
                pid: std::process::id(),
                version: env!("CARGO_PKG_VERSION").into(),
                started: self.started_ts,
                poll_s: self.cfg.poll.as_secs_f64(),
                backend: if self.backend.is_sim() { "sim" } else { "nvml" }.into(),
                backend_detail: self.backend.describe(),
                state: self.state_word().into(),
                paused_reason: self.paused_reason.clone(),
                jobs_file: self.jobs.path.display().to_string(),
                log_dir: self.cfg.log_dir.display().to_string(),
                watch: self.cfg.watch,
            },
            counts,
            finished_this_run,
            gpus,
            jobs,
        }
    }

    /// Writes `status.json`, `metrics.prom` and `status.txt`, each
    /// atomically, from one status document (SPEC §7, status issue).
    fn publish(&mut self) {
        let doc = self.status_doc();
        if let Err(e) = doc.write(&self.cfg.log_dir) {
            tracing::warn!("cannot write status.json / metrics.prom: {e}");
        }
        let mut header = vec![
            format!(
                "gpusched {} — {} — {} — updated {}",
                env!("CARGO_PKG_VERSION"),
                self.backend.describe(),
                self.jobs.path.display(),
                report::date_time(doc.updated)
            ),
            format!(
                "jobs: {}",
                status::JOB_STATES
                    .iter()
                    .map(|k| format!(
                        "{} {}",
                        doc.counts.get(*k).copied().unwrap_or(0),
                        k.replace('_', " ")
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ];
        for gpu in &doc.gpus {
            header.push(format!(
                "GPU {}: {} / {} MiB used, external {} MiB, {} of our job(s), headroom {} MiB",
                gpu.index,
                gpu.used_mib,
                gpu.total_mib,
                gpu.external_mib,
                gpu.jobs.len(),
                gpu.headroom_mib
            ));
        }
        if let Some(reason) = &self.paused_reason {
            header.push(format!("PAUSED: {reason}"));
        }
        if let Some(error) = &self.jobs.last_error {
            header.push(format!("jobs file problem: {error}"));
        }
        if self.stop_signals > 0 {
            header.push(if self.running.is_empty() {
                "stopped by a signal: interrupted jobs run again on the next start".to_string()
            } else {
                "stopping: waiting for running jobs to exit".to_string()
            });
        }
        let (mut running, mut waiting, mut finished) = (
            BoardSection::default(),
            BoardSection::default(),
            BoardSection::default(),
        );
        for job in &doc.jobs {
            let section = match job.state.as_str() {
                "running" => &mut running,
                "pending" | "retry_wait" => &mut waiting,
                _ => &mut finished,
            };
            section.rows.push(board_row(job));
        }
        let total = |states: &[&str]| {
            states
                .iter()
                .map(|s| doc.counts.get(*s).copied().unwrap_or(0))
                .sum()
        };
        running.total = total(&["running"]);
        waiting.total = total(&["pending", "retry_wait"]);
        finished.total = total(&status::TERMINAL_STATES);
        waiting.rows.truncate(report::BOARD_LIST_LIMIT);
        let skip = finished.rows.len().saturating_sub(report::BOARD_LIST_LIMIT);
        finished.rows.drain(..skip);
        let board = report::render_board(
            &header,
            &[
                ("running", &running),
                ("waiting", &waiting),
                ("finished", &finished),
            ],
        );
        if let Err(e) = report::write_atomic(&self.cfg.log_dir.join("status.txt"), board.as_bytes())
        {
            tracing::warn!("cannot write status board: {e}");
        }
    }

    /// The exit code once the run is over, or `None` to keep going.
    fn finished(&mut self) -> Option<i32> {
        if self.stop_signals > 0 {
            return self.running.is_empty().then_some(130);
        }
        if self.cfg.watch || !self.running.is_empty() || self.pending().next().is_some() {
            return None;
        }
        let mut code = 0;
        let mut failures = 0;
        let in_file =
            self.jobs
                .specs
                .iter()
                .filter_map(|s| match &self.journal.state(&s.key)?.phase {
                    Phase::Done(done) => Some((done.status, done.returncode)),
                    _ => None,
                });
        for (status, returncode) in in_file.chain(self.ended_this_run.values().copied()) {
            if status.is_failure() {
                failures += 1;
                code = code.max(returncode.unwrap_or(1).clamp(1, 255));
            }
        }
        let summary = status::summary(&self.status_doc());
        let mut out = std::io::stdout().lock();
        let _ = std::io::Write::write_all(&mut out, format!("\n{summary}\n").as_bytes());
        drop(out);
        say(&format!(
            "queue drained in {}: {} job(s) dispatched this run{}; exit {code}",
            report::human_duration(now_ts() - self.started_ts),
            self.dispatched_this_run,
            if failures > 0 {
                " — some jobs did not succeed, see status.txt"
            } else {
                ""
            }
        ));
        Some(code)
    }
}

/// (exit code, words): the exit code, or 128 + signal for a job killed by a
/// signal, as shells report it.
fn exit_code(status: &ExitStatus) -> (Option<i32>, String) {
    if let Some(code) = status.code() {
        (Some(code), format!("exit {code}"))
    } else if let Some(signal) = status.signal() {
        let name = nix::sys::signal::Signal::try_from(signal)
            .map_or_else(|_| signal.to_string(), |s| s.to_string());
        (Some(128 + signal), format!("killed by {name}"))
    } else {
        (None, "exit status unknown".to_string())
    }
}

/// A board line from a job's status.
fn board_row(job: &JobStatus) -> BoardRow {
    let state = match job.state.as_str() {
        "running" => BoardState::Running {
            gpus: job.gpus.clone(),
            elapsed_s: job.duration_s.unwrap_or(0.0),
            current_mib: (!job.current_mib.is_empty()).then(|| job.current_mib.values().sum()),
            peak_mib: job.peak_mib.values().copied().max().flatten(),
            vram_mib: job.vram_mib,
            note: match (&job.note, &job.progress) {
                (Some(n), Some(p)) => Some(format!("{n}; {:.0}% {}", p.percent, p.label)),
                (None, Some(p)) => Some(format!(
                    "{:.0}% {}{}",
                    p.percent,
                    p.label,
                    p.eta_s.map_or(String::new(), |e| format!(
                        ", ETA {}",
                        report::human_duration(e)
                    ))
                )),
                (n, None) => n.clone(),
            },
        },
        "pending" => BoardState::Pending {
            vram_mib: job.vram_mib,
            gpus: job.gpus_wanted,
        },
        "retry_wait" => BoardState::RetryWait {
            next_vram_mib: job.vram_mib,
            oom_attempts: job.oom_attempts,
        },
        _ => BoardState::Done {
            status: DoneStatus::from_word(&job.state).unwrap_or(DoneStatus::Failed),
            returncode: job.returncode,
        },
    };
    BoardRow {
        no: job.no,
        command: job.command.clone(),
        state,
    }
}

/// A hash of the jobs file's text, to tell a real change from a touch.
fn hash_text(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

/// Appends `bytes` to the file at `path`; returns the offset they start at.
fn append_to(path: &Path, bytes: &[u8]) -> anyhow::Result<u64> {
    use std::io::Write;
    let mut file = std::fs::File::options()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open job log {}", path.display()))?;
    let offset = file.seek(SeekFrom::End(0))?;
    file.write_all(bytes)?;
    Ok(offset)
}

/// The last `limit` bytes of the log written since `from`.
fn read_tail(path: &Path, from: u64, limit: u64) -> String {
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    let Ok(len) = file.seek(SeekFrom::End(0)) else {
        return String::new();
    };
    let start = from.max(len.saturating_sub(limit));
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `path` made absolute against the current directory (jobs get it in
/// `GPUSCHED_LOG_DIR` and may `cd`).
pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Forwards SIGINT, SIGTERM and SIGCHLD to the loop. The handlers (from
/// signal-hook) only write to a pipe; this thread turns that into wakes.
fn spawn_signal_thread(tx: Sender<Wake>) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGCHLD, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGCHLD])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if tx.send(Wake::Signal(signal)).is_err() {
                    break;
                }
            }
        })?;
    Ok(())
}

/// Watches the jobs file's directory (so that saves by rename are seen) and
/// wakes the loop on any event touching the file.
fn watch_jobs_file(path: &Path, tx: Sender<Wake>) -> notify::Result<notify::RecommendedWatcher> {
    use notify::Watcher;
    let absolute_path = absolute(path);
    let dir = absolute_path
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let name = absolute_path.file_name().map(|n| n.to_os_string());
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let relevant = match &event {
            Ok(event) => {
                event.paths.is_empty()
                    || event.paths.iter().any(|p| p.file_name() == name.as_deref())
            }
            Err(_) => true,
        };
        if relevant {
            let _ = tx.send(Wake::FileChanged);
        }
    })?;
    watcher.watch(&dir, notify::RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_signatures_match_case_insensitively() {
        assert!(is_oom(
            "RuntimeError: CUDA out of memory. Tried to allocate"
        ));
        assert!(is_oom("torch.OutOfMemoryError: boom"));
        assert!(is_oom("CUDA error: out of memory"));
        assert!(is_oom("CUDA_ERROR_OUT_OF_MEMORY"));
        assert!(is_oom("cudaErrorMemoryAllocation"));
        assert!(is_oom("ResourceExhaustedError: RESOURCE_EXHAUSTED: OOM"));
        assert!(is_oom("cuda OUT OF MEMORY"));
        assert!(!is_oom("Segmentation fault"));
        assert!(!is_oom("host out of memory"));
    }

    #[test]
    fn oom_bump_rules() {
        // ceil(1.25 × max(peak, declaration)).
        assert_eq!(oom_bump(Some(4000), Some(2000)), Some(5000));
        assert_eq!(oom_bump(Some(4000), Some(6001)), Some(7502));
        assert_eq!(oom_bump(Some(4001), None), Some(5002));
        assert_eq!(oom_bump(None, Some(1000)), Some(1250));
        assert_eq!(oom_bump(None, None), None);
    }

    #[test]
    fn tail_reads_only_this_attempt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "CUDA out of memory\n").unwrap();
        let offset = append_to(&path, b"attempt 2\nfine\n").unwrap();
        assert_eq!(
            read_tail(&path, offset, OOM_TAIL_BYTES),
            "attempt 2\nfine\n"
        );
        assert!(read_tail(&path, 0, OOM_TAIL_BYTES).contains("CUDA out of memory"));
        assert_eq!(read_tail(&path, 0, 5), "fine\n");
    }
}
