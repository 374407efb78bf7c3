//! A good neighbour on a shared box (docs/SECURITY.md "Neighbours"): what
//! another user can plant or hold — the ledger's lock file, a
//! status.json naming a directory for root's views to follow — never
//! stalls a scheduler, switches its locking off unsaid, or makes root
//! create or delete anything. Each test is one attack, with what the
//! previous release did in its comment.

use crate::common::{self, Sched};
use common::users::{Box_, chown, users, users_env};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Alice's scheduler on `b`'s two GPUs with ten tiny declared jobs, run
/// to its end: its output.
fn alice_runs_ten(b: &Box_, alice: (u32, u32)) -> common::Output {
    let jobs: String = (1..=10)
        .map(|n| format!("[vram=100M] true {n}\n"))
        .collect();
    let env = users_env(&jobs, alice);
    let mut args = b.args(2, false);
    args.extend(["--poll", "0.1"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = env.command(&args);
    cmd.uid(alice.0).gid(alice.1);
    let out = Sched::from_command(cmd).finish_within(Duration::from_secs(120));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    for no in 1..=10 {
        assert_eq!(env.status_of(no).as_deref(), Some("ok"), "job {no}");
    }
    out
}

/// The ledger's lock as `ledger init` leaves it: root's, 0644, a file.
fn assert_roots_lock(ledger: &Path) {
    let meta = std::fs::symlink_metadata(ledger.join("lock")).unwrap();
    assert!(meta.is_file(), "{meta:?}");
    assert_eq!(meta.uid(), 0);
    assert_eq!(meta.mode() & 0o7777, 0o644);
}

/// Bob holds an exclusive `flock` on the shared ledger's lock for good,
/// then swaps it for a FIFO of his (as a lock he made would let him):
/// alice's ten jobs all finish, recorded, each case said once. On the
/// previous release the held lock cost each of her rounds 2 s (10 tiny
/// jobs: 1 s alone, 16 s beside him), the FIFO froze her scheduler for
/// good, and `ledger init` made no lock at all.
#[test]
fn a_neighbours_held_or_swapped_lock_never_stalls_the_ledger() {
    let Some([alice, bob, _]) = users() else {
        return;
    };
    let b = Box_::new("");
    assert_roots_lock(&b.ledger);
    let lock = b.ledger.join("lock");
    // flock(1) as bob, holding it until killed (by pid, below).
    let mut holder = Command::new("flock")
        .arg("--exclusive")
        .arg(&lock)
        .args(["sleep", "600"])
        .uid(bob.0)
        .gid(bob.1)
        .stdout(Stdio::null())
        .spawn()
        .expect("flock(1) from util-linux");
    common::wait_for("bob to hold the ledger lock", &mut || {
        let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
        let ino = std::fs::metadata(&lock).unwrap().ino();
        locks
            .lines()
            .any(|l| l.contains("FLOCK") && l.contains(&format!(":{ino} ")))
    });
    let out = alice_runs_ten(&b, alice);
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(
        said_in(&out.stdout, "cannot take the ledger lock"),
        1,
        "{}",
        out.stdout
    );

    // His FIFO in its place (as root here: in a sticky ledger only its
    // owner may remove root's lock).
    std::fs::remove_file(&lock).unwrap();
    nix::unistd::mkfifo(&lock, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    chown(&lock, bob);
    let out = alice_runs_ten(&b, alice);
    assert_eq!(
        said_in(&out.stdout, "not a regular file"),
        1,
        "{}",
        out.stdout
    );
    assert!(
        std::fs::symlink_metadata(&lock)
            .unwrap()
            .file_type()
            .is_fifo()
    );

    // A regular lock of his, 0600: she cannot even open it; said, not
    // silently lockless.
    std::fs::remove_file(&lock).unwrap();
    std::fs::write(&lock, "").unwrap();
    common::users::chmod(&lock, 0o600);
    chown(&lock, bob);
    let out = alice_runs_ten(&b, alice);
    assert_eq!(
        said_in(&out.stdout, "not using the ledger lock"),
        1,
        "{}",
        out.stdout
    );

    // `ledger init` puts root's lock back.
    let init = Command::new(common::bin())
        .args(["ledger", "init", "--ledger"])
        .arg(&b.ledger)
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    assert_roots_lock(&b.ledger);
    let out = alice_runs_ten(&b, alice);
    assert_eq!(said_in(&out.stdout, "ledger lock"), 0, "{}", out.stdout);
}

fn said_in(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// A ledger made before `ledger init` made locks: a missing lock is not
/// made by a user (she would own it), and that is said.
#[test]
fn a_shared_ledger_without_a_lock_is_said_and_never_gets_a_users_lock() {
    let Some([alice, _, _]) = users() else {
        return;
    };
    let b = Box_::new("");
    std::fs::remove_file(b.ledger.join("lock")).unwrap();
    let out = alice_runs_ten(&b, alice);
    assert_eq!(
        said_in(&out.stdout, "the shared ledger has no lock file"),
        1,
        "{}",
        out.stdout
    );
    assert!(!b.ledger.join("lock").exists());
}

/// Mallory's status.json says her scheduler runs on simulated GPUs in a
/// directory she names: between root's runs of `top --once` and `serve`
/// she flips it between her own directory (holding a dead process's
/// report) and root's 0700 directory (holding root's `important.json`,
/// shaped as such a report), or names a directory of root's that does not
/// exist yet. Root's views read, and never remove or create: on the
/// previous release `important.json` was gone within 7 runs, and
/// `created/sub` was made, root's.
#[test]
fn roots_views_never_create_or_remove_where_a_users_status_points() {
    let Some([_, _, mal]) = users() else {
        return;
    };
    // Her run, for a genuine status.json of a --sim scheduler.
    let env = users_env("[vram=100M] true\n", mal);
    let hers = env.path("gpus");
    std::fs::create_dir(&hers).unwrap();
    chown(&hers, mal);
    let mut cmd = env.command(&[
        "--sim",
        "1",
        "--sim-dir",
        &hers.display().to_string(),
        "--no-ledger",
    ]);
    cmd.uid(mal.0).gid(mal.1);
    let out = Sched::from_command(cmd).finish();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let dead = r#"{"pid":999999,"mib":{}}"#;
    std::fs::write(hers.join("x.json"), dead).unwrap();
    chown(&hers.join("x.json"), mal);
    // Root's private directory and file.
    let root_dir = tempfile::tempdir().unwrap();
    let important = root_dir.path().join("important.json");
    std::fs::write(&important, dead).unwrap();
    common::users::chmod(&important, 0o600);
    let status = env.logs.join("status.json");
    let forge = |sim_dir: &Path| {
        let mut doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&status).unwrap()).unwrap();
        doc["scheduler"]["backend"] = "sim".into();
        doc["scheduler"]["sim_dir"] = sim_dir.display().to_string().into();
        let tmp = env.logs.join("status.json.tmp");
        std::fs::write(&tmp, doc.to_string()).unwrap();
        chown(&tmp, mal);
        std::fs::rename(&tmp, &status).unwrap();
    };
    let created = root_dir.path().join("created/sub");
    for run in 0..8 {
        forge(match run % 3 {
            0 => hers.as_path(),
            1 => root_dir.path(),
            _ => created.as_path(),
        });
        let top = Command::new(common::bin())
            .args(["top", "--once", "--log-dir"])
            .arg(&env.logs)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            top.status.code().is_some(),
            "top ended by a signal: {top:?}"
        );
        assert!(important.exists(), "run {run}: root's file was removed");
        assert!(
            !root_dir.path().join("created").exists(),
            "run {run}: root's view made a directory where her file said"
        );
    }
    // Her own dead report stays too: a view tidies nothing.
    assert!(hers.join("x.json").exists());
    // serve, for one answer.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    forge(root_dir.path());
    let config = tempfile::tempdir().unwrap();
    let mut server = Command::new(common::bin())
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--log-dir",
        ])
        .arg(&env.logs)
        .env("XDG_CONFIG_HOME", config.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let token_file = config.path().join("gpusched/serve-token");
    common::wait_for("serve's token", &mut || {
        std::fs::read_to_string(&token_file).is_ok_and(|t| t.ends_with('\n'))
    });
    let token = std::fs::read_to_string(&token_file).unwrap();
    for sim_dir in [created.as_path(), root_dir.path()] {
        let _ = ureq::get(format!("http://127.0.0.1:{port}/api/v1/box"))
            .header("Authorization", format!("Bearer {}", token.trim()))
            .call();
        forge(sim_dir);
    }
    let _ = server.kill();
    let _ = server.wait();
    assert!(important.exists(), "serve removed root's file");
    assert!(
        !root_dir.path().join("created").exists(),
        "serve made a directory"
    );
}

