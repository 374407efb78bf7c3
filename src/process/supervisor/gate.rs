//! A job's process between its start and `exec`: held at a gate until the
//! supervisor lets it go, then `/bin/sh -c CMD` in place (same pid, same
//! session and process group, same start time). No shell runs before the
//! gate opens.
//!
//! The job is started with `clone(CLONE_VM)`: until its `exec` it runs on
//! a small stack of its own inside the supervisor's memory, as `vfork`
//! does, but without stopping the supervisor while it waits at its gate.
//! So a start copies no page tables, the supervisor takes no
//! copy-on-write faults while jobs wait, and the job's `exec` has no copy
//! of the supervisor to tear down (docs/PERFORMANCE.md "Tiny jobs at the
//! spawn limit"). Sharing memory has two rules, kept here: the job reads
//! only memory the supervisor keeps unchanged until the job was reaped
//! ([`GatedJob`] owns it), and it makes its system calls directly
//! ([`super::raw`]), so it never writes libc's `errno`, which it would
//! share with the supervisor.
//!
//! A command longer than one `exec` argument may be (Linux: 128 KiB,
//! `MAX_ARG_STRLEN`) is handed to the shell as a script in an anonymous
//! memory file instead (`/bin/sh -c '. /dev/fd/4'`, whose first line closes
//! descriptor 4 again). If the shell cannot be started at all, the child
//! says why in the job's log and through a close-on-exec pipe, and exits as
//! a shell would (127 not found, 126 otherwise).

use super::raw;
use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::rc::Rc;

/// The longest command passed to the shell as its `-c` argument (bytes);
/// Linux refuses one argument of 32 pages (131,072 bytes) or more,
/// counting its NUL.
pub const MAX_INLINE_COMMAND: usize = 128 * 1024 - 1;

/// The descriptor a long command's script is read from in the job.
const SCRIPT_FD: i32 = 4;

/// The descriptor the child reports a failed `exec` on (close-on-exec).
const EXEC_ERROR_FD: i32 = 5;

/// The variable that gives a job's shell its own start time (field 22 of
/// its `/proc/<pid>/stat`, clock ticks after boot), so that the exit
/// record it writes names its start without reading that file: the
/// supervisor sends the value with `go`, the job puts it in its
/// environment before its `exec`. Empty when the supervisor could not
/// read it.
pub const START_TICKS_VAR: &str = "GPUSCHED_START_TICKS";

/// The room for `START_TICKS_VAR=<value>` and its NUL (bytes): a `u64`
/// has at most 20 digits.
const START_TICKS_SLOT: usize = START_TICKS_VAR.len() + 1 + 20 + 1;

/// The longest message at a job's gate: `go <start ticks>\n`.
const GATE_MESSAGE: usize = 3 + 20 + 1;

/// The size of the stack a job runs on until its `exec` (bytes), its
/// lowest page a guard. The code before `exec` needs a few hundred bytes;
/// pages never touched cost nothing.
const STACK_SIZE: usize = 256 * 1024;

/// A job started and waiting at its gate.
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
    /// What the job reads until its `exec`: freed once it was reaped
    /// ([`GatedJob::reaped`]), never before.
    memory: Option<ChildMemory>,
}

/// The environment every job starts from, converted once for `execve`
/// (`NAME=value` strings).
#[derive(Default)]
pub struct BaseEnv {
    vars: Vec<CString>,
}

impl BaseEnv {
    /// The environment `vars` (a variable holding a NUL byte cannot be
    /// passed on and is left out).
    pub fn new(vars: impl IntoIterator<Item = (OsString, OsString)>) -> BaseEnv {
        let vars = vars
            .into_iter()
            .filter_map(|(name, value)| {
                let mut bytes = name.as_bytes().to_vec();
                bytes.push(b'=');
                bytes.extend_from_slice(value.as_bytes());
                CString::new(bytes).ok()
            })
            .collect();
        BaseEnv { vars }
    }
}

/// Everything the child needs, prepared before it starts.
pub struct Prepared {
    argv: [CString; 3],
    base: Rc<BaseEnv>,
    /// The job's own variables, `NAME=value`, each with its name's length.
    extra: Vec<(CString, usize)>,
    /// A long command, as a script in an anonymous memory file.
    script: Option<OwnedFd>,
}

