//! Learned declarations (docs/BEHAVIOUR.md "Learned VRAM"): a `vram=auto` sweep packs itself from
//! its first run's peak, `family=` groups different commands, `--history`
//! carries peaks between log directories, an OOM raises the prediction,
//! and a cold family may use an idle GPU.

use crate::common;

use common::Env;
use serde_json::Value;
use std::time::Instant;

/// Ten jobs of one family (they differ only by a number) whose peak is
/// 6000 MiB, with `attr` in their attribute block.
fn sweep(attr: &str) -> String {
    (1..=10)
        .map(|seed| {
            // Memory-bound (a quarter of the GPU each): they share it.
            format!(
                "{attr}SEED={seed} gpusched simjob --vram 6000 --ramp 0.2 --hold 1.2 --util 25\n"
            )
        })
        .collect()
}

/// (start, end, declared MiB) of every attempt, by job number.
fn attempts(env: &Env) -> Vec<(u64, f64, f64, Option<u64>)> {
    let done = env.events("done");
    let seen = env.events("seen");
    let mut out: Vec<_> = env
        .events("started")
        .iter()
        .map(|s| {
            let no = seen.iter().find(|e| e["key"] == s["key"]).unwrap()["no"]
                .as_u64()
                .unwrap();
            let end = done.iter().find(|d| d["key"] == s["key"]).unwrap()["ts"]
                .as_f64()
                .unwrap();
            (no, s["ts"].as_f64().unwrap(), end, s["vram_mib"].as_u64())
        })
        .collect();
    out.sort_by(|a, b| a.1.total_cmp(&b.1));
    out
}

