//! Packing and backfill benchmark (docs/PERFORMANCE.md "Backfill"):
//!
//!     cargo bench --bench packing
//!
//! Seeded traces of declared-VRAM jobs (60 jobs on 4 GPUs of 24000 MiB;
//! 2–22 GiB each, one in ten on two GPUs, 10–600 s, `timeout=` 1–1.5×
//! the run time, which is what backfill knows) are played through the
//! scheduler's own placement round (`policy::round::plan`) in simulated
//! time, as the scheduler would play them with instant starts and ends:
//! each job ends at its run time, and a round runs at every end. Prints,
//! per trace and over all of them:
//!
//! 1. makespan ÷ the placement lower bound (Σ (declared + margin) × GPUs
//!    × run time ÷ the box's capacity, or the longest job) with backfill
//!    [≤ 1.10], with no reservation for the head job (first fit past any
//!    waiting job, as before), and in strict file order (a job never
//!    starts before an earlier one);
//! 2. how many jobs start later than in strict file order, and the most
//!    any job is delayed (s), with backfill and without the reservation;
//! 3. how many head jobs got a reservation, and whether any started after
//!    the start first reserved for it [none: backfill never delays the
//!    head job];
//! 4. a stronger lower bound over the first (jobs that cannot share a GPU
//!    take their GPU-seconds one after another): the least makespan any
//!    schedule could reach on the trace, whatever its order, and how far
//!    backfill is from it;
//! 5. the shortest makespan a search finds when it knows every run time
//!    and ignores file order (the best of 3,000 start orders, from
//!    longest first; `GPUSCHED_BENCH_SEARCH=N` tries N): a schedule that exists, so the least possible
//!    makespan lies between (4) and this.
//!
//! With `-- --alternatives` it also plays backfill with the jobs after
//! the head job tried in other orders than the file's (longest
//! `timeout=`, most VRAM, their product, best fit across jobs) and prints
//! what each gains and what it costs the jobs that wait.
//!
//! Then spread against pack under contention (see `packing/spread.rs`).
//!
//! `GPUSCHED_BENCH_GPU_MIB=81920` plays the same traces on bigger GPUs;
//! `GPUSCHED_BENCH_EXACT=1` makes every `timeout=` the real run time.
//!
//! The Python original is not run here: it is not installed on the
//! project's machines.

#![allow(
    clippy::disallowed_methods,
    reason = "benchmarks read the temporary files their runs made"
)]

mod common;
#[path = "packing/spread.rs"]
mod spread;

use common::Rng;
use gpusched::allocation::{
    GpuLoad, Occupant, PlaceOptions, Placement, Planner, Request, headroom_mib,
};
use gpusched::policy::backfill::RESERVED_JOBS;
use gpusched::policy::groups::GroupLimits;
use gpusched::policy::round::{self, ReadyJob, RoundRules};
use std::collections::HashMap;

const GPUS: u32 = 4;
/// Each GPU's memory (MiB): 24000, or `GPUSCHED_BENCH_GPU_MIB`.
fn gpu_mib() -> u64 {
    static MIB: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *MIB.get_or_init(|| {
        std::env::var("GPUSCHED_BENCH_GPU_MIB")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(24_000)
    })
}
const JOBS: usize = 60;
const TRACES: u64 = 20;

/// One job of a trace.
#[derive(Clone, Copy)]
struct Job {
    request: Request,
    /// Its real run time (s).
    run_s: f64,
    /// Its `timeout=` (s): what backfill knows.
    timeout_s: f64,
}

/// Whether every `timeout=` is the job's real run time
/// (`GPUSCHED_BENCH_EXACT=1`), to see what estimate errors cost.
fn exact_estimates() -> bool {
    std::env::var_os("GPUSCHED_BENCH_EXACT").is_some()
}

/// A seeded trace.
fn trace(seed: u64) -> Vec<Job> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d));
    (0..JOBS)
        .map(|_| {
            let vram = (2 + rng.below(21)) * 1024;
            let gpus = if rng.below(10) == 0 { 2 } else { 1 };
            let run_s = (10 + rng.below(591)) as f64;
            let timeout_s = (run_s * (1.0 + rng.below(51) as f64 / 100.0)).ceil();
            let timeout_s = if exact_estimates() { run_s } else { timeout_s };
            Job {
                request: Request::declared(vram, gpus),
                run_s,
                timeout_s,
            }
        })
        .collect()
}

