use super::*;

fn facts(status: &str) -> JobFacts {
    JobFacts {
        no: 3,
        key: "0123456789ab#0".into(),
        name: Some("train".into()),
        status: status.into(),
        exit_code: Some(4),
        command: "python train.py --lr '$(rm -rf ~)'".into(),
        log: Some("/l/job003_gpu0.log".into()),
        peak_mib: Some(6000),
        duration_s: 61.5,
        gpus: vec![0, 2],
        attempt: 2,
        log_tail: None,
    }
}

fn scheduler() -> SchedulerFacts {
    SchedulerFacts {
        host: "box".into(),
        user: "ada".into(),
        pid: 42,
        jobs_file: "/home/ada/jobs.txt".into(),
        log_dir: "/home/ada/gpusched_logs".into(),
    }
}

#[test]
fn the_default_filter_picks_failures_only() {
    let failed = Filter::of(&[NotifyOn::Failed]);
    for status in [
        DoneStatus::Failed,
        DoneStatus::FailedOom,
        DoneStatus::Timeout,
        DoneStatus::Infeasible,
        DoneStatus::DependencyFailed,
    ] {
        assert!(failed.wants_outcome(status), "{status:?}");
    }
    assert!(!failed.wants_outcome(DoneStatus::Ok));
    assert!(!failed.wants_outcome(DoneStatus::Cancelled));
    assert!(!failed.wants_drained() && !failed.wants_paused());
    let all = Filter::of(&[NotifyOn::All]);
    assert!(all.wants_outcome(DoneStatus::Cancelled) && all.wants_drained() && all.wants_paused());
    let ok = Filter::of(&[NotifyOn::Ok, NotifyOn::Drained]);
    assert!(ok.wants_outcome(DoneStatus::Ok) && !ok.wants_outcome(DoneStatus::Failed));
    assert!(ok.wants_drained() && !ok.wants_paused());
}

#[test]
fn a_message_has_a_line_for_people_and_the_facts_for_programs() {
    let message = Message::new(Subject::Outcome(facts("failed")), &scheduler(), 1.0);
    assert_eq!(
        message.text,
        "✗ job 3 (train) failed, exit 4 after 1m02s on ada@box: python train.py --lr '$(rm -rf ~)'"
    );
    let json = serde_json::to_value(&message).unwrap();
    assert_eq!(json["event"], "job_ended");
    assert_eq!(json["job"]["status"], "failed");
    assert_eq!(json["job"]["gpus"], serde_json::json!([0, 2]));
    assert_eq!(json["scheduler"]["user"], "ada");
    assert!(json.get("reason").is_none());
    let drained = Message::new(
        Subject::Drained(vec![("failed".into(), 1), ("ok".into(), 9)]),
        &scheduler(),
        1.0,
    );
    assert_eq!(
        drained.text,
        "gpusched on ada@box: queue done (1 failed, 9 ok) — /home/ada/jobs.txt"
    );
    assert_eq!(serde_json::to_value(&drained).unwrap()["counts"]["ok"], 9);
}

#[test]
fn a_hook_learns_of_the_job_only_through_its_environment() {
    let env: std::collections::HashMap<String, String> =
        facts("failed").environment().into_iter().collect();
    assert_eq!(env["GPUSCHED_JOB"], "3");
    assert_eq!(env["GPUSCHED_NAME"], "train");
    assert_eq!(env["GPUSCHED_EXIT_CODE"], "4");
    assert_eq!(env["GPUSCHED_GPUS"], "0,2");
    assert_eq!(env["GPUSCHED_DURATION_S"], "61.500");
    assert_eq!(
        env["GPUSCHED_COMMAND"],
        "python train.py --lr '$(rm -rf ~)'"
    );
    assert_eq!(env.len(), 11);
    assert_eq!(
        hooks::split("notify-send 'job done'").unwrap(),
        vec!["notify-send", "job done"]
    );
    assert!(hooks::split("echo 'open").is_err());
    assert!(hooks::split("  ").is_err());
}

#[test]
fn urls_are_checked_and_printed_without_their_secret() {
    assert!(check_url("https://hooks.slack.com/services/T0/B0/secret").is_ok());
    assert!(check_url("http://127.0.0.1:8080/x").is_ok());
    assert!(check_url("hooks.slack.com/x").is_err());
    assert!(check_url("https:///x").is_err());
    assert_eq!(
        redact("https://user:pw@hooks.slack.com/services/T0/B0/secret"),
        "https://hooks.slack.com/…"
    );
}

#[test]
fn log_tails_keep_the_last_lines_with_urls_cut_to_their_host() {
    assert_eq!(
        redact_urls("posting to https://hooks.slack.com/services/T0/B0/secret done"),
        "posting to https://hooks.slack.com/… done"
    );
    assert_eq!(redact_urls("no url here"), "no url here");
    // Any scheme in any case, credentials outside a URL, and `://` alone.
    assert_eq!(
        redact_urls("GET HTTPS://Hooks.example/T0/secret and postgres://u:pw@db:5432/x"),
        "GET HTTPS://Hooks.example/… and postgres://db:5432/…"
    );
    assert_eq!(
        redact_urls("git push alice:hunter2@git.example main"),
        "git push …@git.example main"
    );
    assert_eq!(redact_urls("a :// b"), "a :// b");
    assert_eq!(redact_urls("mail me@example.org"), "mail me@example.org");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.log");
    let lines: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    std::fs::write(
        &path,
        format!("{lines}error: see http://10.0.0.1:9000/bucket/key?token=abc\n"),
    )
    .unwrap();
    let tail = log_tail(&path).unwrap();
    assert_eq!(tail.lines().count(), LOG_TAIL_LINES);
    assert!(tail.starts_with("line 22\n"), "{tail}");
    assert!(
        tail.ends_with("error: see http://10.0.0.1:9000/…"),
        "{tail}"
    );
    assert!(!tail.contains("token"));
    std::fs::write(&path, "").unwrap();
    assert_eq!(log_tail(&path), None);
    assert_eq!(log_tail(&dir.path().join("missing")), None);
    // A failed job's message carries it under its line, in a code block.
    let job = JobFacts {
        log_tail: Some("Traceback …\nValueError: bad".into()),
        ..facts("failed")
    };
    let message = Message::new(Subject::Outcome(job), &scheduler(), 0.0);
    assert!(
        message
            .text
            .ends_with("\n```\nTraceback …\nValueError: bad\n```"),
        "{}",
        message.text
    );
}

#[test]
fn a_tail_cut_inside_a_url_drops_the_cut_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.log");
    // The 4 KiB tail starts inside this URL's secret path.
    let secret = "s".repeat(5000);
    std::fs::write(
        &path,
        format!("upload to https://store.example/{secret}\nfailed: disk full\n"),
    )
    .unwrap();
    let tail = log_tail(&path).unwrap();
    assert!(!tail.contains("sss"), "{tail}");
    assert_eq!(tail, "failed: disk full");
}
