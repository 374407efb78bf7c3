//! The scheduler's state, as types that carry their data (HOUSE habit 4):
//! a running attempt is one [`Running`] value, removed whole when it ends;
//! the scheduler's own mode is one [`Mode`].

use crate::allocation::PlaceOptions;
use crate::gpu::GpuSnapshot;
use crate::gpu::attribution::ExternalPeaks;
use crate::jobspec::JobSpec;
use crate::journal::keys::hash as key_hash;
pub use crate::launcher::Proc;
use crate::model::DoneStatus;
use crate::policy::kill::{KillReason, KillStep, kill_step};
use crate::process::{self, GroupIdentity, Pgid, Termination};
use crate::progress::Progress;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

/// Settings of one run, from the command line (docs/BEHAVIOUR.md "Command line").
pub struct Config {
    /// Absolute log directory.
    pub log_dir: PathBuf,
    /// The scheduler's working directory: where a job without `cwd=`
    /// runs.
    pub workdir: Option<PathBuf>,
    /// The arguments it was started with, after the program's name, each
    /// URL in them cut to its scheme and host (a webhook's secret is in
    /// its path): what the hints to start it again repeat.
    pub command: Vec<String>,
    /// Placement options (margin, idle threshold, spike buffer, exclusive).
    pub place: PlaceOptions,
    /// `--tolerance`, a fraction.
    pub tolerance: f64,
    /// `--poll`.
    pub poll: Duration,
    /// `--watch`.
    pub watch: bool,
    /// `--oom-retries`.
    pub oom_retries: u32,
    /// `--retry-delay` (seconds), if given.
    pub retry_delay_s: Option<f64>,
    /// `-v`.
    pub verbose: bool,
    /// `--gpus`, or `None` for every GPU.
    pub allowed: Option<Vec<u32>>,
    /// `--reserve-after`.
    pub reserve_after: Duration,
    /// `--auto-vram`: every job without `vram=` is `vram=auto` (docs/BEHAVIOUR.md "Learned VRAM").
    pub auto_vram: bool,
    /// Framework memory caps from declarations, unless
    /// `--no-framework-caps` (docs/HARDWARE.md "Preallocating frameworks").
    pub framework_caps: bool,
    /// `--enforce`: what happens to a job over its declaration, unless
    /// its line says (docs/BEHAVIOUR.md "Declarations that hold").
    pub enforce: crate::jobspec::Enforce,
    /// Where jobs' cgroups go, or why none can be made (docs/BEHAVIOUR.md
    /// "Containment"); `Ok(None)` under `--no-containment` or on Slurm.
    /// Shared, so that a round holds it while it reports and books.
    pub containment: Result<Option<std::sync::Arc<crate::containment::Containment>>, String>,
    /// `--mem-per-gpu` (MiB).
    pub mem_per_gpu_mib: Option<u64>,
    /// `--cpus-per-gpu`.
    pub cpus_per_gpu: Option<u32>,
    /// `--cpu-jobs`: CPU-only jobs (`gpus=0`) at once.
    pub cpu_jobs: u32,
    /// Where the phases read the time: the system's clocks, or a test's.
    pub clock: crate::clock::Clock,
}

impl Config {
    /// Whether `spec`'s declaration is learned (docs/BEHAVIOUR.md "Learned VRAM"): `vram=auto`, or
    /// no `vram=` under `--auto-vram`.
    pub fn is_auto(&self, spec: &crate::jobspec::JobSpec) -> bool {
        spec.auto_vram || (self.auto_vram && spec.vram_mib.is_none())
    }
}

/// What the scheduler has learned about families' peaks (docs/BEHAVIOUR.md "Learned VRAM").
#[derive(Debug, Default)]
pub struct Learned {
    /// Every family's recent ok peaks and raises.
    pub families: crate::policy::learned::Families,
    /// The shared `--history` file, if any.
    pub history: Option<crate::history::History>,
    /// Whether this run learns at all: some job is `auto`, or
    /// `--auto-vram` or `--history` was given. Until then nothing is kept.
    pub active: bool,
    /// Per family used by an `auto` job this run: its first prediction
    /// (MiB) and the ok peaks measured, for the summary.
    pub this_run: BTreeMap<String, (Option<u64>, Vec<u64>)>,
    /// Bumped when a prediction may have changed (for the cached views).
    pub generation: u64,
}

