//! Job containment through the binary (docs/BEHAVIOUR.md "Containment"):
//! a host OOM at `mem=`, nothing left behind on cgroup v1 and v2, `cpus=`,
//! CPU-only jobs, adoption of a contained job after `kill -9`, and the
//! line said without cgroup access. A check whose controller or
//! hierarchy this machine lacks says SKIPPED with the reason.

use crate::common::{self, Env, users, wait_for, wait_for_within};
use gpusched::containment::cgroupfs;
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The cgroup hierarchies mounted here, as gpusched reads them.
fn mounts() -> Vec<cgroupfs::Mount> {
    cgroupfs::mounts(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
}

/// Where the cgroup v1 hierarchy of `controller` is mounted.
fn v1_mount(controller: &str) -> Option<PathBuf> {
    mounts()
        .into_iter()
        .find(|m| m.controllers.iter().any(|c| c == controller))
        .map(|m| m.point)
}

/// Whether gpusched, as root, finds cgroup v1 with `controllers`; else
/// says SKIPPED with why.
pub(crate) fn v1_with(controllers: &[&str]) -> bool {
    if !nix::unistd::geteuid().is_root() {
        common::skipped("containment tests need root to create cgroups");
        return false;
    }
    if let Some(missing) = controllers.iter().find(|c| v1_mount(c).is_none()) {
        common::skipped(&format!(
            "containment: no cgroup v1 {missing} controller mounted here"
        ));
        return false;
    }
    true
}

/// A fresh cgroup v2 directory gpusched may use with --cgroup (cgroup v2
/// with `cgroup.kill`), removed at drop; `None` (SKIPPED) where there is
/// none.
struct V2Dir(PathBuf);

impl V2Dir {
    fn new(name: &str) -> Option<V2Dir> {
        let mount = mounts()
            .into_iter()
            .find(|m| m.version == cgroupfs::Version::V2)
            .map(|m| m.point);
        let Some(mount) = mount.filter(|_| nix::unistd::geteuid().is_root()) else {
            common::skipped("containment: no cgroup v2 hierarchy writable here (root)");
            return None;
        };
        let dir = mount.join(format!("{name}-{}", std::process::id()));
        if std::fs::create_dir(&dir).is_err() || !dir.join("cgroup.kill").exists() {
            let _ = std::fs::remove_dir(&dir);
            common::skipped("containment: cgroup v2 here has no cgroup.kill (Linux < 5.14)");
            return None;
        }
        Some(V2Dir(dir))
    }
}

impl Drop for V2Dir {
    fn drop(&mut self) {
        if let Ok(entries) = std::fs::read_dir(&self.0) {
            for e in entries.flatten().filter(|e| e.path().is_dir()) {
                let _ = std::fs::remove_dir(e.path());
            }
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Pids of live (not zombie) processes whose command line mentions
/// `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    common::live_processes(|dir| {
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&cmdline).contains(marker)
    })
}

/// The cgroup directories job `no`'s last `started` event names.
fn cgroup_of(env: &Env, no: u64) -> Vec<PathBuf> {
    let started = env.job_events(no, "started");
    let last = started.last().expect("a started event");
    last["cgroup"]
        .as_array()
        .map(|dirs| {
            dirs.iter()
                .filter_map(|d| d.as_str())
                .map(PathBuf::from)
                .collect()
        })
        .unwrap_or_default()
}

/// A copy of `sleep` under a name only this test uses, so that its
/// leftovers can be told from anyone else's.
fn marked_sleep(env: &Env, name: &str) -> String {
    let path = env.path(name);
    std::fs::copy("/bin/sleep", &path).unwrap();
    path.display().to_string()
}

