//! The shared vocabulary (HOUSE "Words"): how a job ended
//! ([`DoneStatus`]), where a job stands ([`JobState`]) and where the
//! scheduler stands ([`SchedulerState`]). The journal, status.json, the
//! board and `gpusched status` all use these, so one word means one thing
//! everywhere.

use serde::{Deserialize, Serialize};
use strum::VariantArray;

/// How a job ended (docs/BEHAVIOUR.md "The live queue" `done.status`).
///
/// A closed set listed once: [`DoneStatus::VARIANTS`] (strum's
/// `VariantArray`) is the list every view, count and parser derives from,
/// in declaration order, which is the order the board and metrics use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, strum::VariantArray)]
#[serde(rename_all = "snake_case")]
pub enum DoneStatus {
    /// Exit code 0.
    Ok,
    /// Non-zero exit, not an OOM with retries left.
    Failed,
    /// CUDA out of memory with no retries left.
    FailedOom,
    /// Killed at its `timeout=`.
    Timeout,
    /// Cancelled by the user (`cancel` flag).
    Cancelled,
    /// Could never start on the allowed GPUs.
    Infeasible,
    /// A job it runs `after=` ended in anything but `ok` (docs/BEHAVIOUR.md "Queue policy").
    DependencyFailed,
    /// Stopped for using more VRAM than it declared (`--enforce stop`)
    /// with no retries left (docs/BEHAVIOUR.md "Declarations that hold").
    /// Journals before 0.x wrote it `over_declared`, still read.
    #[serde(alias = "over_declared")]
    ExceededDeclaration,
    /// Killed by the kernel's OOM killer at its cgroup's host memory
    /// limit (`mem=`; docs/BEHAVIOUR.md "Containment"); never retried as
    /// a GPU OOM.
    HostOom,
}

/// What releases before the "one vocabulary" change called
/// [`DoneStatus::ExceededDeclaration`]: read from old journals and
/// status documents, never written.
pub const OLD_EXCEEDED_WORD: &str = "over_declared";

impl DoneStatus {
    /// The word used in the journal, on the board and in completion lines.
    pub const fn as_str(self) -> &'static str {
        match self {
            DoneStatus::Ok => "ok",
            DoneStatus::Failed => "failed",
            DoneStatus::FailedOom => "failed_oom",
            DoneStatus::Timeout => "timeout",
            DoneStatus::Cancelled => "cancelled",
            DoneStatus::Infeasible => "infeasible",
            DoneStatus::DependencyFailed => "dependency_failed",
            DoneStatus::ExceededDeclaration => "exceeded_declaration",
            DoneStatus::HostOom => "host_oom",
        }
    }

    /// The status whose word is `word`, if any.
    pub fn from_word(word: &str) -> Option<DoneStatus> {
        // The word an older release wrote for a job that used more than
        // it declared.
        if word == OLD_EXCEEDED_WORD {
            return Some(DoneStatus::ExceededDeclaration);
        }
        DoneStatus::VARIANTS
            .iter()
            .copied()
            .find(|s| s.as_str() == word)
    }

    /// The board's mark (docs/BEHAVIOUR.md "Board and terminal"): `✓` ok, `⊘` cancelled, `✗` the rest.
    pub fn mark(self) -> char {
        if self.is_failure() {
            '✗'
        } else if self == DoneStatus::Cancelled {
            '⊘'
        } else {
            '✓'
        }
    }

    /// Whether this outcome makes the scheduler's exit code non-zero
    /// (docs/BEHAVIOUR.md "Board and terminal": only ok and cancelled do
    /// not). The one exhaustive list of failures: the board's mark and
    /// the notify filter read it.
    pub fn is_failure(self) -> bool {
        match self {
            DoneStatus::Ok | DoneStatus::Cancelled => false,
            DoneStatus::Failed
            | DoneStatus::FailedOom
            | DoneStatus::Timeout
            | DoneStatus::Infeasible
            | DoneStatus::DependencyFailed
            | DoneStatus::ExceededDeclaration
            | DoneStatus::HostOom => true,
        }
    }
}

/// Why an attempt that ran out of GPU memory, or was stopped for using
/// more than it declared, runs again (docs/BEHAVIOUR.md "Out of memory
/// and timeouts", "Declarations that hold"); journaled with its `oom`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OomCause {
    /// Stopped under `--enforce stop` at this measured peak (MiB per GPU)
    /// over its declaration; retried with a bigger one (`over_declared`
    /// in older journals).
    #[serde(alias = "over_declared")]
    ExceededDeclaration {
        /// Its highest per-GPU peak (MiB).
        peak_mib: Option<u64>,
    },
    /// It ran out because another job on its GPU was over its own
    /// declaration at the time: retried with the same declaration, and
    /// no retry used.
    Neighbour(Culprit),
    /// Under `--enforce mps` it hit its MPS memory limit, its declaration
    /// (MiB per GPU): retried with a bigger one.
    MpsLimit {
        /// The limit it hit (MiB per GPU).
        limit_mib: u64,
    },
}

