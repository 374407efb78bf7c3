//! `--slurm` against a real Slurm cluster (docs/BEHAVIOUR.md "Slurm"): the one-node cluster
//! of `scripts/slurm-test-cluster.sh` (4 GPUs of type `fake`, 16 shards of
//! 4096 MiB). `.ci/run` starts it and sets GPUSCHED_SLURM_REQUIRED=1, so
//! there a missing cluster fails these tests; elsewhere they say SKIPPED.

use crate::common;

use common::{Env, wait_for_within};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// Slurm's pace (a poll a second, a scheduler cycle, a minute-rounded
/// `--time`) on a loaded machine.
pub(crate) const SLURM_DEADLINE: Duration = Duration::from_secs(150);

/// Whether a cluster answers; says SKIPPED when not (and panics when the
/// CI asked for one).
pub(crate) fn cluster_up() -> bool {
    let up = Command::new("sinfo")
        .args(["-h", "-o", "%T"])
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| ["idle", "mixed", "allocated"].contains(&l.trim()))
        });
    if !up {
        assert!(
            std::env::var_os("GPUSCHED_SLURM_REQUIRED").is_none(),
            "GPUSCHED_SLURM_REQUIRED is set but no Slurm cluster answers (scripts/slurm-test-cluster.sh up)"
        );
        common::skipped(
            "no Slurm cluster answers `sinfo`; start one as root with `scripts/slurm-test-cluster.sh up`",
        );
    }
    up
}

/// The scheduler's options for the test cluster.
const SLURM: [&str; 5] = ["--slurm", "--shard-mib", "4096", "--poll", "1"];

/// Slurm's jobs named `gpusched-<key>` whose output goes to `env`'s log
/// directory: (id, state).
fn slurm_jobs_of(env: &Env, key: &str) -> Vec<(u64, String)> {
    let out = Command::new("squeue")
        .args(["-h", "--states=all", "-n", &format!("gpusched-{key}")])
        .args(["-O", "JobID:|,State:|,StdOut:"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '|');
            let id = f.next()?.trim().parse().ok()?;
            let state = f.next()?.trim().to_string();
            let stdout = f.next()?.trim();
            stdout
                .starts_with(env.logs.to_str().unwrap())
                .then_some((id, state))
        })
        .collect()
}

