//! The jobs file's digest, taken as the file streams past (docs/BEHAVIOUR.md "The live queue" edits):
//! the hash of the whole text and of the part the queue already holds, so
//! that telling an unchanged file or an append from an edit reads a
//! million-line file in 1 MiB blocks and keeps only the appended lines,
//! never the whole 40 MB text.

use std::io::Read;
use std::path::Path;
use xxhash_rust::xxh3::{Xxh3, xxh3_64};

/// The jobs file's hash, to tell a real change from a touch and an append
/// from an edit: XXH3's 64 bits of a byte stream (the `xxhash-rust`
/// crate), which are the same however the stream is split into writes, so
/// a prefix's hash can be taken on the way (a 100 MB file hashes in tens
/// of milliseconds).
#[derive(Clone, Default)]
pub struct TextHash(Xxh3);

impl TextHash {
    /// Feeds `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The hash of everything fed so far.
    pub fn finish(&self) -> u64 {
        self.0.digest()
    }

    /// The hash of `text` in one go.
    pub fn of(text: &str) -> u64 {
        xxh3_64(text.as_bytes())
    }
}

/// What one streamed read of the file found.
#[derive(Debug, PartialEq)]
pub struct Digest {
    /// The file's length in bytes.
    pub len: usize,
    /// The hash of the whole file.
    pub hash: u64,
    /// Whether the file is empty or its last byte is not a newline.
    pub unfinished: bool,
    /// When the file is longer than `known` bytes: the hash of its first
    /// `known` bytes, whether they end with a newline, how many newlines
    /// they hold, and the bytes after them.
    pub after_known: Option<AfterKnown>,
}

/// The part of a [`Digest`] about the bytes past the known prefix.
#[derive(Debug, PartialEq)]
pub struct AfterKnown {
    /// Hash of the first `known` bytes.
    pub prefix_hash: u64,
    /// Whether the prefix ends with a newline.
    pub prefix_ends_line: bool,
    /// Newlines in the prefix (its lines).
    pub prefix_lines: usize,
    /// The bytes after the prefix.
    pub tail: Vec<u8>,
}

/// Reads the file at `path` in 1 MiB blocks, hashing it, and keeps only
/// what lies past its first `known` bytes.
///
/// Errors: the file cannot be opened or read.
pub fn digest(path: &Path, known: usize) -> std::io::Result<Digest> {
    #[expect(
        clippy::disallowed_methods,
        reason = "the jobs file its user named on the command line, read by the scheduler running as that user"
    )]
    let mut file = std::fs::File::open(path)?;
    let mut block = vec![0u8; 1 << 20];
    let mut hash = TextHash::default();
    let (mut pos, mut last) = (0usize, None);
    let mut prefix: Option<(u64, bool, usize)> = None;
    let (mut lines, mut tail) = (0usize, Vec::new());
    loop {
        let n = match file.read(&mut block) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let bytes = &block[..n];
        // The part of this block inside the known prefix.
        let inside = known.saturating_sub(pos).min(n);
        hash.write(&bytes[..inside]);
        lines += memchr::memchr_iter(b'\n', &bytes[..inside]).count();
        if prefix.is_none() && pos + inside == known && known > 0 {
            prefix = Some((
                hash.finish(),
                bytes[..inside].last().or(last.as_ref()) == Some(&b'\n'),
                lines,
            ));
        }
        hash.write(&bytes[inside..]);
        if prefix.is_some() {
            tail.extend_from_slice(&bytes[inside..]);
        }
        last = bytes.last().copied();
        pos += n;
    }
    let after_known = match prefix {
        Some((prefix_hash, prefix_ends_line, prefix_lines)) if pos > known => Some(AfterKnown {
            prefix_hash,
            prefix_ends_line,
            prefix_lines,
            tail,
        }),
        _ => None,
    };
    Ok(Digest {
        len: pos,
        hash: hash.finish(),
        unfinished: last != Some(b'\n'),
        after_known,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_does_not_depend_on_how_the_text_is_split() {
        let text = "[vram=1G] python train.py --seed 1\nsleep 1\n# a comment\n";
        let whole = TextHash::of(text);
        for split in 0..text.len() {
            let mut hash = TextHash::default();
            hash.write(&text.as_bytes()[..split]);
            hash.write(&text.as_bytes()[split..]);
            assert_eq!(hash.finish(), whole, "split at {split}");
        }
        assert_ne!(
            TextHash::of("a\n"),
            TextHash::of("a\n\0"),
            "the length counts"
        );
        assert_ne!(TextHash::of("ab"), TextHash::of("ba"));
    }

    #[test]
    fn a_digest_gives_the_prefix_and_keeps_only_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.txt");
        // Longer than a block, so the prefix ends inside the second one.
        let old: String = (0..40_000).map(|i| format!("echo line {i}\n")).collect();
        let new = format!("{old}echo appended\n");
        std::fs::write(&path, &new).unwrap();
        let read = digest(&path, old.len()).unwrap();
        assert_eq!(read.len, new.len());
        assert_eq!(read.hash, TextHash::of(&new));
        assert!(!read.unfinished);
        let after = read.after_known.unwrap();
        assert_eq!(after.prefix_hash, TextHash::of(&old));
        assert!(after.prefix_ends_line);
        assert_eq!(after.prefix_lines, 40_000);
        assert_eq!(after.tail, b"echo appended\n");
        // Nothing past the known part, or nothing known: no tail.
        assert_eq!(digest_of(&path, new.len()), None);
        assert_eq!(digest_of(&path, 0), None);
        std::fs::write(&path, "echo a\nunfinished").unwrap();
        let cut = digest(&path, 3).unwrap();
        assert!(cut.unfinished);
        let after = cut.after_known.unwrap();
        assert!(!after.prefix_ends_line);
        assert_eq!(after.tail, b"o a\nunfinished");
    }

    fn digest_of(path: &Path, known: usize) -> Option<AfterKnown> {
        digest(path, known).unwrap().after_known
    }
}
