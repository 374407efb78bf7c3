//! Machine-readable state, one document per file: the [`StatusDoc`] and
//! `<log_dir>/status.json` (schema `docs/status.schema.json`, described in
//! docs/BEHAVIOUR.md "status.json") here, `<log_dir>/metrics.prom` in [`metrics`] (Prometheus
//! text exposition, for node_exporter's textfile collector), both
//! rewritten atomically every round from one [`StatusDoc`]; the
//! end-of-run summary in [`summary`]. The `gpusched status` screen is
//! [`crate::view::screen`].

mod metrics;
mod summary;

pub(crate) use summary::table;
pub use summary::{summary, summary_within};

use crate::model::{DoneStatus, JobState, SchedulerState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use strum::VariantArray;

/// The `schema` field of `status.json`; bumped on incompatible changes.
pub const SCHEMA: &str = "gpusched-status/1";

/// Jobs of each kind (waiting, finished) listed in `status.json`; the
/// `counts` object always covers every job.
pub const JSON_LIST_LIMIT: usize = 200;

/// The whole of `status.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusDoc {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// When this document was written (Unix seconds).
    pub updated: f64,
    /// The scheduler process.
    pub scheduler: SchedulerStatus,
    /// Number of jobs per state, over every job of the jobs file.
    pub counts: BTreeMap<String, usize>,
    /// Jobs finished during this scheduler's life, per status (for
    /// Prometheus counters).
    pub finished_this_run: BTreeMap<String, u64>,
    /// Every GPU the scheduler may use, by index.
    pub gpus: Vec<GpuStatus>,
    /// Running jobs, then waiting ones (the first [`JSON_LIST_LIMIT`] in
    /// queue order), then finished ones (the last [`JSON_LIST_LIMIT`]).
    pub jobs: Vec<JobStatus>,
    /// The box rules and everyone's part in them, when a rules file is in
    /// force (docs/BEHAVIOUR.md "Rules for a shared box").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub box_rules: Option<BoxStatus>,
    /// OOMs during this run that another job's over-use caused
    /// (docs/BEHAVIOUR.md "Declarations that hold"), oldest first.
    #[serde(default)]
    pub oom_blame: Vec<OomBlame>,
}

/// One OOM caused by another job's over-use.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OomBlame {
    /// The job that ran out of memory (display number).
    pub victim: u32,
    /// The job that was over its declaration on the same GPU.
    pub culprit: u32,
    /// What the culprit used there at its highest (MiB).
    pub peak_mib: u64,
    /// What the culprit declared (MiB per GPU).
    pub declared_mib: u64,
}

/// The box rules as one user's scheduler sees them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxStatus {
    /// The rules file.
    pub rules_file: String,
    /// Our user.
    pub user: String,
    /// Whether fair share is on.
    pub fair_share: bool,
    /// Our user's fair-share factor in (0, 1] (higher goes first); `None`
    /// without fair share.
    pub factor: Option<f64>,
    /// Our user's decayed usage: GPU memory booked × seconds (MiB·s).
    pub usage_mib_s: f64,
    /// Our user's decayed usage: GPUs held × seconds (GPU·s).
    pub usage_gpu_s: f64,
    /// Our user's quota (`null`: no limit).
    pub quota: crate::rules::quota::Quota,
    /// What our user holds toward it, box-wide.
    pub quota_use: QuotaUseStatus,
    /// Every user the ledger knows, by name.
    pub users: Vec<BoxUser>,
    /// Every personal reservation that counts now.
    pub reservations: Vec<PersonalReservation>,
}

/// What one user holds toward their quota.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaUseStatus {
    /// GPUs with a job or reservation of theirs.
    pub gpus: u32,
    /// MiB booked (jobs and reservations).
    pub vram_mib: u64,
    /// Jobs running.
    pub running: u32,
}

