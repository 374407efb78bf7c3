//! One reader for the JSON-lines files gpusched keeps beside the journal
//! (HOUSE: "one reader for JSON-lines files"): the `--history` file of ok
//! peaks, the usage record of the timeline, and the journal as the verbs
//! read it. A line is one JSON value; blank lines are skipped, and a torn
//! or garbled line (a writer killed mid-line, a hand edit) is skipped and
//! counted, never fatal. (The scheduler's own journal replay has a faster
//! reader of its own, `journal::read`.)

use serde::de::DeserializeOwned;

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

/// Parses every line of `bytes` as a `T`, adding to `parsed` (for several
/// files read in order as one JSON-lines text).
pub fn parse_into<T: DeserializeOwned>(bytes: &[u8], parsed: &mut Parsed<T>) {
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
    fn texts_parsed_into_one_keep_their_order() {
        let mut parsed: Parsed<u32> = Parsed::default();
        parse_into(b"1\n2\n", &mut parsed);
        parse_into(b"3\nx\n", &mut parsed);
        assert_eq!(parsed.records, [1, 2, 3]);
        assert_eq!(parsed.skipped, 1);
    }
}
