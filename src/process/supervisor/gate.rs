//! A job's process between `fork` and `exec`: held at a gate until the
//! supervisor lets it go, then `/bin/sh -c CMD` in place (same pid, same
//! session and process group, same start time). No shell runs before the
//! gate opens, so a start costs one `fork` and one `exec`.

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// A job forked and waiting at its gate.
pub struct GatedJob {
    /// Its pid (= its process group and session).
    pub pid: u32,
    /// The write end of its gate: `go\n` lets it run; closing it without
    /// that makes it exit [`super::NEVER_RAN`].
    gate: Option<OwnedFd>,
    /// Whether `go` was written: from then on it runs the command.
    released: bool,
}

/// Everything the child needs, prepared before the fork: after it, the
/// child only calls async-signal-safe functions on this memory.
pub struct Prepared {
    argv: [CString; 3],
    envp: Vec<CString>,
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
        Ok(Prepared {
            argv: [
                CString::new("/bin/sh").expect("no NUL"),
                CString::new("-c").expect("no NUL"),
                CString::new(command).map_err(nul)?,
            ],
            envp,
        })
    }
}

impl GatedJob {
    /// Forks the job: a new session (SPEC §3), stdin from /dev/null, stdout
    /// and stderr to `log`, every other descriptor closed, signals as a
    /// fresh process has them. It waits at its gate for `go` (anything
    /// else, or end of file, means the start was abandoned: it exits
    /// [`super::NEVER_RAN`] having run nothing), then execs the shell.
    ///
    /// Errors: the gate pipe or the fork fails.
    pub fn spawn(prepared: &Prepared, log: &std::fs::File) -> std::io::Result<GatedJob> {
        let (gate_read, gate_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let null = std::fs::File::open("/dev/null")?;
        let argv = [
            prepared.argv[0].as_ptr(),
            prepared.argv[1].as_ptr(),
            prepared.argv[2].as_ptr(),
            std::ptr::null(),
        ];
        let mut envp: Vec<*const libc::c_char> = prepared.envp.iter().map(|v| v.as_ptr()).collect();
        envp.push(std::ptr::null());
        let (null_fd, log_fd, read_fd) = (null.as_raw_fd(), log.as_raw_fd(), gate_read.as_raw_fd());
        // SAFETY: the supervisor is single-threaded, and between fork and
        // exec the child only calls async-signal-safe functions (setsid,
        // dup2, syscall(close_range), sigprocmask, signal, read, execve,
        // _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            unsafe { gated_child(null_fd, log_fd, read_fd, &argv, &envp) }
        }
        drop(gate_read);
        Ok(GatedJob {
            pid: pid as u32,
            gate: Some(gate_write),
            released: false,
        })
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

/// The child's side of [`GatedJob::spawn`]. Never returns.
///
/// # Safety
///
/// Call only in the child of a fork of a single-threaded process, with
/// descriptors and pointers valid in it.
unsafe fn gated_child(
    null_fd: i32,
    log_fd: i32,
    read_fd: i32,
    argv: &[*const libc::c_char; 4],
    envp: &[*const libc::c_char],
) -> ! {
    unsafe {
        // The gate's read end moves to fd 3; everything above it (other
        // jobs' gates and logs, the supervisor's pipes) is closed, so that
        // no job holds another's gate open.
        if libc::setsid() < 0
            || libc::dup2(null_fd, 0) < 0
            || libc::dup2(log_fd, 1) < 0
            || libc::dup2(log_fd, 2) < 0
            || libc::dup2(read_fd, 3) < 0
        {
            libc::_exit(126);
        }
        libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32);
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
        libc::_exit(127);
    }
}
