//! One scheduler per log directory (docs/BEHAVIOUR.md "Exactly once"): the scheduler holds an
//! exclusive `flock` on `<log_dir>/lock` for its whole life, with its pid
//! written in the file. A second scheduler on the same directory is
//! refused, naming the first's pid; `gpusched stop` finds the scheduler to
//! stop through it. The lock dies with its holder, whatever kills it.

#![expect(
    clippy::disallowed_methods,
    reason = "lock files in the caller's own log directory and ledger, opened O_NOFOLLOW|O_NONBLOCK and checked on the descriptor"
)]

use crate::error::Error;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The lock file's path in a log directory.
pub fn lock_path(log_dir: &Path) -> PathBuf {
    log_dir.join("lock")
}

/// The held lock of a running scheduler; released when dropped or when the
/// process ends.
#[derive(Debug)]
pub struct SchedulerLock {
    _file: Flock<File>,
}

impl SchedulerLock {
    /// Takes the lock of `log_dir` and writes our pid into it.
    ///
    /// Errors: [`Error::AlreadyRunning`] (exit 2) naming the holder's pid
    /// when another scheduler holds it; [`Error::Io`] when the file cannot
    /// be opened or written.
    pub fn acquire(log_dir: &Path) -> Result<SchedulerLock, Error> {
        let path = lock_path(log_dir);
        let file = open(&path)?;
        let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => locked,
            Err((_, Errno::EWOULDBLOCK)) => {
                // On a file system several nodes share, the holder may
                // run on another node: its lock file says which.
                let pid = holder(log_dir).map_or_else(
                    || {
                        recorded_place(&path).map_or("pid unknown".into(), |place| {
                            format!("{place}, by its lock file")
                        })
                    },
                    |p| format!("pid {p}"),
                );
                return Err(Error::AlreadyRunning(format!(
                    "another gpusched ({pid}) is already running with log directory {}; stop it with `gpusched stop --log-dir {}`, or use another --log-dir",
                    log_dir.display(),
                    log_dir.display()
                )));
            }
            Err((_, e)) => {
                return Err(Error::io(
                    format!("cannot lock {}", path.display()),
                    e.into(),
                ));
            }
        };
        let written = file
            .set_len(0)
            .and_then(|_| file.seek(SeekFrom::Start(0)))
            .and_then(|_| writeln!(file, "{}\n{}", std::process::id(), this_place()));
        written.map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
        Ok(SchedulerLock { _file: file })
    }
}

/// The pid of the scheduler holding `log_dir`'s lock, or `None` when no
/// scheduler holds it (or there is no such file).
///
/// The pid written in the file is only believed when the kernel confirms
/// it (docs/SECURITY.md "stop"): `/proc/locks` lists that pid as the
/// holder of an exclusive `flock` on this very file (its inode), or, where
/// `/proc/locks` lists no holder of it, that pid has the file open. A
/// number someone wrote into a lock they hold themselves names nobody.
/// The file is opened without following a link or blocking on a FIFO.
pub fn holder(log_dir: &Path) -> Option<u32> {
    use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
    let path = lock_path(log_dir);
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&path)
        .ok()?;
    let meta = file.metadata().ok().filter(|m| m.is_file())?;
    let reader = file.try_clone().ok()?;
    // If we can take a shared lock, nobody holds the exclusive one.
    if let Ok(unlocked) = Flock::lock(file, FlockArg::LockSharedNonblock) {
        drop(unlocked);
        return None;
    }
    // The holder writes its pid right after locking: allow it a moment.
    for _ in 0..50 {
        let mut bytes = [0u8; 32];
        let read = reader.read_at(&mut bytes, 0).unwrap_or(0);
        if let Some(pid) = std::str::from_utf8(&bytes[..read])
            .ok()
            .and_then(|t| t.lines().next()?.trim().parse::<u32>().ok())
            && confirmed_holder(pid, meta.dev(), meta.ino())
        {
            return Some(pid);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    None
}

/// Where this scheduler runs, for the lock file's second line: `pid 812
/// on node gpu07`, with `in Slurm job 1234` inside an allocation.
fn this_place() -> String {
    let node = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "an unknown node".into());
    let slurm = std::env::var("SLURM_JOB_ID")
        .ok()
        .filter(|id| id.parse::<u64>().is_ok())
        .map(|id| format!(" in Slurm job {id}"))
        .unwrap_or_default();
    format!("pid {} on node {node}{slurm}", std::process::id())
}

