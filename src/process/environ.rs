//! Which job a process belongs to by its environment (docs/BEHAVIOUR.md
//! "Inside a Slurm allocation"): a job run as a Slurm job step is a child
//! of `slurmstepd`, in no process group of ours, and names itself only by
//! the `GPUSCHED_KEY` and `GPUSCHED_ATTEMPT` gpusched gave it.

/// The job key and attempt a process's environment names
/// (`GPUSCHED_KEY`, `GPUSCHED_ATTEMPT`), for a process of the
/// scheduler's own user only: another user's process could name any
/// job, and its memory must never be counted as ours. At most 1 MiB of
/// the environment is read; `None` when the process is gone, someone
/// else's, or names no job.
pub fn job_of_environ(pid: u32) -> Option<(String, u32)> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    #[expect(
        clippy::disallowed_methods,
        reason = "a kernel file (/proc), no user can plant it"
    )]
    let file = std::fs::File::open(format!("/proc/{pid}/environ")).ok()?;
    // The owner of /proc/PID is the process's effective user.
    if file.metadata().ok()?.uid() != nix::unistd::geteuid().as_raw() {
        return None;
    }
    let mut environ = Vec::new();
    file.take(1 << 20).read_to_end(&mut environ).ok()?;
    job_in_environ(&environ)
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
}