/// The placement lower bound of a trace (s).
fn lower_bound(jobs: &[Job], opts: &PlaceOptions) -> f64 {
    let work: f64 = jobs
        .iter()
        .map(|j| {
            (j.request.vram_mib.unwrap() + opts.margin_mib) as f64
                * f64::from(j.request.gpus)
                * j.run_s
        })
        .sum();
    let longest = jobs.iter().map(|j| j.run_s).fold(0.0, f64::max);
    (work / (f64::from(GPUS) * gpu_mib() as f64)).max(longest)
}

/// The strongest lower bound here (s): the area bound, the longest job,
/// and for every size threshold α (each job's size as a fraction of a
/// GPU, margin included), the GPU-seconds that jobs which cannot share
/// a GPU must take one after another (Martello and Toth's bin-packing
/// bound L2, over time): a job over 1 − α shares its GPU with no job of
/// α or more; no two jobs over one half share one; jobs from α to one
/// half fill what those over one half leave, and the rest needs GPU-
/// seconds of its own. No schedule, whatever its order, ends sooner.
fn tighter_bound(jobs: &[Job], opts: &PlaceOptions) -> f64 {
    let size = |j: &Job| (j.request.vram_mib.unwrap() + opts.margin_mib) as f64 / gpu_mib() as f64;
    let gpu_s = |j: &Job| f64::from(j.request.gpus) * j.run_s;
    let mut best = lower_bound(jobs, opts);
    for alpha in jobs.iter().map(size).filter(|a| *a <= 0.5) {
        let (mut big, mut medium, mut medium_room, mut small) = (0.0, 0.0, 0.0, 0.0);
        for j in jobs {
            let x = size(j);
            if x > 1.0 - alpha {
                big += gpu_s(j);
            } else if x > 0.5 {
                medium += gpu_s(j);
                medium_room += (1.0 - x) * gpu_s(j);
            } else if x >= alpha {
                small += x * gpu_s(j);
            }
        }
        let needed = big + medium + (small - medium_room).max(0.0);
        best = best.max(needed / f64::from(GPUS));
    }
    best
}

/// How a trace is played.
#[derive(Clone, PartialEq)]
enum Policy {
    /// The scheduler's round: backfill with a reservation for each of the
    /// first this many waiting jobs (`RESERVED_JOBS`: gpusched; 1: EASY);
    /// the jobs after the first waiting job tried as `Pick` orders them.
    Backfill(usize, Pick),
    /// First fit past waiting jobs, no reservation (estimates unknown).
    FirstFit,
    /// A job never starts before an earlier one.
    Strict,
    /// First fit in this order of the jobs, file order ignored: a
    /// reference for what packing alone could reach, not a policy
    /// gpusched may use.
    InOrder(Vec<usize>),
}

/// The order in which backfill tries the jobs after the head job.
#[derive(Clone, Copy, PartialEq)]
enum Pick {
    /// File order: what gpusched does.
    FileOrder,
    /// Longest `timeout=` first.
    LongestEstimate,
    /// Most VRAM (× GPUs) first.
    LargestVram,
    /// Most VRAM × `timeout=` first.
    LargestArea,
    /// Best fit across jobs: again and again, the job whose start leaves
    /// the least headroom on its GPUs.
    BestFit,
}

impl Pick {
    const ALTERNATIVES: [(Pick, &str); 4] = [
        (Pick::LongestEstimate, "longest timeout= first"),
        (Pick::LargestVram, "most VRAM first"),
        (Pick::LargestArea, "most VRAM × timeout= first"),
        (Pick::BestFit, "best fit across jobs"),
    ];

    /// Sort key: smaller goes first.
    fn key(self, job: &Job, index: usize) -> f64 {
        let vram = (job.request.vram_mib.unwrap() * u64::from(job.request.gpus)) as f64;
        match self {
            Pick::FileOrder | Pick::BestFit => index as f64,
            Pick::LongestEstimate => -job.timeout_s,
            Pick::LargestVram => -vram,
            Pick::LargestArea => -vram * job.timeout_s,
        }
    }
}

