//! Spread or pack (docs/BEHAVIOUR.md "Spread or pack"): declared jobs take
//! idle GPUs first, do not join a GPU computing flat out, and `--placement
//! pack` keeps best fit; `gpusched simjob --work` shows what sharing costs.

use crate::common;

use common::{Env, wait_for};

fn gpus_of(env: &Env, no: u64) -> Vec<u64> {
    env.job_events(no, "started")[0]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_u64().unwrap())
        .collect()
}

fn ts(env: &Env, no: u64, kind: &str) -> f64 {
    env.job_events(no, kind)[0]["ts"].as_f64().unwrap()
}

/// The run time of job `no`'s attempt (s), from the journal.
fn ran_s(env: &Env, no: u64) -> f64 {
    ts(env, no, "done") - ts(env, no, "started")
}

#[test]
fn eight_declared_jobs_on_eight_gpus_get_one_each_and_pack_fills_four() {
    let jobs = "[vram=10G] gpusched simjob --vram 9000 --ramp 0.1 --hold 2\n".repeat(8);
    for (placement, per_gpu) in [("spread", 1), ("pack", 2)] {
        let env = Env::new(&jobs);
        let out = env.run(&["--sim", "8", "--poll", "0.2", "--placement", placement]);
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
        let mut used: Vec<u64> = (1..=8).flat_map(|no| gpus_of(&env, no)).collect();
        used.sort_unstable();
        let expected: Vec<u64> = (0..8 / per_gpu)
            .flat_map(|g| std::iter::repeat_n(g, per_gpu as usize))
            .collect();
        assert_eq!(used, expected, "--placement {placement}");
    }
}

