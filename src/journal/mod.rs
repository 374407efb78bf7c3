//! The journal (docs/BEHAVIOUR.md "The live queue"): `<log_dir>/journal.jsonl`, the scheduler's only
//! durable state. Append-only, one JSON object per line, each append
//! flushed and fsynced before the scheduler acts on it. On start the file is
//! folded into one [`KeyState`] per job key; afterwards the fold is kept in
//! memory and only appended to, so no round re-reads it.

#![expect(
    clippy::disallowed_methods,
    reason = "the journal of a log directory of the caller's own, opened O_NOFOLLOW|O_NONBLOCK and checked on the descriptor"
)]

use read::{Batch, Parsed, SeenCommand, read_and_parse, read_line_at};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};

pub use crate::model::DoneStatus;

/// One journal event (docs/BEHAVIOUR.md "The live queue"), tagged by `event`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// First sight of a job: its display number and command.
    Seen {
        /// Display number (`job 7`), kept forever.
        no: u32,
        /// The command text.
        command: String,
    },
    /// An attempt started.
    Started {
        /// Process group (= leader pid).
        pgid: u32,
        /// GPU indices, ascending.
        gpus: Vec<u32>,
        /// 1-based attempt number.
        attempt: u32,
        /// Declaration per GPU in MiB for this attempt, or null.
        vram_mib: Option<u64>,
        /// Field 22 of the leader's `/proc/<pid>/stat`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_ticks: Option<u64>,
        /// `/proc/sys/kernel/random/boot_id` at spawn.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        boot_id: Option<String>,
        /// The attempt's supervisor (docs/BEHAVIOUR.md "Exactly once"), which writes its exit
        /// record: pid and start time (field 22 of its stat).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        supervisor: Option<ProcessId>,
        /// Byte offset in the job's log where this attempt's output starts.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        log_offset: Option<u64>,
        /// The Slurm job id, when the attempt runs on a cluster (docs/BEHAVIOUR.md "Slurm";
        /// `pgid` is then 0).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        slurm_job_id: Option<u64>,
        /// The Slurm allocation a pilot ran the attempt in (its
        /// `SLURM_JOB_ID`; docs/BEHAVIOUR.md "Inside a Slurm allocation"):
        /// a later pilot in another allocation knows the attempt ended
        /// when that allocation did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        allocation: Option<u64>,
        /// The job's own cgroup directories (docs/BEHAVIOUR.md
        /// "Containment"): one for cgroup v2, one per controller for v1;
        /// empty when it runs uncontained.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        cgroup: Vec<String>,
        /// What the attempt asked of placement, whole (its declaration
        /// again, its GPU count, `[exclusive]`, …): an adopted attempt is
        /// placed as it asked. `None` in records written before it was
        /// journaled; [`started_request`] then rebuilds it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<crate::allocation::Request>,
    },
    /// The attempt ended in a CUDA OOM and the job was requeued (docs/BEHAVIOUR.md "Out of memory and timeouts").
    Oom {
        /// OOM attempts so far, this one included (a neighbour's fault
        /// uses none).
        attempts: u32,
        /// Declaration per GPU in MiB for the next attempt.
        next_vram: Option<u64>,
        /// Why, when not simply its own OOM: stopped for over-use, or a
        /// neighbour's over-use (docs/BEHAVIOUR.md "Declarations that hold").
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<crate::model::OomCause>,
    },
    /// The attempt died with a previous scheduler; the job is pending again.
    Interrupted {},
    /// `gpusched retry`: a finished job is queued again as a new attempt
    /// with the same key; its OOM retries start over (docs/BEHAVIOUR.md "Everyday verbs"). It also
    /// withdraws an earlier `cancel`.
    Retry {},
    /// `gpusched cancel`: the job is to be stopped if it runs and never
    /// started otherwise; it then ends `cancelled` (docs/BEHAVIOUR.md
    /// "Cancel"). Written by the running scheduler on request, or by the
    /// command itself under the log directory's lock when none runs, so
    /// the user's jobs file is never rewritten.
    Cancel {},
    /// The attempt was stopped for a blocked job above it (docs/BEHAVIOUR.md "Queue policy"): the
    /// job is pending again; not a failure, no retry used.
    Preempted {
        /// Run time lost with this attempt (seconds).
        duration_s: f64,
    },
    /// The starvation hold: the job waited `--reserve-after` blocked, so
    /// these GPUs are held for it until it starts (docs/BEHAVIOUR.md
    /// "Queue policy"). Earlier journals call it `reserved`, still read.
    #[serde(alias = "reserved")]
    StarvationHold {
        /// GPU indices held.
        gpus: Vec<u32>,
    },
    /// `gpusched hold`: the waiting job is not started until `released`.
    Held {},
    /// `gpusched release`: a held job may start again.
    Released {},
    /// The attempt failed in a way its `retry_on=` retries (not an OOM,
    /// which is `oom`): the job is queued again as it was
    /// (docs/BEHAVIOUR.md "Out of memory and timeouts").
    Requeued {
        /// Retries used so far, this one included.
        attempts: u32,
        /// How the attempt ended (`failed`, `timeout`).
        status: DoneStatus,
        /// Its exit code, when it exited.
        returncode: Option<i32>,
        /// When the retry may start (Unix seconds): its `retry_delay=`, or
        /// the backoff, after the failure (docs/BEHAVIOUR.md "Out of memory
        /// and timeouts"); absent in journals written before it existed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        not_before: Option<f64>,
    },
    /// The job ended for good.
    Done {
        /// How it ended.
        status: DoneStatus,
        /// Exit code (128 + signal when killed by a signal), or null when it
        /// never ran.
        returncode: Option<i32>,
        /// Peak MiB per GPU index (decimal string); null when no process of
        /// the job was ever seen on that GPU.
        peak_mib: BTreeMap<String, Option<u64>>,
        /// Mean device utilization over the job's life, percent.
        avg_util: Option<f64>,
        /// Its own utilisation, percent: its processes' as the driver
        /// measured them where its GPUs report per process, else the
        /// mean over the samples in which no other job of ours was on
        /// its GPUs; absent when no sample told it (what its family
        /// computes, docs/BEHAVIOUR.md "Spread or pack").
        #[serde(default, skip_serializing_if = "Option::is_none")]
        own_util: Option<f64>,
        /// Wall-clock run time in seconds (0 when it never ran).
        duration_s: f64,
        /// Slurm's final state of the attempt (`COMPLETED`, `FAILED`,
        /// `TIMEOUT`, …), when it ran on a cluster (docs/BEHAVIOUR.md "Slurm").
        #[serde(default, skip_serializing_if = "Option::is_none")]
        slurm_state: Option<String>,
        /// Whether `--notify` is to post this outcome: until a `notified`
        /// event follows, a restart posts it (docs/BEHAVIOUR.md "Being
        /// told").
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        notify: bool,
        /// A declared job that ran long enough on GPUs where attribution
        /// works and never showed a GPU process: it probably ran on the
        /// CPU (docs/BEHAVIOUR.md "Monitoring").
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        no_gpu_memory: bool,
        /// Its peak against its declaration, checked when it ended
        /// (docs/BEHAVIOUR.md "Monitoring"); absent when either is unknown.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        declaration: Option<crate::model::DeclarationCheck>,
        /// A failed attempt's last line of output.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_line: Option<String>,
    },
    /// The outcome's message went to every `--notify` endpoint (each took
    /// it, or refused it every try): it is never posted again.
    Notified {},
}

