//! Exactly once under stops, kills and edits (docs/BEHAVIOUR.md "Exactly
//! once"): a stop always ends, an end beats a kill, no append is lost to a
//! cancel, `--fresh` never doubles a live job, long commands run and a
//! shell that cannot start says why. Judged as a user would: by the
//! timestamps jobs write, the journal and the jobs file.

use crate::common;

use common::*;
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

/// `n` short jobs; each writes `<i> start <ns>` and `<i> end <ns>` to
/// `marks` (nanoseconds since the epoch, as `date +%s%N` prints them).
/// The end mark is the job's last act: the shell becomes `date` (`exec`),
/// which takes the time, writes it and exits, so a job whose end mark is
/// older than a kill had exited before that kill.
fn marked_jobs(n: usize, dir: &std::path::Path) -> String {
    let marks = dir.join("marks");
    (1..=n)
        .map(|i| {
            format!(
                "[vram=100M] echo {i} start $(date +%s%N) >> {m}; sleep 0.{}; exec date '+{i} end %s%N' >> {m}\n",
                i % 4 + 1,
                m = marks.display()
            )
        })
        .collect()
}

/// The marks jobs wrote: per job, its start and end times (ns).
fn read_marks(env: &Env) -> BTreeMap<u64, (Vec<u128>, Vec<u128>)> {
    let text = std::fs::read_to_string(env.path("marks")).unwrap_or_default();
    let mut marks: BTreeMap<u64, (Vec<u128>, Vec<u128>)> = BTreeMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [no, what, ts] = parts[..] else { continue };
        let (Ok(no), Ok(ts)) = (no.parse(), ts.parse()) else {
            continue;
        };
        let entry = marks.entry(no).or_default();
        if what == "start" {
            entry.0.push(ts);
        } else {
            entry.1.push(ts);
        }
    }
    marks
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Every key whose last word in the journal is `started`: an attempt with
/// no end.
fn attempts_without_an_end(env: &Env) -> Vec<String> {
    let mut last: BTreeMap<String, String> = BTreeMap::new();
    for record in env.journal() {
        let event = record["event"].as_str().unwrap_or("").to_string();
        if matches!(
            event.as_str(),
            "seen" | "starvation_hold" | "held" | "released" | "cancel"
        ) {
            continue;
        }
        last.insert(record["key"].as_str().unwrap().to_string(), event);
    }
    last.into_iter()
        .filter(|(_, e)| e == "started")
        .map(|(k, _)| k)
        .collect()
}

/// The stop under load: 600 jobs, the stop asked for the moment the first
/// round's starts are journaled — while hundreds of jobs are being let go
/// from their gates, starting and running. The scheduler ends within the
/// grace plus a second (10 + 1 s; generous slack for a loaded machine),
/// and every attempt has an end in the journal.
fn stop_under_load(stop: impl FnOnce(&Env, &Sched)) {
    let env = Env::new("");
    env.write_jobs(&marked_jobs(600, env.dir.path()));
    // Pack: the first round starts every job that fits, not one per GPU.
    let sched = env.spawn(&["--sim", "4", "--poll", "0.2", "--placement", "pack"]);
    wait_for("the first round's starts", &mut || {
        !env.events("started").is_empty()
    });
    let asked = Instant::now();
    stop(&env, &sched);
    let out = sched.finish_within(Duration::from_secs(40));
    let took = asked.elapsed();
    assert_eq!(out.code, 130, "{}\n{}", out.stdout, out.stderr);
    assert!(
        took < Duration::from_secs(25),
        "the stop took {took:?}:\n{}",
        out.stdout
    );
    assert_eq!(attempts_without_an_end(&env), Vec::<String>::new());
    assert!(
        !out.stdout.contains("did not report their end in time"),
        "{}",
        out.stdout
    );
    let started = env.events("started").len();
    assert!(started >= 100, "{started} started");
    assert!(
        out.stdout.contains("stopping ") && out.stdout.contains(" running job"),
        "{}",
        out.stdout
    );
    // Nothing of ours runs on.
    let pids: Vec<i64> = env
        .events("started")
        .iter()
        .map(|e| e["pgid"].as_i64().unwrap())
        .collect();
    wait_for("every job's group gone", &mut || {
        pids.iter().all(|p| live_group_members(*p).is_empty())
    });
    env.assert_jobs_untouched();
}

#[test]
fn ctrl_c_with_hundreds_of_jobs_in_flight_ends_in_the_grace_and_ends_every_attempt() {
    stop_under_load(|_, sched| sched.signal(Signal::SIGINT));
}

