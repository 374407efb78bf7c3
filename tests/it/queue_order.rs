//! Black-box tests of the queue's one order and what changes it
//! (docs/BEHAVIOUR.md "Queue policy"): `priority=` for placement, backfill
//! and preemption; `begin=`; `gpusched hold` and `release`; `retry_on=`.

use crate::common;

use common::{Env, wait_for};

fn ts(event: &serde_json::Value) -> f64 {
    event["ts"].as_f64().unwrap()
}

/// The display numbers of `env`'s jobs in the order they first started.
fn start_order(env: &Env) -> Vec<u64> {
    let numbers: std::collections::HashMap<String, u64> = env
        .events("seen")
        .iter()
        .map(|s| {
            (
                s["key"].as_str().unwrap().to_string(),
                s["no"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut order = Vec::new();
    for started in env.events("started") {
        let no = numbers[started["key"].as_str().unwrap()];
        if !order.contains(&no) {
            order.push(no);
        }
    }
    order
}

#[test]
fn jobs_start_by_priority_then_line() {
    // Each job takes the one GPU whole: they run one at a time, in the
    // queue's order.
    let env = Env::new(
        "[vram=20G] echo a\n[vram=20G priority=3] echo b\n[vram=20G priority=-1] echo c\n[vram=20G priority=3] echo d\n[vram=20G] echo e\n",
    );
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(start_order(&env), vec![2, 4, 1, 5, 3], "{}", out.stdout);
}

#[test]
fn an_appended_line_of_higher_priority_goes_before_the_waiting_ones() {
    let env = Env::new(
        "[vram=20G] sh -c 'while [ ! -e release ]; do sleep 0.05; done'\n[vram=20G] echo low\n",
    );
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("job 1 to start", &mut || !env.events("started").is_empty());
    env.append_jobs("[vram=20G priority=1] echo urgent\n");
    wait_for("the appended line to be seen", &mut || {
        env.events("seen").len() == 3
    });
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("every job to end", &mut || env.events("done").len() == 3);
    sched.stop();
    assert_eq!(start_order(&env), vec![1, 3, 2]);
}

/// Backfill follows the rank: the head job is the first waiting job in
/// queue order, so a short job above it in the file but below it in
/// priority waits rather than delay it.
#[test]
fn backfill_keeps_the_gpu_for_the_job_of_higher_priority() {
    // Job 1 (priority 2) runs 1.5 s (10G of 24G). Job 2 (10G, up to 6 s)
    // would fit beside it now; job 3 (20G, priority 1) needs the GPU
    // whole when job 1 ends: job 2 starting now would delay it. (In file
    // order job 2 would be the head and start at once.)
    let env = Env::new(
        "[vram=10G priority=2 timeout=3 family=a] sleep 1.5\n[vram=10G timeout=6 family=b] sleep 0.5\n[vram=20G priority=1 timeout=2 family=c] echo high\n",
    );
    let args = [
        "--sim",
        "1",
        "--poll",
        "0.1",
        "--watch",
        "--placement",
        "pack",
    ];
    let sched = env.spawn(&args);
    wait_for("job 2 to wait for job 3", &mut || {
        std::fs::read_to_string(env.logs.join("status.json"))
            .is_ok_and(|s| s.contains("would delay job 3"))
    });
    wait_for("every job to end", &mut || env.events("done").len() == 3);
    sched.stop();
    let first_end = ts(&env.job_events(1, "done")[0]);
    let high = ts(&env.job_events(3, "started")[0]);
    let low = ts(&env.job_events(2, "started")[0]);
    assert!(high < low, "job 2 started before job 3");
    assert!(
        high - first_end < 1.0,
        "job 3 started {:.2} s after job 1 ended",
        high - first_end
    );
}

/// Preemption follows the rank: a job of higher priority further down
/// the file stops a preemptible job above it.
#[test]
fn a_job_of_higher_priority_below_preempts_a_preemptible_one_above() {
    let sweep = "[preemptible vram=20G] sh -c 'echo \"$GPUSCHED_ATTEMPT ${GPUSCHED_PREEMPTED:-0}\" >> sweep.txt; trap \"exit 0\" TERM; while [ ! -e release ]; do sleep 0.05; done'";
    let env = Env::new(&format!("{sweep}\n"));
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    // Running its command (a start journaled may not have run it yet).
    wait_for("the sweep to run", &mut || {
        std::fs::read_to_string(env.path("sweep.txt")).is_ok_and(|t| t == "1 0\n")
    });
    env.append_jobs("[vram=20G] echo plain > plain.txt\n");
    env.append_jobs("[vram=20G priority=2] echo urgent > urgent.txt\n");
    wait_for("the urgent job to run", &mut || {
        env.path("urgent.txt").exists()
    });
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("every job to end", &mut || env.events("done").len() == 3);
    sched.stop();
    assert_eq!(env.job_events(1, "preempted").len(), 1);
    assert!(env.job_events(2, "preempted").is_empty() && env.job_events(3, "preempted").is_empty());
    // The plain line, of equal priority and below, never preempted it:
    // the sweep ran again before it.
    let order = start_order(&env);
    assert_eq!(order[..2], [1, 3], "{order:?}");
    assert_eq!(
        std::fs::read_to_string(env.path("sweep.txt")).unwrap(),
        "1 0\n2 1\n"
    );
}

#[test]
fn begin_waits_until_then_and_a_restart_keeps_the_time() {
    let env = Env::new("[begin=+3s] date +%s > began.txt\n[begin=+1h] echo later\n");
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("the board to say when", &mut || {
        let board = env.board();
        board.contains("begins at") && board.matches("begins at").count() == 2
    });
    // A restart counts from when the jobs were queued, not from now.
    sched.stop();
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("job 1 to end", &mut || {
        !env.job_events(1, "done").is_empty()
    });
    let seen = ts(&env.job_events(1, "seen")[0]);
    let started = ts(&env.job_events(1, "started")[0]);
    // Not before its time; the upper bound only says it was not left
    // waiting (generous: a loaded machine restarts slowly).
    assert!(
        (3.0..15.0).contains(&(started - seen)),
        "job 1 started {:.2} s after it was queued",
        started - seen
    );
    assert!(env.job_events(2, "started").is_empty());
    assert!(
        common::status_field(&env, 2, "reason")
            .as_str()
            .is_some_and(|r| r.starts_with("begins at")),
        "{}",
        env.board()
    );
    sched.stop();
}

#[test]
fn a_bad_begin_names_the_line() {
    let env = Env::new("echo ok\n[begin=noon] echo x\n");
    let out = env.run(&["--sim", "1"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("line 2: bad begin value 'noon'"),
        "{}",
        out.stderr
    );
}

#[test]
fn hold_keeps_a_job_waiting_across_a_restart_until_release() {
    let env = Env::new(
        "[vram=20G] sh -c 'while [ ! -e release ]; do sleep 0.05; done'\n[vram=20G name=next] echo next > next.txt\n",
    );
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("job 1 to start", &mut || !env.events("started").is_empty());
    let out = env.verb(&["hold", "next"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("job 2 held"),
        "{out:?}"
    );
    // A running job cannot be held, and says so.
    let out = env.verb(&["hold", "1"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("it is running"),
        "{out:?}"
    );
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("job 1 to end", &mut || {
        !env.job_events(1, "done").is_empty()
    });
    wait_for("the held reason", &mut || {
        env.board().contains("held (gpusched release)")
    });
    sched.stop();
    // Held across a restart; nothing else left to run, it still waits.
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    env.wait_for_ticks(5);
    assert!(!env.path("next.txt").exists());
    let out = env.verb(&["release", "next"]);
    assert!(out.status.success(), "{out:?}");
    wait_for("job 2 to run", &mut || env.path("next.txt").exists());
    sched.stop();
    assert_eq!(env.job_events(2, "held").len(), 1);
    assert_eq!(env.job_events(2, "released").len(), 1);
}

#[test]
fn hold_without_a_scheduler_is_journaled_for_the_next_one() {
    let env = Env::new("echo one > one.txt\necho two > two.txt\n");
    // A first run sees both lines, then the second is held.
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    env.append_jobs("echo three > three.txt\n");
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("job 3 to end", &mut || env.path("three.txt").exists());
    sched.stop();
    env.append_jobs("echo four > four.txt\n");
    let out = env.verb(&["hold", "on-line-4-unused"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown job changes nothing: {out:?}"
    );
    // The fourth line is not journaled yet: hold it by its key prefix.
    let key =
        gpusched::jobspec::parse_jobs(&std::fs::read_to_string(env.path("jobs.txt")).unwrap())
            .unwrap()[3]
            .key
            .clone();
    let out = env.verb(&["hold", &key[..8]]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no scheduler runs now"),
        "{out:?}"
    );
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    env.wait_for_ticks(5);
    assert!(!env.path("four.txt").exists(), "a held job started");
    sched.stop();
}

/// `hold` and `release` find jobs as `cancel` does (one shared set of
/// arguments): `group=NAME`, and `--file` for lines of a jobs file other
/// than the one the log directory's scheduler ran.
#[test]
fn hold_and_release_take_a_group_and_a_jobs_file() {
    let env = Env::new("echo c > c.txt\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let lines = "[group=g] echo a > a.txt\n[group=g] echo b > b.txt\n";
    let other = env.path("other.txt");
    std::fs::write(&other, lines).unwrap();
    let out = env.verb(&["hold", "group=g"]);
    assert_eq!(out.status.code(), Some(2), "not in jobs.txt: {out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no line of the jobs file has group=g"),
        "{out:?}"
    );
    let out = env.verb(&["hold", "group=g", "--file", other.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(said.matches("no scheduler runs now").count(), 2, "{said}");
    // The same lines in the scheduler's own file: held there too.
    env.append_jobs(lines);
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    env.wait_for_ticks(5);
    assert!(
        !env.path("a.txt").exists() && !env.path("b.txt").exists(),
        "a held job of the group started"
    );
    let out = env.verb(&["release", "group=g"]);
    assert!(out.status.success(), "{out:?}");
    wait_for("the group's jobs to end", &mut || {
        env.status_of(2).is_some() && env.status_of(3).is_some()
    });
    sched.stop();
    for no in 1..=3 {
        assert_eq!(env.status_of(no).as_deref(), Some("ok"), "job {no}");
    }
}

#[test]
fn retry_on_fail_runs_a_failed_job_again_as_it_was() {
    // Fails on its first attempt, succeeds on its second.
    let flaky = "[retries=2 retry_on=fail vram=4G] sh -c 'n=$(cat n 2>/dev/null || echo 0); echo $((n+1)) > n; [ $n -ge 1 ]'";
    let env = Env::new(&format!(
        "{flaky}\n[retries=2] sh -c 'exit 3'\n[timeout=0.5 retries=1 retry_on=any] sleep 5\n[retries=2 retry_on=fail] sh -c 'echo CUDA out of memory >&2; exit 1'\n"
    ));
    let out = env.run(&["--sim", "1", "--poll", "0.1", "--retry-delay", "0.2"]);
    assert!(
        out.stdout.contains("↻ job 1 failed after")
            && out.stdout.contains("retry 1 of 2 at ")
            && out.stdout.contains("(in 0.2s) (retry_on=fail)"),
        "{}",
        out.stdout
    );
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    assert_eq!(env.job_events(1, "requeued").len(), 1);
    assert_eq!(env.job_events(1, "requeued")[0]["returncode"], 1);
    assert_eq!(
        env.job_events(1, "started")[1]["vram_mib"],
        4096,
        "run again as it was"
    );
    // The default retries OOMs only.
    assert_eq!(env.status_of(2).as_deref(), Some("failed"));
    assert!(env.job_events(2, "requeued").is_empty());
    // A timeout is a failure retry_on=any retries, once here.
    assert_eq!(env.job_events(3, "requeued").len(), 1);
    assert_eq!(env.job_events(3, "requeued")[0]["status"], "timeout");
    assert_eq!(env.status_of(3).as_deref(), Some("timeout"));
    // retry_on=fail leaves OOMs alone.
    assert_eq!(env.status_of(4).as_deref(), Some("failed_oom"));
    assert!(env.job_events(4, "oom").is_empty() && env.job_events(4, "requeued").is_empty());
}

/// A retry after a failure waits its `retry_delay=` (docs/BEHAVIOUR.md
/// "Out of memory and timeouts"), says until when, and still waits it
/// after a restart; without one, the backoff starts at 10 s.
#[test]
fn a_failed_job_waits_its_retry_delay_and_says_until_when() {
    let env = Env::new(
        "[retries=1 retry_on=fail retry_delay=1.5s] sh -c '[ $GPUSCHED_ATTEMPT -ge 2 ]'\n[retries=2 retry_on=any] exit 4\n",
    );
    let status = || std::fs::read_to_string(env.logs.join("status.json")).unwrap_or_default();
    let sched = env.spawn(&["--sim", "1", "--poll", "0.2", "--watch"]);
    wait_for("job 1 to wait out its delay", &mut || {
        status().contains("retries at ") && status().contains("(retry_delay)")
    });
    wait_for("job 1 to end ok", &mut || env.status_of_opt(1).is_some());
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    let requeued = &env.job_events(1, "requeued")[0];
    let not_before = requeued["not_before"]
        .as_f64()
        .expect("not_before journaled");
    let delay = not_before - requeued["ts"].as_f64().unwrap();
    assert!((1.4..1.7).contains(&delay), "retry_delay=1.5s: {delay}");
    let retried = env.job_events(1, "started")[1]["ts"].as_f64().unwrap();
    assert!(
        retried >= not_before,
        "started {retried} before {not_before}"
    );
    // No retry_delay=: the backoff, 10 s for the first retry.
    wait_for("job 2's first retry", &mut || {
        !env.job_events(2, "requeued").is_empty()
    });
    let requeued = &env.job_events(2, "requeued")[0];
    let delay = requeued["not_before"].as_f64().unwrap() - requeued["ts"].as_f64().unwrap();
    assert!((9.9..10.5).contains(&delay), "backoff: {delay}");
    let out = sched.stop();
    assert!(
        out.stdout.contains("retry 1 of 2 at ") && out.stdout.contains("(in 10s)"),
        "{}",
        out.stdout
    );
    // A restart still waits it out.
    let sched = env.spawn(&["--sim", "1", "--poll", "0.2", "--watch"]);
    wait_for("job 2 to wait after the restart", &mut || {
        status().contains("retries at ")
    });
    assert_eq!(env.job_events(2, "started").len(), 1, "not started early");
    sched.stop();
}
