//! The one `--log-dir` argument every verb that acts on a scheduler
//! takes (docs/BEHAVIOUR.md "Everyday verbs").

use clap::Args;
use std::path::{Path, PathBuf};

/// `--log-dir DIR`: the scheduler's log directory. Default
/// `gpusched_logs` here (or `GPUSCHED_LOG_DIR`); from a directory with
/// none, the caller's one running scheduler's (`commands::own`).
#[derive(Debug, Args, Clone, PartialEq, Eq)]
pub struct LogDir {
    /// The scheduler's log directory: its journal, status.json and logs
    /// (from a directory without one, your one running scheduler's).
    #[arg(
        long = "log-dir",
        value_name = "DIR",
        default_value = "gpusched_logs",
        env = "GPUSCHED_LOG_DIR"
    )]
    pub dir: PathBuf,
}

impl LogDir {
    /// The directory named `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> LogDir {
        LogDir { dir: dir.into() }
    }
}

impl std::ops::Deref for LogDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.dir
    }
}

impl AsRef<Path> for LogDir {
    fn as_ref(&self) -> &Path {
        &self.dir
    }
}
