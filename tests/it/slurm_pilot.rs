//! A pilot inside an allocation of the real test cluster
//! (docs/BEHAVIOUR.md "Inside a Slurm allocation"): the one-node cluster
//! of `scripts/slurm-test-cluster.sh` (4 GPUs of type `fake`), with the
//! fake NVML giving the node the same four GPUs. The scripts are the ones
//! `gpusched export --slurm --pilot` writes, submitted with `sbatch` as a
//! user would. Without a cluster these say SKIPPED (CI starts one).

use crate::common;
use crate::nvml::Nvml;
use crate::slurm::{SLURM_DEADLINE, cluster_up};

use common::wait_for_within;
use std::collections::BTreeMap;
use std::process::Command;

/// Four fake GPUs, as the test cluster's node has.
pub(crate) const FOUR_GPUS: &str = "gpu GPU-00000000-0000 24000 0 0\n\
                         gpu GPU-11111111-1111 24000 0 0\n\
                         gpu GPU-22222222-2222 24000 0 0\n\
                         gpu GPU-33333333-3333 24000 0 0\n";

/// `gpusched export --slurm --pilot ARGS` of `nvml`'s jobs file, written
/// to `pilot.sh` in the test's directory; its path.
pub(crate) fn pilot_script(nvml: &Nvml, args: &[&str]) -> std::path::PathBuf {
    let out = Command::new(common::bin())
        .args(["export", "--slurm", "--pilot"])
        .args(args)
        .arg(&nvml.env.jobs)
        .arg("--log-dir")
        .arg(&nvml.env.logs)
        .current_dir(nvml.env.path(""))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = nvml.env.path("pilot.sh");
    std::fs::write(&path, &out.stdout).unwrap();
    path
}

/// `sbatch ARGS…` from the test's directory with the fake NVML in the
/// environment it exports; the Slurm job id.
pub(crate) fn sbatch(nvml: &Nvml, args: &[&str]) -> u64 {
    let out = nvml
        .faked(Command::new("sbatch").arg("--parsable").args(args))
        .current_dir(nvml.env.path(""))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sbatch: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.trim().split(';').next().unwrap().parse().unwrap()
}

