//! Black-box tests of sweeps and groups (docs/BEHAVIOUR.md "Sweeps",
//! "Groups"): `gpusched grid` makes and appends a sweep, its mistakes exit
//! 2 naming them; `[group=NAME limit=N]` never runs more than N of a
//! group at once and does reach N (judged by the times the jobs write),
//! while other jobs backfill past a full group.

use crate::common;

use common::{Env, bin, wait_for};
use std::process::Command;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn grid(env: &Env, args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .arg("grid")
        .args(args)
        .current_dir(env.dir.path())
        .output()
        .unwrap()
}

/// The most jobs of `marks` (lines `s NAME NANOS` / `e NAME NANOS`) that
/// ran at once.
fn most_at_once(marks: &str) -> usize {
    let mut events: Vec<(u128, i32)> = marks
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let kind = words.next()?;
            let at: u128 = words.nth(1)?.parse().ok()?;
            Some((at, if kind == "s" { 1 } else { -1 }))
        })
        .collect();
    // At the same instant an end comes before a start.
    events.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in events {
        now += step;
        most = most.max(now);
    }
    most as usize
}

#[test]
fn a_group_never_runs_more_than_its_limit_and_reaches_it() {
    let env = Env::new("");
    // Each job marks its start and its end (as its last act).
    let template = "[vram=100M] sh -c 'echo s {i} $(date +%s%N) >> marks.txt; sleep 0.4; exec sh -c \"echo e {i} \\$(date +%s%N) >> marks.txt\"'";
    let out = grid(
        &env,
        &[
            template,
            "i=1..8",
            "--group",
            "sweep",
            "--limit",
            "3",
            "--append",
            env.jobs.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stderr).contains("appended 8 lines"), "{out:?}");
    // A job outside the group, behind the sweep in the file.
    env.append_jobs("[vram=100M] sh -c 'echo other $(date +%s%N) >> other.txt'\n");
    let sched = env.spawn(&["--sim", "2", "--poll", "0.1", "--watch"]);
    wait_for("a full group on the board", &mut || {
        env.board().contains("group sweep: 3 of 3 running")
    });
    wait_for("every job to end", &mut || env.events("done").len() == 9);
    sched.stop();
    let marks = std::fs::read_to_string(env.path("marks.txt")).unwrap();
    assert_eq!(marks.lines().count(), 16, "{marks}");
    assert_eq!(most_at_once(&marks), 3, "{marks}");
    // The other job did not wait for the sweep to end.
    let other: u128 = std::fs::read_to_string(env.path("other.txt"))
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let last_end = marks
        .lines()
        .filter(|l| l.starts_with("e "))
        .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u128>().ok())
        .max()
        .unwrap();
    assert!(
        other < last_end,
        "the job behind the full group waited for it"
    );
}

#[test]
fn differing_limits_take_the_smallest_with_one_warning() {
    let env = Env::new(
        "[group=g limit=3 vram=100M] sh -c 'echo s a $(date +%s%N) >> m; sleep 0.3; echo e a $(date +%s%N) >> m'\n\
         [group=g limit=1 vram=100M] sh -c 'echo s b $(date +%s%N) >> m; sleep 0.3; echo e b $(date +%s%N) >> m'\n\
         [group=g vram=100M] sh -c 'echo s c $(date +%s%N) >> m; sleep 0.3; echo e c $(date +%s%N) >> m'\n",
    );
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{out:?}");
    let said = format!("{}{}", out.stdout, out.stderr);
    assert_eq!(
        said.matches("group g's lines give limit=1, limit=3; the smallest, 1, is in force")
            .count(),
        1,
        "{said}"
    );
    let marks = std::fs::read_to_string(env.path("m")).unwrap();
    assert_eq!(most_at_once(&marks), 1, "{marks}");
}

#[test]
fn grid_prints_a_sweep_and_names_its_mistakes() {
    let env = Env::new("");
    let out = grid(
        &env,
        &[
            "[name=lr{lr}-s{seed}] python train.py --lr {lr} --seed {seed}",
            "lr=0.1..0.3:0.1",
            "seed=1,2",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let lines = text(&out.stdout);
    assert_eq!(lines.lines().count(), 6, "{lines}");
    assert!(
        lines.contains("[name=lr0.3-s2] python train.py --lr 0.3 --seed 2\n"),
        "{lines}"
    );
    let out = grid(&env, &["x {a} {b}", "a=1,2", "b=1..3", "--zip"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("a has 2, b has 3"), "{out:?}");
    for (args, error) in [
        (&["x {a} {b}", "a=1"][..], "{b} has no values"),
        (&["x {a}", "a=1", "c=2"], "c is not used"),
        (&["x {a}", "a=1..q"], "bad range \"1..q\""),
        (
            &["[vram=lots] x {a}", "a=1"],
            "line 1 of the grid does not parse",
        ),
        (&["[name=same] x {a}", "a=1,2"], "do not go together"),
    ] {
        let out = grid(&env, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(text(&out.stderr).contains(error), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty());
    }
    // A sample is reproducible.
    let sample = |seed: &str| {
        text(
            &grid(
                &env,
                &[
                    "x {a} {b}",
                    "a=1..20",
                    "b=1..20",
                    "--sample",
                    "5",
                    "--seed",
                    seed,
                ],
            )
            .stdout,
        )
    };
    assert_eq!(sample("7"), sample("7"));
    assert_eq!(sample("7").lines().count(), 5);
}