impl Config {
    /// Whether `--gpus` lets the scheduler use GPU `index`.
    pub fn allows(&self, index: u32) -> bool {
        self.allowed
            .as_ref()
            .is_none_or(|a| a.contains(&index) || a.contains(&crate::model::parent_gpu(index)))
    }
}

/// VRAM and utilization observed for one running attempt (docs/BEHAVIOUR.md "Monitoring").
#[derive(Default)]
pub struct Usage {
    /// Highest MiB seen per GPU (only from known per-process memory).
    pub peak_mib: BTreeMap<u32, u64>,
    /// MiB in use per GPU at the last sample.
    pub current_mib: BTreeMap<u32, u64>,
    /// Σ of the mean device utilization (percent) of its GPUs per sample.
    pub util_sum: f64,
    /// Samples in which utilization was reported.
    pub util_samples: u32,
    /// Σ of its own utilisation (percent) per sample, which a neighbour's
    /// does not inflate (docs/BEHAVIOUR.md "Spread or pack"): its
    /// processes' SM utilisation as the driver measured it (NVML
    /// `nvmlDeviceGetProcessUtilization`, summed per GPU, the mean over its
    /// GPUs), where its GPUs report that; else its GPUs' utilisation in
    /// the samples in which no other job of ours was on any of them.
    pub own_util_sum: f64,
    /// Samples counted in [`Usage::own_util_sum`].
    pub own_util_samples: u32,
    /// GPU samples taken while it ran.
    pub samples: u32,
    /// Whether the "exceeds declared VRAM" warning was given.
    pub warned_over: bool,
    /// Whether a sample ever showed a GPU process of its process group,
    /// with known memory or not.
    pub seen_on_gpu: bool,
    /// The peak (MiB) last reported by `-v`.
    pub reported_peak_mib: u64,
    /// The last progress marker read from its log.
    pub progress: Option<Progress>,
    /// MiB that processes this PID namespace cannot see held on each of
    /// its GPUs when it started, for measuring it per GPU in a container
    /// (docs/HARDWARE.md "Containers"); `None` when not known (an adopted
    /// orphan), and it is then never measured so.
    pub hidden_baseline_mib: Option<BTreeMap<u32, u64>>,
    /// Whether another job of ours ran on one of its GPUs at some moment
    /// of this attempt: its run time then says how its family does when
    /// sharing (docs/BEHAVIOUR.md "Spread or pack").
    pub shared: bool,
}

impl Usage {
    /// The highest per-GPU peak (MiB), if any was measured.
    pub fn peak_max_mib(&self) -> Option<u64> {
        self.peak_mib.values().copied().max()
    }

    /// Mean device utilization over the attempt, percent.
    pub fn avg_util(&self) -> Option<f64> {
        (self.util_samples > 0).then(|| self.util_sum / f64::from(self.util_samples))
    }

    /// Its own mean utilisation ([`Usage::own_util_sum`]), percent; `None`
    /// when no sample told it (neither the driver per process nor a
    /// moment alone on its GPUs).
    pub fn own_avg_util(&self) -> Option<f64> {
        (self.own_util_samples > 0).then(|| self.own_util_sum / f64::from(self.own_util_samples))
    }
}

/// Where an attempt writes: its log file, and the byte offset at which
/// this attempt's output starts (a retry appends to the same log).
#[derive(Debug, Clone, Default)]
pub struct AttemptLog {
    /// The log file.
    pub path: PathBuf,
    /// Where this attempt's output starts (bytes), for the OOM tail and
    /// progress; 0 when not known.
    pub offset: u64,
    /// The log's length (bytes) when progress was last looked for: a log
    /// that has not grown since is not read again.
    pub looked_at: u64,
}

