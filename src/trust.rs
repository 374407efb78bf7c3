//! Crossing a user boundary (docs/SECURITY.md). Two rules, one place each:
//!
//! * **Root acts in a user's directory as that user.** A verb run by root
//!   on a log directory it does not own ([`act_as_owner_of`]) first
//!   becomes the directory's owner — uid, gid and supplementary groups,
//!   all three ids of each, for good — so every later step there (the
//!   journal, requests, control.json, the lock, `stop`'s signal, `add`'s
//!   append) can do no more than the owner could do by hand (OpenSSH's
//!   privilege separation, `sudo -u`).
//! * **One reader for files someone else controls** ([`read_untrusted`]):
//!   opened without following a link and without blocking on a FIFO, a
//!   regular file checked on the descriptor, read up to a size cap. Other
//!   users' status.json and journals, bookings, reservations, requests and
//!   simulated GPUs' reports go through it.

#![expect(
    clippy::disallowed_methods,
    reason = "the one reader: O_NOFOLLOW|O_NONBLOCK, checked on the descriptor"
)]

use crate::error::Error;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The largest status.json read from someone else's log directory, in
/// bytes (a million-line queue writes about 100 MiB).
pub const MAX_STATUS_BYTES: u64 = 256 << 20;

/// The largest jobs file read through someone's status.json, in bytes.
pub const MAX_JOBS_FILE_BYTES: u64 = 1 << 30;

/// The largest journal read for accounts, in bytes.
pub const MAX_JOURNAL_BYTES: u64 = 4 << 30;

/// Why a file someone else controls was not read.
#[derive(Debug, thiserror::Error)]
pub enum Untrusted {
    /// A symbolic link, FIFO, socket, device or directory.
    #[error("not a regular file")]
    NotRegular,
    /// Larger than the cap given (its size in bytes).
    #[error("{0} bytes, over the {1}-byte limit")]
    TooLarge(u64, u64),
    /// It could not be opened or read (missing, no permission).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Opens a file that another user may have planted or may change, for a
/// streaming read: `O_NOFOLLOW | O_NONBLOCK` (a link is refused, a FIFO
/// never blocks the open), checked on the descriptor to be a regular file
/// of at most `max_bytes` bytes. The caller reads at most `max_bytes`
/// (e.g. through `Read::take`). Returns the file and its metadata.
///
/// Errors: [`Untrusted`] — not a regular file (a link included), too
/// large, or not openable.
pub fn open_untrusted(
    path: &Path,
    max_bytes: u64,
) -> Result<(std::fs::File, std::fs::Metadata), Untrusted> {
    let file = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => Untrusted::NotRegular,
            _ => Untrusted::Io(e),
        })?;
    checked_open(file, max_bytes)
}

/// The checks on a descriptor opened `O_NOFOLLOW | O_NONBLOCK` from a
/// place someone else controls: a regular file of at most `max_bytes`
/// bytes. Returns it with its metadata ([`open_untrusted`],
/// `dirfd::Dir::open_read`).
///
/// Errors: [`Untrusted`] — not a regular file, too large, or its
/// metadata unreadable.
pub fn checked_open(
    file: std::fs::File,
    max_bytes: u64,
) -> Result<(std::fs::File, std::fs::Metadata), Untrusted> {
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Untrusted::NotRegular);
    }
    if meta.len() > max_bytes {
        return Err(Untrusted::TooLarge(meta.len(), max_bytes));
    }
    Ok((file, meta))
}

/// Reads a file that another user may have planted or may change: opened
/// with `O_NOFOLLOW | O_NONBLOCK` (a link is refused, a FIFO never blocks
/// the open), checked on the descriptor to be a regular file of at most
/// `max_bytes` bytes, and read through at most `max_bytes` bytes even if
/// it grows meanwhile. Returns the bytes and the file's metadata (its
/// owner is `meta.uid()`).
///
/// Errors: [`Untrusted`] — not a regular file (a link included), too
/// large, or not readable.
pub fn read_untrusted(
    path: &Path,
    max_bytes: u64,
) -> Result<(Vec<u8>, std::fs::Metadata), Untrusted> {
    let (file, meta) = open_untrusted(path, max_bytes)?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max_bytes + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(Untrusted::TooLarge(bytes.len() as u64, max_bytes));
    }
    Ok((bytes, meta))
}

