//! Benchmark of gpusched at scale, in `--sim` mode (the performance issue
//! "flat cost at scale"):
//!
//!     cargo bench --bench scale                       # full: several minutes
//!     GPUSCHED_BENCH_FAST=1 cargo bench --bench scale # a quick look
//!     cargo bench --bench scale -- append             # one section (throughput,
//!                                                     # append, rounds, gpus64, spread)
//!     GPUSCHED_BENCH_BIN=old/gpusched cargo bench …   # another build, side by side
//!
//! Prints:
//! 1. throughput of tiny jobs (`[vram=100M] true N`, `--sim 2
//!    --placement pack`, the loop's own pace; spread's is printed last): jobs/s
//!    over the whole run and from the first start to the last end in the
//!    journal, at 500, 20,000 and 100,000 jobs (fast: 500, 5,000, 20,000),
//!    and the cost per job at the larger sizes relative to 500 [≤ 1.3×;
//!    20,000 jobs launch to exit ≥ 2,000 jobs/s on 2 cores]; the 20,000
//!    (fast: 5,000) again with `--no-containment`, the cost of each job's
//!    own cgroup where gpusched makes them;
//! 2. a 1,000,000-line jobs file (fast: 100,000) whose lines mostly wait:
//!    the first runs on GPU 0 of `--sim 2`, the rest are `[vram=20G
//!    gpus=2]`: start-up to the first dispatch [≤ 1.0 s], append-to-start
//!    latency of a line that fits on GPU 1, median of 9 [≤ 30 ms],
//!    scheduler CPU over 5 idle seconds [≈ 0], peak RSS [≤ 250 MiB];
//! 3. 64 GPUs: one placement round over 10,000 pending jobs (1 to 8 GPUs
//!    each), in process, per dispatched job [well under 1 ms]; one
//!    backfill round over 64 busy GPUs and 10,000 pending jobs with
//!    estimates, with a reservation for each of the first 32 waiting jobs
//!    and with one (EASY); and 2,000 `gpus=8` jobs end to end on
//!    `--sim 64`.
//!
//! Log directories are under the system's temp directory (`$TMPDIR`, else
//! /tmp), as a user's would be on a disk.

#![allow(
    clippy::disallowed_methods,
    reason = "benchmarks read the temporary files their runs made"
)]

mod common;

use common::{
    Rng, cpu_seconds, now, peak_rss_mib, read_stamps, scheduler, stop, wait_until, wanted,
};
use gpusched::allocation::{GpuLoad, Occupant, PlaceOptions, Placement, Request};
use gpusched::policy::backfill::RESERVED_JOBS;
use gpusched::policy::groups::GroupLimits;
use gpusched::policy::round::{self, ReadyJob, RoundRules};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// (first `started`, last `done`) in a log directory's journal (Unix s).
fn journal_span(log_dir: &Path) -> (f64, f64) {
    let text = std::fs::read_to_string(log_dir.join("journal.jsonl")).unwrap();
    let (mut first, mut last) = (f64::MAX, 0.0f64);
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let ts = event["ts"].as_f64().unwrap_or(0.0);
        match event["event"].as_str() {
            Some("started") => first = first.min(ts),
            Some("done") => last = last.max(ts),
            _ => {}
        }
    }
    (first, last)
}

/// Figure 1: `n` tiny jobs on `gpus` simulated GPUs. Returns jobs per
/// second over the whole run (start of the scheduler to its exit, as a
/// user waits for a sweep) and between the first start and the last end
/// in the journal (the steady state).
fn throughput(dir: &Path, n: usize, gpus: u32, attrs: &str, placement: &str) -> (f64, f64) {
    throughput_with(dir, n, gpus, attrs, &["--placement", placement])
}

