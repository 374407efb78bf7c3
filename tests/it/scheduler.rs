//! Black-box tests of the main job (docs/BEHAVIOUR.md "Jobs file", "Placement", "Running a job", "Monitoring", "The live queue", "Board and terminal", "Command line", "Simulation"): the real binary in
//! `--sim` mode on temp jobs files, asserting on the journal, the status
//! board, the jobs file staying byte-identical, and exit codes.

use crate::common;

use common::{Env, wait_for};
use serde_json::{Value, json};
use std::process::Command;

/// Index of the first journal event matching `pred`.
fn position(journal: &[Value], pred: impl Fn(&Value) -> bool) -> usize {
    journal
        .iter()
        .position(pred)
        .unwrap_or_else(|| panic!("no such event in {journal:#?}"))
}

fn is(event: &Value, kind: &str, key: &str) -> bool {
    event["event"] == kind && event["key"] == key
}

#[test]
fn example_jobs_file_runs_to_ok() {
    let example =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/jobs.txt")).unwrap();
    // The example's holds are sized for the default 5 s poll; a fast poll
    // and holds a fifth as long keep the test short without changing the
    // order in which things happen.
    let scaled = example
        .replace("--hold 7", "--hold 1.4")
        .replace("--hold 6", "--hold 1.2");
    assert_ne!(
        scaled, example,
        "the example's holds changed; update this test"
    );
    let env = Env::new(&scaled);
    let out = env.run(&["--sim", "2", "--poll", "0.2"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let done = env.events("done");
    assert_eq!(done.len(), 6);
    assert!(done.iter().all(|e| e["status"] == "ok"), "{done:#?}");
    let journal = env.journal();
    let at = |kind: &str, no: u64| position(&journal, |e| is(e, kind, &env.key_of(no)));
    // Jobs 1 and 2 spread over the two GPUs; 4 and 5 share them.
    let gpu = |no| env.job_events(no, "started")[0]["gpus"].clone();
    assert_eq!([gpu(1), gpu(2)], [json!([0]), json!([1])]);
    assert_eq!([gpu(4), gpu(5)], [json!([0]), json!([1])]);
    assert!(at("started", 2) < at("done", 1));
    assert!(at("started", 4) < at("done", 1) && at("started", 5) < at("done", 2));
    // The 2-GPU job gets two GPUs, after the smaller jobs behind it backfilled.
    assert_eq!(env.job_events(3, "started")[0]["gpus"], json!([0, 1]));
    assert!(at("started", 4) < at("started", 3) && at("started", 5) < at("started", 3));
    // The undeclared job waits until a GPU is empty: GPU 0 once jobs 1
    // and 4 are done, or GPU 1 once jobs 2 and 5 are.
    let gpu0_empty = at("done", 1).max(at("done", 4));
    let gpu1_empty = at("done", 2).max(at("done", 5));
    assert!(
        at("started", 6) > gpu0_empty.min(gpu1_empty),
        "{journal:#?}"
    );
}

#[test]
fn two_declared_jobs_pack_on_one_gpu() {
    let env = Env::new(
        "[vram=9G] gpusched simjob --vram 8000 --ramp 0.1 --hold 2\n\
         [vram=9G] gpusched simjob --vram 8000 --ramp 0.1 --hold 2\n",
    );
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let journal = env.journal();
    let (a, b) = (env.key_of(1), env.key_of(2));
    let second_start = position(&journal, |e| is(e, "started", &b));
    let first_done = position(&journal, |e| is(e, "done", &a));
    assert!(
        second_start < first_done,
        "both must run at once: {journal:#?}"
    );
    for e in env.events("started") {
        assert_eq!(e["gpus"], json!([0]));
        assert_eq!(e["vram_mib"], 9216);
    }
}

#[test]
fn small_job_backfills_past_a_blocked_big_one() {
    let env = Env::new(
        "[vram=15G] gpusched simjob --vram 1000 --ramp 0.1 --hold 2\n\
         [vram=15G] gpusched simjob --vram 1000 --ramp 0.1 --hold 0.2\n\
         [vram=4G] gpusched simjob --vram 1000 --ramp 0.1 --hold 0.2\n",
    );
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let journal = env.journal();
    let (big1, big2, small) = (env.key_of(1), env.key_of(2), env.key_of(3));
    let small_start = position(&journal, |e| is(e, "started", &small));
    assert!(small_start < position(&journal, |e| is(e, "done", &big1)));
    assert!(small_start < position(&journal, |e| is(e, "started", &big2)));
    // The blocked big job still runs, after the first one.
    assert!(
        position(&journal, |e| is(e, "done", &big1))
            < position(&journal, |e| is(e, "started", &big2))
    );
}

#[test]
fn undeclared_job_waits_for_a_fully_idle_gpu() {
    let env = Env::new(
        "[vram=1G] gpusched simjob --vram 500 --ramp 0.1 --hold 1.5\n\
         echo ran > undeclared.txt\n",
    );
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let journal = env.journal();
    let (declared, undeclared) = (env.key_of(1), env.key_of(2));
    assert!(
        position(&journal, |e| is(e, "done", &declared))
            < position(&journal, |e| is(e, "started", &undeclared)),
        "{journal:#?}"
    );
    assert_eq!(env.job_events(2, "started")[0]["vram_mib"], Value::Null);
}

#[test]
fn undeclared_job_waits_while_an_external_process_uses_the_gpu() {
    let env = Env::new("echo ran > ran.txt\n");
    let sim_dir = env.logs.join("sim");
    std::fs::create_dir_all(&sim_dir).unwrap();
    // Somebody else's process (not a job of ours) holds 1000 MiB on GPU 0.
    let mut external = Command::new(common::bin())
        .args(["simjob", "--vram", "1000", "--ramp", "0", "--hold", "60"])
        .env("CUDA_VISIBLE_DEVICES", "0")
        .env("GPUSCHED_SIM_DIR", &sim_dir)
        .spawn()
        .unwrap();
    wait_for("the external report", &mut || {
        std::fs::read_dir(&sim_dir).unwrap().count() > 0
    });
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1"]);
    wait_for("the board to show the job waiting", &mut || {
        env.board().contains("· job 1")
    });
    assert!(env.board().contains("external 1100 MiB"), "{}", env.board());
    assert!(env.events("started").is_empty());
    external.kill().unwrap();
    external.wait().unwrap();
    let out = sched.finish();
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(env.path("ran.txt").exists());
}

#[test]
fn multi_gpu_job_gets_its_environment_and_log() {
    let env = Env::new("[vram=1G gpus=2] env > job_env.txt; echo to-stderr >&2\n");
    let out = env.run(&["--sim", "3", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let vars = std::fs::read_to_string(env.path("job_env.txt")).unwrap();
    let key = env.key_of(1);
    let logs = env.logs.display().to_string();
    for expected in [
        "CUDA_VISIBLE_DEVICES=0,1".to_string(),
        "CUDA_DEVICE_ORDER=PCI_BUS_ID".to_string(),
        "GPUSCHED_JOB=1".to_string(),
        format!("GPUSCHED_KEY={key}"),
        "GPUSCHED_ATTEMPT=1".to_string(),
        format!("GPUSCHED_LOG_DIR={logs}"),
        format!("GPUSCHED_SIM_DIR={logs}/sim"),
    ] {
        assert!(
            vars.lines().any(|l| l == expected),
            "missing {expected} in:\n{vars}"
        );
    }
    let log = std::fs::read_to_string(env.logs.join("job001_gpu0-1.log")).unwrap();
    let first = log.lines().next().unwrap();
    assert!(
        first.starts_with("==== gpusched: job 1 attempt 1 on GPU 0,1"),
        "{log}"
    );
    assert!(log.contains("to-stderr"), "{log}");
}

#[test]
fn infeasible_jobs_end_at_once_with_a_reason() {
    let env = Env::new("[gpus=3] echo never\n[vram=30G] echo never\necho fine\n");
    let out = env.run(&["--sim", "2", "--poll", "0.1"]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert_eq!(env.status_of(1).as_deref(), Some("infeasible"));
    assert_eq!(env.status_of(2).as_deref(), Some("infeasible"));
    assert_eq!(env.status_of(3).as_deref(), Some("ok"));
    assert!(
        out.stdout.contains("needs 3 GPUs but only 2 are allowed"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("30720 MiB + 512 MiB margin"),
        "{}",
        out.stdout
    );
    assert!(env.board().contains("✗ job 1"), "{}", env.board());
}

#[test]
fn appended_line_runs_with_watch() {
    let env = Env::new("echo first > first.txt\n");
    let sched = env.spawn(&["--sim", "1", "--poll", "0.2", "--watch"]);
    wait_for("job 1 to finish", &mut || env.status_of_opt(1).is_some());
    env.append_jobs("echo second > second.txt\n");
    wait_for("the appended job to finish", &mut || {
        env.status_of_opt(2).as_deref() == Some("ok")
    });
    assert!(env.path("second.txt").exists());
    let out = sched.stop();
    assert_eq!(out.code, 130, "{}", out.stdout);
    env.assert_jobs_untouched();
}

#[test]
fn deleting_and_reordering_pending_lines_changes_the_queue() {
    let hold = "[vram=20G] sh -c 'while [ ! -e release ]; do sleep 0.05; done'\n";
    let env = Env::new(&format!(
        "{hold}[vram=20G] echo B >> order.txt\n[vram=20G] echo C >> order.txt\n[vram=20G] echo D >> order.txt\n"
    ));
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("job 1 to start", &mut || !env.events("started").is_empty());
    // Move D before B and delete C, by rename (as an editor saves).
    env.replace_jobs_by_rename(&format!(
        "{hold}[vram=20G] echo D >> order.txt\n[vram=20G] echo B >> order.txt\n"
    ));
    wait_for("the board to show the new order", &mut || {
        let board = env.board();
        match (board.find("· job 4"), board.find("· job 2")) {
            (Some(d), Some(b)) => d < b && !board.contains("job 3 "),
            _ => false,
        }
    });
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("B and D to run", &mut || {
        std::fs::read_to_string(env.path("order.txt")).is_ok_and(|s| s.lines().count() == 2)
    });
    let out = sched.stop();
    assert_eq!(
        std::fs::read_to_string(env.path("order.txt")).unwrap(),
        "D\nB\n",
        "{}",
        out.stdout
    );
    assert!(
        env.job_events(3, "started").is_empty(),
        "the deleted job never runs"
    );
    env.assert_jobs_untouched();
}

#[test]
fn malformed_edit_keeps_the_last_good_queue() {
    let hold = "sh -c 'while [ ! -e release ]; do sleep 0.05; done'\n";
    let env = Env::new(hold);
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("job 1 to start", &mut || !env.events("started").is_empty());
    let bad = format!("{hold}[vram=oops] echo bad > bad.txt\n");
    env.write_jobs(&bad);
    wait_for("the warning", &mut || {
        sched.stdout().contains("line 2: bad vram value 'oops'")
    });
    // The same bad file saved again is not warned about again.
    env.write_jobs(&format!("{bad}# touched\n"));
    env.write_jobs(&bad);
    // The scheduler has seen both saves before the fix is written.
    env.wait_for_ticks(5);
    env.write_jobs(&format!("{hold}echo fixed > fixed.txt\n"));
    wait_for("the fixed line to wait for the GPU", &mut || {
        env.board().contains("· job 2")
    });
    assert_eq!(
        sched.stdout().matches("bad vram value 'oops'").count(),
        1,
        "{}",
        sched.stdout()
    );
    assert!(
        env.status_of_opt(1).is_none(),
        "the running job is unaffected"
    );
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("the fixed job to run", &mut || {
        env.path("fixed.txt").exists()
    });
    assert!(!env.path("bad.txt").exists());
    let out = sched.stop();
    assert_eq!(env.status_of(1).as_deref(), Some("ok"), "{}", out.stdout);
}

#[test]
fn deleting_the_jobs_file_does_not_harm_running_jobs() {
    let env = Env::new("sh -c 'while [ ! -e release ]; do sleep 0.05; done'\n");
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("job 1 to start", &mut || !env.events("started").is_empty());
    std::fs::remove_file(&env.jobs).unwrap();
    wait_for("the warning", &mut || {
        sched.stdout().contains("keeping the last good queue")
    });
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("job 1 to finish", &mut || env.status_of_opt(1).is_some());
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    sched.stop();
}

#[test]
fn resume_skips_finished_jobs_and_fresh_reruns_them() {
    let env = Env::new("echo run >> count.txt\nexit 4\n");
    let first = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(first.code, 4);
    let second = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(second.code, 4, "failed jobs still count: {}", second.stdout);
    assert!(
        second
            .stdout
            .contains("resuming: 2 of 2 jobs already finished"),
        "{}",
        second.stdout
    );
    assert_eq!(
        std::fs::read_to_string(env.path("count.txt")).unwrap(),
        "run\n"
    );
    assert_eq!(env.events("started").len(), 2);
    let fresh = env.run(&["--sim", "1", "--poll", "0.1", "--fresh"]);
    assert_eq!(fresh.code, 4);
    assert_eq!(
        std::fs::read_to_string(env.path("count.txt")).unwrap(),
        "run\nrun\n"
    );
    assert_eq!(
        env.events("started").len(),
        2,
        "the journal was started anew"
    );
}

#[test]
fn duplicate_lines_are_separate_jobs() {
    let env = Env::new("echo x >> dup.txt\necho x >> dup.txt\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0);
    assert_eq!(
        std::fs::read_to_string(env.path("dup.txt")).unwrap(),
        "x\nx\n"
    );
    let (a, b) = (env.key_of(1), env.key_of(2));
    assert!(a.ends_with("#0") && b.ends_with("#1"), "{a} {b}");
    assert_eq!(a[..12], b[..12]);
}

#[test]
fn exit_code_is_the_largest_failure() {
    let env = Env::new("exit 3\nexit 5\ntrue\n");
    let out = env.run(&["--sim", "2", "--poll", "0.1"]);
    assert_eq!(out.code, 5, "{}", out.stdout);
    assert_eq!(env.status_of(1).as_deref(), Some("failed"));
    assert_eq!(env.job_events(1, "done")[0]["returncode"], 3);
    assert_eq!(env.status_of(3).as_deref(), Some("ok"));
    assert!(env.board().contains("✗ job 2"), "{}", env.board());
}

#[test]
fn attributed_peak_is_measured_and_unseen_is_na() {
    let env = Env::new(
        "[vram=4000] gpusched simjob --vram 3000 --ramp 0.1 --hold 1.5\n\
         [vram=4000] sleep 0.3\n",
    );
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let done = env.job_events(1, "done");
    assert_eq!(done[0]["peak_mib"], json!({"0": 3000}));
    assert_eq!(done[0]["avg_util"].as_f64().map(|u| u > 0.0), Some(true));
    assert!(done[0]["duration_s"].as_f64().unwrap() >= 1.5);
    assert!(out.stdout.contains("peak GPU0 3000 MiB"), "{}", out.stdout);
    assert!(
        out.stdout.contains("over-declared by 25%"),
        "{}",
        out.stdout
    );
    // A job with no GPU process: the peak is unknown, never 0.
    assert_eq!(env.job_events(2, "done")[0]["peak_mib"], json!({"0": null}));
    assert!(out.stdout.contains("peak GPU0 n/a"), "{}", out.stdout);
}

#[test]
fn overuse_is_warned_at_once() {
    let env = Env::new("[vram=1000] gpusched simjob --vram 3000 --ramp 0.1 --hold 1.5\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0);
    let warn = out
        .stdout
        .lines()
        .position(|l| l.contains("WARN job 1 exceeds declared VRAM"));
    let done = out.stdout.lines().position(|l| l.contains("✓ job 1 ok"));
    assert!(warn.is_some() && warn < done, "{}", out.stdout);
    assert!(
        out.stdout.contains("EXCEEDED its declaration by 200%"),
        "{}",
        out.stdout
    );
}

#[test]
fn board_shows_running_jobs() {
    let env = Env::new("[vram=2G] gpusched simjob --vram 1500 --ramp 0.1 --hold 60\n");
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1"]);
    wait_for("the running job on the board", &mut || {
        let board = env.board();
        board.contains("▶ job 1") && board.contains("1500 of 2048 MiB, peak 1500")
    });
    assert!(env.board().contains("1 running"), "{}", env.board());
    sched.stop();
}

#[test]
fn start_errors_exit_2_with_a_clear_message() {
    let env = Env::new("echo ok\n[vram=8G gpus=two] python train.py\n");
    let out = env.run(&["--sim", "1"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("line 2: bad gpus value 'two'"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("[vram=8G gpus=two] python train.py"),
        "{}",
        out.stderr
    );

    env.write_jobs("# nothing yet\n");
    let out = env.run(&["--sim", "1"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("has no jobs"), "{}", out.stderr);

    env.write_jobs("echo ok\n");
    let out = env.run(&["--sim", "2", "--gpus", "0,5"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--gpus names GPU 5"), "{}", out.stderr);

    let out = env.run(&["--sim", "1", "--margin", "-5"]);
    assert_eq!(out.code, 2);
    let out = env.run(&["--sim", "1", "--poll", "0"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("more than 0"), "{}", out.stderr);

    let missing = Command::new(common::bin())
        .args(["/nonexistent/jobs.txt", "--sim", "1"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read jobs file"));
}

#[test]
fn allowed_gpus_are_respected() {
    let env = Env::new("echo a\necho b\n");
    let out = env.run(&["--sim", "3", "--gpus", "2", "--poll", "0.1"]);
    assert_eq!(out.code, 0);
    for e in env.events("started") {
        assert_eq!(e["gpus"], json!([2]));
    }
}

#[test]
fn help_explains_flags_with_units_and_defaults() {
    let out = Command::new(common::bin()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--margin <MIB>",
        "[default: 512]",
        "--poll <SEC>",
        "[default: 5]",
        "--sim <N>",
        "--watch",
        "--fresh",
    ] {
        assert!(help.contains(needle), "--help lacks {needle}:\n{help}");
    }
}

#[test]
fn last_line_without_newline_still_runs() {
    // Such a read might be a save caught mid-write, so it is believed only
    // once the file has stayed the same for a moment — but it does run.
    let env = Env::new("echo one > one.txt\n");
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("job 1", &mut || env.status_of_opt(1).is_some());
    env.append_jobs("echo two > two.txt");
    wait_for("the unterminated line to run", &mut || {
        env.path("two.txt").exists()
    });
    sched.stop();
    env.assert_jobs_untouched();
}

#[test]
fn verbose_reports_peak_growth() {
    let env = Env::new("[vram=4G] gpusched simjob --vram 3000 --ramp 1 --hold 0.5\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1", "-v"]);
    assert_eq!(out.code, 0);
    let peaks: Vec<u64> = out
        .stdout
        .lines()
        .filter_map(|l| {
            l.split("job 1 VRAM peak ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    // The ramp to 3000 MiB is reported in steps of at least 256 MiB.
    assert!(peaks.len() >= 2, "{}", out.stdout);
    assert!(peaks.windows(2).all(|w| w[1] >= w[0] + 256), "{peaks:?}");
    assert!(*peaks.last().unwrap() > 3000 - 256, "{peaks:?}");
    let quiet = Env::new("[vram=4G] gpusched simjob --vram 3000 --ramp 1 --hold 0.5\n");
    let out = quiet.run(&["--sim", "1", "--poll", "0.1"]);
    assert!(!out.stdout.contains("VRAM peak"), "{}", out.stdout);
}

#[test]
fn torn_journal_line_is_skipped_with_a_warning() {
    let env = Env::new("echo one >> runs.txt\necho two >> runs.txt\n");
    assert_eq!(env.run(&["--sim", "1", "--poll", "0.1"]).code, 0);
    // A crash mid-write leaves half a line at the end of the journal.
    let journal = env.logs.join("journal.jsonl");
    let mut text = std::fs::read_to_string(&journal).unwrap();
    text.push_str(r#"{"ts":1.0,"key":"abc#0","event":"star"#);
    std::fs::write(&journal, text).unwrap();
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stdout
            .contains("skipped 1 torn or garbled line (line 7)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("resuming: 2 of 2 jobs already finished"),
        "{}",
        out.stdout
    );
    assert_eq!(
        std::fs::read_to_string(env.path("runs.txt")).unwrap(),
        "one\ntwo\n"
    );
}

/// `gpusched simjob --hold` counts from when the whole `--vram` is held:
/// a simjob the machine leaves unscheduled during its ramp (here stopped
/// with SIGSTOP past its ramp and hold) still shows its peak for the whole
/// hold, so the scheduler's samples see it (docs/BEHAVIOUR.md "Simulation").
#[test]
fn a_simjob_stalled_in_its_ramp_still_holds_its_peak_for_the_hold() {
    let dir = tempfile::tempdir().unwrap();
    let mut job = Command::new(common::bin())
        .args(["simjob", "--vram", "1000", "--ramp", "0.5", "--hold", "0.6"])
        .env("GPUSCHED_SIM_DIR", dir.path())
        .env("CUDA_VISIBLE_DEVICES", "0")
        .spawn()
        .unwrap();
    let report = dir.path().join(format!("{}.json", job.id()));
    let pid = nix::unistd::Pid::from_raw(job.id() as i32);
    wait_for("the simjob's first report", &mut || report.exists());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let continued = std::time::Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let mut peak_seen = false;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&report)
            && serde_json::from_str::<Value>(&text).is_ok_and(|r| r["mib"]["0"] == 1000)
        {
            peak_seen = true;
        }
        if let Some(status) = job.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let held = continued.elapsed().as_secs_f64();
    assert!(status.success(), "{status:?}");
    assert!(peak_seen, "its 1000 MiB report was never there to sample");
    assert!(
        held >= 0.5,
        "it exited {held:.2}s after it was continued, before its 0.6 s hold"
    );
}
