//! A pilot in an allocation of two nodes (docs/BEHAVIOUR.md "Several
//! nodes"), on the two-node test cluster of `scripts/slurm-test-cluster.sh`
//! (both `slurmd`s on this host, partition `multi`). Each node shows fake
//! NVML GPUs of its own: the cluster's task prolog gives a task on node
//! `gpusched-node2` the state file `<FAKE_NVML_STATE>.gpusched-node2`. The
//! scripts are the ones `gpusched export --slurm --pilot --nodes 2` writes.
//! Without the cluster these say SKIPPED (CI starts it).

use crate::common;
use crate::nvml::Nvml;
use crate::slurm::{SLURM_DEADLINE, cluster_up};
use crate::slurm_pilot::{
    ENDED, FOUR_GPUS, assert_each_ran_once, pilot_output, pilot_script, sbatch, wait_state,
    write_gpuproc,
};

use common::wait_for_within;
use std::process::Command;

/// The second node's name.
const NODE2: &str = "gpusched-node2";

/// Whether the test cluster has its two-node partition; says SKIPPED when
/// not (and panics when the CI asked for the cluster).
fn two_nodes_up() -> bool {
    if !cluster_up() {
        return false;
    }
    let out = Command::new("sinfo")
        .args(["-h", "-N", "-p", "multi", "-o", "%N"])
        .output()
        .unwrap();
    let up = String::from_utf8_lossy(&out.stdout).lines().count() >= 2;
    if !up {
        assert!(
            std::env::var_os("GPUSCHED_SLURM_REQUIRED").is_none(),
            "GPUSCHED_SLURM_REQUIRED is set but the cluster has no two-node partition `multi` (scripts/slurm-test-cluster.sh down && scripts/slurm-test-cluster.sh up)"
        );
        common::skipped("the Slurm cluster has no two-node partition `multi`");
    }
    up
}

/// A fake box whose second node has four GPUs of its own (other UUIDs).
fn two_node_box(jobs: &str) -> Nvml {
    let nvml = Nvml::new(jobs, FOUR_GPUS);
    let theirs = FOUR_GPUS.replace("GPU-", "GPU-B");
    let twin = format!("{}.{NODE2}", nvml.state_path().display());
    std::fs::write(twin, theirs).unwrap();
    nvml
}

/// The script `gpusched export --slurm --pilot` writes for two GPUs on
/// each of two nodes of partition `multi`, for ten minutes.
fn two_node_pilot(nvml: &Nvml) -> std::path::PathBuf {
    let args = "--gpus 2 --nodes 2 --time 10m --partition multi";
    pilot_script(nvml, &args.split(' ').collect::<Vec<_>>())
}

/// `sbatch --wrap` of a pilot with `--job-steps` (and `run_args`) in an
/// allocation of both nodes with `gpus` (an sbatch option), its output in
/// `pilot.out`; the Slurm job id.
fn wrapped_pilot(nvml: &Nvml, gpus: &str, run_args: &str) -> u64 {
    let run = format!(
        "{} {} --log-dir {} --job-steps {run_args}",
        common::bin(),
        nvml.env.jobs.display(),
        nvml.env.logs.display()
    );
    let wrap = format!("--wrap={run}");
    let args = [
        "--partition=multi",
        "--nodes=2",
        gpus,
        "--time=5",
        "--output=pilot.out",
        &wrap,
    ];
    sbatch(nvml, &args)
}

/// The pid of the node agent of Slurm job `pilot` (both nodes are this
/// host): a process running `__node-agent` with that `SLURM_JOB_ID`.
fn agent_of(pilot: u64) -> Option<u32> {
    let wanted = format!("SLURM_JOB_ID={pilot}");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            (cmdline.split(|&b| b == 0).any(|a| a == b"__node-agent")
                && environ.split(|&b| b == 0).any(|v| v == wanted.as_bytes()))
            .then_some(pid)
        })
}

/// `sacct -j ID`'s steps: (name, node, state).
fn steps_of(id: u64) -> Vec<(String, String, String)> {
    let out = Command::new("sacct")
        .args(["-n", "-P", "-o", "JobID,JobName,NodeList,State", "-j"])
        .arg(id.to_string())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            let step = *f.first()?;
            (step.starts_with(&format!("{id}.")) && !step.ends_with(".batch"))
                .then(|| (f[1].to_string(), f[2].to_string(), f[3].to_string()))
        })
        .collect()
}