/// One user of the box.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxUser {
    /// Their name.
    pub user: String,
    /// Their jobs running, all their schedulers.
    pub running: u64,
    /// Their jobs waiting, all their schedulers.
    pub pending: u64,
    /// MiB booked by their jobs and reservations.
    pub booked_mib: u64,
    /// Their fair-share factor; `None` without fair share.
    pub factor: Option<f64>,
    /// Their personal reservations.
    pub reservations: u32,
    /// Their quota under the box rules (`null`: no limit).
    pub quota: crate::rules::quota::Quota,
}

impl From<&crate::ledger::people::Held> for PersonalReservation {
    fn from(h: &crate::ledger::people::Held) -> Self {
        PersonalReservation {
            id: h.reservation.id,
            user: h.user.clone(),
            gpu: h.reservation.gpu,
            mib: h.reservation.mib,
            until: h.reservation.until_ms as f64 / 1000.0,
            note: h.reservation.note.clone(),
        }
    }
}

impl PersonalReservation {
    /// The line the views print: `reservation 1: GPU 0, 24000 MiB, bob
    /// until 15:42: notebook`.
    pub fn line(&self) -> String {
        format!(
            "reservation {}: GPU {}, {} MiB, {} until {}{}",
            self.id,
            self.gpu,
            self.mib,
            self.user,
            crate::console::clock_short(self.until),
            if self.note.is_empty() {
                String::new()
            } else {
                format!(": {}", self.note)
            }
        )
    }
}

/// One personal reservation (`gpusched reserve`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PersonalReservation {
    /// Its number (for `gpusched unreserve`).
    pub id: u32,
    /// Whose.
    pub user: String,
    /// The GPU index.
    pub gpu: u32,
    /// MiB reserved.
    pub mib: u64,
    /// When it ends (Unix seconds).
    pub until: f64,
    /// What it is for.
    pub note: String,
}

/// The scheduler process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerStatus {
    /// Its pid (to tell whether it still runs).
    pub pid: u32,
    /// Its working directory: where a job without `cwd=` runs
    /// (`gpusched add` writes `cwd=` only for another directory).
    #[serde(default)]
    pub cwd: Option<String>,
    /// gpusched version.
    pub version: String,
    /// When it started (Unix seconds).
    pub started: f64,
    /// `--poll` in seconds.
    pub poll_s: f64,
    /// `sim` or `nvml`.
    pub backend: String,
    /// E.g. `2 simulated GPUs of 24000 MiB`.
    pub backend_detail: String,
    /// With `--sim`: the simulated GPUs' directory, so that `top`, `serve`
    /// and `reserve` see the same GPUs.
    #[serde(default)]
    pub sim_dir: Option<String>,
    /// `running` (dispatching), `finishing` (no job left to start; waiting
    /// for running ones), `paused-by-errors` (GPU queries failing),
    /// `stopping` (after Ctrl-C / SIGTERM), `stopped` (ended by a signal) or
    /// `finished` (queue done, exited).
    pub state: SchedulerState,
    /// Why dispatching is paused by errors, when it is.
    pub paused_reason: Option<String>,
    /// Why the jobs file's latest edit was ignored (`line 7: unknown
    /// attribute 'vrma': [vrma=4G] …`), while it does not parse or cannot
    /// be read; the last good queue runs on meanwhile.
    #[serde(default)]
    pub jobs_file_problem: Option<String>,
    /// Whether `gpusched pause` holds new dispatch (docs/BEHAVIOUR.md "Queue policy").
    #[serde(default)]
    pub queue_paused: bool,
    /// GPUs `gpusched drain` closed to new jobs.
    #[serde(default)]
    pub drained: Vec<u32>,
    /// Set when NVML reports GPU processes this PID namespace cannot see
    /// (a container without the host's PID namespace): how VRAM is
    /// measured then (docs/HARDWARE.md "Containers").
    #[serde(default)]
    pub hidden_processes: Option<String>,
    /// The starvation hold in force (docs/BEHAVIOUR.md "Queue policy"), if
    /// any. Earlier versions wrote it as `reservation`, which is still read
    /// (until the release after next).
    #[serde(default, alias = "reservation")]
    pub starvation_hold: Option<StarvationHoldStatus>,
    /// The head job's backfill reservation (docs/BEHAVIOUR.md
    /// "Backfill"): the first job in queue order that waits (or, when its
    /// start is unknown, the first whose start is known), its expected
    /// start and the GPUs it gets then; no job starts where it would delay
    /// it. Null when no waiting job's start is known.
    #[serde(default)]
    pub backfill: Option<BackfillStatus>,
    /// The arguments it was started with, after the program's name, each
    /// URL cut to its scheme and host (a webhook's secret is in its path):
    /// what `gpusched status` repeats to start it again. Empty from
    /// earlier versions.
    #[serde(default)]
    pub command: Vec<String>,
    /// The jobs file.
    pub jobs_file: String,
    /// The log directory.
    pub log_dir: String,
    /// Whether `--watch` is on.
    pub watch: bool,
    /// Ticks of the loop so far: each one looked at every source of work
    /// once (a test waits for it to advance before it asserts that
    /// something did not happen).
    #[serde(default)]
    pub ticks: u64,
}

