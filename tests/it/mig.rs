//! MIG instances as devices (docs/HARDWARE.md "MIG"), against the fake
//! NVML: GPU 0 in MIG mode with two 40 GiB instances, GPU 1 whole.

use crate::common::wait_for;
use crate::nvml::{Nvml, doctor};
use serde_json::Value;

/// GPU 0 (80 GiB) in MIG mode with two `3g.40gb` instances; GPU 1 whole.
const MIG_BOX: &str = "gpu GPU-11111111-aaaa 81920 0 0\ngpu GPU-22222222-bbbb 81920 0 0\nattr 0 mig on\nattr 1 mig off\nmig 0 MIG-aaaa-0000 3g.40gb 40960\nmig 0 MIG-aaaa-0001 3g.40gb 40960\n";

/// A job that reports its own process on the MIG instance it was given
/// (its `CUDA_VISIBLE_DEVICES` ends in the MIG device index here), writes
/// what it saw to `<name>.txt`, and waits for `release`.
fn on_instance(vram: &str, name: &str) -> String {
    format!(
        "[vram={vram}] m=${{CUDA_VISIBLE_DEVICES##*-000}}; echo \"proc 0:$m $$ 2000\" >> \"$FAKE_NVML_STATE\"; echo $CUDA_VISIBLE_DEVICES > {name}.txt; while [ ! -e release ]; do sleep 0.05; done\n"
    )
}