/// The suite never reads the host's box rules (docs/DEVELOPMENT.md
/// "Hermetic tests"): cargo gives every test process
/// `GPUSCHED_BOX_RULES=none` (`.cargo/config.toml`), so a scheduler the
/// harness starts without `--box-rules` runs under no rules whatever
/// `/etc/gpusched/box.toml` says (`.ci/run` puts a hostile one there for
/// the whole suite: 1 GPU, 1 job running). On a host with such a file
/// the previous release failed five tests of this suite.
#[test]
fn the_harness_reads_no_host_rules() {
    assert_eq!(
        std::env::var("GPUSCHED_BOX_RULES").as_deref(),
        Ok("none"),
        "run the suite through cargo (`cargo test --locked`)"
    );
    // Two whole-GPU jobs on two GPUs start together: a host rule of one
    // GPU or one running job would hold the second back.
    let env = crate::common::Env::new("[vram=20000] sleep 1.5\n[vram=20000] sleep 1.5\n");
    let sched = env.spawn(&["--sim", "2", "--poll", "0.1"]);
    crate::common::wait_for("both running at once", &mut || {
        std::fs::read_to_string(env.logs.join("status.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|d| d["counts"]["running"] == 2)
    });
    let out = sched.finish();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!out.stdout.contains("box rules"), "{}", out.stdout);
}

/// Mallory's process on root's simulated GPU names root's log directory
/// and job 1 in its environment (GPUSCHED_LOG_DIR, GPUSCHED_JOB): root's
/// scheduler, whose job 1 has ended, never takes it for that job's
/// leftover, because a process's environment is read only when its own
/// `/proc/PID/status` says it runs as the scheduler's user. On the
/// previous release root read her environment and its board said "pid N
/// of finished job 1 still holds 1000 MiB".
#[test]
fn another_users_process_naming_our_job_is_not_our_leftover() {
    let Some([_, _, mal]) = users() else {
        return;
    };
    let b = Box_::new("");
    let env = common::users::open_env("[vram=1000] true\n");
    let mut args = b.args(1, false);
    args.extend(["--poll", "0.1", "--watch", "--no-containment"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sched = env.spawn(&args);
    common::wait_for("job 1's end", &mut || env.status_of_opt(1).is_some());
    let mut hers = Command::new(common::bin())
        .args(["simjob", "--vram", "1000", "--ramp", "0.1", "--hold", "60"])
        .env("GPUSCHED_SIM_DIR", &b.sim)
        .env("CUDA_VISIBLE_DEVICES", "0")
        .env("GPUSCHED_JOB", "1")
        .env("GPUSCHED_LOG_DIR", &env.logs)
        .uid(mal.0)
        .gid(mal.1)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let report = b.sim.join(format!("{}.json", hers.id()));
    common::wait_for("her process on GPU 0", &mut || report.exists());
    // Seen by the scheduler: its status shows her memory in use.
    common::wait_for("root's scheduler to see her memory", &mut || {
        std::fs::read_to_string(env.logs.join("status.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|d| d["gpus"][0]["used_mib"].as_u64().unwrap_or(0) >= 1000)
    });
    env.wait_for_ticks(5);
    let left = std::fs::read_to_string(env.logs.join("status.json")).unwrap();
    let _ = hers.kill();
    let _ = hers.wait();
    let out = sched.stop();
    assert!(!out.stdout.contains("left behind"), "{}", out.stdout);
    assert!(!out.stdout.contains("of finished job 1"), "{}", out.stdout);
    let doc: serde_json::Value = serde_json::from_str(&left).unwrap();
    assert!(
        doc["gpus"][0]["left_behind"]
            .as_array()
            .is_none_or(|l| l.is_empty()),
        "{left}"
    );
}