#[test]
fn a_job_over_its_mem_limit_ends_as_a_host_oom_and_is_not_retried() {
    if !v1_with(&["memory"]) {
        return;
    }
    let env = Env::new(
        "[mem=64M retries=2] python3 -c \"b = bytearray(200 * 1024 * 1024); print('allocated', len(b))\"\n",
    );
    let out = env.run(&["--sim", "1", "--poll", "0.2"]);
    assert_eq!(
        env.status_of(1).as_deref(),
        Some("host_oom"),
        "{}",
        out.stdout
    );
    assert_eq!(
        env.job_events(1, "started").len(),
        1,
        "never retried: {}",
        out.stdout
    );
    assert!(env.job_events(1, "oom").is_empty(), "no GPU-OOM retry");
    assert!(
        out.stdout.contains("host memory limit of 64 MiB (mem=)"),
        "the limit is named: {}",
        out.stdout
    );
    let log = std::fs::read_to_string(env.logs.join("job001_gpu0.log")).unwrap();
    assert!(
        !log.lines().any(|l| l.starts_with("allocated")),
        "it never got the memory: {log}"
    );
    // Its cgroup is gone with it.
    for dir in cgroup_of(&env, 1) {
        assert!(!dir.exists(), "{} removed", dir.display());
    }
}

/// A job that starts `setsid SLEEP 300 &` and exits: within 2 s of its
/// end nothing of it is left, and the scheduler said so.
fn nothing_is_left_behind(env: &Env, args: &[&str], sleeper: &str) {
    let sched = env.spawn(args);
    wait_for("the job to end", &mut || env.status_of_opt(1).is_some());
    wait_for_within(
        "its leftover to be killed",
        Duration::from_secs(2),
        &mut || processes_with(sleeper).is_empty(),
    );
    let dirs = cgroup_of(env, 1);
    assert!(!dirs.is_empty(), "it ran in a cgroup: {:?}", env.journal());
    wait_for_within(
        "its cgroup to be removed",
        Duration::from_secs(5),
        &mut || dirs.iter().all(|d| !d.exists()),
    );
    let out = sched.stop();
    assert!(
        out.stdout.contains("job 1 left 1 process behind: killed"),
        "said: {}",
        out.stdout
    );
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
}

#[test]
fn nothing_a_job_leaves_behind_survives_its_end_on_cgroup_v1() {
    if !v1_with(&["memory", "freezer"]) {
        return;
    }
    let env = Env::new("");
    let sleeper = marked_sleep(&env, "leftover-v1");
    env.write_jobs(&format!("setsid {sleeper} 300 & echo started\n"));
    nothing_is_left_behind(&env, &["--sim", "1", "--poll", "0.2", "--watch"], &sleeper);
}

#[test]
fn nothing_a_job_leaves_behind_survives_its_end_on_cgroup_v2() {
    let Some(v2) = V2Dir::new("gpusched-test-v2") else {
        return;
    };
    let env = Env::new("");
    let sleeper = marked_sleep(&env, "leftover-v2");
    env.write_jobs(&format!("setsid {sleeper} 300 & echo started\n"));
    let cgroup = v2.0.display().to_string();
    nothing_is_left_behind(
        &env,
        &[
            "--sim", "1", "--poll", "0.2", "--watch", "--cgroup", &cgroup,
        ],
        &sleeper,
    );
    assert!(
        cgroup_of(&env, 1)[0].starts_with(&v2.0),
        "under --cgroup: {:?}",
        cgroup_of(&env, 1)
    );
}

#[test]
fn cpus_1_pins_a_job_to_one_cpu() {
    if !v1_with(&["cpuset"]) {
        return;
    }
    let env = Env::new("[cpus=1] grep Cpus_allowed_list /proc/self/status\n");
    let out = env.run(&["--sim", "1", "--poll", "0.2"]);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"), "{}", out.stdout);
    let log = std::fs::read_to_string(env.logs.join("job001_gpu0.log")).unwrap();
    let list = log
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or_else(|| panic!("no Cpus_allowed_list in {log}"))
        .trim()
        .to_string();
    assert!(
        !list.contains(',') && !list.contains('-'),
        "one CPU: {list}"
    );
}

