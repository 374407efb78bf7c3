//! Job identity (docs/BEHAVIOUR.md "Identity"): the normal form of a
//! command, the 48-bit SHA-256 prefix it is known by, and the occurrence
//! counts that make a key `hash#count`.

use super::JobSpec;
use compact_str::CompactString;
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};

/// The command as its identity sees it (docs/BEHAVIOUR.md "Jobs file"): a trailing shell comment
/// (a `#` that begins a word outside quotes, to the end of the line) is
/// removed, runs of whitespace outside quotes become one space, and the
/// result is trimmed. Quotes and backslash escapes are kept as written.
pub fn normalise_command(command: &str) -> String {
    normalised(command).into_owned()
}

/// [`normalise_command`], borrowing `command` when it is already in
/// normal form (most are: no quote, escape, comment or run of spaces),
/// so a million-line file costs no copy per line.
pub(super) fn normalised(command: &str) -> std::borrow::Cow<'_, str> {
    let trimmed = command.trim();
    let plain = !trimmed.bytes().any(|b| {
        matches!(
            b,
            b'\'' | b'"' | b'\\' | b'#' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c
        ) || !b.is_ascii()
    }) && !trimmed.contains("  ");
    if plain {
        return std::borrow::Cow::Borrowed(trimmed);
    }
    std::borrow::Cow::Owned(normalise_slow(command))
}

/// [`normalise_command`] character by character.
fn normalise_slow(command: &str) -> String {
    let mut out = String::with_capacity(command.len());
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut at_word_start = true;
    for c in command.chars() {
        if escaped {
            out.push(c);
            escaped = false;
            at_word_start = false;
            continue;
        }
        match quote {
            Some(q) => {
                out.push(c);
                if c == q {
                    quote = None;
                } else if c == '\\' && q == '"' {
                    escaped = true;
                }
            }
            None if c.is_whitespace() => {
                if !at_word_start {
                    out.push(' ');
                }
                at_word_start = true;
            }
            None if c == '#' && at_word_start => break,
            None => {
                out.push(c);
                at_word_start = false;
                match c {
                    '\'' | '"' => quote = Some(c),
                    '\\' => escaped = true,
                    _ => {}
                }
            }
        }
    }
    out.trim_end().to_string()
}

/// The per-command part of the identity key: the first 12 hex digits of
/// SHA-256 of the normalised command ([`normalise_command`]).
pub fn command_hash(command: &str) -> String {
    format!("{:012x}", hash48(&normalised(command)))
}

/// The per-command part of a key under the older rule: SHA-256 of the
/// trimmed text only.
pub fn legacy_command_hash(command: &str) -> String {
    format!("{:012x}", hash48(command.trim()))
}

/// The first 48 bits of SHA-256 of `text`: the number a key's 12 hex
/// digits spell (occurrences are counted by it, without a string each).
pub(super) fn hash48(text: &str) -> u64 {
    let digest = Sha256::digest(text.as_bytes());
    digest[..6]
        .iter()
        .fold(0, |acc, byte| (acc << 8) | u64::from(*byte))
}

/// The hash part of a key (its first 12 hex digits) as a number.
pub(super) fn key_hash48(key: &str) -> Option<u64> {
    u64::from_str_radix(key.get(..12)?, 16).ok()
}

/// A stretch's lines as (hash, index in the stretch) pairs, sorted: the
/// part of [`count_repeats`] each parse thread does for its own lines.
pub(super) fn sorted_hashes(hashes: &[LineHashes]) -> Vec<(u64, u32)> {
    let mut order: Vec<(u64, u32)> = hashes
        .iter()
        .enumerate()
        .map(|(i, h)| (h.hash, i as u32))
        .collect();
    order.sort_unstable();
    order
}

/// `sorted` ([`sorted_hashes`]) without the lines at `removed` (indices,
/// ascending), the later lines' indices moved down past them: still
/// sorted, as the move keeps their order.
pub(super) fn without(sorted: Vec<(u64, u32)>, removed: &[u32]) -> Vec<(u64, u32)> {
    sorted
        .into_iter()
        .filter(|(_, i)| removed.binary_search(i).is_err())
        .map(|(hash, i)| (hash, i - removed.partition_point(|&r| r < i) as u32))
        .collect()
}

/// Each line was keyed as its command's first occurrence: gives the
/// later occurrences of a command their counts (docs/BEHAVIOUR.md
/// "Identity"). By sorting (hash, line) pairs, not by a map: a sweep's
/// million different commands cost one sort in sequential memory instead
/// of a million scattered look-ups.
///
/// `runs` are the stretches' [`sorted_hashes`], each with the index of
/// its first line in `jobs`, in line order: merged here (the stable sort
/// merges sorted runs in one pass each), so the sorting itself was done
/// in parallel.
pub(super) fn count_repeats(jobs: &mut [JobSpec], runs: Vec<(usize, Vec<(u64, u32)>)>) {
    let mut order: Vec<(u64, u32)> = Vec::with_capacity(jobs.len());
    for (first, run) in runs {
        order.extend(run.into_iter().map(|(hash, i)| (hash, i + first as u32)));
    }
    // Equal hashes keep the runs' order, which is line order.
    order.sort_by_key(|&(hash, _)| hash);
    for run in order
        .chunk_by(|a, b| a.0 == b.0)
        .filter(|run| run.len() > 1)
    {
        for (count, &(hash, index)) in run.iter().enumerate().skip(1) {
            jobs[index as usize].key = key_text(hash, count as u32);
        }
    }
}

