//! Which job a process belongs to by its environment (docs/BEHAVIOUR.md
//! "Inside a Slurm allocation"): a job run as a Slurm job step is a child
//! of `slurmstepd`, in no process group of ours, and names itself only by
//! the `GPUSCHED_KEY` and `GPUSCHED_ATTEMPT` gpusched gave it.

/// The job key and attempt a process's environment names
/// (`GPUSCHED_KEY`, `GPUSCHED_ATTEMPT`), for a process of the
/// scheduler's own user only ([`own_environ`]): another user's process
/// could name any job, and its memory must never be counted as ours.
/// `None` when the process is gone, someone else's, or names no job.
pub fn job_of_environ(pid: u32) -> Option<(String, u32)> {
    job_in_environ(&own_environ(pid)?)
}

/// The largest environment read of a process, in bytes.
const MAX_ENVIRON_BYTES: u64 = 1 << 20;

/// The environment (NUL-separated, at most 1 MiB) of process `pid` when
/// it runs as this process's effective user: its real and effective uid,
/// read from the `Uid:` line of its own `/proc/PID/status` (proc(5)),
/// are ours. The owner of the `/proc/PID` inode is not asked: a
/// non-dumpable process of another user shows a root-owned `/proc/PID`
/// there, and root would take it for its own. Both files are opened
/// relative to one descriptor of `/proc/PID`, so a pid reused between
/// the two reads names a process that is gone, not the new one.
/// `None` when the process is gone, someone else's, or unreadable.
pub fn own_environ(pid: u32) -> Option<Vec<u8>> {
    environ_of_user(pid, nix::unistd::geteuid().as_raw())
}

/// [`own_environ`] for the process of user `uid`.
pub(crate) fn environ_of_user(pid: u32, uid: u32) -> Option<Vec<u8>> {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::Mode;
    use std::io::Read;
    let proc_dir = nix::fcntl::open(
        format!("/proc/{pid}").as_str(),
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let open = |name: &str| {
        openat(
            &proc_dir,
            name,
            OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
            Mode::empty(),
        )
        .ok()
        .map(std::fs::File::from)
    };
    // Opened first: a process that changes its ids after this still
    // shows them in status, read next.
    let environ = open("environ")?;
    let mut status = String::new();
    open("status")?
        .take(64 * 1024)
        .read_to_string(&mut status)
        .ok()?;
    if !runs_as(&status, uid) {
        return None;
    }
    let mut bytes = Vec::new();
    environ
        .take(MAX_ENVIRON_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(bytes)
}

/// Whether the `Uid:` line of a `/proc/PID/status` text (real, effective,
/// saved, file-system uid) has `uid` as both its real and effective uid.
fn runs_as(status: &str, uid: u32) -> bool {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .is_some_and(|ids| {
            let mut ids = ids.split_whitespace().map(|id| id.parse::<u32>().ok());
            matches!((ids.next(), ids.next()), (Some(Some(real)), Some(Some(effective))) if real == uid && effective == uid)
        })
}

/// [`job_of_environ`] over the NUL-separated `environ` bytes.
pub fn job_in_environ(environ: &[u8]) -> Option<(String, u32)> {
    let mut key = None;
    let mut attempt = None;
    for var in environ.split(|&b| b == 0) {
        if let Some(value) = var.strip_prefix(b"GPUSCHED_KEY=") {
            key = Some(String::from_utf8_lossy(value).into_owned());
        } else if let Some(value) = var.strip_prefix(b"GPUSCHED_ATTEMPT=") {
            attempt = std::str::from_utf8(value).ok()?.parse().ok();
        }
    }
    Some((key?, attempt?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_named_by_its_key_and_attempt_in_the_environment() {
        let environ = b"PATH=/bin\0GPUSCHED_KEY=abc#1\0GPUSCHED_ATTEMPT=2\0X=y";
        assert_eq!(job_in_environ(environ), Some(("abc#1".to_string(), 2)));
        assert_eq!(job_in_environ(b"GPUSCHED_KEY=abc#1\0"), None);
        assert_eq!(job_in_environ(b"GPUSCHED_ATTEMPT=x\0GPUSCHED_KEY=a"), None);
    }

    #[test]
    fn the_schedulers_own_process_names_no_job_unless_its_environment_does() {
        // This test process is the scheduler's user's; its environment has
        // no GPUSCHED_KEY (a test runner never sets one).
        if std::env::var_os("GPUSCHED_KEY").is_none() {
            assert_eq!(job_of_environ(std::process::id()), None);
        }
        assert_eq!(job_of_environ(u32::MAX), None, "no such process");
    }

    #[test]
    fn the_owner_is_read_from_status_not_the_proc_inode() {
        let status = "Name:\tsh\nUid:\t1001\t1001\t1001\t1001\nGid:\t100\t100\t100\t100\n";
        assert!(runs_as(status, 1001));
        assert!(!runs_as(status, 0));
        // A setuid program of root run by 1001: not 1001's alone.
        assert!(!runs_as("Uid:\t1001\t0\t0\t0\n", 1001));
        assert!(!runs_as("Uid:\t1001\t0\t0\t0\n", 0));
        assert!(!runs_as("Name:\tsh\n", 0));
        // This very process: its environment is ours to read, another
        // user's view of it is not.
        let me = nix::unistd::geteuid().as_raw();
        assert!(own_environ(std::process::id()).is_some());
        assert!(environ_of_user(std::process::id(), me.wrapping_add(1)).is_none());
    }
}
