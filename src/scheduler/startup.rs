//! Start-up (docs/BEHAVIOUR.md "The live queue", "Board and terminal", "NVML"): read and validate the jobs file, open the
//! log directory and the journal (`--fresh` first), set up the wake
//! sources, take the first GPU snapshot (which must work), then take over
//! what a previous scheduler left running.

#![expect(
    clippy::disallowed_methods,
    reason = "the scheduler's own log directory, made and checked (check_own_dir) before anything in it"
)]

use super::parts::{Due, Io, LedgerSide, Reporting};
use super::{Scheduler, wake};
use crate::allocation::PlaceOptions;
use crate::cli::RunArgs;
use crate::console::{say, warn};
use crate::control::Control;
use crate::error::Error;
use crate::files::absolute;
use crate::gpu::{GpuBackend, GpuSnapshot};
use crate::jobspec;
use crate::journal::{Journal, Phase};
use crate::launcher::{Cluster, Launcher};
use crate::lockfile::SchedulerLock;
use crate::state::{self, Config, FileStamp, GpuState, JobsFile, Mode};
use crate::state::{Core, LastRound};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Opens the GPU backend for the command line: the backend and, in `--sim`
/// mode, the simulator's directory.
pub type OpenBackend = fn(&RunArgs) -> anyhow::Result<(Box<dyn GpuBackend>, Option<PathBuf>)>;

impl Scheduler {
    /// Sets everything up: log dir, journal (with `--fresh`), the jobs file,
    /// the first GPU snapshot, signal handling and the file watch; then
    /// resolves orphans of a previous scheduler.
    ///
    /// Errors: [`Error`] for what the user must fix (exit 2): no or a bad
    /// jobs file, no GPUs, a `--gpus` index that does not exist; I/O errors
    /// on the log directory or journal.
    pub(super) fn start(args: &RunArgs, open_backend: OpenBackend) -> anyhow::Result<Scheduler> {
        Scheduler::start_on(args, open_backend, crate::clock::Clock::System)
    }

