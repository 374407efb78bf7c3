//! A pilot's allocation ended under it by `scancel`, on the real test
//! cluster (docs/BEHAVIOUR.md "Inside a Slurm allocation", its part on
//! the end of an allocation): Slurm's SIGTERM reaches the allocation's
//! processes
//! at once, and the pilot may read its jobs' deaths before its own
//! signal. Every job it loses is `interrupted`, never `failed`; nothing
//! starts after the cancel; the next allocation runs each job exactly
//! once; and no job process outlives the allocation. Without a cluster
//! these say SKIPPED (CI starts one).

use crate::common;
use crate::nvml::Nvml;
use crate::slurm::{SLURM_DEADLINE, cluster_up};
use crate::slurm_pilot::{ENDED, FOUR_GPUS, pilot_output, pilot_script, sbatch, wait_state};

use common::wait_for_within;
use std::process::Command;
use std::time::Duration;

/// Rounds per mode: `GPUSCHED_SCANCEL_ROUNDS`, default 10.
fn rounds() -> usize {
    std::env::var("GPUSCHED_SCANCEL_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10)
}

/// `squeue`'s state of Slurm job `id` (`%T`), empty once forgotten.
fn squeue_state(id: u64) -> String {
    let out = Command::new("squeue")
        .args(["-h", "--states=all", "-j", &id.to_string(), "-o", "%T"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Cancels Slurm job `id` and waits until it is over: ended, and no
/// longer completing (its processes gone as far as Slurm knows).
fn cancel_and_wait(id: u64) {
    let status = Command::new("scancel")
        .arg(id.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "scancel {id}");
    wait_state(id, &ENDED);
    wait_for_within(
        &format!("Slurm job {id} to finish completing"),
        SLURM_DEADLINE,
        &mut || squeue_state(id) != "COMPLETING",
    );
}

/// One round: four 1 s jobs, one after another in a one-GPU allocation
/// (the two modes' rounds side by side take two of the test cluster's
/// four GPUs, leaving the others to the rest of the suite); `scancel` at
/// `moment` (0: as the first job starts, 1: half a second later, while it
/// runs, 2: as the first one ends); the same script submitted again
/// finishes the sweep.
fn cancel_round(steps: bool, moment: usize) {
    let jobs: String = (1..=4)
        .map(|n| format!("[vram=20000] sleep 1; echo {n} $GPUSCHED_ATTEMPT >> done.txt\n"))
        .collect();
    let nvml = Nvml::new(&jobs, FOUR_GPUS);
    let mut args = vec!["--gpus", "1", "--time", "10m"];
    if steps {
        args.push("--job-steps");
    }
    let script = pilot_script(&nvml, &args);
    let first = sbatch(&nvml, &[script.to_str().unwrap()]);
    let what = ["the first start", "the first start", "the first end"][moment];
    let kind = if moment == 2 { "done" } else { "started" };
    wait_for_within(what, SLURM_DEADLINE, &mut || {
        !nvml.env.events(kind).is_empty()
    });
    if moment == 1 {
        // While they run: the moment is picked, nothing is asserted on it.
        std::thread::sleep(Duration::from_millis(500));
    }
    cancel_and_wait(first);
    let first_out = pilot_output(&nvml, first);
    let second = sbatch(&nvml, &[script.to_str().unwrap()]);
    let fields = wait_state(second, &ENDED);
    let mode = if steps { "--job-steps" } else { "default" };
    let context = format!(
        "{mode} mode, scancel at {what}\nfirst allocation ({first}):\n{first_out}\nsecond ({second}):\n{}\njournal: {:#?}",
        pilot_output(&nvml, second),
        nvml.env.journal()
    );
    assert_eq!(fields["JobState"], "COMPLETED", "{fields:?}\n{context}");
    // Nothing the cancel killed was called a failure.
    let failed: Vec<_> = nvml
        .env
        .events("done")
        .into_iter()
        .filter(|d| d["status"] != "ok")
        .collect();
    assert!(failed.is_empty(), "{failed:?}\n{context}");
    // Nothing started in the cancelled allocation once it began losing
    // jobs to the cancel (the journal's order).
    let journal = nvml.env.journal();
    if let Some(lost) = journal.iter().position(|e| e["event"] == "interrupted") {
        let late: Vec<_> = journal[lost..]
            .iter()
            .filter(|e| e["event"] == "started" && e["allocation"] == first)
            .collect();
        assert!(
            late.is_empty(),
            "started after the cancel: {late:?}\n{context}"
        );
    }
    assert_each_ended_ok_once(&nvml, 4, &context);
}

/// Each of jobs 1 to `jobs` has one outcome, `ok`, and the attempt it
/// names wrote its line (`N ATTEMPT`) to `done.txt` once. Another line of
/// the job may come only from an attempt journaled `interrupted`: one
/// the cancel's stop reached just after its last act, whose shell had
/// not yet exited — run again, as a stop's jobs are.
fn assert_each_ended_ok_once(nvml: &Nvml, jobs: u64, context: &str) {
    let done_txt = std::fs::read_to_string(nvml.env.path("done.txt")).unwrap_or_default();
    let lines: Vec<(u64, u64)> = done_txt
        .lines()
        .filter_map(|l| {
            let (n, a) = l.split_once(' ')?;
            Some((n.parse().ok()?, a.trim().parse().ok()?))
        })
        .collect();
    for no in 1..=jobs {
        let key = nvml.env.key_of(no);
        // Each outcome with the attempt it ends (the latest start before it).
        let mut attempt = 0;
        let mut outcomes = Vec::new();
        for event in nvml.env.journal() {
            if event["key"] != key.as_str() {
                continue;
            }
            match event["event"].as_str() {
                Some("started") => attempt = event["attempt"].as_u64().unwrap_or(0),
                Some("done") => outcomes.push((attempt, event["status"].to_string())),
                Some("interrupted") => outcomes.push((attempt, "interrupted".to_string())),
                _ => {}
            }
        }
        let ok: Vec<u64> = outcomes
            .iter()
            .filter(|(_, s)| s.contains("ok"))
            .map(|(a, _)| *a)
            .collect();
        assert_eq!(ok.len(), 1, "job {no}: outcomes {outcomes:?}\n{context}");
        let written: Vec<u64> = lines
            .iter()
            .filter(|(n, _)| *n == no)
            .map(|(_, a)| *a)
            .collect();
        assert_eq!(
            written.iter().filter(|&&a| a == ok[0]).count(),
            1,
            "job {no}'s ok attempt {} wrote {written:?}\n{done_txt}\n{context}",
            ok[0]
        );
        for extra in written.iter().filter(|&&a| a != ok[0]) {
            assert!(
                outcomes.contains(&(*extra, "interrupted".to_string())),
                "job {no}'s attempt {extra} wrote its line but was not interrupted: {outcomes:?}\n{context}"
            );
        }
    }
}

/// `scancel` while jobs start, run and end, 10 times in a row in each
/// mode (the two modes side by side, each in its own allocation of one
/// GPU): the previous release journaled some killed jobs `failed
/// (killed by SIGTERM)` and started new attempts in the dying
/// allocation.
#[test]
fn scancel_at_any_moment_interrupts_and_the_next_allocation_runs_each_job_once() {
    if !cluster_up() {
        return;
    }
    let modes: Vec<_> = [false, true]
        .into_iter()
        .map(|steps| {
            std::thread::spawn(move || {
                for round in 0..rounds() {
                    cancel_round(steps, round % 3);
                }
            })
        })
        .collect();
    for mode in modes {
        if let Err(panic) = mode.join() {
            std::panic::resume_unwind(panic);
        }
    }
}

/// Pids of live processes whose environment holds `marker` (a
/// `NAME=value` pair).
pub(crate) fn processes_marked(marker: &str) -> Vec<i32> {
    common::live_processes(|dir| {
        std::fs::read(dir.join("environ"))
            .unwrap_or_default()
            .split(|&b| b == 0)
            .any(|var| var == marker.as_bytes())
    })
}

/// The cluster's `ProctrackType`.
fn proctrack() -> String {
    let out = Command::new("scontrol")
        .args(["show", "config"])
        .output()
        .unwrap();
    let config = String::from_utf8_lossy(&out.stdout);
    gpusched::pilot::config_value(&config, "ProctrackType")
        .unwrap_or_default()
        .to_string()
}

/// The `freezer` line of a `/proc/PID/cgroup` copy: the cgroup's path.
pub(crate) fn cgroup_line(text: &str, controller: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        controllers
            .split(',')
            .any(|c| c == controller)
            .then(|| path.to_string())
    })
}

/// Under Slurm's cgroup tracking (`proctrack/cgroup`, as the test cluster
/// runs where the machine allows), a pilot's jobs sit in gpusched's
/// cgroups beneath the allocation's batch step, which Slurm does not
/// signal: after `scancel` none of them may survive (looked for by a
/// variable in their environment). The previous release left them
/// running, reparented to init, long after the allocation ended.
#[test]
fn after_scancel_no_job_process_outlives_the_allocation_and_each_ran_beneath_it() {
    if !cluster_up() {
        return;
    }
    if proctrack() != "proctrack/cgroup" {
        eprintln!(
            "SKIPPED: the test cluster tracks processes by {} here, not by cgroup (scripts/slurm-test-cluster.sh says why)",
            proctrack()
        );
        return;
    }
    // Job 2 also leaves a process of its own session behind that ignores
    // SIGTERM: only its cgroup reaches it.
    let jobs = "[vram=20000] cat /proc/self/cgroup > cg-1.txt; sleep 120\n\
                [vram=20000] cat /proc/self/cgroup > cg-2.txt; setsid sh -c 'trap \"\" TERM; exec sleep 121' & sleep 120\n";
    let nvml = Nvml::new(jobs, FOUR_GPUS);
    let marker = format!("GPUSCHED_CANCEL_MARK={}", nvml.env.path("").display());
    let script = pilot_script(&nvml, &["--gpus", "2", "--time", "10m"]);
    let (name, value) = marker.split_once('=').unwrap();
    let out = nvml
        .faked(Command::new("sbatch").arg("--parsable").arg(&script))
        .env(name, value)
        .current_dir(nvml.env.path(""))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let id: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    wait_for_within("both jobs to run", SLURM_DEADLINE, &mut || {
        (1..=2).all(|n| nvml.env.path(&format!("cg-{n}.txt")).exists())
            && processes_marked(&marker).len() >= 5
    });
    cancel_and_wait(id);
    // Slurm's own SIGKILL of the allocation came KillWait after its
    // SIGTERM; what is still alive well after that outlived it.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let mut left = processes_marked(&marker);
    while !left.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        left = processes_marked(&marker);
    }
    let out = pilot_output(&nvml, id);
    let described: Vec<String> = left
        .iter()
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            format!(
                "{pid}: {} in {}",
                String::from_utf8_lossy(&cmdline).replace('\0', " "),
                cgroup_line(&cgroup, "freezer").unwrap_or_default()
            )
        })
        .collect();
    for pid in &left {
        // Stopped by pid: what the test's allocation left.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        left.is_empty(),
        "job processes outlived Slurm job {id}:\n{}\n{out}",
        described.join("\n")
    );
    let step = format!("/job_{id}/step_batch/");
    for n in 1..=2 {
        let text = std::fs::read_to_string(nvml.env.path(&format!("cg-{n}.txt"))).unwrap();
        let freezer = cgroup_line(&text, "freezer").unwrap_or_default();
        assert!(
            freezer.contains(&step) && freezer.contains("/gpusched-job-"),
            "job {n} ran in {freezer}, not beneath the allocation's {step}:\n{text}\n{out}"
        );
    }
    let interrupted = nvml.env.events("interrupted");
    assert_eq!(interrupted.len(), 2, "{:?}\n{out}", nvml.env.journal());
    assert!(
        nvml.env.events("done").is_empty(),
        "{:?}",
        nvml.env.journal()
    );
}
