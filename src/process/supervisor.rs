//! Supervised jobs (SPEC §11 "Exit records"). Every attempt runs under a
//! small supervisor — this same binary, re-executed as the hidden
//! subcommand `__supervise` (HOUSE habit 14) — that outlives the scheduler:
//!
//! 1. The scheduler spawns the supervisor as the leader of a session of its
//!    own (so the terminal's Ctrl-C and hang-up never reach it), with a
//!    pipe on its stdin and its stdout.
//! 2. The supervisor spawns the job's `/bin/sh -c CMD` as the leader of
//!    another new session, held at a gate before `exec`, and reports the
//!    job's pid and start time on its stdout.
//! 3. The scheduler journals `started` (fsynced) and only then writes `go`:
//!    the job runs. If the scheduler dies before that, the supervisor's
//!    stdin reaches end-of-file, the job is killed at the gate and never
//!    runs, and no exit record is written — so a job can never run without
//!    its `started` event, and the next scheduler runs it again.
//! 4. The supervisor waits for the job's shell and atomically writes
//!    `<log_dir>/exits/<key>.<attempt>.json` ([`ExitRecord`]) before
//!    exiting with the job's exit code (128 + signal for a signal).
//!
//! The supervisor sits outside the job's process group, so killing a job
//! never kills its record-keeper; a restarted scheduler reads the record
//! and journals the job's real outcome instead of running it again.

use crate::journal::{ProcessId, now_ts};
use crate::policy::outcome::Exit;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

/// The exit code of the supervisor (and of the gate script) when the job
/// never ran (no `go` came).
pub const NEVER_RAN: i32 = 125;

/// How a supervised job ended, as its supervisor recorded it in
/// `<log_dir>/exits/<key>.<attempt>.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// The job's key.
    pub key: String,
    /// The attempt (1-based).
    pub attempt: u32,
    /// The job's process group.
    pub pgid: u32,
    /// Its exit code, or `null` when killed by a signal.
    pub code: Option<i32>,
    /// The signal that killed it, or `null`.
    pub signal: Option<i32>,
    /// When it ended (Unix seconds).
    pub ended: f64,
}

impl ExitRecord {
    /// How the job ended; `None` for a record that says neither.
    pub fn exit(&self) -> Option<Exit> {
        self.code
            .map(Exit::Code)
            .or_else(|| self.signal.map(Exit::Signal))
    }

    /// Reads the record at `path`; `None` when it is missing or garbled.
    pub fn read(path: &Path) -> Option<ExitRecord> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }
}

/// Where the exit record of attempt `attempt` of job `key` is written.
pub fn record_path(log_dir: &Path, key: &str, attempt: u32) -> PathBuf {
    log_dir.join("exits").join(format!("{key}.{attempt}.json"))
}

/// What the supervisor reports once the job waits at the gate.
#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    pid: u32,
    start_ticks: Option<u64>,
}

/// How to start one supervised attempt.
pub struct Request<'a> {
    /// The shell command, run by `/bin/sh -c`.
    pub command: &'a str,
    /// Extra environment for the job (the scheduler's own is inherited).
    pub env: Vec<(String, String)>,
    /// The job's log: stdout and stderr of the job (and the supervisor's
    /// own complaints) are appended to it.
    pub log: &'a Path,
    /// Where the supervisor writes the exit record.
    pub record: &'a Path,
    /// The job's key and attempt, copied into the record.
    pub key: &'a str,
    /// 1-based attempt number.
    pub attempt: u32,
}

/// A supervised attempt held at its gate until [`Started::release`].
pub struct Started {
    /// The supervisor, our child.
    pub supervisor: Child,
    /// The supervisor's pid and start time.
    pub supervisor_id: Option<ProcessId>,
    /// The job's process group (= its shell's pid).
    pub pgid: super::Pgid,
    /// The job shell's start time (field 22 of its stat).
    pub start_ticks: Option<u64>,
    go: Option<ChildStdin>,
}

impl Started {
    /// Lets the job run (call after `started` is journaled).
    ///
    /// Errors: the supervisor is gone (the job then never runs).
    pub fn release(&mut self) -> std::io::Result<()> {
        let mut go = self
            .go
            .take()
            .ok_or_else(|| std::io::Error::other("already released"))?;
        go.write_all(b"go\n")?;
        go.flush()
    }

    /// Gives up on the attempt before it ran: the supervisor kills the job
    /// at its gate and exits without a record. Waits for the supervisor.
    pub fn abandon(mut self) {
        drop(self.go.take());
        let _ = self.supervisor.wait();
    }
}

/// A supervisor started but not yet heard from: [`Spawning::hello`] waits
/// for its report. Several can be started before any is waited for, so
/// that their start-ups overlap.
pub struct Spawning {
    supervisor: Child,
    supervisor_id: Option<ProcessId>,
    log: std::path::PathBuf,
}