/// The holder's place as its lock file says it ([`this_place`]), made
/// printable; `None` when the file has no such line. Read without
/// following a link or blocking on a FIFO, at most 256 bytes.
fn recorded_place(path: &Path) -> Option<String> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    file.metadata().ok().filter(|m| m.is_file())?;
    let mut bytes = [0u8; 256];
    let read = file.read_at(&mut bytes, 0).ok()?;
    let text = String::from_utf8_lossy(&bytes[..read]);
    let place = text.lines().nth(1)?.trim();
    (place.starts_with("pid ") && place.chars().all(|c| !c.is_control())).then(|| place.to_string())
}

/// Whether the kernel says `pid` holds the lock on the file (`dev`,
/// `ino`): an exclusive `flock` of that pid on that inode in
/// `/proc/locks`, or, when `/proc/locks` names no holder of that inode
/// (a file system that reports other numbers there), an open descriptor
/// of `pid` on the very file.
fn confirmed_holder(pid: u32, dev: u64, ino: u64) -> bool {
    #[expect(
        clippy::disallowed_methods,
        reason = "a kernel file (/proc), no user can plant it"
    )]
    let holders = std::fs::read_to_string("/proc/locks")
        .map(|text| flock_writers(&text, ino))
        .unwrap_or_default();
    if !holders.is_empty() {
        return holders.contains(&pid);
    }
    has_open(pid, dev, ino)
}

/// The pids `/proc/locks` (its text) lists as holding an exclusive
/// `flock` on inode `ino` (`1: FLOCK  ADVISORY  WRITE 1900 fe:00:5308740
/// 0 EOF`; waiters, marked `->`, are not holders).
fn flock_writers(text: &str, ino: u64) -> Vec<u32> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [_, kind, _, access, pid, file, ..] = fields[..] else {
                return None;
            };
            let inode = file.rsplit(':').next()?.parse::<u64>().ok()?;
            (kind == "FLOCK" && access == "WRITE" && inode == ino)
                .then(|| pid.parse().ok())
                .flatten()
        })
        .collect()
}

/// Whether process `pid` has a descriptor open on the file (`dev`, `ino`).
fn has_open(pid: u32, dev: u64, ino: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::metadata(fd.path()).is_ok_and(|m| m.dev() == dev && m.ino() == ino))
}

/// Opens (creating) the lock file, readable by everyone (0644 whatever
/// the umask), never through a symbolic link.
fn open(path: &Path) -> Result<File, Error> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let file = lock_file_options().open(path).map_err(|e| {
        // Someone else's lock file in our directory (left by a verb that
        // once ran as root): a usage error that names its owner and the
        // fix, not a failure of the machine.
        match std::fs::symlink_metadata(path) {
            Ok(meta) if e.kind() == std::io::ErrorKind::PermissionDenied => Error::Usage(format!(
                "cannot open {}: it belongs to {}, not to you; remove it (`rm {}`) and start again",
                path.display(),
                crate::files::user_name(meta.uid()),
                path.display()
            )),
            _ => Error::io(format!("cannot open {}", path.display()), e),
        }
    })?;
    // Only the owner may change the mode; another user's file stays as is.
    let _ = file.set_permissions(std::fs::Permissions::from_mode(0o644));
    Ok(file)
}

/// How every lock file is opened: read and write, created if missing with
/// mode 0644 whatever the umask, never through a symbolic link nor
/// blocking on a FIFO, closed on exec.
fn lock_file_options() -> std::fs::OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = File::options();
    options
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC);
    options
}

/// Opens a lock file that every user may lock: without following a
/// symbolic link, created if missing with mode 0644 whatever the umask (a
/// `flock` needs only read access, so everyone can lock a file its creator
/// made), read-only when it is another user's; a file of ours that others
/// cannot read is opened up to 0644. Used for the ledger's, the history's
/// and the simulated GPUs' locks.
///
/// Errors: the file can be neither created nor opened.
pub fn open_shared(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    let file = lock_file_options().open(path).or_else(|_| {
        File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
    })?;
    // A FIFO in its place opened without blocking (O_NONBLOCK) and is
    // refused here: a lock that excludes nobody, or one that never opens.
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    if file
        .metadata()
        .is_ok_and(|m| m.uid() == nix::unistd::geteuid().as_raw() && m.mode() & 0o444 != 0o444)
    {
        let _ = file.set_permissions(std::fs::Permissions::from_mode(0o644));
    }
    Ok(file)
}

