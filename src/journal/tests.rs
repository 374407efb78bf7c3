//! Unit tests of the journal module.

use super::*;

/// A `seen` event for display number `no`.
fn seen(no: u32, command: &str) -> Event {
    Event::Seen {
        no,
        command: command.into(),
    }
}

fn started(pgid: u32) -> Event {
    Event::Started {
        pgid,
        gpus: vec![0, 1],
        attempt: 1,
        vram_mib: Some(8000),
        start_ticks: Some(42),
        boot_id: Some("b".into()),
        supervisor: Some(ProcessId {
            pid: 7,
            start_ticks: 41,
        }),
        log_offset: Some(100),
        slurm_job_id: None,
        allocation: None,
        cgroup: Vec::new(),
        request: None,
    }
}

#[test]
fn a_slurm_job_id_allocation_request_and_state_survive_a_replay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let (mut journal, _) = Journal::open(&path).unwrap();
    journal.append("k", seen(1, "true")).unwrap();
    let asked = crate::allocation::Request {
        exclusive: true,
        ..crate::allocation::Request::declared(4096, 2)
    };
    journal
        .append(
            "k",
            Event::Started {
                pgid: 0,
                gpus: vec![],
                attempt: 1,
                vram_mib: Some(4096),
                start_ticks: None,
                boot_id: None,
                supervisor: None,
                log_offset: Some(0),
                slurm_job_id: Some(77),
                allocation: Some(1234),
                cgroup: Vec::new(),
                request: Some(asked),
            },
        )
        .unwrap();
    drop(journal);
    let (journal, _) = Journal::open(&path).unwrap();
    match &journal.state("k").unwrap().phase {
        Phase::Started(info) => {
            assert_eq!(info.slurm_job_id, Some(77));
            assert_eq!(info.request, asked, "the request survives a replay whole");
            assert_eq!(info.allocation, Some(1234));
        }
        other => panic!("not started: {other:?}"),
    }
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"slurm_job_id\":77"), "{text}");
    assert!(text.contains("\"allocation\":1234"), "{text}");
    assert!(
        text.contains(r#""request":{"vram_mib":4096,"gpus":2,"exclusive":true}"#),
        "{text}"
    );
}

/// A `started` record from before the request was journaled whole: its
/// request is its declaration on its GPUs, with `[exclusive]` as such a
/// record said it on its own (the replay's reader, the one that reads
/// older records; serde's reads what this process writes, which always
/// has its request).
#[test]
fn an_older_started_record_gives_its_request_from_its_own_fields() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let lines = [
        r#"{"ts":1.0,"key":"a","event":"seen","no":1,"command":"true"}"#,
        r#"{"ts":2.0,"key":"a","event":"started","pgid":9,"gpus":[0,3],"attempt":1,"vram_mib":2048,"exclusive":true}"#,
        r#"{"ts":1.0,"key":"b","event":"seen","no":2,"command":"true"}"#,
        r#"{"ts":2.0,"key":"b","event":"started","pgid":10,"gpus":[1],"attempt":1,"vram_mib":null}"#,
    ];
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let (journal, _) = Journal::open(&path).unwrap();
    let request = |key| match &journal.state(key).unwrap().phase {
        Phase::Started(info) => info.request,
        other => panic!("not started: {other:?}"),
    };
    let a = crate::allocation::Request {
        exclusive: true,
        ..crate::allocation::Request::declared(2048, 2)
    };
    assert_eq!(request("a"), a);
    assert_eq!(request("b"), crate::allocation::Request::undeclared(1));
    // serde's reader: no request in the record, its declaration rebuilt.
    let record: Record = serde_json::from_str(lines[1]).unwrap();
    let Event::Started {
        request,
        vram_mib,
        gpus,
        ..
    } = &record.event
    else {
        panic!("not started");
    };
    assert_eq!(*request, None);
    assert_eq!(
        started_request(*request, *vram_mib, gpus, false).vram_mib,
        Some(2048)
    );
}

#[test]
fn status_words_match_the_journal_and_round_trip() {
    for &status in <DoneStatus as strum::VariantArray>::VARIANTS {
        // The journal's word (serde) is the word everywhere else.
        assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        assert_eq!(DoneStatus::from_word(status.as_str()), Some(status));
    }
    assert_eq!(DoneStatus::from_word("running"), None);
    assert_eq!(
        crate::view::status::JOB_STATES[3..],
        crate::view::status::TERMINAL_STATES
    );
}

