//! Fuzzes the journal replay (SPEC §5): any bytes in journal.jsonl must
//! replay without a panic — torn or garbled lines are skipped and counted,
//! never fatal — and the journal must stay appendable afterwards.
#![no_main]

use gpusched::journal::{Event, Journal};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("journal.jsonl");
    std::fs::write(&path, data).expect("write");
    let (mut journal, replay) = Journal::open(&path).expect("replay never fails on content");
    let lines = data.split(|&b| b == b'\n').count();
    assert!(replay.bad_lines.len() <= lines);
    assert!(replay.events + replay.bad_lines.len() <= lines);
    // Appending after any replay works and is read back.
    let no = journal.next_no();
    journal
        .append(
            "fuzzfuzzfuzz#0",
            Event::Seen {
                no,
                command: "true".into(),
            },
        )
        .expect("append");
    drop(journal);
    let (again, replay2) = Journal::open(&path).expect("second replay");
    assert!(again.state("fuzzfuzzfuzz#0").is_some());
    // The appended event starts on a line of its own: nothing else changes.
    assert_eq!(replay2.events, replay.events + 1);
    assert_eq!(replay2.bad_lines.len(), replay.bad_lines.len());
});