    /// [`Scheduler::start`] on `clock` (a test's manual clock): the time
    /// every phase reads, from the first `seen` record on.
    ///
    /// Errors: as [`Scheduler::start`].
    pub(super) fn start_on(
        args: &RunArgs,
        open_backend: OpenBackend,
        clock: crate::clock::Clock,
    ) -> anyhow::Result<Scheduler> {
        let jobs_path = args
            .jobs_file
            .clone()
            .ok_or_else(|| Error::Usage("no jobs file given".into()))?;
        let mut cfg = config(args);
        cfg.clock = clock;
        // Read the umask while no other thread runs.
        let _ = crate::files::people_mode();
        let (mut specs, text_len, text_hash, stamp) = read_first_jobs_file(&jobs_path, cfg.watch)?;
        cfg.containment = containment_for(args, &cfg.log_dir);

        // Before anything (the simulated GPUs' directory) is made in it.
        create_log_dir(&cfg.log_dir)?;
        let last_jobs_file = last_jobs_file(&cfg.log_dir);
        let allocation = allocation_checked(args)?;
        let (backend, sim_dir) = open_backend(args)?;
        let launcher = launcher_for(args, &cfg, allocation.as_ref())?;
        let lock = prepare_log_dir(&cfg.log_dir)?;
        let backend = gpu_backend(backend, &launcher, &mut cfg)?;
        // Under the lock: one daemon per log directory.
        let mps = start_mps(&cfg, sim_dir.is_some() || args.slurm.slurm)?;
        let journal = open_journal(&cfg, args.fresh)?;
        let cancel_requests = cancels_asked(&journal);
        let control = load_control(&cfg.log_dir);
        let (mut wakes, warnings) = wake::Wakes::set_up(&jobs_path, &cfg.log_dir)?;
        warnings.iter().for_each(|w| warn(w));
        let rules = crate::rules::load(args.box_rules.as_deref())?;
        let box_state = crate::rules::BoxState::new(rules, args.box_rules.as_deref());
        let ledger = open_ledger(args, sim_dir.as_deref(), &cfg.log_dir, allocation.is_some())?
            .map(|ledger| watched_ledger(ledger, &box_state, &mut wakes));
        let usage = crate::timeline::usage::UsageLog::new(&cfg.log_dir);
        let told = told_for(args, &jobs_path, &cfg.log_dir, &box_state)?;
        let core = Core {
            learned: learned_of(args)?,
            control,
            cancel_requests,
            ..first_core(&jobs_path, stamp, box_state)
        };
        let (pilot, first_end) = allocation.map(super::phases::Pilot::start).unzip();
        let started_ts = cfg.clock.now().ts;
        let io = Io {
            _lock: lock,
            backend,
            launcher,
            sim_dir,
            journal,
            usage,
            spent_records: Vec::new(),
            shell_records: crate::process::supervisor::ShellRecordFiles::new(&cfg.log_dir),
            unacked: Vec::new(),
            mps,
            busy_cgroups: Vec::new(),
            spare_cgroups: Vec::new(),
            unenforced_said: [false; 2],
            pilot,
        };
        let ledger_side = LedgerSide {
            ledger,
            ..Default::default()
        };
        let mut scheduler = Scheduler {
            cfg,
            io,
            ledger_side,
            core,
            round: LastRound::default(),
            due: Due::default(),
            report: Reporting::new(told, started_ts),
            wakes,
        };
        let after = scheduler
            .resolve_after(&mut specs)
            .map_err(|e| Error::JobsFile(format!("{}: {e}", jobs_path.display())))?;
        scheduler.install_specs(text_len, text_hash, specs, after)?;
        // Owed before this start records (and posts) their attempts' ends.
        let owed = scheduler.owed_outcomes();
        scheduler.take_over(&jobs_path, last_jobs_file.as_deref(), &first_end)?;
        scheduler.tell_what_was_not_told(owed);
        scheduler.speak();
        Ok(scheduler)
    }

    /// After the jobs file is installed: the first GPU snapshot, a word
    /// when the log directory last served another jobs file
    /// (`last_jobs_file`), what `pause` and `drain` left, and the attempts
    /// of an earlier scheduler.
    ///
    /// Errors: the GPUs cannot be read (exit 2); the journal cannot be
    /// written.
    fn take_over(
        &mut self,
        jobs_path: &std::path::Path,
        last_jobs_file: Option<&std::path::Path>,
        first_end: &Option<Result<Option<f64>, String>>,
    ) -> anyhow::Result<()> {
        let snapshot = self.first_snapshot()?;
        self.report.say(format!(
            "gpusched {} on {}; jobs file {}; logs in {}",
            env!("CARGO_PKG_VERSION"),
            self.io.backend.describe(),
            jobs_path.display(),
            self.cfg.log_dir.display()
        ));
        if let Some(first_end) = first_end {
            self.match_allocation(&snapshot, first_end)?;
        }
        if let Err(why) = &self.cfg.containment {
            self.report.warn(format!("no cgroups for jobs: {why}"));
        }
        if let Some(last) = last_jobs_file {
            self.warn_other_jobs_file(last);
        }
        self.closed_gpus_changed();
        self.report_control();
        // Whatever it takes is followed by the orphans just below.
        let _ = self.adopt_unjournaled_submissions()?;
        self.adopt_orphans()?;
        self.report_resume();
        // The first round works from this snapshot rather than asking the
        // GPUs again; taken in after the orphans, so their memory is theirs.
        self.record_snapshot(snapshot);
        self.core.gpu.last_sample = Some(self.now().instant);
        self.due.sample_now = false;
        Ok(())
    }