#[test]
fn a_cpu_only_job_starts_while_every_gpu_is_full_and_sees_no_gpu() {
    let env = Env::new("");
    let done = env.path("gpu-job-may-end");
    env.write_jobs(&format!(
        "[vram=20000] sh -c 'while [ ! -e {done} ]; do sleep 0.05; done'\n\
         [vram=20000] echo second\n\
         [gpus=0] echo \"visible=[$CUDA_VISIBLE_DEVICES] ${{CUDA_VISIBLE_DEVICES+set}}\"; sleep 1\n\
         [gpus=0] echo another\n",
        done = done.display()
    ));
    let sched = env.spawn(&["--sim", "1", "--poll", "0.2"]);
    wait_for("both CPU-only jobs to end", &mut || {
        env.status_of_opt(3).is_some() && env.status_of_opt(4).is_some()
    });
    assert_eq!(env.status_of_opt(1), None, "the GPU job still runs");
    assert_eq!(env.status_of_opt(2), None, "the second GPU job still waits");
    std::fs::write(&done, "").unwrap();
    let out = sched.finish();
    assert_eq!(out.code, 0, "{}", out.stdout);
    let log = std::fs::read_to_string(env.logs.join("job003.log")).unwrap();
    assert!(
        log.contains("visible=[] set"),
        "an empty CUDA_VISIBLE_DEVICES: {log}"
    );
    assert!(
        out.stdout
            .contains("job 3 started on the CPU only (gpus=0)"),
        "{}",
        out.stdout
    );
    // --cpu-jobs 1 (the default): one after the other.
    let (s3, d3) = (
        env.job_events(3, "started")[0]["ts"].as_f64().unwrap(),
        env.job_events(3, "done")[0]["ts"].as_f64().unwrap(),
    );
    let s4 = env.job_events(4, "started")[0]["ts"].as_f64().unwrap();
    assert!(
        s3 < d3 && d3 <= s4,
        "job 4 waited for job 3: {s3} {d3} {s4}"
    );
}

#[test]
fn a_contained_job_is_adopted_with_its_cgroup_after_kill_9() {
    if !v1_with(&["memory", "freezer"]) {
        return;
    }
    let env = Env::new("");
    let sleeper = marked_sleep(&env, "leftover-adopted");
    let go = env.path("may-end");
    env.write_jobs(&format!(
        "[mem=256M] setsid {sleeper} 300 & while [ ! -e {go} ]; do sleep 0.05; done; exit 3\n",
        go = go.display()
    ));
    let first = env.spawn(&["--sim", "1", "--poll", "0.2"]);
    wait_for("the job to start", &mut || {
        !env.events("started").is_empty()
    });
    let dirs = cgroup_of(&env, 1);
    assert!(!dirs.is_empty(), "contained: {:?}", env.journal());
    wait_for("its leftover to start", &mut || {
        !processes_with(&sleeper).is_empty()
    });
    first.signal(Signal::SIGKILL);
    let _ = first.finish();
    // Still contained while no scheduler runs.
    let members =
        |dir: &Path| std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in processes_with(&sleeper) {
        assert!(
            dirs.iter()
                .all(|d| members(d).lines().any(|l| l.trim() == pid.to_string())),
            "pid {pid} in {dirs:?}"
        );
    }
    let second = env.spawn(&["--sim", "1", "--poll", "0.2"]);
    wait_for("the restart to adopt it", &mut || {
        second.stdout().contains("job 1")
    });
    std::fs::write(&go, "").unwrap();
    let out = second.finish();
    assert_eq!(
        env.status_of(1).as_deref(),
        Some("failed"),
        "{}",
        out.stdout
    );
    let done = env.job_events(1, "done");
    assert_eq!(done[0]["returncode"], 3, "its real exit code: {done:?}");
    assert_eq!(env.job_events(1, "started").len(), 1, "ran once");
    assert!(
        processes_with(&sleeper).is_empty(),
        "nothing left: {}",
        out.stdout
    );
    assert!(
        out.stdout.contains("job 1 left 1 process behind: killed"),
        "{}",
        out.stdout
    );
    assert!(
        dirs.iter().all(|d| !d.exists()),
        "its cgroup removed: {dirs:?}"
    );
}

