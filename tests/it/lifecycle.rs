//! Black-box tests of the job lifecycle (docs/BEHAVIOUR.md "Running a job", "Orphans", "Out of memory and timeouts", "Board and terminal"): OOM
//! retries, timeouts, cancel, killing whole process groups, the
//! scheduler's own signals, and orphans of a previous scheduler. Real
//! processes, `--sim` GPUs.

use crate::common;

use common::{Env, journal_with_orphan, live_group_members, start_ticks, wait_for};
use nix::sys::signal::Signal;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

/// A job that runs until `release` exists in the working directory.
const HOLD: &str = "sh -c 'while [ ! -e release ]; do sleep 0.05; done'";

fn pgid_of(env: &Env, no: u64) -> i64 {
    env.job_events(no, "started").last().expect("job started")["pgid"]
        .as_i64()
        .unwrap()
}

#[test]
fn oom_retry_uses_the_exact_bumped_declaration_and_survives_a_restart() {
    // Job 2 holds 19000 MiB so the retry (5000 + 512 MiB) must wait.
    let oom = "[vram=4000 retries=1] gpusched simjob --vram 2000 --ramp 0.2 --oom-once oom.marker";
    let env = Env::new(&format!("{oom}\n[vram=19000] {HOLD}\n"));
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1"]);
    wait_for("the oom event", &mut || !env.events("oom").is_empty());
    let event = &env.events("oom")[0];
    // ceil(1.25 × max(peak ≤ 2000, declaration 4000)) = 5000.
    assert_eq!(event["attempts"], 1);
    assert_eq!(event["next_vram"], 5000);
    wait_for("the board to show the retry", &mut || {
        env.board().contains("↻ job 1") && env.board().contains("next vram 5000 MiB")
    });
    // Stop the scheduler before the retry could start; the bump must survive.
    let out = sched.stop();
    assert_eq!(out.code, 130, "{}", out.stdout);
    assert_eq!(env.job_events(1, "started").len(), 1);

    std::fs::write(env.path("release"), "").unwrap();
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let started = env.job_events(1, "started");
    assert_eq!(started.len(), 2);
    assert_eq!(started[1]["vram_mib"], 5000);
    assert_eq!(started[1]["attempt"], 2);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
}

