//! The exit records job shells write themselves (docs/BEHAVIOUR.md
//! "Exactly once", "Exit records"). Every local job's shell appends one
//! JSON line to a shared file when it exits — `<log_dir>/exits/shells-<ms>.jsonl`,
//! one file for up to [`LAUNCHES_PER_FILE`] starts — instead of creating a
//! file of its own: a sweep of tiny jobs then creates and deletes no file
//! per job for its records (on a disk file system each deletion makes
//! later file creations slower for minutes; docs/PERFORMANCE.md "Tiny
//! jobs at the spawn limit"). A line is one `write` of a few hundred
//! bytes to a file opened with `O_APPEND`, so lines of shells ending
//! together never mix.
//!
//! A file is removed once no running attempt may still write to it: the
//! scheduler knows which file each of its attempts was given, and an
//! attempt adopted from an earlier scheduler may write to any file that
//! was there at start-up.

#![expect(
    clippy::disallowed_methods,
    reason = "exit records in the scheduler's own log directory"
)]

use super::ExitRecord;
use crate::process::GroupIdentity;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// How many attempts are given one shell record file before the next one
/// is opened: 4,096 lines of under 200 bytes, under 1 MiB a file.
pub const LAUNCHES_PER_FILE: usize = 4096;

/// The most bytes of a shell record file read (a larger one is skipped:
/// it is none of ours).
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Where an attempt's exit record may be found: the file its supervisor
/// writes when no scheduler took the end, else a line its shell appended
/// to one of `shells`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordPlace {
    /// `<log_dir>/exits/<key>.<attempt>.json` (the supervisor's record,
    /// which knows more: signals, kills, a start that never ran).
    pub path: PathBuf,
    /// The shell record files this attempt's shell may have appended to.
    pub shells: Vec<PathBuf>,
    /// The job's key, as its shell writes it.
    pub key: String,
    /// The attempt, as its shell writes it.
    pub attempt: u32,
}

impl RecordPlace {
    /// The record of the start `identity` names: the supervisor's file,
    /// else the last line of a shell record file with this key, attempt
    /// and identity (a torn or garbled line is skipped).
    pub fn read_for(&self, identity: &GroupIdentity) -> Option<ExitRecord> {
        ExitRecord::read_for(&self.path, identity).or_else(|| {
            self.shells
                .iter()
                .find_map(|file| self.line_in(file, identity))
        })
    }

    /// The last line of `file` that is this attempt's record.
    fn line_in(&self, file: &Path, identity: &GroupIdentity) -> Option<ExitRecord> {
        let (bytes, _) = crate::trust::read_untrusted(file, MAX_FILE_BYTES).ok()?;
        let needle = format!("\"key\":\"{}\"", self.key);
        bytes
            .split(|&b| b == b'\n')
            .rev()
            .filter(|line| memchr::memmem::find(line, needle.as_bytes()).is_some())
            .filter_map(|line| serde_json::from_slice::<ExitRecord>(line).ok())
            .find(|r| r.key == self.key && r.attempt == self.attempt && r.belongs_to(identity))
    }
}

/// The shell record files of one log directory: the one new attempts are
/// given, and every other still on disk.
#[derive(Debug)]
pub struct ShellRecordFiles {
    /// `<log_dir>/exits`.
    dir: PathBuf,
    /// The file new attempts are given, and how many were given it.
    current: Option<(PathBuf, usize)>,
    /// Every shell record file on disk that is ours to remove (those found
    /// at start-up and those opened since).
    known: Vec<PathBuf>,
    /// A new file was opened since the last removal: older ones may have
    /// no user left.
    opened_since: bool,
}