/// A process named beyond its pid: its pid and its start time in clock
/// ticks since boot (field 22 of `/proc/<pid>/stat`), so a reused pid is
/// never mistaken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks since boot.
    pub start_ticks: u64,
}

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Unix time in seconds.
    pub ts: f64,
    /// The job's key (docs/BEHAVIOUR.md "Identity").
    pub key: String,
    /// What happened.
    #[serde(flatten)]
    pub event: Event,
}

/// The request of a `started` record: its `request` when it has one, else
/// (a record written before requests were journaled) the declaration
/// `vram_mib` on its `gpus`, and `[exclusive]` when an older record said so
/// on its own.
pub fn started_request(
    request: Option<crate::allocation::Request>,
    vram_mib: Option<u64>,
    gpus: &[u32],
    exclusive: bool,
) -> crate::allocation::Request {
    request.unwrap_or(crate::allocation::Request {
        vram_mib,
        gpus: gpus.len() as u32,
        exclusive,
        ..Default::default()
    })
}

/// The last `started` event of a job whose outcome is not recorded yet.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StartedInfo {
    /// When it started (Unix seconds).
    pub ts: f64,
    /// Process group.
    pub pgid: u32,
    /// GPU indices.
    pub gpus: Vec<u32>,
    /// What the attempt asked of placement (its declaration per GPU in
    /// MiB among it).
    pub request: crate::allocation::Request,
    /// Leader's start time in clock ticks.
    pub start_ticks: Option<u64>,
    /// Boot id at spawn.
    pub boot_id: Option<String>,
    /// The attempt's supervisor, when it has one (docs/BEHAVIOUR.md "Exactly once").
    pub supervisor: Option<ProcessId>,
    /// Where this attempt's output starts in its log (bytes).
    pub log_offset: Option<u64>,
    /// Its Slurm job id, when it runs on a cluster (docs/BEHAVIOUR.md "Slurm").
    pub slurm_job_id: Option<u64>,
    /// The Slurm allocation of the pilot that started it, if any.
    pub allocation: Option<u64>,
    /// Its cgroup directories, when contained (docs/BEHAVIOUR.md "Containment").
    pub cgroup: Vec<String>,
    /// The job's command, filled in when read back from the journal at
    /// start (for orphans whose line may be gone); `None` for attempts
    /// started by this scheduler, which keeps it elsewhere.
    pub command: Option<String>,
}