#[test]
fn a_pilot_on_two_nodes_runs_jobs_as_steps_on_both_measured_where_they_run() {
    if !two_nodes_up() {
        return;
    }
    // Each job shows its node's fake NVML a GPU process of its own (on
    // node 2, only that node's agent can see it), and says where it ran.
    let job = "[vram=2000] sh gpuproc.sh add $CUDA_VISIBLE_DEVICES $$; \
               echo \"$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES\" >> seen.txt; sleep 3; \
               sh gpuproc.sh del $CUDA_VISIBLE_DEVICES $$\n";
    let pair =
        "[vram=2000 gpus=2] echo \"$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES pair\" >> seen.txt\n";
    let nvml = two_node_box(&format!("{}{pair}", job.repeat(8)));
    write_gpuproc(&nvml);
    let script = two_node_pilot(&nvml);
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(text.contains("#SBATCH --nodes=2\n"), "{text}");
    assert!(text.contains(" --job-steps &"), "{text}");
    let pilot = sbatch(&nvml, &[script.to_str().unwrap()]);
    let fields = wait_state(pilot, &ENDED);
    let out = pilot_output(&nvml, pilot);
    assert_eq!(fields["JobState"], "COMPLETED", "{fields:?}\n{out}");
    assert!(out.contains("jobs run on all 2 nodes"), "{out}");
    assert!(
        out.contains(&format!(") of node {NODE2}")),
        "the start line names node 2's GPUs: {out}"
    );
    // Jobs ran on both nodes, each with one of its node's GPUs; the pair
    // on two GPUs of one node.
    let seen = std::fs::read_to_string(nvml.env.path("seen.txt")).unwrap();
    assert_eq!(seen.lines().count(), 9, "{seen}");
    for node in ["gpusched-node", NODE2] {
        assert!(
            seen.lines().any(|l| l.split(' ').next() == Some(node)),
            "nothing ran on {node}:\n{seen}\n{out}"
        );
    }
    for line in seen.lines() {
        let gpus = line.split(' ').nth(1).unwrap();
        let want = if line.ends_with(" pair") { 2 } else { 1 };
        let ids: Vec<u32> = gpus.split(',').map(|g| g.parse().unwrap()).collect();
        assert_eq!(ids.len(), want, "{seen}");
        assert!(ids.iter().all(|&g| g < 4), "a node has GPUs 0-3: {seen}");
    }
    // Measured where they ran: node 2's jobs (device ids 8 and up) by
    // node 2's agent, each its own 1500 MiB.
    let done = nvml.env.events("done");
    assert_eq!(done.len(), 9, "{done:?}");
    assert!(done.iter().all(|d| d["status"] == "ok"), "{done:?}");
    let measured_on = |far: bool| {
        done.iter()
            .filter_map(|d| d["peak_mib"].as_object())
            .flat_map(|peaks| peaks.iter())
            .filter(|(gpu, mib)| (gpu.parse::<u32>().unwrap() >= 8) == far && **mib == 1500)
            .count()
    };
    assert!(measured_on(true) > 0, "no job measured on node 2: {done:?}");
    assert!(
        measured_on(false) > 0,
        "no job measured on node 1: {done:?}"
    );
    // Slurm launched and accounted each of them on its node, beside the
    // agent's own step on node 2.
    let mut steps = Vec::new();
    wait_for_within("sacct to list the steps", SLURM_DEADLINE, &mut || {
        steps = steps_of(pilot);
        steps.len() >= 10
    });
    let jobs: Vec<_> = steps
        .iter()
        .filter(|(name, _, _)| {
            name.starts_with("gpusched:") && !name.starts_with("gpusched:agent:")
        })
        .collect();
    assert_eq!(jobs.len(), 9, "{steps:?}");
    assert!(jobs.iter().any(|(_, node, _)| node == NODE2), "{steps:?}");
    assert!(
        jobs.iter().all(|(_, _, state)| state == "COMPLETED"),
        "{steps:?}"
    );
    assert!(
        steps
            .iter()
            .any(|(name, node, _)| *name == format!("gpusched:agent:{NODE2}") && node == NODE2),
        "{steps:?}"
    );
}

