//! Backfill that never delays a waiting job (docs/BEHAVIOUR.md
//! "Backfill"): on two simulated GPUs, two 20G jobs run, a two-GPU job is
//! next in the file, and twenty short 3G jobs follow. The two-GPU job
//! starts within a second of the longer job's end; short jobs that end in
//! time run before it, the others after.

use crate::common;

use common::{Env, wait_for};

fn ts(event: &serde_json::Value) -> f64 {
    event["ts"].as_f64().unwrap()
}

/// Every start and end of `env`'s run, as `no:event@seconds-after-t0 gpus`,
/// for a failure's message.
fn timeline(env: &Env, t0: f64) -> String {
    env.journal()
        .iter()
        .filter(|e| e["event"] == "started" || e["event"] == "done")
        .map(|e| {
            let no = env
                .events("seen")
                .iter()
                .find(|s| s["key"] == e["key"])
                .map(|s| s["no"].clone());
            format!(
                "{}:{}@{:+.2}{}",
                no.unwrap_or_default(),
                e["event"].as_str().unwrap_or(""),
                ts(e) - t0,
                e.get("gpus").map(|g| g.to_string()).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Checks the run of `env`, whose jobs `first`.. are: the long 20G job,
/// the short 20G job, the two-GPU job, then twenty short 3G jobs.
fn check_head_job_not_delayed(env: &Env, first: u64) {
    let long_end = ts(&env.job_events(first, "done")[0]);
    let pair_start = ts(&env.job_events(first + 2, "started")[0]);
    assert!(
        pair_start - long_end < 1.0,
        "the two-GPU job started {:.2} s after the long job ended; {}",
        pair_start - long_end,
        timeline(env, long_end)
    );
    let shorts: Vec<f64> = (first + 3..first + 23)
        .map(|no| ts(&env.job_events(no, "started")[0]))
        .collect();
    let before = shorts.iter().filter(|&&t| t < pair_start).count();
    assert!(
        before >= 1,
        "no short job backfilled before the two-GPU job"
    );
    assert!(before < 20, "every short job ran first: {shorts:?}");
    for no in first..first + 23 {
        assert_eq!(env.status_of(no).as_deref(), Some("ok"), "job {no}");
    }
}

/// Runs `env`'s jobs on `--sim 2` with `--watch` until `jobs` have ended,
/// after status.json has said that a job waits so as not to delay job
/// `reserved`.
fn run_seeing_a_delay(env: &Env, reserved: u64, jobs: usize) {
    let sched = env.spawn(&["--sim", "2", "--poll", "0.2", "--watch"]);
    let reason = format!("would delay job {reserved}, reserved for ~");
    wait_for(&format!("a job to wait for job {reserved}"), &mut || {
        std::fs::read_to_string(env.logs.join("status.json")).is_ok_and(|s| s.contains(&reason))
    });
    wait_for("every job to end", &mut || env.events("done").len() == jobs);
    sched.stop();
}

fn shorts(line: &str) -> String {
    (0..20).map(|n| format!("{line} # {n}\n")).collect()
}

#[test]
fn short_jobs_backfill_without_delaying_the_head_job_by_their_timeouts() {
    // Each its own family: a shared `sleep` family's median (the short
    // jobs' 1 s) would be taken for the long job's run time.
    let env = Env::new(&format!(
        "[vram=20G timeout=7s family=long] sleep 6\n\
         [vram=20G timeout=4s family=mid] sleep 3\n\
         [vram=20G gpus=2] echo pair\n\
         {}",
        shorts("[vram=3G timeout=3s family=short] sleep 1")
    ));
    let out = env.run(&["--sim", "2", "--poll", "0.2"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    check_head_job_not_delayed(&env, 1);
}

#[test]
fn short_jobs_backfill_without_delaying_the_head_job_by_their_history() {
    // First the families' history: one ok run of each.
    let warm_up = "[family=long] sleep 6\n[family=mid] sleep 3\n[family=short] sleep 1\n";
    let env = Env::new(warm_up);
    let out = env.run(&["--sim", "3", "--poll", "0.2"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    // Then the same jobs with no timeout: their run times come from it.
    env.append_jobs(&format!(
        "[vram=20G family=long] sleep 6; true\n\
         [vram=20G family=mid] sleep 3; true\n\
         [vram=20G gpus=2] echo pair\n\
         {}",
        shorts("[vram=3G family=short] sleep 1; true")
    ));
    run_seeing_a_delay(&env, 6, 26);
    check_head_job_not_delayed(&env, 4);
}

/// Every waiting job has a reservation, not only the first (conservative
/// backfill): a short job that would fit now on GPU 0 but still run when
/// the second waiting job is due there waits, so that job starts when
/// GPU 0's job ends instead of when the short job does.
#[test]
fn a_later_job_does_not_delay_the_second_waiting_job() {
    // Each its own family, so that the ends come from the timeouts (a
    // shared `sleep` family would expect job 3 to end after 2 s, like
    // job 2, and reserve GPU 1 for job 4).
    let env = Env::new(
        "[vram=16G timeout=5s family=a] sleep 4\n\
         [vram=12G timeout=3s family=b] sleep 2\n\
         [vram=20G timeout=8s family=c] sleep 6\n\
         [vram=20G timeout=4s family=d] sleep 2\n\
         [vram=3G timeout=8s family=e] sleep 6\n",
    );
    run_seeing_a_delay(&env, 4, 5);
    let first_end = ts(&env.job_events(1, "done")[0]);
    let second_start = ts(&env.job_events(4, "started")[0]);
    assert!(
        second_start - first_end < 1.0,
        "job 4 started {:.2} s after GPU 0's job ended",
        second_start - first_end
    );
    let small_start = ts(&env.job_events(5, "started")[0]);
    assert!(
        small_start >= second_start,
        "the 3G job started {:.2} s before job 4",
        second_start - small_start
    );
    for no in 1..=5 {
        assert_eq!(env.status_of(no).as_deref(), Some("ok"), "job {no}");
    }
}

/// A `timeout=` far above the run time (`timeout=10m` on jobs that take
/// half a second) no longer keeps jobs from backfilling: their family's
/// history says how long they run, and they fill the free GPU before the
/// two-GPU job's start, which they do not delay.
#[test]
fn history_not_a_generous_timeout_says_how_long_a_job_runs() {
    let env = Env::new("[family=short] sleep 0.5\n");
    let out = env.run(&["--sim", "2", "--poll", "0.2"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    env.append_jobs(&format!(
        "[vram=20G timeout=8s family=long] sleep 6\n\
         [vram=20G gpus=2] echo pair\n\
         {}",
        (0..5)
            .map(|n| format!("[vram=3G timeout=10m family=short] sleep 0.5 # {n}\n"))
            .collect::<String>()
    ));
    run_seeing_a_delay_or_not(&env, 8);
    let long_end = ts(&env.job_events(2, "done")[0]);
    let pair_start = ts(&env.job_events(3, "started")[0]);
    let shorts: Vec<f64> = (4..=8)
        .map(|no| ts(&env.job_events(no, "started")[0]))
        .collect();
    assert!(
        shorts.iter().all(|s| *s < pair_start),
        "the short jobs waited for the two-GPU job: {shorts:?}, pair at {pair_start}"
    );
    assert!(
        pair_start - long_end < 1.0,
        "the two-GPU job started {:.2} s after the long job ended",
        pair_start - long_end
    );
}

/// Runs `env`'s jobs on `--sim 2` until `jobs` have ended.
fn run_seeing_a_delay_or_not(env: &Env, jobs: usize) {
    let sched = env.spawn(&["--sim", "2", "--poll", "0.2", "--watch"]);
    wait_for("every job to end", &mut || env.events("done").len() == jobs);
    sched.stop();
}
