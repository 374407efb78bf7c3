//! A directory someone else may control, as a type (docs/SECURITY.md
//! "Neighbours"): [`Dir`] holds a descriptor of the directory, opened once
//! without following a link and checked on that descriptor to belong to
//! the user expected, and every file operation in it is a `*at()` call on
//! one name relative to that descriptor. A name is one path component
//! (no `/`, never `.` or `..`) opened with `O_NOFOLLOW`, so nothing done
//! through a [`Dir`] can leave it, whatever is swapped in at its path or
//! planted in it afterwards. Used where a directory is shared (simulated
//! GPUs, the ledger) or was named by a file another user can write.
//!
//! Built on `nix`'s `openat`/`unlinkat`/`fstatat` rather than a capability
//! crate (cap-std): the few operations needed are single-name calls, for
//! which `O_NOFOLLOW` on one component already confines them.

use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, fstatat};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Whose directory a [`Dir`] must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Anyone's (a directory the caller named itself; every operation is
    /// still confined to it).
    Any,
    /// User `uid`'s, or a shared one of root's: sticky and open to all
    /// (mode 1777, as `gpusched ledger init` makes it).
    UserOrShared(u32),
}

/// Why a directory was not opened as a [`Dir`].
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// It is not there.
    #[error("no such directory")]
    Missing,
    /// A link, a file or anything else but a directory.
    #[error("not a directory (a link is not followed)")]
    NotADirectory,
    /// Another user's than the one expected.
    #[error("it belongs to {owner}, not to {expected}")]
    Foreign {
        /// Its owner's name.
        owner: String,
        /// The expected owner's name.
        expected: String,
    },
    /// It could not be opened or examined.
    #[error("{0}")]
    Io(std::io::Error),
}

/// An open directory (see the module's doc).
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
    owner: u32,
}