/// [`throughput`] with the scheduler's other arguments `args`.
fn throughput_with(dir: &Path, n: usize, gpus: u32, attrs: &str, args: &[&str]) -> (f64, f64) {
    let mut jobs = String::with_capacity(n * 30);
    for i in 0..n {
        jobs.push_str(&format!("[{attrs}] true {i}\n"));
    }
    std::fs::write(dir.join("jobs.txt"), jobs).unwrap();
    let spawned = Instant::now();
    let gpus = gpus.to_string();
    let mut all = vec!["--sim", &gpus];
    all.extend_from_slice(args);
    let mut child = scheduler(dir, &all);
    assert!(child.wait().unwrap().success());
    let wall = spawned.elapsed().as_secs_f64();
    let (first, last) = journal_span(&dir.join("logs"));
    (n as f64 / wall, n as f64 / (last - first))
}

/// Figure 2: a jobs file of `lines` lines, all but the first waiting for
/// both GPUs while the first runs on one. Returns start-up to its first instruction, append-to-start latency
/// (median, max), CPU over 5 idle seconds, peak RSS (MiB).
fn big_file(dir: &Path, lines: usize) -> (f64, f64, f64, f64, f64) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(dir.join("jobs.txt")).unwrap());
    writeln!(
        file,
        "[vram=20G] date +%s.%N > first; gpusched simjob --vram 18000 --ramp 0.1 --hold 600"
    )
    .unwrap();
    for i in 1..lines {
        writeln!(file, "[vram=20G gpus=2] python train.py --seed {i}").unwrap();
    }
    drop(file);
    let spawned = now();
    let child = scheduler(dir, &["--sim", "2", "--poll", "2", "--watch"]);
    wait_until("the first job", Duration::from_secs(300), || {
        !read_stamps(&dir.join("first")).is_empty()
    });
    let startup = read_stamps(&dir.join("first"))[0] - spawned;
    std::thread::sleep(Duration::from_secs(2));
    let mut latencies = Vec::new();
    for i in 0..9 {
        let stamp = dir.join(format!("lat{i}"));
        let appended = now();
        let mut jobs = std::fs::File::options()
            .append(true)
            .open(dir.join("jobs.txt"))
            .unwrap();
        // 1 GiB fits on the idle GPU; the two-GPU lines do not.
        jobs.write_all(format!("[vram=1G] date +%s.%N > lat{i}\n").as_bytes())
            .unwrap();
        drop(jobs);
        wait_until("the appended job", Duration::from_secs(120), || {
            !read_stamps(&stamp).is_empty()
        });
        latencies.push(read_stamps(&stamp)[0] - appended);
        std::thread::sleep(Duration::from_millis(300));
    }
    latencies.sort_by(f64::total_cmp);
    std::thread::sleep(Duration::from_secs(1));
    let before = cpu_seconds(child.id());
    std::thread::sleep(Duration::from_secs(5));
    let idle = cpu_seconds(child.id()) - before;
    let rss = peak_rss_mib(child.id());
    stop(child);
    (startup, latencies[4], latencies[8], idle, rss)
}

/// Figure 3: one placement round over 64 GPUs and 10,000 pending jobs, in
/// process. Returns the median round time (ms) and the jobs it started.
fn placement_round() -> (f64, usize) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let gpus: Vec<GpuLoad> = (0..64)
        .map(|index| {
            let occupants: Vec<Occupant> = (0..rng.below(4))
                .map(|_| {
                    let declared = 2000 + rng.below(30_000);
                    Occupant {
                        declared_mib: Some(declared),
                        peak_mib: Some(declared / 2),
                        current_mib: Some(declared / 2),
                        ..Default::default()
                    }
                })
                .collect();
            let used = occupants.iter().filter_map(|o| o.current_mib).sum();
            GpuLoad {
                index,
                total_mib: 81_920,
                used_mib: used,
                occupants,
                ..GpuLoad::default()
            }
        })
        .collect();
    let requests: Vec<Request> = (0..10_000)
        .map(|_| {
            let gpus = match rng.below(10) {
                0 => 8,
                1 | 2 => 2 + rng.below(3) as u32,
                _ => 1,
            };
            Request::declared(1000 + rng.below(40_000), gpus)
        })
        .collect();
    let opts = PlaceOptions::default();
    let mut times = Vec::new();
    let mut started = 0;
    for _ in 0..21 {
        let mut loads = gpus.clone();
        let t = Instant::now();
        let placements = round::plan_queue(&requests, &mut loads, &opts);
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        started = placements
            .iter()
            .filter(|p| matches!(p, Placement::Start(_)))
            .count();
    }
    times.sort_by(f64::total_cmp);
    (times[10], started)
}

