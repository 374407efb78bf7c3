//! The checks the fuzz targets run (`checks.rs`), on generated input in
//! every test run: jobs files built from the grammar's own pieces and
//! journals built from well-formed, torn and garbled lines. Coverage-guided
//! fuzzing of the same checks is `scripts/fuzz.sh`.

use crate::checks;
use proptest::prelude::*;

/// Pieces of jobs-file lines: attributes with good and bad values,
/// brackets, quotes, escapes, comments, blank and odd whitespace.
fn jobs_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("[".to_string()),
        Just("]".to_string()),
        Just("\n".to_string()),
        Just("\r\n".to_string()),
        Just(" ".to_string()),
        Just("#".to_string()),
        Just("'".to_string()),
        Just("\"".to_string()),
        Just("\\".to_string()),
        Just("vram=".to_string()),
        Just("gpus=".to_string()),
        Just("timeout=".to_string()),
        Just("after=".to_string()),
        Just("group=".to_string()),
        Just("on=".to_string()),
        Just("vram=auto".to_string()),
        "[0-9]{1,12}[GMKgmk]?".prop_map(String::from),
        "[a-z_]{1,8}".prop_map(String::from),
        "[ -~]{1,6}".prop_map(String::from),
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(piece, 0..60).prop_map(|pieces| pieces.concat())
}

/// Journal lines: real events, torn ones, garbage and blank lines.
fn journal_bytes() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        (0u32..50).prop_map(|no| format!(
            r#"{{"ts":1.0,"key":"k{no}#0","event":"seen","no":{no},"command":"true"}}"#
        )),
        (0u32..50).prop_map(|no| format!(
            r#"{{"ts":2.0,"key":"k{no}#0","event":"started","pgid":{},"gpus":[0],"attempt":1}}"#,
            no + 100
        )),
        (0u32..50).prop_map(|no| format!(
            r#"{{"ts":3.0,"key":"k{no}#0","event":"done","status":"ok","returncode":0}}"#
        )),
        "[ -~]{0,40}".prop_map(String::from),
        Just(String::new()),
    ];
    (
        prop::collection::vec(line, 0..20),
        0usize..40,
        any::<bool>(),
    )
        .prop_map(|(lines, cut, newline)| {
            let mut text = lines.join("\n");
            if newline {
                text.push('\n');
            }
            // Tear the last line somewhere, as a crash mid-write would.
            let keep = text.len().saturating_sub(cut % (text.len() + 1));
            let mut bytes = text.into_bytes();
            bytes.truncate(keep);
            bytes
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn any_jobs_file_parses_to_jobs_or_errors_naming_a_line(text in jobs_text()) {
        checks::jobs_file(text.as_bytes());
    }

    #[test]
    fn any_bytes_decode_or_fail_naming_a_line(data in prop::collection::vec(any::<u8>(), 0..300)) {
        checks::jobs_file(&data);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn any_journal_replays_and_stays_appendable(data in journal_bytes()) {
        checks::journal_replay(&data);
    }
}