/// A test user, who may create no cgroup here, with `jobs` in a
/// directory of theirs; `None` (SKIPPED) without root or cgroup v1.
fn user_without_cgroups(jobs: &str) -> Option<((u32, u32), Env)> {
    if !v1_with(&["memory"]) {
        return None;
    }
    let user = users::test_user("gpusched-nocg")?;
    Some((user, users::users_env(jobs, user)))
}

/// `cmd` run to its end as `user`.
fn run_as(mut cmd: std::process::Command, user: (u32, u32)) -> common::Output {
    std::os::unix::process::CommandExt::uid(&mut cmd, user.0);
    std::os::unix::process::CommandExt::gid(&mut cmd, user.1);
    common::Sched::from_command(cmd).finish()
}

#[test]
fn without_cgroup_access_one_line_says_so_and_jobs_still_run() {
    let Some((user, env)) =
        user_without_cgroups("[mem=64M] echo ran\n[mem=64M cpus=1] sleep 2\necho plain\n")
    else {
        return;
    };
    let mut cmd = env.command(&["--sim", "1", "--poll", "0.2", "--watch"]);
    std::os::unix::process::CommandExt::uid(&mut cmd, user.0);
    std::os::unix::process::CommandExt::gid(&mut cmd, user.1);
    let sched = common::Sched::from_command(cmd);
    // While job 2 runs, status.json says its limits hold nothing.
    wait_for("job 2's note", &mut || {
        std::fs::read_to_string(env.logs.join("status.json"))
            .is_ok_and(|s| s.contains("mem= and cpus= not enforced: no cgroup can be made here"))
    });
    wait_for("every job to end", &mut || {
        env.status_of_opt(3).is_some() && env.status_of_opt(2).is_some()
    });
    let out = sched.stop();
    let said = format!("{}{}", out.stdout, out.stderr);
    assert_eq!(said.matches("no cgroups for jobs").count(), 1, "{said}");
    assert!(said.contains("Delegate=yes"), "how to get it: {said}");
    for no in 1..=3 {
        assert_eq!(env.status_of(no).as_deref(), Some("ok"), "job {no}");
        assert!(cgroup_of(&env, no).is_empty(), "uncontained");
    }
    // Each job that asked for a limit says, at its start and its end,
    // that nothing held it; the job that asked nothing says nothing.
    let lines = |no: u32| -> Vec<&str> {
        said.lines()
            .filter(|l| l.contains(&format!(" job {no} ")))
            .filter(|l| l.contains('▶') || l.contains('✓'))
            .collect()
    };
    for (no, what) in [(1, "mem= not enforced"), (2, "mem= and cpus= not enforced")] {
        let lines = lines(no);
        assert_eq!(lines.len(), 2, "start and end of job {no}: {said}");
        assert!(lines.iter().all(|l| l.contains(what)), "{lines:?}");
    }
    assert!(
        lines(3).iter().all(|l| !l.contains("not enforced")),
        "{said}"
    );
    // doctor names which route to containment this machine has.
    let mut doctor = std::process::Command::new(common::bin());
    doctor
        .args(["doctor", "--sim", "1", "--log-dir"])
        .arg(&env.logs)
        .current_dir(env.dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let doctor = run_as(doctor, user);
    let said = format!("{}{}", doctor.stdout, doctor.stderr);
    assert!(
        said.contains("no cgroups for jobs") && said.contains("on this machine"),
        "{said}"
    );
}

/// A journal whose orphan names `dirs` as its cgroup: after the restart
/// ends the orphan (its leader long gone), `victim`, a process in those
/// directories, must be alive and the directories still there.
fn a_journaled_cgroup_not_ours_is_left_alone(dirs: &[PathBuf], victim: &mut std::process::Child) {
    let env = Env::new("true\n");
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let pgid = dead.id();
    dead.wait().unwrap();
    common::journal_with_orphan(&env, "true", pgid, None, None);
    let path = env.logs.join("journal.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let mut event: serde_json::Value = serde_json::from_str(line).unwrap();
            if event["event"] == "started" {
                event["cgroup"] = serde_json::json!(dirs);
            }
            event.to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let out = env.run(&["--sim", "1", "--poll", "0.2"]);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"), "{}", out.stdout);
    assert!(
        victim.try_wait().unwrap().is_none(),
        "the victim lives: {}",
        out.stdout
    );
    assert!(
        !out.stdout.contains("left"),
        "nothing was killed: {}",
        out.stdout
    );
    assert!(dirs.iter().all(|d| d.exists()), "{dirs:?} not removed");
}

/// A cgroup made by the test under `mount`, holding `pid`; removed at drop.
struct Planted(PathBuf);

impl Planted {
    fn new(mount: &Path, name: &str, pid: u32) -> Planted {
        let dir = mount.join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
        Planted(dir)
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        // Back to the hierarchy's root, then the directory goes.
        let root = self.0.parent().unwrap();
        for pid in std::fs::read_to_string(self.0.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
        {
            let _ = std::fs::write(root.join("cgroup.procs"), pid);
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_journal_naming_a_cgroup_gpusched_did_not_make_kills_nothing() {
    if !v1_with(&["freezer"]) {
        return;
    }
    let freezer = v1_mount("freezer").unwrap();
    let mut victim = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    let tag = std::process::id();
    // Not named as a job's cgroup.
    let plain = Planted::new(&freezer, &format!("victim-{tag}"), victim.id());
    a_journaled_cgroup_not_ours_is_left_alone(std::slice::from_ref(&plain.0), &mut victim);
    drop(plain);
    // Named as one, but another user's.
    let Some(user) = users::test_user("gpusched-nocg") else {
        let _ = victim.kill();
        return;
    };
    let named = Planted::new(
        &freezer,
        &format!("gpusched-job-planted-{tag}"),
        victim.id(),
    );
    users::chown(&named.0, user);
    a_journaled_cgroup_not_ours_is_left_alone(std::slice::from_ref(&named.0), &mut victim);
    drop(named);
    // The hierarchy's root itself.
    a_journaled_cgroup_not_ours_is_left_alone(std::slice::from_ref(&freezer), &mut victim);
    let _ = victim.kill();
    let _ = victim.wait();
}

#[test]
fn a_gpu_process_a_finished_job_left_behind_is_named_on_the_board() {
    // Without containment nothing kills it: the board must say whose it is.
    let env = Env::new(
        "[vram=2000] setsid gpusched simjob --vram 1000 --ramp 0.1 --hold 60 > /dev/null & sleep 0.5\n",
    );
    let sched = env.spawn(&["--sim", "1", "--poll", "0.2", "--watch", "--no-containment"]);
    let left = || -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(env.logs.join("status.json")).unwrap_or_default();
        serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|doc| doc["gpus"][0]["left_behind"].as_array().cloned())
            .unwrap_or_default()
    };
    wait_for("the left-behind process on the board", &mut || {
        env.status_of_opt(1).is_some() && !left().is_empty()
    });
    let found = left();
    assert_eq!(found[0]["job"], 1, "{found:?}");
    assert_eq!(found[0]["mib"], 1000, "{found:?}");
    let pid = found[0]["pid"].as_i64().unwrap() as i32;
    // The board is rewritten on its own beat: wait for its next copy.
    let line = format!("pid {pid} of finished job 1 still holds 1000 MiB");
    wait_for("the board to name it", &mut || env.board().contains(&line));
    common::assert_valid_status(
        &serde_json::from_str(&std::fs::read_to_string(env.logs.join("status.json")).unwrap())
            .unwrap(),
    );
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
    wait_for("the board to drop it once it is gone", &mut || {
        left().is_empty()
    });
    let out = sched.stop();
    assert_eq!(
        out.stdout.matches("of finished job 1 still holds").count(),
        1,
        "said once: {}",
        out.stdout
    );
}

#[test]
fn without_cgroups_a_scheduler_runs_itself_again_in_a_delegated_systemd_scope() {
    let Some((user, env)) = user_without_cgroups("echo ran\n") else {
        return;
    };
    // A systemd-run that notes how it was called and runs the command (no
    // user manager here to make the scope).
    let bin = env.path("bin");
    std::fs::create_dir(&bin).unwrap();
    let calls = env.path("calls");
    let fake = bin.join("systemd-run");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$*\" >> {}\nwhile [ \"$1\" != -- ]; do shift; done\nshift\nexec \"$@\"\n",
            calls.display()
        ),
    )
    .unwrap();
    users::chmod(&fake, 0o755);
    users::chown(&bin, user);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = env.command(&["--sim", "1", "--poll", "0.2"]);
    cmd.env("PATH", &path)
        .env_remove("INVOCATION_ID")
        .env_remove("GPUSCHED_IN_SCOPE");
    let out = run_as(cmd, user);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let calls = std::fs::read_to_string(&calls).unwrap_or_default();
    let lines: Vec<&str> = calls.lines().collect();
    assert_eq!(lines.len(), 2, "a check, then the run itself: {calls}");
    assert_eq!(
        lines[0], "--user --scope -p Delegate=yes --quiet -- true",
        "{calls}"
    );
    assert!(
        lines[1].starts_with("--user --scope -p Delegate=yes --quiet -- ")
            && lines[1].contains(&env.jobs.display().to_string()),
        "the same arguments again: {calls}"
    );
    // In its "scope" it still finds none (this fake delegates nothing):
    // it says so once and does not ask again.
    let said = format!("{}{}", out.stdout, out.stderr);
    assert_eq!(said.matches("no cgroups for jobs").count(), 1, "{said}");
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    assert_eq!(env.job_events(1, "started").len(), 1, "ran once");
}

#[test]
fn a_stale_cgroup_of_the_same_name_loses_its_old_limit() {
    if !v1_with(&["memory", "freezer"]) {
        return;
    }
    // A crash left the cgroup of job 1's attempt 1 with a 64 MiB limit;
    // the journal is then started afresh, so the new attempt 1 meets it.
    let command = "python3 -c \"b = bytearray(200 * 1024 * 1024); print('allocated')\"";
    let env = Env::new(&format!("{command}\n"));
    let key = gpusched::jobspec::parse_jobs(command).unwrap()[0]
        .key
        .clone();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let memory = own
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()))
        .unwrap();
    let tag = gpusched::containment::log_dir_tag(&env.logs);
    let base = v1_mount("memory")
        .unwrap()
        .join(memory.trim_start_matches('/'))
        .join(format!("gpusched-{tag}"));
    let stale = base.join(gpusched::containment::job_name(&key, 1));
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(
        stale.join("memory.limit_in_bytes"),
        (64u64 << 20).to_string(),
    )
    .unwrap();
    let out = env.run(&["--sim", "1", "--poll", "0.2"]);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"), "{}", out.stdout);
    assert_eq!(cgroup_of(&env, 1)[0], stale, "it met the stale cgroup");
    assert!(!stale.exists(), "and removed it");
    let _ = std::fs::remove_dir(&base);
}