/// A job key: the 48-bit command hash as 12 hex digits, `#`, then the
/// occurrence count (docs/BEHAVIOUR.md "Identity").
pub(super) fn key_text(hash: u64, count: u32) -> CompactString {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // Written into a buffer of its own and made a string once: at most
    // 12 + 1 + 10 bytes, kept inline by `CompactString`.
    let mut key = [0u8; 23];
    for (i, digit) in key[..12].iter_mut().enumerate() {
        *digit = HEX[((hash >> ((11 - i) * 4)) & 0xf) as usize];
    }
    key[12] = b'#';
    let mut len = 13;
    let mut decimal = [0u8; 10];
    let (mut n, mut digits) = (count, 0);
    loop {
        decimal[digits] = b'0' + (n % 10) as u8;
        digits += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &digit in decimal[..digits].iter().rev() {
        key[len] = digit;
        len += 1;
    }
    CompactString::from_utf8(&key[..len]).expect("hex digits, '#' and decimal digits are ASCII")
}

/// The hashes a line's keys are made of: of its normalised command, and
/// of its command as trimmed (the older identity rule), equal for most
/// lines. Pure and per line, so a long file hashes its lines in parallel.
#[derive(Clone, Copy)]
pub(super) struct LineHashes {
    pub(super) hash: u64,
    pub(super) legacy: u64,
}

impl LineHashes {
    pub(super) fn of(command: &str) -> LineHashes {
        let normal = normalised(command);
        let hash = hash48(&normal);
        // Most commands are already in normal form: one SHA-256, not two.
        let legacy = if normal == command.trim() {
            hash
        } else {
            hash48(command.trim())
        };
        LineHashes { hash, legacy }
    }
}

/// Occurrence counts by command hash, under both identity rules: for
/// appended lines, and for a whole file where some line's two hashes
/// differ (otherwise [`count_repeats`] counts them).
#[derive(Default)]
pub(super) struct Occurrences {
    pub(super) counts: FxHashMap<u64, u32>,
    pub(super) legacy: FxHashMap<u64, u32>,
}

impl Occurrences {
    /// Counts for about `lines` lines.
    pub(super) fn with_capacity(lines: usize) -> Occurrences {
        let mut occurrences = Occurrences::default();
        occurrences.counts.reserve(lines);
        occurrences.legacy.reserve(lines);
        occurrences
    }

    /// The keys of the next line with `hashes` (docs/BEHAVIOUR.md
    /// "Identity"): its key, and its key under the older rule when that
    /// differs.
    pub(super) fn keys(&mut self, hashes: LineHashes) -> (CompactString, Option<String>) {
        let bump = |counts: &mut FxHashMap<u64, u32>, hash| {
            let count = counts.entry(hash).or_insert(0);
            *count += 1;
            *count - 1
        };
        let count = bump(&mut self.counts, hashes.hash);
        let legacy_count = bump(&mut self.legacy, hashes.legacy);
        let key = key_text(hashes.hash, count);
        let legacy_key = ((hashes.legacy, legacy_count) != (hashes.hash, count))
            .then(|| key_text(hashes.legacy, legacy_count).into());
        (key, legacy_key)
    }

    /// Counts the existing lines of the hashes already in the counts by
    /// their keys: `HASH#n` for n = 0, 1, … while `has_key` knows it.
    /// Right only when no existing line's key differs under the older
    /// rule (then both rules count the same keys).
    pub(super) fn count_by_keys(&mut self, has_key: &dyn Fn(&str) -> bool) {
        let present = |hash: u64| (0..).take_while(|&n| has_key(&key_text(hash, n))).count() as u32;
        for (hash, count) in self.counts.iter_mut() {
            *count = present(*hash);
        }
        for (hash, count) in self.legacy.iter_mut() {
            *count = present(*hash);
        }
    }

    /// Counts a line already in the file, whose keys are `key` and
    /// `legacy` (its key under the older rule, when it differs), for the
    /// hashes already in the counts only (the appended lines' hashes: a
    /// key is 12 hex digits of its hash, `#`, then the count).
    pub(super) fn count_existing(&mut self, key: &str, legacy: Option<&str>) {
        if let Some(count) = key_hash48(key).and_then(|h| self.counts.get_mut(&h)) {
            *count += 1;
        }
        if let Some(count) = key_hash48(legacy.unwrap_or(key)).and_then(|h| self.legacy.get_mut(&h))
        {
            *count += 1;
        }
    }
}