/// A kill under way: why, when it began, and the SIGTERM → grace →
/// SIGKILL progress.
pub struct Kill {
    /// The strongest reason asked for so far.
    pub reason: KillReason,
    /// When the first signal went out (Unix seconds): an adopted job whose
    /// record says it ended before this was not reached by the kill.
    pub signalled_at: f64,
    /// The SIGKILL deadline; `None` for a Slurm job, which Slurm stops
    /// (`scancel`).
    pub termination: Option<Termination>,
}

/// One running attempt. Everything about it lives here.
pub struct Running {
    /// Display number.
    pub no: u32,
    /// The command.
    pub command: String,
    /// GPU indices it holds, ascending.
    pub gpus: Vec<u32>,
    /// What this attempt asked of placement: its declaration per GPU
    /// (MiB; a retry's bigger one, a learned one), how many GPUs, and
    /// `on=`. An adopted attempt's comes from its journaled `started`
    /// (declaration and GPUs), not from today's jobs-file line.
    pub request: crate::allocation::Request,
    /// 1-based attempt number.
    pub attempt: u32,
    /// Its process group.
    pub pgid: Pgid,
    /// When it started.
    pub started: Instant,
    /// Its log file, and where this attempt's output starts in it.
    pub log: AttemptLog,
    /// Where its exit record may be: its supervisor's file, its shell's
    /// line.
    pub exit_record: crate::process::supervisor::RecordPlace,
    /// The process behind it.
    pub proc: Proc,
    /// What was measured.
    pub usage: Usage,
    /// When its `timeout=` is reached.
    pub timeout_at: Option<Instant>,
    /// A kill under way.
    pub kill: Option<Kill>,
    /// For a `vram=auto` job (docs/BEHAVIOUR.md "Learned VRAM"): its family and where its
    /// declaration came from.
    pub learned: Option<(String, crate::policy::learned::Prediction)>,
    /// Set when it ended but its outcome could not be journaled yet (the
    /// log directory is full or read-only); retried every round.
    pub unrecorded: bool,
    /// When its ledger booking was first published (Unix ms; its
    /// `starting` booking's moment).
    pub booked_since_ms: u64,
    /// Its own cgroup, when contained (docs/BEHAVIOUR.md "Containment").
    pub cgroup: Option<crate::containment::JobCgroup>,
    /// Whether its family is known to leave its GPU room to share (its
    /// latest attempt averaged under the saturation mark, or ended before
    /// any sample): then its GPU does not count as computing flat out
    /// before a sample has seen it.
    pub leaves_room: bool,
    /// Whether its family's runs were measured to take
    /// [`crate::policy::expected::SLOWS_WHEN_SHARING`]× or more as long
    /// sharing a GPU as alone: then its GPUs count as computing flat out
    /// whatever a sample says of their utilisation.
    pub slows_sharing: bool,
    /// The limits it asked for that nothing enforces here (`mem=50M not
    /// enforced: no cgroup …`), said on its start and completion lines and
    /// in status.json (docs/BEHAVIOUR.md "Containment").
    pub unenforced: Option<String>,
}

impl Running {
    /// Asks for this attempt to be killed for `reason` (HOUSE habit 12):
    /// the first request sends SIGTERM through `launcher` (which knows
    /// whether the job already ended, docs/BEHAVIOUR.md "An end beats a
    /// kill") and starts the grace; a stronger reason later only replaces
    /// the reason. Returns whether anything changed (so the caller says so
    /// once).
    pub fn begin_kill(
        &mut self,
        reason: KillReason,
        now: Instant,
        launcher: &mut crate::launcher::Launcher,
    ) -> bool {
        if !self.proc.may_signal() {
            return false;
        }
        match kill_step(self.kill.as_ref().map(|k| k.reason), reason) {
            KillStep::Begin => {
                let termination = match &self.proc {
                    Proc::Slurm(_) => None,
                    _ => Some(Termination::start(process::KILL_GRACE, now)),
                };
                let signalled_at = crate::clock::now_ts();
                launcher.signal(&mut self.proc, nix::sys::signal::Signal::SIGTERM);
                self.kill = Some(Kill {
                    reason,
                    signalled_at,
                    termination,
                });
                true
            }
            KillStep::Escalate => {
                if let Some(kill) = &mut self.kill {
                    kill.reason = reason;
                }
                true
            }
            KillStep::Keep => false,
        }
    }