/// Two compute-bound jobs on one GPU: spread runs them one after the
/// other, each at full speed, and says why the second waits; pack runs
/// them side by side, each at half speed (`simjob --work`).
#[test]
fn spread_does_not_join_a_gpu_computing_flat_out_and_pack_pays_for_sharing() {
    let jobs = "[vram=4G] gpusched simjob --vram 3000 --ramp 0.1 --work 1.5 --util 100 # a\n\
                [vram=4G] gpusched simjob --vram 3000 --ramp 0.1 --work 1.5 --util 100 # b\n";
    // A 2 s poll and 4 s of work: job 1 counts as computing flat out for
    // its first 2 s whatever the machine's load, and a sample by then has
    // seen it compute (a simjob that had not started by the first sample
    // would not count, by the rule, and job 2 would join).
    let env = Env::new(&jobs.replace("--work 1.5", "--work 4"));
    let sched = env.spawn(&["--sim", "1", "--poll", "2", "--watch"]);
    wait_for("job 2 to wait for the busy GPU", &mut || {
        std::fs::read_to_string(env.logs.join("status.json"))
            .is_ok_and(|s| s.contains("GPU 0 computing flat out (job 1 not measured yet"))
    });
    wait_for("both jobs to end", &mut || env.events("done").len() == 2);
    sched.stop();
    assert!(
        ts(&env, 2, "started") >= ts(&env, 1, "done"),
        "job 2 joined job 1"
    );

    let env = Env::new(jobs);
    let out = env.run(&["--sim", "1", "--poll", "0.2", "--placement", "pack"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(ts(&env, 2, "started") < ts(&env, 1, "done"));
    // 1.5 s of work each at half speed while both run: at least 2.25 s
    // for the first to end (a loaded machine only makes it longer).
    for no in [1, 2] {
        assert!(
            ran_s(&env, no) > 2.25,
            "job {no} ran {:.2} s",
            ran_s(&env, no)
        );
    }
}

/// Jobs that ask for little of a GPU (memory-bound) still share one once
/// every GPU has work.
#[test]
fn memory_bound_jobs_still_share_a_gpu_under_spread() {
    let jobs = "[vram=2G] gpusched simjob --vram 1500 --ramp 0.1 --hold 3 --util 20\n".repeat(4);
    let env = Env::new(&jobs);
    let out = env.run(&["--sim", "2", "--poll", "0.2"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let starts: Vec<f64> = (1..=4).map(|no| ts(&env, no, "started")).collect();
    let first_end = (1..=4)
        .map(|no| ts(&env, no, "done"))
        .fold(f64::INFINITY, f64::min);
    assert!(
        starts.iter().all(|s| *s < first_end),
        "all four should run at once on two GPUs: starts {starts:?}, first end {first_end}"
    );
}

/// docs/BEHAVIOUR.md "Spread or pack": a flood of short jobs is never
/// held to one job per GPU. The first of a family waits for no sample;
/// once it has ended ok before any sample (a tiny job: it left its GPU
/// idle), the rest of its family shares at once — here all of them
/// together on one GPU with a 30 s poll, where the rule that counted
/// every start as computing flat out until the next sample ran them one
/// at a time.
#[test]
fn a_flood_of_short_jobs_shares_once_its_family_is_known_to_leave_room() {
    let jobs: String = (1..=12)
        .map(|i| format!("[vram=100M] sleep 0.3 # {i}\n"))
        .collect();
    let env = Env::new(&jobs);
    let out = env.run(&["--sim", "1", "--poll", "30"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let attempts = env.attempts();
    let first_end = attempts
        .iter()
        .map(|(_, end, _)| *end)
        .fold(f64::INFINITY, f64::min);
    // Every job that started after the first ended ran beside others.
    let most_at_once = attempts
        .iter()
        .map(|(start, _, _)| {
            attempts
                .iter()
                .filter(|(s, e, _)| s <= start && e > start)
                .count()
        })
        .max()
        .unwrap();
    assert!(
        most_at_once >= 6,
        "at most {most_at_once} ran at once (first end {first_end}): {attempts:?}"
    );
}

/// Run times decide before utilisation (docs/BEHAVIOUR.md "Spread or
/// pack"): a family at 80 % utilisation shares at first, but once its runs
/// sharing a GPU took 1.6× its runs alone (two `--util 80` jobs ask 160 %
/// of one GPU), the next is kept off a GPU one of them computes on, and the
/// wait reason says what was measured.
#[test]
fn a_family_that_ran_slower_sharing_is_spread_and_the_reason_says_so() {
    let job = "gpusched simjob --vram 3000 --ramp 0.1 --work 1.2 --util 80";
    let jobs = format!(
        "[vram=4G] {job}\n[vram=4G after=1] {job}\n[vram=4G after=2] {job}\n[vram=4G after=2] {job}\n[vram=4G after=3,4] {job}\n[vram=4G after=3,4] {job}\n"
    );
    let env = Env::new(&jobs);
    let sched = env.spawn(&["--sim", "1", "--poll", "0.2", "--watch"]);
    wait_for("the wait reason to say what was measured", &mut || {
        std::fs::read_to_string(env.logs.join("status.json"))
            .is_ok_and(|s| s.contains("family ran 1.") && s.contains("slower sharing"))
    });
    wait_for("every job to end", &mut || env.events("done").len() == 6);
    sched.stop();
    // Jobs 3 and 4 shared (the family left room by utilisation)...
    assert!(
        ts(&env, 4, "started") < ts(&env, 3, "done"),
        "3 and 4 shared"
    );
    assert!(
        ran_s(&env, 3) > 1.2 * 1.25,
        "sharing slowed them: {:.2} s",
        ran_s(&env, 3)
    );
    // ...so 5 and 6 ran one after the other.
    let (first, second) = if ts(&env, 5, "started") <= ts(&env, 6, "started") {
        (5, 6)
    } else {
        (6, 5)
    };
    assert!(
        ts(&env, second, "started") >= ts(&env, first, "done"),
        "job {second} joined job {first}"
    );
}

/// What a family did to its GPU is read back from the journal: a
/// restarted scheduler shares a GPU between two jobs of a family its
/// journal saw at 30 % in its very first round, where a family it knows
/// nothing of waits for a sample first.
#[test]
fn a_restarted_scheduler_knows_from_its_journal_which_families_share() {
    let job = |n: u32| {
        format!("[vram=4G] gpusched simjob --vram 3000 --ramp 0.1 --hold 1.5 --util 30 # {n}\n")
    };
    let starts_apart = |env: &Env, a: u64, b: u64| {
        (env.job_events(a, "started")[0]["ts"].as_f64().unwrap()
            - env.job_events(b, "started")[0]["ts"].as_f64().unwrap())
        .abs()
    };
    // Nothing known: the second waits for a sample of the first.
    let fresh = Env::new(&format!("{}{}", job(2), job(3)));
    let out = fresh.run(&["--sim", "1", "--poll", "1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(starts_apart(&fresh, 1, 2) > 0.5, "{}", out.stdout);
    // Known from an earlier run's journal: both start at once.
    let env = Env::new(&job(1));
    let out = env.run(&["--sim", "1", "--poll", "0.2"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    env.write_jobs(&format!("{}{}{}", job(1), job(2), job(3)));
    let out = env.run(&["--sim", "1", "--poll", "1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(starts_apart(&env, 2, 3) < 0.2, "{}", out.stdout);
}

/// A job's own utilisation is its processes' (docs/BEHAVIOUR.md "Spread
/// or pack"; simulated GPUs report each process's, as NVML does): two
/// simulated jobs asking 60 % and 50 % of one GPU read 100 % together,
/// which is neither one's. The short one, only ever seen beside the
/// other, journals its 50 %; the long one its 60 %. (Where a GPU cannot
/// report per process, `nvml::a_jobs_own_utilisation_is_its_processes_not_its_gpus`
/// covers the rule of samples alone.)
#[test]
fn a_neighbours_utilisation_is_not_taken_for_a_jobs_own() {
    let env = Env::new(
        "[vram=4G family=long] gpusched simjob --vram 3000 --ramp 0.05 --hold 3 --util 60\n\
         [vram=4G family=short] gpusched simjob --vram 1000 --ramp 0.05 --hold 1 --util 50\n",
    );
    let out = env.run(&["--sim", "1", "--poll", "0.2"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        ts(&env, 2, "started") < ts(&env, 1, "done") - 1.5,
        "the short job ran beside the long one"
    );
    let done = |no| env.job_events(no, "done").pop().expect("done");
    let (long, short) = (done(1), done(2));
    assert!(short["avg_util"].as_f64().unwrap() > 80.0, "{short}");
    // Its own 50 %, though never alone; a sample taken as it ends, under
    // load, may pull a mean down a little.
    let own = short["own_util"]
        .as_f64()
        .expect("measured beside the other");
    assert!((35.0..=55.0).contains(&own), "{short}");
    // Its 60 %, not the 100 % the two read together.
    let own = long["own_util"].as_f64().expect("measured");
    assert!((45.0..=75.0).contains(&own), "{long}");
    assert!(long["avg_util"].as_f64().unwrap() > own, "{long}");
}
