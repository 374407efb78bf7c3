//! Shared directories between real users (docs/BEHAVIOUR.md "Sharing a
//! box", "Files in shared directories"): a ledger or log directory owned
//! by someone else is refused, a removed booking is published again, a
//! hostile holder of the ledger's lock cannot make two schedulers book the
//! same memory, and links planted in a log directory write nothing
//! through.
//!
//! These tests need root, to create test users and act as them (CI runs
//! as root). Without root each says so and does nothing; with
//! `GPUSCHED_USERS_REQUIRED=1` (set by `.ci/run`) that is a failure.

use crate::common;

use common::users::{chmod, chown, open_env, shared_ledger, test_user};
use common::{Env, Sched, wait_for, wait_for_within};
use serde_json::Value;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[test]
fn a_ledger_owned_by_another_user_is_refused_naming_owner_and_fix() {
    let Some(mallory) = test_user("gpusched-t-mal") else {
        return;
    };
    let env = open_env("[vram=1000] echo ran > ran.txt\n");
    let ledger = env.path("ledger");
    std::fs::create_dir(&ledger).unwrap();
    chmod(&ledger, 0o1777);
    chown(&ledger, mallory);
    let arg = ledger.display().to_string();
    let out = env.run(&["--sim", "1", "--ledger", &arg]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("belongs to gpusched-t-mal (mode 1777)"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("gpusched ledger init"),
        "{}",
        out.stderr
    );
    assert!(!env.path("ran.txt").exists());
    // World-writable without the sticky bit: anyone could delete bookings.
    chown(&ledger, (0, 0));
    chmod(&ledger, 0o777);
    let out = env.run(&["--sim", "1", "--ledger", &arg]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("without the sticky bit"),
        "{}",
        out.stderr
    );
    // `gpusched ledger init` makes it right; then it is used.
    chown(&ledger, mallory);
    let init = Command::new(common::bin())
        .args(["ledger", "init", "--ledger", &arg])
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    let meta = std::fs::metadata(&ledger).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o1777));
    let out = env.run(&["--sim", "1", "--ledger", &arg]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(env.path("ran.txt").exists());
    // An ordinary user may not run init.
    let init = Command::new(common::bin())
        .args(["ledger", "init", "--ledger", &arg])
        .uid(mallory.0)
        .gid(mallory.1)
        .output()
        .unwrap();
    assert_eq!(init.status.code(), Some(2), "{init:?}");
}

