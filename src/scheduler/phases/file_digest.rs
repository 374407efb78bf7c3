//! The jobs file's digest, taken as the file streams past (docs/BEHAVIOUR.md "The live queue" edits):
//! the hash of the whole text and of the part the queue already holds, so
//! that telling an unchanged file or an append from an edit reads a
//! million-line file in 1 MiB blocks and keeps only the appended lines,
//! never the whole 40 MB text.

use std::io::Read;
use std::path::Path;

/// The jobs file's hash, to tell a real change from a touch and an append
/// from an edit: 64 bits of a byte stream that give the same value however
/// the stream is split into writes, so a prefix's hash can be taken on the
/// way (FxHash's mixing over 8-byte words, then the length; a 100 MB file
/// hashes in milliseconds).
#[derive(Clone, Default)]
pub struct TextHash {
    state: u64,
    word: [u8; 8],
    in_word: usize,
    len: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl TextHash {
    fn mix(&mut self, word: u64) {
        self.state = (self.state.rotate_left(5) ^ word).wrapping_mul(SEED);
    }

    /// Feeds `bytes`.
    pub fn write(&mut self, mut bytes: &[u8]) {
        self.len += bytes.len() as u64;
        if self.in_word > 0 {
            let take = (8 - self.in_word).min(bytes.len());
            self.word[self.in_word..self.in_word + take].copy_from_slice(&bytes[..take]);
            self.in_word += take;
            bytes = &bytes[take..];
            if self.in_word < 8 {
                return;
            }
            self.mix(u64::from_le_bytes(self.word));
            self.in_word = 0;
        }
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.mix(u64::from_le_bytes(word.try_into().expect("8 bytes")));
        }
        let rest = words.remainder();
        self.word[..rest.len()].copy_from_slice(rest);
        self.in_word = rest.len();
    }

    /// The hash of everything fed so far.
    pub fn finish(&self) -> u64 {
        let mut last = self.clone();
        let mut word = [0u8; 8];
        word[..self.in_word].copy_from_slice(&self.word[..self.in_word]);
        last.mix(u64::from_le_bytes(word));
        last.mix(self.len);
        last.state
    }

    /// The hash of `text` in one go.
    pub fn of(text: &str) -> u64 {
        let mut hash = TextHash::default();
        hash.write(text.as_bytes());
        hash.finish()
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