#[test]
fn cpus_come_from_those_nvml_puts_nearest_the_job_s_gpu() {
    if !v1_with(&["cpuset"]) {
        return;
    }
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    if online.trim() == "0" {
        common::skipped("containment: one CPU here, so nearness cannot show");
        return;
    }
    // GPU 1 sits next to CPU 1 only; CPU 0 would be the first free pick.
    let nvml = crate::nvml::Nvml::new(
        "[cpus=1 on=1] grep Cpus_allowed_list /proc/self/status\n",
        &format!("{}affinity 0 0\naffinity 1 1\n", crate::nvml::TWO_GPUS),
    );
    let out = nvml.run(&["--poll", "0.2"]);
    assert_eq!(
        nvml.env.status_of(1).as_deref(),
        Some("ok"),
        "{}",
        out.stdout
    );
    let log = std::fs::read_to_string(nvml.env.logs.join("job001_gpu1.log")).unwrap();
    assert!(
        log.contains("Cpus_allowed_list:\t1\n"),
        "CPU 1, near GPU 1: {log}"
    );
}

/// Tiny jobs' cgroups are kept and reused (docs/PERFORMANCE.md
/// "Containment"): a job that starts in one an earlier job ran in still
/// has its leftovers killed and said as its own, a `mem=` job after them
/// gets a cgroup with its limit, no earlier job's end is taken for a later
/// one's, and when the queue drains no job cgroup is left.
#[test]
fn a_reused_cgroup_holds_each_job_to_itself() {
    if !v1_with(&["memory", "freezer"]) {
        return;
    }
    let env = Env::new("");
    let sleeper = marked_sleep(&env, "leftover-reused");
    let mut jobs: String = (1..=30).map(|i| format!("true {i}\n")).collect();
    let tiny: Vec<String> = (1..=30).map(|i| i.to_string()).collect();
    jobs.push_str(&format!(
        "[after={}] setsid {sleeper} 300 & echo started\n",
        tiny.join(",")
    ));
    jobs.push_str(
        "[after=31 mem=64M] python3 -c \"b = bytearray(200 * 1024 * 1024); print('allocated', len(b))\"\n",
    );
    jobs.push_str("[after=31] true last\n");
    env.write_jobs(&jobs);
    let sched = env.spawn(&["--sim", "1", "--poll", "0.2", "--watch"]);
    wait_for("every job to end", &mut || {
        env.status_of_opt(32).is_some() && env.status_of_opt(33).is_some()
    });
    wait_for_within(
        "job 31's leftover to be killed",
        Duration::from_secs(5),
        &mut || processes_with(&sleeper).is_empty(),
    );
    let bases: std::collections::BTreeSet<PathBuf> = (1..=33)
        .flat_map(|no| cgroup_of(&env, no))
        .filter_map(|d| d.parent().map(Path::to_path_buf))
        .collect();
    assert!(
        !bases.is_empty(),
        "the jobs ran in cgroups: {:?}",
        env.journal()
    );
    let job_cgroups = || -> Vec<PathBuf> {
        bases
            .iter()
            .flat_map(|b| std::fs::read_dir(b).into_iter().flatten().flatten())
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("gpusched-job-"))
            })
            .collect()
    };
    wait_for_within(
        "no job cgroup left once the queue drained",
        Duration::from_secs(10),
        &mut || job_cgroups().is_empty(),
    );
    let out = sched.stop();
    for no in 1..=30 {
        assert_eq!(env.status_of(no).as_deref(), Some("ok"), "job {no}");
    }
    assert_eq!(env.status_of(31).as_deref(), Some("ok"), "{}", out.stdout);
    assert_eq!(
        env.status_of(32).as_deref(),
        Some("host_oom"),
        "{}",
        out.stdout
    );
    assert_eq!(env.status_of(33).as_deref(), Some("ok"), "{}", out.stdout);
    let left: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.contains("behind: killed"))
        .collect();
    assert_eq!(
        left.len(),
        1,
        "one job left something, said once: {}",
        out.stdout
    );
    assert!(left[0].contains("job 31 left 1 process behind"), "{left:?}");
    // Each job's journaled cgroup is named for it, reused or not (v1
    // renames a kept cgroup for its next job).
    for no in [31, 33] {
        for dir in cgroup_of(&env, no) {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            assert!(name.ends_with("-a1"), "job {no}: {name}");
        }
    }
    let names: std::collections::BTreeSet<PathBuf> =
        (1..=33).flat_map(|no| cgroup_of(&env, no)).collect();
    assert_eq!(names.len(), 33 * 2, "one name per job per hierarchy");
}