impl ShellRecordFiles {
    /// The files of `<log_dir>/exits` as they are at start-up (an attempt
    /// adopted from the previous scheduler may have written to any).
    pub fn new(log_dir: &Path) -> ShellRecordFiles {
        let dir = log_dir.join("exits");
        let mut known: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| is_shell_record_file(p))
                    .collect()
            })
            .unwrap_or_default();
        known.sort();
        ShellRecordFiles {
            dir,
            current: None,
            known,
            opened_since: false,
        }
    }

    /// The files found at start-up or opened since, still on disk.
    pub fn known(&self) -> &[PathBuf] {
        &self.known
    }

    /// The file to give the next attempt. A new file is opened after
    /// [`LAUNCHES_PER_FILE`] attempts (then [`Self::removal_due`] says
    /// so), created empty, owner-only, never through a link; `None` when
    /// none can be created (the attempt then runs without a record of
    /// its own shell's).
    pub fn for_launch(&mut self) -> Option<PathBuf> {
        if let Some((path, given)) = &mut self.current
            && *given < LAUNCHES_PER_FILE
        {
            *given += 1;
            return Some(path.clone());
        }
        let path = self.create();
        self.opened_since |= path.is_some();
        self.current = path.clone().map(|p| (p, 1));
        path
    }

    /// Whether a new file was opened since the last [`Self::remove_unused`]:
    /// the older ones may have no user left. Called once the attempts
    /// given files are all among the running ones (a file is never
    /// removed while an attempt that was given it is still being started).
    pub fn removal_due(&self) -> bool {
        self.opened_since
    }

    /// Creates a new file under a name not taken (the time in ms, then a
    /// counter).
    fn create(&mut self) -> Option<PathBuf> {
        std::fs::create_dir_all(&self.dir).ok()?;
        let ms = (crate::clock::now_ts() * 1000.0) as u64;
        for n in 0..16 {
            let path = self.dir.join(format!("shells-{ms}-{n}.jsonl"));
            match crate::files::create_private(&path) {
                Ok(_) => {
                    self.known.push(path.clone());
                    return Some(path);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(_) => return None,
            }
        }
        None
    }

    /// Removes every file no attempt in `in_use` may still write to. The
    /// current file stays unless `idle` (nothing runs or waits: the next
    /// attempt opens a new one).
    pub fn remove_unused<'a>(&mut self, in_use: impl IntoIterator<Item = &'a Path>, idle: bool) {
        let in_use: HashSet<&Path> = in_use.into_iter().collect();
        self.opened_since = false;
        if idle {
            self.current = None;
        }
        let current = self.current.as_ref().map(|(p, _)| p.clone());
        self.known.retain(|path| {
            let keep = in_use.contains(path.as_path()) || current.as_ref() == Some(path);
            if !keep {
                let _ = std::fs::remove_file(path);
            }
            keep
        });
    }
}