/// Fills `bytes` from the operating system's cryptographic random source
/// (the `getrandom` crate: getrandom(2), else `/dev/urandom`): for names
/// and tokens no other user may guess. There is no weaker fallback.
///
/// Errors: the OS has no random source to give (a broken sandbox); the
/// caller cannot make a secret then.
pub fn random_bytes(bytes: &mut [u8]) -> Result<(), Error> {
    getrandom::fill(bytes).map_err(|e| {
        Error::io(
            "cannot read the system's random source",
            std::io::Error::other(e.to_string()),
        )
    })
}

/// Set once this process, started by root, became a directory's owner.
static FOR_ROOT: AtomicBool = AtomicBool::new(false);

/// Whether this process was started by root and now acts as a log
/// directory's owner ([`act_as_owner_of`]): its requests say "asked by
/// root" (words only: the scheduler trusts them as its owner's).
pub fn acting_for_root() -> bool {
    FOR_ROOT.load(Ordering::Relaxed)
}

/// Makes a verb that root runs on `dir` safe to run (docs/SECURITY.md
/// "Root's verbs"); does nothing for anyone else (their verbs refuse a
/// directory that is not theirs).
///
/// The directory (or, when it does not exist yet, its deepest existing
/// ancestor) is opened with `O_DIRECTORY | O_NOFOLLOW` after its links are
/// resolved, and its owner read on that descriptor:
///
/// * another user's: this process becomes that user for good (their
///   groups, then gid, then uid: real, effective and saved), and checks it
///   cannot become root again;
/// * root's own: every directory from `/` down to it must be root's and
///   writable by nobody else (the sticky bit excepted), so no user can
///   swap a part of the path later; a `dir` given through a link is
///   replaced by its real path, so the link cannot be swapped either.
///
/// Errors: [`Error::Usage`] (exit 2) for a root-owned directory under a
/// path another user could change; [`Error::Io`] when the directory
/// cannot be opened or the ids cannot be changed (nothing was done).
pub fn act_as_owner_of(dir: &mut PathBuf) -> Result<(), Error> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let absolute = crate::files::absolute(dir);
    let mut existing = absolute.as_path();
    let real = loop {
        match existing.canonicalize() {
            Ok(real) => break real,
            Err(_) => match existing.parent() {
                Some(parent) => existing = parent,
                None => return Ok(()),
            },
        }
    };
    let opened = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&real)
        .map_err(|e| Error::io(format!("cannot open {}", real.display()), e))?;
    let meta = opened
        .metadata()
        .map_err(|e| Error::io(format!("cannot read {}", real.display()), e))?;
    if meta.uid() != 0 {
        become_user(meta.uid(), meta.gid())?;
        FOR_ROOT.store(true, Ordering::Relaxed);
        return Ok(());
    }
    for part in real.ancestors() {
        let part_meta = std::fs::symlink_metadata(part)
            .map_err(|e| Error::io(format!("cannot read {}", part.display()), e))?;
        let mode = part_meta.mode() & 0o7777;
        let open_to_others = mode & 0o022 != 0 && mode & 0o1000 == 0;
        if part_meta.uid() != 0 || open_to_others {
            return Err(Error::Usage(format!(
                "{} is root's, but {} belongs to {} (mode {mode:04o}): that user could swap the path under root; run this as that user, or use a log directory whose every parent only root can change (nothing was changed)",
                real.display(),
                part.display(),
                crate::files::user_name(part_meta.uid()),
            )));
        }
    }
    // A path through a link: from here on, its real path (the link's
    // directory may be someone else's). Else the path as given, as the
    // user spelt it in messages.
    if real != existing {
        let rest = absolute.strip_prefix(existing).unwrap_or(Path::new(""));
        *dir = real.join(rest);
    }
    Ok(())
}