/// A job that was over its declaration on a GPU where another ran out of
/// memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Culprit {
    /// Its display number.
    pub job: u32,
    /// What it used there at its highest (MiB).
    pub peak_mib: u64,
    /// What it declared (MiB per GPU).
    pub declared_mib: u64,
}

impl Culprit {
    /// `job 1 (13900 MiB on a 10240 MiB declaration, +36%)`.
    pub fn describe(&self) -> String {
        format!(
            "job {} ({} MiB on a {} MiB declaration, +{:.0}%)",
            self.job,
            self.peak_mib,
            self.declared_mib,
            (self.peak_mib as f64 / self.declared_mib.max(1) as f64 - 1.0) * 100.0
        )
    }
}

/// A set of devices as a bit mask (bit i = device id i, see
/// [`mig_device_id`]): whole GPUs in bits 0–63, MIG instances above.
pub type GpuMask = u128;

/// The first device id of a MIG instance (docs/HARDWARE.md "MIG"). A whole
/// GPU's device id is its NVML index (below 64); MIG device `m` of GPU
/// `g` (nvidia-smi's "GPU g, MIG device m") is `64 + 8·g + m`, for `g`
/// below 8 and `m` below 8 (a GPU has at most 7 MIG instances, and MIG
/// boards come at most 8 to a box).
pub const MIG_ID_BASE: u32 = 64;

/// The device id of MIG device `mig` of GPU `gpu`; `None` when the pair
/// is beyond what ids can name (GPU index ≥ 8 or MIG index ≥ 8).
pub fn mig_device_id(gpu: u32, mig: u32) -> Option<u32> {
    (gpu < 8 && mig < 8).then(|| MIG_ID_BASE + gpu * 8 + mig)
}

/// (GPU index, MIG device index) of a MIG instance's device id; `None`
/// for a whole GPU.
pub fn mig_of(id: u32) -> Option<(u32, u32)> {
    (MIG_ID_BASE..MIG_ID_BASE + 64)
        .contains(&id)
        .then(|| ((id - MIG_ID_BASE) / 8, (id - MIG_ID_BASE) % 8))
}

/// The GPU a device is on: itself for a whole GPU, the parent for a MIG
/// instance.
pub fn parent_gpu(id: u32) -> u32 {
    mig_of(id).map_or(id, |(gpu, _)| gpu)
}

/// A device as people and nvidia-smi name it: `1` for a whole GPU, `0:1`
/// for MIG device 1 of GPU 0.
pub fn device_label(id: u32) -> String {
    match mig_of(id) {
        Some((gpu, mig)) => format!("{gpu}:{mig}"),
        None => id.to_string(),
    }
}

/// Parses a [`device_label`] back: `1` or `0:1`; `None` when it names no
/// device id.
pub fn parse_device_label(text: &str) -> Option<u32> {
    match text.split_once(':') {
        Some((gpu, mig)) => mig_device_id(gpu.parse().ok()?, mig.parse().ok()?),
        None => text.parse().ok().filter(|&i| i < MIG_ID_BASE),
    }
}

/// A set of device ids as a bit mask. Ids of 128 and above cannot be
/// represented and are left out.
pub fn gpu_mask<'a>(gpus: impl IntoIterator<Item = &'a u32>) -> GpuMask {
    gpus.into_iter()
        .filter(|&&g| g < 128)
        .fold(0, |mask, g| mask | (1u128 << g))
}

/// Whether device `index` is in `mask` (see [`gpu_mask`]).
pub fn mask_has(mask: GpuMask, index: u32) -> bool {
    index < 128 && mask & (1u128 << index) != 0
}

/// Whether device `index` is in `mask`, itself or through its parent GPU
/// (a drained or `on=`-named GPU covers its MIG instances).
pub fn mask_covers(mask: GpuMask, index: u32) -> bool {
    mask_has(mask, index) || mask_has(mask, parent_gpu(index))
}

/// The device ids of `mask`, ascending.
pub fn gpus_of_mask(mask: GpuMask) -> Vec<u32> {
    (0..128).filter(|&i| mask_has(mask, i)).collect()
}

/// Where a job stands, as status.json (`state`), the board and `gpusched
/// status` show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// An attempt runs now (or a live attempt of a previous scheduler).
    Running,
    /// In the queue, never started or requeued.
    Pending,
    /// Requeued after a CUDA OOM, waiting for its next attempt (docs/BEHAVIOUR.md "Out of memory and timeouts").
    RetryWait,
    /// Ended for good.
    Done(DoneStatus),
}

