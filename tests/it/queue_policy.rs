//! Black-box tests of the queue policy (docs/BEHAVIOUR.md "Queue policy") implemented so far:
//! `on=` allow-lists, and the reasons waiting jobs give.

use crate::common;

use common::Env;

#[test]
fn on_keeps_a_job_to_its_gpus_and_is_judged_by_them() {
    let env = Env::new(
        "[on=1] sh -c 'echo $CUDA_VISIBLE_DEVICES > one.txt'\n[on=0,1 gpus=2] sh -c 'echo $CUDA_VISIBLE_DEVICES > both.txt'\n[on=5] echo never\n[vram=20G on=0] echo fits\n",
    );
    let out = env.run(&["--sim", "2", "--poll", "0.1"]);
    assert_eq!(
        out.code, 1,
        "infeasible job 3 fails the run: {}",
        out.stdout
    );
    assert_eq!(std::fs::read_to_string(env.path("one.txt")).unwrap(), "1\n");
    assert_eq!(
        std::fs::read_to_string(env.path("both.txt")).unwrap(),
        "0,1\n"
    );
    assert_eq!(env.status_of(3).as_deref(), Some("infeasible"));
    assert!(
        out.stdout
            .contains("only 0 are allowed by its on= and --gpus"),
        "{}",
        out.stdout
    );
    assert_eq!(env.status_of(4).as_deref(), Some("ok"));
    assert_eq!(
        env.job_events(4, "started")[0]["gpus"],
        serde_json::json!([0])
    );
}

