//! A scheduler inside a Slurm allocation (docs/BEHAVIOUR.md "Inside a
//! Slurm allocation"), without a cluster: the variables Slurm sets are set
//! here, the fake NVML gives the node four GPUs, and a stand-in `squeue`
//! on PATH answers for the time left and for earlier allocations. The
//! same pilot on the real test cluster is in `slurm.rs`.

use crate::common;
use crate::nvml::Nvml;

use common::{Sched, wait_for};
use std::path::Path;
use std::process::Command;

/// Four fake GPUs of 24000 MiB, idle.
const FOUR_GPUS: &str = "gpu GPU-00000000-0000 24000 0 0\n\
                         gpu GPU-11111111-1111 24000 0 0\n\
                         gpu GPU-22222222-2222 24000 0 0\n\
                         gpu GPU-33333333-3333 24000 0 0\n";

/// Writes a stand-in `squeue` into `dir`: `%L` (time left) is answered
/// with `left` (or fails when `None`), and a state query (`%T`) with
/// `state` (nothing: the job is over and forgotten).
fn fake_squeue(dir: &Path, left: Option<&str>, state: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let left = match left {
        Some(left) => format!("echo '{left}'"),
        None => "echo 'squeue: error: Unable to contact slurm controller' >&2; exit 1".into(),
    };
    let script =
        format!("#!/bin/sh\ncase \"$*\" in\n  *%L*) {left} ;;\n  *) echo '{state}' ;;\nesac\n");
    let path = dir.join("squeue");
    common::write_script(&path, &script);
}

/// Asserts that `text` (a scheduler's output) says each of `said`.
fn assert_says(text: &str, said: &[&str]) {
    for said in said {
        assert!(text.contains(said), "no `{said}` in:\n{text}");
    }
}

/// The scheduler of `nvml` as a pilot in Slurm job `job` on node gpu07
/// with GPUs 1 and 3 of the four, the stand-in squeue of `bin` first on
/// PATH, the box ledger left to its default.
fn pilot(nvml: &Nvml, job: &str, bin: &Path, args: &[&str]) -> Command {
    let mut cmd = nvml.env.command(args);
    let path = common::path_with(bin);
    nvml.faked(&mut cmd)
        .env("SLURM_JOB_ID", job)
        .env("SLURMD_NODENAME", "gpu07")
        .env("SLURM_JOB_GPUS", "1,3")
        .env("CUDA_VISIBLE_DEVICES", "1,3")
        .env("PATH", path);
    cmd
}

#[test]
fn a_pilot_uses_only_its_gpus_keeps_back_what_cannot_end_and_stops_before_the_end() {
    // Four jobs with no known bound start (and are stopped at the
    // wrap-up), one whose timeout= reaches past the end waits, one short
    // one runs.
    let mut jobs = String::new();
    for _ in 0..4 {
        jobs.push_str("[vram=1000] echo \"$CUDA_VISIBLE_DEVICES\" >> seen.txt; sleep 120\n");
    }
    jobs.push_str("[vram=1000 timeout=1m] echo long >> seen.txt\n");
    jobs.push_str("[vram=1000 timeout=5s] echo \"short $CUDA_VISIBLE_DEVICES\" >> seen.txt\n");
    let nvml = Nvml::new(&jobs, FOUR_GPUS);
    let bin = nvml.env.path("bin");
    // 45 s left: the wrap-up comes 25 s after the start.
    fake_squeue(&bin, Some("0:45"), "");
    let sched = Sched::from_command(pilot(&nvml, "77", &bin, &["--poll", "0.5"]));
    wait_for("the long job's wait reason", &mut || {
        std::fs::read_to_string(nvml.env.logs.join("status.json"))
            .is_ok_and(|t| t.contains("needs up to 1m00s, more than Slurm job 77 has left"))
    });
    let out = sched.finish();
    assert_eq!(out.code, 75, "{}{}", out.stdout, out.stderr);
    assert_says(
        &out.stdout,
        &[
            "inside Slurm job 77: GPUs 1,3 of node gpu07 (matched by index from SLURM_JOB_GPUS)",
            "the box ledger is off",
            "Slurm job 77 ends at ",
        ],
    );
    let seen = std::fs::read_to_string(nvml.env.path("seen.txt")).unwrap();
    // Only GPUs 1 and 3, never the long job.
    assert!(!seen.contains("long"), "{seen}");
    assert_eq!(seen.lines().count(), 5, "{seen}");
    for line in seen.lines() {
        let gpu = line.trim_start_matches("short ");
        assert!(gpu == "1" || gpu == "3", "a job ran on GPU {gpu}:\n{seen}");
    }
    // The four long ones: interrupted, for the next allocation; the
    // short one ok; the one that could not end never started.
    assert_eq!(nvml.env.events("interrupted").len(), 4);
    assert_eq!(nvml.env.status_of(6).as_deref(), Some("ok"));
    assert!(nvml.env.job_events(5, "started").is_empty());
    let started = nvml.env.events("started");
    assert!(started.iter().all(|s| s["allocation"] == 77), "{started:?}");
    // The views say where it runs.
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(nvml.env.logs.join("status.json")).unwrap())
            .unwrap();
    let backend = doc["scheduler"]["backend_detail"].as_str().unwrap();
    assert!(
        backend.ends_with("— inside Slurm job 77: GPUs 1,3 of node gpu07"),
        "{backend}"
    );
    let board = nvml.env.board();
    assert_eq!(
        board.lines().nth(1),
        Some("inside Slurm job 77: GPUs 1,3 of node gpu07"),
        "{board}"
    );
}

