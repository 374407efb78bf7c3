//! The ledger directory itself (docs/BEHAVIOUR.md "Sharing a box",
//! docs/SECURITY.md "The shared ledger"): made or checked before a
//! scheduler books in it, its owner and mode checked on the descriptor,
//! and `gpusched ledger init`.

#![expect(
    clippy::disallowed_methods,
    reason = "the ledger directory itself, each change checked on its descriptor (O_DIRECTORY|O_NOFOLLOW); a lock made O_EXCL"
)]

use crate::error::Error;
use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The `systemd-tmpfiles` line that keeps ledger directory `dir` as it
/// must be across reboots (its lock file is [`tmpfiles_lock_line`]).
pub fn tmpfiles_line(dir: &Path) -> String {
    format!("d {} 1777 root root -", dir.display())
}

/// The `systemd-tmpfiles` line that makes the ledger's lock file root's.
pub fn tmpfiles_lock_line(dir: &Path) -> String {
    format!("f {} 0644 root root -", dir.join(LOCK_NAME).display())
}

/// The lock file's name in the ledger directory.
pub const LOCK_NAME: &str = "lock";

/// Why the ledger's lock file was not used (docs/SECURITY.md "The shared
/// ledger"): said once, loudly, and the scheduler decides without it.
#[derive(Debug, thiserror::Error)]
pub enum LockRefused {
    /// A shared (root's) ledger without a lock file: a user who made one
    /// would own it, and could swap it for a FIFO.
    #[error("the shared ledger has no lock file")]
    Missing,
    /// A FIFO, link, socket, device or directory in its place.
    #[error("the lock file is not a regular file (someone replaced it)")]
    NotRegular,
    /// Owned by another user than root or us: they could replace it.
    #[error("the lock file belongs to {0}, not to root")]
    Foreign(String),
    /// It cannot be opened (no read permission) or made.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Opens the ledger's lock file in `dir` for `flock` without ever
/// blocking or following a link (`O_NONBLOCK | O_NOFOLLOW`), and checks
/// on the descriptor that it is a regular file owned by root or by us.
/// A missing lock file is made (0644, `O_EXCL`) only in a ledger of our
/// own, or by root; in root's shared ledger it is `gpusched ledger
/// init`'s to make.
///
/// Errors: [`LockRefused`], each to be said as it is.
pub fn open_lock(dir: &Path) -> Result<File, LockRefused> {
    let path = dir.join(LOCK_NAME);
    let opened = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(LockRefused::NotRegular),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let me = nix::unistd::geteuid().as_raw();
            let owner = std::fs::symlink_metadata(dir)?.uid();
            if owner != me && me != 0 {
                return Err(LockRefused::Missing);
            }
            match create_lock(&path) {
                Ok(file) => file,
                // Made by another scheduler of ours a moment ago.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    return open_lock(dir);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(e) => return Err(e.into()),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(LockRefused::NotRegular);
    }
    if meta.uid() != 0 && meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(LockRefused::Foreign(crate::files::user_name(meta.uid())));
    }
    Ok(file)
}

/// Makes the lock file `path`: new (`O_EXCL`, never an existing file or
/// link), mode 0644 set on the descriptor whatever the umask, so every
/// user can open it to lock.
fn create_lock(path: &Path) -> std::io::Result<File> {
    let file = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    Ok(file)
}