#[test]
fn pause_holds_new_jobs_and_resume_lets_them_start() {
    let env = Env::new("sh -c 'while [ ! -e release ]; do sleep 0.05; done'\n");
    let sched = env.spawn(&["--sim", "2", "--poll", "0.1", "--watch"]);
    common::wait_for("job 1 to start", &mut || !env.events("started").is_empty());
    let out = env.verb(&["pause"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("queue paused"),
        "{out:?}"
    );
    env.append_jobs("echo second > second.txt\n");
    common::wait_for("the paused reason", &mut || {
        env.board().contains("queue paused (gpusched resume)")
    });
    assert!(env.board().contains("QUEUE PAUSED"), "{}", env.board());
    assert!(
        !env.path("second.txt").exists(),
        "nothing starts while paused"
    );
    // The running job was not touched.
    assert!(env.job_events(1, "done").is_empty());
    let out = env.verb(&["resume"]);
    assert!(out.status.success(), "{out:?}");
    common::wait_for("job 2 to run", &mut || env.path("second.txt").exists());
    std::fs::write(env.path("release"), "").unwrap();
    common::wait_for("job 1 to end", &mut || env.status_of_opt(1).is_some());
    sched.stop();
}

#[test]
fn drain_closes_a_gpu_and_survives_a_restart() {
    let hold = "sh -c 'echo $CUDA_VISIBLE_DEVICES >> gpus.txt; while [ ! -e release ]; do sleep 0.05; done'";
    let env = Env::new(&format!("{hold}\n{hold}\n"));
    // A log directory that does not exist is a typo: refused, not made.
    let out = env.verb(&["drain", "0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no log directory"),
        "{out:?}"
    );
    assert!(!env.logs.exists());
    // No scheduler yet: recorded for the next start.
    std::fs::create_dir(&env.logs).unwrap();
    let out = env.verb(&["drain", "0"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("recorded for the next start"),
        "{out:?}"
    );
    let sched = env.spawn(&["--sim", "2", "--poll", "0.1", "--watch"]);
    common::wait_for("job 2 to wait for the drained GPU", &mut || {
        env.board().contains("GPU 0 drained")
    });
    // The board can say so before job 1's shell has written its line.
    common::wait_for("job 1 on GPU 1", &mut || {
        std::fs::read_to_string(env.path("gpus.txt")).unwrap_or_default() == "1\n"
    });
    assert!(env.board().contains("drained: GPU 0"), "{}", env.board());
    sched.stop();
    // Still drained after a restart.
    let sched = env.spawn(&["--sim", "2", "--poll", "0.1", "--watch"]);
    common::wait_for("the drained notice", &mut || {
        sched.stdout().contains("GPU 0 drained (by gpusched drain)")
    });
    common::wait_for("job 1 on GPU 1 again", &mut || {
        std::fs::read_to_string(env.path("gpus.txt")).unwrap_or_default() == "1\n1\n"
    });
    let out = env.verb(&["undrain", "0"]);
    assert!(out.status.success(), "{out:?}");
    common::wait_for("job 2 on GPU 0", &mut || {
        std::fs::read_to_string(env.path("gpus.txt"))
            .unwrap_or_default()
            .ends_with("0\n")
    });
    std::fs::write(env.path("release"), "").unwrap();
    common::wait_for("both to end", &mut || {
        env.status_of_opt(1).is_some() && env.status_of_opt(2).is_some()
    });
    sched.stop();
}

#[test]
fn after_runs_a_chain_in_order_and_a_failed_dependency_ends_its_dependants() {
    let env = Env::new(
        "[name=a] sh -c 'sleep 0.5; echo a >> order.txt'\n[name=b after=a] sh -c 'echo b >> order.txt'\n[after=b] sh -c 'echo c >> order.txt'\n[name=x] sh -c 'while [ ! -e release ]; do sleep 0.05; done; exit 4'\n[after=x,1] sh -c 'echo never >> order.txt'\n",
    );
    let sched = env.spawn(&["--sim", "4", "--poll", "0.1"]);
    common::wait_for("job 5's reason", &mut || {
        env.board().contains("after job 4 (running)")
    });
    std::fs::write(env.path("release"), "").unwrap();
    let out = sched.finish();
    assert_eq!(
        out.code, 4,
        "the failed dependency's exit code: {}",
        out.stdout
    );
    assert_eq!(
        std::fs::read_to_string(env.path("order.txt")).unwrap(),
        "a\nb\nc\n"
    );
    assert_eq!(env.status_of(5).as_deref(), Some("dependency_failed"));
    assert!(env.job_events(5, "started").is_empty());
    assert!(
        out.stdout
            .contains("job 5 dependency_failed: it runs after job 4, which ended failed"),
        "{}",
        out.stdout
    );
}

#[test]
fn unknown_references_and_cycles_are_jobs_file_errors() {
    for (text, words) in [
        (
            "echo a\n[after=nobody] echo b\n",
            "line 2: after=nobody matches no job",
        ),
        (
            "[name=a after=b] echo a\n[name=b after=a] echo b\n",
            "line 1: after= makes a cycle: a → b → a",
        ),
    ] {
        let env = Env::new(text);
        let out = env.run(&["--sim", "1"]);
        assert_eq!(out.code, 2, "{out:?}");
        assert!(out.stderr.contains(words), "{}", out.stderr);
    }
}

#[test]
fn a_big_job_gets_a_reservation_and_starts_while_small_ones_keep_arriving() {
    let small = "[vram=8G] sleep 3";
    // The two running jobs end 2 s apart: in between, a small job would
    // fit, and the reservation must keep it off.
    let env = Env::new("[vram=8G] sleep 2\n[vram=8G] sleep 4\n[vram=20G] echo big > big.txt\n");
    let sched = env.spawn(&[
        "--sim",
        "1",
        "--poll",
        "0.2",
        "--watch",
        "--reserve-after",
        "1",
    ]);
    let started = std::time::Instant::now();
    let mut appended = 0;
    let (mut held_shown, mut reservation_shown) = (false, false);
    // A small job arrives every 0.3 s: without a reservation the big one
    // would never find 20 GiB free.
    while !env.path("big.txt").exists() {
        let board = env.board();
        held_shown |= board.contains("GPU 0 held for job 3");
        reservation_shown |= board.contains("starvation hold: GPU 0 kept for job 3");
        assert!(
            started.elapsed() < common::DEADLINE,
            "the big job never started:\n{}",
            sched.stdout()
        );
        appended += 1;
        env.append_jobs(&format!("{small} # more {appended}\n"));
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    assert!(
        sched.stdout().contains("job 3 has waited")
            && sched.stdout().contains("GPU 0 reserved for it"),
        "{}",
        sched.stdout()
    );
    assert_eq!(env.job_events(3, "starvation_hold").len(), 1);
    // While the GPU was held, the board said so, and later jobs said why
    // they waited.
    assert!(reservation_shown, "the reservation was never on the board");
    assert!(held_shown, "no job ever said it waited for the held GPU");
    sched.stop();
}

#[test]
fn preemption_round_trip_the_preempted_job_resumes_and_both_end_ok() {
    let sweep = "[preemptible vram=20G] sh -c 'echo \"$GPUSCHED_ATTEMPT ${GPUSCHED_PREEMPTED:-0}\" >> sweep.txt; trap \"echo checkpoint >> sweep.txt; exit 0\" TERM; while [ ! -e release ]; do sleep 0.05; done'";
    let env = Env::new(&format!("{sweep}\n"));
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    // Running its command, its TERM trap set (a start journaled may not
    // have run it yet).
    common::wait_for("the sweep to run", &mut || {
        std::fs::read_to_string(env.path("sweep.txt")).is_ok_and(|t| t == "1 0\n")
    });
    // An urgent job above it that does not fit beside it.
    env.write_jobs(&format!("[vram=10G] echo urgent > urgent.txt\n{sweep}\n"));
    common::wait_for("the urgent job to run", &mut || {
        env.path("urgent.txt").exists()
    });
    common::wait_for("the sweep's second attempt", &mut || {
        env.job_events(1, "started").len() == 2
    });
    std::fs::write(env.path("release"), "").unwrap();
    common::wait_for("the sweep to end", &mut || env.status_of_opt(1).is_some());
    let out = sched.stop();
    assert!(
        out.stdout.contains("job 1 preempted for job 2"),
        "{}",
        out.stdout
    );
    assert_eq!(
        std::fs::read_to_string(env.path("sweep.txt")).unwrap(),
        "1 0\ncheckpoint\n2 1\n",
        "SIGTERM first, then attempt 2 with GPUSCHED_PREEMPTED=1"
    );
    assert_eq!(env.job_events(1, "preempted").len(), 1);
    assert!(env.job_events(1, "oom").is_empty(), "no retry used");
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    assert_eq!(env.status_of(2).as_deref(), Some("ok"));
    // The summary says how much run time the preemption cost.
    let shown = String::from_utf8_lossy(&env.verb(&["status"]).stdout).into_owned();
    assert!(shown.contains("job 1 was preempted:"), "{shown}");
}

#[test]
fn a_job_that_is_not_preemptible_or_above_is_never_preempted() {
    // The blocked job (line 2) is below the preemptible one (line 1), and
    // the running job below it is not preemptible.
    let hold = "sh -c 'while [ ! -e release ]; do sleep 0.05; done'";
    let env = Env::new(&format!(
        "[preemptible vram=12G] {hold} # a\n[vram=20G] echo blocked > blocked.txt\n[vram=10G] {hold} # c\n"
    ));
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    common::wait_for("jobs 1 and 3 to run, 2 to wait", &mut || {
        env.events("started").len() == 2 && env.board().contains("needs 20992 MiB")
    });
    // Stopping job 1 alone would not make room and job 3 may not be
    // stopped, so nothing is preempted, however long the scheduler runs.
    env.wait_for_ticks(5);
    assert!(env.events("preempted").is_empty(), "{}", sched.stdout());
    std::fs::write(env.path("release"), "").unwrap();
    common::wait_for("job 2 at last", &mut || env.path("blocked.txt").exists());
    sched.stop();
}

/// `[exclusive]` (docs/BEHAVIOUR.md "Undeclared and exclusive jobs") on one simulated
/// GPU with room for all three jobs: a plain job does not join the running
/// exclusive one, an exclusive job waits for the plain one and says why,
/// and the running job's exclusivity survives a restart that adopts it.
#[test]
fn an_exclusive_job_keeps_its_gpu_to_itself_across_a_restart() {
    let hold = |name: &str| {
        format!(
            "sh -c 'echo run >> {name}.txt; while [ ! -e release-{name} ]; do sleep 0.05; done'"
        )
    };
    let env = Env::new(&format!(
        "[vram=1G exclusive] {}\n[vram=1G] {}\n[vram=1G exclusive] echo c > c.txt\n",
        hold("a"),
        hold("b")
    ));
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1"]);
    common::wait_for("job 1 to start", &mut || env.path("a.txt").exists());
    let ticks = env.ticks();
    env.wait_for_ticks(ticks + 5);
    assert!(!env.path("b.txt").exists(), "job 2 joined exclusive job 1");
    // A restart that adopts job 1: it still keeps its GPU to itself.
    let out = env.verb(&["stop", "--keep-jobs"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    sched.finish();
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1"]);
    common::wait_for("the restart to adopt job 1", &mut || {
        sched
            .stdout()
            .contains("job 1 is still running from a previous scheduler")
    });
    let ticks = env.ticks();
    env.wait_for_ticks(ticks + 5);
    assert!(!env.path("b.txt").exists(), "job 2 joined adopted job 1");
    // Job 1 ends: job 2 starts, and exclusive job 3 waits for it.
    std::fs::write(env.path("release-a"), "").unwrap();
    common::wait_for("job 2 to start", &mut || env.path("b.txt").exists());
    common::wait_for("job 3's reason", &mut || {
        env.board()
            .contains("exclusive: waiting for a GPU with no job of ours")
    });
    assert!(!env.path("c.txt").exists(), "job 3 joined job 2");
    std::fs::write(env.path("release-b"), "").unwrap();
    let out = sched.finish();
    assert_eq!(out.code, 0, "{out:?}");
    for no in 1..=3 {
        assert_eq!(env.status_of(no).as_deref(), Some("ok"), "job {no}");
        assert_eq!(env.job_events(no, "started").len(), 1, "job {no} ran once");
    }
    assert_eq!(
        env.job_events(1, "started")[0]["request"]["exclusive"],
        true
    );
    assert_eq!(std::fs::read_to_string(env.path("a.txt")).unwrap(), "run\n");
}