/// `scontrol show job -o ID`'s fields (`JobState`, `ExitCode`, …).
pub(crate) fn job_fields(id: u64) -> BTreeMap<String, String> {
    let out = Command::new("scontrol")
        .args(["show", "job", "-o", &id.to_string()])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Waits until Slurm job `id` is in one of `states`.
pub(crate) fn wait_state(id: u64, states: &[&str]) -> BTreeMap<String, String> {
    let mut fields = BTreeMap::new();
    wait_for_within(
        &format!("Slurm job {id} in {states:?}"),
        SLURM_DEADLINE,
        &mut || {
            fields = job_fields(id);
            fields
                .get("JobState")
                .is_some_and(|s| states.contains(&s.as_str()))
        },
    );
    fields
}

/// The pilot's output file (`gpusched-pilot-<id>.out` where it was
/// submitted).
pub(crate) fn pilot_output(nvml: &Nvml, id: u64) -> String {
    std::fs::read_to_string(nvml.env.path(&format!("gpusched-pilot-{id}.out"))).unwrap_or_default()
}

pub(crate) const ENDED: [&str; 5] = ["COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL"];

#[test]
fn a_pilot_in_a_two_gpu_allocation_runs_forty_declared_jobs_only_on_its_gpus() {
    if !cluster_up() {
        return;
    }
    // Each job notes the allocation's GPUs (the pilot's environment is
    // its own) and the GPU it was given.
    let job = "[vram=2000] echo \"$SLURM_JOB_GPUS $CUDA_VISIBLE_DEVICES\" >> seen.txt; sleep 0.2\n";
    let nvml = Nvml::new(&job.repeat(40), FOUR_GPUS);
    // Someone else holds one of the node's GPUs (usually 0): the
    // pilot gets two others, not simply the first ones NVML lists.
    let blocker = sbatch(
        &nvml,
        &["--gres=gpu:1", "--output=/dev/null", "--wrap=sleep 300"],
    );
    wait_state(blocker, &["RUNNING"]);
    let script = pilot_script(&nvml, &["--gpus", "2", "--time", "10m"]);
    let pilot = sbatch(&nvml, &[script.to_str().unwrap()]);
    let fields = wait_state(pilot, &ENDED);
    let _ = Command::new("scancel").arg(blocker.to_string()).status();
    let out = pilot_output(&nvml, pilot);
    assert_eq!(fields["JobState"], "COMPLETED", "{fields:?}\n{out}");
    let seen = std::fs::read_to_string(nvml.env.path("seen.txt")).unwrap();
    assert_eq!(seen.lines().count(), 40, "{seen}");
    let ours = seen
        .lines()
        .next()
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let allowed: Vec<&str> = ours.split(',').collect();
    assert_eq!(allowed.len(), 2, "{ours}");
    let said = format!("inside Slurm job {pilot}: GPUs {ours} of node gpusched-node");
    assert!(out.contains(&said), "no `{said}` in:\n{out}");
    for line in seen.lines() {
        let (allocation, gpu) = line.split_once(' ').unwrap();
        assert_eq!(allocation, ours, "{seen}");
        assert!(
            allowed.contains(&gpu),
            "a job ran on GPU {gpu}, not {ours}:\n{seen}"
        );
    }
    let done = nvml.env.events("done");
    assert_eq!(done.len(), 40);
    assert!(done.iter().all(|d| d["status"] == "ok"), "{done:?}");
}

#[test]
fn a_pilot_cut_short_by_its_time_limit_leaves_the_rest_to_its_successor_exactly_once() {
    if !cluster_up() {
        return;
    }
    // One job per GPU at a time (20 GB of 24), 4 s each: 30 of them take
    // a minute on two GPUs, more than the first allocation's 40 s before
    // its wrap-up.
    let jobs: String = (1..=30)
        .map(|n| format!("[vram=20000] sleep 4; echo {n} >> done.txt\n"))
        .collect();
    let nvml = Nvml::new(&jobs, FOUR_GPUS);
    let script = pilot_script(&nvml, &["--gpus", "2", "--time", "1m", "--chain", "1"]);
    let first = sbatch(&nvml, &[script.to_str().unwrap()]);
    let fields = wait_state(first, &ENDED);
    let out = pilot_output(&nvml, first);
    // Stopped by its own wrap-up, before Slurm's limit: exit 75.
    assert_eq!(fields["ExitCode"], "75:0", "{fields:?}\n{out}");
    assert!(
        out.contains(&format!("Slurm job {first} ends at ")),
        "{out}"
    );
    // It ran part of the sweep, and journaled what it stopped.
    let first_done = nvml.env.events("done").len();
    assert!((1..30).contains(&first_done), "{first_done} done:\n{out}");
    let interrupted = nvml.env.events("interrupted").len();
    // Its successor, submitted by the script, finishes the sweep.
    let mut second = None;
    wait_for_within("the successor pilot", SLURM_DEADLINE, &mut || {
        // Ours: submitted from this test's directory.
        let out = Command::new("squeue")
            .args(["-h", "--states=all", "-n", "gpusched-pilot", "-o", "%i %Z"])
            .output()
            .unwrap();
        let here = nvml.env.path("");
        second = String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
            let (id, workdir) = l.split_once(' ')?;
            let id = id.trim().parse::<u64>().ok()?;
            (id != first && std::path::Path::new(workdir.trim()) == here.as_path()).then_some(id)
        });
        second.is_some()
    });
    let second = second.unwrap();
    let fields = wait_state(second, &ENDED);
    let out = pilot_output(&nvml, second);
    assert_eq!(fields["ExitCode"], "0:0", "{fields:?}\n{out}");
    // Every job ran to its end exactly once, across both allocations.
    assert_each_ran_once(&nvml, 30);
    // Started in both allocations, each attempt journaled with its own.
    let started = nvml.env.events("started");
    for allocation in [first, second] {
        assert!(
            started.iter().any(|s| s["allocation"] == allocation),
            "nothing started in Slurm job {allocation}"
        );
    }
    assert_eq!(started.len(), 30 + interrupted);
}

/// Jobs 1 to `jobs`, each of which appends its number to `done.txt` as
/// its last act, each ran to its end exactly once and has one `ok`
/// outcome.
pub(crate) fn assert_each_ran_once(nvml: &Nvml, jobs: u32) {
    let done_txt = std::fs::read_to_string(nvml.env.path("done.txt")).unwrap();
    let mut ran: Vec<u32> = done_txt.lines().map(|l| l.parse().unwrap()).collect();
    ran.sort_unstable();
    assert_eq!(ran, (1..=jobs).collect::<Vec<u32>>(), "{done_txt}");
    let done = nvml.env.events("done");
    assert_eq!(done.len(), jobs as usize, "one outcome per job: {done:?}");
    assert!(done.iter().all(|d| d["status"] == "ok"), "{done:?}");
}