    /// Whether its process group is ours beyond doubt
    /// ([`Proc::may_signal`]).
    pub fn may_signal(&self) -> bool {
        self.proc.may_signal()
    }

    /// What runs it, for messages: `process group 123` or `Slurm job 45`.
    pub fn handle_text(&self) -> String {
        match &self.proc {
            Proc::Slurm(job) => format!("Slurm job {}", job.id),
            _ => format!("process group {}", self.pgid),
        }
    }

    /// Why it is being killed, if it is.
    pub fn kill_reason(&self) -> Option<KillReason> {
        self.kill.as_ref().map(|k| k.reason)
    }

    /// What identifies its process group; `None` for a Slurm job.
    pub fn identity(&self) -> Option<&GroupIdentity> {
        self.proc.identity()
    }

    /// Whether its end is known, or as known as it will get: its leader
    /// ended ([`Proc::leader_gone`]); for an adopted job also its
    /// supervisor wrote its record or is gone (it writes the record right
    /// after it reaps the job, and the record may show that the job ended
    /// before a kill of ours reached it).
    pub fn settled(&self, table: &process::ProcTable) -> bool {
        if !self.proc.leader_gone(table) {
            return false;
        }
        match &self.proc {
            // While its supervisor lives, the record to wait for is the
            // supervisor's, which has the end's time (a kill sent before
            // that end reached it); the shell's own record, which has not,
            // is written first.
            Proc::Adopted {
                identity,
                supervisor,
                ..
            } => {
                !supervisor.as_ref().is_some_and(process::is_running)
                    || process::supervisor::ExitRecord::read_for(&self.exit_record.path, identity)
                        .is_some()
            }
            _ => true,
        }
    }

    /// What is known of how it ended ([`Proc::end_facts`] with this
    /// attempt's kill).
    pub fn end_facts(&self) -> crate::launcher::EndFacts {
        self.proc.end_facts(
            &self.exit_record,
            self.kill.as_ref().map(|k| (k.reason, k.signalled_at)),
        )
    }
}

/// What identifies one version of the jobs file on disk: modification
/// time, length and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    /// Last modification time.
    pub modified: SystemTime,
    /// Length in bytes.
    pub len: u64,
    /// Inode number (a save by rename changes it).
    pub inode: u64,
}

impl FileStamp {
    /// The stamp of the file at `path` now, if it exists.
    pub fn of(path: &std::path::Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            modified: meta.modified().ok()?,
            len: meta.len(),
            inode: meta.ino(),
        })
    }
}

/// A read that may have caught a save mid-write (an empty file, or a last
/// line without its newline), waiting to be believed.
#[derive(Debug, Clone, Copy)]
pub struct Unsettled {
    /// The file's stamp at that read.
    pub stamp: FileStamp,
    /// When that stamp was first seen.
    pub since: Instant,
}

/// The jobs file as last read successfully (docs/BEHAVIOUR.md "The live queue").
pub struct JobsFile {
    /// Its path as given.
    pub path: PathBuf,
    /// The jobs of the last good parse, in file order.
    pub specs: Vec<JobSpec>,
    /// Bumped whenever the queue is replaced.
    pub generation: u64,
    /// What is known of the file on disk: its stamp, the last text's hash,
    /// a read not yet believed, the last problem reported.
    pub source: FileSource,
    /// Each job's `after=` dependencies, resolved to keys (docs/BEHAVIOUR.md "Queue policy").
    pub after: std::collections::HashMap<String, Vec<String>>,
    /// The dependencies (of `after`) whose line is in the file, so the
    /// afterok rule needs no scan of the specs.
    pub deps_in_file: std::collections::HashSet<String>,
    /// Indices in `specs`, found by the hash of their key (4 bytes a job,
    /// no copy of any key): every job's completion looks its line up.
    pub by_key: hashbrown::HashTable<u32>,
    /// The specs before this index are known to have ended (`done` in the
    /// journal), so the pending scan starts here instead of at the top of
    /// a long sweep. Only ever moves forward, except when a job is retried
    /// or the queue is replaced (then it is reset to 0).
    pub done_prefix: usize,
    /// The first line appended since the last dispatch round, when only
    /// appends happened since (a round then places the new lines only).
    pub appended_from: Option<usize>,
    /// Each spec's journal state id ([`crate::journal::Journal::id_of`]),
    /// given with the specs (every line is journaled `seen` before it is
    /// installed): a scan of the queue reads the states in order instead of
    /// hashing every key.
    pub state_ids: Vec<u32>,
    /// The queue order as indices into `specs` ([`crate::policy::queue::rank`]:
    /// `priority=`, then line); `None` while it is file order.
    pub rank: Option<Vec<u32>>,
    /// `group=` limits of the lines (docs/BEHAVIOUR.md "Groups").
    pub groups: crate::policy::groups::GroupLimits,
    /// The last warning about a group's lines disagreeing on `limit=`.
    pub groups_warned: Option<String>,
    /// Whether some line says `vram=auto`: kept as lines are added, so
    /// that an append to a million-line file does not look at every line
    /// again to know whether learning must start.
    pub any_auto_vram: bool,
    /// The indices in `specs` of lines flagged `[cancel]`, kept as lines
    /// are added: each tick stops them without looking at every line.
    pub cancel_flagged: Vec<usize>,
}