#[test]
fn a_log_directory_owned_by_another_user_is_refused() {
    let Some(mallory) = test_user("gpusched-t-mal") else {
        return;
    };
    let env = open_env("echo ran > ran.txt\n");
    std::fs::create_dir(&env.logs).unwrap();
    chown(&env.logs, mallory);
    chmod(&env.logs, 0o755);
    let out = env.run(&["--sim", "1"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("belongs to gpusched-t-mal (mode 0755)"),
        "{}",
        out.stderr
    );
    assert!(!env.path("ran.txt").exists());
    // Ours, but writable by everyone without the sticky bit.
    chown(&env.logs, (0, 0));
    chmod(&env.logs, 0o777);
    let out = env.run(&["--sim", "1"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("mode 0777"), "{}", out.stderr);
    assert!(
        out.stderr.contains("is writable by everyone"),
        "{}",
        out.stderr
    );
    assert!(
        std::fs::read_dir(&env.logs).unwrap().next().is_none(),
        "nothing was written there"
    );
}

/// A sticky log directory everyone may write is refused: Mallory could
/// not replace its files, but she could make those not made yet — a
/// job's log as 0666, reading the job's secrets and writing lines that
/// reach notifications and OOM retries (the previous release accepted
/// it, and `BEN_SECRET=hunter2` reached her). Links and files of hers
/// found in a log directory (left from when it was shared) are never
/// written to: the job whose log is one fails saying so, the others run.
#[test]
fn links_planted_in_a_log_directory_write_nothing_through() {
    let Some(mallory) = test_user("gpusched-t-mal") else {
        return;
    };
    let env = open_env("echo BEN_SECRET=hunter2\necho two\necho three\n");
    std::fs::create_dir(&env.logs).unwrap();
    chmod(&env.logs, 0o1777);
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("is writable by everyone (mode 1777) (the sticky bit does not stop them"),
        "{}",
        out.stderr
    );
    assert!(std::fs::read_dir(&env.logs).unwrap().next().is_none());
    // Left from when it was shared (made here as her, the directory
    // still open to her): her links and her 0666 log.
    let victim = env.path("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    for name in ["job001_gpu0.log", ".gpusched-write-probe"] {
        let status = Command::new("ln")
            .arg("-s")
            .arg(&victim)
            .arg(env.logs.join(name))
            .uid(mallory.0)
            .gid(mallory.1)
            .status()
            .unwrap();
        assert!(status.success());
    }
    let hers = env.logs.join("job002_gpu0.log");
    std::fs::write(&hers, "").unwrap();
    chmod(&hers, 0o666);
    std::os::unix::fs::chown(&hers, Some(mallory.0), Some(mallory.1)).unwrap();
    chmod(&env.logs, 0o755);
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(
        out.stdout
            .contains("is a symbolic link, and gpusched never writes through one"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("belongs to gpusched-t-mal, and gpusched writes only its own files"),
        "{}",
        out.stdout
    );
    assert_eq!(
        std::fs::read_to_string(&hers).unwrap(),
        "",
        "her file got our output"
    );
    assert_eq!(env.status_of(1).as_deref(), Some("failed"));
    assert_eq!(env.status_of(2).as_deref(), Some("failed"));
    assert_eq!(env.status_of(3).as_deref(), Some("ok"));
    // A lock link found there: refused, nothing truncated.
    std::fs::remove_file(env.logs.join("lock")).unwrap();
    std::os::unix::fs::symlink(&victim, env.logs.join("lock")).unwrap();
    let out = env.run(&["--sim", "1"]);
    assert_ne!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("lock"), "{}", out.stderr);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
}

fn booking_files(ledger: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(ledger)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect()
        })
        .unwrap_or_default()
}

fn bookings(path: &Path) -> Vec<Value> {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v["bookings"].as_array().cloned())
        .unwrap_or_default()
}

/// A booking file removed behind the scheduler's back (a cleaner, a
/// hand) is written again within a second or two.
#[test]
fn a_removed_booking_is_published_again() {
    let Some(bob) = test_user("gpusched-t-bob") else {
        return;
    };
    let env = open_env("[vram=3000] sleep 60\n");
    let ledger = shared_ledger(&env);
    chown(env.dir.path(), bob);
    let arg = ledger.display().to_string();
    let mut cmd = env.command(&["--sim", "1", "--poll", "30", "--ledger", &arg]);
    cmd.uid(bob.0).gid(bob.1);
    let sched = Sched::from_command(cmd);
    wait_for("bob's booking", &mut || {
        booking_files(&ledger)
            .iter()
            .any(|p| bookings(p).iter().any(|b| b["pgid"].as_u64() > Some(1)))
    });
    let file = booking_files(&ledger).pop().unwrap();
    assert_eq!(std::fs::metadata(&file).unwrap().uid(), bob.0);
    let before = bookings(&file);
    // Nobody but root can remove it in a root-owned sticky ledger.
    let rm = Command::new("rm")
        .arg("-f")
        .arg(&file)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!rm.status.success(), "nobody removed bob's booking");
    std::fs::remove_file(&file).unwrap();
    // --poll 30: only the ledger watch can bring it back this soon.
    wait_for_within(
        "the booking written again",
        Duration::from_secs(3),
        &mut || bookings(&file) == before,
    );
    drop(sched);
}