/// Figure 3b: one backfill round (the scheduler's own `round::plan`)
/// over 64 busy GPUs whose jobs all have expected ends, and 10,000
/// pending jobs with estimates, with `reserve` reservations (1: EASY).
/// Returns the median round time (ms).
fn backfill_round(reserve: usize) -> f64 {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let gpus: Vec<GpuLoad> = (0..64)
        .map(|index| {
            let occupants: Vec<Occupant> = (0..1 + rng.below(3))
                .map(|_| Occupant {
                    declared_mib: Some(20_000 + rng.below(6_000)),
                    ends_at: Some(10.0 + rng.below(3_600) as f64),
                    ..Occupant::default()
                })
                .collect();
            GpuLoad {
                index,
                total_mib: 81_920,
                occupants,
                ..GpuLoad::default()
            }
        })
        .collect();
    let requests: Vec<(Request, f64)> = (0..10_000)
        .map(|_| {
            let gpus = match rng.below(10) {
                0 => 8,
                1 | 2 => 2 + rng.below(3) as u32,
                _ => 1,
            };
            let request = Request::declared(30_000 + rng.below(40_000), gpus);
            (request, 60.0 + rng.below(3_600) as f64)
        })
        .collect();
    let keys: Vec<String> = (0..requests.len()).map(|i| format!("j{i}")).collect();
    let (opts, groups) = (PlaceOptions::default(), GroupLimits::default());
    let estimate = |i: usize| Some(requests[i].1);
    let mut times = Vec::new();
    for _ in 0..21 {
        let mut loads = gpus.clone();
        let rules = RoundRules {
            place: &opts,
            starvation_hold: None,
            groups: &groups,
            in_group: HashMap::new(),
            quota: None,
            keep_waiting: 200,
            now: 0.0,
            estimate_s: &estimate,
            leaves_room: &|_| false,
            reserve_jobs: reserve,
            cpu_slots: u32::MAX,
            cpu_jobs: u32::MAX,
        };
        let ready = requests
            .iter()
            .enumerate()
            .map(|(index, (request, _))| ReadyJob {
                index,
                request: *request,
                key: &keys[index],
                group: None,
            });
        let t = Instant::now();
        let round = round::plan(&mut loads, rules, ready);
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(round.head.is_some(), "jobs wait with known starts");
    }
    times.sort_by(f64::total_cmp);
    times[10]
}