/// What the scheduler knows of the jobs file on disk, to tell an unchanged
/// save, an append and an unsettled read from a change
/// (docs/BEHAVIOUR.md "The live queue").
#[derive(Default)]
pub struct FileSource {
    /// Hash of the last text read (parsed or not), to skip re-parsing.
    pub text_hash: Option<u64>,
    /// Length and hash of the last text that parsed, to tell an append.
    pub good_text: Option<(usize, u64)>,
    /// Whether some line is known by its key under the older identity rule
    /// (then appends are parsed with the whole file).
    pub legacy_keys_in_use: bool,
    /// Whether some line's key differs under the older rule (then an
    /// append counts a command's occurrences by reading every line, not
    /// through the index).
    pub legacy_keys_differ: bool,
    /// The last problem reported, so each distinct problem is warned once.
    pub last_error: Option<String>,
    /// The stamp at the last read; `None` forces a re-read.
    pub stamp: Option<FileStamp>,
    /// A read not yet believed.
    pub unsettled: Option<Unsettled>,
}

/// A state id that is not known ([`JobsFile::state_of`] then looks the key
/// up).
pub const NO_STATE: u32 = u32::MAX;

impl JobsFile {
    /// The jobs file at `path` (absolute), not read yet; `stamp` is its
    /// state on disk now.
    pub fn new(path: PathBuf, stamp: Option<FileStamp>) -> JobsFile {
        JobsFile {
            path,
            specs: Vec::new(),
            source: FileSource {
                stamp,
                ..Default::default()
            },
            generation: 0,
            after: HashMap::new(),
            deps_in_file: Default::default(),
            by_key: Default::default(),
            done_prefix: 0,
            appended_from: None,
            state_ids: Vec::new(),
            rank: None,
            groups: Default::default(),
            groups_warned: None,
            any_auto_vram: false,
            cancel_flagged: Vec::new(),
        }
    }

    /// The line of job `key`, if it is in the file.
    pub fn spec(&self, key: &str) -> Option<&JobSpec> {
        self.index_of(key).map(|i| &self.specs[i])
    }

    /// The index in `specs` of job `key`'s line, if it is in the file.
    pub fn index_of(&self, key: &str) -> Option<usize> {
        self.by_key
            .find(key_hash(key), |&i| {
                self.specs.get(i as usize).is_some_and(|s| s.key == key)
            })
            .map(|&i| i as usize)
    }