/// Writes `gpuproc.sh` in the test's directory: `sh gpuproc.sh add|del
/// GPU PID` adds (removes) a 1500 MiB process of `PID` on `GPU` in the fake
/// NVML state the job's environment names, under a lock.
pub(crate) fn write_gpuproc(nvml: &Nvml) {
    std::fs::write(
        nvml.env.path("gpuproc.sh"),
        "exec 9>>\"$FAKE_NVML_STATE.lock\"; flock 9\n\
         line=\"proc $2 $3 1500\"\n\
         case $1 in\n\
         add) echo \"$line\" >> \"$FAKE_NVML_STATE\" ;;\n\
         del) grep -vx \"$line\" \"$FAKE_NVML_STATE\" > \"$FAKE_NVML_STATE.new\"; mv \"$FAKE_NVML_STATE.new\" \"$FAKE_NVML_STATE\" ;;\n\
         esac\n",
    )
    .unwrap();
}

/// `sacct -j ID`'s steps of Slurm job `id`: (step id, name, state), the
/// batch step left out.
fn sacct_steps(id: u64) -> Vec<(String, String, String)> {
    let out = Command::new("sacct")
        .args([
            "-n",
            "-P",
            "-o",
            "JobID,JobName,State",
            "-j",
            &id.to_string(),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split('|');
            let (step, name, state) = (f.next()?, f.next()?, f.next()?);
            (step.starts_with(&format!("{id}.")) && !step.ends_with(".batch"))
                .then(|| (step.to_string(), name.to_string(), state.to_string()))
        })
        .collect()
}

#[test]
fn a_pilot_with_job_steps_runs_each_job_as_a_step_sacct_lists_measured_and_stopped_through_slurm() {
    if !cluster_up() {
        return;
    }
    // Each job says which step and GPU it ran in, and shows the fake NVML a
    // GPU process of its own (the step's shell: a child of slurmstepd, in
    // no process group of gpusched's). The last one outlives its timeout=
    // and answers SIGTERM, which only Slurm can deliver into its step.
    // The process is taken off the fake's list before the job ends, as a
    // driver drops an exited process (a pid listed after it died reads as
    // one hidden in another PID namespace).
    let job = "[vram=2000] sh gpuproc.sh add $CUDA_VISIBLE_DEVICES $$; \
               echo \"$SLURM_JOB_ID.$SLURM_STEP_ID $CUDA_VISIBLE_DEVICES\" >> seen.txt; sleep 3; \
               sh gpuproc.sh del $CUDA_VISIBLE_DEVICES $$\n";
    let stubborn = "[vram=2000 timeout=4] trap 'echo TERM >> term.txt; exit 0' TERM; \
                    echo started >> term.txt; sleep 60 & wait\n";
    let nvml = Nvml::new(&format!("{}{stubborn}", job.repeat(6)), FOUR_GPUS);
    write_gpuproc(&nvml);
    let script = pilot_script(&nvml, &["--gpus", "2", "--time", "10m", "--job-steps"]);
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(text.contains(" --job-steps &"), "{text}");
    let pilot = sbatch(&nvml, &[script.to_str().unwrap()]);
    let fields = wait_state(pilot, &ENDED);
    let out = pilot_output(&nvml, pilot);
    // Exit 1: a job (the timed-out one) did not succeed.
    assert_eq!(fields["ExitCode"], "1:0", "{fields:?}\n{out}");
    assert!(
        out.contains(&format!(
            "each job runs as a job step (sacct -j {pilot} lists them)"
        )),
        "{out}"
    );
    // Every job ran in a step of the pilot's allocation, on a GPU of it.
    let seen = std::fs::read_to_string(nvml.env.path("seen.txt")).unwrap();
    assert_eq!(seen.lines().count(), 6, "{seen}");
    let gpus = job_fields(pilot)
        .get("JOB_GRES")
        .cloned()
        .unwrap_or_default();
    for line in seen.lines() {
        let (step, gpu) = line.split_once(' ').unwrap();
        assert!(
            step.starts_with(&format!("{pilot}.")) && step.len() > format!("{pilot}.").len(),
            "not run in a step of {pilot}: {seen}"
        );
        assert!(!gpu.is_empty() && !gpu.contains(','), "{seen} ({gpus})");
    }
    // Slurm accounted for each of them, by the name gpusched gave it.
    let mut steps = Vec::new();
    wait_for_within("sacct to list the steps", SLURM_DEADLINE, &mut || {
        steps = sacct_steps(pilot);
        steps.len() >= 7
    });
    let ours: Vec<_> = steps
        .iter()
        .filter(|(_, name, _)| name.starts_with("gpusched:"))
        .collect();
    assert_eq!(ours.len(), 7, "{steps:?}");
    // The stopped one too: it ended its step itself, with exit 0.
    assert!(ours.iter().all(|(_, _, s)| s == "COMPLETED"), "{steps:?}");
    // Measured: the step's GPU process counted as the job's.
    let done = nvml.env.events("done");
    assert_eq!(done.len(), 7, "{done:?}");
    let ok: Vec<_> = done.iter().filter(|d| d["status"] == "ok").collect();
    assert_eq!(ok.len(), 6, "{done:?}");
    for d in &ok {
        let peaks = d["peak_mib"].as_object().unwrap();
        assert!(
            peaks.values().any(|v| v == 1500),
            "the step's process was not attributed: {d}"
        );
    }
    // Stopped through Slurm with its grace: SIGTERM reached the job
    // inside its step, and it was recorded as timed out.
    let stopped = done.iter().find(|d| d["status"] != "ok").unwrap();
    assert_eq!(stopped["status"], "timeout", "{stopped}");
    let term = std::fs::read_to_string(nvml.env.path("term.txt")).unwrap_or_default();
    assert_eq!(term, "started\nTERM\n", "{out}");
}

