//! A job's process between `fork` and `exec`: held at a gate until the
//! supervisor lets it go, then `/bin/sh -c CMD` in place (same pid, same
//! session and process group, same start time). No shell runs before the
//! gate opens, so a start costs one `fork` and one `exec`.
//!
//! A command longer than one `exec` argument may be (Linux: 128 KiB,
//! `MAX_ARG_STRLEN`) is handed to the shell as a script in an anonymous
//! memory file instead (`/bin/sh -c '. /dev/fd/4'`, whose first line closes
//! descriptor 4 again). If the shell cannot be started at all, the child
//! says why in the job's log and through a close-on-exec pipe, and exits as
//! a shell would (127 not found, 126 otherwise).

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// The longest command passed to the shell as its `-c` argument (bytes);
/// Linux refuses one argument of 32 pages (131,072 bytes) or more,
/// counting its NUL.
pub const MAX_INLINE_COMMAND: usize = 128 * 1024 - 1;

/// The descriptor a long command's script is read from in the job.
const SCRIPT_FD: i32 = 4;

/// The descriptor the child reports a failed `exec` on (close-on-exec).
const EXEC_ERROR_FD: i32 = 5;

/// A job forked and waiting at its gate.
pub struct GatedJob {
    /// Its pid (= its process group and session).
    pub pid: u32,
    /// The write end of its gate: `go\n` lets it run; closing it without
    /// that makes it exit [`super::NEVER_RAN`].
    gate: Option<OwnedFd>,
    /// Whether `go` was written: from then on it runs the command.
    released: bool,
    /// The read end of the child's `exec` error pipe: 4 bytes of errno
    /// when the shell could not be started, end of file when it was.
    exec_error: Option<OwnedFd>,
}

/// Everything the child needs, prepared before the fork: after it, the
/// child only calls async-signal-safe functions on this memory.
pub struct Prepared {
    argv: [CString; 3],
    envp: Vec<CString>,
    /// A long command, as a script in an anonymous memory file.
    script: Option<OwnedFd>,
}

impl Prepared {
    /// `/bin/sh -c command` with the environment `base` overlaid by `extra`.
    ///
    /// Errors: the command or a variable holds a NUL byte.
    pub fn new(
        command: &str,
        base: &[(OsString, OsString)],
        extra: &[(String, String)],
    ) -> std::io::Result<Prepared> {
        let nul = |_| std::io::Error::other("the command or its environment holds a NUL byte");
        let mut envp = Vec::with_capacity(base.len() + extra.len());
        for (name, value) in base {
            if extra.iter().any(|(n, _)| n.as_bytes() == name.as_bytes()) {
                continue;
            }
            let mut bytes = name.as_bytes().to_vec();
            bytes.push(b'=');
            bytes.extend_from_slice(value.as_bytes());
            envp.push(CString::new(bytes).map_err(nul)?);
        }
        for (name, value) in extra {
            envp.push(CString::new(format!("{name}={value}")).map_err(nul)?);
        }
        if command.as_bytes().contains(&0) {
            return Err(std::io::Error::other(
                "the command or its environment holds a NUL byte",
            ));
        }
        let (inline, script) = if command.len() <= MAX_INLINE_COMMAND {
            (CString::new(command).map_err(nul)?, None)
        } else {
            let text = format!("exec {SCRIPT_FD}<&-\n{command}\n");
            (
                CString::new(format!(". /dev/fd/{SCRIPT_FD}")).expect("no NUL"),
                Some(script_file(text.as_bytes())?),
            )
        };
        Ok(Prepared {
            argv: [
                CString::new("/bin/sh").expect("no NUL"),
                CString::new("-c").expect("no NUL"),
                inline,
            ],
            envp,
            script,
        })
    }
}