impl JobState {
    /// The live states, in the order counts and boards list them. Adding
    /// a live variant fails to compile in [`JobState::as_str`] and in
    /// the check below until it is listed here too.
    pub const LIVE: [JobState; 3] = [JobState::Running, JobState::Pending, JobState::RetryWait];

    /// How many states there are: the live ones and one per [`DoneStatus`].
    pub const COUNT: usize = JobState::LIVE.len() + DoneStatus::VARIANTS.len();

    /// Every state, in the order counts and boards list them: the live
    /// states, then the terminal ones — derived from [`JobState::LIVE`]
    /// and [`DoneStatus::VARIANTS`], never listed by hand.
    pub fn all() -> impl Iterator<Item = JobState> + Clone {
        JobState::LIVE.into_iter().chain(
            DoneStatus::VARIANTS
                .iter()
                .map(|&status| JobState::Done(status)),
        )
    }

    /// The word in status.json and `counts`: `running`, `pending`,
    /// `retry_wait` or a [`DoneStatus`] word.
    pub const fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Pending => "pending",
            JobState::RetryWait => "retry_wait",
            JobState::Done(status) => status.as_str(),
        }
    }

    /// The state whose word is `word`, if any.
    pub fn from_word(word: &str) -> Option<JobState> {
        if let Some(done) = DoneStatus::from_word(word) {
            return Some(JobState::Done(done));
        }
        JobState::all().find(|s| s.as_str() == word)
    }

    /// Whether the job ended for good.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Done(_))
    }

    /// Whether the job waits for an attempt (pending or retry wait).
    pub fn is_waiting(self) -> bool {
        matches!(self, JobState::Pending | JobState::RetryWait)
    }
}

impl Serialize for JobState {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for JobState {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let word = String::deserialize(deserializer)?;
        JobState::from_word(&word)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown job state '{word}'")))
    }
}

/// Where the scheduler stands, as status.json (`scheduler.state`) shows it.
/// A closed set: [`SchedulerState::VARIANTS`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::VariantArray)]
#[serde(rename_all = "kebab-case")]
pub enum SchedulerState {
    /// Dispatching jobs as they fit.
    Running,
    /// No job left to start (no `--watch`); waiting for the running ones
    /// to end. Earlier versions wrote `draining`, which is still read
    /// (the word now belongs to GPUs closed by `gpusched drain`).
    #[serde(alias = "draining")]
    Finishing,
    /// Dispatch paused: GPU queries fail, or the log directory cannot be
    /// written.
    PausedByErrors,
    /// After Ctrl-C / SIGTERM: stopping running jobs.
    Stopping,
    /// Ended by a signal.
    Stopped,
    /// The queue is done and the scheduler exited.
    Finished,
}

