//! Supervised jobs (docs/BEHAVIOUR.md "Exit records"). The scheduler's jobs run under
//! one supervisor — this same binary, re-executed once per scheduler as the
//! hidden subcommand `__supervise` (HOUSE habit 14) — that outlives the
//! scheduler. It speaks JSON lines on its stdin and stdout:
//!
//! 1. The scheduler starts the supervisor as the leader of a process group
//!    of its own (so the terminal's Ctrl-C never reaches it).
//! 2. For each attempt the scheduler sends [`ToSupervisor::Start`]; the
//!    supervisor starts the job as the leader of a new session, held at a
//!    gate before it execs `/bin/sh -c CMD`, and answers
//!    [`FromSupervisor::Started`] with the job's pid and start time.
//! 3. The scheduler journals `started` (fsynced) and only then sends
//!    [`ToSupervisor::Go`]: the job runs. If the scheduler dies before
//!    that, the supervisor's stdin reaches end-of-file and the job is
//!    killed at its gate, having run nothing — so a job never runs without
//!    its `started` event, and the next scheduler runs it again.
//! 4. When the job's shell exits, the supervisor reports
//!    [`FromSupervisor::Ended`] with its [`ExitRecord`]. The scheduler
//!    journals the outcome (fsynced) and answers [`ToSupervisor::Ack`].
//! 5. A job whose end no scheduler acknowledged — the scheduler died, or
//!    stopped, before or after the report — gets its record written
//!    atomically to `<log_dir>/exits/<key>.<attempt>.json`, so its outcome
//!    is never lost; a restarted scheduler reads it. A job still at its
//!    gate then is killed there and recorded as never run (its `started`
//!    may be journaled: the next scheduler runs it again at once instead
//!    of waiting for this supervisor's other jobs). Once no scheduler
//!    listens and its last job ended, the supervisor exits.
//!
//! One supervisor for many jobs means a job's start costs one `clone`
//! that shares the supervisor's memory until the `exec` of its shell, not the start of a second
//! copy of this binary, and a job that ends writes no file when the
//! scheduler takes its outcome. The supervisor sits outside every job's
//! process group, so killing a job never kills its record-keeper.

mod client;
mod daemon;
mod gate;
mod raw;
mod shell_records;

pub use client::{AtGate, Supervisor, give_up_waiting};
pub use daemon::run;
pub use gate::START_TICKS_VAR;
pub use shell_records::{LAUNCHES_PER_FILE, RecordPlace, ShellRecordFiles, is_shell_record_file};

/// The first argument that makes `gpusched` the scheduler's supervisor
/// (a hidden self-re-exec subcommand; `main` parses it before the user's
/// command line).
pub const SUPERVISE: &str = "__supervise";

use crate::policy::outcome::Exit;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The exit code of a job held at its gate that was never let go (its
/// start was abandoned).
pub const NEVER_RAN: i32 = 125;

/// How a supervised job ended, as its supervisor reports it and, when no
/// scheduler took it, records it in `<log_dir>/exits/<key>.<attempt>.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// The job's key.
    pub key: String,
    /// The attempt (1-based).
    pub attempt: u32,
    /// The job's process group.
    pub pgid: u32,
    /// Field 22 of the job's `/proc/<pid>/stat` (its start in clock ticks
    /// since boot), as the `started` event journals it: with `pgid` it
    /// names the one start this record belongs to. `None` in records of
    /// older versions and of Slurm jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ticks: Option<u64>,
    /// Its exit code, or `null` when killed by a signal.
    pub code: Option<i32>,
    /// The signal that killed it, or `null`.
    pub signal: Option<i32>,
    /// When it ended (Unix seconds).
    pub ended: f64,
    /// Set when the job was killed at its gate because no scheduler was
    /// left to let it go: it ran nothing, and runs again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub never_ran: bool,
    /// Set when a signal the scheduler asked for ([`ToSupervisor::Signal`])
    /// reached the job while its shell still ran. Unset, the job ended on
    /// its own before any kill reached it, and its exit is its real outcome
    /// whatever the scheduler had decided (docs/BEHAVIOUR.md "An end beats
    /// a kill").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub killed: bool,
    /// Why the job's shell could not be started (`exec` failed), in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_error: Option<String>,
}

impl ExitRecord {
    /// How the job ended; `None` for a record that says neither, or says
    /// it never ran.
    pub fn exit(&self) -> Option<Exit> {
        if self.never_ran {
            return None;
        }
        self.code
            .map(Exit::Code)
            .or_else(|| self.signal.map(Exit::Signal))
    }

