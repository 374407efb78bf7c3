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

/// `kill -9` of the scheduler and its supervisor together (what `pkill -9
/// -f gpusched` does to them), while jobs run and end: the jobs that end
/// while neither lives keep their real exit codes (their own shells wrote
/// their records), one still running is adopted, and nothing that
/// finished runs again.
#[test]
fn killing_scheduler_and_supervisor_together_loses_no_outcome() {
    let env = Env::new(
        "sh -c 'echo a >> runs; sleep 1.5; exit 0'\n\
         sh -c 'echo b >> runs; sleep 1.5; exit 3'\n\
         sh -c 'echo c >> runs; sleep 4'\n\
         sh -c 'echo d >> runs'\n",
    );
    let sched = env.spawn(&["--sim", "4", "--poll", "0.1", "--watch"]);
    wait_for("four starts and job 4's end", &mut || {
        env.events("started").len() == 4 && env.status_of_opt(4).is_some()
    });
    let supervisor = env.events("started")[0]["supervisor"]["pid"]
        .as_i64()
        .expect("the start names its supervisor");
    let supervisor = nix::unistd::Pid::from_raw(supervisor as i32);
    nix::sys::signal::kill(supervisor, Signal::SIGKILL).unwrap();
    sched.signal(Signal::SIGKILL);
    let _ = sched.finish();
    // Jobs 1 and 2 end while nothing of gpusched runs: their shells
    // append their records to the shell record file.
    let recorded = |no| {
        let key = format!("\"key\":\"{}\"", env.key_of(no));
        std::fs::read_dir(env.logs.join("exits"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("shells-"))
            .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains(&key)))
    };
    wait_for("jobs 1 and 2 to end", &mut || recorded(1) && recorded(2));
    let out = env.run(&["--sim", "4", "--poll", "0.1"]);
    assert_eq!(out.code, 3, "{}{}", out.stdout, out.stderr);
    let mut runs: Vec<String> = std::fs::read_to_string(env.path("runs"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    runs.sort();
    assert_eq!(runs, ["a", "b", "c", "d"], "{}", out.stdout);
    assert!(env.events("interrupted").is_empty(), "{}", out.stdout);
    let codes: Vec<(Option<String>, i64)> = (1..=4)
        .map(|no| {
            let done = env.job_events(no, "done");
            (
                env.status_of(no),
                done[0]["returncode"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(
        codes,
        [
            (Some("ok".into()), 0),
            (Some("failed".into()), 3),
            (Some("ok".into()), 0),
            (Some("ok".into()), 0)
        ],
        "{}",
        out.stdout
    );
    // Every record served: the shell record files are gone too.
    assert!(
        !recorded(1) && !recorded(2),
        "{:?}",
        std::fs::read_dir(env.logs.join("exits")).map(|d| d.count())
    );
}