/// The jobs a round starts, each with its GPUs.
type Starts = Vec<(usize, Vec<u32>)>;

/// A trace being played, with what its rounds need.
struct Trace<'a> {
    jobs: &'a [Job],
    opts: &'a PlaceOptions,
    keys: Vec<String>,
    groups: GroupLimits,
}

impl Trace<'_> {
    /// One placement round at `now` through the scheduler's own
    /// `round::plan` over `order`, with reservations for up to `reserve`
    /// waiting jobs (0: none, and backfill knows no job's `timeout=`);
    /// returns the starts and the first reservation (job, s).
    fn round(
        &self,
        loads: &mut [GpuLoad],
        order: &[usize],
        now: f64,
        reserve: usize,
    ) -> (Starts, Option<(usize, f64)>) {
        let estimate = |i: usize| (reserve > 0).then_some(self.jobs[i].timeout_s);
        let rules = RoundRules {
            place: self.opts,
            starvation_hold: None,
            groups: &self.groups,
            in_group: HashMap::new(),
            quota: None,
            keep_waiting: usize::MAX,
            now,
            estimate_s: &estimate,
            leaves_room: &|_| false,
            reserve_jobs: reserve,
            cpu_slots: u32::MAX,
            cpu_jobs: u32::MAX,
        };
        let ready = order.iter().map(|&i| ReadyJob {
            index: i,
            request: self.jobs[i].request,
            key: &self.keys[i],
            group: None,
        });
        let round = round::plan(loads, rules, ready);
        let starts = round
            .planned
            .into_iter()
            .filter_map(|p| match p.placement {
                Placement::Start(gpus) => Some((p.index, gpus)),
                _ => None,
            })
            .collect();
        (starts, round.head.map(|(head, at, _)| (head, at)))
    }

    /// `pending` (file order) with the jobs after this round's first
    /// reserved job in the order `pick` tries them.
    fn backfill_order(
        &self,
        loads: &[GpuLoad],
        pending: &[usize],
        (now, reserve): (f64, usize),
        pick: Pick,
    ) -> Vec<usize> {
        let (_, head) = self.round(&mut loads.to_vec(), pending, now, reserve);
        let Some(after) = head.and_then(|(h, _)| pending.iter().position(|&i| i == h)) else {
            return pending.to_vec();
        };
        let (mut order, rest) = (pending[..=after].to_vec(), pending[after + 1..].to_vec());
        if pick != Pick::BestFit {
            let mut rest = rest;
            rest.sort_by(|a, b| {
                pick.key(&self.jobs[*a], *a)
                    .total_cmp(&pick.key(&self.jobs[*b], *b))
            });
            order.extend(rest);
            return order;
        }
        let mut rest = rest;
        // The job whose start (as the round allows it after those taken
        // so far) leaves the least headroom on its GPUs, again and again.
        while let Some((_, at)) = rest
            .iter()
            .enumerate()
            .filter_map(|(at, &job)| {
                let mut then = loads.to_vec();
                let tried: Vec<usize> = order.iter().copied().chain([job]).collect();
                let (starts, _) = self.round(&mut then, &tried, now, reserve);
                let (_, gpus) = starts.iter().find(|(i, _)| *i == job)?;
                let left = gpus
                    .iter()
                    .map(|&g| headroom_mib(&then[g as usize], self.opts.spike_buffer))
                    .min()?;
                Some((left, at))
            })
            .min()
        {
            order.push(rest.remove(at));
        }
        order.extend(rest);
        order
    }
}