    /// Warns when the log directory was last used with another jobs file
    /// (`last`): its journal's jobs count for this file too, so a line
    /// whose command already ran there is taken as done.
    fn warn_other_jobs_file(&mut self, last: &std::path::Path) {
        let same = |a: &std::path::Path, b: &std::path::Path| {
            a == b
                || std::fs::canonicalize(a)
                    .ok()
                    .zip(std::fs::canonicalize(b).ok())
                    .is_some_and(|(a, b)| a == b)
        };
        if same(last, &self.core.jobs.path) {
            return;
        }
        self.report.warn(format!(
            "log directory {} was last used with another jobs file, {}: jobs whose command finished there count as finished here too; give this file its own log directory with --log-dir DIR",
            self.cfg.log_dir.display(),
            last.display()
        ));
    }

    /// The first GPU snapshot, which must work: it tells us the GPUs
    /// (docs/BEHAVIOUR.md "NVML").
    ///
    /// Errors: [`Error::Gpu`] when the query fails, finds no GPU, or
    /// `--gpus` names a GPU this machine does not have.
    fn first_snapshot(&mut self) -> anyhow::Result<GpuSnapshot> {
        let snapshot = self
            .io
            .backend
            .snapshot()
            .map_err(|e| Error::Gpu(format!("cannot read GPU state: {e:#}")))?;
        if snapshot.gpus.is_empty() && snapshot.faults.is_empty() && self.io.launcher.places_jobs()
        {
            return Err(Error::Gpu(
                "no GPUs found (use --sim N to try gpusched without GPUs)".into(),
            )
            .into());
        }
        if let Some(allowed) = &self.cfg.allowed {
            let mut present: Vec<u32> = snapshot.gpus.iter().map(|g| g.index).collect();
            present.extend(snapshot.faults.iter().map(|f| f.index));
            // A GPU in MIG mode is present through its instances.
            present.extend(
                snapshot
                    .gpus
                    .iter()
                    .map(|g| crate::model::parent_gpu(g.index)),
            );
            present.sort_unstable();
            present.dedup();
            if let Some(missing) = allowed.iter().find(|i| !present.contains(i)) {
                return Err(Error::Gpu(format!(
                    "--gpus names GPU {}, but this machine has GPU {}",
                    crate::model::device_label(*missing),
                    crate::console::gpu_ids(&present, ", ")
                ))
                .into());
            }
        }
        Ok(snapshot)
    }

    /// Says at start what `gpusched pause` / `drain` left in force.
    fn report_control(&mut self) {
        if self.core.control.paused {
            self.report
                .say("queue paused (by gpusched pause): no new job starts until `gpusched resume`");
        }
        if !self.core.control.drained.is_empty() {
            self.report.say(format!(
                "GPU {} drained (by gpusched drain): no new job starts there until `gpusched undrain`",
                crate::console::gpu_ids(
                    &self
                        .core
                        .control
                        .drained
                        .iter()
                        .copied()
                        .collect::<Vec<_>>(),
                    ", "
                )
            ));
        }
    }

