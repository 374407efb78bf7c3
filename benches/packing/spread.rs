//! Spread against pack, under contention (docs/PERFORMANCE.md
//! "Spread or pack"): seeded traces played in simulated time through the
//! scheduler's own `allocation::plan`, where jobs that share a GPU
//! progress as `gpusched simjob --work` does — at full speed while the
//! jobs on a GPU ask for 100 % of it or less (by their utilisation), in
//! proportion when they ask for more. Each trace is played declared with
//! `--placement spread`, declared with `--placement pack`, and undeclared
//! (a whole GPU per job, as a bash loop over `CUDA_VISIBLE_DEVICES`
//! would). A round runs at every end and every 5 s sample. Prints the
//! makespan and the mean time from submission to end.
//!
//! The traces:
//! - compute-bound: 24 jobs of 4–16 GiB at 100 % utilisation, 60–600 s
//!   of work alone, on 8 GPUs of 80 GiB (a sweep on a lab box);
//! - memory-bound: 48 jobs of 2–6 GiB at 10–30 %, 60–600 s, on 4 GPUs of
//!   24 GiB (small evaluations that lose nothing by sharing);
//! - mixed: the memory-bound jobs with one 20 GiB, 100 % job in eight
//!   (what `pack` keeps GPUs whole for).

use crate::common::Rng;
use gpusched::allocation::{GpuLoad, Occupant, PlaceOptions, Placement, PlacementPolicy, Request};
use gpusched::policy::round;

/// One job: what it asks, its utilisation (percent) and its work alone (s).
#[derive(Clone, Copy)]
struct Job {
    request: Request,
    util: u32,
    work_s: f64,
}

/// A trace and the box it runs on: (GPUs, MiB each, jobs).
type Box = (u32, u64, Vec<Job>);

fn job(vram_gib: u64, util: u32, work_s: f64) -> Job {
    Job {
        request: Request::declared(vram_gib * 1024, 1),
        util,
        work_s,
    }
}

fn compute_bound(rng: &mut Rng) -> Box {
    let jobs = (0..24)
        .map(|_| job(4 + rng.below(13), 100, (60 + rng.below(541)) as f64))
        .collect();
    (8, 81_920, jobs)
}

fn memory_bound(rng: &mut Rng, big_every: Option<u64>) -> Box {
    let jobs = (0..48u64)
        .map(|n| match big_every {
            Some(every) if n % every == every - 1 => job(20, 100, (60 + rng.below(541)) as f64),
            _ => job(
                2 + rng.below(5),
                10 + rng.below(21) as u32,
                (60 + rng.below(541)) as f64,
            ),
        })
        .collect();
    (4, 24_000, jobs)
}

/// How fast each running job works (0–1), as `simjob --work` does.
fn speeds(running: &[(usize, u32, f64)], jobs: &[Job]) -> Vec<f64> {
    running
        .iter()
        .map(|&(_, gpu, _)| {
            let asked: u32 = running
                .iter()
                .filter(|(_, g, _)| *g == gpu)
                .map(|(j, _, _)| jobs[*j].util)
                .sum();
            gpusched::simjob::shared_speed(asked)
        })
        .collect()
}

/// The scheduler's default `--poll` (s): a round runs at every sample.
const POLL_S: f64 = 5.0;