#[test]
fn slurms_warning_stops_the_jobs_and_the_next_allocation_runs_them_exactly_once() {
    let job = "if [ -e second ]; then echo ran >> ran.txt; else sleep 120; fi\n";
    let nvml = Nvml::new(&job.repeat(2), FOUR_GPUS);
    let bin = nvml.env.path("bin");
    // Slurm does not answer: the end is unknown, SIGUSR2 is the warning.
    fake_squeue(&bin, None, "");
    let sched = Sched::from_command(pilot(&nvml, "77", &bin, &["--poll", "0.5"]));
    wait_for("both jobs started", &mut || {
        nvml.env.events("started").len() == 2
    });
    sched.signal(nix::sys::signal::Signal::SIGUSR2);
    let out = sched.finish();
    assert_eq!(out.code, 75, "{}{}", out.stdout, out.stderr);
    assert_says(
        &out.stdout,
        &[
            "when the allocation ends is unknown",
            "SIGUSR2: Slurm job 77 is ending; nothing more starts",
        ],
    );
    assert_eq!(nvml.env.events("interrupted").len(), 2);
    // The next allocation, on the same log directory: both run, once.
    std::fs::write(nvml.env.path("second"), "").unwrap();
    fake_squeue(&bin, Some("10:00"), "");
    let out = Sched::from_command(pilot(&nvml, "78", &bin, &["--poll", "0.5"])).finish();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let ran = std::fs::read_to_string(nvml.env.path("ran.txt")).unwrap();
    assert_eq!(ran.lines().count(), 2, "{ran}");
    assert_eq!(nvml.env.events("done").len(), 2);
    assert_eq!(nvml.env.status_of(1).as_deref(), Some("ok"));
    assert_eq!(nvml.env.status_of(2).as_deref(), Some("ok"));
}

#[test]
fn a_pilot_killed_in_an_allocation_that_still_runs_is_not_second_guessed() {
    let nvml = Nvml::new("sleep 120\n", FOUR_GPUS);
    let bin = nvml.env.path("bin");
    fake_squeue(&bin, Some("10:00"), "RUNNING");
    let sched = Sched::from_command(pilot(&nvml, "77", &bin, &["--poll", "0.5"]));
    wait_for("the job started", &mut || {
        !nvml.env.events("started").is_empty()
    });
    sched.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = sched.finish();
    // Another allocation while 77 still runs (its job may run there).
    let out = Sched::from_command(pilot(&nvml, "78", &bin, &["--poll", "0.5"])).finish();
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert_says(
        &out.stderr,
        &[
            "job 1 of ",
            "was started by a pilot in Slurm job 77, which has not ended",
            "sbatch --dependency=afterany:77",
        ],
    );
    assert_eq!(nvml.env.events("started").len(), 1, "never started twice");
    // Allocation 77 over: Slurm killed all it ran, the job's supervisor
    // with it (here, the test does).
    let started = &nvml.env.events("started")[0];
    let supervisor = started["supervisor"]["pid"].as_i64().unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let pgid = started["pgid"].as_i64().unwrap();
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    wait_for("the job's group gone", &mut || {
        common::live_group_members(pgid).is_empty()
    });
    fake_squeue(&bin, Some("10:00"), "");
    let sched = Sched::from_command(pilot(&nvml, "78", &bin, &["--poll", "0.5"]));
    wait_for("the job started again", &mut || {
        nvml.env.events("started").len() == 2
    });
    assert_eq!(nvml.env.events("interrupted").len(), 1);
    drop(sched);
}

#[test]
fn doctor_says_which_gpus_a_pilot_would_use() {
    let nvml = Nvml::new("true\n", FOUR_GPUS);
    // `gpusched doctor` in Slurm job 1234 given the node's GPUs `gpus`.
    let doctor = |gpus: &str| {
        let out = nvml
            .faked(
                Command::new(common::bin())
                    .args(["doctor", "--log-dir"])
                    .arg(&nvml.env.logs),
            )
            .env("SLURM_JOB_ID", "1234")
            .env("SLURMD_NODENAME", "gpu07")
            .env("SLURM_JOB_GPUS", gpus)
            .current_dir(nvml.env.path(""))
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (_, text) = doctor("2,3");
    assert!(
        text.contains("inside Slurm job 1234: GPUs 2,3 of node gpu07"),
        "{text}"
    );
    // An allocation given a GPU the node does not have is an error.
    let (code, text) = doctor("6");
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("GPU 6 of node gpu07"), "{text}");
}