/// What Slurm was asked for: the `TresPerNode=` of `scontrol show job`.
fn tres_of(id: u64) -> String {
    let out = Command::new("scontrol")
        .args(["show", "job", "-o", &id.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("TresPerNode="))
        .unwrap_or_else(|| panic!("no TresPerNode for job {id}: {text}"))
        .to_string()
}

/// The Slurm job ids journaled for job `no`, attempt by attempt.
fn slurm_ids(env: &Env, no: u64) -> Vec<u64> {
    env.job_events(no, "started")
        .iter()
        .map(|e| {
            e["slurm_job_id"]
                .as_u64()
                .expect("started has slurm_job_id")
        })
        .collect()
}

fn last_done(env: &Env, no: u64) -> Value {
    env.job_events(no, "done").pop().expect("done")
}

fn log_of(env: &Env, no: u64) -> String {
    std::fs::read_to_string(env.logs.join(format!("job{no:03}.log"))).unwrap_or_default()
}

#[test]
fn whole_gpu_multi_gpu_and_shard_jobs_see_their_devices_and_exit_codes_land() {
    if !cluster_up() {
        return;
    }
    let env = Env::new(
        "[vram=6G] echo \"devices=$CUDA_VISIBLE_DEVICES job=$GPUSCHED_JOB\"\n\
         [gpus=2] echo \"devices=$CUDA_VISIBLE_DEVICES\"\n\
         [on=1] echo \"devices=$CUDA_VISIBLE_DEVICES\"\n\
         echo oops; exit 7\n",
    );
    let out = env.spawn(&SLURM).finish_within(SLURM_DEADLINE);
    assert_eq!(out.code, 7, "the one failed job's exit code: {out:?}");
    // Slurm picks the GPUs: an on= is said to be ignored.
    assert!(
        out.stdout
            .contains("job line 3: on= is ignored on a Slurm cluster"),
        "{}",
        out.stdout
    );
    for no in 1..=3 {
        assert_eq!(env.status_of(no).as_deref(), Some("ok"), "{out:?}");
    }
    let devices = |no| {
        let log = log_of(&env, no);
        let line = log
            .lines()
            .find_map(|l| l.strip_prefix("devices="))
            .unwrap_or_else(|| panic!("no devices line in job {no}'s log: {log}"))
            .to_string();
        line.split_whitespace().next().unwrap_or("").to_string()
    };
    // One GPU for the shard job and the whole-GPU job, two for gpus=2.
    assert_eq!(devices(1).split(',').count(), 1, "{}", devices(1));
    assert!(
        log_of(&env, 1).contains("job=1"),
        "GPUSCHED_* reach the job"
    );
    assert_eq!(devices(2).split(',').count(), 2, "{}", devices(2));
    assert_eq!(devices(3).split(',').count(), 1, "{}", devices(3));
    // What was asked of Slurm: 6 GiB in 4 GiB shards → 2; gpus=2; a GPU.
    assert_eq!(tres_of(slurm_ids(&env, 1)[0]), "gres:shard:2");
    assert_eq!(tres_of(slurm_ids(&env, 2)[0]), "gres:gpu:2");
    assert_eq!(tres_of(slurm_ids(&env, 3)[0]), "gres:gpu:1");
    // The failure's exit code and Slurm's word are in the journal.
    let done = last_done(&env, 4);
    assert_eq!(done["status"], "failed");
    assert_eq!(done["returncode"], 7);
    assert_eq!(done["slurm_state"], "FAILED");
    assert_eq!(last_done(&env, 1)["slurm_state"], "COMPLETED");
    // Each job is one Slurm job, named by its key.
    for no in 1..=4 {
        let jobs = slurm_jobs_of(&env, &env.key_of(no));
        assert_eq!(
            jobs.iter().map(|j| j.0).collect::<Vec<_>>(),
            slurm_ids(&env, no)
        );
    }
}

#[test]
fn after_runs_in_order_and_a_failed_dependency_ends_dependency_failed() {
    if !cluster_up() {
        return;
    }
    let env = Env::new(
        "[name=first vram=1G] sleep 2; date +%s%N > first.end\n\
         [after=first vram=1G] date +%s%N > second.start\n\
         [name=bad vram=1G] exit 3\n\
         [after=bad vram=1G] touch never-runs\n",
    );
    let out = env.spawn(&SLURM).finish_within(SLURM_DEADLINE);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"), "{out:?}");
    assert_eq!(env.status_of(2).as_deref(), Some("ok"), "{out:?}");
    let read = |name: &str| -> u128 {
        std::fs::read_to_string(env.path(name))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    assert!(
        read("first.end") <= read("second.start"),
        "the dependent started before its dependency ended"
    );
    assert_eq!(env.status_of(3).as_deref(), Some("failed"));
    assert_eq!(
        env.status_of(4).as_deref(),
        Some("dependency_failed"),
        "{out:?}"
    );
    assert!(!env.path("never-runs").exists());
}

#[test]
fn cancel_ends_a_running_job_through_scancel() {
    if !cluster_up() {
        return;
    }
    let env = Env::new("[vram=1G] echo running; sleep 300\n");
    let sched = env.spawn(&SLURM);
    wait_for_within("the job to run", SLURM_DEADLINE, &mut || {
        log_of(&env, 1).contains("running")
    });
    let out = env.verb(&["cancel", "1"]);
    assert!(out.status.success(), "{out:?}");
    let out = sched.finish_within(SLURM_DEADLINE);
    let done = last_done(&env, 1);
    assert_eq!(done["status"], "cancelled", "{out:?}");
    assert_eq!(done["slurm_state"], "CANCELLED");
    assert!(done["duration_s"].as_f64().unwrap() < 120.0);
    assert!(out.stdout.contains("stopping Slurm job"), "{}", out.stdout);
    let id = slurm_ids(&env, 1)[0];
    assert_eq!(
        slurm_jobs_of(&env, &env.key_of(1)),
        [(id, "CANCELLED".into())]
    );
}

#[test]
fn an_oom_in_the_log_resubmits_with_a_bigger_request() {
    if !cluster_up() {
        return;
    }
    let env = Env::new(
        "[vram=4G retries=1] if [ \"$GPUSCHED_ATTEMPT\" = 1 ]; then echo 'torch.OutOfMemoryError: CUDA out of memory'; exit 1; fi; echo fine\n",
    );
    let out = env.spawn(&SLURM).finish_within(SLURM_DEADLINE);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"), "{out:?}");
    let oom = env.job_events(1, "oom");
    assert_eq!(oom.len(), 1, "{out:?}");
    assert_eq!(oom[0]["next_vram"], 5120);
    let ids = slurm_ids(&env, 1);
    assert_eq!(ids.len(), 2);
    // 4096 MiB is one 4 GiB shard; 5120 MiB needs two.
    assert_eq!(tres_of(ids[0]), "gres:shard:1");
    assert_eq!(tres_of(ids[1]), "gres:shard:2");
}

#[test]
fn a_scheduler_killed_mid_run_and_restarted_submits_nothing_twice() {
    if !cluster_up() {
        return;
    }
    let env = Env::new(
        "[vram=1G] sleep 4; echo one\n\
         [vram=1G] sleep 4; echo two\n\
         [vram=1G] sleep 6; echo three\n\
         [vram=1G] echo quick\n",
    );
    let sched = env.spawn(&SLURM);
    wait_for_within("every job to be submitted", SLURM_DEADLINE, &mut || {
        env.events("started").len() == 4
    });
    sched.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = sched.finish_within(SLURM_DEADLINE);
    let out = env.spawn(&SLURM).finish_within(SLURM_DEADLINE);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("following it, not submitting it again"),
        "{}",
        out.stdout
    );
    for no in 1..=4 {
        assert_eq!(
            env.status_of(no).as_deref(),
            Some("ok"),
            "job {no}: {out:?}"
        );
        assert_eq!(slurm_ids(&env, no).len(), 1, "job {no} started twice");
        let jobs = slurm_jobs_of(&env, &env.key_of(no));
        assert_eq!(jobs.len(), 1, "job {no} submitted twice: {jobs:?}");
        assert_eq!(jobs[0].1, "COMPLETED");
    }
    assert_eq!(env.events("done").len(), 4, "every outcome recorded once");
}

#[test]
fn a_held_submission_missing_from_the_journal_is_taken_by_its_name() {
    if !cluster_up() {
        return;
    }
    // A first run, paused, records the job as seen and submits nothing.
    let env = Env::new("[vram=1G] echo adopted\n");
    std::fs::create_dir_all(&env.logs).unwrap();
    assert!(env.verb(&["pause"]).status.success());
    let sched = env.spawn(&SLURM);
    env.wait_for("the job to be seen", || !env.events("seen").is_empty());
    let _ = sched.stop();
    assert!(env.events("started").is_empty());
    // What a scheduler killed between sbatch and its journal write leaves:
    // a held job named after the key, writing to the job's log.
    let key = env.key_of(1);
    let out = Command::new("sbatch")
        .args([
            "--parsable",
            "--hold",
            &format!("--job-name=gpusched-{key}"),
        ])
        .arg(format!(
            "--output={}",
            env.logs.join("job001.log").display()
        ))
        .arg("--gres=shard:1")
        .arg("--wrap=echo adopted")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let id: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(env.verb(&["resume"]).status.success());
    let out = env.spawn(&SLURM).finish_within(SLURM_DEADLINE);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"), "{out:?}");
    assert_eq!(
        slurm_ids(&env, 1),
        [id],
        "the held job was taken, not a new one"
    );
    assert_eq!(slurm_jobs_of(&env, &key).len(), 1);
    assert!(log_of(&env, 1).contains("adopted"));
}

#[test]
fn a_timeout_is_slurms_time_limit() {
    if !cluster_up() {
        return;
    }
    // Slurm counts whole minutes: timeout=5 becomes --time=1.
    let env = Env::new("[vram=1G timeout=5] echo running; sleep 300\n");
    let out = env.spawn(&SLURM).finish_within(SLURM_DEADLINE);
    let done = last_done(&env, 1);
    assert_eq!(done["status"], "timeout", "{out:?}");
    assert_eq!(done["slurm_state"], "TIMEOUT");
    let run = done["duration_s"].as_f64().unwrap();
    assert!((55.0..140.0).contains(&run), "ran {run}s");
}

#[test]
fn slurm_missing_is_a_clear_error_at_start() {
    let env = Env::new("echo hi\n");
    let empty = tempfile::tempdir().unwrap();
    let out = env
        .command(&["--slurm"])
        .env("PATH", empty.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sbatch --version") && err.contains("cannot run sbatch"),
        "{err}"
    );
    assert!(env.events("started").is_empty());
}

/// The script `gpusched export --slurm jobs.txt --log-dir logs` prints
/// in `env`'s directory, with `args`; it must succeed.
fn export(env: &Env, args: &[&str]) -> String {
    let out = Command::new(common::bin())
        .args(["export", "--slurm", "jobs.txt", "--log-dir", "logs"])
        .args(args)
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn export_prints_a_script_that_submits_in_order() {
    let env = Env::new(
        "[name=prep vram=6G] python prep.py\n\
         [after=prep gpus=2 timeout=90 preemptible] python train.py --lr 0.1\n\
         [cancel] echo skipped\n\
         [vram=6G exclusive] python alone.py\n",
    );
    let script = export(&env, &["--shard-mib", "4096", "--sbatch-arg=--account=lab"]);
    let lines: Vec<&str> = script.lines().filter(|l| l.contains("sbatch")).collect();
    assert_eq!(lines.len(), 3, "{script}");
    // `[exclusive]`: a whole GPU, where the same declaration shares.
    assert!(lines[2].contains("--gres=gpu:1"), "{script}");
    assert!(lines[0].starts_with("j1=$(sbatch --parsable"), "{script}");
    assert!(lines[0].contains("--gres=shard:2"), "{script}");
    assert!(lines[1].contains("--gres=gpu:2") && lines[1].contains("--time=2"));
    assert!(lines[1].contains("--requeue") && lines[1].contains("--account=lab"));
    assert!(lines[1].contains("--dependency=afterok:$j1"), "{script}");
    assert!(script.contains("# job 3 carries `cancel`"), "{script}");
    // Named for people: name=, else the job number.
    assert!(lines[0].contains("--job-name=prep "), "{script}");
    assert!(lines[1].contains("--job-name=job2 "), "{script}");
    // Run it against a stand-in sbatch that records its arguments.
    let bin = env.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("sbatch");
    common::write_script(
        &fake,
        "#!/bin/sh\nn=$(($(cat n 2>/dev/null || echo 100) + 1)); echo $n > n\nprintf '%s\\n' \"$*\" >> calls\necho $n\n",
    );
    let path = common::path_with(&bin);
    let run = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .env("PATH", path)
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    let calls = std::fs::read_to_string(env.path("calls")).unwrap();
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(calls.len(), 3);
    assert!(calls[1].contains("--dependency=afterok:101"), "{calls:?}");
    assert!(
        calls[1].contains("--wrap=python train.py --lr 0.1"),
        "{calls:?}"
    );
}

/// Jobs that already ended in this log directory are left out, with the
/// numbers the journal gave them, as `--slurm` would leave them.
#[test]
fn export_leaves_out_jobs_that_already_ended() {
    let env = Env::new("[name=first] true\nsh -c 'exit 3'\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 3, "{}", out.stdout);
    std::fs::write(&env.jobs, "[name=first] true\nsh -c 'exit 3'\necho third\n").unwrap();
    let script = export(&env, &[]);
    let lines: Vec<&str> = script.lines().filter(|l| l.contains("sbatch")).collect();
    assert_eq!(lines.len(), 1, "{script}");
    assert!(
        lines[0].starts_with("j3=$(sbatch") && lines[0].contains("--job-name=job3 "),
        "{script}"
    );
    assert!(
        script.contains("# job 1 already ended ok: not submitted"),
        "{script}"
    );
    assert!(
        script.contains(
            "# job 2 already ended failed: not submitted (`gpusched retry 2` queues it again)"
        ),
        "{script}"
    );
}

#[test]
fn a_group_limit_holds_submissions_back() {
    if !cluster_up() {
        return;
    }
    // Three jobs that would all fit at once; limit=1 submits one at a time.
    let lines: String = (1..=3)
        .map(|i| {
            format!(
                "[group=g limit=1 vram=1G] echo s {i} $(date +%s%N) >> marks; sleep 1; echo e {i} $(date +%s%N) >> marks\n"
            )
        })
        .collect();
    let env = Env::new(&lines);
    let out = env.spawn(&SLURM).finish_within(SLURM_DEADLINE);
    for no in 1..=3 {
        assert_eq!(env.status_of(no).as_deref(), Some("ok"), "{out:?}");
    }
    let marks = std::fs::read_to_string(env.path("marks")).unwrap();
    let mut events: Vec<(u128, i32)> = marks
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            Some((w.get(2)?.parse().ok()?, if w[0] == "s" { 1 } else { -1 }))
        })
        .collect();
    events.sort();
    let (mut now, mut most) = (0, 0);
    for (_, step) in events {
        now += step;
        most = most.max(now);
    }
    assert_eq!(most, 1, "{marks}");
}

/// When `squeue` stops answering, the running job is kept, the scheduler
/// warns once, says when Slurm answers again, and the job still ends ok
/// (the launcher's lines reach the terminal through the loop's reporter).
#[test]
fn squeue_failing_is_warned_once_and_its_return_said() {
    if !cluster_up() {
        return;
    }
    let env = Env::new("[vram=1G] echo running; sleep 10; echo finished\n");
    let real = Command::new("sh")
        .args(["-c", "command -v squeue"])
        .output()
        .unwrap();
    let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
    let bin = env.dir.path().join("bin");
    let down = env.dir.path().join("slurm-down");
    std::fs::create_dir_all(&bin).unwrap();
    let wrapper = bin.join("squeue");
    common::write_script(
        &wrapper,
        &format!(
            "#!/bin/sh\nif [ -e '{}' ]; then echo 'squeue: error: Unable to contact slurm controller' >&2; exit 1; fi\nexec '{real}' \"$@\"\n",
            down.display()
        ),
    );
    let mut cmd = env.command(&SLURM);
    cmd.env("PATH", common::path_with(&bin));
    let sched = common::Sched::from_command(cmd);
    wait_for_within("the job to run", SLURM_DEADLINE, &mut || {
        log_of(&env, 1).contains("running")
    });
    std::fs::write(&down, "").unwrap();
    let warning = "cannot ask Slurm for the state of 1 job";
    wait_for_within("the warning", SLURM_DEADLINE, &mut || {
        sched.stdout().contains(warning)
    });
    std::fs::remove_file(&down).unwrap();
    wait_for_within("Slurm answering again", SLURM_DEADLINE, &mut || {
        sched.stdout().contains("Slurm answers again")
    });
    let out = sched.finish_within(SLURM_DEADLINE);
    assert_eq!(last_done(&env, 1)["status"], "ok", "{out:?}");
    assert_eq!(out.stdout.matches(warning).count(), 1, "{}", out.stdout);
}

/// `begin=`, `priority=` and a group's `limit=` are not dropped on the
/// way to Slurm: `--begin`, `--nice` below the file's highest, and a
/// chain of `afterany` dependencies that lets at most `limit` of the
/// group run at once.
#[test]
fn export_carries_begin_priority_and_group_limits() {
    let env = Env::new(
        "[begin=+2h priority=5] python a.py\n\
         [group=g limit=2] echo 1\n\
         [group=g] echo 2\n\
         [group=g] echo 3\n\
         [group=g] echo 4\n",
    );
    let script = export(&env, &[]);
    let lines: Vec<&str> = script.lines().filter(|l| l.contains("sbatch")).collect();
    assert_eq!(lines.len(), 5, "{script}");
    assert!(lines[0].contains("--begin=now+7200"), "{script}");
    assert!(
        !lines[0].contains("--nice"),
        "the highest gets none: {script}"
    );
    assert!(lines[1].contains("--nice=5"), "{script}");
    // Jobs 4 and 5 wait for the end of jobs 2 and 3: two at a time.
    assert!(!lines[1].contains("--dependency") && !lines[2].contains("--dependency"));
    assert!(lines[3].contains("--dependency=afterany:$j2"), "{script}");
    assert!(lines[4].contains("--dependency=afterany:$j3"), "{script}");
}

/// An attribute Slurm cannot honour is said on the job's line of the
/// script, never dropped: read off the attribute table.
#[test]
fn export_says_which_attributes_a_cluster_does_not_honour() {
    let env = Env::new("[on=1 retries=2 enforce=stop family=f] python a.py\n");
    let script = export(&env, &[]);
    for name in ["on=", "retries=", "enforce=", "family="] {
        assert!(
            script.contains(&format!("# job 1: {name} is not honoured here: ")),
            "{name}: {script}"
        );
    }
}

/// Every attribute of the table has a row in README's and BEHAVIOUR's
/// attribute tables and in BEHAVIOUR's Slurm mapping.
#[test]
fn the_docs_tables_list_every_attribute() {
    let readme = std::fs::read_to_string("README.md").unwrap();
    let behaviour = std::fs::read_to_string("docs/BEHAVIOUR.md").unwrap();
    let slurm = behaviour
        .split("Each job is one `sbatch` job named")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").nth(1))
        .expect("BEHAVIOUR's Slurm table");
    let rows = |text: &str| -> String {
        text.lines()
            .filter(|l| l.starts_with("| "))
            .map(|l| l.split(" | ").next().unwrap_or("").to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    for attribute in gpusched::jobspec::ATTRIBUTES {
        let listed = format!("`{}", attribute.listed());
        for (doc, table) in [
            ("README.md", rows(&readme)),
            ("BEHAVIOUR.md", rows(&behaviour)),
            ("BEHAVIOUR.md's Slurm table", rows(slurm)),
        ] {
            assert!(
                table.contains(&listed),
                "{doc} has no row for {}",
                attribute.listed()
            );
        }
    }
}