/// Plays `jobs` on `gpus` GPUs of `mib` each, all submitted at 0, a
/// placement round at every end and every sample ([`POLL_S`]), which sees
/// each GPU's utilisation as the sum of its jobs'; (makespan, mean end)
/// in seconds.
fn play(gpus: u32, mib: u64, jobs: &[Job], opts: &PlaceOptions, declared: bool) -> (f64, f64) {
    let requests: Vec<Request> = jobs
        .iter()
        .map(|j| Request {
            vram_mib: if declared { j.request.vram_mib } else { None },
            ..j.request
        })
        .collect();
    let mut waiting: Vec<usize> = (0..jobs.len()).collect();
    // (job, GPU, work left in seconds).
    let mut running: Vec<(usize, u32, f64)> = Vec::new();
    let mut ends = vec![0.0; jobs.len()];
    let mut now = 0.0;
    loop {
        let mut loads: Vec<GpuLoad> = (0..gpus)
            .map(|index| GpuLoad {
                index,
                total_mib: mib,
                used_mib: running
                    .iter()
                    .filter(|(_, g, _)| *g == index)
                    .filter_map(|(j, _, _)| requests[*j].vram_mib)
                    .sum(),
                occupants: running
                    .iter()
                    .filter(|(_, g, _)| *g == index)
                    .map(|(j, _, _)| Occupant {
                        declared_mib: requests[*j].vram_mib,
                        current_mib: requests[*j].vram_mib,
                        ..Default::default()
                    })
                    .collect(),
                util_percent: Some(
                    running
                        .iter()
                        .filter(|(_, g, _)| *g == index)
                        .map(|(j, _, _)| jobs[*j].util)
                        .sum::<u32>()
                        .min(100),
                ),
                ..GpuLoad::default()
            })
            .collect();
        let asks: Vec<Request> = waiting.iter().map(|&j| requests[j]).collect();
        let placed = round::plan_queue(&asks, &mut loads, opts);
        let mut still = Vec::new();
        for (&j, placement) in waiting.iter().zip(placed) {
            match placement {
                Placement::Start(chosen) => running.push((j, chosen[0], jobs[j].work_s)),
                Placement::NotNow => still.push(j),
                Placement::Infeasible(why) => panic!("job {j} can never start: {why}"),
            }
        }
        waiting = still;
        if running.is_empty() {
            assert!(waiting.is_empty(), "jobs left that cannot start");
            break;
        }
        let speed = speeds(&running, jobs);
        // To the next end, or the next sample (a round runs at both).
        let step = running
            .iter()
            .zip(&speed)
            .map(|((_, _, left), s)| left / s)
            .fold(POLL_S, f64::min);
        now += step;
        for ((_, _, left), s) in running.iter_mut().zip(&speed) {
            *left -= step * s;
        }
        running.retain(|&(j, _, left)| {
            let done = left <= 1e-9;
            if done {
                ends[j] = now;
            }
            !done
        });
    }
    (now, ends.iter().sum::<f64>() / ends.len() as f64)
}

/// Prints the spread, pack and undeclared figures of each kind of trace,
/// as medians over `traces` seeds.
pub fn report(traces: u64) {
    println!();
    println!(
        "spread or pack, under contention (jobs sharing a GPU work in proportion when they ask for more than 100 % of it); median over {traces} seeded traces, makespan / mean end (s)"
    );
    println!(
        "{:<15} {:>17} {:>17} {:>17}",
        "trace", "spread", "pack", "undeclared"
    );
    type Make = fn(&mut Rng) -> Box;
    let kinds: [(&str, Make); 3] = [
        ("compute-bound", compute_bound),
        ("memory-bound", |rng| memory_bound(rng, None)),
        ("mixed", |rng| memory_bound(rng, Some(8))),
    ];
    for (name, make) in kinds {
        let mut rows: [Vec<(f64, f64)>; 3] = Default::default();
        for seed in 0..traces {
            let mut rng = Rng(0x5851_f42d_4c95_7f2d ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let (gpus, mib, jobs) = make(&mut rng);
            for (row, (policy, declared)) in rows.iter_mut().zip([
                (PlacementPolicy::Spread, true),
                (PlacementPolicy::Pack, true),
                (PlacementPolicy::Spread, false),
            ]) {
                let opts = PlaceOptions {
                    policy,
                    ..PlaceOptions::default()
                };
                row.push(play(gpus, mib, &jobs, &opts, declared));
            }
        }
        let median = |v: &[(f64, f64)], pick: fn(&(f64, f64)) -> f64| {
            let mut xs: Vec<f64> = v.iter().map(pick).collect();
            xs.sort_by(f64::total_cmp);
            xs[xs.len() / 2]
        };
        let cells: Vec<String> = rows
            .iter()
            .map(|r| format!("{:.0} / {:.0}", median(r, |x| x.0), median(r, |x| x.1)))
            .collect();
        println!(
            "{name:<15} {:>17} {:>17} {:>17}",
            cells[0], cells[1], cells[2]
        );
    }
}