/// The journal's last word on a job.
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    /// Seen, never started (or requeued after `oom` / `interrupted`).
    Waiting,
    /// Started with no outcome yet: running, or an orphan of a dead scheduler.
    Started(Box<StartedInfo>),
    /// Terminal: never dispatched again. Boxed: most jobs of a long queue
    /// are not finished, and they should not pay for this record.
    Done(Box<Finished>),
}

/// How a job ended, with what the summary needs (docs/BEHAVIOUR.md "The live queue" `done`).
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// How it ended.
    pub status: DoneStatus,
    /// Its exit code, if it ran.
    pub returncode: Option<i32>,
    /// When (Unix seconds).
    pub ts: f64,
    /// Run time of the last attempt (seconds).
    pub duration_s: f64,
    /// Highest per-GPU peak (MiB); `None` when never measured.
    pub peak_mib: Option<u64>,
    /// Mean device utilization, percent.
    pub avg_util: Option<f64>,
    /// Its own utilisation (the `done` event's `own_util`), percent.
    pub own_util: Option<f64>,
    /// Declaration per GPU of the last attempt (MiB).
    pub vram_mib: Option<u64>,
    /// GPUs the last attempt held, as a bit mask
    /// ([`crate::model::gpu_mask`]).
    pub gpu_mask: crate::model::GpuMask,
    /// Declared, yet no GPU process of it was ever seen: it probably ran
    /// on the CPU (the `done` event's `no_gpu_memory`).
    pub no_gpu_memory: bool,
    /// Its peak against its declaration (the `done` event's).
    pub declaration: Option<crate::model::DeclarationCheck>,
    /// A failed attempt's last line of output (the `done` event's).
    pub last_line: Option<Box<str>>,
}

/// [`KeyState`]'s `next_vram` when no declaration is set for the next
/// attempt.
const NO_NEXT_VRAM: u32 = u32::MAX;

/// The largest display number a `seen` record may carry; one beyond it
/// (a garbled or hand-made journal) is skipped, so that it cannot push
/// every later job's number to the end of the range.
pub const MAX_JOB_NO: u32 = 1 << 30;

/// Whether `no` can be a display number this scheduler gave.
fn plausible_no(no: u32) -> bool {
    (1..=MAX_JOB_NO).contains(&no)
}

/// Opens the journal at `path` for appending and reading, created if
/// missing, never through a symbolic link and
/// never blocking on a FIFO: a journal that is not a regular file is
/// refused (docs/SECURITY.md "One writer").
///
/// Errors: the file cannot be opened, or is no regular file.
fn open_journal(path: &Path) -> anyhow::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = File::options()
        .create(true)
        .append(true)
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            let why = match e.raw_os_error() {
                Some(libc::ELOOP) => "it is a symbolic link".to_string(),
                _ => e.to_string(),
            };
            anyhow::anyhow!("cannot open journal {}: {why}", path.display())
        })?;
    let meta = file.metadata()?;
    anyhow::ensure!(
        meta.is_file(),
        "cannot open journal {}: it is not a regular file",
        path.display()
    );
    Ok(file)
}