    /// Says once at start how many jobs of the file the journal already
    /// finished (docs/BEHAVIOUR.md "Resume").
    fn report_resume(&mut self) {
        let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
        // From the journal's side: only its finished jobs are looked up in
        // the file, not every waiting line in the journal.
        for (key, state) in self.io.journal.states() {
            if let Phase::Done(finished) = &state.phase
                && self.core.jobs.spec(key).is_some()
            {
                *counts.entry(finished.status.as_str()).or_default() += 1;
            }
        }
        let total: usize = counts.values().sum();
        if total > 0 {
            self.report.say(format!(
                "resuming: {total} of {} already finished in {} ({}); skipping them (--fresh runs everything again)",
                crate::words::count(self.core.jobs.specs.len(), "job"),
                self.io.journal.path().display(),
                counts
                    .iter()
                    .map(|(s, n)| format!("{n} {s}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
}

/// `ledger` with the box's longest reservation, watched by `wakes` (and,
/// under box rules, the other schedulers' bookings with it).
fn watched_ledger(
    mut ledger: crate::ledger::store::Ledger,
    box_state: &crate::rules::BoxState,
    wakes: &mut wake::Wakes,
) -> crate::ledger::store::Ledger {
    ledger.max_reservation_s = box_state.max_reservation_s();
    let others = box_state.rules.is_some();
    if let Some(warning) =
        wakes.watch_ledger(ledger.dir(), ledger.own_name().to_os_string(), others)
    {
        warn(&warning);
    }
    ledger
}

/// Where attempts run: on a Slurm cluster with `--slurm`, as steps of
/// the `allocation` this pilot runs in with `--job-steps`, else here.
///
/// Errors: the cluster cannot be reached; [`Error::Usage`] (exit 2):
/// `--job-steps` outside an allocation.
fn launcher_for(
    args: &RunArgs,
    cfg: &Config,
    allocation: Option<&crate::pilot::Allocation>,
) -> anyhow::Result<Launcher> {
    use crate::launcher::{Local, steps::Steps};
    Ok(match (args.slurm.slurm, args.job_steps, allocation) {
        (true, ..) => Launcher::Slurm(Box::new(Cluster::connect(args.slurm.options(), cfg.poll)?)),
        (false, true, Some(allocation)) => {
            Steps::check_srun().map_err(|why| {
                Error::Usage(format!(
                    "--job-steps starts each job with Slurm's srun, and {why}: put Slurm's commands on PATH, or leave --job-steps out to run the jobs as gpusched's own processes"
                ))
            })?;
            let steps = Steps {
                job_id: allocation.job_id,
                node: allocation.node.clone(),
                others: other_nodes(allocation)?,
            };
            Launcher::Local(Box::new(Local::with_steps(&cfg.log_dir, steps)))
        }
        (false, true, None) => return Err(job_steps_outside_an_allocation()),
        (false, false, _) => Launcher::Local(Box::new(Local::new(&cfg.log_dir))),
    })
}

/// The allocation this scheduler runs in ([`allocation_of`]), checked
/// before any GPU is asked for: outside one, `--job-steps` means nothing,
/// with or without NVML.
///
/// Errors: [`Error::Usage`] (exit 2), `--job-steps` outside an allocation.
fn allocation_checked(args: &RunArgs) -> anyhow::Result<Option<crate::pilot::Allocation>> {
    let allocation = allocation_of(args);
    if args.job_steps && !args.slurm.slurm && allocation.is_none() {
        return Err(job_steps_outside_an_allocation());
    }
    Ok(allocation)
}

/// The usage error (exit 2) of `--job-steps` outside an allocation.
fn job_steps_outside_an_allocation() -> anyhow::Error {
    Error::Usage(
        "--job-steps runs jobs as steps of the Slurm allocation gpusched runs in, and SLURM_JOB_ID is not set here: start gpusched inside one (sbatch, or gpusched export --slurm --pilot --job-steps)".into(),
    )
    .into()
}

/// The other nodes of a multi-node `allocation` a pilot with
/// `--job-steps` uses (docs/BEHAVIOUR.md "Several nodes"): those of
/// `SLURM_JOB_NODELIST` but its own, in Slurm's order, at most
/// [`crate::pilot::MAX_NODES`] nodes in all; none on one node.
///
/// Errors: `scontrol show hostnames` fails.
fn other_nodes(allocation: &crate::pilot::Allocation) -> anyhow::Result<Vec<String>> {
    let list = match (&allocation.node_list, allocation.nodes) {
        (Some(list), 2..) => list,
        _ => return Ok(Vec::new()),
    };
    let names = crate::launcher::slurm::hostnames(list).map_err(|e| {
        Error::Usage(format!(
            "cannot list the nodes of Slurm job {} ({e:#})",
            allocation.job_id
        ))
    })?;
    Ok(names
        .into_iter()
        .filter(|n| *n != allocation.node)
        .take(crate::pilot::MAX_NODES as usize - 1)
        .collect())
}

/// The GPUs placement and sampling use, with their topology put in
/// `cfg`: this node's (`backend`), and with `--job-steps` in an
/// allocation of several nodes the other nodes' through their agents
/// ([`crate::gpu::nodes`]); placement then keeps each job on one node.
/// Called under the log directory's lock, so that a second pilot refused
/// by it starts no agents.
///
/// Errors: an agent does not report ([`crate::gpu::nodes::RemoteNodes::start`]).
fn gpu_backend(
    backend: Box<dyn crate::gpu::GpuBackend>,
    launcher: &Launcher,
    cfg: &mut Config,
) -> anyhow::Result<Box<dyn crate::gpu::GpuBackend>> {
    cfg.place.topology = backend.topology().map(std::sync::Arc::new);
    let Some(steps) = launcher.steps().filter(|s| !s.others.is_empty()) else {
        return Ok(backend);
    };
    let poll = cfg.poll.as_secs_f64();
    let nodes = crate::gpu::nodes::RemoteNodes::start(backend, steps.job_id, &steps.others, poll)?;
    cfg.place.node_gpus = Some(crate::pilot::NODE_GPU_SLOTS);
    Ok(Box::new(nodes))
}

/// Our MPS daemon under `--enforce mps`, else `None`; `not_local`: the
/// GPUs are simulated or Slurm's.
///
/// Errors ([`Error::Usage`], exit 2): MPS asked for on GPUs that are not
/// this machine's, or it cannot start.
fn start_mps(cfg: &Config, not_local: bool) -> anyhow::Result<Option<crate::launcher::mps::Mps>> {
    match cfg.enforce {
        crate::jobspec::Enforce::Mps if not_local => Err(Error::Usage(
            "--enforce mps needs this machine's NVIDIA GPUs (not --sim or --slurm); use --enforce stop".into(),
        )
        .into()),
        crate::jobspec::Enforce::Mps => Ok(Some(crate::launcher::mps::Mps::start(&cfg.log_dir)?)),
        _ => Ok(None),
    }
}

/// Where jobs' cgroups go (docs/BEHAVIOUR.md "Containment"): none under
/// The jobs whose cancel the journal holds, not yet ended.
fn cancels_asked(journal: &Journal) -> Vec<String> {
    journal
        .states()
        .filter(|(_, s)| s.cancel_requested)
        .map(|(k, _)| k.to_string())
        .collect()
}

/// `control.json` of `log_dir`, its problem said.
fn load_control(log_dir: &std::path::Path) -> Control {
    let (control, problem) = Control::load(log_dir);
    if let Some(problem) = problem {
        warn(&problem);
    }
    control
}

/// `--no-containment` or on Slurm; an error says why there are none.
/// Without any and without `--cgroup`, gpusched first runs itself again in
/// a delegated systemd scope where one can be had (this call then does not
/// return).
fn containment_for(
    args: &RunArgs,
    log_dir: &std::path::Path,
) -> Result<Option<std::sync::Arc<crate::containment::Containment>>, String> {
    if args.slurm.slurm || args.contain.no_containment {
        return Ok(None);
    }
    let tag = crate::containment::log_dir_tag(log_dir);
    let found = crate::containment::Containment::setup(args.contain.cgroup.as_deref(), &tag);
    match found {
        Err(why) if args.contain.cgroup.is_none() => {
            match crate::containment::scope::run_in_a_scope() {
                Some(failed) => Err(format!("{why} ({failed})")),
                None => Err(why),
            }
        }
        found => found.map(|c| Some(std::sync::Arc::new(c))),
    }
}

/// The run's settings from the command line.
fn config(args: &RunArgs) -> Config {
    Config {
        log_dir: absolute(&args.log_dir),
        place: PlaceOptions {
            idle_threshold_mib: args.idle_threshold,
            margin_mib: args.margin,
            spike_buffer: args.spike_buffer,
            exclusive: args.exclusive,
            drained_mask: 0,
            topology: None,
            policy: args.placement,
            tightest_fit: false,
            node_gpus: None,
        },
        tolerance: args.tolerance,
        poll: Duration::from_secs_f64(args.poll),
        watch: args.watch,
        oom_retries: args.oom_retries,
        retry_delay_s: args.retry_delay,
        containment: Ok(None),
        mem_per_gpu_mib: args.contain.mem_per_gpu,
        cpus_per_gpu: args.contain.cpus_per_gpu,
        cpu_jobs: args.contain.cpu_jobs,
        clock: crate::clock::Clock::System,
        verbose: args.verbose,
        allowed: args.gpus.as_ref().map(|g| g.0.clone()),
        workdir: std::env::current_dir().ok(),
        command: std::env::args_os()
            .skip(1)
            .map(|a| crate::notifier::redact_urls(&a.to_string_lossy()))
            .collect(),
        reserve_after: Duration::from_secs_f64(args.reserve_after),
        auto_vram: args.auto_vram,
        framework_caps: !args.no_framework_caps,
        enforce: args.enforce,
    }
}

/// Creates the log directory if needed and checks that it is ours
/// (docs/BEHAVIOUR.md "Files in shared directories"), before anything is
/// made in it.
///
/// Errors (exit 2, naming the directory once): it cannot be created or
/// written in; it belongs to another user or is writable by its group or
/// others (sticky or not).
fn create_log_dir(log_dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(log_dir).map_err(|e| {
        Error::Usage(format!(
            "cannot create log directory {}: {}; choose one you can write with --log-dir DIR",
            log_dir.display(),
            crate::files::io_reason(&e)
        ))
    })?;
    crate::files::check_own_dir(log_dir, "log directory")?;
    nix::unistd::access(
        log_dir,
        nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
    )
    .map_err(|e| {
        Error::Usage(format!(
            "cannot write in log directory {}: {}; choose one you can write with --log-dir DIR",
            log_dir.display(),
            e.desc()
        ))
    })?;
    Ok(())
}

/// The jobs file the last scheduler on `log_dir` ran, from its
/// `status.json`; `None` when there was none or it cannot be read.
fn last_jobs_file(log_dir: &std::path::Path) -> Option<PathBuf> {
    let (_, doc) = crate::view::status::read_status(log_dir).ok()?;
    Some(PathBuf::from(doc.scheduler.jobs_file))
}

/// Takes the log directory's lock before anything in it is touched.
///
/// Errors: another scheduler holds it (exit 2); the directory is not
/// writable (exit 2).
fn prepare_log_dir(log_dir: &std::path::Path) -> anyhow::Result<SchedulerLock> {
    Ok(SchedulerLock::acquire(log_dir)?)
}

/// Reads and parses the jobs file at start: it must be readable and valid
/// (exit 2 otherwise), and hold a job unless `watch`. Returns the jobs,
/// the text's length and hash, and the file's stamp from just before the
/// read; the text itself is not kept (a
/// million-line file is 40 MB, and the journal is opened next).
///
/// Errors: [`Error::JobsFile`] naming the file, and the line for a bad one.
fn read_first_jobs_file(
    path: &std::path::Path,
    watch: bool,
) -> anyhow::Result<(Vec<crate::jobspec::JobSpec>, usize, u64, Option<FileStamp>)> {
    // The stamp is taken before the read: a line appended while the
    // scheduler starts changes the file after it, so the first tick sees
    // a new stamp and reads the line (a stamp taken later would match the
    // longer file and hide the line until the next edit).
    let stamp = FileStamp::of(path);
    let began = Instant::now();
    #[expect(
        clippy::disallowed_methods,
        reason = "the jobs file its user named on the command line, read by the scheduler running as that user"
    )]
    let bytes = std::fs::read(path)
        .map_err(|e| Error::JobsFile(format!("cannot read jobs file {}: {e}", path.display())))?;
    let text =
        jobspec::decode(bytes).map_err(|e| Error::JobsFile(format!("{}: {e}", path.display())))?;
    let specs = jobspec::parse_jobs_all(&text)
        .map_err(|e| Error::JobsFile(format!("{}: {e}", path.display())))?;
    let (text_len, text_hash) = (text.len(), super::phases::TextHash::of(&text));
    tracing::debug!(
        "start-up: {} lines read and parsed in {:.0} ms",
        specs.len(),
        began.elapsed().as_secs_f64() * 1000.0
    );
    if specs.is_empty() && !watch {
        return Err(Error::JobsFile(format!(
            "{} has no jobs (add one command per line, or use --watch to wait for lines)",
            path.display()
        ))
        .into());
    }
    Ok((specs, text_len, text_hash, stamp))
}

/// Opens the journal (removing it first with `--fresh`) and replays it,
/// warning once about torn or garbled lines (docs/BEHAVIOUR.md "The
/// journal"); it stamps what it appends with the scheduler's clock.
///
/// Errors: [`Error::Usage`] (exit 2) when `--fresh` would start a second
/// copy of a job of the old journal that may still run
/// ([`refuse_fresh_over_live_jobs`]); the journal cannot be opened.
fn open_journal(cfg: &Config, fresh: bool) -> anyhow::Result<Journal> {
    let journal_path = cfg.log_dir.join("journal.jsonl");
    if fresh && journal_path.exists() {
        refuse_fresh_over_live_jobs(&journal_path)?;
        std::fs::remove_file(&journal_path)
            .map_err(|e| Error::io(format!("cannot remove {}", journal_path.display()), e))?;
        say(&format!(
            "--fresh: removed {}; every job runs again",
            journal_path.display()
        ));
    }
    if fresh {
        // Exit records belong to the removed journal's attempts.
        let exits = cfg.log_dir.join("exits");
        if exits.exists() {
            std::fs::remove_dir_all(&exits)
                .map_err(|e| Error::io(format!("cannot remove {}", exits.display()), e))?;
        }
    }
    let replay_started = Instant::now();
    let (mut journal, replay) = Journal::open(&journal_path)?;
    journal.set_clock(cfg.clock.clone());
    tracing::info!(
        "journal replay: {} events in {:.0} ms",
        replay.events,
        replay_started.elapsed().as_secs_f64() * 1000.0
    );
    if !replay.bad_lines.is_empty() {
        warn(&format!(
            "{}: skipped {} torn or garbled {} (line {}); the rest of the journal is used",
            journal_path.display(),
            replay.bad_lines.len(),
            crate::words::noun_for(replay.bad_lines.len(), "line"),
            replay
                .bad_lines
                .iter()
                .take(5)
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(journal)
}

/// `--fresh` never doubles a live job (docs/BEHAVIOUR.md "Exactly once"):
/// if an attempt of the journal about to be removed may still run — its
/// process group or its supervisor is alive, or it was submitted to Slurm
/// — the start is refused, naming each such job and what to do.
///
/// Errors: [`Error::Usage`] naming the live jobs; the journal cannot be
/// read.
fn refuse_fresh_over_live_jobs(journal_path: &std::path::Path) -> anyhow::Result<()> {
    use crate::journal::Phase;
    use crate::process::{GroupIdentity, Pgid, ProcTable};
    let (journal, _) = Journal::open(journal_path)?;
    let table = ProcTable::scan();
    let live: Vec<String> = journal
        .states()
        .filter_map(|(_, state)| {
            let Phase::Started(info) = &state.phase else {
                return None;
            };
            if let Some(id) = info.slurm_job_id {
                return Some(format!("job {} (Slurm job {id})", state.no));
            }
            let identity = GroupIdentity {
                pgid: Pgid(info.pgid),
                start_ticks: info.start_ticks,
                boot_id: info.boot_id.clone(),
            };
            let alive = table.group_alive(&identity)
                || info
                    .supervisor
                    .as_ref()
                    .is_some_and(crate::process::is_running);
            alive.then(|| format!("job {} (process group {})", state.no, info.pgid))
        })
        .collect();
    if live.is_empty() {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "--fresh would start a second copy of {} still running from a previous scheduler of {}; start without --fresh to adopt {}, or wait for {} to end (or stop {}) first",
        live.join(", "),
        journal_path.parent().unwrap_or(journal_path).display(),
        if live.len() == 1 { "it" } else { "them" },
        if live.len() == 1 { "it" } else { "them" },
        if live.len() == 1 { "it" } else { "them" },
    ))
    .into())
}

/// What is told, and to whom: `--notify` and `--on-finish`, and the
/// box rules' `[notify] to` targets.
///
/// Errors: a target or hook is unusable.
fn told_for(
    args: &RunArgs,
    jobs_path: &std::path::Path,
    log_dir: &std::path::Path,
    box_state: &crate::rules::BoxState,
) -> anyhow::Result<super::phases::Told> {
    let box_targets = box_state
        .rules
        .as_ref()
        .map(|r| r.notify_to.clone())
        .unwrap_or_default();
    super::phases::Told::start(args, &absolute(jobs_path), log_dir, &box_targets)
}

/// The decision state of a scheduler about to take over: the jobs file
/// at `jobs_path` (kept absolute, so that commands run elsewhere find it
/// in status.json), nothing running, nothing learned yet.
fn first_core(
    jobs_path: &std::path::Path,
    stamp: Option<FileStamp>,
    box_state: crate::rules::BoxState,
) -> Core {
    Core {
        jobs: JobsFile::new(absolute(jobs_path), stamp),
        running: BTreeMap::new(),
        gpu: GpuState::default(),
        learned: Default::default(),
        mode: Mode::Scheduling,
        control: Control::default(),
        cancel_requests: Default::default(),
        box_state,
        run_times: Default::default(),
        compute: Default::default(),
    }
}

/// What the run learns from (docs/BEHAVIOUR.md "Learned VRAM"): nothing
/// yet, and the shared `--history` file when one is given.
///
/// Errors: the history file cannot be opened.
fn learned_of(args: &RunArgs) -> anyhow::Result<state::Learned> {
    Ok(state::Learned {
        history: match &args.history {
            Some(path) => Some(crate::history::History::open(&absolute(path))?),
            None => None,
        },
        ..Default::default()
    })
}

/// The Slurm allocation this scheduler runs in as a pilot
/// (docs/BEHAVIOUR.md "Inside a Slurm allocation"): `SLURM_JOB_ID` is set,
/// and neither `--slurm`, `--sim` nor `--no-allocation` was given.
fn allocation_of(args: &RunArgs) -> Option<crate::pilot::Allocation> {
    if args.slurm.slurm || args.sim.is_some() || args.no_allocation {
        return None;
    }
    crate::pilot::Allocation::from_env()
}

/// The ledger this scheduler books in (docs/BEHAVIOUR.md "Sharing a box"): `--ledger DIR`, else the
/// simulated GPUs' `<sim dir>/ledger` (only schedulers sharing the sim dir
/// share those GPUs), else [`crate::ledger::store::DEFAULT_DIR`]; none with
/// `--no-ledger`, and none inside a Slurm allocation without `--ledger`.
///
/// Errors: the directory is a symbolic link, not a directory, or cannot be
/// created or written.
fn open_ledger(
    args: &RunArgs,
    sim_dir: Option<&std::path::Path>,
    log_dir: &std::path::Path,
    in_allocation: bool,
) -> anyhow::Result<Option<crate::ledger::store::Ledger>> {
    // On a cluster, Slurm keeps the books; an allocation's GPUs are ours
    // alone, unless `--ledger` says otherwise.
    if args.no_ledger || args.slurm.slurm || (in_allocation && args.ledger.is_none()) {
        return Ok(None);
    }
    let dir = match (&args.ledger, sim_dir) {
        (Some(dir), _) => absolute(dir),
        (None, Some(sim)) => sim.join("ledger"),
        (None, None) => PathBuf::from(crate::ledger::store::DEFAULT_DIR),
    };
    Ok(Some(crate::ledger::store::Ledger::open(&dir, log_dir)?))
}
