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

/// Parses the lines of `reader` as `T`s as they stream in: memory holds
/// one line at a time, and a line over `max_line` bytes (a sparse file's
/// run of zeros, garbage) is skipped and counted without being kept.
///
/// Errors: none; a read error ends the text there.
pub fn parse_reader<T: DeserializeOwned>(
    mut reader: impl std::io::BufRead,
    max_line: usize,
) -> Parsed<T> {
    let mut parsed = Parsed::default();
    let mut line: Vec<u8> = Vec::new();
    let mut overlong = false;
    loop {
        let chunk = match reader.fill_buf() {
            Ok([]) | Err(_) => break,
            Ok(chunk) => chunk,
        };
        let (part, end) = match memchr::memchr(b'\n', chunk) {
            Some(at) => (&chunk[..at], Some(at + 1)),
            None => (chunk, None),
        };
        if !overlong {
            if line.len() + part.len() > max_line {
                overlong = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(part);
            }
        }
        let used = end.unwrap_or(chunk.len());
        reader.consume(used);
        if end.is_some() {
            if overlong {
                parsed.skipped += 1;
            } else {
                parse_into(&line, &mut parsed);
            }
            line.clear();
            overlong = false;
        }
    }
    if overlong {
        parsed.skipped += 1;
    } else {
        parse_into(&line, &mut parsed);
    }
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
    fn a_stream_is_parsed_a_line_at_a_time_and_overlong_lines_are_skipped() {
        let text = format!("1\n{}\n2\nx\n3", "7".repeat(100));
        // A reader that hands out 8 bytes at a time.
        let reader = std::io::BufReader::with_capacity(8, text.as_bytes());
        let parsed: Parsed<u64> = parse_reader(reader, 16);
        assert_eq!(parsed.records, [1, 2, 3]);
        assert_eq!(parsed.skipped, 2);
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
