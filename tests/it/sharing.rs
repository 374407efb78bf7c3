//! Sharing a box (docs/BEHAVIOUR.md "Sharing a box", "Simulation"): two schedulers on the same simulated GPU
//! with and without the ledger, the trust rules against dead, garbage and
//! foreign-owned booking files, and the simulator's physical limit.

use crate::common;

use common::{Env, Sched, wait_for};
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command};

/// The first simulated GPU's UUID (docs/BEHAVIOUR.md "Simulation").
const SIM_GPU0: &str = "GPU-5157-0000-0000-0000-000000000000";

/// Three 14 GB jobs that each ramp over a second, held back until `go`
/// exists, so that two schedulers' first jobs are started before either
/// uses any memory: the race of docs/BEHAVIOUR.md "Sharing a box", every time.
fn three_big_jobs(go: &Path) -> String {
    let line = format!(
        "[vram=14000] sh -c 'while [ ! -e {} ]; do sleep 0.01; done; exec gpusched simjob --vram 14000 --ramp 1 --hold 0.3'\n",
        go.display()
    );
    line.repeat(3)
}

fn status_json(env: &Env) -> Value {
    std::fs::read_to_string(env.logs.join("status.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

fn running(env: &Env) -> usize {
    status_json(env)["counts"]["running"].as_u64().unwrap_or(0) as usize
}

fn reason_of(env: &Env, no: u64) -> String {
    status_json(env)["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|j| j["no"] == no))
        .and_then(|j| j["reason"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn oom_events(env: &Env) -> usize {
    env.events("oom").len()
        + env
            .events("done")
            .iter()
            .filter(|d| d["status"] == "failed_oom")
            .count()
}

/// Two users' schedulers, each given the same simulated GPU.
fn two_schedulers(extra: &[&str]) -> (Env, Env, std::path::PathBuf, Sched, Sched) {
    let a = Env::new("");
    let shared = a.path("gpus");
    let go = a.path("go");
    a.write_jobs(&three_big_jobs(&go));
    let b = Env::new(&three_big_jobs(&go));
    let shared_arg = shared.display().to_string();
    let mut args = vec!["--sim", "1", "--sim-dir", &shared_arg, "--poll", "0.1"];
    args.extend_from_slice(extra);
    let sa = a.spawn(&args);
    let sb = b.spawn(&args);
    (a, b, go, sa, sb)
}

#[test]
fn two_schedulers_with_the_ledger_never_start_jobs_into_the_same_memory() {
    let (a, b, go, sa, sb) = two_schedulers(&[]);
    // One of them books the GPU first; the other's first job waits and
    // says whose booking it waits for.
    wait_for("one job running", &mut || running(&a) + running(&b) == 1);
    let (waiting, busy) = if running(&a) == 1 { (&b, &a) } else { (&a, &b) };
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .unwrap()
        .name;
    wait_for("the other's job to say why it waits", &mut || {
        reason_of(waiting, 1).contains("booked by")
    });
    assert_eq!(
        reason_of(waiting, 1),
        format!("GPU 0 booked by {me}'s scheduler")
    );
    let gpu = &status_json(waiting)["gpus"][0];
    assert_eq!(gpu["booked_by_others"][0]["user"], me.as_str());
    assert_eq!(gpu["booked_by_others"][0]["jobs"], 1);
    assert!(
        gpu["booked_by_others"][0]["mib"].as_u64().unwrap() >= 14000,
        "{gpu}"
    );
    assert!(waiting.board().contains("booked by"), "{}", waiting.board());
    assert_eq!(running(busy), 1);
    std::fs::write(&go, "").unwrap();

    let (out_a, out_b) = (sa.finish(), sb.finish());
    assert_eq!(out_a.code, 0, "{}{}", out_a.stdout, out_a.stderr);
    assert_eq!(out_b.code, 0, "{}{}", out_b.stdout, out_b.stderr);
    for env in [&a, &b] {
        for no in 1..=3 {
            assert_eq!(env.status_of(no).as_deref(), Some("ok"));
        }
        assert_eq!(oom_events(env), 0);
    }
    // Never two at once: the six attempts' lifetimes do not overlap.
    let mut all: Vec<(f64, f64)> = a
        .attempts()
        .into_iter()
        .chain(b.attempts())
        .map(|(start, end, _)| (start, end))
        .collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    assert_eq!(all.len(), 6);
    for pair in all.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "two jobs at once: {all:?}");
    }
    // Each scheduler took its bookings with it.
    let ledger = a.path("gpus").join("ledger");
    let left: Vec<_> = std::fs::read_dir(&ledger)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().ends_with(".json"))
        .collect();
    assert!(left.is_empty(), "booking files left: {left:?}");
}

#[test]
fn without_the_ledger_the_same_race_ends_in_a_cuda_oom() {
    let (a, b, go, sa, sb) = two_schedulers(&["--no-ledger"]);
    // Both see the same free memory and both start a 14 GB job into it.
    wait_for("both first jobs running", &mut || {
        running(&a) == 1 && running(&b) == 1
    });
    std::fs::write(&go, "").unwrap();
    let (out_a, out_b) = (sa.finish(), sb.finish());
    let ooms = oom_events(&a) + oom_events(&b);
    assert!(
        ooms >= 1,
        "expected a collision:\n{}{}\n{}{}",
        out_a.stdout,
        out_a.stderr,
        out_b.stdout,
        out_b.stderr
    );
    let logs: String = [&a, &b]
        .iter()
        .flat_map(|env| std::fs::read_dir(&env.logs).unwrap().flatten())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(logs.contains("CUDA out of memory"), "{logs}");
    assert!(!a.path("gpus").join("ledger").exists());
}

/// A process started in its own session (so it leads its own process
/// group), optionally as another user; with its start ticks.
fn leader(uid: Option<u32>) -> (Child, u64) {
    let mut cmd = Command::new("sleep");
    cmd.arg("120").process_group(0);
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let child = cmd.spawn().unwrap();
    let ticks = start_ticks(child.id());
    (child, ticks)
}

fn start_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// Writes a booking file for a fake scheduler `sched` whose job group
/// `group` books `mib` on GPU 0.
fn book(ledger: &Path, sched: &(Child, u64), group: &(Child, u64), mib: u64) -> std::path::PathBuf {
    std::fs::create_dir_all(ledger).unwrap();
    let path = ledger.join(format!("0.{}.json", sched.0.id()));
    let file = serde_json::json!({
        "version": 1,
        "pid": sched.0.id(),
        "start_ticks": sched.1,
        "log_dir": "/home/bob/gpusched_logs",
        "bookings": [{
            "gpu_uuid": SIM_GPU0, "mib": mib, "pgid": group.0.id(),
            "start_ticks": group.1, "job": "1"
        }]
    });
    std::fs::write(&path, file.to_string()).unwrap();
    path
}

/// docs/BEHAVIOUR.md "Sharing a box": a booking holds its memory while
/// its job's process group lives, also after its scheduler died (a
/// kill -9: the job runs on under its supervisor, maybe still ramping up
/// to what it declared); once the group is gone, nothing of it counts. The
/// previous release dropped the booking with the scheduler, and started
/// into memory the orphan was about to use.
#[test]
fn a_booking_holds_memory_while_its_job_lives_even_when_its_scheduler_died() {
    let env = Env::new("[vram=10000] true\n");
    let ledger = env.path("ledger");
    let mut sched = leader(None);
    let mut group = leader(None);
    book(&ledger, &sched, &group, 20000);
    let ledger_arg = ledger.display().to_string();
    let s = env.spawn(&[
        "--sim",
        "1",
        "--poll",
        "0.1",
        "--ledger",
        &ledger_arg,
        "--watch",
    ]);
    // 20000 booked of 24000: 10000 + 512 margin does not fit.
    wait_for("the job to wait for the booking", &mut || {
        reason_of(&env, 1).contains("booked by")
    });
    assert_eq!(env.status_of_opt(1), None);
    // The other scheduler dies (SIGKILL): its job's process group lives
    // on, and so does its booking.
    sched.0.kill().unwrap();
    sched.0.wait().unwrap();
    env.wait_for_ticks(env.ticks() + 10);
    assert_eq!(
        env.status_of_opt(1),
        None,
        "started into the orphan's memory"
    );
    assert!(
        reason_of(&env, 1).contains("booked by"),
        "{}",
        reason_of(&env, 1)
    );
    // The job ends: the file is stale, and nothing of it counts.
    group.0.kill().unwrap();
    group.0.wait().unwrap();
    wait_for("the job to run once the booking is stale", &mut || {
        env.status_of_opt(1).as_deref() == Some("ok")
    });
    let out = s.stop();
    assert!(out.stdout.contains("no longer running"), "{}", out.stdout);
}

#[test]
fn garbage_in_the_ledger_is_ignored_with_one_warning_each() {
    let env = Env::new("[vram=10000] sleep 0.5\n[vram=10000] sleep 0.5\n");
    let ledger = env.path("ledger");
    std::fs::create_dir_all(ledger.join("dir.json")).unwrap();
    std::fs::write(ledger.join("torn.json"), "{\"version\":1,\"pid\":").unwrap();
    std::fs::write(ledger.join("huge.json"), vec![b' '; 1 << 20]).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", ledger.join("link.json")).unwrap();
    let sched = leader(None);
    let group = leader(None);
    // A booking of more memory than any GPU has.
    let lying = book(&ledger, &sched, &group, 1 << 40);
    let out = env.run(&[
        "--sim",
        "1",
        "--poll",
        "0.05",
        "--ledger",
        &ledger.display().to_string(),
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    assert_eq!(env.status_of(2).as_deref(), Some("ok"));
    for (name, why) in [
        ("dir.json", "not a regular file"),
        ("torn.json", "malformed"),
        ("huge.json", "bytes, more than"),
        ("link.json", "not a regular file"),
        (
            lying.file_name().unwrap().to_str().unwrap(),
            "more than any GPU",
        ),
    ] {
        let lines: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| l.contains("ledger: ignoring") && l.contains(name))
            .collect();
        assert_eq!(lines.len(), 1, "one warning for {name}:\n{}", out.stdout);
        assert!(lines[0].contains(why), "{}", lines[0]);
    }
    // Nothing was written through the link or into the others' files.
    assert!(
        std::fs::symlink_metadata(ledger.join("link.json"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        std::fs::read_to_string("/etc/passwd")
            .unwrap()
            .contains("root")
    );
    for (mut child, _) in [sched, group] {
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn a_booking_counts_only_for_the_files_owner() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!(
            "skipped: the foreign-owner test needs root (to own files and processes as another user)"
        );
        return;
    }
    let nobody = 65534;
    let env = Env::new("[vram=10000] true\n");
    let ledger = env.path("ledger");
    std::fs::create_dir_all(&ledger).unwrap();
    std::fs::set_permissions(
        &ledger,
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    // nobody's file naming root's processes: a forged booking.
    let (root_sched, root_group) = (leader(None), leader(None));
    let forged = book(&ledger, &root_sched, &root_group, 20000);
    std::os::unix::fs::chown(&forged, Some(nobody), Some(nobody)).unwrap();
    let ledger_arg = ledger.display().to_string();
    let args = ["--sim", "1", "--poll", "0.1", "--ledger", &ledger_arg];
    let out = env.run(&args);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    assert!(
        out.stdout.contains("does not run as the file's owner"),
        "{}",
        out.stdout
    );
    std::fs::remove_file(&forged).unwrap();

    // The control: nobody's file naming nobody's processes counts.
    let env = Env::new("[vram=10000] true\n");
    let (mut sched, group) = (leader(Some(nobody)), leader(Some(nobody)));
    let honest = book(&ledger, &sched, &group, 20000);
    std::os::unix::fs::chown(&honest, Some(nobody), Some(nobody)).unwrap();
    let s = env.spawn(&args);
    wait_for("the job to wait for nobody's booking", &mut || {
        reason_of(&env, 1).contains("booked by")
    });
    sched.0.kill().unwrap();
    sched.0.wait().unwrap();
    assert_eq!(s.finish().code, 0);
    for (mut child, _) in [root_sched, root_group, group] {
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn the_simulator_fails_an_allocation_past_capacity_like_cuda() {
    // Declared 5 GB but really 20 GB each: both are placed side by side
    // and the second allocation to cross 24000 MiB fails (warn: neither is
    // stopped for its over-use first).
    let env = Env::new(
        "[vram=5000] gpusched simjob --vram 20000 --ramp 0.5 --hold 0.5\n\
         [vram=5000] gpusched simjob --vram 20000 --ramp 0.5 --hold 0.5\n",
    );
    let out = env.run(&["--sim", "1", "--poll", "0.05", "--enforce", "warn"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let statuses: Vec<String> = (1..=2).filter_map(|no| env.status_of(no)).collect();
    assert!(statuses.contains(&"failed_oom".to_string()), "{statuses:?}");
    let log = std::fs::read_dir(&env.logs)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .find(|text| text.contains("CUDA out of memory"))
        .expect("an OOM message in a job's log");
    assert!(
        log.contains("GPU 0 has a total capacity of 24000 MiB"),
        "{log}"
    );
}

#[test]
fn a_scheduler_killed_and_restarted_books_its_surviving_job_again() {
    let a = Env::new(
        "[vram=14000] sh -c 'gpusched simjob --vram 14000 --ramp 0.2 --hold 600 & while [ ! -e release ]; do sleep 0.05; done; kill $!'\n",
    );
    let shared = a.path("gpus").display().to_string();
    let args = [
        "--sim",
        "1",
        "--sim-dir",
        &shared,
        "--poll",
        "0.1",
        "--watch",
    ];
    let first = a.spawn(&args);
    // Until its scheduler books it again, the orphan is seen only by the
    // memory it uses: let it reach it.
    wait_for("a's job to hold its memory", &mut || {
        status_json(&a)["gpus"][0]["used_mib"].as_u64() == Some(14000)
    });
    // SIGKILL: the job lives on (its supervisor keeps it), a's booking
    // file is left behind, stale.
    first.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = first.finish();
    let b = Env::new("[vram=14000] echo b > b.txt\n");
    let sb = b.spawn(&args);
    // The dead scheduler's booking of its live job counts, and so does
    // the job's memory.
    wait_for("b's job to wait", &mut || !reason_of(&b, 1).is_empty());
    assert!(!b.path("b.txt").exists());
    // a comes back, adopts its job and books it again (b counts it once:
    // the booking is no larger than what the job already uses).
    let again = a.spawn(&args);
    wait_for("b to see a's booking again", &mut || {
        status_json(&b)["gpus"][0]["booked_by_others"][0]["mib"].as_u64() == Some(14000)
    });
    assert_eq!(
        status_json(&b)["gpus"][0]["external_mib"]
            .as_u64()
            .map(|m| m < 16000),
        Some(true)
    );
    assert!(!b.path("b.txt").exists());
    std::fs::write(a.path("release"), "").unwrap();
    wait_for("b's job once a's ended", &mut || b.path("b.txt").exists());
    again.stop();
    sb.stop();
    assert_eq!(a.status_of(1).as_deref(), Some("ok"));
}

/// docs/SECURITY.md "The shared ledger": another user's thousand garbage
/// files (names holding a newline and a forged board line among them)
/// cost at most one line per file read and one for the cap, never a
/// forged line; a scheduler that re-publishes fresh `starting` bookings
/// every few milliseconds holds the GPU for at most
/// `MAX_STARTING_STREAK_MS`, then our job starts.
#[test]
fn a_flood_of_files_and_an_endless_start_cost_a_few_lines_and_block_nothing() {
    if !nix::unistd::geteuid().is_root() {
        common::skipped("the ledger flood test needs root (to own files as another user)");
        return;
    }
    let env = Env::new("[vram=10000] true\n");
    let ledger = env.path("ledger");
    std::fs::create_dir_all(&ledger).unwrap();
    let nobody = 65534;
    for i in 0..1000 {
        let name = if i % 2 == 0 {
            format!("{i}.json")
        } else {
            format!("x\n[10:00:00] ✓ job {i} ok (exit 0).json")
        };
        let path = ledger.join(name);
        std::fs::write(&path, "{\"version\":1,\"pid\":").unwrap();
        std::os::unix::fs::lchown(&path, Some(nobody), Some(nobody)).unwrap();
    }
    // The flapper: a live scheduler of ours whose whole GPU is "starting",
    // stamped afresh every 5 ms.
    let sched = leader(None);
    let group = leader(None);
    let flapper = ledger.join(format!("0.{}.json", sched.0.id()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, flapper) = (stop.clone(), flapper.clone());
        let (pid, ticks, pgid, group_ticks) = (sched.0.id(), sched.1, group.0.id(), group.1);
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as u64;
                let file = serde_json::json!({
                    "version": 1, "pid": pid, "start_ticks": ticks,
                    "bookings": [{
                        "gpu_uuid": SIM_GPU0, "mib": 24000, "pgid": pgid,
                        "start_ticks": group_ticks, "job": "1",
                        "since_ms": now, "starting": true
                    }]
                });
                let tmp = flapper.with_extension("tmp");
                std::fs::write(&tmp, file.to_string()).unwrap();
                std::fs::rename(&tmp, &flapper).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })
    };
    let out = env.run(&[
        "--sim",
        "1",
        "--poll",
        "0.1",
        "--ledger",
        &ledger.display().to_string(),
    ]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    let lines_with = |needle: &str| out.stdout.lines().filter(|l| l.contains(needle)).count();
    let garbage = lines_with("ledger: ignoring");
    assert!(
        (1..=gpusched::ledger::store::MAX_FILES_PER_USER).contains(&garbage),
        "{garbage} lines for the flood:\n{}",
        out.stdout
    );
    assert_eq!(
        lines_with("only the first 32 of their files are read"),
        1,
        "{}",
        out.stdout
    );
    assert!(
        !out.stdout.lines().any(|l| l.starts_with("[10:00:00] ✓")),
        "a forged line reached the terminal:\n{}",
        out.stdout
    );
    assert_eq!(
        lines_with("kept bookings \"starting\" for over 1.5 s"),
        1,
        "{}",
        out.stdout
    );
    for (mut child, _) in [sched, group] {
        let _ = child.kill();
        let _ = child.wait();
    }
}
