//! What must hold for any bytes given to the jobs-file parser and to the
//! journal replay (docs/BEHAVIOUR.md "Jobs file", "The live queue"): one
//! function each, run by the fuzz targets in `fuzz/` (coverage-guided,
//! `scripts/fuzz.sh`) and by `tests/it/never_panics.rs` on random bytes in
//! every test run.

use gpusched::journal::{Event, Journal};

/// Any bytes decode and parse into jobs or errors naming a line, never a
/// panic; every job's key is 12 hex digits, `#`, a count; normalising is
/// idempotent and identity does not depend on a trailing comment; the
/// strict parse agrees with the lenient one.
pub fn jobs_file(data: &[u8]) {
    let text = match gpusched::jobspec::decode(data.to_vec()) {
        Ok(text) => text,
        Err(e) => {
            assert!(e.line >= 1);
            return;
        }
    };
    let lines = text.lines().count();
    let (jobs, errors) = gpusched::jobspec::parse_jobs_lenient(&text);
    for error in &errors {
        assert!(error.line >= 1 && error.line <= lines.max(1));
    }
    for job in &jobs {
        let (hash, count) = job.key.split_once('#').expect("key has a #");
        assert_eq!(hash.len(), 12);
        assert!(hash.chars().all(|c| c.is_ascii_hexdigit()));
        count.parse::<u32>().expect("occurrence count");
        assert!(!job.command.is_empty());
        assert!(job.gpus >= 1);
        if let Some(vram) = job.vram_mib {
            assert!((1..=gpusched::jobspec::MAX_VRAM_MIB).contains(&vram));
        }
        if let Some(t) = job.timeout_s() {
            assert!(t > 0.0 && t <= gpusched::jobspec::MAX_TIMEOUT_S);
        }
        // Normalising is idempotent, and a trailing comment added after a
        // command with no quote or escape never changes its identity.
        let normal = gpusched::jobspec::normalise_command(&job.command);
        assert_eq!(gpusched::jobspec::normalise_command(&normal), normal);
        if !normal.contains(['\'', '"', '\\']) {
            assert_eq!(
                gpusched::jobspec::command_hash(&format!("{normal}  # note")),
                hash
            );
        }
    }
    // The strict parse agrees with the lenient one.
    match gpusched::jobspec::parse_jobs(&text) {
        Ok(strict) => assert!(errors.is_empty() && strict.len() == jobs.len()),
        Err(first) => assert_eq!(Some(&first), errors.first()),
    }
}

/// Any bytes in journal.jsonl replay without a panic — torn or garbled
/// lines are skipped and counted, never fatal — and the journal stays
/// appendable afterwards.
pub fn journal_replay(data: &[u8]) {
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
}