#[test]
fn a_step_job_adopted_by_a_restarted_pilot_is_stopped_through_slurm_with_its_grace() {
    if !cluster_up() {
        return;
    }
    // The first pilot is killed with SIGKILL once the job runs; the second,
    // in the same allocation, adopts the job and stops it at its timeout=.
    // srun would answer a SIGTERM by killing the step at once, so only a
    // signal through Slurm reaches the job's trap.
    let job = "[timeout=8] trap 'echo TERM >> term.txt; exit 0' TERM; \
               echo started >> term.txt; sleep 60 & wait\n";
    let nvml = Nvml::new(job, FOUR_GPUS);
    let run = format!(
        "{} {} --log-dir {} --job-steps --poll 1",
        common::bin(),
        nvml.env.jobs.display(),
        nvml.env.logs.display()
    );
    std::fs::write(
        nvml.env.path("restart.sh"),
        format!(
            "#!/bin/sh\n{run} & p=$!\n\
             while ! grep -q started term.txt 2>/dev/null; do sleep 0.1; done\n\
             kill -9 $p; wait $p\n\
             {run}\n"
        ),
    )
    .unwrap();
    let pilot = sbatch(
        &nvml,
        &[
            "--gres=gpu:1",
            "--time=5",
            "--output=pilot.out",
            "restart.sh",
        ],
    );
    let fields = wait_state(pilot, &ENDED);
    let out = std::fs::read_to_string(nvml.env.path("pilot.out")).unwrap_or_default();
    assert!(
        out.contains("job 1 is still running from a previous scheduler"),
        "{fields:?}\n{out}"
    );
    let term = std::fs::read_to_string(nvml.env.path("term.txt")).unwrap_or_default();
    assert_eq!(term, "started\nTERM\n", "{out}");
    let done = nvml.env.events("done");
    assert_eq!(done.len(), 1, "{done:?}\n{out}");
    assert_eq!(done[0]["status"], "timeout", "{out}");
}

/// A job whose own family never ran is bounded by its siblings (its
/// family with every digit stripped): after `echo s1; sleep 25` ran,
/// `echo s3; sleep 25` does not start with 15 s left before the wrap-up
/// of a one-minute allocation; the pilot's output says it waits, why,
/// and with how much time left, and on exit that it leaves it. The
/// previous release started it (`s1` and `s3` are two families, and
/// `s3`'s had no history), killed it at the wrap-up and ran it again.
#[test]
fn a_job_bounded_by_its_siblings_waits_and_the_pilot_says_so() {
    if !cluster_up() {
        return;
    }
    let jobs = "[vram=20000] sh -c 'echo s1; sleep 25'\n[vram=20000] sh -c 'echo s3; sleep 25'\n";
    let nvml = Nvml::new(jobs, FOUR_GPUS);
    let script = pilot_script(&nvml, &["--gpus", "1", "--time", "1m"]);
    let id = sbatch(&nvml, &[script.to_str().unwrap()]);
    let fields = wait_state(id, &ENDED);
    let out = pilot_output(&nvml, id);
    // Stopped by its own wrap-up, with job 2 left.
    assert_eq!(fields["ExitCode"], "75:0", "{fields:?}\n{out}");
    assert_eq!(nvml.env.job_events(1, "done").len(), 1, "{out}");
    assert!(
        nvml.env.job_events(2, "started").is_empty(),
        "s3 started: {out}"
    );
    let waits = out
        .lines()
        // s1 ran 25 s and a little more.
        .find(|l| l.contains("job 2 has no run of its own family; its siblings took up to 2"))
        .unwrap_or_else(|| panic!("no sibling bound said for job 2:\n{out}"));
    assert!(
        waits.contains("left before the wrap-up: for the next allocation"),
        "{waits}"
    );
    assert!(
        out.contains(&format!(
            "Slurm job {id}: left for the next allocation: 1 job: 2"
        )),
        "{out}"
    );
    // status.json gives the same reason.
    let status = std::fs::read_to_string(nvml.env.logs.join("status.json")).unwrap();
    assert!(
        status.contains("no run of its own family; its siblings took up to 2"),
        "{status}"
    );
}
