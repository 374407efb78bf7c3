//! The chaos test (docs/BEHAVIOUR.md "Exactly once"): about 30 short jobs run while the scheduler
//! is killed with SIGKILL at random moments, at least 20 times, and
//! restarted each time. Every job must complete exactly once, with its
//! real exit code, and the whole run must take at most 1.3× an
//! uninterrupted one. The seed of the random moments is printed, so a
//! failure can be replayed with `GPUSCHED_CHAOS_SEED=…`.

use crate::common;

use common::{Env, wait_for};
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};

const JOBS: usize = 30;
const KILLS: usize = 20;

/// A small deterministic generator (64-bit LCG), enough for kill moments.
struct Lcg(u64);

impl Lcg {
    fn next_unit(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Job `i`: records each run in `runs/i`, works for 0.5–1.4 s, exits
/// with `i % 4`.
fn jobs_file() -> String {
    (0..JOBS)
        .map(|i| {
            let seconds = 0.5 + ((i * 7) % 10) as f64 / 10.0;
            format!(
                "sh -c 'echo run >> runs/{i}; sleep {seconds:.1}; exit {}' # job {i}\n",
                i % 4
            )
        })
        .collect()
}

/// Runs the scheduler to its end; with `kills`, SIGKILLs and restarts it
/// that many times at random moments first. Returns the wall time and the
/// final exit code.
fn run(env: &Env, kills: usize, rng: &mut Lcg) -> (Duration, i32) {
    let args = ["--sim", "4", "--poll", "0.2"];
    std::fs::create_dir_all(env.path("runs")).unwrap();
    let started = Instant::now();
    for _ in 0..kills {
        let sched = env.spawn(&args);
        // Let it get going (the first dispatch) before the kill, then wait
        // a random 0–250 ms more.
        wait_for("the scheduler to write its board", &mut || {
            env.logs.join("status.txt").exists() || !sched.child_is_running()
        });
        if !env.logs.join("status.txt").exists() {
            let out = sched.finish();
            panic!(
                "a restarted scheduler ended (exit {}) without writing its board:\n{}\n{}",
                out.code, out.stdout, out.stderr
            );
        }
        std::thread::sleep(Duration::from_secs_f64(rng.next_unit() * 0.25));
        sched.signal(Signal::SIGKILL);
        sched.finish();
        let _ = std::fs::remove_file(env.logs.join("status.txt"));
    }
    let out = env.spawn(&args).finish();
    (started.elapsed(), out.code)
}

#[test]
fn sigkill_at_random_moments_loses_nothing_and_runs_nothing_twice() {
    let seed = std::env::var("GPUSCHED_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("chaos seed: {seed} (replay with GPUSCHED_CHAOS_SEED={seed})");
    let mut rng = Lcg(seed);

    let calm = Env::new(&jobs_file());
    let (calm_time, calm_code) = run(&calm, 0, &mut rng);
    assert_eq!(calm_code, 3, "the largest exit code among the jobs");

    let chaos = Env::new(&jobs_file());
    let (chaos_time, chaos_code) = run(&chaos, KILLS, &mut rng);
    let ratio = chaos_time.as_secs_f64() / calm_time.as_secs_f64();
    eprintln!(
        "uninterrupted {:.2} s, with {KILLS} SIGKILLs {:.2} s, ratio {ratio:.2}",
        calm_time.as_secs_f64(),
        chaos_time.as_secs_f64()
    );
    assert_eq!(chaos_code, 3);

    let (mut lost, mut twice, mut wrong) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..JOBS {
        let runs = std::fs::read_to_string(chaos.path(&format!("runs/{i}"))).unwrap_or_default();
        match runs.lines().count() {
            0 => lost.push(i),
            1 => {}
            _ => twice.push(i),
        }
        let no = i as u64 + 1;
        let done = chaos.job_events(no, "done");
        let expected = (i % 4) as i64;
        if done.len() != 1 || done[0]["returncode"].as_i64() != Some(expected) {
            wrong.push((i, done));
        }
    }
    assert!(lost.is_empty(), "jobs that never ran: {lost:?}");
    assert!(twice.is_empty(), "jobs that ran more than once: {twice:?}");
    assert!(
        wrong.is_empty(),
        "jobs without exactly one right outcome: {wrong:?}"
    );
    assert!(
        ratio <= 1.3,
        "the run with {KILLS} SIGKILLs took {ratio:.2}× the uninterrupted one"
    );
}