#[test]
fn events_round_trip_with_ts_key_and_event() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let (mut journal, _) = Journal::open(&path).unwrap();
    journal.append("k#0", seen(1, "echo")).unwrap();
    journal.append("k#0", started(77)).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["event"], "seen");
    assert_eq!(lines[0]["no"], 1);
    assert_eq!(lines[1]["event"], "started");
    assert_eq!(lines[1]["pgid"], 77);
    assert_eq!(lines[1]["gpus"], serde_json::json!([0, 1]));
    assert_eq!(lines[1]["start_ticks"], 42);
    assert_eq!(lines[1]["boot_id"], "b");
    assert_eq!(lines[1]["supervisor"]["pid"], 7);
    assert_eq!(lines[1]["log_offset"], 100);
    for line in &lines {
        assert!(line["ts"].as_f64().unwrap() > 1.0e9);
        assert_eq!(line["key"], "k#0");
    }
}

#[test]
fn fold_tracks_phase_attempts_and_oom_bumps() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    {
        let (mut journal, _) = Journal::open(&path).unwrap();
        journal.append("a#0", seen(1, "a")).unwrap();
        journal.append("b#0", seen(2, "b")).unwrap();
        journal.append("a#0", started(10)).unwrap();
        journal
            .append(
                "a#0",
                Event::Oom {
                    attempts: 1,
                    next_vram: Some(10000),
                    cause: None,
                },
            )
            .unwrap();
        journal.append("b#0", started(11)).unwrap();
        journal
            .append(
                "b#0",
                Event::Done {
                    status: DoneStatus::Failed,
                    returncode: Some(3),
                    peak_mib: BTreeMap::from([("0".into(), Some(100)), ("1".into(), None)]),
                    avg_util: None,
                    own_util: None,
                    duration_s: 1.5,
                    slurm_state: None,
                    notify: false,
                    no_gpu_memory: true,
                    declaration: None,
                    last_line: None,
                },
            )
            .unwrap();
    }
    let (journal, replay) = Journal::open(&path).unwrap();
    assert_eq!(replay.events, 6);
    assert!(replay.bad_lines.is_empty());
    let a = journal.state("a#0").unwrap();
    assert_eq!(a.no, 1);
    assert_eq!(a.attempts, 1);
    assert_eq!(a.retries_used, 1);
    assert_eq!(a.next_vram(), Some(10000));
    assert_eq!(a.phase, Phase::Waiting);
    let b = journal.state("b#0").unwrap();
    match &b.phase {
        Phase::Done(f) => {
            assert_eq!((f.status, f.returncode), (DoneStatus::Failed, Some(3)));
            assert_eq!(f.peak_mib, Some(100));
            assert_eq!(f.duration_s, 1.5);
            assert_eq!(f.vram_mib, Some(8000));
            assert_eq!(f.gpu_mask, 0b11);
            assert!(f.no_gpu_memory);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(journal.next_no(), 3);
}

#[test]
fn torn_and_garbled_lines_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    std::fs::write(
        &path,
        concat!(
            r#"{"ts":1.0,"key":"a#0","event":"seen","no":1,"command":"a"}"#,
            "\nnot json at all\n",
            r#"{"ts":2.0,"key":"a#0","event":"started","pgid":5,"gpus":[0],"attempt":1,"vram_mib":null}"#,
            "\n",
            r#"{"ts":3.0,"key":"a#0","event":"do"#
        ),
    )
    .unwrap();
    let (mut journal, replay) = Journal::open(&path).unwrap();
    assert_eq!(replay.events, 2);
    assert_eq!(replay.bad_lines, vec![2, 4]);
    // An old `started` event without start_ticks / boot_id still folds.
    match &journal.state("a#0").unwrap().phase {
        Phase::Started(info) => {
            assert_eq!(info.pgid, 5);
            assert_eq!(info.start_ticks, None);
        }
        other => panic!("unexpected {other:?}"),
    }
    // The next event starts on its own line after the torn one.
    journal.append("a#0", Event::Interrupted {}).unwrap();
    let (journal, replay) = Journal::open(&path).unwrap();
    assert_eq!(replay.events, 3);
    assert_eq!(journal.state("a#0").unwrap().phase, Phase::Waiting);
}