#[cfg(test)]
impl Finished {
    /// A bare outcome with `status`, for tests of rules that read it.
    pub fn of_status(status: DoneStatus) -> Finished {
        Finished {
            status,
            returncode: None,
            ts: 0.0,
            duration_s: 0.0,
            peak_mib: None,
            avg_util: None,
            own_util: None,
            vram_mib: None,
            gpu_mask: 0,
            no_gpu_memory: false,
            declaration: None,
            last_line: None,
        }
    }
}

/// Everything the journal says about one key, kept small (64 bytes): a
/// long journal holds one of these per job ever seen.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyState {
    /// Display number.
    pub no: u32,
    /// Byte offset of its `seen` line in the journal file, when it was read
    /// from there (`u64::MAX` otherwise).
    pub seen_offset: u64,
    /// When the job was first seen, i.e. queued (Unix seconds).
    pub seen_ts: f64,
    /// When its first attempt started (Unix seconds); NaN before that
    /// (read it with [`KeyState::first_started_ts`]).
    first_started: f64,
    /// Attempts started so far.
    pub attempts: u32,
    /// OOM attempts so far.
    pub retries_used: u32,
    /// Declaration (MiB per GPU) for the next attempt after an OOM (read
    /// it with [`KeyState::next_vram`]; 32 bits of MiB are 4 PiB), or
    /// [`NO_NEXT_VRAM`]: four bytes where an `Option` took eight.
    next_vram: u32,
    /// Whether its last attempt was preempted (the next one gets
    /// `GPUSCHED_PREEMPTED=1`).
    pub preempted: bool,
    /// Whether `gpusched hold` holds it (and no `release` let it go):
    /// it waits, never started, until released.
    pub held: bool,
    /// Whether `gpusched cancel` asked for it to be cancelled (and no
    /// `retry` withdrew that): stopped if it runs, never started.
    pub cancel_requested: bool,
    /// Whether its outcome is to be posted to `--notify` and no
    /// `notified` event says it was (docs/BEHAVIOUR.md "Being told").
    pub notify_pending: bool,
    /// Run time lost to preemption over all attempts (seconds; read it
    /// with [`KeyState::preempted_s`]). Single precision, a tenth of a
    /// second at ten days: the 64-byte budget has no room for eight.
    preempted_s: f32,
    /// Where the job stands.
    pub phase: Phase,
}

/// The open journal and its fold.
pub struct Journal {
    path: PathBuf,
    file: File,
    /// Every key's state, by a dense id given in the order keys were
    /// first seen (file order): scans over the queue read them in order
    /// instead of hashing every key.
    states: Vec<KeyState>,
    /// Each key's id in `states`, and the key of each id.
    keys: keys::Keys,
    next_no: u32,
    generation: u64,
    /// The starvation hold in force (docs/BEHAVIOUR.md "Queue policy"):
    /// the job's key and its GPUs.
    starvation_hold: Option<(String, Vec<u32>)>,
    /// Jobs waiting out a retry delay: key → when the retry may start
    /// (Unix seconds). Few at a time, so kept beside the states, not in
    /// each.
    retry_not_before: std::collections::HashMap<String, f64>,
    /// Set between [`Journal::defer_sync`] and [`Journal::sync`]: appends
    /// are written but not yet fsynced.
    sync_deferred: bool,
    /// Whether something was written since the last fsync.
    unsynced: bool,
    /// The buffer batches of `seen` lines are written from, kept between
    /// batches (a fresh one per batch would fault in its pages each time).
    seen_buf: Vec<u8>,
    /// The clock [`Journal::append`] stamps events with: the system's,
    /// or the scheduler's ([`Journal::set_clock`]).
    clock: crate::clock::Clock,
}

/// What [`Journal::open`] found while reading an existing journal.
#[derive(Debug, Default)]
pub struct Replay {
    /// Events read.
    pub events: usize,
    /// 1-based numbers of lines skipped as torn or garbled.
    pub bad_lines: Vec<usize>,
}