/// GPUs the starvation hold keeps for one blocked job (docs/BEHAVIOUR.md
/// "Queue policy").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StarvationHoldStatus {
    /// The job's display number.
    pub job: u32,
    /// The GPU indices held for it.
    pub gpus: Vec<u32>,
}

/// The head job's backfill reservation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackfillStatus {
    /// The head job's display number.
    pub job: u32,
    /// Its expected start (Unix seconds), as `squeue --start` shows it.
    pub start: f64,
    /// The GPUs it gets then.
    pub gpus: Vec<u32>,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuStatus {
    /// Device id: a whole GPU's NVML index, or a MIG instance's id above
    /// 63 (docs/HARDWARE.md "MIG").
    pub index: u32,
    /// The device as nvidia-smi names it: `1`, or `0:1` for MIG device 1
    /// of GPU 0.
    #[serde(default)]
    pub label: String,
    /// A MIG instance's profile (`3g.40gb`); null for a whole GPU.
    #[serde(default)]
    pub profile: Option<String>,
    /// UUID.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Total memory (MiB).
    pub total_mib: u64,
    /// Used by anyone (MiB).
    pub used_mib: u64,
    /// Effective external usage (MiB), docs/BEHAVIOUR.md "Placement".
    pub external_mib: u64,
    /// Room for a new declared job, before the margin (MiB), docs/BEHAVIOUR.md "Placement"; 0
    /// when the GPU is closed to new jobs.
    pub headroom_mib: u64,
    /// Closed to new jobs: one of our undeclared or `[exclusive]` jobs
    /// holds it, or `--exclusive` and one of our jobs runs on it
    /// ([`crate::allocation::is_closed`]; docs/BEHAVIOUR.md "Placement", "Queue policy").
    #[serde(default)]
    pub closed: bool,
    /// Drained by `gpusched drain`: no new job starts on it (docs/BEHAVIOUR.md "Queue policy").
    #[serde(default)]
    pub drained: bool,
    /// Closed because it stopped answering (docs/HARDWARE.md "A sick
    /// GPU"): why and since when; `null` while it answers.
    #[serde(default)]
    pub fault: Option<GpuFaultStatus>,
    /// Device utilization, percent; null when not reported.
    pub util_percent: Option<u32>,
    /// Display numbers of our jobs on it.
    pub jobs: Vec<u32>,
    /// Fraction of this run's samples in which a job of ours was on it.
    pub busy_fraction: Option<f64>,
    /// Mean memory in use over this run's samples (MiB).
    pub mean_used_mib: Option<f64>,
    /// Memory other schedulers on this box booked on it, per user (docs/BEHAVIOUR.md "Sharing a box"); empty without a ledger.
    #[serde(default)]
    pub booked_by_others: Vec<OtherBooking>,
    /// GPU processes of our finished jobs still holding memory on it
    /// (docs/BEHAVIOUR.md "Containment").
    #[serde(default)]
    pub left_behind: Vec<LeftBehind>,
    /// When the last of our jobs on it should end (Unix seconds), when
    /// every one of them has an expected end (docs/BEHAVIOUR.md
    /// "Expected times").
    #[serde(default)]
    pub expected_free: Option<f64>,
    /// Where `expected_free` comes from: `progress`, `history` or
    /// `timeout`.
    #[serde(default)]
    pub expected_free_source: Option<String>,
}