/// A hostile user holds the ledger's lock forever: both schedulers decide
/// without it, and still never start jobs into the same memory (the later
/// publisher of two overlapping decisions yields).
#[test]
fn a_hostile_lock_holder_cannot_cause_a_double_booking() {
    let Some(mallory) = test_user("gpusched-t-mal") else {
        return;
    };
    let a = open_env("");
    let b = open_env("");
    let ledger = shared_ledger(&a);
    let lock = ledger.join("lock");
    std::fs::write(&lock, "").unwrap();
    chmod(&lock, 0o644);
    let mut holder = Command::new("flock")
        .arg("--shared")
        .arg(&lock)
        .args(["sleep", "120"])
        .uid(mallory.0)
        .gid(mallory.1)
        .spawn()
        .unwrap();
    let go = a.path("go");
    let jobs = format!(
        "[vram=14000] sh -c 'while [ ! -e {} ]; do sleep 0.01; done; exec gpusched simjob --vram 14000 --ramp 0.5 --hold 0.3'\n",
        go.display()
    )
    .repeat(2);
    a.write_jobs(&jobs);
    b.write_jobs(&jobs);
    let shared = a.path("gpus").display().to_string();
    let arg = ledger.display().to_string();
    let args = [
        "--sim",
        "1",
        "--sim-dir",
        &shared,
        "--poll",
        "0.1",
        "--ledger",
        &arg,
    ];
    let sa = a.spawn(&args);
    let sb = b.spawn(&args);
    let started = |env: &Env| env.events("started").len();
    wait_for("a first start", &mut || started(&a) + started(&b) >= 1);
    // Both have decided (each waited out the lock); let the jobs go.
    std::thread::sleep(Duration::from_secs(3));
    std::fs::write(&go, "").unwrap();
    let (out_a, out_b) = (sa.finish(), sb.finish());
    let _ = holder.kill();
    let _ = holder.wait();
    // Never two at once on the one GPU: the simulated GPU fails an
    // allocation past its capacity as CUDA does, so a double booking would
    // show as an OOM. Each job ran once, and ok.
    for (env, out) in [(&a, &out_a), (&b, &out_b)] {
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("deciding without it"), "{}", out.stdout);
        assert_eq!(env.events("oom").len(), 0, "{}", out.stdout);
        assert_eq!(env.events("started").len(), 2, "{}", out.stdout);
        for no in 1..=2 {
            assert_eq!(env.status_of(no).as_deref(), Some("ok"), "{}", out.stdout);
        }
    }
}

#[test]
fn the_first_user_to_make_a_ledger_is_told_others_cannot_join_and_the_second_gets_its_real_path() {
    let Some([alice, bob, _]) = common::users::users() else {
        return;
    };
    let root = open_env("");
    // A ledger path nobody made yet, in a directory everyone may write.
    let shared = root.path("box");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o1777);
    let ledger = shared.join("ledger");
    let arg = ledger.display().to_string();
    let a = common::users::users_env("echo a\n", alice);
    let mut cmd = a.command(&["--sim", "1", "--poll", "0.1", "--ledger", &arg]);
    cmd.uid(alice.0).gid(alice.1);
    let out = common::Sched::from_command(cmd).finish();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains(&format!(
            "made the ledger directory {arg} as gpusched-t-alice's own (mode 0755): other users' schedulers will be refused there"
        )),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains(&format!("sudo gpusched ledger init --ledger {arg}")),
        "{}",
        out.stdout
    );
    // Bob is refused, with the rule for this path, not the default one.
    let b = common::users::users_env("echo b\n", bob);
    let mut cmd = b.command(&["--sim", "1", "--ledger", &arg]);
    cmd.uid(bob.0).gid(bob.1);
    let out = common::Sched::from_command(cmd).finish();
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains(&format!("`d {arg} 1777 root root -`")),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("/dev/shm/gpusched"), "{}", out.stderr);
}