#[test]
fn job_steps_outside_an_allocation_are_a_usage_error_that_says_how() {
    let nvml = Nvml::new("[vram=1000] true\n", FOUR_GPUS);
    let mut cmd = nvml.command(&["--job-steps"]);
    let out = cmd.env_remove("SLURM_JOB_ID").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--job-steps runs jobs as steps of the Slurm allocation")
            && stderr.contains("SLURM_JOB_ID is not set here"),
        "{stderr}"
    );
    // Nothing ran.
    assert!(nvml.env.events("started").is_empty());
    // On a machine without NVML: the same usage error, not NVML's (the
    // previous release said NVML could not be loaded).
    let out = nvml
        .env
        .command(&["--job-steps"])
        .env_remove("SLURM_JOB_ID")
        .env("LD_LIBRARY_PATH", nvml.env.path("no-nvml-here"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("SLURM_JOB_ID is not set here"), "{stderr}");
    // Inside an allocation, but without srun: said at start, nothing runs.
    let empty = nvml.env.path("empty-bin");
    std::fs::create_dir_all(&empty).unwrap();
    let out = pilot(&nvml, "77", &empty, &["--job-steps"])
        .env("PATH", &empty)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--job-steps starts each job with Slurm's srun, and srun cannot be run"),
        "{stderr}"
    );
    assert!(nvml.env.events("started").is_empty());
    // With simulated GPUs or --no-allocation there is no allocation either.
    for other in ["--no-allocation", "--sim=1"] {
        let mut cmd = nvml.command(&["--job-steps", other]);
        let out = cmd.env("SLURM_JOB_ID", "77").output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{other}: {stderr}");
        assert!(stderr.contains("cannot be used with"), "{stderr}");
    }
}

/// Writes a stand-in `srun` into `dir`: it runs the command after `--` in
/// a session of its own, as slurmstepd runs a step's tasks outside the
/// pilot's process groups.
fn fake_srun(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    common::write_script(
        &dir.join("srun"),
        "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'slurm 22.05 (stand-in)'; exit 0; }\n\
         while [ $# -gt 0 ] && [ \"$1\" != -- ]; do shift; done\nshift\nexec setsid \"$@\"\n",
    );
}

#[test]
fn a_step_jobs_gpu_memory_is_found_by_its_environment_and_another_users_claim_is_not() {
    // The job shows the fake NVML a GPU process of its own (in a session of
    // its own, as in a real step) and waits to be let go.
    let job = "[vram=4000] echo \"proc $CUDA_VISIBLE_DEVICES $$ 1500\" >> \"$FAKE_NVML_STATE\"; \
               echo \"$CUDA_VISIBLE_DEVICES\" > gpu.txt; \
               while [ ! -e release ]; do sleep 0.05; done\n";
    let nvml = Nvml::new(job, FOUR_GPUS);
    let bin = nvml.env.path("bin");
    fake_squeue(&bin, Some("10:00"), "");
    fake_srun(&bin);
    let sched = Sched::from_command(pilot(&nvml, "77", &bin, &["--poll", "0.3", "--job-steps"]));
    wait_for("the job's GPU process", &mut || {
        std::fs::read_to_string(nvml.env.path("gpu.txt")).is_ok_and(|g| !g.trim().is_empty())
    });
    let gpu = std::fs::read_to_string(nvml.env.path("gpu.txt")).unwrap();
    let key = nvml.env.events("started")[0]["key"]
        .as_str()
        .unwrap()
        .to_string();
    // Another user's process names the same job in its environment and
    // holds 7000 MiB on the same GPU: it must not count as the job's.
    let hostile = common::users::test_user("gpusched-steps").map(|(uid, gid)| {
        use std::os::unix::process::CommandExt;
        let child = Command::new("sleep")
            .arg("60")
            .env("GPUSCHED_KEY", &key)
            .env("GPUSCHED_ATTEMPT", "1")
            .uid(uid)
            .gid(gid)
            .spawn()
            .unwrap();
        let line = format!("proc {} {} 7000\n", gpu.trim(), child.id());
        let state = nvml.env.path("nvml_state");
        let mut text = std::fs::read_to_string(&state).unwrap();
        text.push_str(&line);
        nvml.set_state(&text);
        child
    });
    // A sample with both processes listed: the other user's is counted
    // as someone else's on that GPU.
    if hostile.is_some() {
        wait_for("the other user's process counted as external", &mut || {
            std::fs::read_to_string(nvml.env.logs.join("status.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .is_some_and(|doc| {
                    doc["gpus"].as_array().is_some_and(|gpus| {
                        gpus.iter()
                            .any(|g| g["external_mib"].as_u64().is_some_and(|m| m >= 7000))
                    })
                })
        });
    }
    std::fs::write(nvml.env.path("release"), "").unwrap();
    let out = sched.finish();
    if let Some(mut child) = hostile {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("each job runs as a job step (sacct -j 77 lists them)"),
        "{}",
        out.stdout
    );
    let done = nvml.env.events("done");
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(
        done[0]["peak_mib"],
        serde_json::json!({ gpu.trim(): 1500 }),
        "the step's own process counts, another user's claim does not: {done:?}"
    );
}