#[test]
fn oom_without_retries_fails_as_failed_oom() {
    let env = Env::new("[vram=4000] gpusched simjob --vram 1000 --ramp 0.1 --oom-once m\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert_eq!(env.status_of(1).as_deref(), Some("failed_oom"));
    assert!(env.events("oom").is_empty());
    assert!(out.stdout.contains("no retries left"), "{}", out.stdout);
}

#[test]
fn oom_retries_flag_is_the_default() {
    let env = Env::new("gpusched simjob --vram 1000 --ramp 0.1 --oom-once m\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1", "--oom-retries", "1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(env.events("oom").len(), 1);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
}

#[test]
fn plain_failure_uses_no_retry() {
    let env = Env::new("[retries=2] echo not an oom; exit 3\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1", "--oom-retries", "5"]);
    assert_eq!(out.code, 3);
    assert_eq!(env.job_events(1, "started").len(), 1);
    assert!(env.events("oom").is_empty());
    assert_eq!(env.status_of(1).as_deref(), Some("failed"));
}

#[test]
fn timeout_kills_the_job() {
    let env = Env::new("[timeout=0.5] sleep 30\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 143, "killed by SIGTERM: {}", out.stdout);
    assert_eq!(env.status_of(1).as_deref(), Some("timeout"));
    let done = &env.job_events(1, "done")[0];
    assert!(done["duration_s"].as_f64().unwrap() < 9.0, "{done}");
    assert!(live_group_members(pgid_of(&env, 1)).is_empty());
}

#[test]
fn sigterm_ignoring_job_gets_sigkill_and_nothing_survives() {
    let env = Env::new("[timeout=0.3] sh -c 'trap \"\" TERM; sleep 60 & sleep 60; wait'\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(
        env.status_of(1).as_deref(),
        Some("timeout"),
        "{}",
        out.stdout
    );
    let done = &env.job_events(1, "done")[0];
    assert!(
        done["duration_s"].as_f64().unwrap() >= 10.0,
        "the grace is 10 s: {done}"
    );
    assert!(live_group_members(pgid_of(&env, 1)).is_empty());
}

#[test]
fn grandchild_that_ignores_sigterm_does_not_outlive_its_killed_job() {
    // The leader exits on SIGTERM at once; the subshell ignores it and must
    // be swept with SIGKILL.
    let env = Env::new(
        "[timeout=0.3] (trap '' TERM; sleep 60; echo survived > survived.txt) & sleep 60\n",
    );
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(
        env.status_of(1).as_deref(),
        Some("timeout"),
        "{}",
        out.stdout
    );
    assert!(live_group_members(pgid_of(&env, 1)).is_empty());
    assert!(!env.path("survived.txt").exists());
}

#[test]
fn cancel_a_running_job_and_it_stays_cancelled() {
    let env = Env::new(&format!("{HOLD}\n"));
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1"]);
    wait_for("job 1 to start", &mut || !env.events("started").is_empty());
    env.write_jobs(&format!("[cancel] {HOLD}\n"));
    let out = sched.finish();
    assert_eq!(
        out.code, 0,
        "a cancel does not fail the run: {}",
        out.stdout
    );
    assert_eq!(env.status_of(1).as_deref(), Some("cancelled"));
    assert!(live_group_members(pgid_of(&env, 1)).is_empty());
    // Removing the flag does not bring the job back.
    env.write_jobs(&format!("{HOLD}\n"));
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0);
    assert_eq!(env.job_events(1, "started").len(), 1);
}

#[test]
fn cancel_a_pending_job_ends_it_unrun() {
    let env = Env::new("[cancel] echo ran > ran.txt\necho other\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0);
    assert_eq!(env.status_of(1).as_deref(), Some("cancelled"));
    assert!(env.job_events(1, "started").is_empty());
    assert!(!env.path("ran.txt").exists());
    assert!(env.board().contains("⊘ job 1"), "{}", env.board());
}

#[test]
fn deleting_a_running_line_does_not_kill_it() {
    let env = Env::new(&format!("{HOLD}\n"));
    let sched = env.spawn(&["--sim", "2", "--poll", "0.1", "--watch"]);
    wait_for("job 1 to start", &mut || !env.events("started").is_empty());
    // Job 1's line goes; a new line proves the edit has been applied.
    env.write_jobs("echo seen > edit-applied.txt\n");
    wait_for("the edit to be applied", &mut || {
        env.path("edit-applied.txt").exists()
    });
    assert!(env.status_of_opt(1).is_none(), "job 1 must keep running");
    wait_for("the board to show job 1 running", &mut || {
        env.board().contains("▶ job 1")
    });
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("job 1 to end", &mut || env.status_of_opt(1).is_some());
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    sched.stop();
}

#[test]
fn ctrl_c_stops_jobs_and_the_next_start_reruns_them() {
    let job = "sh -c 'if [ -e again ]; then echo rerun > rerun.txt; else sleep 60 & sleep 60; fi'";
    let env = Env::new(&format!("{job}\n"));
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1"]);
    wait_for("job 1 to start", &mut || !env.events("started").is_empty());
    let pgid = pgid_of(&env, 1);
    wait_for("the job's processes", &mut || {
        live_group_members(pgid).len() >= 2
    });
    sched.signal(Signal::SIGINT);
    let out = sched.finish();
    assert_eq!(out.code, 130, "{}", out.stdout);
    assert!(
        live_group_members(pgid).is_empty(),
        "no job process left behind"
    );
    assert!(
        env.job_events(1, "done").is_empty(),
        "nothing recorded as done"
    );

    std::fs::write(env.path("again"), "").unwrap();
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(env.job_events(1, "interrupted").len(), 1);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    assert!(env.path("rerun.txt").exists());
}

#[test]
fn second_ctrl_c_skips_the_grace() {
    let env = Env::new("sh -c 'trap \"\" TERM; sleep 60'\n");
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1"]);
    wait_for("job 1 to start", &mut || !env.events("started").is_empty());
    let pgid = pgid_of(&env, 1);
    sched.signal(Signal::SIGINT);
    wait_for("the stop message", &mut || {
        sched.stdout().contains("stopping 1 running job")
    });
    let second = Instant::now();
    sched.signal(Signal::SIGINT);
    let out = sched.finish();
    assert_eq!(out.code, 130);
    assert!(
        second.elapsed() < Duration::from_secs(9),
        "the second Ctrl-C must not wait out the 10 s grace"
    );
    assert!(live_group_members(pgid).is_empty());
}

/// A process in its own process group, as a job of a dead scheduler.
fn orphan_process(env: &Env, script: &str) -> std::process::Child {
    Command::new("sh")
        .args(["-c", script])
        .current_dir(env.dir.path())
        .process_group(0)
        .spawn()
        .unwrap()
}

#[test]
fn live_orphan_blocks_redispatch_and_holds_its_gpu() {
    let orphan_cmd = "sh -c 'while [ ! -e release ]; do sleep 0.05; done; echo run >> runs.txt'";
    let env = Env::new(&format!(
        "[vram=20000] {orphan_cmd}\n[vram=10G] echo second > second.txt\n"
    ));
    let mut orphan = orphan_process(&env, orphan_cmd);
    journal_with_orphan(
        &env,
        orphan_cmd,
        orphan.id(),
        Some(start_ticks(orphan.id())),
        None,
    );
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1"]);
    wait_for("the orphan notice", &mut || {
        sched.stdout().contains(&format!(
            "still running from a previous scheduler (process group {})",
            orphan.id()
        ))
    });
    assert!(
        sched
            .stdout()
            .contains("not starting it again, its GPU 0 stays reserved until it ends"),
        "{}",
        sched.stdout()
    );
    wait_for("the board to show both", &mut || {
        env.board().contains("▶ job 1") && env.board().contains("· job 2")
    });
    assert!(
        env.board().contains(&format!("pgid {}", orphan.id())),
        "{}",
        env.board()
    );
    assert!(env.job_events(1, "started").len() == 1 && env.job_events(2, "started").is_empty());
    // The orphan ends: its attempt is interrupted and the job runs again.
    std::fs::write(env.path("release"), "").unwrap();
    orphan.wait().unwrap();
    let out = sched.finish();
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(env.job_events(1, "interrupted").len(), 1);
    assert_eq!(env.job_events(1, "started").len(), 2);
    assert_eq!(
        std::fs::read_to_string(env.path("runs.txt")).unwrap(),
        "run\nrun\n"
    );
    assert!(env.path("second.txt").exists());
}

#[test]
fn dead_orphan_is_requeued() {
    let env = Env::new("echo rerun > rerun.txt\n");
    let mut gone = Command::new("true").process_group(0).spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    journal_with_orphan(&env, "echo rerun > rerun.txt", pid, Some(12345), None);
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stdout
            .contains("was interrupted with a previous scheduler"),
        "{}",
        out.stdout
    );
    assert_eq!(env.job_events(1, "interrupted").len(), 1);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    assert!(env.path("rerun.txt").exists());
}

#[test]
fn reused_pgid_with_another_start_time_is_dead_and_never_signalled() {
    let env = Env::new("echo rerun > rerun.txt\n");
    // An unrelated process now owns the pgid the journal names.
    let mut unrelated = orphan_process(&env, "sleep 60");
    let ticks = start_ticks(unrelated.id());
    journal_with_orphan(
        &env,
        "echo rerun > rerun.txt",
        unrelated.id(),
        Some(ticks.saturating_sub(7)),
        None,
    );
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(env.job_events(1, "interrupted").len(), 1);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    assert!(
        unrelated.try_wait().unwrap().is_none(),
        "the unrelated process was left alone"
    );
    unrelated.kill().unwrap();
    unrelated.wait().unwrap();
}

#[test]
fn old_journal_without_start_ticks_is_judged_by_pgid() {
    let orphan_cmd = "sh -c 'while [ ! -e release ]; do sleep 0.05; done'";
    let env = Env::new(&format!("{orphan_cmd}\n"));
    let mut orphan = orphan_process(&env, orphan_cmd);
    journal_with_orphan(&env, orphan_cmd, orphan.id(), None, None);
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1"]);
    wait_for("the orphan notice", &mut || {
        sched
            .stdout()
            .contains("still running from a previous scheduler")
    });
    std::fs::write(env.path("release"), "").unwrap();
    orphan.wait().unwrap();
    let out = sched.finish();
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(env.job_events(1, "interrupted").len(), 1);
}

/// Issue "hardware truth", every framework's OOM: each GPU out-of-memory
/// message in a job's log is retried as an OOM with a raised declaration;
/// host memory exhaustion is an ordinary failure with no raise.
#[test]
fn framework_oom_messages_are_retried_and_host_memory_errors_are_not() {
    // Each prints its message the first time only, then succeeds.
    let once = |message: &str, marker: &str| {
        format!(
            "[vram=1000 retries=1] sh -c 'if [ -e {marker} ]; then exit 0; fi; touch {marker}; echo \"{message}\" >&2; exit 1'"
        )
    };
    let gpu = [
        "host:12:34 [0] include/alloc.h:103 NCCL WARN Cuda failure 2 out of memory",
        "tensorflow ResourceExhaustedError: OOM when allocating tensor with shape[8192] on /job:localhost/replica:0/task:0/device:GPU:0",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)",
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 7500.00 MiB on device 0: cudaMalloc failed: out of memory",
    ];
    let host = [
        "MemoryError: Unable to allocate 64.0 GiB for an array",
        "terminate called after throwing an instance of std::bad_alloc",
    ];
    let lines: Vec<String> = gpu
        .iter()
        .chain(&host)
        .enumerate()
        .map(|(i, message)| once(message, &format!("m{i}")))
        .collect();
    let env = Env::new(&format!("{}\n", lines.join("\n")));
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    // ceil(1.25 × 1000), or 1.25 × the allocation the message names
    // (JAX's 16 GiB, ggml's 7500 MiB) when that is more.
    let next = [1250, 1250, 20480, 1250, 9375];
    for no in 1..=gpu.len() as u64 {
        let oom = env.job_events(no, "oom");
        assert_eq!(oom.len(), 1, "job {no} retried as an OOM: {}", out.stdout);
        assert_eq!(oom[0]["next_vram"], next[no as usize - 1], "job {no}");
        assert_eq!(env.status_of(no).as_deref(), Some("ok"), "job {no}");
    }
    for no in gpu.len() as u64 + 1..=(gpu.len() + host.len()) as u64 {
        assert!(
            env.job_events(no, "oom").is_empty(),
            "job {no} is no GPU OOM"
        );
        assert_eq!(env.status_of(no).as_deref(), Some("failed"), "job {no}");
        assert_eq!(env.job_events(no, "started").len(), 1, "job {no} ran once");
        let line = out
            .stdout
            .lines()
            .find(|l| l.contains(&format!("job {no} failed")))
            .unwrap_or_else(|| panic!("job {no}'s completion line: {}", out.stdout));
        assert!(
            line.contains("out of host memory, not GPU memory"),
            "{line}"
        );
    }
    assert_eq!(out.code, 1, "{}", out.stdout);
}