impl Journal {
    /// Opens (creating if needed) the journal at `path` and folds what it
    /// holds. Torn or garbled lines are skipped and listed in the [`Replay`].
    ///
    /// Errors: the file cannot be read or opened for appending.
    pub fn open(path: &Path) -> anyhow::Result<(Journal, Replay)> {
        let mut journal = Journal {
            path: path.to_path_buf(),
            file: open_journal(path)?,
            states: Vec::new(),
            keys: keys::Keys::default(),
            next_no: 1,
            generation: 0,
            starvation_hold: None,
            retry_not_before: std::collections::HashMap::new(),
            sync_deferred: false,
            unsynced: false,
            seen_buf: Vec::new(),
            clock: crate::clock::Clock::System,
        };
        let mut replay = Replay::default();
        let mut reader = journal.file.try_clone()?;
        reader.seek(std::io::SeekFrom::Start(0))?;
        // Roughly one job per 300 bytes of journal: reserve so that growing
        // the map never moves every entry.
        let len = reader.metadata().map_or(0, |m| m.len());
        journal.reserve((len / 300) as usize);
        // A reader thread reads and parses while this one folds, in file
        // order: on a long journal each takes about half the work.
        let (tx, rx) = std::sync::mpsc::sync_channel::<std::io::Result<Batch>>(4);
        let mut ends_with_newline = true;
        std::thread::scope(|scope| -> anyhow::Result<()> {
            let worker = &mut reader;
            scope.spawn(move || read_and_parse(worker, &tx));
            let mut line_no = 0usize;
            for batch in rx {
                let batch = batch
                    .map_err(|e| anyhow::anyhow!("cannot read journal {}: {e}", path.display()))?;
                for line in batch.lines {
                    line_no += 1;
                    match line {
                        Parsed::Blank => {}
                        Parsed::Bad => replay.bad_lines.push(line_no),
                        Parsed::Event {
                            key,
                            ts,
                            step,
                            offset,
                        } => {
                            journal.fold_parsed(key, ts, step, offset);
                            replay.events += 1;
                        }
                    }
                }
                ends_with_newline = batch.ends_with_newline;
            }
            Ok(())
        })?;
        if !ends_with_newline {
            // A torn last line: start the next event on a line of its own.
            journal.file.write_all(b"\n")?;
        }
        // Orphans need their command; read back their `seen` lines only.
        let orphans: Vec<(String, u64)> = journal
            .states()
            .filter(|(_, state)| matches!(state.phase, Phase::Started(_)))
            .map(|(key, state)| (key.to_string(), state.seen_offset))
            .collect();
        for (key, offset) in orphans {
            let command = read_line_at(&mut reader, offset)
                .and_then(|line| serde_json::from_slice::<SeenCommand>(&line).ok())
                .map(|seen| seen.command);
            if let Some(Phase::Started(info)) = journal.state_mut(&key).map(|s| &mut s.phase) {
                info.command = command;
            }
        }
        Ok((journal, replay))
    }