#[test]
fn root_may_cancel_a_users_job_and_another_user_is_told_whose_it_is() {
    let Some([_, bob, mallory]) = common::users::users() else {
        return;
    };
    let b = common::users::users_env(
        "[name=runaway] while [ ! -e release ]; do sleep 0.05; done\n",
        bob,
    );
    let mut cmd = b.command(&["--sim", "1", "--poll", "0.1", "--watch", "--no-ledger"]);
    cmd.uid(bob.0).gid(bob.1);
    let sched = common::Sched::from_command(cmd);
    common::wait_for("bob's job to start", &mut || {
        !b.events("started").is_empty()
    });
    // Another user: one clear refusal, nothing changed.
    let out = Command::new(common::bin())
        .args(["cancel", "runaway", "--log-dir"])
        .arg(&b.logs)
        .uid(mallory.0)
        .gid(mallory.1)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("belongs to gpusched-t-bob, not to you (gpusched-t-mal)"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("(os error 13): Permission denied"),
        "{stderr}"
    );
    // Root: taken, and the scheduler says who asked.
    let out = Command::new(common::bin())
        .args(["cancel", "runaway", "--log-dir"])
        .arg(&b.logs)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    common::wait_for("the job to end cancelled", &mut || {
        b.status_of_opt(1).is_some()
    });
    assert_eq!(b.status_of(1).as_deref(), Some("cancelled"));
    assert!(
        sched.stdout().contains("cancel of job 1 asked by root"),
        "{}",
        sched.stdout()
    );
    sched.stop();
}

/// docs/SECURITY.md "Log directories and saved environments": a log
/// directory its group may write (`drwxrwsr-x`) is refused at start,
/// naming the mode, before anything is written; and a saved environment
/// a group member put in place of the owner's (a `PATH` of theirs) is
/// refused, never run. On the previous release the scheduler started
/// without a word and the job ran the group member's `python3`.
#[test]
fn a_group_writable_log_directory_and_a_planted_environment_are_refused() {
    let Some(mallory) = test_user("gpusched-t-mal") else {
        return;
    };
    let env = open_env("echo ran > ran.txt\n");
    std::fs::create_dir(&env.logs).unwrap();
    chmod(&env.logs, 0o2775);
    let out = env.run(&["--sim", "1"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("writable by its group (mode 2775)"),
        "{}",
        out.stderr
    );
    assert!(!env.path("ran.txt").exists());
    assert!(std::fs::read_dir(&env.logs).unwrap().next().is_none());

    // The owner's own directory, but an env/ file of someone else's: a
    // job naming it does not run with it.
    chmod(&env.logs, 0o755);
    let id = "0123456789abcdef";
    std::fs::create_dir_all(env.logs.join("env")).unwrap();
    chmod(&env.logs.join("env"), 0o700);
    let planted = env.logs.join("env").join(format!("{id}.json"));
    std::fs::write(&planted, r#"{"PATH":"/tmp/evil-bin"}"#).unwrap();
    chown(&planted, mallory);
    env.write_jobs(&format!("[env={id}] sh -c 'echo $PATH > path.txt'\n"));
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains("refusing the saved environment") && said.contains("gpusched-t-mal"),
        "{said}"
    );
    assert!(
        !std::fs::read_to_string(env.path("path.txt"))
            .unwrap_or_default()
            .contains("/tmp/evil-bin"),
        "the job ran with the planted PATH"
    );
}

/// `ledger init --sim-dir DIR` sets up a simulated box several users
/// share as the docs say (docs/BEHAVIOUR.md "Simulation"): DIR and
/// DIR/ledger root's, mode 1777, so no `chmod` by hand is needed; every
/// multi-user test's box is made this way.
#[test]
fn ledger_init_sets_up_a_shared_simulated_box() {
    if !nix::unistd::geteuid().is_root() {
        common::skipped("ledger init needs root");
        return;
    }
    let env = Env::new("");
    let dir = env.path("gpus");
    let out = Command::new(common::bin())
        .args(["ledger", "init", "--sim-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    for d in [dir.clone(), dir.join("ledger")] {
        let meta = std::fs::symlink_metadata(&d).unwrap();
        assert!(meta.is_dir(), "{}", d.display());
        assert_eq!(meta.uid(), 0, "{}", d.display());
        assert_eq!(meta.mode() & 0o7777, 0o1777, "{}", d.display());
    }
    // A link planted where the directory goes is refused, not followed.
    let planted = env.path("planted");
    std::os::unix::fs::symlink("/etc", &planted).unwrap();
    let out = Command::new(common::bin())
        .args(["ledger", "init", "--sim-dir"])
        .arg(&planted)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(
        std::fs::metadata("/etc").unwrap().mode() & 0o7777,
        0o755,
        "/etc untouched"
    );
}