/// Creates the ledger directory, or checks the existing one (docs/
/// BEHAVIOUR.md "Sharing a box"). In a sticky directory its owner can
/// still delete anyone's files, so a shared ledger must be owned by root
/// (made by `gpusched ledger init`, or the [`tmpfiles_line`]); a directory
/// of our own is a private ledger. Made by root it is shared (mode 1777);
/// made by another user it is private (0755: others can read it, and are
/// refused if they try to book in it).
///
/// Returns a warning when others will be refused in the one it made.
///
/// Errors: [`Error::Usage`] when `dir` is a symbolic link, not a
/// directory, owned by another user than root or us, or writable by others
/// without the sticky bit; [`Error::Io`] when it cannot be created.
pub(super) fn prepare_dir(dir: &Path) -> Result<Option<String>, Error> {
    let refuse = |what: &str| {
        Error::Usage(format!(
            "the ledger directory {} is {what}; refusing to use it (give --ledger DIR, or --no-ledger)",
            dir.display()
        ))
    };
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_symlink() => return Err(refuse("a symbolic link")),
        Ok(meta) if !meta.is_dir() => return Err(refuse("not a directory")),
        Ok(meta) => return check_owner(dir, &meta).map(|()| None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(Error::io(format!("cannot look at {}", dir.display()), e));
        }
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::io(format!("cannot create {}", parent.display()), e))?;
    }
    let mode = if nix::unistd::geteuid().is_root() {
        0o1777
    } else {
        0o755
    };
    match std::fs::create_dir(dir) {
        Ok(()) => {
            set_mode_on_descriptor(dir, mode)?;
            // In a place everyone may write (/dev/shm), the first user on
            // a box makes a ledger nobody else may book in: say so now,
            // not when the second is refused. (A ledger in one's own
            // directory, as a simulation's, is private by intent.)
            let shared_place = dir
                .parent()
                .and_then(|p| std::fs::metadata(p).ok())
                .is_some_and(|m| m.mode() & 0o002 != 0);
            Ok((mode != 0o1777 && shared_place).then(|| {
                format!(
                    "made the ledger directory {} as {}'s own (mode 0755): other users' schedulers will be refused there; for a box several people share, ask root to run `sudo gpusched ledger init --ledger {}` (it fixes this one), or give this scheduler a --ledger DIR of its own",
                    dir.display(),
                    crate::files::user_name(nix::unistd::getuid().as_raw()),
                    dir.display()
                )
            }))
        }
        // Another scheduler created it a moment ago.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => prepare_dir(dir),
        Err(e) => Err(Error::io(format!("cannot create {}", dir.display()), e)),
    }
}

/// Checks an existing ledger directory as [`prepare_dir`] does, and
/// makes nothing: a missing one is an empty ledger to a reader.
///
/// Errors: as [`prepare_dir`]'s, for an existing directory.
pub(super) fn check_existing(dir: &Path) -> Result<(), Error> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_symlink() || !meta.is_dir() => prepare_dir(dir).map(drop),
        Ok(meta) => check_owner(dir, &meta),
        Err(_) => Ok(()),
    }
}

/// Opens directory `dir` for changes on its descriptor
/// (`O_DIRECTORY | O_NOFOLLOW`): a link or a file there is refused,
/// never followed.
///
/// Errors: [`Error::Usage`] "`dir` `not_a_directory`" for a link or a
/// file; [`Error::Io`] when it cannot be opened.
fn open_directory(dir: &Path, not_a_directory: &str) -> Result<File, Error> {
    File::options()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP | libc::ENOTDIR) => {
                Error::Usage(format!("{} {not_a_directory}", dir.display()))
            }
            _ => Error::io(format!("cannot open {}", dir.display()), e),
        })
}

/// Sets the mode of the directory `dir` we just made, on its descriptor:
/// opened with `O_DIRECTORY | O_NOFOLLOW` and checked to be ours, so a
/// link swapped in after the `mkdir` is refused, never chmod'ed through
/// (docs/SECURITY.md "Root's verbs").
///
/// Errors: [`Error::Usage`] when the path is no longer our directory;
/// [`Error::Io`] when it cannot be opened or changed.
fn set_mode_on_descriptor(dir: &Path, mode: u32) -> Result<(), Error> {
    let opened = open_directory(
        dir,
        "was replaced by something else as it was made; refusing to use it",
    )?;
    let meta = opened
        .metadata()
        .map_err(|e| Error::io(format!("cannot read {}", dir.display()), e))?;
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(Error::Usage(format!(
            "the ledger directory {} belongs to {}, not to the user who made it a moment ago; refusing to use it",
            dir.display(),
            crate::files::user_name(meta.uid())
        )));
    }
    opened
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io(format!("cannot set the mode of {}", dir.display()), e))
}