/// Refuses, for a user other than root, a log directory that exists and
/// belongs to someone else (docs/SECURITY.md "Every verb's trust mode"):
/// their status.json could name a jobs file or directory of theirs for
/// this user's verb to write into. Root is never refused here (it became
/// the owner in [`act_as_owner_of`]); a missing directory is not refused
/// (the verb says there is no scheduler there).
///
/// Errors: [`Error::Usage`] (exit 2) naming the owner.
pub fn refuse_foreign(dir: &Path) -> Result<(), Error> {
    let me = nix::unistd::geteuid().as_raw();
    if me == 0 {
        return Ok(());
    }
    match std::fs::metadata(dir) {
        Ok(meta) if meta.uid() != me => Err(Error::Usage(format!(
            "the log directory {} belongs to {}, not to you ({}): gpusched acts only in log directories of your own; ask {} to run it, or give a --log-dir of yours (nothing was read or changed there)",
            crate::console::printable(&dir.display().to_string()),
            crate::files::user_name(meta.uid()),
            crate::files::user_name(me),
            crate::files::user_name(meta.uid()),
        ))),
        _ => Ok(()),
    }
}

/// Becomes user `uid` for good: their supplementary groups (from the
/// user database; none when the uid has no entry), their primary group
/// (else `gid`, the directory's group), then the uid — real, effective
/// and saved ids alike — and checks that root cannot be regained.
///
/// Errors: [`Error::Io`] when an id cannot be set.
fn become_user(uid: u32, gid: u32) -> Result<(), Error> {
    use nix::unistd::{Gid, Uid, User};
    let failed = |what: &str, e: nix::errno::Errno| {
        Error::io(
            format!("cannot act as {} ({what})", crate::files::user_name(uid)),
            e.into(),
        )
    };
    let user = User::from_uid(Uid::from_raw(uid)).ok().flatten();
    let gid = user.as_ref().map_or(Gid::from_raw(gid), |u| u.gid);
    match &user {
        Some(user) => {
            let name = std::ffi::CString::new(user.name.as_bytes())
                .map_err(|_| failed("its name", nix::errno::Errno::EINVAL))?;
            nix::unistd::initgroups(&name, gid).map_err(|e| failed("initgroups", e))?;
        }
        None => nix::unistd::setgroups(&[]).map_err(|e| failed("setgroups", e))?,
    }
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| failed("setresgid", e))?;
    let uid = Uid::from_raw(uid);
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| failed("setresuid", e))?;
    if nix::unistd::setuid(Uid::from_raw(0)).is_ok() && !uid.is_root() {
        return Err(failed("root could be regained", nix::errno::Errno::EPERM));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_bytes_fill_the_buffer_and_differ() {
        let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
        random_bytes(&mut a).unwrap();
        random_bytes(&mut b).unwrap();
        assert_ne!(a, b);
        assert_ne!(a, [0u8; 16]);
    }

    #[test]
    fn the_untrusted_reader_refuses_links_fifos_and_oversized_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("status.json");
        std::fs::write(&file, b"{}").unwrap();
        let (bytes, meta) = read_untrusted(&file, 16).unwrap();
        assert_eq!(bytes, b"{}");
        assert!(meta.is_file());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(matches!(
            read_untrusted(&link, 16),
            Err(Untrusted::NotRegular)
        ));
        // A FIFO: the open must not block (no writer ever comes).
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(matches!(
            read_untrusted(&fifo, 16),
            Err(Untrusted::NotRegular)
        ));
        assert!(matches!(
            read_untrusted(Path::new("/dev/zero"), 16),
            Err(Untrusted::NotRegular)
        ));
        std::fs::write(&file, vec![b'x'; 17]).unwrap();
        assert!(matches!(
            read_untrusted(&file, 16),
            Err(Untrusted::TooLarge(17, 16))
        ));
        assert!(matches!(
            read_untrusted(&dir.path().join("missing"), 16),
            Err(Untrusted::Io(_))
        ));
    }
}