#[test]
fn stop_with_hundreds_of_jobs_in_flight_ends_in_the_grace_and_ends_every_attempt() {
    stop_under_load(|env, _| {
        let out = env.verb(&["stop"]);
        assert!(out.status.success(), "{out:?}");
    });
}

/// A second Ctrl-C kills every job at once and ends the scheduler within
/// seconds, even while jobs ignore SIGTERM.
#[test]
fn a_second_ctrl_c_ends_the_scheduler_at_once() {
    let jobs: String = (0..20)
        .map(|i| format!("[vram=100M] trap '' TERM; sleep 300; echo {i}\n"))
        .collect();
    let env = Env::new(&jobs);
    let sched = env.spawn(&["--sim", "2", "--poll", "0.2"]);
    wait_for("twenty jobs running", &mut || {
        env.events("started").len() == 20
    });
    sched.signal(Signal::SIGINT);
    wait_for("the stop to begin", &mut || {
        sched.stdout().contains("stopping 20 running jobs")
    });
    let asked = Instant::now();
    sched.signal(Signal::SIGINT);
    let out = sched.finish_within(Duration::from_secs(30));
    assert_eq!(out.code, 130);
    assert!(
        asked.elapsed() < Duration::from_secs(8),
        "{:?}",
        asked.elapsed()
    );
    assert!(out.stdout.contains("killing every running job now"));
    for e in env.events("started") {
        let pgid = e["pgid"].as_i64().unwrap();
        wait_for("the group to go", &mut || {
            live_group_members(pgid).is_empty()
        });
    }
}