pub use crate::gpu::attribution::LeftBehind;

/// Why a GPU is closed after it stopped answering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuFaultStatus {
    /// What NVML said: `NVML_ERROR_GPU_IS_LOST: device fell off the bus …`.
    pub reason: String,
    /// When it was closed (Unix seconds).
    pub since: f64,
    /// Good samples in a row since its latest failure; it opens again at
    /// `reopen_after`.
    pub good_samples: u32,
    /// Good samples in a row that open it again.
    pub reopen_after: u32,
    /// Only `gpusched undrain` opens it (an XID error event).
    #[serde(default)]
    pub lasting: bool,
}

impl JobStatus {
    /// The command as the views list it: after its `name=` when it has
    /// one (`prep: python prep.py`).
    pub fn shown_command(&self) -> String {
        match &self.name {
            Some(name) => format!("{name}: {}", self.command),
            None => self.command.clone(),
        }
    }

    /// What the views print under a waiting or running job: where an
    /// `auto` declaration comes from, and why it waits (docs/BEHAVIOUR.md "Queue policy", "Learned VRAM").
    pub fn explanation(&self) -> Option<String> {
        let expected = self.expected_text();
        let parts: Vec<&str> = [
            self.vram_source.as_deref(),
            self.reason.as_deref(),
            expected.as_deref(),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// `ends ~14:30 (progress)` or `starts ~14:35 (history)`, in local
    /// clock time (docs/BEHAVIOUR.md "Expected times").
    pub fn expected_text(&self) -> Option<String> {
        let source = self.expected_source.as_deref()?;
        let (word, at) = match (self.expected_end, self.expected_start) {
            (Some(at), _) => ("ends", at),
            (None, Some(at)) => ("starts", at),
            (None, None) => return None,
        };
        Some(format!(
            "{word} ~{} ({source})",
            crate::console::clock_short(at)
        ))
    }
}

/// What one other user's scheduler booked on one GPU (docs/BEHAVIOUR.md "Sharing a box").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OtherBooking {
    /// Their user name (or `uid N`).
    pub user: String,
    /// MiB booked, the budgets of their running jobs on this GPU.
    pub mib: u64,
    /// How many of their jobs.
    pub jobs: usize,
}

/// One job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobStatus {
    /// Display number.
    pub no: u32,
    /// Identity key.
    pub key: String,
    /// `running`, `pending`, `retry_wait`, or a terminal status (`ok`,
    /// `failed`, `failed_oom`, `timeout`, `cancelled`, `infeasible`,
    /// `dependency_failed`).
    pub state: JobState,
    /// The command.
    pub command: String,
    /// Its `name=`, if the line gives one (docs/BEHAVIOUR.md "Jobs file").
    #[serde(default)]
    pub name: Option<String>,
    /// GPU indices of the current or last attempt (empty if never run).
    pub gpus: Vec<u32>,
    /// GPUs the job asks for (`gpus=`).
    pub gpus_wanted: u32,
    /// Declaration per GPU (MiB) of the current or next attempt.
    pub vram_mib: Option<u64>,
    /// MiB in use now per GPU index (running jobs).
    pub current_mib: BTreeMap<String, u64>,
    /// Peak MiB per GPU index; null where never measured. For finished
    /// jobs, one entry `"max"`.
    pub peak_mib: BTreeMap<String, Option<u64>>,
    /// Attempts started so far.
    pub attempt: u32,
    /// Retries used so far: attempts that ended in a CUDA OOM, and under
    /// `retry_on=` failures run again. Earlier versions wrote
    /// `oom_attempts`, which is still read.
    #[serde(alias = "oom_attempts")]
    pub retries_used: u32,
    /// Running and measured beyond its declaration plus `--tolerance`
    /// (docs/BEHAVIOUR.md "Declarations that hold").
    #[serde(default, alias = "over_declared")]
    pub exceeded_declaration: bool,
    /// Ended, declared, and never seen on its GPUs although it ran 10 s
    /// or more where attribution works: it probably ran on the CPU
    /// (docs/BEHAVIOUR.md "Monitoring").
    #[serde(default)]
    pub no_gpu_memory: bool,
    /// For a job that failed: the last line it wrote to its log, where
    /// the reason usually is (`/bin/sh: 1: pythn: not found`), control
    /// characters shown as `�`, at most 120 characters; journaled when it
    /// ended.
    #[serde(default)]
    pub last_line: Option<String>,
    /// For a job that ended: its peak against its declaration, as checked
    /// when it ended (docs/BEHAVIOUR.md "Monitoring", "Words"): `fit` is
    /// `within`, `over_declared` or `exceeded`, `percent` how far off;
    /// null when either was unknown.
    #[serde(default, serialize_with = "crate::model::serialize_shown_check")]
    pub declaration: Option<crate::model::DeclarationCheck>,
    /// When queued (first seen), Unix seconds.
    pub queued: Option<f64>,
    /// When its first attempt started.
    pub started: Option<f64>,
    /// When it ended.
    pub finished: Option<f64>,
    /// Exit code, once ended (null if it never ran).
    pub returncode: Option<i32>,
    /// Run time of the current or last attempt, seconds.
    pub duration_s: Option<f64>,
    /// Mean utilization of its GPUs while it ran, percent: the whole
    /// GPU's (NVML `nvmlDeviceGetUtilizationRates`), so a job sharing its
    /// GPU shows its neighbours' work too.
    pub avg_util: Option<f64>,
    /// Its log file.
    pub log: Option<String>,
    /// Progress read from its log (running jobs).
    pub progress: Option<ProgressStatus>,
    /// Extra words: `from a previous scheduler, pgid 123`, `stopping:
    /// timeout`, `attempt 2`.
    pub note: Option<String>,
    /// Why a waiting job waits (docs/BEHAVIOUR.md "Queue policy"), e.g. `needs 14848 MiB on 1 GPU;
    /// most free: GPU 1 9664 MiB`; `null` for other jobs.
    #[serde(default)]
    pub reason: Option<String>,
    /// Run time lost to preemption over all attempts, seconds (docs/BEHAVIOUR.md "Queue policy");
    /// `null` when never preempted.
    #[serde(default)]
    pub preempted_s: Option<f64>,
    /// For a `vram=auto` job that is waiting or running: where its
    /// declaration comes from, e.g. `auto 6.4G from 5 runs` (docs/BEHAVIOUR.md "Learned VRAM").
    #[serde(default)]
    pub vram_source: Option<String>,
    /// A running job's expected end (Unix seconds; docs/BEHAVIOUR.md
    /// "Expected times").
    #[serde(default)]
    pub expected_end: Option<f64>,
    /// A waiting job's expected start (Unix seconds).
    #[serde(default)]
    pub expected_start: Option<f64>,
    /// Where the expected end or start comes from: `progress`, `history`
    /// or `timeout`.
    #[serde(default)]
    pub expected_source: Option<String>,
}

