//! Benchmark of the scheduler's reaction time and cost, in `--sim` mode:
//!
//!     cargo bench --bench scheduler
//!
//! Prints four figures (targets from the performance issue in brackets):
//! 1. scheduling overhead: 6 serial 0.3 s jobs on one GPU at `--poll 2`,
//!    makespan minus the sum of the jobs' own run times [≤ 0.1 s];
//! 2. append-to-start latency with `--watch` at `--poll 2`: median from
//!    appending a line to the job's first instruction [≤ 50 ms];
//! 3. scheduler CPU seconds over 8 s with one long job running and 20,000
//!    blocked pending lines at `--poll 0.5`, and the run's peak RSS
//!    [≤ 0.2 CPU-s, ≤ 20 MiB];
//! 4. start-up time to the first dispatch with a 1,000,000-event journal
//!    [≤ 1 s];
//! 5. `gpusched timeline` drawing that journal [< 2 s].
//!
//! Times come from the jobs themselves (`date +%s.%N` as first and last
//! instruction), CPU and RSS from `/proc/<pid>/stat` and `/proc/<pid>/status`.

#![allow(
    clippy::disallowed_methods,
    reason = "benchmarks read the temporary files their runs made"
)]

mod common;

use common::{cpu_seconds, now, peak_rss_mib, read_stamps, scheduler, stop, wait_until};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// 1. Six serial 0.3 s jobs: makespan − Σ run times.
fn overhead(dir: &Path) -> f64 {
    let mut jobs = String::new();
    for i in 0..6 {
        // 20 GiB each: only one fits on the GPU at a time.
        jobs.push_str(&format!(
            "[vram=20G] date +%s.%N >> start{i}; sleep 0.3; date +%s.%N >> end{i}\n"
        ));
    }
    std::fs::write(dir.join("jobs.txt"), jobs).unwrap();
    let mut child = scheduler(dir, &["--sim", "1", "--poll", "2"]);
    assert!(child.wait().unwrap().success());
    let (mut first, mut last, mut busy) = (f64::MAX, 0.0f64, 0.0);
    for i in 0..6 {
        let start = read_stamps(&dir.join(format!("start{i}")))[0];
        let end = read_stamps(&dir.join(format!("end{i}")))[0];
        first = first.min(start);
        last = last.max(end);
        busy += end - start;
    }
    (last - first) - busy
}