#[test]
fn a_two_node_pilot_killed_with_sigkill_leaves_every_job_to_the_next_allocation_exactly_once() {
    if !two_nodes_up() {
        return;
    }
    // Twelve jobs, one per GPU at a time (20 GB of 24). In the first
    // allocation they wait for a file that is not there yet, so the
    // pilot is killed while four of them run, two on each node.
    let jobs: String = (1..=12)
        .map(|n| {
            format!(
                "[vram=20000] echo \"{n} $SLURM_JOB_ID $SLURMD_NODENAME\" >> started.txt; \
                 while [ ! -e go ]; do sleep 0.1; done; echo {n} >> done.txt\n"
            )
        })
        .collect();
    let nvml = two_node_box(&jobs);
    let script = two_node_pilot(&nvml);
    let first = sbatch(&nvml, &[script.to_str().unwrap()]);
    let started = || std::fs::read_to_string(nvml.env.path("started.txt")).unwrap_or_default();
    wait_for_within(
        "four jobs running on two nodes",
        SLURM_DEADLINE,
        &mut || started().lines().count() >= 4,
    );
    let first_started = started();
    assert!(first_started.contains(NODE2), "{first_started}");
    // kill -9 of the pilot itself (this host is node 1).
    let jobs_file = nvml.env.jobs.display().to_string();
    let killed = Command::new("pkill")
        .args(["-KILL", "-f", &format!("^[^ ]*gpusched {jobs_file} ")])
        .status()
        .unwrap();
    assert!(killed.success(), "no pilot process to kill");
    let fields = wait_state(first, &ENDED);
    let out = pilot_output(&nvml, first);
    assert_ne!(fields["ExitCode"], "0:0", "{fields:?}\n{out}");
    assert!(!nvml.env.path("done.txt").exists(), "{out}");
    // The next allocation runs the sweep, the four cut short again.
    std::fs::write(nvml.env.path("go"), "").unwrap();
    let second = sbatch(&nvml, &[script.to_str().unwrap()]);
    let fields = wait_state(second, &ENDED);
    let out = pilot_output(&nvml, second);
    assert_eq!(fields["ExitCode"], "0:0", "{fields:?}\n{out}");
    assert_each_ran_once(&nvml, 12);
    // The four the first pilot started: journaled there, ended with its
    // allocation, and run again in the second.
    let started_events = nvml.env.events("started");
    let in_first = started_events
        .iter()
        .filter(|s| s["allocation"] == first)
        .count();
    assert_eq!(in_first, 4, "{started_events:?}");
    assert_eq!(started_events.len(), 16, "{started_events:?}");
    assert!(
        out.contains(&format!("Slurm job {first}")),
        "the second pilot says what it took over: {out}"
    );
}

#[test]
fn a_node_agent_that_dies_is_started_again_and_its_node_keeps_running_jobs() {
    if !two_nodes_up() {
        return;
    }
    // Sixteen jobs, one per GPU at a time; the first four wait for `go`
    // while node 2's agent is killed.
    let job = "[vram=20000] while [ ! -e go ]; do sleep 0.1; done; \
               echo $SLURMD_NODENAME >> seen.txt; sleep 0.5\n";
    let nvml = two_node_box(&job.repeat(16));
    let pilot = wrapped_pilot(&nvml, "--gres=gpu:2", "--poll 1");
    let agents = || {
        steps_of(pilot)
            .iter()
            .filter(|(name, _, _)| *name == format!("gpusched:agent:{NODE2}"))
            .count()
    };
    let out = || std::fs::read_to_string(nvml.env.path("pilot.out")).unwrap_or_default();
    wait_for_within("four jobs running", SLURM_DEADLINE, &mut || {
        out().matches("▶ job").count() >= 4
    });
    // This pilot's agent only (other tests' pilots may run beside it).
    let agent = agent_of(pilot).unwrap_or_else(|| panic!("no agent to kill:\n{}", out()));
    let _ = Command::new("kill")
        .args(["-KILL", &agent.to_string()])
        .status();
    wait_for_within("a second agent step", SLURM_DEADLINE, &mut || agents() >= 2);
    std::fs::write(nvml.env.path("go"), "").unwrap();
    let fields = wait_state(pilot, &ENDED);
    assert_eq!(fields["JobState"], "COMPLETED", "{fields:?}\n{}", out());
    let seen = std::fs::read_to_string(nvml.env.path("seen.txt")).unwrap();
    assert_eq!(seen.lines().count(), 16, "{seen}");
    // Node 2 ran more than the two jobs it had when its agent died.
    assert!(
        seen.lines().filter(|l| *l == NODE2).count() > 2,
        "{seen}\n{}",
        out()
    );
    let done = nvml.env.events("done");
    assert_eq!(done.len(), 16);
    assert!(done.iter().all(|d| d["status"] == "ok"), "{done:?}");
}

#[test]
fn gpus_asked_for_the_whole_job_over_two_nodes_stop_the_pilot_at_start_saying_how() {
    if !two_nodes_up() {
        return;
    }
    // `--gpus=3` over two nodes: Slurm refuses a step that names no GPU
    // count of its own, so no agent (and no job) could start there.
    let nvml = two_node_box("[vram=1000] echo ran >> ran.txt\n");
    let pilot = wrapped_pilot(&nvml, "--gpus=3", "");
    let fields = wait_state(pilot, &ENDED);
    let out = std::fs::read_to_string(nvml.env.path("pilot.out")).unwrap_or_default();
    assert_eq!(fields["ExitCode"], "2:0", "{fields:?}\n{out}");
    assert!(
        out.contains(&format!(
            "the gpusched agent on node {NODE2} ended before it reported"
        )) && out.contains("ask for GPUs per node (--gres=gpu:N or --gpus-per-node=N"),
        "{out}"
    );
    assert!(!nvml.env.path("ran.txt").exists(), "{out}");
}