/// Ctrl-Cs over hundreds of short jobs: no job that finished before a
/// Ctrl-C runs again, and every job finishes in the end.
#[test]
fn no_job_that_finished_before_a_ctrl_c_runs_again() {
    let env = Env::new("");
    env.write_jobs(&marked_jobs(600, env.dir.path()));
    // Round i runs from launches[i] to its Ctrl-C, signals[i]; the last
    // launch is the run that finishes the queue.
    let mut launches = Vec::new();
    let mut signals = Vec::new();
    let mut outputs = Vec::new();
    for round in 0..8u64 {
        let started_before = env.events("started").len();
        launches.push(now_ns());
        let sched = env.spawn(&["--sim", "4", "--poll", "0.2"]);
        // Its signal handlers are set up before its first start.
        wait_for("this round's first start", &mut || {
            env.events("started").len() > started_before || !sched.child_is_running()
        });
        // Into the flood of ends: the round's jobs run 0.1 to 0.4 s.
        std::thread::sleep(Duration::from_millis(150 + 50 * (round % 6)));
        if !sched.child_is_running() {
            sched.finish();
            break;
        }
        signals.push(now_ns());
        sched.signal(Signal::SIGINT);
        let out = sched.finish_within(Duration::from_secs(40));
        outputs.push(out.stdout.clone());
        assert!(
            out.code == 130 || out.code == 0,
            "{}\n{}",
            out.stdout,
            out.stderr
        );
        assert_eq!(attempts_without_an_end(&env), Vec::<String>::new());
    }
    launches.push(now_ns());
    let out = env.run(&["--sim", "4", "--poll", "0.2"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let marks = read_marks(&env);
    assert_eq!(marks.len(), 600);
    // Half a second: between its end mark and its exit a job is one
    // process returning from write(2), but with hundreds of jobs starting
    // on two cores (and other tests beside this one) it can wait that long
    // to run, and a kill that reached it in between rightly runs it again.
    let margin = 500_000_000;
    for (no, (starts, ends)) in &marks {
        assert!(!ends.is_empty(), "job {no} never finished");
        let first_end = *ends.iter().min().unwrap();
        // The Ctrl-C that stopped the round of the attempt that ended
        // first. The round is the last launch before that attempt's start
        // mark: a job the scheduler started just before it took the
        // Ctrl-C can write its start mark after the signal was sent, so
        // "the first Ctrl-C after the start mark" would name the round
        // after.
        let attempt_start = starts.iter().filter(|s| **s < first_end).max().copied();
        let round = attempt_start.and_then(|t| launches.iter().rposition(|l| *l < t));
        let round_signal = round.and_then(|r| signals.get(r));
        let finished_before_its_stop = round_signal.is_some_and(|s| first_end + margin <= *s);
        let started_again = starts.iter().any(|s| *s > first_end);
        if finished_before_its_stop && started_again {
            let key = env
                .events("seen")
                .into_iter()
                .find(|e| {
                    e["command"]
                        .as_str()
                        .unwrap()
                        .starts_with(&format!("echo {no} start"))
                })
                .unwrap()["key"]
                .clone();
            let events: Vec<Value> = env
                .journal()
                .into_iter()
                .filter(|e| e["key"] == key)
                .collect();
            let said: Vec<&str> = outputs
                .iter()
                .flat_map(|o| o.lines())
                .filter(|l| {
                    l.contains(&format!("job {no} "))
                        || l.contains("Ctrl-C")
                        || l.contains("gpusched 0.")
                })
                .collect();
            panic!(
                "job {no} finished at {first_end} before a Ctrl-C ({signals:?}) and ran again: {starts:?}, ends {ends:?}; journal: {events:?}\n{}",
                said.join("\n")
            );
        }
    }
    assert!(!signals.is_empty());
}

/// The supervisor alone: an exit that came before a kill request is the
/// job's outcome (`killed` unset) — the supervisor is stopped while the
/// job exits, so the request and the end wait together and the request is
/// read first; a running job that the kill reaches is `killed`; a job at
/// its gate is killed there and reported as never run.
#[test]
fn the_supervisor_reaps_before_it_signals() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let (mut supervisor, mut to, mut from) = spawn_supervisor(dir.path());
    let spid = nix::unistd::Pid::from_raw(supervisor.id() as i32);
    let start = |id: u64, command: &str| {
        json!({"start": {"id": id, "job": {
            "command": command, "env": [], "log": dir.path().join(format!("job{id}.log")),
            "record": dir.path().join(format!("exits/k{id}.1.json")),
            "key": format!("k{id}"), "attempt": 1,
        }}})
    };
    let mut reply = || {
        let mut line = String::new();
        from.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line).unwrap()
    };
    writeln!(
        to,
        "{}\n{}\n{}",
        start(1, "exit 4"),
        start(2, "sleep 60"),
        start(3, "touch ran")
    )
    .unwrap();
    let mut pids = BTreeMap::new();
    for _ in 0..3 {
        let r = reply();
        pids.insert(
            r["started"]["id"].as_u64().unwrap(),
            r["started"]["pid"].as_i64().unwrap(),
        );
    }
    // Job 1 exits while its supervisor is stopped; the kill request waits
    // with its end.
    nix::sys::signal::kill(spid, Signal::SIGSTOP).unwrap();
    writeln!(to, "{}", json!({"go": 1})).unwrap();
    // `go` cannot be read while stopped: let it run, then stop again.
    nix::sys::signal::kill(spid, Signal::SIGCONT).unwrap();
    let zombie = |pid: i64| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
    };
    wait_for("job 1 to exit", &mut || {
        !std::path::Path::new(&format!("/proc/{}", pids[&1])).exists() || zombie(pids[&1])
    });
    nix::sys::signal::kill(spid, Signal::SIGSTOP).unwrap();
    writeln!(to, "{}", json!({"signal": {"id": 1, "signal": 15}})).unwrap();
    nix::sys::signal::kill(spid, Signal::SIGCONT).unwrap();
    let one = reply();
    assert_eq!(one["ended"]["id"], 1, "{one}");
    assert_eq!(one["ended"]["record"]["code"], 4, "{one}");
    assert_eq!(one["ended"]["record"].get("killed"), None, "{one}");
    // A running job: the kill reaches it.
    writeln!(to, "{}", json!({"go": 2})).unwrap();
    wait_for("job 2 to run", &mut || {
        std::fs::read_to_string(format!("/proc/{}/cmdline", pids[&2]))
            .is_ok_and(|c| c.contains("sleep"))
    });
    writeln!(to, "{}", json!({"signal": {"id": 2, "signal": 15}})).unwrap();
    let two = reply();
    assert_eq!(two["ended"]["id"], 2, "{two}");
    assert_eq!(two["ended"]["record"]["killed"], true, "{two}");
    assert_eq!(two["ended"]["record"]["signal"], 15, "{two}");
    // A job at its gate: killed there, reported as never run.
    writeln!(to, "{}", json!({"signal": {"id": 3, "signal": 15}})).unwrap();
    let three = reply();
    assert_eq!(three["ended"]["id"], 3, "{three}");
    assert_eq!(three["ended"]["record"]["never_ran"], true, "{three}");
    assert!(!dir.path().join("ran").exists());
    writeln!(to, "{}", json!({"ack": 1})).unwrap();
    writeln!(to, "{}", json!({"ack": 2})).unwrap();
    writeln!(to, "{}", json!({"ack": 3})).unwrap();
    drop(to);
    wait_for("the supervisor to exit", &mut || {
        supervisor.try_wait().unwrap().is_some()
    });
    assert!(
        std::fs::read_dir(dir.path().join("exits")).map_or(0, |d| d.count()) == 0,
        "acknowledged ends need no records"
    );
}