impl Prepared {
    /// `/bin/sh -c command` with the environment `base` overlaid by `extra`.
    ///
    /// Errors: the command or a variable holds a NUL byte.
    pub fn new(
        command: &str,
        base: &Rc<BaseEnv>,
        extra: &[(String, String)],
    ) -> std::io::Result<Prepared> {
        let nul = |_| std::io::Error::other("the command or its environment holds a NUL byte");
        let extra = extra
            .iter()
            .map(|(name, value)| {
                CString::new(format!("{name}={value}")).map(|var| (var, name.len()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(nul)?;
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
            base: Rc::clone(base),
            extra,
            script,
        })
    }

    /// The `execve` environment: the base variables the job does not set
    /// itself (nor [`START_TICKS_VAR`], which the job's gate adds), then
    /// the job's; null-terminated. The pointers are valid while `self` is.
    fn envp(&self) -> Vec<*const libc::c_char> {
        let mut envp = Vec::with_capacity(self.base.vars.len() + self.extra.len() + 1);
        for var in &self.base.vars {
            let bytes = var.as_bytes();
            let overridden = bytes
                .strip_prefix(START_TICKS_VAR.as_bytes())
                .is_some_and(|rest| rest.first() == Some(&b'='))
                || self.extra.iter().any(|(own, name_len)| {
                    bytes.len() > *name_len
                        && bytes[*name_len] == b'='
                        && own.as_bytes()[..=*name_len] == bytes[..=*name_len]
                });
            if !overridden {
                envp.push(var.as_ptr());
            }
        }
        envp.extend(self.extra.iter().map(|(var, _)| var.as_ptr()));
        envp.push(std::ptr::null());
        envp
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
    /// Starts the job: a new session (docs/BEHAVIOUR.md "Running a job"),
    /// stdin from /dev/null, stdout and stderr to `log`, every other
    /// descriptor closed, signals as a fresh process has them. It waits at
    /// its gate for `go` (anything else, or end of file, means the start
    /// was abandoned: it exits [`super::NEVER_RAN`] having run nothing),
    /// then execs the shell.
    ///
    /// Errors: a pipe, the stack or the `clone` fails.
    pub fn spawn(prepared: Prepared, log: &std::fs::File) -> std::io::Result<GatedJob> {
        let (gate_read, gate_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let (error_read, error_write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)?;
        let null = dev_null()?;
        let stack = Stack::new()?;
        let envp = prepared.envp();
        let mut child = Box::new(Child {
            start_ticks: StartTicksSlot::new(),
            fds: ChildFds {
                null,
                log: log.as_raw_fd(),
                gate: gate_read.as_raw_fd(),
                script: prepared.script.as_ref().map_or(-1, AsRawFd::as_raw_fd),
                exec_error: error_write.as_raw_fd(),
            },
            argv: [std::ptr::null(); 4],
            envp,
            prepared,
        });
        for (slot, arg) in child.argv.iter_mut().zip(&child.prepared.argv) {
            *slot = arg.as_ptr();
        }
        // The start time's variable, last before the null (the Box keeps
        // its address).
        let var = child.start_ticks.as_ptr();
        let at = child.envp.len() - 1;
        child.envp.insert(at, var);
        let flags = if raw::SHARES_MEMORY {
            libc::CLONE_VM
        } else {
            0
        } | libc::SIGCHLD;
        let arg: *const Child = &*child;
        // SAFETY: the child runs `child_main` on `stack`, reading only
        // `child` (and the strings it points to), which live in `memory`
        // until the child was reaped; it makes system calls directly and
        // touches no other memory, so it is safe beside the supervisor's
        // threads (docs of `raw`). Its descriptor table is its own copy.
        let pid = unsafe {
            libc::clone(
                child_main,
                stack.top(),
                flags,
                arg.cast_mut().cast::<libc::c_void>(),
            )
        };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        drop(gate_read);
        drop(error_write);
        Ok(GatedJob {
            pid: pid as u32,
            gate: Some(gate_write),
            released: false,
            exec_error: Some(error_read),
            memory: Some(ChildMemory {
                _child: child,
                _stack: stack,
            }),
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

    /// Lets the job run; `start_ticks` (its start time, when known) goes
    /// into its [`START_TICKS_VAR`].
    ///
    /// Errors: the job is gone (killed at its gate).
    pub fn go(&mut self, start_ticks: Option<u64>) -> std::io::Result<()> {
        let gate = self
            .gate
            .take()
            .ok_or_else(|| std::io::Error::other("not at its gate"))?;
        let message = match start_ticks {
            Some(ticks) => format!("go {ticks}\n"),
            None => "go\n".to_string(),
        };
        nix::unistd::write(&gate, message.as_bytes())?;
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

    /// Says that `waitpid` returned this job: it exec'd or died, so the
    /// memory it ran on until then is freed.
    pub fn reaped(&mut self) {
        self.memory = None;
    }
}

impl Drop for GatedJob {
    /// A job dropped before it was reaped may still be reading its memory:
    /// that memory is left allocated (a few KiB; it happens only when the
    /// supervisor gives up on jobs at their gate).
    fn drop(&mut self) {
        if let Some(memory) = self.memory.take() {
            std::mem::forget(memory);
        }
    }
}

/// What a started job reads until its `exec`, kept whole until it was
/// reaped.
struct ChildMemory {
    _child: Box<Child>,
    _stack: Stack,
}

/// The child's instructions: descriptors, and `execve`'s arguments with
/// the strings they point to.
struct Child {
    /// `START_TICKS_VAR=`, its value written by the child itself at its
    /// gate (the supervisor never touches it after the start).
    start_ticks: StartTicksSlot,
    fds: ChildFds,
    argv: [*const libc::c_char; 4],
    envp: Vec<*const libc::c_char>,
    prepared: Prepared,
}

/// The [`START_TICKS_VAR`] entry of a job's environment: the name and
/// `=` from the start, the value filled in by the job at its gate.
struct StartTicksSlot(std::cell::UnsafeCell<[u8; START_TICKS_SLOT]>);

impl StartTicksSlot {
    /// `START_TICKS_VAR=` with an empty value.
    fn new() -> StartTicksSlot {
        let mut bytes = [0u8; START_TICKS_SLOT];
        bytes[..START_TICKS_VAR.len()].copy_from_slice(START_TICKS_VAR.as_bytes());
        bytes[START_TICKS_VAR.len()] = b'=';
        StartTicksSlot(std::cell::UnsafeCell::new(bytes))
    }

    /// The string for `envp`.
    fn as_ptr(&self) -> *const libc::c_char {
        self.0.get().cast::<libc::c_char>().cast_const()
    }

    /// Sets the value to the decimal `digits` (at most 20; more are cut),
    /// NUL-terminated. Only the child calls it, before its `exec`, with no
    /// allocation and no library call.
    fn set(&self, digits: &[u8]) {
        let start = START_TICKS_VAR.len() + 1;
        let n = digits.len().min(START_TICKS_SLOT - start - 1);
        // SAFETY: only the child writes the slot, once, before its exec;
        // the supervisor reads it never (it frees it after the child was
        // reaped, or leaks it).
        let bytes = unsafe { &mut *self.0.get() };
        bytes[start..start + n].copy_from_slice(&digits[..n]);
        bytes[start + n] = 0;
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

/// `/dev/null`, opened once for every job's stdin (each job's copy of
/// the descriptor table gets its own descriptor for it).
///
/// Errors: it cannot be opened.
fn dev_null() -> std::io::Result<i32> {
    static NULL: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();
    if let Some(file) = NULL.get() {
        return Ok(file.as_raw_fd());
    }
    #[expect(clippy::disallowed_methods, reason = "/dev/null, no user can plant it")]
    let file = std::fs::File::open("/dev/null")?;
    Ok(NULL.get_or_init(|| file).as_raw_fd())
}

/// An anonymous mapping a child runs on until its `exec`, its lowest page
/// left inaccessible so that an overflow faults instead of writing below.
struct Stack {
    base: *mut libc::c_void,
}

impl Stack {
    /// Maps [`STACK_SIZE`] bytes.
    ///
    /// Errors: `mmap` or `mprotect` fails.
    fn new() -> std::io::Result<Stack> {
        // SAFETY: a fresh private anonymous mapping, owned from here on.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                STACK_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let stack = Stack { base };
        // SAFETY: the first page of the mapping just made.
        if unsafe { libc::mprotect(base, page_size(), libc::PROT_NONE) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The stack's first address (it grows down), 16-byte aligned.
    fn top(&self) -> *mut libc::c_void {
        self.base.wrapping_byte_add(STACK_SIZE)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used by any child.
        unsafe { libc::munmap(self.base, STACK_SIZE) };
    }
}

/// The memory page size (bytes).
fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// The child's entry point on its own stack. Never returns.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Child` that `spawn` keeps alive until this
    // process was reaped.
    let child = unsafe { &*arg.cast::<Child>() };
    gated_child(child)
}

/// The child's side of [`GatedJob::spawn`]: only direct system calls on
/// memory prepared before the start. Never returns.
fn gated_child(child: &Child) -> ! {
    let fds = &child.fds;
    // The gate's read end moves to fd 3, a long command's script to 4 and
    // the exec error pipe to 5; everything above (other jobs' gates and
    // logs, the supervisor's pipes) is closed, so that no job holds
    // another's gate open. Every source first moves above the targets, so
    // that no dup overwrites a source not yet moved.
    let high = |fd: i32| {
        if fd < 0 {
            -1
        } else {
            raw::dup_above(fd, 10) as i32
        }
    };
    let (null, log, gate, script, exec_error) = (
        high(fds.null),
        high(fds.log),
        high(fds.gate),
        high(fds.script),
        high(fds.exec_error),
    );
    if raw::setsid() < 0
        || null < 0
        || log < 0
        || gate < 0
        || exec_error < 0
        || (fds.script >= 0 && script < 0)
        || raw::dup_to(null, 0) < 0
        || raw::dup_to(log, 1) < 0
        || raw::dup_to(log, 2) < 0
        || raw::dup_to(gate, 3) < 0
        || (script >= 0 && raw::dup_to(script, SCRIPT_FD) < 0)
        || raw::dup_to(exec_error, EXEC_ERROR_FD) < 0
        || raw::set_cloexec(EXEC_ERROR_FD) < 0
    {
        raw::exit(126);
    }
    if script < 0 {
        raw::close(SCRIPT_FD);
    }
    // Linux before 5.9 has no close_range: close one by one (every
    // descriptor of the supervisor is close-on-exec as well).
    if raw::close_range(6, u32::MAX) < 0 {
        for fd in 6..1024 {
            raw::close(fd);
        }
    }
    // The supervisor blocks SIGCHLD and the Rust runtime ignores SIGPIPE;
    // a job starts with neither (`yes | head` ends quietly) ...
    raw::unblock_all_signals();
    raw::default_action(libc::SIGPIPE);
    // ... nor with the stop signals the supervisor ignores.
    for signal in raw::STOP_SIGNALS {
        raw::default_action(signal);
    }
    // `go\n` or `go <start ticks>\n`; anything else (end of file) means
    // the start was abandoned.
    let mut buf = [0u8; GATE_MESSAGE];
    let mut got = 0usize;
    while got < buf.len() && !buf[..got].contains(&b'\n') {
        let n = raw::read(3, &mut buf[got..]);
        if n > 0 {
            got += n as usize;
        } else if n == -(libc::EINTR as isize) {
            continue;
        } else {
            break;
        }
    }
    match gate_message(&buf[..got]) {
        Some(ticks) => child.start_ticks.set(ticks),
        None => raw::exit(super::NEVER_RAN),
    }
    raw::close(3);
    // SAFETY: argv and envp are null-terminated arrays of the prepared
    // strings, alive until this process was reaped.
    let error = unsafe { raw::execve(child.argv[0], child.argv.as_ptr(), child.envp.as_ptr()) };
    let errno = (-error) as i32;
    raw::write(EXEC_ERROR_FD, &errno.to_ne_bytes());
    raw::write(
        2,
        b"gpusched: cannot start the job's shell /bin/sh (see the completion line)\n",
    );
    raw::exit(if errno == libc::ENOENT { 127 } else { 126 });
}

/// The start time's digits in a gate message (`go\n`: none), or `None`
/// when the message is no `go`.
pub(super) fn gate_message(message: &[u8]) -> Option<&[u8]> {
    let line = message.strip_suffix(b"\n")?.strip_prefix(b"go")?;
    match line.strip_prefix(b" ") {
        None if line.is_empty() => Some(&[]),
        Some(digits) if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) => Some(digits),
        _ => None,
    }
}