/// Whatever contains gpusched contains its jobs: a scheduler started in
/// a cgroup of its own (here one the test makes in the freezer and memory
/// hierarchies, as a Slurm step or a systemd unit would hold it) makes
/// its jobs' cgroups beneath it, and after its stop (SIGTERM) no process
/// of a job is left — one that left a process of its own session
/// ignoring SIGTERM included, reached through its cgroup.
#[test]
fn a_scheduler_in_a_cgroup_of_its_own_keeps_its_jobs_beneath_it_and_none_outlives_its_stop() {
    if !v1_with(&["memory", "freezer"]) {
        return;
    }
    let env = Env::new("");
    let name = format!("gpusched-test-own-{}", std::process::id());
    let own: Vec<PathBuf> = ["freezer", "memory"]
        .iter()
        .map(|c| v1_mount(c).unwrap().join(&name))
        .collect();
    for dir in &own {
        std::fs::create_dir(dir).unwrap();
    }
    let sleeper = marked_sleep(&env, "own-cgroup-sleep");
    env.write_jobs(&format!(
        "cat /proc/self/cgroup > cg.txt; setsid sh -c 'trap \"\" TERM; exec {sleeper} 121' & {sleeper} 120\n"
    ));
    let mut cmd = env.command(&["--sim", "1", "--poll", "0.2", "--watch"]);
    let procs: Vec<std::ffi::CString> = own
        .iter()
        .map(|d| std::ffi::CString::new(d.join("cgroup.procs").display().to_string()).unwrap())
        .collect();
    // SAFETY: between fork and exec only open(2), write(2) and close(2)
    // on strings made before the fork.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            for path in &procs {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
                if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
            }
            Ok(())
        });
    }
    let sched = common::Sched::from_command(cmd);
    wait_for("the job to run, its leftover with it", &mut || {
        env.path("cg.txt").exists() && processes_with(&sleeper).len() >= 2
    });
    let text = std::fs::read_to_string(env.path("cg.txt")).unwrap();
    for (controller, dir) in ["freezer", "memory"].iter().zip(&own) {
        let mount = v1_mount(controller).unwrap();
        let ours = format!("/{}", dir.strip_prefix(&mount).unwrap().display());
        let line = text
            .lines()
            .find(|l| {
                l.split(':')
                    .nth(1)
                    .is_some_and(|c| c.split(',').any(|c| c == *controller))
            })
            .unwrap_or_default();
        assert!(
            line.contains(&format!("{ours}/")) && line.contains("/gpusched-job-"),
            "the job's {controller} cgroup is not beneath the scheduler's {ours}: {line}"
        );
    }
    let out = sched.stop();
    let mut left = processes_with(&sleeper);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !left.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        left = processes_with(&sleeper);
    }
    for pid in &left {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), Signal::SIGKILL);
    }
    // The test's cgroups go, bottom up, once empty.
    for dir in &own {
        let mut dirs: Vec<PathBuf> = walk_dirs(dir);
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in dirs {
            let _ = std::fs::remove_dir(&d);
        }
    }
    assert!(
        left.is_empty(),
        "{left:?} outlived the stop: {}",
        out.stdout
    );
    assert_eq!(env.events("interrupted").len(), 1, "{}", out.stdout);
}

/// `dir` and every directory beneath it.
fn walk_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk_dirs(&entry.path()));
        }
    }
    out
}