/// A job whose timeout falls due as it exits keeps its real outcome: the
/// timeout's kill goes through the supervisor, which reaps first.
#[test]
fn a_timeout_at_the_moment_of_exit_keeps_the_real_outcome() {
    // Each job exits right at its timeout; under an end-beats-kill rule a
    // job that exited is ok, one the kill reached is `timeout` — never a
    // job that wrote its last line long before the kill.
    let jobs: String = (0..30)
        .map(|i| format!("[vram=100M timeout=0.3] sleep 0.29; echo {i} >> done.txt\n"))
        .collect();
    let env = Env::new(&jobs);
    let out = env.run(&["--sim", "2", "--poll", "0.1"]);
    let done = std::fs::read_to_string(env.path("done.txt")).unwrap_or_default();
    for record in env.events("done") {
        if record["status"] == "timeout" {
            continue;
        }
        assert_eq!(record["status"], "ok", "{record}\n{}", out.stdout);
        assert_eq!(record["returncode"], 0);
    }
    let ok = env
        .events("done")
        .iter()
        .filter(|r| r["status"] == "ok")
        .count();
    assert!(
        done.lines().count() >= ok,
        "every ok job wrote its line: {ok} ok, {done}"
    );
}

/// `gpusched cancel` never rewrites the jobs file: thousands of appends
/// racing cancels keep every line.
#[test]
fn appends_racing_cancels_keep_every_line() {
    // Enough appends for the cancels' rewrites to race many of them.
    const APPENDS: usize = 800;
    let mut base = String::from("[vram=100M] sleep 300 # base\n");
    for i in 0..20 {
        base.push_str(&format!("[vram=100M] sleep 300 # c{i}\n"));
    }
    let env = Env::new(&base);
    let sched = env.spawn(&["--sim", "1", "--poll", "0.2", "--watch"]);
    wait_for("the jobs seen", &mut || env.events("seen").len() == 21);
    let jobs = env.jobs.clone();
    let appender = std::thread::spawn(move || {
        use std::io::Write;
        for i in 0..APPENDS {
            let mut file = std::fs::File::options().append(true).open(&jobs).unwrap();
            writeln!(file, "[vram=100M] true # appended {i}").unwrap();
        }
    });
    let mut cancels = 0;
    while !appender.is_finished() || cancels < 20 {
        let no = (cancels % 20 + 2).to_string();
        let out = env.verb(&["cancel", &no]);
        assert!(out.status.success(), "{out:?}");
        cancels += 1;
    }
    appender.join().unwrap();
    let text = std::fs::read_to_string(&env.jobs).unwrap();
    let kept = text.lines().filter(|l| l.contains("# appended")).count();
    assert_eq!(kept, APPENDS, "{cancels} cancels");
    assert!(text.starts_with(&base), "the file's start is untouched");
    wait_for("every appended job done", &mut || {
        env.events("done").len() >= APPENDS + 20
    });
    for no in 2..=21u64 {
        assert_eq!(env.status_of(no).as_deref(), Some("cancelled"), "job {no}");
    }
    sched.stop();
}

/// After kill -9 of the scheduler, `--fresh` refuses while the old run's
/// job still runs (naming it) instead of starting a second copy; once the
/// job ended, `--fresh` runs everything again.
#[test]
fn fresh_after_kill_9_starts_no_second_copy() {
    let env = Env::new("echo start >> runs.txt; sleep 3; echo end >> runs.txt\n");
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1"]);
    wait_for("the job to run", &mut || {
        std::fs::read_to_string(env.path("runs.txt")).is_ok_and(|t| t.contains("start"))
    });
    sched.signal(Signal::SIGKILL);
    sched.finish();
    let out = env.run(&["--sim", "1", "--poll", "0.1", "--fresh"]);
    assert_eq!(out.code, 2, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("--fresh would start a second copy of job 1"),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read_to_string(env.path("runs.txt")).unwrap(),
        "start\n",
        "no second copy"
    );
    wait_for("the job to end", &mut || {
        std::fs::read_to_string(env.path("runs.txt")).is_ok_and(|t| t.contains("end"))
    });
    // Its supervisor exits after writing the record; then --fresh runs.
    wait_for_within("--fresh to be allowed", DEADLINE, &mut || {
        let out = env.run(&["--sim", "1", "--poll", "0.1", "--fresh"]);
        out.code == 0
    });
    assert_eq!(
        std::fs::read_to_string(env.path("runs.txt")).unwrap(),
        "start\nend\nstart\nend\n"
    );
}