/// Whether `path` is named like a shell record file (`shells-*.jsonl`).
pub fn is_shell_record_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("shells-") && n.ends_with(".jsonl"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::Pgid;

    fn identity(pgid: u32, start_ticks: Option<u64>) -> GroupIdentity {
        GroupIdentity {
            pgid: Pgid(pgid),
            start_ticks,
            boot_id: None,
        }
    }

    fn line(key: &str, attempt: u32, pgid: u32, ticks: &str, code: i32) -> String {
        format!(
            "{{\"key\":\"{key}\",\"attempt\":{attempt},\"pgid\":{pgid},\"start_ticks\":{ticks},\"code\":{code},\"signal\":null,\"ended\":0}}\n"
        )
    }

    /// The shell's line is found by key, attempt and start; a torn line, a
    /// line of another attempt or of another start (a reused pid) is not
    /// it; the supervisor's own record comes first.
    #[test]
    fn an_attempts_line_is_found_by_key_attempt_and_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ShellRecordFiles::new(dir.path());
        let file = files.for_launch().unwrap();
        assert!(files.removal_due());
        let text = [
            line("k1", 1, 100, "5", 1),
            line("k1", 2, 200, "6", 2),
            line("k1", 3, 300, "7", 3),
            "{\"key\":\"k1\",\"attempt\":3,\"pgid\":30".to_string(),
            "\n".to_string(),
            line("k2", 3, 300, "null", 4),
        ]
        .concat();
        std::fs::write(&file, text).unwrap();
        let place = |key: &str, attempt| RecordPlace {
            path: super::super::record_path(dir.path(), key, attempt),
            shells: vec![file.clone()],
            key: key.into(),
            attempt,
        };
        let found = |key, attempt, pgid, ticks| {
            place(key, attempt)
                .read_for(&identity(pgid, ticks))
                .and_then(|r| r.code)
        };
        assert_eq!(found("k1", 2, 200, Some(6)), Some(2));
        assert_eq!(found("k1", 3, 300, Some(7)), Some(3), "past a torn line");
        assert_eq!(found("k1", 2, 200, Some(9)), None, "another start");
        assert_eq!(found("k1", 4, 300, Some(7)), None, "another attempt");
        assert_eq!(
            found("k2", 3, 300, Some(7)),
            Some(4),
            "no start time written"
        );
        assert_eq!(found("k3", 1, 100, Some(5)), None, "another job");
        // The supervisor's record, when there is one, is the record.
        let own = place("k1", 2);
        std::fs::create_dir_all(own.path.parent().unwrap()).unwrap();
        let record = ExitRecord {
            key: "k1".into(),
            attempt: 2,
            pgid: 200,
            start_ticks: Some(6),
            code: None,
            signal: Some(9),
            ended: 1.0,
            never_ran: false,
            killed: true,
            start_error: None,
        };
        std::fs::write(&own.path, serde_json::to_vec(&record).unwrap()).unwrap();
        assert_eq!(own.read_for(&identity(200, Some(6))), Some(record));
    }

    /// A file is given to LAUNCHES_PER_FILE attempts, then a new one is
    /// opened; a file is removed once no attempt uses it, the current one
    /// only when the queue is idle; files found at start-up are known.
    #[test]
    fn files_rotate_and_go_once_no_attempt_uses_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ShellRecordFiles::new(dir.path());
        let first = files.for_launch().unwrap();
        files.remove_unused([first.as_path()], false);
        for _ in 1..LAUNCHES_PER_FILE {
            assert_eq!(files.for_launch(), Some(first.clone()));
        }
        assert!(!files.removal_due());
        let second = files.for_launch().unwrap();
        assert!(files.removal_due());
        assert_ne!(first, second);
        files.remove_unused([first.as_path()], false);
        assert!(
            first.exists() && second.exists(),
            "first in use, second current"
        );
        files.remove_unused([], false);
        assert!(!first.exists() && second.exists(), "the current file stays");
        let again = ShellRecordFiles::new(dir.path());
        assert_eq!(again.known(), &[second.clone()][..], "found at start-up");
        files.remove_unused([], true);
        assert!(!second.exists(), "idle: nothing will write to it");
        assert!(files.known().is_empty());
        // A fresh file (in the same millisecond it may take the removed
        // one's free name).
        let fresh = files.for_launch().expect("a new file after idling");
        assert!(
            fresh.exists() && files.known() == [fresh.clone()],
            "{fresh:?}"
        );
        assert!(files.removal_due(), "a new file after idling");
    }

    /// A link planted where a new file would go is never written through:
    /// the next name is taken.
    #[test]
    fn a_planted_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let exits = dir.path().join("exits");
        std::fs::create_dir_all(&exits).unwrap();
        let target = dir.path().join("victim");
        std::fs::write(&target, "keep").unwrap();
        let mut files = ShellRecordFiles::new(dir.path());
        // Plant links at every name of this millisecond and the next.
        let ms = (crate::clock::now_ts() * 1000.0) as u64;
        for m in ms..ms + 50 {
            for n in 0..2 {
                let _ = std::os::unix::fs::symlink(
                    &target,
                    exits.join(format!("shells-{m}-{n}.jsonl")),
                );
            }
        }
        let file = files.for_launch().unwrap();
        assert!(
            !std::fs::symlink_metadata(&file)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