    /// The journal's state of the job on line `index` of `specs`, through
    /// its state id (no hashing of its key).
    pub fn state_of<'j>(
        &self,
        index: usize,
        journal: &'j crate::journal::Journal,
    ) -> Option<&'j crate::journal::KeyState> {
        match self.state_ids[index] {
            NO_STATE => journal.state(&self.specs[index].key),
            id => Some(journal.state_at(id)),
        }
    }

    /// Moves [`JobsFile::done_prefix`] past the jobs whose outcome
    /// `journal` holds, so queue scans start after a long sweep's ended
    /// head (the loop calls it once a tick; scans only read it).
    pub fn skip_ended(&mut self, journal: &crate::journal::Journal) {
        let mut first = self.done_prefix;
        while first < self.specs.len()
            && self
                .state_of(first, journal)
                .is_some_and(|st| matches!(st.phase, crate::journal::Phase::Done(_)))
        {
            first += 1;
        }
        self.done_prefix = first;
    }

    /// Adds lines appended to the file, extending the index; `ids` are
    /// their journal state ids, one per line.
    pub fn push_specs(&mut self, new: Vec<JobSpec>, ids: Vec<u32>) {
        debug_assert_eq!(new.len(), ids.len());
        self.groups.add(&new);
        self.appended_from.get_or_insert(self.specs.len());
        let from = self.specs.len();
        self.any_auto_vram |= new.iter().any(|s| s.auto_vram);
        self.cancel_flagged.extend(
            new.iter()
                .enumerate()
                .filter(|(_, s)| s.cancel)
                .map(|(i, _)| from + i),
        );
        self.specs.extend(new);
        self.index_from(from);
        self.state_ids.extend(ids);
        self.rank = crate::policy::queue::rank_appended(&self.specs, self.rank.take(), from);
    }

    /// The lines in queue order (priority, then line), as indices into
    /// `specs`, from the first not known to have ended ([`JobsFile::done_prefix`]).
    pub fn in_queue_order(&self) -> Box<dyn Iterator<Item = usize> + '_> {
        let first = self.done_prefix.min(self.specs.len());
        match &self.rank {
            Some(rank) => Box::new(
                rank.iter()
                    .map(|&i| i as usize)
                    .filter(move |&i| i >= first),
            ),
            None => Box::new(first..self.specs.len()),
        }
    }

    /// Replaces the specs and rebuilds the index; `ids` are their journal
    /// state ids, one per line.
    pub fn set_specs(&mut self, specs: Vec<JobSpec>, ids: Vec<u32>) {
        debug_assert_eq!(specs.len(), ids.len());
        self.by_key.clear();
        self.groups = crate::policy::groups::GroupLimits::of(&specs);
        self.state_ids = ids;
        self.rank = crate::policy::queue::rank(&specs);
        self.specs = specs;
        self.index_from(0);
        self.done_prefix = 0;
        self.appended_from = None;
        self.any_auto_vram = self.specs.iter().any(|s| s.auto_vram);
        self.cancel_flagged = (0..self.specs.len())
            .filter(|&i| self.specs[i].cancel)
            .collect();
    }

    /// Adds `specs[from..]` to the index (a key already there keeps its
    /// first line).
    fn index_from(&mut self, from: usize) {
        let JobsFile { specs, by_key, .. } = self;
        by_key.reserve(specs.len() - from, |&i| key_hash(&specs[i as usize].key));
        for (i, spec) in specs.iter().enumerate().skip(from) {
            let hash = key_hash(&spec.key);
            if by_key
                .find(hash, |&j| specs[j as usize].key == spec.key)
                .is_none()
            {
                by_key.insert_unique(hash, i as u32, |&j| key_hash(&specs[j as usize].key));
            }
        }
    }
}

/// What the summary says about a GPU over the run.
#[derive(Default)]
pub struct GpuStats {
    /// Samples taken.
    pub samples: u32,
    /// Samples in which a job of ours was on it.
    pub busy: u32,
    /// Σ of used MiB over the samples.
    pub used_sum_mib: f64,
}

