//! Files the scheduler writes besides the journal (HOUSE habit 8): the one
//! atomic-write helper (temp file in the same directory, then `rename`, so
//! a reader never sees half a file), appends to job logs, and reading a
//! log's tail.

#![expect(
    clippy::disallowed_methods,
    reason = "the one writer: temp files O_EXCL, logs O_NOFOLLOW checked on the descriptor, in directories check_own_dir accepted"
)]

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// How [`write_atomic_with`] writes.
#[derive(Debug, Clone, Default)]
pub struct AtomicOptions {
    /// Permission bits for the new file (e.g. to keep a user's file mode);
    /// `None` leaves the temp file's.
    pub mode: Option<std::fs::Permissions>,
    /// Whether to fsync the contents before the rename (for files whose
    /// loss would lose a user's edit; not for files rewritten every round).
    pub sync: bool,
}

/// Writes `contents` to `path` atomically: a temp file in the same
/// directory, then renamed over `path`.
///
/// Errors: the directory is not writable, or the disk is full.
pub fn write_atomic_with(
    path: &Path,
    contents: &[u8],
    options: &AtomicOptions,
) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(contents)?;
    if options.sync {
        tmp.as_file().sync_data()?;
    }
    // On the descriptor, never by path: in a directory someone else can
    // write, the name could be swapped for a link between the create and
    // a chmod by path (docs/SECURITY.md "One writer").
    if let Some(mode) = &options.mode {
        tmp.as_file().set_permissions(mode.clone())?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The permission bits for files people read (status.txt, status.json,
/// metrics.prom; docs/BEHAVIOUR.md "Everyday verbs"): 0666 less the process's umask, as a plain
/// `open` would create them. The umask is read once (reading it means
/// setting it, so it is done before any thread creates files).
pub fn people_mode() -> std::fs::Permissions {
    use std::os::unix::fs::PermissionsExt;
    static MODE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let mode = *MODE.get_or_init(|| {
        use nix::sys::stat::{Mode, umask};
        // Reading the mask means setting it: put it back at once.
        let mask = umask(Mode::from_bits_truncate(0o022));
        umask(mask);
        let mask = mask.bits();
        0o666 & !mask
    });
    std::fs::Permissions::from_mode(mode)
}

/// [`write_atomic_with`] for files people read: the umask's mode
/// ([`people_mode`]), no fsync.
pub fn write_for_people(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    write_atomic_with(
        path,
        contents,
        &AtomicOptions {
            mode: Some(people_mode()),
            sync: false,
        },
    )
}

/// [`write_atomic_with`] with default options (no fsync, the temp
/// file's mode).
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, contents, &AtomicOptions::default())
}

/// Appends `bytes` to the file at `path` (created if missing); returns the
/// byte offset they start at.
///
/// Errors: the file cannot be opened or written.
pub fn append_to(path: &Path, bytes: &[u8]) -> std::io::Result<u64> {
    let mut file = open_append(path)?;
    let offset = file.seek(SeekFrom::End(0))?;
    file.write_all(bytes)?;
    Ok(offset)
}

/// Opens `path` for appending, creating it if needed, without following a
/// symbolic link or blocking on a FIFO: a link planted where a log goes
/// is refused with `ELOOP` instead of written through (docs/BEHAVIOUR.md
/// "Files in shared directories"), and the file opened must be a regular
/// file of this process's effective user, checked on the descriptor.
///
/// Errors: the file cannot be opened, is a symbolic link, is not a
/// regular file, or belongs to another user.
pub fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::File::options()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    // Checked on the descriptor: a file someone else made there first
    // would hand them what we write (docs/SECURITY.md "Neighbours").
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file, and gpusched writes only to one",
            path.display()
        )));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(std::io::Error::other(format!(
            "{} belongs to {}, not to you ({}): someone made it before gpusched did; remove it",
            path.display(),
            user_name(meta.uid()),
            user_name(me)
        )));
    }
    Ok(file)
}

/// Creates `path` for writing, owner-only (0600 on the descriptor), only
/// if nothing is there: an existing file or a planted symbolic link is
/// refused (`EEXIST`), never written through.
///
/// Errors: something is at `path`, or the directory is not writable.
pub fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::File::options()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// The last `limit` bytes of the file written since byte `from`, decoded
/// lossily; empty when the file cannot be read.
pub fn read_tail(path: &Path, from: u64, limit: u64) -> String {
    let Ok(mut file) = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    else {
        return String::new();
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return String::new();
    };
    let Ok(len) = file.seek(SeekFrom::End(0)) else {
        return String::new();
    };
    let start = from.max(len.saturating_sub(limit));
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Refuses a directory gpusched would write into that someone else could
/// redirect (docs/BEHAVIOUR.md "Files in shared directories"): one owned
/// by another user, or writable by its group or others, sticky or not.
/// `what` names it in the message (`log directory`).
///
/// Errors: [`crate::error::Error::Usage`] (exit 2) naming the owner and
/// the mode, and the fix; [`crate::error::Error::Io`] when it cannot be
/// read.
pub fn check_own_dir(dir: &Path, what: &str) -> Result<(), crate::error::Error> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir)
        .map_err(|e| crate::error::Error::io(format!("cannot read {what} {}", dir.display()), e))?;
    let me = nix::unistd::geteuid().as_raw();
    let mode = meta.mode() & 0o7777;
    if meta.uid() != me {
        return Err(crate::error::Error::Usage(format!(
            "{what} {} belongs to {} (mode {mode:04o}), not to you ({}): its owner could redirect what gpusched writes there; use a --log-dir of your own",
            dir.display(),
            user_name(meta.uid()),
            user_name(me)
        )));
    }
    // Sticky or not: in a sticky directory others cannot replace our
    // files, but they can make the ones we have not made yet (a job's
    // log, as 0666, to read its output and write lines into it).
    if mode & 0o022 != 0 {
        let who = if mode & 0o002 != 0 {
            "everyone"
        } else {
            "its group"
        };
        let sticky = if mode & 0o1000 != 0 {
            " (the sticky bit does not stop them making the files gpusched has not made yet)"
        } else {
            ""
        };
        return Err(crate::error::Error::Usage(format!(
            "{what} {} is writable by {who} (mode {mode:04o}){sticky}: they could plant its files (a job's log, a saved environment, a request), read your jobs' output and run code as you; `chmod go-w {}` it, or use another --log-dir",
            dir.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// The name of user `uid`, or the number when it has none.
pub fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| format!("uid {uid}"), |u| u.name)
}

/// An I/O error as a reason in a sentence: `Permission denied`, without
/// the `(os error 13)` the standard library adds.
pub fn io_reason(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// `path` made absolute against the current directory (jobs get it in
/// `GPUSCHED_LOG_DIR` and may `cd`).
pub fn absolute(path: &Path) -> std::path::PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_reads_only_this_attempt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "CUDA out of memory\n").unwrap();
        let offset = append_to(&path, b"attempt 2\nfine\n").unwrap();
        assert_eq!(read_tail(&path, offset, 16 * 1024), "attempt 2\nfine\n");
        assert!(read_tail(&path, 0, 16 * 1024).contains("CUDA out of memory"));
        assert_eq!(read_tail(&path, 0, 5), "fine\n");
        assert_eq!(read_tail(&dir.path().join("missing"), 0, 5), "");
    }

    #[test]
    fn atomic_write_replaces_and_keeps_a_given_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        write_atomic(&path, b"one").unwrap();
        let options = AtomicOptions {
            mode: Some(std::fs::Permissions::from_mode(0o640)),
            sync: true,
        };
        write_atomic_with(&path, b"two", &options).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temp left"
        );
    }
}
