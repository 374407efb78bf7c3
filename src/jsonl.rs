//! One reader for the JSON-lines files gpusched keeps beside the journal
//! (HOUSE: "one reader for JSON-lines files"): the `--history` file of ok
//! peaks, the usage record of the timeline, and the journal as the verbs
//! read it. A line is one JSON value; blank lines are skipped, and a torn
//! or garbled line (a writer killed mid-line, a hand edit) is skipped and
//! counted, never fatal. (The scheduler's own journal replay has a faster
//! reader of its own, `journal::read`.)

use serde::de::DeserializeOwned;
use std::path::Path;

/// What a JSON-lines text held.
#[derive(Debug)]
pub struct Parsed<T> {
    /// The values of the good lines, in order.
    pub records: Vec<T>,
    /// Lines skipped as torn or garbled (blank lines not counted).
    pub skipped: usize,
}

impl<T> Default for Parsed<T> {
    fn default() -> Self {
        Parsed {
            records: Vec::new(),
            skipped: 0,
        }
    }
}

/// Parses every line of `bytes` as a `T`.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Parsed<T> {
    let mut parsed = Parsed::default();
    parse_into(bytes, &mut parsed);
    parsed
}

/// Reads the files at `paths` in order as one JSON-lines text; a missing
/// or unreadable file adds nothing.
pub fn read_all<T: DeserializeOwned>(paths: &[&Path]) -> Parsed<T> {
    let mut parsed = Parsed::default();
    for path in paths {
        if let Ok(bytes) = std::fs::read(path) {
            parse_into(&bytes, &mut parsed);
        }
    }
    parsed
}

fn parse_into<T: DeserializeOwned>(bytes: &[u8], parsed: &mut Parsed<T>) {
    for line in bytes.split(|&b| b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<T>(line) {
            Ok(record) => parsed.records.push(record),
            Err(_) => parsed.skipped += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_lines_are_read_and_torn_ones_counted() {
        let parsed: Parsed<serde_json::Value> =
            parse(b"{\"a\":1}\n\n  \n{\"a\":\nnot json\n{\"a\":2}\n{\"a\":3");
        assert_eq!(parsed.records.len(), 2, "{parsed:?}");
        assert_eq!(parsed.records[1]["a"], 2);
        // `{"a":`, `not json` and the torn last line.
        assert_eq!(parsed.skipped, 3);
    }

    #[test]
    fn files_are_read_in_order_and_a_missing_one_adds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, "1\n2\n").unwrap();
        std::fs::write(&b, "3\nx\n").unwrap();
        let missing = dir.path().join("none");
        let parsed: Parsed<u32> = read_all(&[&a, &missing, &b]);
        assert_eq!(parsed.records, [1, 2, 3]);
        assert_eq!(parsed.skipped, 1);
    }
}