    /// Folds one parsed journal line, remembering where a `seen` line was.
    fn fold_parsed(&mut self, key: String, ts: f64, step: Fold, offset: u64) {
        if let Fold::Seen { no } = step {
            if !plausible_no(no) {
                return;
            }
            self.next_no = self.next_no.max(no.saturating_add(1));
            if self.keys.get(&key).is_none() {
                let mut state = KeyState::new(no, ts);
                state.seen_offset = offset;
                self.insert(&key, state);
            }
            return;
        }
        self.apply(&key, ts, step);
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the journal says about `key`, if it has seen it.
    pub fn state(&self, key: &str) -> Option<&KeyState> {
        self.keys.get(key).map(|id| &self.states[id as usize])
    }

    /// The id of `key`'s state, if the journal has seen it: stable for the
    /// journal's life (keys are never forgotten), for [`Journal::state_at`].
    pub fn id_of(&self, key: &str) -> Option<u32> {
        self.keys.get(key)
    }

    /// How many keys the journal knows; the next new key gets this id.
    pub fn key_count(&self) -> u32 {
        self.states.len() as u32
    }

    /// The state with id `id` (from [`Journal::id_of`]).
    ///
    /// Panics: an id this journal did not give.
    pub fn state_at(&self, id: u32) -> &KeyState {
        &self.states[id as usize]
    }

    /// Every key the journal knows, with its state, in the order the keys
    /// were first seen.
    pub fn states(&self) -> impl Iterator<Item = (&str, &KeyState)> {
        self.keys
            .iter()
            .map(|(id, key)| (key, &self.states[id as usize]))
    }

    fn state_mut(&mut self, key: &str) -> Option<&mut KeyState> {
        let id = self.keys.get(key)?;
        Some(&mut self.states[id as usize])
    }

    /// Adds a key never seen before; returns its state.
    fn insert(&mut self, key: &str, state: KeyState) -> &mut KeyState {
        let id = self.keys.insert(key);
        self.states.push(state);
        &mut self.states[id as usize]
    }

    /// Makes room for `additional` more jobs at once, so that recording a
    /// large batch of new jobs does not grow the state map step by step
    /// (each step briefly holds the old and the new table).
    pub fn reserve(&mut self, additional: usize) {
        self.states.reserve(additional);
        self.keys.reserve(additional);
    }

    /// Counts appends: equal generations mean no event was added in
    /// between (for caches of what the fold says).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The reservation the journal has in force: the job's key and the
    /// GPUs held for it (until it starts or ends).
    pub fn starvation_hold(&self) -> Option<&(String, Vec<u32>)> {
        self.starvation_hold.as_ref()
    }

    /// When job `key`'s retry after a failure may start (Unix seconds),
    /// while it waits out its retry delay.
    pub fn retry_not_before(&self, key: &str) -> Option<f64> {
        self.retry_not_before.get(key).copied()
    }

    /// The display number the next new job will get.
    pub fn next_no(&self) -> u32 {
        self.next_no
    }

    /// Appends events (one line each), then flushes and fsyncs once, then
    /// folds them. Errors: the write or fsync fails — nothing of the batch
    /// is kept in the file or the fold, and the caller must not act as if
    /// the events were recorded.
    pub fn append_all(&mut self, records: &[Record]) -> anyhow::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::with_capacity(records.len() * 128);
        for record in records {
            serde_json::to_writer(&mut buf, record)?;
            buf.push(b'\n');
        }
        self.write_batch(&buf)?;
        for record in records {
            self.fold(record);
        }
        self.generation += 1;
        Ok(())
    }

