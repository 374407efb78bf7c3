//! The system calls a job makes between its start and its `exec`, made
//! directly rather than through libc.
//!
//! A job shares the supervisor's memory until it execs (see
//! [`super::gate`]), and with it the supervisor's thread-local `errno`:
//! libc's wrappers write `errno` when a call fails, which could change
//! the value the supervisor is about to read after a failed call of its
//! own. These wrappers return the kernel's result as it is: a value ≥ 0,
//! or `-errno`, and touch no memory but what their arguments point to.
//!
//! On an architecture without a wrapper here, the job is started with a
//! copy of the supervisor's memory instead ([`SHARES_MEMORY`] is false)
//! and libc's `syscall` is used: a copy's `errno` is its own.

use libc::c_long;

/// Whether a job may share the supervisor's memory until its `exec`
/// (`CLONE_VM`): true where the system calls below are made directly.
pub const SHARES_MEMORY: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// System call `number` with up to four arguments; the kernel's return
/// value (`-errno` on failure).
///
/// # Safety
///
/// The arguments must be valid for the call, as for `syscall(2)`.
#[cfg(target_arch = "x86_64")]
unsafe fn call(number: c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the Linux x86-64 system call convention: number in rax,
    // arguments in rdi, rsi, rdx, r10; rcx and r11 are clobbered.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") number as isize => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            in("r10") d,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// See the x86-64 version.
///
/// # Safety
///
/// The arguments must be valid for the call, as for `syscall(2)`.
#[cfg(target_arch = "aarch64")]
unsafe fn call(number: c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the Linux AArch64 system call convention: number in x8,
    // arguments and result in x0–x3.
    unsafe {
        core::arch::asm!(
            "svc 0",
            in("x8") number,
            inlateout("x0") a as isize => ret,
            in("x1") b,
            in("x2") c,
            in("x3") d,
            options(nostack),
        );
    }
    ret
}

/// See the x86-64 version; through libc, for a job with memory of its own.
///
/// # Safety
///
/// The arguments must be valid for the call, as for `syscall(2)`.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn call(number: c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    // SAFETY: as the caller promised.
    let ret = unsafe { libc::syscall(number, a, b, c, d) } as isize;
    if ret < 0 {
        // SAFETY: reading this thread's errno.
        -(unsafe { *libc::__errno_location() } as isize)
    } else {
        ret
    }
}

/// `fcntl(fd, F_DUPFD_CLOEXEC, min)`: a copy of `fd` at `min` or above,
/// closed on exec (a job never inherits it, even where `close_range` is
/// missing).
pub fn dup_above(fd: i32, min: i32) -> isize {
    // SAFETY: no memory is passed.
    unsafe {
        call(
            libc::SYS_fcntl,
            fd as usize,
            libc::F_DUPFD_CLOEXEC as usize,
            min as usize,
            0,
        )
    }
}

/// `fcntl(fd, F_SETFD, FD_CLOEXEC)`.
pub fn set_cloexec(fd: i32) -> isize {
    // SAFETY: no memory is passed.
    unsafe {
        call(
            libc::SYS_fcntl,
            fd as usize,
            libc::F_SETFD as usize,
            libc::FD_CLOEXEC as usize,
            0,
        )
    }
}

/// `dup3(from, to, 0)` (`from` ≠ `to`).
pub fn dup_to(from: i32, to: i32) -> isize {
    // SAFETY: no memory is passed.
    unsafe { call(libc::SYS_dup3, from as usize, to as usize, 0, 0) }
}

/// `setsid()`.
pub fn setsid() -> isize {
    // SAFETY: no memory is passed.
    unsafe { call(libc::SYS_setsid, 0, 0, 0, 0) }
}

/// `close_range(first, last, 0)`.
pub fn close_range(first: u32, last: u32) -> isize {
    // SAFETY: no memory is passed.
    unsafe { call(libc::SYS_close_range, first as usize, last as usize, 0, 0) }
}

/// Unblocks every signal (`rt_sigprocmask(SIG_SETMASK, {}, NULL)`).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn unblock_all_signals() -> isize {
    let none: u64 = 0;
    // SAFETY: a kernel signal set of 8 bytes (64 signals on these
    // architectures), read only.
    unsafe {
        call(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as usize,
            (&raw const none) as usize,
            0,
            8,
        )
    }
}

/// The signals that stop a scheduler, which a supervisor ignores: Slurm
/// at an allocation's end and systemd stopping a unit send SIGTERM (and
/// `--signal`'s SIGUSR2) to every process at once, and a supervisor that
/// died of it would leave its jobs' ends unreported while its scheduler
/// stops them. It ends when its scheduler is gone and its last job
/// ended, or by SIGKILL. Jobs start with these signals' default actions
/// again (`gate.rs`). Here, beside the calls that set them, so that the
/// supervisor (`daemon.rs`) and the job's side (`gate.rs`) share it.
pub const STOP_SIGNALS: [i32; 5] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Gives `signal` its default action (`rt_sigaction` with `SIG_DFL`).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn default_action(signal: i32) -> isize {
    // The kernel's `struct sigaction` on x86-64 and AArch64: handler,
    // flags, restorer, mask; all zero is SIG_DFL with no flags.
    let action = [0usize; 4];
    // SAFETY: the action is read only; the old one is not asked for.
    unsafe {
        call(
            libc::SYS_rt_sigaction,
            signal as usize,
            action.as_ptr() as usize,
            0,
            8,
        )
    }
}

/// Unblocks every signal, through libc (a job with memory of its own,
/// where the kernel's signal set may be larger).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn unblock_all_signals() -> isize {
    // SAFETY: an empty set built by libc, read only.
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) as isize
    }
}

/// Gives `signal` its default action, through libc (a job with memory of
/// its own, where the kernel's `struct sigaction` differs).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn default_action(signal: i32) -> isize {
    // SAFETY: SIG_DFL installs no handler.
    if unsafe { libc::signal(signal, libc::SIG_DFL) } == libc::SIG_ERR {
        -1
    } else {
        0
    }
}

/// `read(fd, buf)`.
pub fn read(fd: i32, buf: &mut [u8]) -> isize {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    unsafe {
        call(
            libc::SYS_read,
            fd as usize,
            buf.as_mut_ptr() as usize,
            buf.len(),
            0,
        )
    }
}

/// `write(fd, buf)`.
pub fn write(fd: i32, buf: &[u8]) -> isize {
    // SAFETY: the kernel reads at most `buf.len()` bytes from `buf`.
    unsafe {
        call(
            libc::SYS_write,
            fd as usize,
            buf.as_ptr() as usize,
            buf.len(),
            0,
        )
    }
}

/// `close(fd)`.
pub fn close(fd: i32) -> isize {
    // SAFETY: no memory is passed.
    unsafe { call(libc::SYS_close, fd as usize, 0, 0, 0) }
}

/// `execve(path, argv, envp)`; returns only on failure (`-errno`).
///
/// # Safety
///
/// `path` is a NUL-terminated string; `argv` and `envp` are
/// null-terminated arrays of NUL-terminated strings.
pub unsafe fn execve(
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> isize {
    // SAFETY: as the caller promised.
    unsafe {
        call(
            libc::SYS_execve,
            path as usize,
            argv as usize,
            envp as usize,
            0,
        )
    }
}

/// `exit_group(code)`: ends the job (not the supervisor, which is another
/// process even while they share memory).
pub fn exit(code: i32) -> ! {
    loop {
        // SAFETY: no memory is passed; the call does not return.
        unsafe { call(libc::SYS_exit_group, code as usize, 0, 0, 0) };
    }
}
