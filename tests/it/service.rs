//! An always-on scheduler (docs/BEHAVIOUR.md "An always-on scheduler"):
//! `gpusched service install` writes a systemd user unit that
//! `systemd-analyze verify` accepts, and `gpusched status` says when no
//! scheduler runs a queue that still has work.

use crate::common;

use common::{Env, bin, wait_for};
use std::process::Command;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn service_install_writes_a_user_unit_that_systemd_accepts() {
    let env = Env::new("echo hi\n");
    let config = env.path("config");
    let install = |args: &[&str]| {
        Command::new(bin())
            .args(["service", "install", "jobs.txt"])
            .args(args)
            .current_dir(env.path(""))
            .env("XDG_CONFIG_HOME", &config)
            .output()
            .unwrap()
    };
    let out = install(&["--", "--gpus", "0", "--poll", "5"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let said = text(&out.stdout);
    assert!(
        said.contains("systemctl --user enable --now gpusched-jobs"),
        "{said}"
    );
    assert!(said.contains("loginctl enable-linger"), "{said}");
    let unit = config.join("systemd/user/gpusched-jobs.service");
    let written = std::fs::read_to_string(&unit).unwrap();
    let jobs = env.jobs.canonicalize().unwrap();
    assert!(
        written.contains(&format!(
            "ExecStart={} {} --watch --gpus 0 --poll 5\n",
            std::path::Path::new(bin())
                .canonicalize()
                .unwrap()
                .display(),
            jobs.display()
        )),
        "{written}"
    );
    // A typo in the scheduler's options is caught now, not at boot.
    let out = install(&["--name", "other", "--", "--gpu", "0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        text(&out.stderr).contains("the scheduler would not start with these options"),
        "{out:?}"
    );
    assert!(!config.join("systemd/user/gpusched-other.service").exists());
    // Installing the same jobs file again updates its unit...
    assert_eq!(install(&[]).status.code(), Some(0));
    // ...but a second project's jobs.txt never takes it over.
    let other = env.path("project2");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("jobs.txt"), "echo there\n").unwrap();
    let out = Command::new(bin())
        .args(["service", "install", "jobs.txt"])
        .current_dir(&other)
        .env("XDG_CONFIG_HOME", &config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        text(&out.stderr).contains("--name project2-jobs"),
        "{out:?}"
    );
    assert!(
        std::fs::read_to_string(&unit)
            .unwrap()
            .contains(&jobs.display().to_string()),
        "the first project's unit is untouched"
    );
    let has_systemd = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_systemd {
        eprintln!(
            "systemd-analyze is missing (Debian: apt install systemd): the unit was not verified"
        );
        return;
    }
    // systemd's own check, as for a user manager (it needs a runtime dir).
    let runtime = env.path("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::set_permissions(
        &runtime,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let verify = Command::new("systemd-analyze")
        .args(["verify", "--user", "--man=no"])
        .arg(&unit)
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    assert_eq!(verify.status.code(), Some(0), "{verify:?}");
    assert_eq!(text(&verify.stderr), "", "systemd-analyze complains");
}

#[test]
fn status_says_when_no_scheduler_runs_a_queue_with_work() {
    let env = Env::new("sleep 30\nsleep 30\n");
    // A webhook's secret is in its path: kept nowhere.
    let url = "https://hooks.example.org/services/T000/SECRET";
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--notify", url]);
    wait_for("status.json to show job 1 running", &mut || {
        std::fs::read_to_string(env.logs.join("status.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|doc| doc["jobs"].as_array().cloned())
            .is_some_and(|jobs| jobs.iter().any(|j| j["no"] == 1 && j["state"] == "running"))
    });
    sched.signal(nix::sys::signal::Signal::SIGKILL);
    // Reaped, so that no zombie passes for a running scheduler.
    let _ = sched.finish();
    let out = env.verb(&["status"]);
    let said = text(&out.stdout);
    assert!(
        said.contains("2 jobs not finished and no scheduler to run them"),
        "{said}"
    );
    // The hint repeats the run's own arguments (the previous release
    // said `gpusched JOBS --watch`, losing --sim and --notify), the URL
    // cut to its host and said so.
    let flat = said.split_whitespace().collect::<Vec<_>>().join(" ");
    let command = format!(
        "start it again in {} with `gpusched {} --log-dir {} --sim 1 --poll 0.1 --notify 'https://hooks.example.org/…'`, giving the URLs cut to their host here in full",
        env.dir.path().display(),
        env.jobs.display(),
        env.logs.display()
    );
    assert!(flat.contains(&command), "{said}");
    for file in ["status.json", "journal.jsonl", "status.txt"] {
        let kept = std::fs::read_to_string(env.logs.join(file)).unwrap();
        assert!(!kept.contains("SECRET"), "{file} keeps the secret");
    }
    // The next start adopts job 1 and ends the test's jobs.
    let out = env.verb(&["cancel", "1"]);
    assert!(out.status.success(), "{out:?}");
    let out = env.verb(&["cancel", "2"]);
    assert!(out.status.success(), "{out:?}");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
}

#[test]
fn a_students_add_from_her_own_subdirectory_runs_there_as_her() {
    use common::users::{Box_, chown, users, users_env};
    use std::os::unix::process::CommandExt;
    let Some([alice, _, _]) = users() else {
        return;
    };
    let b = Box_::new("");
    let env = users_env("", alice);
    let sub = env.path("day/sub");
    std::fs::create_dir_all(&sub).unwrap();
    chown(&env.path("day"), alice);
    chown(&sub, alice);
    chown(&env.jobs, alice);
    let mut args = b.args(1, false);
    args.extend(["--poll", "0.2", "--watch"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = env.command(&args);
    cmd.uid(alice.0).gid(alice.1);
    let sched = common::Sched::from_command(cmd);
    wait_for("alice's scheduler to write its status", &mut || {
        env.logs.join("status.json").exists() || !sched.child_is_running()
    });
    if !sched.child_is_running() {
        let out = sched.finish();
        panic!("alice's scheduler ended: {}{}", out.stdout, out.stderr);
    }
    let out = Command::new(bin())
        .args(["add", "--", "sh", "-c", "id -un > who.txt; pwd >> who.txt"])
        .current_dir(&sub)
        .env("GPUSCHED_LOG_DIR", &env.logs)
        .uid(alice.0)
        .gid(alice.1)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    wait_for("the job to write who.txt", &mut || {
        std::fs::read_to_string(sub.join("who.txt")).is_ok_and(|t| t.lines().count() == 2)
    });
    let who = std::fs::read_to_string(sub.join("who.txt")).unwrap();
    let mut lines = who.lines();
    assert_eq!(lines.next(), Some("gpusched-t-alice"), "{who}");
    assert_eq!(
        std::path::Path::new(lines.next().unwrap())
            .canonicalize()
            .unwrap(),
        sub.canonicalize().unwrap()
    );
    sched.stop();
}