/// Accepts a ledger directory owned by root or by us, never writable by
/// others without the sticky bit.
fn check_owner(dir: &Path, meta: &std::fs::Metadata) -> Result<(), Error> {
    let me = nix::unistd::geteuid().as_raw();
    let mode = meta.mode() & 0o7777;
    if meta.uid() != 0 && meta.uid() != me {
        return Err(Error::Usage(format!(
            "the ledger directory {} belongs to {} (mode {mode:04o}), who could delete everyone's bookings in it; a shared ledger must belong to root: ask root to run `gpusched ledger init --ledger {}` (or install the systemd-tmpfiles rule `{}`), or use a private --ledger DIR of your own, or --no-ledger",
            dir.display(),
            crate::files::user_name(meta.uid()),
            dir.display(),
            tmpfiles_line(dir)
        )));
    }
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        return Err(Error::Usage(format!(
            "the ledger directory {} is writable by everyone (mode {mode:04o}) without the sticky bit, so anyone could delete anyone's bookings; as root, `chmod 1777 {}` (or `gpusched ledger init --ledger {}`)",
            dir.display(),
            dir.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// `gpusched ledger init` (as root): makes `dir` the shared ledger it must
/// be — a real directory owned by root, mode 1777 — creating it or fixing
/// an existing one. Returns what was done, in words.
///
/// Errors: [`Error::Usage`] when not run as root, or `dir` is a symbolic
/// link or not a directory; [`Error::Io`] when it cannot be changed.
pub fn init(dir: &Path) -> Result<String, Error> {
    if !nix::unistd::geteuid().is_root() {
        return Err(Error::Usage(format!(
            "gpusched ledger init must run as root (it makes {} belong to root); try `sudo gpusched ledger init`",
            dir.display()
        )));
    }
    let created = std::fs::symlink_metadata(dir).is_err();
    if created {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    }
    // Everything on one descriptor, opened without following a link: a
    // user who swaps the path for a link between a check and a chown by
    // path could make root hand them any directory (docs/SECURITY.md).
    let opened = crate::dirfd::Dir::open(dir, crate::dirfd::Owner::Any).map_err(|e| match e {
        crate::dirfd::DirError::Io(e) => Error::io(format!("cannot open {}", dir.display()), e),
        _ => Error::Usage(format!(
            "{} exists and is not a directory; remove it first",
            dir.display()
        )),
    })?;
    std::os::unix::fs::fchown(&opened, Some(0), Some(0))
        .map_err(|e| Error::io(format!("cannot make {} belong to root", dir.display()), e))?;
    nix::sys::stat::fchmod(&opened, nix::sys::stat::Mode::from_bits_truncate(0o1777)).map_err(
        |e| {
            Error::io(
                format!("cannot set the mode of {}", dir.display()),
                e.into(),
            )
        },
    )?;
    init_lock(&opened)?;
    Ok(format!(
        "{} {}: owned by root, mode 1777 (sticky, everyone can book), its lock file root's (0644); to keep it so across reboots, add to /etc/tmpfiles.d/gpusched.conf:\n{}\n{}",
        if created { "created" } else { "fixed" },
        dir.display(),
        tmpfiles_line(dir),
        tmpfiles_lock_line(dir)
    ))
}

/// Makes the lock file of the ledger directory `opened` root's: a
/// regular file, mode 0644, owned by root, made new in the directory's
/// descriptor. Whatever else is there under its name (a user's file, a
/// FIFO, a link) is removed first, never opened.
///
/// Errors: [`Error::Io`] when it cannot be removed or made.
fn init_lock(opened: &crate::dirfd::Dir) -> Result<(), Error> {
    let name = std::ffi::OsStr::new(LOCK_NAME);
    let path = opened.path().join(LOCK_NAME);
    let said = |e: std::io::Error| Error::io(format!("cannot make {}", path.display()), e);
    let right = |st: &nix::sys::stat::FileStat| {
        st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_uid == 0 && st.st_mode & 0o7777 == 0o644
    };
    match opened.stat(name) {
        Ok(st) if right(&st) => return Ok(()),
        Ok(_) => opened.remove(name).map_err(said)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(said(e)),
    }
    let file = opened.create_new(name, 0o644).map_err(said)?;
    std::os::unix::fs::fchown(&file, Some(0), Some(0))
        .map_err(|e| Error::io(format!("cannot make {} belong to root", path.display()), e))
}