/// GPU state carried between rounds.
#[derive(Default)]
pub struct GpuState {
    /// The last good snapshot.
    pub snapshot: Option<GpuSnapshot>,
    /// When the last query was made.
    pub last_sample: Option<Instant>,
    /// Samples due soon after jobs started, whatever `--poll` (so a new
    /// job's memory shows from its first seconds), oldest first.
    pub early_samples: std::collections::VecDeque<Instant>,
    /// Peaks of other people's processes (docs/BEHAVIOUR.md "Placement").
    pub external_peaks: ExternalPeaks,
    /// MiB in use now per (GPU index, process group) among processes that
    /// are not ours, to weigh other schedulers' bookings (docs/BEHAVIOUR.md "Sharing a box").
    pub external_by_group: HashMap<(u32, u32), u64>,
    /// MiB in use per (GPU index, owner uid) by process groups nobody
    /// booked, for the users who hold a personal reservation (their
    /// notebook uses it); worked out once per sample (docs/BEHAVIOUR.md
    /// "Rules for a shared box").
    pub reservation_use: HashMap<(u32, u32), u64>,
    /// Failed queries in a row.
    pub failures: u32,
    /// Processes NVML reports that `/proc` here does not show
    /// (docs/HARDWARE.md "Containers").
    pub hidden: crate::gpu::attribution::HiddenProcesses,
    /// GPUs closed because they stopped answering (docs/HARDWARE.md "A
    /// sick GPU").
    pub health: crate::gpu::health::Health,
    /// Per-GPU accumulators for the summary.
    pub stats: BTreeMap<u32, GpuStats>,
    /// GPU processes of our finished jobs that still hold memory (left
    /// behind: docs/BEHAVIOUR.md "Containment"), from the last sample.
    pub left_behind: Vec<crate::gpu::attribution::LeftBehind>,
    /// Which finished job of ours each process not of a running job was
    /// started by (its `GPUSCHED_JOB`, read once from its environment);
    /// `None` for anyone else's.
    pub left_by: HashMap<u32, Option<u32>>,
}

/// The scheduler's own mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Dispatching as jobs fit.
    Scheduling,
    /// GPU queries failed too often in a row: no new job starts until they
    /// answer again (docs/BEHAVIOUR.md "NVML"). Running jobs are untouched.
    PausedOnGpuErrors {
        /// What the board and status.json say.
        reason: String,
    },
    /// A write to the log directory failed (full, read-only, …): no new
    /// job starts until writes succeed again (docs/BEHAVIOUR.md "Exactly once"). Running jobs are
    /// still supervised; outcomes not yet journaled are kept and retried.
    PausedOnIo {
        /// What failed, with the path and the error.
        reason: String,
    },
    /// Ctrl-C, SIGTERM or `gpusched stop`: stopping every running job,
    /// then exit 130.
    Stopping {
        /// Whether a second signal asked to skip the grace.
        hurried: bool,
        /// The scheduler exits by then whatever is still in flight (the
        /// grace plus a second after the first signal): an attempt whose
        /// end was not reported yet is left to the next start, which
        /// reads its supervisor's exit record.
        give_up_at: Instant,
    },
}

impl Mode {
    /// Why dispatch is paused, when it is paused by errors (GPU or I/O).
    pub fn paused_reason(&self) -> Option<&str> {
        match self {
            Mode::PausedOnGpuErrors { reason } | Mode::PausedOnIo { reason } => Some(reason),
            _ => None,
        }
    }

    /// Whether a stop was asked for.
    pub fn is_stopping(&self) -> bool {
        matches!(self, Mode::Stopping { .. })
    }
}

/// What happened during this run, for the exit code, the metrics
/// counters and the summary.
#[derive(Debug, Default)]
pub struct ThisRun {
    /// Keys that ended for good during this run: their status and exit
    /// code (for the exit code and the metrics counters).
    pub ended: HashMap<String, (DoneStatus, Option<i32>)>,
    /// Attempts started.
    pub dispatched: u32,
    /// OOMs another job's over-use caused: (the victim's display number,
    /// the job to blame; docs/BEHAVIOUR.md "Declarations that hold").
    pub culprits: Vec<(u32, crate::model::Culprit)>,
}