#[test]
fn retry_requeues_a_finished_job_with_fresh_oom_retries() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let (mut journal, _) = Journal::open(&path).unwrap();
    journal.append("a#0", seen(1, "a")).unwrap();
    // A retry of a job that has not finished changes nothing.
    journal.append("a#0", Event::Retry {}).unwrap();
    assert_eq!(journal.state("a#0").unwrap().phase, Phase::Waiting);
    journal.append("a#0", started(9)).unwrap();
    journal
        .append(
            "a#0",
            Event::Oom {
                attempts: 1,
                next_vram: Some(10000),
                cause: None,
            },
        )
        .unwrap();
    journal.append("a#0", started(10)).unwrap();
    journal.append("a#0", Event::Retry {}).unwrap();
    assert!(matches!(
        journal.state("a#0").unwrap().phase,
        Phase::Started(_)
    ));
    journal
        .append(
            "a#0",
            Event::Done {
                status: DoneStatus::FailedOom,
                returncode: Some(1),
                peak_mib: BTreeMap::new(),
                avg_util: None,
                own_util: None,
                duration_s: 1.0,
                slurm_state: Some("FAILED".into()),
                notify: true,
                no_gpu_memory: true,
                declaration: None,
                last_line: None,
            },
        )
        .unwrap();
    journal.append("a#0", Event::Retry {}).unwrap();
    // The same state after a replay.
    let (replayed, _) = Journal::open(&path).unwrap();
    for journal in [&journal, &replayed] {
        let state = journal.state("a#0").unwrap();
        assert_eq!(state.phase, Phase::Waiting);
        assert_eq!(state.attempts, 1, "attempts keep counting");
        assert_eq!(state.retries_used, 0, "OOM retries start over");
        assert_eq!(state.next_vram(), Some(10000), "the learned bump is kept");
    }
}

#[test]
fn long_journal_across_blocks_with_a_huge_line_and_a_torn_end() {
    use std::fmt::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let mut text = String::new();
    for i in 0..30_000u32 {
        let _ = writeln!(
            text,
            r#"{{"ts":1.0,"key":"{i:012x}#0","event":"seen","no":{},"command":"job {i}"}}"#,
            i + 1
        );
    }
    // A command longer than the 1 MiB read buffer.
    let huge = "x".repeat(3 << 20);
    let _ = writeln!(
        text,
        r#"{{"ts":1.0,"key":"huge#0","event":"seen","no":30001,"command":"{huge}"}}"#
    );
    let _ = writeln!(
        text,
        r#"{{"ts":2.0,"key":"huge#0","event":"started","pgid":1,"gpus":[0],"attempt":1,"vram_mib":null}}"#
    );
    text.push_str(r#"{"ts":3.0,"key":"000000000001#0","event":"do"#);
    std::fs::write(&path, &text).unwrap();
    let (journal, replay) = Journal::open(&path).unwrap();
    assert_eq!(replay.events, 30_002);
    assert_eq!(replay.bad_lines, vec![30_003]);
    assert_eq!(journal.next_no(), 30_002);
    assert_eq!(journal.state("00000000752f#0").unwrap().no, 30_000);
    // The orphan's command was read back from its `seen` line.
    match &journal.state("huge#0").unwrap().phase {
        Phase::Started(info) => assert_eq!(info.command.as_deref(), Some(huge.as_str())),
        other => panic!("unexpected {other:?}"),
    }
    assert!(std::fs::read_to_string(&path).unwrap().ends_with("\"do\n"));
}

#[test]
fn append_seen_writes_what_append_all_would() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let (mut journal, _) = Journal::open(&path).unwrap();
    journal
        .append_seen(12.5, &[("a#0", 1, "echo \"a\"\tb"), ("b#0", 2, "true")])
        .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let records: Vec<Record> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        records,
        [
            Record {
                ts: 12.5,
                key: "a#0".into(),
                event: seen(1, "echo \"a\"\tb"),
            },
            Record {
                ts: 12.5,
                key: "b#0".into(),
                event: seen(2, "true"),
            },
        ]
    );
    // Byte for byte what serde writes for these records.
    let serde_text: String = records
        .iter()
        .map(|r| serde_json::to_string(r).unwrap() + "\n")
        .collect();
    assert_eq!(text, serde_text);
    assert_eq!(journal.state("b#0").map(|s| s.no), Some(2));
    assert_eq!(journal.next_no(), 3);
    drop(journal);
    let (journal, replay) = Journal::open(&path).unwrap();
    assert_eq!(replay.events, 2);
    assert_eq!(journal.state("a#0").map(|s| s.seen_ts), Some(12.5));
}