impl Dir {
    /// Opens directory `path` (`O_DIRECTORY | O_NOFOLLOW`: a link there is
    /// refused) and checks its owner on the descriptor.
    ///
    /// Errors: [`DirError`].
    pub fn open(path: &Path, owner: Owner) -> Result<Dir, DirError> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            nix::Error::ENOENT => DirError::Missing,
            nix::Error::ELOOP | nix::Error::ENOTDIR => DirError::NotADirectory,
            e => DirError::Io(e.into()),
        })?;
        let st = nix::sys::stat::fstat(&fd).map_err(|e| DirError::Io(e.into()))?;
        if let Owner::UserOrShared(uid) = owner {
            let shared = st.st_uid == 0 && st.st_mode & 0o1777 == 0o1777;
            if st.st_uid != uid && !shared {
                return Err(DirError::Foreign {
                    owner: crate::files::user_name(st.st_uid),
                    expected: crate::files::user_name(uid),
                });
            }
        }
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
            owner: st.st_uid,
        })
    }

    /// The path it was opened at (for messages only: nothing is opened
    /// by it again).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its owner's uid, as its descriptor showed when opened.
    pub fn owner(&self) -> u32 {
        self.owner
    }

    /// The names in it, `.` and `..` left out.
    ///
    /// Errors: it cannot be read.
    pub fn names(&self) -> std::io::Result<Vec<OsString>> {
        let mut listing = nix::dir::Dir::openat(
            &self.fd,
            ".",
            OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(listing
            .iter()
            .flatten()
            .map(|e| OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
            .filter(|n| n != "." && n != "..")
            .collect())
    }

    /// Opens file `name` in it to read: `O_NOFOLLOW | O_NONBLOCK` (a link
    /// is refused, a FIFO never blocks), checked on the descriptor to be a
    /// regular file of at most `max_bytes` bytes.
    ///
    /// Errors: [`crate::trust::Untrusted`].
    pub fn open_read(
        &self,
        name: &OsStr,
        max_bytes: u64,
    ) -> Result<(File, std::fs::Metadata), crate::trust::Untrusted> {
        use crate::trust::Untrusted;
        let name = one_name(name).map_err(Untrusted::Io)?;
        let fd = openat(
            &self.fd,
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            nix::Error::ELOOP => Untrusted::NotRegular,
            e => Untrusted::Io(e.into()),
        })?;
        crate::trust::checked_open(File::from(fd), max_bytes)
    }

    /// Reads file `name` in it as [`Dir::open_read`] opens it, at most
    /// `max_bytes` bytes even if it grows meanwhile.
    ///
    /// Errors: [`crate::trust::Untrusted`].
    pub fn read(&self, name: &OsStr, max_bytes: u64) -> Result<Vec<u8>, crate::trust::Untrusted> {
        use std::io::Read;
        let (file, meta) = self.open_read(name, max_bytes)?;
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.take(max_bytes).read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    /// Makes file `name` in it, new (`O_CREAT | O_EXCL | O_NOFOLLOW`:
    /// never an existing file or a link), open to read and write, with
    /// `mode` set on the descriptor whatever the umask.
    ///
    /// Errors: something is there already (`AlreadyExists`), or it cannot
    /// be made.
    pub fn create_new(&self, name: &OsStr, mode: u32) -> std::io::Result<File> {
        use std::os::unix::fs::PermissionsExt;
        let fd = openat(
            &self.fd,
            one_name(name)?,
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        )?;
        let file = File::from(fd);
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        Ok(file)
    }

    /// Removes the entry `name` (a file, link or FIFO, never a directory)
    /// from it; the entry itself is not followed.
    ///
    /// Errors: it is not there, or cannot be removed.
    pub fn remove(&self, name: &OsStr) -> std::io::Result<()> {
        nix::unistd::unlinkat(
            &self.fd,
            one_name(name)?,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        )?;
        Ok(())
    }

    /// What entry `name` is, not following it if it is a link.
    ///
    /// Errors: it is not there, or cannot be examined.
    pub fn stat(&self, name: &OsStr) -> std::io::Result<FileStat> {
        Ok(fstatat(
            &self.fd,
            one_name(name)?,
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )?)
    }
}

impl AsFd for Dir {
    /// The directory's descriptor, for a change of the directory itself
    /// (`fchown`, `fchmod`).
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// `name` when it is one path component: not empty, no `/`, not `.` or
/// `..`.
///
/// Errors: `InvalidInput` otherwise.
fn one_name(name: &OsStr) -> std::io::Result<&OsStr> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.contains(&b'/') || name == "." || name == ".." {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{name:?} is not one name in a directory"),
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_done_through_a_dir_leaves_it() {
        let root = tempfile::tempdir().unwrap();
        let inside = root.path().join("in");
        std::fs::create_dir(&inside).unwrap();
        std::fs::write(root.path().join("outside.json"), "precious").unwrap();
        std::os::unix::fs::symlink(root.path().join("outside.json"), inside.join("link.json"))
            .unwrap();
        let dir = Dir::open(&inside, Owner::Any).unwrap();
        for name in ["../outside.json", "..", ".", "", "a/b"] {
            assert!(dir.remove(OsStr::new(name)).is_err(), "{name}");
            assert!(dir.read(OsStr::new(name), 100).is_err(), "{name}");
        }
        // A link is read as nothing, removed as itself.
        assert!(matches!(
            dir.read(OsStr::new("link.json"), 100),
            Err(crate::trust::Untrusted::NotRegular)
        ));
        dir.remove(OsStr::new("link.json")).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.path().join("outside.json")).unwrap(),
            "precious"
        );
        // The path swapped for another directory afterwards: the Dir still
        // acts in the one it opened.
        let moved = root.path().join("moved");
        std::fs::rename(&inside, &moved).unwrap();
        std::fs::create_dir(&inside).unwrap();
        dir.create_new(OsStr::new("made"), 0o644).unwrap();
        assert!(moved.join("made").exists());
        assert!(!inside.join("made").exists());
        assert_eq!(dir.names().unwrap(), vec![OsString::from("made")]);
    }

    #[test]
    fn a_link_a_file_or_anothers_directory_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let real = root.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, root.path().join("link")).unwrap();
        std::fs::write(root.path().join("file"), "").unwrap();
        assert!(matches!(
            Dir::open(&root.path().join("link"), Owner::Any),
            Err(DirError::NotADirectory)
        ));
        assert!(matches!(
            Dir::open(&root.path().join("file"), Owner::Any),
            Err(DirError::NotADirectory)
        ));
        assert!(matches!(
            Dir::open(&root.path().join("none"), Owner::Any),
            Err(DirError::Missing)
        ));
        let me = nix::unistd::geteuid().as_raw();
        assert!(Dir::open(&real, Owner::UserOrShared(me)).is_ok());
        // Another user's (or, to a test run as root, root's own 0700 one,
        // which is not a shared one).
        let other = me.wrapping_add(1);
        assert!(matches!(
            Dir::open(&real, Owner::UserOrShared(other)),
            Err(DirError::Foreign { .. })
        ));
        if me == 0 {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o1777)).unwrap();
            assert!(Dir::open(&real, Owner::UserOrShared(other)).is_ok());
        }
    }
}
