//! Box rules between real users (docs/BEHAVIOUR.md "Rules for a shared
//! box"): a quota is never exceeded and says why a job waits; fair share
//! gets a second user's jobs through far sooner than without rules (the
//! same scenario is run without rules, so the test can fail); a personal
//! reservation keeps its GPU free until it ends and is used after; a rules
//! file a user could write is refused.
//!
//! These tests need root, to create test users and act as them, and to
//! own the rules file (CI runs as root). Without root each says so and
//! does nothing; with `GPUSCHED_USERS_REQUIRED=1` that is a failure.

use crate::common;

use common::users::{Box_, chown, open_env, spawn_as, spawn_polling, users, users_env};
use common::{Env, wait_for};
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn status_json(env: &Env) -> Value {
    std::fs::read_to_string(env.logs.join("status.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

/// The most distinct GPUs in use at once by these attempts.
fn peak_gpus(attempts: &[(f64, f64, Vec<u64>)]) -> usize {
    attempts
        .iter()
        .map(|(at, _, _)| {
            attempts
                .iter()
                .filter(|(s, e, _)| s <= at && at < e)
                .flat_map(|(_, _, g)| g.iter().copied())
                .collect::<std::collections::BTreeSet<_>>()
                .len()
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn a_quota_of_two_gpus_is_never_exceeded_while_four_are_free() {
    let Some([alice, _, _]) = users() else {
        return;
    };
    let b = Box_::new("[quota.users.gpusched-t-alice]\nmax_gpus = 2\n");
    // Six whole-GPU jobs, and one its quota can never hold.
    let env = users_env(
        &format!("{}[gpus=3] sleep 1\n", "sleep 1\n".repeat(6)),
        alice,
    );
    let sched = spawn_as(&env, alice, &b, 4, true);
    let mut reason = String::new();
    let mut seen = Value::Null;
    wait_for("a job waiting for the quota", &mut || {
        let doc = status_json(&env);
        seen = doc.clone();
        if let Some(r) = doc["jobs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|j| j["reason"].as_str())
            .find(|r| r.starts_with("quota"))
        {
            reason = r.to_string();
        }
        !reason.is_empty() || !sched.child_is_running()
    });
    assert_eq!(reason, "quota: gpusched-t-alice uses 2 of 2 GPUs");
    // Every view shows the quota and its use.
    common::assert_valid_status(&seen);
    let shown = &seen["box_rules"];
    assert_eq!(shown["quota"]["max_gpus"], 2, "{shown}");
    assert_eq!(shown["quota_use"]["gpus"], 2, "{shown}");
    assert_eq!(shown["users"][0]["user"], "gpusched-t-alice", "{shown}");
    let board = std::fs::read_to_string(env.logs.join("status.txt")).unwrap();
    assert!(board.contains("quota: 2 of 2 GPUs"), "{board}");
    let out = sched.finish();
    // An infeasible job is a failure for the exit status.
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    for no in 1..=6 {
        assert_eq!(env.status_of(no).as_deref(), Some("ok"));
    }
    assert_eq!(env.status_of(7).as_deref(), Some("infeasible"));
    assert!(
        out.stdout
            .contains("over the box quota: needs 3 GPUs, but gpusched-t-alice's quota is 2"),
        "{}",
        out.stdout
    );
    let attempts = env.attempts();
    assert_eq!(peak_gpus(&attempts), 2, "{attempts:?}");
}

/// Alice queues 16 whole-GPU jobs on 2 GPUs; Bob queues 4 once Alice's
/// first two have run (so she has used more than Bob will: with equal
/// usage, fair share rightly alternates). Both sample the GPUs every 5 s,
/// the default: Alice's scheduler hears her own jobs end at once, Bob's
/// hears of it only at his next sample — or, under the rules, from the
/// ledger. Returns how long Bob's queue took, seconds.
fn bobs_time(with_rules: bool) -> Option<f64> {
    let [alice, bob, _] = users()?;
    let b = Box_::new("[fair_share]\nhalf_life = \"1h\"\n");
    let a_env = users_env(&"sleep 1.5\n".repeat(16), alice);
    let b_env = users_env(&"sleep 1.5\n".repeat(4), bob);
    let a = spawn_polling(&a_env, alice, &b, 2, with_rules, "5");
    wait_for("alice's first round of jobs", &mut || {
        a_env.events("started").len() >= 4
    });
    let began = Instant::now();
    let bs = spawn_polling(&b_env, bob, &b, 2, with_rules, "5");
    let out = bs.finish();
    let took = began.elapsed().as_secs_f64();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    a.stop();
    if std::env::var_os("GPUSCHED_TEST_DEBUG").is_some() {
        eprintln!(
            "alice {:?}\nbob {:?}\n{}",
            a_env.attempts(),
            b_env.attempts(),
            out.stdout
        );
    }
    // Nothing was ever started into memory another job held.
    let mut all = a_env.attempts();
    all.extend(b_env.attempts());
    assert!(peak_gpus(&all) <= 2);
    for (i, x) in all.iter().enumerate() {
        for y in &all[i + 1..] {
            let overlap = x.0 < y.1 - 0.05 && y.0 < x.1 - 0.05;
            assert!(
                !(overlap && x.2 == y.2),
                "two whole-GPU jobs at once on GPU {:?}: {x:?} {y:?}",
                x.2
            );
        }
    }
    drop(b);
    Some(took)
}

#[test]
fn fair_share_gets_a_second_users_jobs_through_in_well_under_the_time_without_it() {
    let Some(without) = bobs_time(false) else {
        return;
    };
    let with = bobs_time(true).unwrap();
    eprintln!("bob's 4 jobs: {without:.1}s without rules, {with:.1}s with fair share");
    assert!(
        with <= 0.6 * without,
        "bob's 4 jobs took {with:.1}s with fair share, {without:.1}s without"
    );
}

fn verb_as(user: (u32, u32), dir: &Path, args: &[String]) -> std::process::Output {
    Command::new(common::bin())
        .args(args)
        .current_dir(dir)
        .uid(user.0)
        .gid(user.1)
        .output()
        .unwrap()
}

#[test]
fn a_reservation_keeps_its_gpu_free_until_it_ends_and_it_is_used_after() {
    let Some([alice, bob, _]) = users() else {
        return;
    };
    let b = Box_::new("[reservations]\nmax_duration = \"1h\"\n");
    let a_env = users_env("", alice);
    let mut args = vec!["reserve".to_string(), "--gpu".into(), "0".into()];
    args.extend(["--for", "4s", "--note", "notebook"].map(String::from));
    args.extend(b.args(2, true));
    let made = verb_as(alice, a_env.dir.path(), &args);
    let said = String::from_utf8_lossy(&made.stdout).to_string();
    assert!(made.status.success(), "{made:?}");
    assert!(
        said.starts_with("reservation 1: GPU 0, 24000 MiB for gpusched-t-alice until"),
        "{said}"
    );
    // When it ends, as the reservation's file in the ledger says.
    let file = b.ledger.join(format!("{}.1.reservation", alice.0));
    let until = serde_json::from_slice::<Value>(&std::fs::read(&file).unwrap()).unwrap()["until_ms"]
        .as_f64()
        .unwrap() / 1000.0;
    // Everyone sees it.
    let mut list = vec!["reserve".to_string(), "--list".into()];
    list.extend(b.args(2, true));
    let listed = verb_as(bob, a_env.dir.path(), &list);
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    assert!(listed.contains("gpusched-t-alice"), "{listed}");
    assert!(listed.contains("notebook"), "{listed}");
    // Bob cannot release it.
    let mut release = vec!["unreserve".to_string(), "1".into()];
    release.extend(b.args(2, true));
    let refused = verb_as(bob, a_env.dir.path(), &release);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("is gpusched-t-alice's"));

    // Bob's whole-GPU jobs: only GPU 1 until it ends, then GPU 0 too.
    let b_env = users_env(&"sleep 1\n".repeat(8), bob);
    let sched = spawn_as(&b_env, bob, &b, 2, true);
    wait_for("alice's reservation in bob's status", &mut || {
        status_json(&b_env)["box_rules"]["reservations"][0]["user"] == "gpusched-t-alice"
            || !sched.child_is_running()
    });
    let doc = status_json(&b_env);
    common::assert_valid_status(&doc);
    assert_eq!(
        doc["box_rules"]["reservations"][0]["note"], "notebook",
        "{doc}"
    );
    let out = sched.finish();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let attempts = b_env.attempts();
    for (start, _, gpus) in &attempts {
        if gpus.contains(&0) {
            assert!(
                *start >= until - 0.5,
                "started on GPU 0 at {start}, reserved until {until}"
            );
        }
    }
    assert!(
        attempts.iter().any(|(_, _, g)| g.contains(&0)),
        "GPU 0 is used once the reservation ends: {attempts:?}"
    );
    drop(b);
}

#[test]
fn a_rules_file_a_user_could_write_is_refused() {
    let Some([_, _, mallory]) = users() else {
        return;
    };
    let b = Box_::new("[quota.default]\nmax_gpus = 1\n");
    chown(&b.rules, mallory);
    let env = open_env("echo ran > ran.txt\n");
    let args = b.args(1, true);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = env.run(&args);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains(
            "owned by gpusched-t-mal, not root, so that user could change everyone's rules"
        ),
        "{}",
        out.stderr
    );
    assert!(!env.path("ran.txt").exists());
    // Unknown keys are named.
    chown(&b.rules, (0, 0));
    std::fs::write(&b.rules, "[quota.default]\nmax_gpu = 1\n").unwrap();
    let out = env.run(&args);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("max_gpu"), "{}", out.stderr);
    drop(b.root);
}

/// A job its user's quota keeps waiting asks nothing of fair share: Bob,
/// with the lower factor, still gets the GPU Alice may not use.
#[test]
fn a_job_held_by_its_quota_keeps_nothing_free_for_fair_share() {
    let Some([alice, bob, _]) = users() else {
        return;
    };
    let b = Box_::new(
        "[fair_share]\nhalf_life = \"1h\"\n[quota.users.gpusched-t-alice]\nmax_gpus = 1\n",
    );
    // Bob's reservation is charged to his usage: his factor is the lower.
    let b_env = users_env("[vram=2000] sleep 0.5\n", bob);
    let mut args = vec!["reserve".to_string(), "--vram".into(), "1000".into()];
    args.extend(["--for", "1h"].map(String::from));
    args.extend(b.args(2, true));
    assert!(verb_as(bob, b_env.dir.path(), &args).status.success());
    let a_env = users_env(&"[vram=22000] sleep 60\n".repeat(2), alice);
    let a = spawn_as(&a_env, alice, &b, 2, true);
    wait_for("alice's second job held by her quota", &mut || {
        status_json(&a_env)["jobs"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|j| j["reason"].as_str().is_some_and(|r| r.starts_with("quota")))
    });
    let out = spawn_as(&b_env, bob, &b, 2, true).finish();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(b_env.status_of(1).as_deref(), Some("ok"));
    // Bob's job ran beside Alice's first, not after it.
    assert!(a_env.events("done").is_empty(), "{}", out.stdout);
    a.stop();
}

/// A changed rules file applies to the next starts without a restart
/// (docs/BEHAVIOUR.md "Rules for a shared box"): the quota is raised while
/// a job runs, more start within seconds, the change is said, and the
/// running job is neither killed nor run again. A file made unusable
/// keeps the rules in force, said once.
#[test]
fn a_changed_quota_applies_to_the_next_starts_without_a_restart() {
    let Some([alice, _, _]) = users() else {
        return;
    };
    let b = Box_::new("[quota.users.gpusched-t-alice]\nmax_gpus = 1\n");
    let env = users_env(&"sleep 4\n".repeat(4), alice);
    let sched = spawn_as(&env, alice, &b, 4, true);
    let running = || status_json(&env)["counts"]["running"].as_u64().unwrap_or(0);
    wait_for("one job running under a quota of 1", &mut || running() == 1);
    // Replaced as editors and config tools do: a new file renamed over.
    let write = |text: &str| {
        let fresh = b.rules.with_extension("new");
        std::fs::write(&fresh, text).unwrap();
        std::fs::rename(&fresh, &b.rules).unwrap();
    };
    write("[quota.users.gpusched-t-alice]\nmax_gpus = 3\n");
    wait_for("three running under the new quota", &mut || running() == 3);
    // An unusable file: said, and the quota of 3 stays.
    write("[quota.users.gpusched-t-alice]\nmax_gpus = many\n");
    wait_for("the broken rules to be said", &mut || {
        sched
            .stdout()
            .contains("the rules in force stay until it is fixed")
    });
    // Fixed again, as it was: said too (the previous release said
    // nothing, while the jobs file says `parses again`).
    write("[quota.users.gpusched-t-alice]\nmax_gpus = 3\n");
    let out = sched.finish();
    assert!(
        out.stdout
            .contains("parse again; the rules in force are unchanged"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("reloaded: your quota: max_gpus 3"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("the rules in force stay until it is fixed"),
        "{}",
        out.stdout
    );
    for no in 1..=4 {
        assert_eq!(env.status_of(no).as_deref(), Some("ok"), "job {no}");
        assert_eq!(env.job_events(no, "started").len(), 1, "job {no} ran once");
    }
    assert!(peak_gpus(&env.attempts()) <= 3);
}

/// `[notify] to` in the box rules: every user's scheduler also tells the
/// admins' target what its `--notify-on` picks (a failure, by default),
/// with no `--notify` of its own; a target that is not one is refused
/// with the rules.
#[test]
fn the_box_rules_notify_target_hears_every_users_failures() {
    let Some([alice, _, _]) = users() else {
        return;
    };
    let server = crate::notify::Server::start(std::time::Duration::ZERO);
    let b = Box_::new(&format!("[notify]\nto = [\"{}\"]\n", server.url));
    let env = users_env("[name=broken] sh -c 'exit 4'\necho fine\n", alice);
    let out = spawn_as(&env, alice, &b, 1, true).finish();
    assert_eq!(out.code, 4, "{}{}", out.stdout, out.stderr);
    let ended = server.of_event("job_ended");
    assert_eq!(ended.len(), 1, "the failure only: {:#?}", server.bodies());
    assert_eq!(ended[0]["job"]["name"], "broken");
    assert_eq!(ended[0]["scheduler"]["user"], "gpusched-t-alice");
    // A target that is none refuses the rules, as any bad key does.
    let bad = Box_::new("[notify]\nto = [\"ftp://x\"]\n");
    let out = spawn_as(&env, alice, &bad, 1, true).finish();
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("notify.to"), "{}", out.stderr);
}

/// A reservation file another user planted under a huge number chooses
/// nothing of ours: alice's two reservations are her 1 and 2, each in its
/// own file. On the previous release her next number was the largest in
/// anyone's file name plus one: it wrapped to 0, and her second
/// reservation overwrote her first.
#[test]
fn a_planted_reservation_number_never_chooses_anothers() {
    let Some([alice, bob, _]) = users() else {
        return;
    };
    let b = Box_::new("[reservations]\nmax_duration = \"1h\"\n");
    let a_env = users_env("", alice);
    let planted = b.ledger.join(format!("{}.4294967295.reservation", bob.0));
    std::fs::write(&planted, "{}").unwrap();
    common::users::chown(&planted, bob);
    for want in 1..=2 {
        let mut args = vec!["reserve".to_string(), "--vram".into(), "1000".into()];
        args.extend(["--for", "10m"].map(String::from));
        args.extend(b.args(2, true));
        let made = verb_as(alice, a_env.dir.path(), &args);
        let said = String::from_utf8_lossy(&made.stdout).to_string();
        assert!(made.status.success(), "{made:?}");
        assert!(said.starts_with(&format!("reservation {want}: ")), "{said}");
        assert!(
            b.ledger
                .join(format!("{}.{want}.reservation", alice.0))
                .is_file()
        );
    }
    let mut list = vec!["reserve".to_string(), "--list".into()];
    list.extend(b.args(2, true));
    let listed = verb_as(alice, a_env.dir.path(), &list);
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    assert_eq!(listed.matches("gpusched-t-alice").count(), 2, "{listed}");
}

/// A rules file truncated in place while rules are in force (`: >
/// box.toml`, an editor writing over it) is not "no rules": the
/// `max_running = 1` in force stays, said once, and never two of alice's
/// jobs run at once; the file holding rules again is read. On the
/// previous release it reloaded as no rules and a second job started.
#[test]
fn a_rules_file_emptied_mid_edit_keeps_the_rules_in_force() {
    let Some([alice, _, _]) = users() else {
        return;
    };
    let b = Box_::new("[quota.users.gpusched-t-alice]\nmax_running = 1\n");
    let env = users_env(&"[vram=1000] sleep 1.5\n".repeat(3), alice);
    let sched = spawn_as(&env, alice, &b, 2, true);
    let running = || status_json(&env)["counts"]["running"].as_u64().unwrap_or(0);
    wait_for("one job running under max_running 1", &mut || {
        running() == 1
    });
    // Truncated in place, as `: > box.toml` does.
    std::fs::File::create(&b.rules).unwrap();
    wait_for("the emptied file said", &mut || {
        sched
            .stdout()
            .contains("is empty (truncated while being edited?)")
    });
    // Written in place again, now with the rules back.
    std::fs::write(
        &b.rules,
        "[quota.users.gpusched-t-alice]\nmax_running = 1\n",
    )
    .unwrap();
    let out = sched.finish();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        out.stdout
            .matches("is empty (truncated while being edited?)")
            .count(),
        1,
        "{}",
        out.stdout
    );
    assert!(
        !out.stdout.contains("removed: no box rules"),
        "{}",
        out.stdout
    );
    let attempts = env.attempts();
    for (i, a) in attempts.iter().enumerate() {
        for b in &attempts[i + 1..] {
            assert!(
                a.1 <= b.0 || b.1 <= a.0,
                "two jobs ran at once past max_running 1: {attempts:?}"
            );
        }
    }
}