/// A million-line queue holds a million of these: the size is a budget.
#[test]
fn a_key_state_stays_small() {
    assert!(
        std::mem::size_of::<KeyState>() <= 64,
        "{}",
        std::mem::size_of::<KeyState>()
    );
    let mut state = KeyState::new(1, 0.0);
    assert_eq!(state.first_started_ts(), None);
    state.set_next_vram(Some(u64::MAX));
    assert_eq!(
        state.next_vram(),
        Some(u64::from(u32::MAX - 1)),
        "saturates"
    );
    state.set_next_vram(Some(0));
    assert_eq!(
        state.next_vram(),
        Some(0),
        "zero is a declaration, not none"
    );
    state.set_next_vram(None);
    assert_eq!(state.next_vram(), None);
    // Time lost to preemption adds up in single precision: a tenth of a
    // second is kept at ten days.
    state.add_preempted_s(864_000.0);
    state.add_preempted_s(0.25);
    assert!(
        (state.preempted_s() - 864_000.25).abs() < 0.1,
        "{}",
        state.preempted_s()
    );
}

/// A journal edited by hand (or garbled) with the largest display number
/// opens without overflowing: the implausible `seen` is skipped, so later
/// jobs keep their numbers, and a key never seen still gets a number.
#[test]
fn an_implausible_display_number_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    std::fs::write(
        &path,
        "{\"ts\":1.0,\"key\":\"a#0\",\"event\":\"seen\",\"no\":4294967295,\"command\":\"x\"}\n\
         {\"ts\":2.0,\"key\":\"b#0\",\"event\":\"interrupted\"}\n",
    )
    .unwrap();
    let (journal, _) = Journal::open(&path).unwrap();
    assert!(journal.state("a#0").is_none());
    assert_eq!(journal.state("b#0").unwrap().no, 1);
    assert_eq!(journal.next_no(), 2);
}

#[test]
fn an_outcome_to_post_stays_owed_until_notified_also_after_a_replay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let done = |notify| Event::Done {
        status: DoneStatus::Failed,
        returncode: Some(1),
        peak_mib: BTreeMap::new(),
        avg_util: None,
        own_util: None,
        duration_s: 1.0,
        slurm_state: None,
        notify,
        no_gpu_memory: false,
        declaration: None,
        last_line: None,
    };
    let (mut journal, _) = Journal::open(&path).unwrap();
    for (key, no) in [("a#0", 1), ("b#0", 2)] {
        journal
            .append(
                key,
                Event::Seen {
                    no,
                    command: "x".into(),
                },
            )
            .unwrap();
    }
    journal.append("a#0", done(true)).unwrap();
    journal.append("b#0", done(false)).unwrap();
    assert!(journal.state("a#0").unwrap().notify_pending);
    assert!(!journal.state("b#0").unwrap().notify_pending);
    drop(journal);
    let (mut journal, _) = Journal::open(&path).unwrap();
    assert!(
        journal.state("a#0").unwrap().notify_pending,
        "owed after a replay"
    );
    journal.append("a#0", Event::Notified {}).unwrap();
    assert!(!journal.state("a#0").unwrap().notify_pending);
    drop(journal);
    let (journal, _) = Journal::open(&path).unwrap();
    assert!(
        !journal.state("a#0").unwrap().notify_pending,
        "told, also after a replay"
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.matches("\"notify\":true").count(), 1, "{text}");
}

#[test]
fn a_jobs_own_utilisation_survives_a_replay_and_old_lines_have_none() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let (mut journal, _) = Journal::open(&path).unwrap();
    journal.append("k", seen(1, "true")).unwrap();
    journal
        .append(
            "k",
            Event::Done {
                status: DoneStatus::Ok,
                returncode: Some(0),
                peak_mib: BTreeMap::new(),
                avg_util: Some(100.0),
                own_util: Some(61.5),
                duration_s: 3.0,
                slurm_state: None,
                notify: false,
                no_gpu_memory: false,
                declaration: None,
                last_line: None,
            },
        )
        .unwrap();
    drop(journal);
    // A line written before `own_util` existed.
    let old = r#"{"ts":3.0,"key":"o","event":"seen","no":2,"command":"true"}
{"ts":4.0,"key":"o","event":"done","status":"ok","returncode":0,"peak_mib":{},"avg_util":90.0,"duration_s":1.0}
"#;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, old.as_bytes()))
        .unwrap();
    let (journal, _) = Journal::open(&path).unwrap();
    let finished = |key| match &journal.state(key).unwrap().phase {
        Phase::Done(done) => (done.avg_util, done.own_util),
        other => panic!("not done: {other:?}"),
    };
    assert_eq!(finished("k"), (Some(100.0), Some(61.5)));
    assert_eq!(finished("o"), (Some(90.0), None));
}
