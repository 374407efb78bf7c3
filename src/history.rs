//! The `--history FILE` of learned declarations (docs/BEHAVIOUR.md "History"): one
//! JSON line per ok run with a measured peak, which several log
//! directories (and schedulers) may share. Appends happen under an
//! exclusive `flock` on `FILE.lock`; torn or garbled lines are skipped; the
//! file is compacted to the last [`KEEP_PER_FAMILY`] runs of each family
//! once it grows past [`COMPACT_BYTES`], so it stays small forever.

#![expect(
    clippy::disallowed_methods,
    reason = "the scheduler's own history file under the caller's own data directory"
)]

use crate::error::Error;
use nix::fcntl::Flock;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Runs kept per family when the file is compacted.
pub const KEEP_PER_FAMILY: usize = 20;

/// Size (bytes) past which an append compacts the file.
pub const COMPACT_BYTES: u64 = 256 * 1024;

/// One ok run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Its family ([`crate::policy::learned::family_of`]).
    pub family: String,
    /// Its peak VRAM (MiB, the highest on any of its GPUs).
    pub peak_mib: u64,
    /// Who ran it: the log directory and the job's key, so a run read both
    /// from a journal and from here counts once.
    pub run: String,
    /// When it ended (Unix seconds).
    pub ts: f64,
}

/// A history file being followed: what was read so far.
#[derive(Debug)]
pub struct History {
    path: PathBuf,
    /// Bytes of the file already read, and the inode they belong to.
    read_to: u64,
    inode: u64,
}

impl History {
    /// Opens (creating) the history file.
    ///
    /// Errors: [`Error::Io`] when it cannot be created or opened.
    pub fn open(path: &Path) -> Result<History, Error> {
        File::options()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| Error::io(format!("cannot open history file {}", path.display()), e))?;
        Ok(History {
            path: path.to_path_buf(),
            read_to: 0,
            inode: 0,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The entries added since the last call (all of them the first time,
    /// or after another scheduler compacted the file), with the number of
    /// lines skipped as torn or garbled. A line still being written (no
    /// newline yet) is left for the next call.
    pub fn read_new(&mut self) -> (Vec<Entry>, usize) {
        #[expect(
            clippy::disallowed_methods,
            reason = "the scheduler's own history file, opened and locked by it at start (History::open)"
        )]
        let Ok(mut file) = File::open(&self.path) else {
            return (Vec::new(), 0);
        };
        let Ok(meta) = file.metadata() else {
            return (Vec::new(), 0);
        };
        if meta.ino() != self.inode || meta.len() < self.read_to {
            self.inode = meta.ino();
            self.read_to = 0;
        }
        if meta.len() == self.read_to {
            return (Vec::new(), 0);
        }
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(self.read_to)).is_err()
            || file.read_to_end(&mut bytes).is_err()
        {
            return (Vec::new(), 0);
        }
        let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        self.read_to += complete as u64;
        parse(&bytes[..complete])
    }

    /// Appends one entry under the file's lock, compacting the file first
    /// when it has grown past [`COMPACT_BYTES`].
    ///
    /// Errors: the lock file or the history cannot be written.
    pub fn append(&mut self, entry: &Entry) -> std::io::Result<()> {
        let _lock = self.lock()?;
        let mut line = serde_json::to_vec(entry).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let len = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        if len > COMPACT_BYTES {
            self.compact()?;
        }
        let mut file = File::options().append(true).open(&self.path)?;
        file.write_all(&line)?;
        file.sync_data()
    }

    /// Rewrites the file with the last [`KEEP_PER_FAMILY`] entries of each
    /// family, in their order (called under the lock).
    fn compact(&mut self) -> std::io::Result<()> {
        #[expect(
            clippy::disallowed_methods,
            reason = "the scheduler's own history file, under its lock"
        )]
        let (entries, _) = parse(&std::fs::read(&self.path)?);
        let mut left: HashMap<&str, usize> = HashMap::new();
        let mut keep = vec![false; entries.len()];
        for (i, entry) in entries.iter().enumerate().rev() {
            let n = left.entry(entry.family.as_str()).or_insert(0);
            if *n < KEEP_PER_FAMILY {
                *n += 1;
                keep[i] = true;
            }
        }
        let mut out = Vec::new();
        for (entry, _) in entries.iter().zip(&keep).filter(|(_, k)| **k) {
            serde_json::to_writer(&mut out, entry).map_err(std::io::Error::other)?;
            out.push(b'\n');
        }
        crate::files::write_atomic_with(
            &self.path,
            &out,
            &crate::files::AtomicOptions {
                mode: std::fs::metadata(&self.path).ok().map(|m| m.permissions()),
                sync: true,
            },
        )
    }

    fn lock(&self) -> std::io::Result<Flock<File>> {
        let mut name = self.path.file_name().unwrap_or_default().to_os_string();
        name.push(".lock");
        let path = self.path.with_file_name(name);
        let file = crate::lockfile::open_shared(&path)?;
        crate::lockfile::lock_exclusive(file, &path).map_err(std::io::Error::other)
    }
}

/// The entries of complete lines, and how many lines were skipped.
fn parse(bytes: &[u8]) -> (Vec<Entry>, usize) {
    let parsed = crate::jsonl::parse(bytes);
    (parsed.records, parsed.skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(family: &str, peak: u64, run: &str) -> Entry {
        Entry {
            family: family.into(),
            peak_mib: peak,
            run: run.into(),
            ts: 1.0,
        }
    }

    #[test]
    fn two_writers_share_a_file_and_readers_see_only_new_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        let mut a = History::open(&path).unwrap();
        let mut b = History::open(&path).unwrap();
        a.append(&entry("f", 6000, "a:1")).unwrap();
        b.append(&entry("f", 6100, "b:1")).unwrap();
        let (seen, bad) = a.read_new();
        assert_eq!(seen.len(), 2);
        assert_eq!(bad, 0);
        assert!(a.read_new().0.is_empty());
        // A torn line (a writer killed mid-line) is skipped once complete
        // lines follow it; an unfinished last line waits.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"family\":\"f\",\"pea\n{\"family\":\"f\"")
            .unwrap();
        let (seen, bad) = a.read_new();
        assert_eq!((seen.len(), bad), (0, 1));
        b.append(&entry("g", 1, "b:2")).unwrap();
        let (seen, bad) = a.read_new();
        // The unfinished line got the next entry glued on: one bad line.
        assert_eq!((seen.len(), bad), (0, 1));
        b.append(&entry("g", 2, "b:3")).unwrap();
        assert_eq!(a.read_new().0, vec![entry("g", 2, "b:3")]);
    }

    #[test]
    fn compaction_keeps_the_last_runs_of_each_family() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        let mut h = History::open(&path).unwrap();
        let mut reader = History::open(&path).unwrap();
        let mut n = 0;
        while std::fs::metadata(&path).unwrap().len() <= COMPACT_BYTES {
            h.append(&entry("big", n, &format!("a:{n}"))).unwrap();
            n += 1;
        }
        assert_eq!(reader.read_new().0.len() as u64, n);
        h.append(&entry("small", 1, "a:s")).unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len < 10_000, "compacted to {len} bytes");
        // A reader notices the rewrite and reads the file again.
        let (all, bad) = reader.read_new();
        assert_eq!(bad, 0);
        let big: Vec<u64> = all
            .iter()
            .filter(|e| e.family == "big")
            .map(|e| e.peak_mib)
            .collect();
        assert_eq!(big.len(), KEEP_PER_FAMILY);
        assert_eq!(*big.last().unwrap(), n - 1);
        assert!(all.iter().any(|e| e.family == "small"));
    }
}
