//! Queue control that outlives the scheduler (docs/BEHAVIOUR.md "Pause and drain"):
//! whether new dispatch is paused (`gpusched pause` / `resume`) and which
//! GPUs are drained (`gpusched drain` / `undrain`). Kept in
//! `<log_dir>/control.json`, written atomically by the scheduler (or, when
//! none runs, by the command under the log directory's lock) and read at
//! start. Running jobs are never touched by either.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The control state of one log directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Control {
    /// No new job starts while set.
    #[serde(default)]
    pub paused: bool,
    /// GPU indices closed to new jobs.
    #[serde(default)]
    pub drained: BTreeSet<u32>,
}

/// A change asked for by a command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "request")]
pub enum ControlChange {
    /// `gpusched pause`.
    Pause,
    /// `gpusched resume`.
    Resume,
    /// `gpusched drain GPU…`.
    Drain {
        /// GPU indices.
        gpus: Vec<u32>,
    },
    /// `gpusched undrain GPU…`.
    Undrain {
        /// GPU indices.
        gpus: Vec<u32>,
    },
}

/// Where the control state of `log_dir` is kept.
pub fn control_path(log_dir: &Path) -> PathBuf {
    log_dir.join("control.json")
}

impl Control {
    /// Reads `<log_dir>/control.json`; the default (nothing paused or
    /// drained) when it is missing. A garbled file is reported in the
    /// error string and the default used.
    pub fn load(log_dir: &Path) -> (Control, Option<String>) {
        let path = control_path(log_dir);
        #[expect(
            clippy::disallowed_methods,
            reason = "control.json in a log directory of the caller's own (refuse_foreign, check_own_dir); control sits beside trust, not above it"
        )]
        match std::fs::read(&path) {
            Err(_) => (Control::default(), None),
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(control) => (control, None),
                Err(e) => (
                    Control::default(),
                    Some(format!(
                        "{} is not a control file ({e}); nothing paused or drained",
                        path.display()
                    )),
                ),
            },
        }
    }

    /// Writes it to `<log_dir>/control.json` atomically.
    ///
    /// Errors: the log directory cannot be written.
    pub fn save(&self, log_dir: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        crate::files::write_for_people(&control_path(log_dir), &bytes)
    }

    /// Applies a change; returns what it did, for people.
    pub fn apply(&mut self, change: &ControlChange) -> String {
        let list = |gpus: &[u32]| crate::console::gpu_ids(gpus, ", ");
        match change {
            ControlChange::Pause => {
                self.paused = true;
                "queue paused: no new job starts until `gpusched resume` (running jobs go on)"
                    .to_string()
            }
            ControlChange::Resume => {
                self.paused = false;
                "queue resumed: dispatching".to_string()
            }
            ControlChange::Drain { gpus } => {
                self.drained.extend(gpus);
                format!(
                    "GPU {} drained: no new job starts there until `gpusched undrain` (running jobs go on)",
                    list(gpus)
                )
            }
            ControlChange::Undrain { gpus } => {
                for gpu in gpus {
                    self.drained.remove(gpu);
                }
                format!("GPU {} open to new jobs again", list(gpus))
            }
        }
    }

    /// The drained GPUs as a bit mask ([`crate::model::gpu_mask`]).
    pub fn drained_mask(&self) -> crate::model::GpuMask {
        crate::model::gpu_mask(&self.drained)
    }

    /// Whether `other` already shows `change` applied.
    pub fn shows(&self, change: &ControlChange) -> bool {
        match change {
            ControlChange::Pause => self.paused,
            ControlChange::Resume => !self.paused,
            ControlChange::Drain { gpus } => gpus.iter().all(|g| self.drained.contains(g)),
            ControlChange::Undrain { gpus } => gpus.iter().all(|g| !self.drained.contains(g)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_apply_and_survive_a_save() {
        let dir = tempfile::tempdir().unwrap();
        let (mut control, problem) = Control::load(dir.path());
        assert_eq!((control.clone(), problem), (Control::default(), None));
        control.apply(&ControlChange::Pause);
        control.apply(&ControlChange::Drain { gpus: vec![0, 2] });
        control.apply(&ControlChange::Undrain { gpus: vec![2] });
        assert!(control.shows(&ControlChange::Pause));
        assert!(control.shows(&ControlChange::Drain { gpus: vec![0] }));
        assert_eq!(control.drained_mask(), 0b1);
        control.save(dir.path()).unwrap();
        assert_eq!(Control::load(dir.path()).0, control);
        std::fs::write(control_path(dir.path()), "{torn").unwrap();
        let (read, problem) = Control::load(dir.path());
        assert_eq!(read, Control::default());
        assert!(problem.unwrap().contains("not a control file"));
    }

    #[test]
    fn requests_are_tagged_json() {
        let change: ControlChange =
            serde_json::from_str(r#"{"request":"drain","gpus":[1]}"#).unwrap();
        assert_eq!(change, ControlChange::Drain { gpus: vec![1] });
    }
}

/// What a request file's name carries when root asked through a verb
/// (`cancel-<key>-<pid>-0.by-root.json`; docs/SECURITY.md "Root's verbs").
pub const ROOT_MARK: &str = ".by-root";

/// The largest request file a scheduler reads, in bytes (a request is a
/// few hundred).
pub const MAX_REQUEST_BYTES: u64 = 64 * 1024;

/// The directory where commands leave requests for the scheduler.
pub fn requests_dir(log_dir: &std::path::Path) -> std::path::PathBuf {
    log_dir.join("requests")
}

/// A request for a running scheduler, one JSON object per file:
/// `{"retry": KEY}`, `{"cancel": KEY}`, `{"hold": KEY}` or `{"release": KEY}`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobRequest {
    /// Queue the finished job with this key again.
    Retry(String),
    /// Cancel the job with this key.
    Cancel(String),
    /// Hold the waiting job with this key (docs/BEHAVIOUR.md "Queue policy").
    Hold(String),
    /// Release the held job with this key.
    Release(String),
}

impl JobRequest {
    /// The job's key.
    pub fn key(&self) -> &str {
        match self {
            JobRequest::Retry(key)
            | JobRequest::Cancel(key)
            | JobRequest::Hold(key)
            | JobRequest::Release(key) => key,
        }
    }

    /// The journal event the request becomes.
    pub fn event(&self) -> crate::journal::Event {
        match self {
            JobRequest::Retry(_) => crate::journal::Event::Retry {},
            JobRequest::Cancel(_) => crate::journal::Event::Cancel {},
            JobRequest::Hold(_) => crate::journal::Event::Held {},
            JobRequest::Release(_) => crate::journal::Event::Released {},
        }
    }

    /// The event's name in the journal (`retry`, `cancel`, `held`,
    /// `released`).
    pub fn event_name(&self) -> &'static str {
        match self {
            JobRequest::Retry(_) => "retry",
            JobRequest::Cancel(_) => "cancel",
            JobRequest::Hold(_) => "held",
            JobRequest::Release(_) => "released",
        }
    }

    /// The verb's name in file names and messages.
    pub fn verb(&self) -> &'static str {
        match self {
            JobRequest::Hold(_) => "hold",
            JobRequest::Release(_) => "release",
            other => other.event_name(),
        }
    }
}