impl SchedulerState {
    /// The word in status.json: `running`, `finishing`, `paused-by-errors`,
    /// `stopping`, `stopped`, `finished`.
    pub const fn as_str(self) -> &'static str {
        match self {
            SchedulerState::Running => "running",
            SchedulerState::Finishing => "finishing",
            SchedulerState::PausedByErrors => "paused-by-errors",
            SchedulerState::Stopping => "stopping",
            SchedulerState::Stopped => "stopped",
            SchedulerState::Finished => "finished",
        }
    }

    /// Whether the scheduler has exited in this state.
    pub fn is_final(self) -> bool {
        matches!(self, SchedulerState::Stopped | SchedulerState::Finished)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_journal_keeps_the_fit_words_every_release_reads() {
        let check = DeclarationCheck {
            fit: Fit::Exceeded,
            percent: 9,
        };
        assert_eq!(
            serde_json::to_string(&check).unwrap(),
            r#"{"fit":"too_small","percent":9}"#
        );
        for word in ["too_small", "exceeded"] {
            let read: DeclarationCheck =
                serde_json::from_str(&format!(r#"{{"fit":"{word}","percent":9}}"#)).unwrap();
            assert_eq!(read, check);
        }
        assert_eq!(Fit::OverDeclared.word(), "over_declared");
    }
    use super::*;

    #[test]
    fn job_state_words_round_trip() {
        assert_eq!(JobState::all().count(), JobState::COUNT);
        // Every live variant is listed: this match has no `_` arm, so a
        // new live variant fails to compile here until LIVE names it.
        for state in JobState::all() {
            match state {
                JobState::Running | JobState::Pending | JobState::RetryWait => {
                    assert!(JobState::LIVE.contains(&state))
                }
                JobState::Done(_) => {}
            }
        }
        assert!(JobState::from_word("host_oom").is_some());
        assert!(JobState::from_word("exceeded_declaration").is_some());
        assert_eq!(
            DoneStatus::from_word("over_declared"),
            Some(DoneStatus::ExceededDeclaration),
            "the old word is still read"
        );
        for state in JobState::all() {
            assert_eq!(JobState::from_word(state.as_str()), Some(state));
            let json = serde_json::to_string(&state).unwrap();
            assert_eq!(json, format!("\"{}\"", state.as_str()));
            assert_eq!(serde_json::from_str::<JobState>(&json).unwrap(), state);
        }
        assert!(serde_json::from_str::<JobState>("\"bogus\"").is_err());
        assert!(JobState::Done(DoneStatus::Ok).is_terminal());
        assert!(JobState::RetryWait.is_waiting() && !JobState::Running.is_waiting());
    }

    #[test]
    fn gpu_masks_round_trip_whole_gpus_and_mig_instances() {
        let mask = gpu_mask(&[0, 3, 63, 64, 99, 128]);
        assert_eq!(mask, 1 | (1 << 3) | (1 << 63) | (1 << 64) | (1 << 99));
        assert_eq!(gpus_of_mask(mask), vec![0, 3, 63, 64, 99]);
        assert!(mask_has(mask, 3) && !mask_has(mask, 1) && !mask_has(mask, 128));
        // GPU 2 covers its MIG instances; an instance does not cover its GPU.
        let mig = mig_device_id(2, 1).unwrap();
        assert!(mask_covers(gpu_mask(&[2]), mig) && !mask_covers(gpu_mask(&[mig]), 2));
    }

    #[test]
    fn device_ids_name_whole_gpus_and_mig_instances() {
        assert_eq!(mig_device_id(0, 1), Some(65));
        assert_eq!(mig_device_id(8, 0), None);
        assert_eq!(mig_device_id(0, 8), None);
        assert_eq!(mig_of(65), Some((0, 1)));
        assert_eq!(mig_of(7), None);
        assert_eq!(parent_gpu(65), 0);
        assert_eq!(parent_gpu(127), 7);
        assert_eq!(parent_gpu(5), 5);
        for id in [0, 5, 63, 64, 65, 127] {
            assert_eq!(parse_device_label(&device_label(id)), Some(id));
        }
        assert_eq!(device_label(65), "0:1");
        assert_eq!(parse_device_label("64"), None);
        assert_eq!(parse_device_label("0:9"), None);
        assert_eq!(parse_device_label("x"), None);
    }

    #[test]
    fn scheduler_state_words() {
        assert_eq!(
            serde_json::to_string(&SchedulerState::PausedByErrors).unwrap(),
            "\"paused-by-errors\""
        );
        assert!(SchedulerState::Finished.is_final() && !SchedulerState::Finishing.is_final());
    }
}

/// How an ended attempt's peak compared with its declaration
/// (docs/BEHAVIOUR.md "Monitoring"), worked out once when it ends and
/// journaled in its `done` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeclarationCheck {
    /// Within `--tolerance`, or which way it missed.
    pub fit: Fit,
    /// |peak ÷ declaration − 1|, in whole percent.
    pub percent: u32,
}

/// Which way a peak missed its declaration ([`DeclarationCheck`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fit {
    /// Within ±`--tolerance` of the declaration.
    Within,
    /// Over-declared: the peak stayed under the declaration by more than
    /// `--tolerance`, so lowering it frees room. The journal keeps writing
    /// it `too_large`, as every release reads it (an older gpusched must
    /// still read a newer journal: a `done` line it could not parse would
    /// run its job again); status.json says [`Fit::word`].
    #[serde(rename = "too_large", alias = "over_declared")]
    OverDeclared,
    /// The peak exceeded the declaration beyond `--tolerance`: raise it.
    /// Journaled `too_small`, as above; status.json says [`Fit::word`].
    #[serde(rename = "too_small", alias = "exceeded")]
    Exceeded,
}

impl Fit {
    /// The word status.json gives it (docs/BEHAVIOUR.md "Words"):
    /// `within`, `over_declared`, `exceeded`.
    pub const fn word(self) -> &'static str {
        match self {
            Fit::Within => "within",
            Fit::OverDeclared => "over_declared",
            Fit::Exceeded => "exceeded",
        }
    }
}

/// Serializes a declaration check with status.json's word for its fit
/// ([`Fit::word`]); it is read back by the ordinary `Deserialize`, which
/// takes both words.
///
/// Errors: the serializer's.
pub fn serialize_shown_check<S: serde::Serializer>(
    check: &Option<DeclarationCheck>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Shown {
        fit: &'static str,
        percent: u32,
    }
    check
        .map(|c| Shown {
            fit: c.fit.word(),
            percent: c.percent,
        })
        .serialize(serializer)
}
