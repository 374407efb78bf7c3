//! `--enforce mps` on the fake NVML (docs/BEHAVIOUR.md "Declarations that
//! hold"): the scheduler's own MPS daemon, each declared job's memory
//! limit, a GPU another user's jobs hold refused, and an OOM at the limit
//! said as such and retried past it. `nvidia-cuda-mps-control` is a stand-in
//! that records its calls.

use crate::common;
use crate::nvml::{Nvml, TWO_GPUS, fake_nvml_dir, status_json};

use common::{Sched, wait_for};
use std::path::PathBuf;
use std::process::Command;

/// A fake `nvidia-cuda-mps-control` in `env`'s `fake-bin` that records
/// each call (its arguments, its pipe directory and what it read) in
/// `fake-bin/calls`; `-d` leaves a `control` file in the pipe directory as
/// a daemon would, `quit` removes it. Returns the directory and a `PATH`
/// that finds it first.
fn fake_mps_control(env: &common::Env) -> (PathBuf, String) {
    let dir = env.path("fake-bin");
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("nvidia-cuda-mps-control");
    common::write_script(
        &script,
        r#"#!/bin/sh
calls="$(dirname "$0")/calls"
if [ "$1" = "-d" ]; then
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" && touch "$CUDA_MPS_PIPE_DIRECTORY/control"
    echo "start pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY" >> "$calls"
else
    read -r command
    echo "$command pipe=$CUDA_MPS_PIPE_DIRECTORY" >> "$calls"
    [ "$command" = quit ] && rm -f "$CUDA_MPS_PIPE_DIRECTORY/control"
fi
"#,
    );
    let path = common::path_with(&dir);
    (dir, path)
}