/// The most attempts running at one time.
fn max_concurrency(runs: &[(u64, f64, f64, Option<u64>)]) -> usize {
    runs.iter()
        .map(|&(_, start, _, _)| {
            runs.iter()
                .filter(|&&(_, s, e, _)| s <= start && start < e)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn an_auto_sweep_learns_from_its_first_run_and_packs_three_at_a_time() {
    let auto = Env::new(&sweep("[vram=auto] "));
    let started = Instant::now();
    let out = auto.run(&["--sim", "1", "--poll", "0.05"]);
    let auto_s = started.elapsed().as_secs_f64();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let runs = attempts(&auto);
    assert_eq!(runs.len(), 10, "one attempt each, no OOM: {runs:?}");
    assert!(auto.events("oom").is_empty());
    // The first runs alone, as undeclared; the rest with 6000 + 10 %.
    let (first, rest) = runs.split_first().unwrap();
    assert_eq!((first.0, first.3), (1, None));
    assert!(rest.iter().all(|r| r.1 >= first.2), "{runs:?}");
    assert!(rest.iter().all(|r| r.3 == Some(6601)), "{runs:?}");
    // 3 × (6601 + 512 margin) fits in 24000, 4 does not.
    assert_eq!(max_concurrency(&runs), 3, "{runs:?}");
    assert!(out.stdout.contains("auto 6.4G from"), "{}", out.stdout);
    assert!(
        out.stdout.contains(
            "  SEED=# gpusched simjob --vram # --ramp # --hold # --util #\n    predicted 6601 MiB, actual 6000 MiB over 10 ok runs"
        ),
        "{}",
        out.stdout
    );

    let undeclared = Env::new(&sweep(""));
    let started = Instant::now();
    let out = undeclared.run(&["--sim", "1", "--poll", "0.05"]);
    let undeclared_s = started.elapsed().as_secs_f64();
    assert_eq!(out.code, 0);
    assert_eq!(max_concurrency(&attempts(&undeclared)), 1);
    assert!(
        auto_s < 0.5 * undeclared_s,
        "auto sweep took {auto_s:.1}s, undeclared {undeclared_s:.1}s"
    );
}

#[test]
fn family_groups_different_commands_and_separates_the_rest() {
    let env = Env::new(
        "[vram=auto family=bert name=a] gpusched simjob --vram 5000 --ramp 0.1 --hold 0.3\n\
         [vram=auto family=bert after=a] sh -c 'exec gpusched simjob --vram 5000 --hold 0.3'\n\
         [vram=auto after=a] gpusched simjob --vram 4000 --hold 0.3 --util 50\n",
    );
    let out = env.run(&["--sim", "1", "--poll", "0.05"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let declared = |no| env.job_events(no, "started")[0]["vram_mib"].as_u64();
    assert_eq!(declared(1), None, "first of family bert: cold");
    assert_eq!(
        declared(2),
        Some(5500),
        "learned from job 1 through family="
    );
    assert_eq!(declared(3), None, "another family: cold");
}

#[test]
fn history_is_shared_between_log_directories() {
    let first = Env::new("[vram=auto] python-like 1\n");
    let history = first.path("history.jsonl");
    let history_arg = history.display().to_string();
    // A stand-in for a training script: a 4000 MiB job.
    let script = first.path("python-like");
    common::write_script(
        &script,
        "#!/bin/sh\nexec gpusched simjob --vram 4000 --ramp 0.1 --hold 0.5\n",
    );
    let jobs = |seed: u32| format!("[vram=auto] {} {seed}\n", script.display());
    first.write_jobs(&jobs(1));
    let out = first.run(&["--sim", "1", "--poll", "0.05", "--history", &history_arg]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let lines: Vec<Value> = std::fs::read_to_string(&history)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["peak_mib"], 4000);
    // A writer killed mid-line leaves a torn line; it is skipped.
    std::fs::write(
        &history,
        format!(
            "{}{{\"family\":\"x\",\"peak\n",
            std::fs::read_to_string(&history).unwrap()
        ),
    )
    .unwrap();

    // Another log directory, another seed: not a cold start.
    let second = Env::new(&jobs(2));
    let out = second.run(&["--sim", "1", "--poll", "0.05", "--history", &history_arg]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        second.job_events(1, "started")[0]["vram_mib"].as_u64(),
        Some(4400)
    );
    assert!(
        out.stdout.contains("auto 4.3G from 1 run"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("skipped 1 torn"), "{}", out.stdout);
    // Its run joined the shared history too.
    let text = std::fs::read_to_string(&history).unwrap();
    assert_eq!(text.lines().filter(|l| l.contains("4000")).count(), 2);
    // Without --history the second directory would have started cold.
    let third = Env::new(&jobs(3));
    assert_eq!(third.run(&["--sim", "1", "--poll", "0.05"]).code, 0);
    assert_eq!(third.job_events(1, "started")[0]["vram_mib"], Value::Null);
}

#[test]
fn an_oom_under_auto_raises_the_family_for_the_retry_and_later_jobs() {
    let marker = "oom-marker";
    let env = Env::new(&format!(
        "[vram=auto family=t name=one] gpusched simjob --vram 6000 --ramp 0.1 --hold 0.3\n\
         [vram=auto family=t retries=1 name=two after=one] gpusched simjob --vram 6000 --ramp 0.1 --hold 0.3 --oom-once {marker}\n\
         [vram=auto family=t after=two] gpusched simjob --vram 6000 --ramp 0.1 --hold 0.3\n"
    ));
    let out = env.run(&["--sim", "1", "--poll", "0.05"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let two = env.job_events(2, "started");
    assert_eq!(two.len(), 2, "an OOM and a retry");
    assert_eq!(two[0]["vram_mib"], 6601);
    let raised = two[1]["vram_mib"].as_u64().unwrap();
    assert!(raised > 6601, "{two:?}");
    assert_eq!(
        env.job_events(3, "started")[0]["vram_mib"].as_u64(),
        Some(raised)
    );
    assert!(out.stdout.contains("raised after an OOM"), "{}", out.stdout);
}

#[test]
fn a_cold_family_uses_an_idle_gpu_and_later_jobs_wait_for_its_peak() {
    let env = Env::new(
        "[vram=auto] SEED=1 gpusched simjob --vram 5000 --ramp 0.1 --hold 1.5\n\
         [vram=auto] SEED=2 gpusched simjob --vram 5000 --ramp 0.1 --hold 1.5\n\
         [vram=auto] SEED=3 gpusched simjob --vram 5000 --ramp 0.1 --hold 0.3\n",
    );
    let out = env.run(&["--sim", "2", "--poll", "0.05"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let runs = attempts(&env);
    // Jobs 1 and 2 both start cold, each on an idle GPU of its own.
    assert_eq!(runs[0].3, None);
    assert_eq!(runs[1].3, None);
    assert!(runs[1].1 < runs[0].2, "1 and 2 overlap: {runs:?}");
    let gpus: Vec<Value> = env
        .events("started")
        .iter()
        .take(2)
        .map(|s| s["gpus"].clone())
        .collect();
    assert_ne!(gpus[0], gpus[1]);
    // Job 3 had no idle GPU: it waited for a peak and then declared it.
    assert_eq!(runs[2].0, 3);
    assert_eq!(runs[2].3, Some(5500));
    assert!(runs[2].1 >= runs[0].2.min(runs[1].2), "{runs:?}");
}

#[test]
fn auto_vram_flag_makes_undeclared_jobs_learn_and_leaves_declared_ones_alone() {
    let env = Env::new(
        "SEED=1 gpusched simjob --vram 3000 --ramp 0.1 --hold 0.3\n\
         [after=1] SEED=2 gpusched simjob --vram 3000 --ramp 0.1 --hold 0.3\n\
         [vram=5000 after=1] SEED=3 gpusched simjob --vram 3000 --ramp 0.1 --hold 0.3\n",
    );
    let out = env.run(&["--sim", "1", "--poll", "0.05", "--auto-vram"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let declared = |no| env.job_events(no, "started")[0]["vram_mib"].as_u64();
    assert_eq!(declared(1), None, "cold start");
    assert_eq!(
        declared(2),
        Some(3301),
        "learned from job 1: 3000 + 10 %, rounded up"
    );
    assert_eq!(declared(3), Some(5000), "its own declaration wins");
    // Without the flag the same undeclared line stays undeclared.
    let plain = Env::new(
        "SEED=1 gpusched simjob --vram 3000 --hold 0.2\n[after=1] SEED=2 gpusched simjob --vram 3000 --hold 0.2\n",
    );
    assert_eq!(plain.run(&["--sim", "1", "--poll", "0.05"]).code, 0);
    assert_eq!(plain.job_events(2, "started")[0]["vram_mib"], Value::Null);
}