/// Waits for an exclusive `flock` on `file` (the lock file at `path`).
///
/// Errors: the lock cannot be taken, naming `path`.
pub fn lock_exclusive(file: File, path: &Path) -> anyhow::Result<Flock<File>> {
    Flock::lock(file, FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow::anyhow!("cannot lock {}: {e}", path.display()))
}

/// Whether the locked descriptor is still the file at `path` (same device
/// and inode): a lock on a file that was removed or renamed over while we
/// waited excludes nobody.
pub fn is_file_at(held: &Flock<File>, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(open), Ok(now)) = (held.metadata(), std::fs::symlink_metadata(path)) else {
        return false;
    };
    open.dev() == now.dev() && open.ino() == now.ino()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(holder(dir.path()), None, "no file yet");
        let lock = SchedulerLock::acquire(dir.path()).unwrap();
        assert_eq!(holder(dir.path()), Some(std::process::id()));
        let second = SchedulerLock::acquire(dir.path()).unwrap_err();
        assert_eq!(second.exit_code(), 2);
        assert!(
            second
                .to_string()
                .contains(&format!("pid {}", std::process::id())),
            "{second}"
        );
        drop(lock);
        assert_eq!(holder(dir.path()), None, "released on drop");
        let _again = SchedulerLock::acquire(dir.path()).unwrap();
    }

    #[test]
    fn a_pid_written_into_a_lock_its_writer_holds_names_nobody() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(dir.path());
        // Someone holds the lock with another process's pid in the file.
        let file = open(&path).unwrap();
        let held = Flock::lock(file, FlockArg::LockExclusiveNonblock).unwrap();
        std::fs::write(&path, "1\n").unwrap();
        assert_eq!(holder(dir.path()), None, "pid 1 holds no lock here");
        std::fs::write(&path, format!("{}\n", std::process::id())).unwrap();
        assert_eq!(holder(dir.path()), Some(std::process::id()));
        drop(held);
    }

    #[test]
    fn a_holder_on_another_node_is_named_by_its_lock_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(dir.path());
        // A pilot on another node of a shared file system: its pid means
        // nothing here, its lock file's second line says where it runs.
        let file = open(&path).unwrap();
        let held = Flock::lock(file, FlockArg::LockExclusiveNonblock).unwrap();
        std::fs::write(&path, "4242\npid 4242 on node gpu07 in Slurm job 1234\n").unwrap();
        let refused = SchedulerLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(
            refused.contains("(pid 4242 on node gpu07 in Slurm job 1234, by its lock file)"),
            "{refused}"
        );
        // A planted line with control characters is not repeated.
        std::fs::write(&path, "4242\npid 1 \u{1b}[2Jok\n").unwrap();
        let refused = SchedulerLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(refused.contains("(pid unknown)"), "{refused}");
        drop(held);
        // Our own lock says where we run.
        let _ours = SchedulerLock::acquire(dir.path()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(std::process::id().to_string().as_str()));
        assert!(
            lines
                .next()
                .unwrap()
                .starts_with(&format!("pid {} on node ", std::process::id()))
        );
    }

    #[test]
    fn proc_locks_lines_name_the_writers_of_one_inode() {
        let text = "1: FLOCK  ADVISORY  WRITE 1900 fe:00:5308740 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 1901 fe:00:5308740 0 EOF\n\
                    2: FLOCK  ADVISORY  READ 1902 fe:00:5308740 0 EOF\n\
                    3: POSIX  ADVISORY  WRITE 1903 fe:00:5308740 0 EOF\n\
                    4: FLOCK  ADVISORY  WRITE 1904 fe:00:77 0 EOF\n";
        assert_eq!(flock_writers(text, 5308740), vec![1900]);
        assert_eq!(flock_writers(text, 77), vec![1904]);
        assert!(flock_writers(text, 1).is_empty());
    }
}