    /// Reads the record at `path`; `None` when it is missing, garbled, no
    /// regular file or over 64 KiB.
    pub fn read(path: &Path) -> Option<ExitRecord> {
        let (bytes, _) = crate::trust::read_untrusted(path, 64 * 1024).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Reads the record at `path` if it belongs to the start `identity`
    /// names (docs/BEHAVIOUR.md "Exit records"): the same process group
    /// and, where both are known, the same start time. A record of
    /// another start under the same `<key>.<attempt>` name — a start
    /// whose `started` never reached the journal, written late by a
    /// supervisor that lost its scheduler — is no outcome of this one.
    pub fn read_for(path: &Path, identity: &crate::process::GroupIdentity) -> Option<ExitRecord> {
        ExitRecord::read(path).filter(|r| r.belongs_to(identity))
    }

    /// Whether this record is of the start `identity` names.
    pub fn belongs_to(&self, identity: &crate::process::GroupIdentity) -> bool {
        self.pgid == identity.pgid.0
            && match (self.start_ticks, identity.start_ticks) {
                (Some(ours), Some(theirs)) => ours == theirs,
                _ => true,
            }
    }
}

/// Where the exit record of attempt `attempt` of job `key` is written.
pub fn record_path(log_dir: &Path, key: &str, attempt: u32) -> PathBuf {
    log_dir.join("exits").join(format!("{key}.{attempt}.json"))
}

/// How to start one supervised attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The shell command, run by `/bin/sh -c`.
    pub command: String,
    /// Extra environment for the job (the supervisor's own, inherited from
    /// the scheduler that started it, is the base).
    pub env: Vec<(String, String)>,
    /// `env` is the job's whole environment: the supervisor's own is not
    /// the base.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub whole_env: bool,
    /// The job's log: its stdout and stderr (and the supervisor's
    /// complaints about it) are appended to it.
    pub log: PathBuf,
    /// Where the supervisor writes the exit record if no scheduler takes
    /// the job's end.
    pub record: PathBuf,
    /// The job's key, copied into the record.
    pub key: String,
    /// 1-based attempt number, copied into the record.
    pub attempt: u32,
}

/// A line from the scheduler to the supervisor. `id` numbers the attempts
/// of one supervisor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToSupervisor {
    /// Start a job at its gate.
    Start {
        /// The attempt's number with this supervisor.
        id: u64,
        /// What to run.
        job: Request,
    },
    /// Let the job run (its `started` event is journaled).
    Go(u64),
    /// Give up on a job held at its gate: it is killed there, never ran.
    Abandon(u64),
    /// The job's outcome is journaled: no exit record is needed.
    Ack(u64),
    /// Deliver a signal to the job's process group — unless its shell has
    /// already exited, in which case the end stands and nothing is sent
    /// (the supervisor reaps every exited job before it signals). A job
    /// still at its gate is killed there instead: it never ran.
    Signal {
        /// The attempt's number with this supervisor.
        id: u64,
        /// The signal number (15 SIGTERM, 9 SIGKILL).
        signal: i32,
    },
}

/// A line from the supervisor to the scheduler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FromSupervisor {
    /// The job waits at its gate.
    Started {
        /// The attempt's number with this supervisor.
        id: u64,
        /// The job's pid, which is its process group.
        pid: u32,
        /// Field 22 of the job's `/proc/<pid>/stat`.
        start_ticks: Option<u64>,
    },
    /// The job could not be started (`clone` failed, the log cannot be
    /// opened, the command holds a NUL byte).
    Refused {
        /// The attempt's number with this supervisor.
        id: u64,
        /// Why, in words.
        error: String,
    },
    /// The job's shell exited.
    Ended {
        /// The attempt's number with this supervisor.
        id: u64,
        /// How.
        record: ExitRecord,
    },
}

/// JSON lines arriving on a non-blocking pipe (either end of the
/// scheduler–supervisor line): the bytes read so far, taken line by line.
#[derive(Default)]
struct Lines {
    buf: Vec<u8>,
}

impl Lines {
    /// Reads everything the non-blocking `fd` holds now; `false` once it
    /// reached end of file or failed (the other side is gone). What was
    /// read before that is still there to take.
    fn fill(&mut self, fd: std::os::fd::BorrowedFd<'_>) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match nix::unistd::read(fd, &mut chunk) {
                Ok(0) => return false,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(nix::errno::Errno::EINTR) => {}
                Err(nix::errno::Errno::EAGAIN) => return true,
                Err(_) => return false,
            }
        }
    }

    /// The whole lines read so far, each decoded (a garbled one as its
    /// error); a partial last line stays for the next read.
    fn take<T: serde::de::DeserializeOwned>(&mut self) -> Vec<Result<T, serde_json::Error>> {
        let mut messages = Vec::new();
        let mut start = 0;
        while let Some(end) = memchr::memchr(b'\n', &self.buf[start..]) {
            messages.push(serde_json::from_slice(&self.buf[start..start + end]));
            start += end + 1;
        }
        self.buf.drain(..start);
        messages
    }
}

/// Sets O_NONBLOCK on a descriptor this process holds (the ends of the
/// scheduler–supervisor pipes that must never block their reader).
fn set_nonblocking(fd: i32) {
    // SAFETY: F_GETFL/F_SETFL on a descriptor this process holds.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}

#[cfg(test)]
mod tests;