/// Plays `jobs` under `policy`; returns each job's start (s), and with
/// backfill each head job's first reserved start (job, s).
fn play(jobs: &[Job], policy: &Policy, opts: &PlaceOptions) -> (Vec<f64>, Vec<(usize, f64)>) {
    let trace = Trace {
        jobs,
        opts,
        keys: (0..jobs.len()).map(|i| format!("j{i}")).collect(),
        groups: GroupLimits::default(),
    };
    let backfill = matches!(policy, Policy::Backfill(..));
    let mut reserved: HashMap<usize, f64> = HashMap::new();
    let mut starts: Vec<Option<f64>> = vec![None; jobs.len()];
    // Running: (job, GPUs, real end).
    let mut running: Vec<(usize, Vec<u32>, f64)> = Vec::new();
    let mut now = 0.0;
    while starts.iter().any(Option::is_none) {
        let mut loads: Vec<GpuLoad> = (0..GPUS)
            .map(|index| GpuLoad {
                index,
                total_mib: gpu_mib(),
                occupants: running
                    .iter()
                    .filter(|(_, gpus, _)| gpus.contains(&index))
                    .map(|&(j, _, _)| Occupant {
                        declared_mib: jobs[j].request.vram_mib,
                        ends_at: backfill.then(|| starts[j].unwrap() + jobs[j].timeout_s),
                        ..Occupant::default()
                    })
                    .collect(),
                ..GpuLoad::default()
            })
            .collect();
        let pending: Vec<usize> = (0..jobs.len()).filter(|&i| starts[i].is_none()).collect();
        let started: Starts = match policy {
            Policy::InOrder(order) => {
                let mut planner = Planner::new(&mut loads, opts, None);
                order
                    .iter()
                    .filter(|&&i| starts[i].is_none())
                    .filter_map(|&i| match planner.next(&jobs[i].request, false) {
                        Placement::Start(gpus) => Some((i, gpus)),
                        _ => None,
                    })
                    .collect()
            }
            Policy::Strict => {
                let mut planner = Planner::new(&mut loads, opts, None);
                pending
                    .iter()
                    .map_while(|&i| match planner.next(&jobs[i].request, false) {
                        Placement::Start(gpus) => Some((i, gpus)),
                        _ => None,
                    })
                    .collect()
            }
            Policy::FirstFit => trace.round(&mut loads, &pending, now, 0).0,
            Policy::Backfill(reserve, pick) => {
                let order = match pick {
                    Pick::FileOrder => pending,
                    _ => trace.backfill_order(&loads, &pending, (now, *reserve), *pick),
                };
                let (started, head) = trace.round(&mut loads, &order, now, *reserve);
                if let Some((head, at)) = head {
                    reserved.entry(head).or_insert(at);
                }
                started
            }
        };
        for (i, gpus) in started {
            starts[i] = Some(now);
            running.push((i, gpus, now + jobs[i].run_s));
        }
        // On to the next end.
        let Some(next) = running.iter().map(|r| r.2).min_by(f64::total_cmp) else {
            panic!("nothing runs and jobs wait: a job that never fits");
        };
        now = next;
        running.retain(|r| r.2 > now);
    }
    let mut reserved: Vec<(usize, f64)> = reserved.into_iter().collect();
    reserved.sort_by_key(|r| r.0);
    (starts.into_iter().map(Option::unwrap).collect(), reserved)
}

/// Longest run first.
fn longest_first(jobs: &[Job]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|a, b| jobs[*b].run_s.total_cmp(&jobs[*a].run_s));
    order
}