/// docs/BEHAVIOUR.md "Board and terminal": a `--watch` scheduler says when
/// its queue is done, with the summary, once per stretch of work, and
/// says it again after an appended line ran.
#[test]
fn watch_says_when_the_queue_is_done_and_again_after_an_append() {
    let env = Env::new("echo one\n");
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    let drained = |sched: &common::Sched| sched.stdout().matches("queue done: ").count();
    wait_for("the first drained line", &mut || drained(&sched) == 1);
    let said = sched.stdout();
    assert!(said.contains("summary of 1 finished job:"), "{said}");
    assert!(said.contains("for new lines"), "{said}");
    env.append_jobs("echo two\n");
    wait_for("the second drained line", &mut || drained(&sched) == 2);
    assert!(
        sched.stdout().contains("summary of 2 finished jobs:"),
        "{}",
        sched.stdout()
    );
    sched.stop();
}

/// docs/BEHAVIOUR.md "Monitoring": a failed job's completion line carries
/// the last line it wrote, where the reason usually is (before, only
/// `gpusched log 1` showed `pythn: not found`); an ok job's does not.
#[test]
fn a_failed_jobs_completion_line_says_why() {
    let env = Env::new("pythn train.py\necho fine\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 127, "{}", out.stdout);
    let failed = out
        .stdout
        .lines()
        .find(|l| l.contains("✗ job 1 failed"))
        .unwrap_or_else(|| panic!("{}", out.stdout));
    assert!(failed.contains("pythn: not found"), "{failed}");
    let ok = out
        .stdout
        .lines()
        .find(|l| l.contains("✓ job 2 ok"))
        .unwrap_or_else(|| panic!("{}", out.stdout));
    assert!(!ok.contains("fine"), "{ok}");
    // status.json and the board say it too.
    let last = |no| common::status_field(&env, no, "last_line");
    assert!(
        last(1)
            .as_str()
            .is_some_and(|l| l.contains("pythn: not found")),
        "{:?}",
        last(1)
    );
    assert!(last(2).is_null(), "{:?}", last(2));
    let board = env.board();
    let row = board.lines().position(|l| l.contains("✗ job 1")).unwrap();
    assert!(
        board
            .lines()
            .nth(row + 1)
            .is_some_and(|l| l.contains("pythn: not found")),
        "{board}"
    );
}

/// An OOM retry asks for what the job was reaching, as its framework's
/// own message says (docs/BEHAVIOUR.md "Out of memory and timeouts"), not
/// only 1.25× its last sampled peak: a job that ramps between samples
/// dies far above it. One real message per framework.
#[test]
fn an_oom_retry_reaches_what_the_framework_said_it_was_allocating() {
    let once = |text: &str| {
        format!("if [ \"$GPUSCHED_ATTEMPT\" = 1 ]; then echo '{text}' >&2; exit 1; fi; echo fine")
    };
    let cases = [
        // PyTorch ≥ 2.1: held 3.86 GiB (3,953 MiB) + 8 GiB tried.
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 23.64 GiB of which 6.12 GiB is free. Including non-PyTorch memory, this process has 3.86 GiB memory in use. Of the allocated memory 3.50 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.",
            (3953 + 8192_u64) * 5 / 4 + 1,
        ),
        // PyTorch before 2.1: 6.50 GiB reserved + 20 MiB tried.
        (
            "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity; 6.42 GiB already allocated; 10.44 MiB free; 6.50 GiB reserved in total by PyTorch)",
            (6656 + 20) * 5 / 4,
        ),
        // JAX / XLA: 8 GiB tried, nothing said of what it held.
        (
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8589934592 bytes.",
            8192 * 5 / 4,
        ),
        // TensorFlow: a 32768 × 65536 float tensor is 8 GiB.
        (
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[32768,65536] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
            8192 * 5 / 4,
        ),
        // CuPy: 2 GiB allocated so far + 6 GiB tried.
        (
            "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 6,442,450,944 bytes (allocated so far: 2,147,483,648 bytes).",
            8192 * 5 / 4,
        ),
    ];
    let jobs: String = cases
        .iter()
        .map(|(text, _)| format!("[vram=2G retries=1] {}\n", once(text)))
        .collect();
    let env = Env::new(&jobs);
    let out = env.run(&["--sim", "1", "--poll", "0.2"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    for (i, (_, want)) in cases.iter().enumerate() {
        let no = i as u64 + 1;
        let oom = env.job_events(no, "oom");
        assert_eq!(oom.len(), 1, "job {no}: {}", out.stdout);
        assert_eq!(oom[0]["next_vram"], *want, "job {no}: {}", out.stdout);
        let started = env.job_events(no, "started");
        assert_eq!(started[1]["vram_mib"], *want, "job {no}");
        assert_eq!(env.status_of(no).as_deref(), Some("ok"), "job {no}");
    }
    assert!(
        out.stdout.contains("reaching 12145 MiB by its own message"),
        "said: {}",
        out.stdout
    );
}