fn status_json(nvml: &Nvml) -> Value {
    std::fs::read_to_string(nvml.env.logs.join("status.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

fn read(nvml: &Nvml, name: &str) -> String {
    std::fs::read_to_string(nvml.env.path(name)).unwrap_or_default()
}

#[test]
fn mig_instances_run_jobs_side_by_side_and_the_parent_never_runs_one() {
    let jobs = format!(
        "{}{}[vram=50G] echo $CUDA_VISIBLE_DEVICES > big.txt\n",
        on_instance("30G", "a"),
        on_instance("30G", "b")
    );
    let nvml = Nvml::new(&jobs, MIG_BOX);
    let sched = nvml.spawn(&["--poll", "0.1"]);
    let env = &nvml.env;
    // Written, not only made: the shell makes a file before echo writes.
    let written = |name: &str| std::fs::metadata(env.path(name)).is_ok_and(|m| m.len() > 0);
    wait_for("both 30G jobs to run at once", &mut || {
        written("a.txt") && written("b.txt")
    });
    let mut given = [read(&nvml, "a.txt"), read(&nvml, "b.txt")];
    given.sort();
    assert_eq!(given, ["MIG-aaaa-0000\n", "MIG-aaaa-0001\n"]);
    // The 50G job fits no instance: it goes to the whole GPU, never to
    // GPU 0's 80 GiB, which belong to its instances.
    wait_for("the 50G job to run", &mut || env.status_of_opt(3).is_some());
    assert_eq!(read(&nvml, "big.txt"), "1\n");
    // Each instance is a device on the board, measured on its own.
    wait_for(
        "the board to show both instances with their jobs' peaks",
        &mut || {
            let board = env.board();
            board.contains("GPU 0:0 3g.40gb: 2000 / 40960 MiB used")
                && board.contains("GPU 0:1 3g.40gb: 2000 / 40960 MiB used")
                && board.matches("peak 2000").count() == 2
        },
    );
    let status = status_json(&nvml);
    let labels: Vec<&str> = status["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["1", "0:0", "0:1"], "{status}");
    assert_eq!(status["gpus"][1]["profile"], "3g.40gb");
    assert_eq!(status["gpus"][1]["uuid"], "MIG-aaaa-0000");
    // `top` shows the instances under their names too.
    let top = nvml.top();
    assert!(top.contains("GPU 0:1 3g.40gb   2000/40960 MiB"), "{top}");
    std::fs::write(env.path("release"), "").unwrap();
    let out = sched.finish();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    for no in 1..=3 {
        assert_eq!(env.status_of(no).as_deref(), Some("ok"), "job {no}");
    }
}

#[test]
fn a_multi_gpu_job_is_never_built_from_mig_instances_and_on_selects_them() {
    let nvml = Nvml::new(
        "[vram=10G gpus=2] echo never\n\
         [vram=10G on=0:1] echo $CUDA_VISIBLE_DEVICES > one.txt\n\
         [vram=10G on=0] echo $CUDA_VISIBLE_DEVICES > zero.txt\n",
        MIG_BOX,
    );
    let out = nvml.run(&["--poll", "0.1"]);
    assert_eq!(out.code, 1, "job 1 is infeasible: {}", out.stdout);
    assert_eq!(nvml.env.status_of(1).as_deref(), Some("infeasible"));
    assert!(
        out.stdout.contains(
            "needs 2 GPUs but only 1 is allowed; 2 MIG instances cannot serve it: CUDA shows a process one MIG instance only"
        ),
        "{}",
        out.stdout
    );
    assert_eq!(read(&nvml, "one.txt"), "MIG-aaaa-0001\n");
    // on=0 names the GPU: any of its instances, never the GPU whole.
    assert!(
        read(&nvml, "zero.txt").starts_with("MIG-aaaa-000"),
        "{}",
        read(&nvml, "zero.txt")
    );
}

#[test]
fn a_mig_layout_change_while_a_job_runs_harms_none() {
    let nvml = Nvml::new(&on_instance("30G", "a"), MIG_BOX);
    let sched = nvml.spawn(&["--poll", "0.1", "--watch"]);
    let env = &nvml.env;
    wait_for("job 1 to run", &mut || env.path("a.txt").exists());
    // The admin re-partitions GPU 0 into one 7g.80gb instance while job 1
    // runs (a real driver refuses while a process holds an instance; the
    // scheduler must cope either way).
    nvml.set_state(
        "gpu GPU-11111111-aaaa 81920 0 0\ngpu GPU-22222222-bbbb 81920 0 0\nattr 0 mig on\nattr 1 mig off\nmig 0 MIG-bbbb-0000 7g.80gb 81920\n",
    );
    wait_for("the board to show the new layout", &mut || {
        env.board().contains("GPU 0:0 7g.80gb:")
    });
    // Job 1 still holds its declaration on device 0:0 (the id it was
    // given), so placement stays careful: 40G fits beside it, not more.
    env.append_jobs("[vram=40G on=0] echo $CUDA_VISIBLE_DEVICES > new.txt\n");
    wait_for("job 2 to run on the new instance", &mut || {
        env.status_of_opt(2).is_some()
    });
    assert_eq!(read(&nvml, "new.txt"), "MIG-bbbb-0000\n");
    assert_eq!(env.status_of_opt(1), None, "job 1 still runs");
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("job 1 to end", &mut || env.status_of_opt(1).is_some());
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    sched.stop();
}

#[test]
fn drivers_before_470_42_get_the_old_mig_names() {
    let nvml = Nvml::new(
        "[vram=10G on=0:0] echo $CUDA_VISIBLE_DEVICES > a.txt\n",
        &format!(
            "driver 460.32.03\n{}",
            MIG_BOX.replace("40960\n", "40960 3 0\n")
        ),
    );
    let out = nvml.run(&["--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(read(&nvml, "a.txt"), "MIG-GPU-11111111-aaaa/3/0\n");
}

#[test]
fn doctor_lists_each_mig_instance() {
    let nvml = Nvml::new("echo hi\n", MIG_BOX);
    let out = doctor(
        &nvml.env,
        MIG_BOX,
        &["--ledger", nvml.env.path("ledger").to_str().unwrap()],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("ok    GPU 0:1: MIG 3g.40gb (MIG-aaaa-0001), 40960 MiB, 0 MiB used; jobs on it get CUDA_VISIBLE_DEVICES=MIG-aaaa-0001"),
        "{text}"
    );
    assert!(!text.contains("MIG mode is on"), "{text}");
}