/// A command far over one exec argument's 128 KiB runs; its words reach
/// the shell intact.
#[test]
fn a_one_mib_command_runs() {
    let filler = "x".repeat(1024 * 1024);
    let command = format!("v={filler}; echo ${{#v}} > length.txt\n");
    let env = Env::new(&command);
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    assert_eq!(
        std::fs::read_to_string(env.path("length.txt")).unwrap(),
        format!("{}\n", 1024 * 1024)
    );
}

/// A job whose shell cannot be started says why in its log and its
/// completion line, and ends `failed` with a shell's exit code.
#[test]
fn a_shell_that_cannot_start_says_why() {
    // A command just under one argument's 128 KiB, with the environment,
    // is over what exec takes in all under a 512 KiB stack limit (a
    // quarter of the stack, but never under 128 KiB).
    let command = format!("true {}\n", "y".repeat(127 * 1024 - 10));
    let env = Env::new(&command);
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(format!("ulimit -s 512 && exec {} \"$@\"", bin()))
        .arg("gpusched")
        .arg(&env.jobs)
        .arg("--log-dir")
        .arg(&env.logs)
        .args(["--sim", "1", "--poll", "0.1"])
        .current_dir(env.dir.path())
        .env_remove("GPUSCHED_SIM_DIR")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out = Sched::from_command(cmd).finish();
    let tail = |s: &str| s[s.len().saturating_sub(2000)..].to_string();
    assert_eq!(out.code, 126, "{}\n{}", tail(&out.stdout), out.stderr);
    assert_eq!(env.status_of(1).as_deref(), Some("failed"));
    assert_eq!(env.job_events(1, "done")[0]["returncode"], 126);
    assert!(
        out.stdout
            .contains("cannot start the job's shell /bin/sh: Argument list too long"),
        "{}",
        tail(&out.stdout)
    );
    let log = std::fs::read_to_string(env.logs.join("job001_gpu0.log")).unwrap();
    assert!(
        log.contains("gpusched: cannot start the job's shell /bin/sh: Argument list too long"),
        "{}",
        tail(&log)
    );
}

/// docs/BEHAVIOUR.md "Stopping": a stop that signals every process at
/// once (systemd's `KillMode=control-group`, Slurm at an allocation's
/// end) may kill a job before the scheduler reads its own SIGTERM. Made
/// certain here: the scheduler is frozen (SIGSTOP) while the job's group
/// gets SIGTERM and dies, then gets its own SIGTERM and is thawed. The
/// job is `interrupted` and runs again on the next start, never `failed`
/// (the previous release recorded `failed (killed by SIGTERM)`); a job
/// that exited on its own before keeps its outcome.
#[test]
fn a_job_killed_by_the_stops_own_signal_first_is_interrupted_not_failed() {
    let env = Env::new("[vram=100M] sleep 60\n[vram=100M] exit 3\n");
    let sched = env.spawn(&["--sim", "2", "--poll", "0.2"]);
    wait_for("both jobs to start", &mut || {
        env.events("started").len() == 2
    });
    wait_for("job 2's end", &mut || env.status_of_opt(2).is_some());
    let pgid = env.job_events(1, "started")[0]["pgid"].as_i64().unwrap();
    sched.signal(Signal::SIGSTOP);
    // SIGSTOP takes effect when the scheduler next runs: wait for it.
    wait_for("the scheduler to be stopped", &mut || {
        std::fs::read_to_string(format!("/proc/{}/stat", sched.pid())).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
        })
    });
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid as i32), Signal::SIGTERM).unwrap();
    wait_for("job 1's group to die", &mut || {
        live_group_members(pgid).is_empty()
    });
    sched.signal(Signal::SIGTERM);
    sched.signal(Signal::SIGCONT);
    let out = sched.finish();
    // The previous release: `✗ job 1 failed in 0.0s (killed by SIGTERM)`.
    assert!(
        env.job_events(1, "done").is_empty(),
        "{:?}\n{}",
        env.journal(),
        out.stdout
    );
    assert_eq!(
        env.job_events(1, "interrupted").len(),
        1,
        "{:?}",
        env.journal()
    );
    assert_eq!(env.status_of(2).as_deref(), Some("failed"));
    assert_eq!(out.code, 130, "{out:?}");
}