/// 2. Median append-to-first-instruction latency over `n` appends.
fn append_latency(dir: &Path, n: usize) -> (f64, f64) {
    std::fs::write(dir.join("jobs.txt"), "").unwrap();
    let child = scheduler(dir, &["--sim", "1", "--poll", "2", "--watch"]);
    // Let it settle into its wait first.
    wait_until("the status board", Duration::from_secs(30), || {
        dir.join("logs/status.txt").exists()
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut latencies = Vec::new();
    for i in 0..n {
        let stamp = dir.join(format!("lat{i}"));
        let appended = now();
        let mut file = std::fs::File::options()
            .append(true)
            .open(dir.join("jobs.txt"))
            .unwrap();
        file.write_all(format!("date +%s.%N > lat{i}\n").as_bytes())
            .unwrap();
        drop(file);
        wait_until("the appended job", Duration::from_secs(30), || {
            !read_stamps(&stamp).is_empty()
        });
        latencies.push(read_stamps(&stamp)[0] - appended);
        // Let the job end and the scheduler go back to waiting.
        std::thread::sleep(Duration::from_millis(200));
    }
    stop(child);
    latencies.sort_by(f64::total_cmp);
    (latencies[n / 2], latencies[n - 1])
}

/// 3. CPU over 8 s and peak RSS with 20,000 blocked lines.
fn idle_cost(dir: &Path, lines: usize) -> (f64, f64) {
    let mut jobs = String::from("[vram=20G] gpusched simjob --vram 18000 --ramp 0.1 --hold 60\n");
    for i in 0..lines {
        jobs.push_str(&format!("[vram=20G] python train.py --seed {i}\n"));
    }
    std::fs::write(dir.join("jobs.txt"), jobs).unwrap();
    let child = scheduler(dir, &["--sim", "1", "--poll", "0.5"]);
    let journal = dir.join("logs/journal.jsonl");
    wait_until("the first dispatch", Duration::from_secs(60), || {
        std::fs::read_to_string(&journal).is_ok_and(|j| j.contains("\"started\""))
    });
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_seconds(child.id());
    std::thread::sleep(Duration::from_secs(8));
    let cpu = cpu_seconds(child.id()) - before;
    let rss = peak_rss_mib(child.id());
    stop(child);
    (cpu, rss)
}

/// 4. Start-up to the first dispatch with a journal of `events` events.
fn startup(dir: &Path, events: usize) -> f64 {
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    let mut journal =
        std::io::BufWriter::new(std::fs::File::create(dir.join("logs/journal.jsonl")).unwrap());
    // Old history: jobs seen, started and done long ago.
    for i in 0..events / 3 {
        let key = format!("{:012x}#0", i);
        // Eight GPUs, each running one 40 s job after another.
        let (start, gpu) = (1.7e9 + (i / 8) as f64 * 40.0, i % 8);
        writeln!(journal, r#"{{"ts":{start},"key":"{key}","event":"seen","no":{},"command":"python train.py --seed {i}"}}"#, i + 1).unwrap();
        writeln!(journal, r#"{{"ts":{start},"key":"{key}","event":"started","pgid":{},"gpus":[{gpu}],"attempt":1,"vram_mib":8000,"start_ticks":123,"boot_id":"x"}}"#, 1000 + i % 30000).unwrap();
        writeln!(journal, r#"{{"ts":{},"key":"{key}","event":"done","status":"ok","returncode":0,"peak_mib":{{"{gpu}":7000}},"avg_util":50.0,"duration_s":40.0}}"#, start + 40.0).unwrap();
    }
    for i in 0..events % 3 {
        writeln!(
            journal,
            r#"{{"ts":1.7e9,"key":"pad{i}#0","event":"seen","no":{},"command":"x"}}"#,
            events + i
        )
        .unwrap();
    }
    // A real journal was fsynced event by event as it was written; do the
    // same here so the first fsync of the run does not flush 100 MB.
    journal.flush().unwrap();
    journal.get_ref().sync_all().unwrap();
    drop(journal);
    std::fs::write(dir.join("jobs.txt"), "date +%s.%N > first\n").unwrap();
    let spawned = now();
    let mut child = scheduler(dir, &["--sim", "1", "--poll", "2"]);
    assert!(child.wait().unwrap().success());
    read_stamps(&dir.join("first"))[0] - spawned
}

/// 5. `gpusched timeline` over the journal `startup` left (seconds).
fn timeline_render(dir: &Path) -> f64 {
    let started = Instant::now();
    let status = Command::new(common::bin())
        .args(["timeline", "--log-dir"])
        .arg(dir.join("logs"))
        .arg("-o")
        .arg(dir.join("timeline.svg"))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    started.elapsed().as_secs_f64()
}

fn main() {
    // `cargo bench` passes --bench; a filter argument is not supported.
    let tmp = |name: &str| -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("gpusched-bench-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    };
    println!(
        "gpusched benchmark (--sim mode; {} CPUs)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    let dir = tmp("overhead");
    let o = overhead(&dir);
    println!("scheduling overhead, 6 serial 0.3 s jobs at --poll 2: {o:.3} s   (target ≤ 0.1 s)");

    let dir = tmp("append");
    let (median, worst) = append_latency(&dir, 15);
    println!(
        "append-to-start latency at --poll 2, median of 15: {:.1} ms (max {:.1} ms)   (target ≤ 50 ms)",
        median * 1000.0,
        worst * 1000.0
    );

    let dir = tmp("idle");
    let (cpu, rss) = idle_cost(&dir, 20_000);
    println!(
        "scheduler CPU over 8 s, 1 running + 20,000 blocked lines at --poll 0.5: {cpu:.2} CPU-s   (target ≤ 0.2)"
    );
    println!("peak RSS of that run: {rss:.1} MiB   (target ≤ 20 MiB)");

    let dir = tmp("startup");
    let s = startup(&dir, 1_000_000);
    println!(
        "start-up to first dispatch with a 1,000,000-event journal: {s:.3} s   (target ≤ 1 s)"
    );

    let t = timeline_render(&dir);
    println!("timeline of that 1,000,000-event journal: {t:.3} s   (target < 2 s)");

    for name in ["overhead", "append", "idle", "startup"] {
        let _ = std::fs::remove_dir_all(
            std::env::temp_dir().join(format!("gpusched-bench-{}-{name}", std::process::id())),
        );
    }
}