/// An anonymous memory file holding `text`, read from its start.
///
/// Errors: the file cannot be created or written.
fn script_file(text: &[u8]) -> std::io::Result<OwnedFd> {
    // SAFETY: memfd_create with a NUL-terminated name; the descriptor is
    // owned from here on.
    let fd = unsafe { libc::memfd_create(c"gpusched-command".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    std::io::Write::write_all(&mut &file, text)?;
    Ok(OwnedFd::from(file))
}

impl GatedJob {
    /// Forks the job: a new session (docs/BEHAVIOUR.md "Running a job"), stdin from /dev/null, stdout
    /// and stderr to `log`, every other descriptor closed, signals as a
    /// fresh process has them. It waits at its gate for `go` (anything
    /// else, or end of file, means the start was abandoned: it exits
    /// [`super::NEVER_RAN`] having run nothing), then execs the shell.
    ///
    /// Errors: the gate pipe or the fork fails.
    pub fn spawn(prepared: &Prepared, log: &std::fs::File) -> std::io::Result<GatedJob> {
        let (gate_read, gate_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let (error_read, error_write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)?;
        let null = std::fs::File::open("/dev/null")?;
        let argv = [
            prepared.argv[0].as_ptr(),
            prepared.argv[1].as_ptr(),
            prepared.argv[2].as_ptr(),
            std::ptr::null(),
        ];
        let mut envp: Vec<*const libc::c_char> = prepared.envp.iter().map(|v| v.as_ptr()).collect();
        envp.push(std::ptr::null());
        let fds = ChildFds {
            null: null.as_raw_fd(),
            log: log.as_raw_fd(),
            gate: gate_read.as_raw_fd(),
            script: prepared.script.as_ref().map_or(-1, AsRawFd::as_raw_fd),
            exec_error: error_write.as_raw_fd(),
        };
        // SAFETY: the supervisor is single-threaded, and between fork and
        // exec the child only calls async-signal-safe functions (setsid,
        // dup2, syscall(close_range), sigprocmask, signal, read, execve,
        // _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            unsafe { gated_child(&fds, &argv, &envp) }
        }
        drop(gate_read);
        drop(error_write);
        Ok(GatedJob {
            pid: pid as u32,
            gate: Some(gate_write),
            released: false,
            exec_error: Some(error_read),
        })
    }

    /// Why the job's shell could not be started, once the job has exited
    /// (`None` when it was started, or never let go).
    pub fn start_error(&mut self) -> Option<String> {
        let fd = self.exec_error.take()?;
        let mut errno = [0u8; 4];
        match nix::unistd::read(&fd, &mut errno) {
            Ok(4) => Some(format!(
                "cannot start the job's shell /bin/sh: {}",
                nix::errno::Errno::from_raw(i32::from_ne_bytes(errno)).desc()
            )),
            _ => None,
        }
    }

    /// Lets the job run.
    ///
    /// Errors: the job is gone (killed at its gate).
    pub fn go(&mut self) -> std::io::Result<()> {
        let gate = self
            .gate
            .take()
            .ok_or_else(|| std::io::Error::other("not at its gate"))?;
        nix::unistd::write(&gate, b"go\n")?;
        self.released = true;
        Ok(())
    }

    /// Whether the job was let go (else it ran nothing).
    pub fn released(&self) -> bool {
        self.released
    }

    /// Kills a job held at its gate (it has run nothing).
    pub fn abandon(&mut self) {
        if self.gate.take().is_some() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// The descriptors the child arranges before its gate (`-1`: none).
struct ChildFds {
    null: i32,
    log: i32,
    gate: i32,
    script: i32,
    exec_error: i32,
}

/// The child's side of [`GatedJob::spawn`]. Never returns.
///
/// # Safety
///
/// Call only in the child of a fork of a single-threaded process, with
/// descriptors and pointers valid in it.
unsafe fn gated_child(
    fds: &ChildFds,
    argv: &[*const libc::c_char; 4],
    envp: &[*const libc::c_char],
) -> ! {
    unsafe {
        // The gate's read end moves to fd 3, a long command's script to 4
        // and the exec error pipe to 5; everything above (other jobs'
        // gates and logs, the supervisor's pipes) is closed, so that no
        // job holds another's gate open.
        // Every source first moves above the targets, so that no dup2
        // overwrites a source not yet moved.
        let high = |fd: i32| {
            if fd < 0 {
                -1
            } else {
                libc::fcntl(fd, libc::F_DUPFD, 10)
            }
        };
        let (null, log, gate, script, exec_error) = (
            high(fds.null),
            high(fds.log),
            high(fds.gate),
            high(fds.script),
            high(fds.exec_error),
        );
        if libc::setsid() < 0
            || null < 0
            || log < 0
            || gate < 0
            || exec_error < 0
            || (fds.script >= 0 && script < 0)
            || libc::dup2(null, 0) < 0
            || libc::dup2(log, 1) < 0
            || libc::dup2(log, 2) < 0
            || libc::dup2(gate, 3) < 0
            || (script >= 0 && libc::dup2(script, SCRIPT_FD) < 0)
            || libc::dup2(exec_error, EXEC_ERROR_FD) < 0
            || libc::fcntl(EXEC_ERROR_FD, libc::F_SETFD, libc::FD_CLOEXEC) < 0
        {
            libc::_exit(126);
        }
        if script < 0 {
            libc::close(SCRIPT_FD);
        }
        libc::syscall(libc::SYS_close_range, 6u32, u32::MAX, 0u32);
        // The supervisor blocks SIGCHLD and the Rust runtime ignores
        // SIGPIPE; a job starts with neither (`yes | head` ends quietly).
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut buf = [0u8; 3];
        let mut got = 0usize;
        while got < buf.len() {
            let n = libc::read(3, buf.as_mut_ptr().add(got).cast(), buf.len() - got);
            if n > 0 {
                got += n as usize;
            } else if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            } else {
                break;
            }
        }
        if buf[..got] != *b"go\n" {
            libc::_exit(super::NEVER_RAN);
        }
        libc::close(3);
        libc::execve(argv[0], argv.as_ptr(), envp.as_ptr());
        let errno = *libc::__errno_location();
        let bytes = errno.to_ne_bytes();
        libc::write(EXEC_ERROR_FD, bytes.as_ptr().cast(), bytes.len());
        let message = b"gpusched: cannot start the job's shell /bin/sh (see the completion line)\n";
        libc::write(2, message.as_ptr().cast(), message.len());
        libc::_exit(if errno == libc::ENOENT { 127 } else { 126 });
    }
}