#[test]
fn enforce_mps_runs_a_daemon_of_its_own_and_limits_each_declared_job() {
    let nvml = Nvml::new(
        "[vram=4G] env > declared.txt\n[vram=2G gpus=2] env > pair.txt\nenv > undeclared.txt\n",
        TWO_GPUS,
    );
    let env = &nvml.env;
    let (bin_dir, path) = fake_mps_control(env);
    // A daemon a crashed scheduler left behind.
    let pipe = env.logs.join("mps").join("pipe");
    std::fs::create_dir_all(&pipe).unwrap();
    std::fs::write(pipe.join("control"), "").unwrap();
    let mut command = nvml.command(&["--poll", "0.1", "--enforce", "mps"]);
    command.env("PATH", &path);
    let out = Sched::from_command(command).finish();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let calls = std::fs::read_to_string(bin_dir.join("calls")).unwrap();
    let pipe = pipe.display().to_string();
    assert_eq!(
        calls
            .lines()
            .map(|l| l.split(' ').next().unwrap())
            .collect::<Vec<_>>(),
        ["quit", "start", "quit"],
        "the stale daemon quits, ours starts, and quits at the end: {calls}"
    );
    assert!(
        calls.contains(&format!("start pipe={pipe} log=")),
        "{calls}"
    );
    let seen = |file: &str| std::fs::read_to_string(env.path(file)).unwrap();
    assert!(
        seen("declared.txt").contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M\n"),
        "{}",
        seen("declared.txt")
    );
    assert!(seen("declared.txt").contains(&format!("CUDA_MPS_PIPE_DIRECTORY={pipe}\n")));
    assert!(
        seen("pair.txt").contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M,1=2048M\n"),
        "{}",
        seen("pair.txt")
    );
    assert!(!seen("undeclared.txt").contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
    assert!(seen("undeclared.txt").contains(&format!("CUDA_MPS_PIPE_DIRECTORY={pipe}\n")));
    // Without the control program, or on simulated GPUs: a clear refusal.
    let mut command = nvml.command(&["--enforce", "mps"]);
    command.env("PATH", "/usr/bin:/bin");
    let out = Sched::from_command(command).finish();
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("nvidia-cuda-mps-control is not on PATH"),
        "{}",
        out.stderr
    );
    let out = nvml.env.run(&["--sim", "1", "--enforce", "mps"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("--enforce mps needs this machine's NVIDIA GPUs"),
        "{}",
        out.stderr
    );
}

#[test]
fn enforce_mps_refuses_a_gpu_where_another_users_jobs_are() {
    use common::users::{open_env, shared_ledger, users, users_env};
    use std::os::unix::process::CommandExt;
    let Some([alice, _, _]) = users() else {
        return;
    };
    let root = open_env("");
    let ledger = shared_ledger(&root);
    let state = root.path("nvml_state");
    std::fs::write(&state, TWO_GPUS).unwrap();
    let nvml_env = |cmd: &mut Command| {
        cmd.arg("--ledger")
            .arg(&ledger)
            .env("LD_LIBRARY_PATH", fake_nvml_dir())
            .env("FAKE_NVML_STATE", &state);
    };
    // Alice's scheduler runs a job on GPU 0.
    let a = users_env(
        "[vram=2G on=0] while [ ! -e release ]; do sleep 0.05; done\n",
        alice,
    );
    let mut cmd = a.command(&["--poll", "0.2"]);
    nvml_env(&mut cmd);
    cmd.uid(alice.0).gid(alice.1);
    let alices = Sched::from_command(cmd);
    wait_for("alice's job to start", &mut || {
        !a.events("started").is_empty()
    });
    // Ours, under MPS: GPU 0 is refused while her job is there.
    let ours = open_env("[vram=1G on=0] echo zero > zero.txt\n[vram=1G on=1] echo one > one.txt\n");
    let (_, path) = fake_mps_control(&ours);
    let mut cmd = ours.command(&["--poll", "0.2", "--enforce", "mps", "--watch"]);
    nvml_env(&mut cmd);
    cmd.env("PATH", path);
    let sched = Sched::from_command(cmd);
    wait_for("the job on GPU 1 to run", &mut || {
        ours.path("one.txt").exists()
    });
    wait_for("job 1 to say why it waits", &mut || {
        status_json(&ours)["jobs"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|j| {
                j["no"] == 1
                    && j["reason"]
                        .as_str()
                        .is_some_and(|r| r.contains("gpusched-t-alice"))
            })
    });
    assert!(!ours.path("zero.txt").exists());
    // Her job ends: GPU 0 is ours to use.
    std::fs::write(a.path("release"), "").unwrap();
    wait_for("job 1 to run on GPU 0", &mut || {
        ours.path("zero.txt").exists()
    });
    sched.stop();
    alices.finish();
}

/// Under `--enforce mps` a CUDA OOM is the job's MPS limit: the retry
/// says so and goes past it; a job with no retries left is told to raise
/// `vram=`, not that it declared too much.
#[test]
fn an_oom_at_the_mps_limit_says_so_and_is_retried_past_it() {
    let oom_once = "if [ ! -e {m} ]; then touch {m}; echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1; fi";
    let nvml = Nvml::new(
        &format!(
            "[vram=4G retries=1] {}\n[vram=2G] {}\n",
            oom_once.replace("{m}", "a"),
            oom_once.replace("{m}", "b")
        ),
        TWO_GPUS,
    );
    let env = &nvml.env;
    let (_, path) = fake_mps_control(env);
    let mut command = nvml.command(&["--poll", "0.1", "--enforce", "mps"]);
    command.env("PATH", &path);
    let out = Sched::from_command(command).finish();
    let oom = env.job_events(1, "oom");
    assert_eq!(oom.len(), 1, "{}", out.stdout);
    assert_eq!(oom[0]["cause"]["mps_limit"]["limit_mib"], 4096, "{oom:?}");
    assert_eq!(oom[0]["next_vram"], 8192, "{oom:?}");
    assert!(
        out.stdout
            .contains("job 1 hit its MPS memory limit of 4096 MiB (its declaration) after"),
        "{}",
        out.stdout
    );
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    assert_eq!(env.status_of(2).as_deref(), Some("failed_oom"));
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains("✗ job 2"))
        .unwrap_or_default();
    assert!(
        line.contains("hit its MPS memory limit of 2048 MiB (its declaration): raise vram=")
            && !line.contains("over-declared"),
        "{}",
        out.stdout
    );
}