/// Starts the supervisor for `request` without waiting for it.
///
/// Errors: this binary cannot be found or started, or the log cannot be
/// opened.
pub fn start(request: &Request) -> std::io::Result<Spawning> {
    static EXE: std::sync::OnceLock<std::io::Result<std::path::PathBuf>> =
        std::sync::OnceLock::new();
    let exe = match EXE.get_or_init(std::env::current_exe) {
        Ok(exe) => exe.clone(),
        Err(e) => return Err(std::io::Error::new(e.kind(), e.to_string())),
    };
    let log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(request.log)?;
    let mut command = Command::new(exe);
    command
        .arg(crate::cli::SUPERVISE)
        .arg("--key")
        .arg(request.key)
        .arg("--attempt")
        .arg(request.attempt.to_string())
        .arg("--record")
        .arg(request.record)
        .arg("--log")
        .arg(request.log)
        .arg("--")
        .arg(request.command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .envs(request.env.iter().map(|(k, v)| (k, v)));
    // Its own process group, so a Ctrl-C meant for the scheduler never
    // reaches it (the job gets a session of its own from the supervisor).
    // No pre-exec hook: the standard library can then start it with
    // posix_spawn instead of copying the scheduler's address space with
    // fork, which costs more the more jobs the scheduler holds.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let supervisor = command.spawn()?;
    let supervisor_id = super::read_stat(supervisor.id()).map(|s| ProcessId {
        pid: supervisor.id(),
        start_ticks: s.start_ticks,
    });
    Ok(Spawning {
        supervisor,
        supervisor_id,
        log: request.log.to_path_buf(),
    })
}

impl Spawning {
    /// Waits for the supervisor's report that the job is held at its gate.
    ///
    /// Errors: the supervisor could not start the job (it is then killed
    /// and reaped).
    pub fn hello(self) -> std::io::Result<Started> {
        let Spawning {
            mut supervisor,
            supervisor_id,
            log,
        } = self;
        let stdout = supervisor.stdout.take().expect("piped");
        let mut line = String::new();
        let read = std::io::BufReader::new(stdout).read_line(&mut line);
        let hello = match read
            .ok()
            .and_then(|_| serde_json::from_str::<Hello>(&line).ok())
        {
            Some(hello) => hello,
            None => {
                let _ = supervisor.kill();
                let _ = supervisor.wait();
                return Err(std::io::Error::other(format!(
                    "the job's supervisor did not start it (see {})",
                    log.display()
                )));
            }
        };
        Ok(Started {
            go: supervisor.stdin.take(),
            supervisor,
            supervisor_id,
            pgid: super::Pgid(hello.pid),
            start_ticks: hello.start_ticks,
        })
    }
}

/// The supervisor process (`gpusched __supervise`): starts the job at a
/// gate, reports it, waits for `go`, waits for the job, writes the exit
/// record, and exits with the job's exit code.
///
/// Errors: the job cannot be spawned (reported in the job's log).
pub fn run(args: &crate::cli::SuperviseArgs) -> anyhow::Result<i32> {
    let log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(&args.log)?;
    let scheduler_pid = nix::unistd::getppid();
    let (gate_read, gate_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let child = GatedJob::spawn(&args.command, &log, &gate_read, &gate_write)?;
    drop(gate_read);
    let hello = Hello {
        pid: child.pid,
        start_ticks: super::read_stat(child.pid).map(|s| s.start_ticks),
    };
    let reported = writeln!(std::io::stdout(), "{}", serde_json::to_string(&hello)?)
        .and_then(|_| std::io::stdout().flush());
    let mut go = String::new();
    let released =
        reported.is_ok() && std::io::stdin().lock().read_line(&mut go).is_ok() && go.trim() == "go";
    detach_from_scheduler();
    if !released {
        // The scheduler died (or gave up) before journaling the start: the
        // job must not run.
        let _ = child.kill();
        let _ = child.wait();
        return Ok(NEVER_RAN);
    }
    nix::unistd::write(&gate_write, b"go\n")?;
    drop(gate_write);
    let status = child.wait()?;
    let exit = Exit::from_status(&status);
    let record = ExitRecord {
        key: args.key.clone(),
        attempt: args.attempt,
        pgid: hello.pid,
        code: match exit {
            Some(Exit::Code(code)) => Some(code),
            _ => None,
        },
        signal: match exit {
            Some(Exit::Signal(signal)) => Some(signal),
            _ => None,
        },
        ended: now_ts(),
    };
    write_record(&args.record, &record, scheduler_pid);
    Ok(exit.map_or(1, Exit::returncode))
}

/// The job's process, started by `fork` and held at its gate until the
/// supervisor writes `go` to the gate pipe; then it becomes `/bin/sh -c
/// CMD` in place (same pid, same session and process group, same start
/// time). No shell runs before the gate opens, so a start costs one
/// `exec`, not two.
struct GatedJob {
    pid: u32,
}

impl GatedJob {
    /// Forks the job: a new session (SPEC §3), stdin from /dev/null, stdout
    /// and stderr to `log`; it waits at `gate_read` for `go` (anything else,
    /// or end of file, means the start was abandoned: it exits
    /// [`NEVER_RAN`] without running anything), then execs the shell.
    ///
    /// Errors: the fork fails, or the command holds a NUL byte.
    fn spawn(
        command: &str,
        log: &std::fs::File,
        gate_read: &std::os::fd::OwnedFd,
        gate_write: &std::os::fd::OwnedFd,
    ) -> std::io::Result<GatedJob> {
        use std::ffi::CString;
        let sh = CString::new("/bin/sh").expect("no NUL");
        let dash_c = CString::new("-c").expect("no NUL");
        let cmd = CString::new(command)
            .map_err(|_| std::io::Error::other("the command holds a NUL byte"))?;
        let argv = [sh.as_ptr(), dash_c.as_ptr(), cmd.as_ptr(), std::ptr::null()];
        let null = std::fs::File::open("/dev/null")?;
        let (null_fd, log_fd) = (null.as_raw_fd(), log.as_raw_fd());
        let (read_fd, write_fd) = (gate_read.as_raw_fd(), gate_write.as_raw_fd());
        // SAFETY: the supervisor is single-threaded, and between fork and
        // exec the child only calls async-signal-safe functions (setsid,
        // dup2, close, read, execv, _exit) on memory prepared before the
        // fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            unsafe {
                if libc::setsid() < 0
                    || libc::dup2(null_fd, 0) < 0
                    || libc::dup2(log_fd, 1) < 0
                    || libc::dup2(log_fd, 2) < 0
                {
                    libc::_exit(126);
                }
                libc::close(write_fd);
                let mut buf = [0u8; 3];
                let mut got = 0usize;
                while got < buf.len() {
                    let n = libc::read(read_fd, buf.as_mut_ptr().add(got).cast(), buf.len() - got);
                    if n > 0 {
                        got += n as usize;
                    } else if n < 0 && *libc::__errno_location() == libc::EINTR {
                        continue;
                    } else {
                        break;
                    }
                }
                if buf[..got] != *b"go\n" {
                    libc::_exit(NEVER_RAN);
                }
                libc::close(read_fd);
                libc::execv(argv[0], argv.as_ptr());
                libc::_exit(127);
            }
        }
        Ok(GatedJob { pid: pid as u32 })
    }

    /// SIGKILL to the job (it is held at its gate).
    fn kill(&self) -> std::io::Result<()> {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .map_err(std::io::Error::from)
    }

    /// Waits for the job to end.
    fn wait(&self) -> std::io::Result<std::process::ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        let mut status = 0;
        loop {
            // SAFETY: waitpid writes only into `status`.
            let r = unsafe { libc::waitpid(self.pid as i32, &mut status, 0) };
            if r >= 0 {
                return Ok(std::process::ExitStatus::from_raw(status));
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Points stdin and stdout at /dev/null, so the supervisor holds no pipe of
/// a scheduler that may be gone.
fn detach_from_scheduler() {
    if let Ok(null) = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        // SAFETY: dup2 onto our own standard descriptors.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
        }
    }
}

/// Writes the exit record atomically. A full or read-only log directory is
/// retried: every second while a scheduler is our parent (it also gets our
/// exit code) for a few seconds, and for up to an hour once we are orphaned
/// (the record is then the only word on the job's outcome).
fn write_record(path: &Path, record: &ExitRecord, scheduler_pid: nix::unistd::Pid) {
    let Ok(bytes) = serde_json::to_vec(record) else {
        return;
    };
    let orphaned_tries = 3600;
    let mut tries = 0;
    loop {
        let result = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|_| {
                crate::files::write_atomic_with(
                    path,
                    &bytes,
                    &crate::files::AtomicOptions {
                        mode: None,
                        sync: true,
                    },
                )
            });
        tries += 1;
        match result {
            Ok(()) => return,
            Err(e) => {
                let limit = if nix::unistd::getppid() != scheduler_pid {
                    orphaned_tries
                } else {
                    5
                };
                if tries >= limit {
                    // Into the job's log, if that can still be written.
                    let _ = writeln!(
                        std::io::stderr(),
                        "gpusched supervisor: cannot write exit record {}: {e}",
                        path.display()
                    );
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_records_round_trip_and_say_how_the_job_ended() {
        let dir = tempfile::tempdir().unwrap();
        let path = record_path(dir.path(), "abc#0", 2);
        assert!(path.ends_with("exits/abc#0.2.json"));
        assert_eq!(ExitRecord::read(&path), None, "missing");
        let record = ExitRecord {
            key: "abc#0".into(),
            attempt: 2,
            pgid: 42,
            code: None,
            signal: Some(9),
            ended: 1.0e9,
        };
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
        let read = ExitRecord::read(&path).unwrap();
        assert_eq!(read, record);
        assert_eq!(read.exit(), Some(Exit::Signal(9)));
        let code = ExitRecord {
            code: Some(3),
            signal: None,
            ..record
        };
        assert_eq!(code.exit(), Some(Exit::Code(3)));
        std::fs::write(&path, b"{\"key\": \"torn").unwrap();
        assert_eq!(ExitRecord::read(&path), None, "garbled");
    }
}