/// Progress of a running job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressStatus {
    /// 0–100.
    pub percent: f64,
    /// The marker as printed: `450/1000`, `epoch 3/10`, `45%`.
    pub label: String,
    /// Seconds left at the rate observed so far.
    pub eta_s: Option<f64>,
}

impl StatusDoc {
    /// Writes `status.json` and `metrics.prom` into `log_dir`, each
    /// atomically, readable as the umask allows (docs/BEHAVIOUR.md "Everyday verbs"). Errors: the directory is not writable.
    pub fn write(&self, log_dir: &Path) -> std::io::Result<()> {
        let mut json = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        json.push(b'\n');
        crate::files::write_for_people(&log_dir.join("status.json"), &json)?;
        crate::files::write_for_people(&log_dir.join("metrics.prom"), self.metrics().as_bytes())
    }
}

/// Why a log directory's status.json could not be read as one.
#[derive(Debug, thiserror::Error)]
pub enum StatusReadError {
    /// Missing or unreadable: no scheduler has written one there.
    #[error("cannot read {path} ({reason}): no scheduler has run with --log-dir {dir}")]
    Missing {
        /// status.json's path.
        path: String,
        /// The log directory.
        dir: String,
        /// Why it could not be read.
        reason: String,
    },
    /// A link, FIFO, device, or over [`crate::trust::MAX_STATUS_BYTES`]:
    /// someone put something there that is no status document.
    #[error("refusing to read {path}: {reason}")]
    Refused {
        /// status.json's path.
        path: String,
        /// What it is.
        reason: String,
    },
    /// Read, but not a status document this version understands.
    #[error("{path} is not a gpusched status document: {reason}")]
    Invalid {
        /// status.json's path.
        path: String,
        /// The parser's words.
        reason: String,
    },
}