fn main() {
    let fast = std::env::var_os("GPUSCHED_BENCH_FAST").is_some();
    println!(
        "gpusched scale benchmark ({} mode, --sim; {} CPUs; logs under {})",
        if fast { "fast" } else { "full" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::env::temp_dir().display()
    );
    // Sections, each runnable alone: `cargo bench --bench scale -- append`.
    let mut dirs = Vec::new();
    if wanted("throughput") {
        throughput_section(fast, &mut dirs);
    }
    if wanted("append") {
        append_section(fast, &mut dirs);
    }
    if wanted("rounds") {
        rounds_section();
    }
    if wanted("gpus64") {
        let dir = tmp("gpus64");
        let n = if fast { 500 } else { 2_000 };
        let (rate, _) = throughput(&dir, n, 64, "vram=10G gpus=8", "pack");
        println!("throughput, {n} gpus=8 jobs on --sim 64: {rate:.0} jobs/s over the whole run");
        dirs.push(dir);
    }
    if wanted("spread") {
        // Spread, the default: a family whose jobs end before any sample (or
        // measured under 90 % utilisation) shares a GPU, so a flood of tiny
        // jobs goes as fast as with pack (docs/BEHAVIOUR.md "Spread or pack").
        let dir = tmp("spread");
        let (rate, _) = throughput(&dir, 500, 2, "vram=100M", "spread");
        println!(
            "throughput, 500 tiny jobs on --sim 2 --placement spread: {rate:.0} jobs/s over the whole run"
        );
        dirs.push(dir);
    }
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A fresh directory for one run under the temp directory.
fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpusched-scale-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Figure 1 (see the top of this file); its directories go to `dirs`.
fn throughput_section(fast: bool, dirs: &mut Vec<PathBuf>) {
    let sizes: [usize; 3] = if fast {
        [500, 5_000, 20_000]
    } else {
        [500, 20_000, 100_000]
    };
    let mut rates = Vec::new();
    for n in sizes {
        let dir = tmp(&format!("tp{n}"));
        let (rate, steady) = throughput(&dir, n, 2, "vram=100M", "pack");
        println!(
            "throughput, {n} tiny jobs on --sim 2 --placement pack: {rate:.0} jobs/s over the whole run, {steady:.0} jobs/s first start to last end   (target ≥ 2000 at 20,000)"
        );
        rates.push(rate);
        // Kept until the end: removing thousands of files right before
        // the next measurement would slow its file creations (ext4).
        dirs.push(dir);
    }
    // Each job in its own cgroup (docs/BEHAVIOUR.md "Containment") costs
    // the kernel a cgroup made, joined and removed per job: the same sweep
    // without it.
    let n = sizes[1];
    let dir = tmp(&format!("tp{n}-plain"));
    let args = ["--placement", "pack", "--no-containment"];
    let (rate, steady) = throughput_with(&dir, n, 2, "vram=100M", &args);
    println!(
        "throughput, {n} tiny jobs as above with --no-containment: {rate:.0} jobs/s over the whole run, {steady:.0} jobs/s first start to last end"
    );
    dirs.push(dir);
    println!(
        "cost per job (whole run) at {} and {} vs 500 jobs: {:.2}× and {:.2}×   (target ≤ 1.3×)",
        sizes[1],
        sizes[2],
        rates[0] / rates[1],
        rates[0] / rates[2]
    );
}

/// Figure 2 (see the top of this file); its directory goes to `dirs`.
fn append_section(fast: bool, dirs: &mut Vec<PathBuf>) {
    let lines = if fast { 100_000 } else { 1_000_000 };
    let dir = tmp("big");
    let (startup, median, worst, idle, rss) = big_file(&dir, lines);
    println!(
        "{lines}-line jobs file: start-up to first dispatch {startup:.2} s   (target ≤ 1.0 s)"
    );
    println!(
        "{lines}-line jobs file: append-to-start median of 9 {:.0} ms (max {:.0} ms)   (target ≤ 30 ms)",
        median * 1000.0,
        worst * 1000.0
    );
    println!("{lines}-line jobs file: scheduler CPU over 5 idle s {idle:.2} CPU-s   (target ≈ 0)");
    println!("{lines}-line jobs file: peak RSS {rss:.0} MiB   (target ≤ 250 MiB)");
    dirs.push(dir);
}

/// Figure 3's rounds, in process.
fn rounds_section() {
    let (round_ms, started) = placement_round();
    println!(
        "placement round, 64 GPUs × 10,000 pending jobs (1–8 GPUs each): {round_ms:.2} ms, {started} started, {:.3} ms per started job   (target ≪ 1 ms)",
        round_ms / started.max(1) as f64
    );
    for reserve in [RESERVED_JOBS, 1] {
        let ms = backfill_round(reserve);
        println!(
            "backfill round, 64 busy GPUs × 10,000 pending jobs with estimates, {reserve} reservation(s): {ms:.2} ms"
        );
    }
}