/// Every input of the scheduler's decisions that lives between ticks: the
/// queue, the running attempts, the GPUs as last seen, learned sizes, the
/// mode, pause and drain, cancels asked for, the box rules and run times.
/// Nothing here opens a file or sends a signal.
pub struct Core {
    /// The jobs file as last read successfully, with its index.
    pub jobs: JobsFile,
    /// Running attempts by job key.
    pub running: BTreeMap<String, Running>,
    /// The GPUs as last sampled, and what is carried between samples.
    pub gpu: GpuState,
    /// Families' peaks for `vram=auto` (docs/BEHAVIOUR.md "Learned VRAM").
    pub learned: Learned,
    /// Scheduling, paused by errors, or stopping.
    pub mode: Mode,
    /// Pause and drain, kept in `<log_dir>/control.json`
    /// (docs/BEHAVIOUR.md "Queue policy").
    pub control: crate::control::Control,
    /// Jobs `gpusched cancel` journaled as cancelled and not yet ended
    /// (from the journal at start, then from requests).
    pub cancel_requests: Vec<String>,
    /// The box rules and our user's part in them (docs/BEHAVIOUR.md
    /// "Rules for a shared box").
    pub box_state: crate::rules::BoxState,
    /// Past ok run times per family, for expected times.
    pub run_times: crate::policy::expected::RunTimes,
    /// What each family's latest attempt used of its GPU, for whether it
    /// shares well (docs/BEHAVIOUR.md "Spread or pack").
    pub compute: crate::policy::expected::ComputeLoads,
}

/// What the last placement round decided and saw, to explain waits and to
/// skip rounds that cannot differ.
#[derive(Default)]
pub struct LastRound {
    /// Why each pending job that did not fit waits (docs/BEHAVIOUR.md
    /// "Queue policy").
    pub wait_reasons: HashMap<String, crate::allocation::WaitReason>,
    /// The first blocked job in file order and since when it is blocked,
    /// for the starvation hold (docs/BEHAVIOUR.md "Queue policy").
    pub blocked_first: Option<(String, Instant)>,
    /// Bumped whenever `wait_reasons` changes (for the cached views).
    pub reasons_generation: u64,
    /// The GPU loads placement last saw.
    pub last_dispatch_loads: Option<Vec<crate::allocation::GpuLoad>>,
    /// Pending jobs as the round left them (for "n/N dispatched" in a
    /// round over appended lines only).
    pub pending_at_last_round: usize,
    /// The first backfill reservation in queue order, the head job's when
    /// its start is known (docs/BEHAVIOUR.md "Backfill"): its job's key,
    /// expected start (Unix seconds) and GPUs.
    pub head: Option<(String, f64, Vec<u32>)>,
    /// The earliest `begin=` still ahead among the jobs it kept back
    /// (Unix seconds): a round is due then.
    pub next_begin: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::JobsFile;

    /// `vram=auto` and `[cancel]` on an appended line are noticed without a look at the
    /// older lines, and a whole new file is looked at afresh.
    #[test]
    fn vram_auto_and_cancel_lines_are_known_whether_read_or_appended() {
        let mut jobs = JobsFile::new("/home/ada/jobs.txt".into(), None);
        let plain = crate::jobspec::parse_jobs("[vram=1G] a\n[vram=2G] b\n").unwrap();
        jobs.set_specs(plain.clone(), vec![0, 1]);
        assert!(!jobs.any_auto_vram);
        let appended =
            crate::jobspec::parse_appended(&jobs.specs, None, 3, "[vram=auto] c\n").unwrap();
        jobs.push_specs(appended, vec![2]);
        assert!(jobs.any_auto_vram, "the appended line learns");
        jobs.set_specs(plain, vec![0, 1]);
        assert!(!jobs.any_auto_vram, "a file without it again");
        assert!(jobs.cancel_flagged.is_empty());
        let flagged = crate::jobspec::parse_appended(&jobs.specs, None, 3, "[cancel] d\n").unwrap();
        jobs.push_specs(flagged, vec![2]);
        assert_eq!(
            jobs.cancel_flagged,
            [2],
            "the appended [cancel] line is known"
        );
        let both = crate::jobspec::parse_jobs("[cancel] d\ne\n[cancel] f\n").unwrap();
        jobs.set_specs(both, vec![0, 1, 2]);
        assert_eq!(
            jobs.cancel_flagged,
            [0, 2],
            "and every one of a file read whole"
        );
        let with = crate::jobspec::parse_jobs("[vram=auto] c\n").unwrap();
        jobs.set_specs(with, vec![0]);
        assert!(jobs.any_auto_vram);
    }
}