/// Start orders tried by [`best_found`]: 3,000, or
/// `GPUSCHED_BENCH_SEARCH`.
fn search_steps() -> usize {
    std::env::var("GPUSCHED_BENCH_SEARCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000)
}

/// The shortest makespan (s) found for `jobs` by a scheduler that knows
/// every run time and may start jobs in any order: first fit in a start
/// order, the order searched from longest first by swapping a few jobs
/// at a time and keeping any order that ends no later ([`search_steps`]
/// orders, seeded). Any schedule it finds is one a scheduler could play,
/// so the least possible makespan is at most this.
fn best_found(jobs: &[Job], opts: &PlaceOptions, seed: u64) -> f64 {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (seed + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut order = longest_first(jobs);
    let mut best = makespan(jobs, &play(jobs, &Policy::InOrder(order.clone()), opts).0);
    for _ in 0..search_steps() {
        let mut tried = order.clone();
        for _ in 0..=rng.below(6) {
            let (a, b) = (rng.below(JOBS as u64), rng.below(JOBS as u64));
            tried.swap(a as usize, b as usize);
        }
        let end = makespan(jobs, &play(jobs, &Policy::InOrder(tried.clone()), opts).0);
        if end <= best {
            (best, order) = (end, tried);
        }
    }
    best
}

/// Head jobs that started after the start first reserved for them, and
/// the most (s).
fn heads_late(starts: &[f64], reserved: &[(usize, f64)]) -> (usize, f64) {
    let late: Vec<f64> = reserved
        .iter()
        .map(|&(job, at)| starts[job] - at)
        .filter(|d| *d > 1e-9)
        .collect();
    (late.len(), late.iter().copied().fold(0.0, f64::max))
}

fn makespan(jobs: &[Job], starts: &[f64]) -> f64 {
    jobs.iter()
        .zip(starts)
        .map(|(j, s)| s + j.run_s)
        .fold(0.0, f64::max)
}

/// Jobs that start later than in strict order, and the most delay (s).
fn delays(starts: &[f64], strict: &[f64]) -> (usize, f64) {
    let late: Vec<f64> = starts
        .iter()
        .zip(strict)
        .map(|(s, t)| s - t)
        .filter(|d| *d > 1e-9)
        .collect();
    (late.len(), late.iter().copied().fold(0.0, f64::max))
}

/// Mean and worst of ratios, as printed.
fn summary(v: &[f64]) -> String {
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let max = v.iter().copied().fold(0.0, f64::max);
    format!("mean {mean:.3}×, worst {max:.3}×")
}

/// What one policy did over the traces.
#[derive(Default)]
struct Tally {
    /// Makespan ÷ lower bound, per trace.
    ratios: Vec<f64>,
    /// Jobs later than in strict order, and the most (s).
    late: (usize, f64),
    /// First reserved jobs, those started after the start first reserved
    /// for them, and the most (s).
    heads: (usize, usize, f64),
    /// First reserved jobs later than in strict order, and the most (s).
    heads_late: (usize, f64),
}

impl Tally {
    /// Adds one trace's play: `starts` and first reservations (job, s),
    /// against strict order's starts and the trace's lower bound (s).
    /// Returns the jobs later than in strict order and the most (s).
    fn add(
        &mut self,
        jobs: &[Job],
        (starts, reserved): &Played,
        strict: &[f64],
        bound: f64,
    ) -> (usize, f64) {
        self.ratios.push(makespan(jobs, starts) / bound);
        let (count, most) = delays(starts, strict);
        self.late = (self.late.0 + count, self.late.1.max(most));
        let (late, by) = heads_late(starts, reserved);
        self.heads = (
            self.heads.0 + reserved.len(),
            self.heads.1 + late,
            self.heads.2.max(by),
        );
        let firsts: Vec<f64> = reserved.iter().map(|&(j, _)| starts[j]).collect();
        let strict_firsts: Vec<f64> = reserved.iter().map(|&(j, _)| strict[j]).collect();
        let (count_h, most_h) = delays(&firsts, &strict_firsts);
        self.heads_late = (self.heads_late.0 + count_h, self.heads_late.1.max(most_h));
        (count, most)
    }

    /// The summary lines.
    fn print(&self, name: &str) {
        println!("{name}: {}", summary(&self.ratios));
        println!(
            "  {} job(s) over all traces started later than in strict order, the most by {:.0} s",
            self.late.0, self.late.1
        );
        if self.heads.0 > 0 {
            println!(
                "  {} first reserved job(s): {} started after the start first reserved for it (the most by {:.0} s) [0]; {} later than in strict order (the most by {:.0} s)",
                self.heads.0, self.heads.1, self.heads.2, self.heads_late.0, self.heads_late.1
            );
        }
    }
}

/// A play's starts (s), and its first reservations (job, s).
type Played = (Vec<f64>, Vec<(usize, f64)>);

fn main() {
    // Best fit: these traces carry no utilisation (nothing to spread
    // for); spread against pack is the last table.
    let opts = PlaceOptions {
        policy: gpusched::allocation::PlacementPolicy::Pack,
        ..PlaceOptions::default()
    };
    println!(
        "{JOBS} declared-VRAM jobs on {GPUS} × {} MiB, {TRACES} seeded traces; makespan ÷ lower bound, and jobs later than in strict file order (count, most seconds)",
        gpu_mib()
    );
    println!(
        "{:>5}  {:>9} {:>7} {:>10} {:>7} {:>8} {:>8} {:>8}  {:>14} {:>14}",
        "trace",
        "backfill",
        "EASY",
        "first-fit",
        "strict",
        "longest",
        "found",
        "least",
        "late backfill",
        "late EASY"
    );
    let policies = [
        (
            "backfill (gpusched: conservative)",
            Policy::Backfill(RESERVED_JOBS, Pick::FileOrder),
        ),
        (
            "EASY backfill (one reservation)",
            Policy::Backfill(1, Pick::FileOrder),
        ),
        ("first fit, no reservation", Policy::FirstFit),
        ("strict file order", Policy::Strict),
    ];
    let mut tallies: Vec<Tally> = policies.iter().map(|_| Tally::default()).collect();
    let (mut longest, mut found, mut least) = (Vec::new(), Vec::new(), Vec::new());
    for seed in 0..TRACES {
        let jobs = trace(seed);
        let bound = lower_bound(&jobs, &opts);
        let strict = play(&jobs, &Policy::Strict, &opts).0;
        let late: Vec<(usize, f64)> = policies
            .iter()
            .zip(&mut tallies)
            .map(|((_, policy), tally)| {
                tally.add(&jobs, &play(&jobs, policy, &opts), &strict, bound)
            })
            .collect();
        longest.push(
            makespan(
                &jobs,
                &play(&jobs, &Policy::InOrder(longest_first(&jobs)), &opts).0,
            ) / bound,
        );
        found.push(best_found(&jobs, &opts, seed) / bound);
        least.push(tighter_bound(&jobs, &opts) / bound);
        let r: Vec<f64> = tallies.iter().map(|t| *t.ratios.last().unwrap()).collect();
        println!(
            "{seed:>5}  {:>8.3}× {:>6.3}× {:>9.3}× {:>6.3}× {:>7.3}× {:>7.3}× {:>7.3}×  {:>5} {:>7.0} s {:>5} {:>7.0} s",
            r[0],
            r[1],
            r[2],
            r[3],
            longest[seed as usize],
            found[seed as usize],
            least[seed as usize],
            late[0].0,
            late[0].1,
            late[1].0,
            late[1].1
        );
    }
    println!();
    for ((name, _), tally) in policies.iter().zip(&tallies) {
        tally.print(name);
    }
    println!("[backfill ≤ 1.10×]");
    println!(
        "longest first, file order ignored (a reference only): {}",
        summary(&longest)
    );
    let within = found.iter().filter(|r| **r <= 1.10).count();
    println!(
        "found: the best of {} start orders, run times known and file order ignored: {}; {within} of {TRACES} traces within 1.10×",
        search_steps(),
        summary(&found)
    );
    println!(
        "least: no schedule can end sooner (the bound for jobs that cannot share a GPU): {}",
        summary(&least)
    );
    let from_least: Vec<f64> = tallies[0]
        .ratios
        .iter()
        .zip(&least)
        .map(|(b, l)| b / l)
        .collect();
    println!(
        "backfill ÷ that least possible makespan: {}",
        summary(&from_least)
    );
    spread::report(TRACES);
    if std::env::args().any(|a| a == "--alternatives") {
        alternatives(&opts);
    } else {
        println!(
            "(`cargo bench --bench packing -- --alternatives` adds the backfill orders tried and not kept)"
        );
    }
}

/// The orders tried for the jobs after the first reserved job, beside
/// file order.
fn alternatives(opts: &PlaceOptions) {
    println!();
    println!(
        "backfill, the jobs after the first reserved job tried in another order than the file's:"
    );
    for reserve in [RESERVED_JOBS, 1] {
        // Best fit takes the jobs that can start first, so with many
        // reservations none of the later ones is reserved before they
        // start: it is measured with one (EASY) only.
        for (pick, name) in [(Pick::FileOrder, "file order (gpusched)")]
            .into_iter()
            .chain(Pick::ALTERNATIVES)
            .filter(|(pick, _)| reserve == 1 || *pick != Pick::BestFit)
        {
            let mut tally = Tally::default();
            for seed in 0..TRACES {
                let jobs = trace(seed);
                let strict = play(&jobs, &Policy::Strict, opts).0;
                let played = play(&jobs, &Policy::Backfill(reserve, pick), opts);
                tally.add(&jobs, &played, &strict, lower_bound(&jobs, opts));
            }
            let kind = if reserve == 1 { "EASY" } else { "conservative" };
            tally.print(&format!("{kind}, {name}"));
        }
    }
}