/// Reads `<log_dir>/status.json` as a file another user may control
/// (docs/SECURITY.md "One reader"): through [`crate::trust::read_untrusted`]
/// with a [`crate::trust::MAX_STATUS_BYTES`] cap, so a FIFO, a link or
/// `/dev/zero` planted there is refused instead of hanging or filling
/// memory. Returns the bytes as read and the parsed document.
///
/// Errors: [`StatusReadError`] — missing, refused, or not a document.
pub fn read_status(log_dir: &Path) -> Result<(Vec<u8>, StatusDoc), StatusReadError> {
    read_status_of(log_dir).map(|(bytes, doc, _)| (bytes, doc))
}

/// [`read_status`] with the file's owner (uid, read on the descriptor it
/// was read from), for views that take a document only from the user a
/// booking names.
///
/// Errors: as [`read_status`]'s.
pub fn read_status_of(log_dir: &Path) -> Result<(Vec<u8>, StatusDoc, u32), StatusReadError> {
    use std::os::unix::fs::MetadataExt;
    let path = log_dir.join("status.json");
    let shown = || crate::console::printable(&path.display().to_string()).into_owned();
    let (bytes, owner) = match crate::trust::read_untrusted(&path, crate::trust::MAX_STATUS_BYTES) {
        Ok((bytes, meta)) => (bytes, meta.uid()),
        Err(crate::trust::Untrusted::Io(e)) => {
            return Err(StatusReadError::Missing {
                path: shown(),
                dir: crate::console::printable(&log_dir.display().to_string()).into_owned(),
                reason: crate::files::io_reason(&e),
            });
        }
        Err(refused) => {
            return Err(StatusReadError::Refused {
                path: shown(),
                reason: refused.to_string(),
            });
        }
    };
    match serde_json::from_slice::<StatusDoc>(&bytes) {
        Ok(doc) => Ok((bytes, doc, owner)),
        Err(e) => Err(StatusReadError::Invalid {
            path: shown(),
            reason: e.to_string(),
        }),
    }
}

/// The terminal states: the words of [`DoneStatus::VARIANTS`], in order.
pub const TERMINAL_STATES: [&str; DoneStatus::VARIANTS.len()] = {
    let mut words = [""; DoneStatus::VARIANTS.len()];
    let mut i = 0;
    while i < words.len() {
        words[i] = DoneStatus::VARIANTS[i].as_str();
        i += 1;
    }
    words
};

/// Every state a job can be in, as `counts` keys: the words of
/// [`JobState::LIVE`], then [`TERMINAL_STATES`] (the order of
/// [`JobState::all`]).
pub const JOB_STATES: [&str; JobState::COUNT] = {
    let mut words = [""; JobState::COUNT];
    let mut i = 0;
    while i < JobState::LIVE.len() {
        words[i] = JobState::LIVE[i].as_str();
        i += 1;
    }
    let mut j = 0;
    while j < TERMINAL_STATES.len() {
        words[i + j] = TERMINAL_STATES[j];
        j += 1;
    }
    words
};

#[cfg(test)]
pub(crate) mod tests;