    /// Appends `seen` events for new jobs (key, display number, command) at
    /// `ts` with one write and one fsync, as [`Journal::append_all`] would,
    /// without building a [`Record`] (and copying its strings) per job:
    /// a million-line file is recorded at start. The keys are ones the
    /// journal does not know yet, each once (a jobs file's keys are
    /// distinct); the lines are those serde writes for [`Event::Seen`].
    ///
    /// Errors: as for [`Journal::append_all`].
    pub fn append_seen(&mut self, ts: f64, jobs: &[(&str, u32, &str)]) -> anyhow::Result<()> {
        if jobs.is_empty() {
            return Ok(());
        }
        let mut buf = std::mem::take(&mut self.seen_buf);
        buf.clear();
        // The line `Event::Seen` serializes to, written directly: the time
        // is the same for the whole batch, a key needs no escaping, and
        // only the command goes through the JSON string writer.
        let mut head = br#"{"ts":"#.to_vec();
        serde_json::to_writer(&mut head, &ts)?;
        head.extend_from_slice(br#","key":""#);
        for &(key, no, command) in jobs {
            debug_assert!(key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'#'));
            buf.extend_from_slice(&head);
            buf.extend_from_slice(key.as_bytes());
            buf.extend_from_slice(br#"","event":"seen","no":"#);
            write!(buf, "{no}")?;
            buf.extend_from_slice(br#","command":"#);
            serde_json::to_writer(&mut buf, command)?;
            buf.extend_from_slice(b"}\n");
        }
        let written = self.write_batch(&buf);
        self.seen_buf = buf;
        written?;
        for &(key, no, _) in jobs {
            if plausible_no(no) {
                self.next_no = self.next_no.max(no.saturating_add(1));
                // The caller's keys are new: no look-up before the insert.
                debug_assert!(self.keys.get(key).is_none(), "{key} seen twice");
                self.insert(key, KeyState::new(no, ts));
            }
        }
        self.generation += 1;
        Ok(())
    }

    /// Group commit: appends from now on are written and folded at once
    /// but fsynced together by the next [`Journal::sync`]. Until then an
    /// append is not durable: the caller must not act on it outside this
    /// process (a supervisor's `ack`) before `sync` succeeds.
    pub fn defer_sync(&mut self) {
        self.sync_deferred = true;
    }

    /// Ends a group commit: one fsync for everything appended since
    /// [`Journal::defer_sync`].
    ///
    /// Errors: the fsync fails; the appends are then in the fold and
    /// probably in the file, but not known to be durable.
    pub fn sync(&mut self) -> anyhow::Result<()> {
        self.sync_deferred = false;
        if !std::mem::take(&mut self.unsynced) {
            return Ok(());
        }
        self.file.sync_data().map_err(|e| {
            crate::error::Error::io(format!("cannot sync journal {}", self.path.display()), e)
                .into()
        })
    }

    /// Whether appends wait for [`Journal::sync`] to be durable.
    pub fn sync_deferred(&self) -> bool {
        self.sync_deferred
    }

    /// Writes whole lines and fsyncs them (unless a group commit defers
    /// that); on failure cuts off what part of them was written.
    fn write_batch(&mut self, buf: &[u8]) -> anyhow::Result<()> {
        let len_before = self.file.metadata().map(|m| m.len());
        let sync_now = !self.sync_deferred;
        let written = self.file.write_all(buf).and_then(|_| {
            if sync_now {
                self.file.sync_data()
            } else {
                self.unsynced = true;
                Ok(())
            }
        });
        if let Err(e) = written {
            // A full disk may have taken part of the batch: cut it off, so
            // the next append starts on a line of its own.
            if let Ok(len) = len_before {
                let _ = self.file.set_len(len);
            }
            return Err(crate::error::Error::io(
                format!("cannot write journal {}", self.path.display()),
                e,
            )
            .into());
        }
        Ok(())
    }

    /// Stamps the events [`Journal::append`] writes from now on with the
    /// time on `clock` (the scheduler's, so that a test's manual clock
    /// reaches the journal too).
    pub fn set_clock(&mut self, clock: crate::clock::Clock) {
        self.clock = clock;
    }

    /// Appends one event now (Unix time on its clock) for `key`.
    pub fn append(&mut self, key: &str, event: Event) -> anyhow::Result<()> {
        self.append_all(&[Record {
            ts: self.clock.now().ts,
            key: key.to_string(),
            event,
        }])
    }
}

impl KeyState {
    /// The state of a job just seen as number `no` at `seen_ts` (Unix
    /// seconds): waiting, never started.
    pub fn new(no: u32, seen_ts: f64) -> Self {
        KeyState {
            no,
            seen_offset: u64::MAX,
            seen_ts,
            first_started: f64::NAN,
            attempts: 0,
            retries_used: 0,
            held: false,
            next_vram: NO_NEXT_VRAM,
            preempted: false,
            cancel_requested: false,
            notify_pending: false,
            preempted_s: 0.0,
            phase: Phase::Waiting,
        }
    }

    /// When its first attempt started (Unix seconds), if one did.
    pub fn first_started_ts(&self) -> Option<f64> {
        (!self.first_started.is_nan()).then_some(self.first_started)
    }

    /// Declaration (MiB per GPU) for the next attempt after an OOM.
    pub fn next_vram(&self) -> Option<u64> {
        (self.next_vram != NO_NEXT_VRAM).then_some(u64::from(self.next_vram))
    }

    /// Sets the declaration for the next attempt (MiB per GPU; saturates
    /// 1 MiB under 4 PiB).
    pub fn set_next_vram(&mut self, mib: Option<u64>) {
        self.next_vram = match mib {
            None => NO_NEXT_VRAM,
            Some(m) => u32::try_from(m).unwrap_or(u32::MAX).min(NO_NEXT_VRAM - 1),
        };
    }

    /// Run time lost to preemption over all attempts (seconds).
    pub fn preempted_s(&self) -> f64 {
        f64::from(self.preempted_s)
    }

    /// Adds `seconds` to the run time lost to preemption.
    pub fn add_preempted_s(&mut self, seconds: f64) {
        self.preempted_s += seconds as f32;
    }
}

mod fold;
pub(crate) mod keys;
mod read;
use fold::Fold;
#[cfg(test)]
mod tests;
