//! Black-box tests of the everyday verbs (docs/BEHAVIOUR.md "Everyday verbs"): `log` (with `-f`),
//! `retry` with and without a running scheduler and its refusals, how
//! subcommands find the scheduler's jobs file, file modes under the umask,
//! 80-column lines, completions and the man page, the typo hint, and exit
//! 2 for usage errors everywhere.

use crate::common;

use common::{Env, bin, wait_for};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// A job that runs until `release` exists, then counts its run.
const HOLD: &str = "sh -c 'echo started; while [ ! -e release ]; do sleep 0.05; done; echo run >> runs.txt; echo finished'";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn log_prints_an_attempt_and_follows_it_to_the_end() {
    let env = Env::new(&format!("echo first attempt; exit 3\n{HOLD}\n"));
    let sched = env.spawn(&["--sim", "2", "--poll", "0.1", "--watch"]);
    wait_for("job 1 to fail", &mut || env.status_of_opt(1).is_some());
    let out = env.verb(&["log", "1"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let shown = text(&out.stdout);
    assert!(
        shown.starts_with("==== gpusched: job 1 attempt 1"),
        "{shown}"
    );
    assert!(shown.contains("first attempt"), "{shown}");
    // An attempt that does not exist, a job that does not exist.
    let out = env.verb(&["log", "1", "--attempt", "2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("has no attempt 2"), "{out:?}");
    let out = env.verb(&["log", "99"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no job 99"), "{out:?}");

    // -f follows job 2 until it ends, then exits by itself.
    wait_for("job 2 to start", &mut || {
        !env.job_events(2, "started").is_empty()
    });
    let mut follower = Command::new(bin())
        .args(["log", "2", "-f", "--log-dir"])
        .arg(&env.logs)
        .current_dir(env.dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(follower.try_wait().unwrap().is_none(), "still following");
    std::fs::write(env.path("release"), "").unwrap();
    let out = follower.wait_with_output().unwrap();
    assert!(out.status.success());
    let shown = text(&out.stdout);
    assert!(
        shown.contains("started") && shown.contains("finished"),
        "{shown}"
    );
    sched.stop();
}

#[test]
fn retry_without_a_scheduler_queues_the_job_for_the_next_start() {
    let env = Env::new("sh -c 'echo run >> runs.txt; [ -e fixed ]'\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    std::fs::write(env.path("fixed"), "").unwrap();
    // No --file: the jobs file comes from the scheduler's status.json.
    let out = env.verb(&["retry", "1"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text(&out.stdout).contains("job 1 queued again"), "{out:?}");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(env.job_events(1, "started").len(), 2);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    assert_eq!(
        std::fs::read_to_string(env.path("runs.txt")).unwrap(),
        "run\nrun\n"
    );
}

#[test]
fn retry_with_a_running_scheduler_runs_the_job_again() {
    let env = Env::new("sh -c 'echo run >> runs.txt; [ -e fixed ]'\n");
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("job 1 to fail", &mut || env.status_of_opt(1).is_some());
    std::fs::write(env.path("fixed"), "").unwrap();
    let out = env.verb(&["retry", "1"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).contains(&format!(
            "job 1 queued again (scheduler pid {})",
            sched.pid()
        )),
        "{out:?}"
    );
    wait_for("the second attempt to end ok", &mut || {
        env.status_of(1).as_deref() == Some("ok")
    });
    assert!(
        sched
            .stdout()
            .contains("job 1 queued again (gpusched retry)")
    );
    sched.stop();
    assert_eq!(env.job_events(1, "started").len(), 2);
}

#[test]
fn retry_is_refused_with_the_fix_for_cancelled_gone_or_unfinished_jobs() {
    let env = Env::new("[cancel] echo never\nfalse\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(env.status_of(1).as_deref(), Some("cancelled"), "{out:?}");
    let out = env.verb(&["retry", "1"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let message = text(&out.stderr);
    assert!(
        message.contains("carries `cancel`: remove the flag"),
        "{message}"
    );
    assert!(message.contains("line 1 of"), "{message}");
    // The line of job 2 deleted.
    env.write_jobs("[cancel] echo never\n");
    let out = env.verb(&["retry", "2"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("no longer in"), "{out:?}");
    assert!(text(&out.stderr).contains("add it back"), "{out:?}");
    // Nothing was queued.
    assert!(env.events("retry").is_empty());
}

#[test]
fn commands_find_the_schedulers_jobs_file_or_say_where_they_looked() {
    let env = Env::new(&format!("{HOLD}\n"));
    let sched = env.spawn(&["--sim", "2", "--poll", "0.1", "--watch"]);
    wait_for("job 1 to start", &mut || !env.events("started").is_empty());
    // The jobs file is found through status.json, written at most every
    // 200 ms: wait for it to name the file.
    wait_for("status.json", &mut || {
        std::fs::read_to_string(env.logs.join("status.json"))
            .is_ok_and(|t| t.contains(env.jobs.file_name().unwrap().to_str().unwrap()))
    });
    // From another directory, with only --log-dir: the right file.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = Command::new(bin())
        .args(["add", "--log-dir"])
        .arg(&env.logs)
        .args(["--", "echo", "added"])
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text(&out.stderr).contains("queued as job 2"), "{out:?}");
    assert!(
        std::fs::read_to_string(&env.jobs)
            .unwrap()
            .contains("echo added")
    );
    assert_eq!(
        std::fs::read_dir(elsewhere.path()).unwrap().count(),
        0,
        "no stray jobs file"
    );
    env.write_jobs(&std::fs::read_to_string(&env.jobs).unwrap());
    // Neither a scheduler's status.json nor ./jobs.txt: say where we looked.
    let out = Command::new(bin())
        .args(["add", "--", "echo", "lost"])
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let message = text(&out.stderr);
    assert!(
        message.contains("gpusched_logs/status.json") && message.contains("./jobs.txt"),
        "{message}"
    );
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    std::fs::write(env.path("release"), "").unwrap();
    sched.stop();
}

#[test]
fn files_for_people_follow_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    for (umask, mode) in [(0o022, 0o644), (0o077, 0o600)] {
        let env = Env::new("echo hi\n");
        let mut command = env.command(&["--sim", "1", "--poll", "0.1"]);
        // SAFETY: umask in the child before exec.
        unsafe {
            command.pre_exec(move || {
                libc::umask(umask);
                Ok(())
            });
        }
        let out = common::Sched::from_command(command).finish();
        assert_eq!(out.code, 0, "{out:?}");
        for name in [
            "status.txt",
            "status.json",
            "metrics.prom",
            "job001_gpu0.log",
        ] {
            let got = std::fs::metadata(env.logs.join(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(got, mode, "{name} under umask {umask:o}");
        }
    }
}

#[test]
fn board_and_status_lines_fit_80_columns() {
    let long = format!("sh -c 'sleep 0.2' # {}", "a very long comment ".repeat(8));
    let env = Env::new(&format!(
        "[vram=1G gpus=2] {long}\n[vram=30G] echo {}\n{HOLD}\n",
        "x".repeat(120)
    ));
    let sched = env.spawn(&["--sim", "2", "--poll", "0.1", "--watch"]);
    wait_for("the held job", &mut || env.board().contains("▶ job 3"));
    let check = |what: &str, text: &str| {
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{what}: {line:?}");
        }
    };
    check("status.txt", &env.board());
    let out = env.verb(&["status"]);
    assert!(out.status.success(), "{out:?}");
    let shown = text(&out.stdout);
    check("gpusched status", &shown);
    assert!(shown.contains('…'), "{shown}");
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("job 3 to end", &mut || env.status_of_opt(3).is_some());
    let all = env.verb(&["status", "--all"]);
    check("gpusched status --all", &text(&all.stdout));
    assert!(text(&all.stdout).contains("3 finished:"), "{all:?}");
    sched.stop();
}

#[test]
fn completions_and_man_page_come_from_the_command_line() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(bin())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = text(&out.stdout);
        for verb in ["status", "retry", "log", "stop"] {
            assert!(script.contains(verb), "{shell} lacks {verb}");
        }
        assert!(
            !script.contains("__supervise"),
            "{shell} shows the internal command"
        );
    }
    let out = Command::new(bin()).arg("man").output().unwrap();
    assert!(out.status.success());
    let page = text(&out.stdout);
    assert!(page.contains(".TH gpusched 1"), "{page}");
    assert!(
        page.contains("retry") && page.contains("\\-\\-log\\-dir"),
        "{page}"
    );
}

#[test]
fn typos_and_usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(bin())
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let out = run(&["statu"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        text(&out.stderr).contains("did you mean `gpusched status`?"),
        "{out:?}"
    );
    // A typo with arguments after it is still a typo, not a jobs file.
    let out = run(&["cancle", "3"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        text(&out.stderr).contains("did you mean `gpusched cancel`?"),
        "{out:?}"
    );
    for args in [
        &["add"][..],
        &["cancel"],
        &["retry"],
        &["log"],
        &["log", "1", "--attempt", "0"],
        &["completions", "tcsh"],
        &["status", "--bogus"],
        &["cancel", "3"],
        &["log", "3"],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
}

#[test]
fn every_waiting_job_says_why() {
    let env = Env::new(&format!(
        "{HOLD}\n{HOLD}\n[vram=10G] echo third\n[vram=2G gpus=2] echo fourth\n"
    ));
    let sched = env.spawn(&["--sim", "2", "--poll", "0.1", "--watch"]);
    // Jobs 1 and 2 (undeclared, held) close both GPUs, so every later job
    // waits until they are released.
    wait_for("the reasons on the board", &mut || {
        let board = env.board();
        board.contains("needs 10752 MiB on 1 GPU; most free: GPU 0 0 MiB (closed)")
            || board.contains("needs 10752 MiB on 1 GPU; most free: GPU 1 0 MiB (closed)")
    });
    let board = env.board();
    assert!(
        board.contains("needs 2560 MiB × 2 GPUs; none has room"),
        "{board}"
    );
    assert!(board.contains("headroom 0 MiB (closed)"), "{board}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(env.logs.join("status.json")).unwrap())
            .unwrap();
    let reasons: Vec<&str> = doc["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["state"] == "pending")
        .map(|j| j["reason"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(reasons.len(), 2, "{doc}");
    assert!(
        reasons.iter().all(|r| r.starts_with("needs ")),
        "{reasons:?}"
    );
    assert!(
        doc["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["closed"] == true && g["headroom_mib"] == 0),
        "{doc}"
    );
    let shown = text(&env.verb(&["status"]).stdout);
    assert!(shown.contains("needs 10752 MiB"), "{shown}");
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("all four to end", &mut || env.status_of_opt(4).is_some());
    sched.stop();
}

#[test]
fn jobs_can_be_named_in_every_verb() {
    let env = Env::new("[name=train] sh -c 'echo training; [ -e fixed ]'\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    let out = env.verb(&["log", "train"]);
    assert!(text(&out.stdout).contains("training"), "{out:?}");
    std::fs::write(env.path("fixed"), "").unwrap();
    env.write_jobs("[name=train] sh -c 'echo training; [ -e fixed ]'\n[name=eval cancel] sh -c 'echo should not run'\n");
    let out = env.verb(&["retry", "train"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    assert_eq!(env.status_of(2).as_deref(), Some("cancelled"));
    // cancel by name.
    env.write_jobs("[name=train] sh -c 'echo training; [ -e fixed ]'\n[name=eval] sh -c 'echo should not run'\n[name=later] echo later\n");
    let out = env.verb(&["cancel", "later", "--file", env.jobs.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    env.assert_jobs_untouched();
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stdout.contains("cancelled before it started"),
        "{}",
        out.stdout
    );
    let later = env
        .journal()
        .into_iter()
        .find(|r| r["event"] == "seen" && r["command"] == "echo later")
        .expect("the cancelled line is journaled as seen");
    let no = later["no"].as_u64().unwrap();
    assert_eq!(env.status_of(no).as_deref(), Some("cancelled"));
}

#[test]
fn adding_back_a_command_that_already_ran_says_so_and_fails() {
    let env = Env::new("echo first\necho other\n");
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("both jobs to finish", &mut || {
        env.status_of_opt(2).is_some()
    });
    // The finished line deleted, then added back.
    env.write_jobs("echo first\n");
    let add = |words: &[&str]| {
        Command::new(bin())
            .args(["add", "--log-dir"])
            .arg(&env.logs)
            .arg("--")
            .args(words)
            .current_dir(env.path(""))
            .output()
            .unwrap()
    };
    let out = add(&["echo", "other"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).contains("already ran as job 2 (ok)")
            && text(&out.stderr).contains("`gpusched retry 2` runs it again"),
        "{out:?}"
    );
    // A new command is queued as ever.
    let out = add(&["echo", "third"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text(&out.stderr).contains("queued as job 3"), "{out:?}");
    sched.stop();
}

#[test]
fn add_runs_the_job_in_the_callers_directory_and_verbs_take_gpusched_log_dir() {
    let env = Env::new("");
    let sub = env.path("day/sub");
    std::fs::create_dir_all(&sub).unwrap();
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    env.wait_for_ticks(1);
    // From day/sub, naming the log directory only by GPUSCHED_LOG_DIR.
    let add = |args: &[&str]| {
        Command::new(bin())
            .arg("add")
            .args(args)
            .current_dir(&sub)
            .env("GPUSCHED_LOG_DIR", &env.logs)
            .output()
            .unwrap()
    };
    let out = add(&["--", "sh", "-c", "pwd > here.txt"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The shell makes here.txt before pwd writes to it: wait for the end.
    wait_for("job 1 to end", &mut || env.status_of_opt(1).is_some());
    let here = std::fs::read_to_string(sub.join("here.txt")).unwrap();
    assert_eq!(
        std::path::Path::new(here.trim()).canonicalize().unwrap(),
        sub.canonicalize().unwrap()
    );
    let line = std::fs::read_to_string(&env.jobs).unwrap();
    assert!(line.starts_with("[cwd=/"), "{line}");
    // A directory that is gone by the time the job runs: the job fails,
    // saying why in its log.
    let gone = env.path("gone");
    std::fs::create_dir_all(&gone).unwrap();
    let out = add(&["--cwd", gone.to_str().unwrap(), "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    wait_for("job 2 to end", &mut || env.status_of_opt(2).is_some());
    assert_eq!(env.status_of(2).as_deref(), Some("ok"));
    std::fs::remove_dir(&gone).unwrap();
    env.append_jobs(&format!("[cwd={}] echo never\n", gone.to_str().unwrap()));
    wait_for("job 3 to end", &mut || env.status_of_opt(3).is_some());
    assert_eq!(env.status_of(3).as_deref(), Some("failed"));
    let log = std::fs::read_dir(&env.logs)
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with("job003"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .unwrap_or_default();
    assert!(
        log.contains("gpusched: cannot enter the job's cwd= directory"),
        "{log}"
    );
    // --cwd must name a directory.
    let out = add(&["--cwd", "/no/such/dir", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("no such directory"), "{out:?}");
    // Other verbs find the scheduler by GPUSCHED_LOG_DIR too.
    let out = Command::new(bin())
        .arg("status")
        .current_dir(&sub)
        .env("GPUSCHED_LOG_DIR", &env.logs)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).contains(&format!("jobs file: {}", env.jobs.display())),
        "{out:?}"
    );
    sched.stop();
}

/// `gpusched cancel` takes several jobs, by number, name and group=NAME,
/// in one request (it took one job while retry took several); an unknown
/// one cancels none.
#[test]
fn cancel_takes_several_jobs_numbers_names_and_a_group() {
    let hold = "sh -c 'while [ ! -e release ]; do sleep 0.05; done'";
    let env = Env::new(&format!(
        "[vram=1000] {hold}\n[vram=1000 name=b] {hold}\n[vram=1000 group=g] {hold}\n[vram=1000 group=g] {hold}\n[vram=1000] {hold}\n"
    ));
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("five jobs started", &mut || {
        env.events("started").len() == 5
    });
    let refused = env.verb(&["cancel", "1", "nosuchjob"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let out = env.verb(&["cancel", "1", "b", "group=g"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(said.matches("cancelled").count(), 4, "{said}");
    wait_for("four jobs cancelled", &mut || {
        (1..=4).all(|no| env.status_of_opt(no).as_deref() == Some("cancelled"))
    });
    assert_eq!(env.status_of_opt(5), None, "job 5 still runs");
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("job 5 to end", &mut || env.status_of_opt(5).is_some());
    assert_eq!(env.status_of(5).as_deref(), Some("ok"));
    sched.stop();
}

/// `add` from a shell with its own `PATH` (a conda environment's `bin`
/// first) and variables: the job runs with that shell's environment, not
/// the scheduler's, as pueue does; `--no-env` keeps the scheduler's; a
/// saved environment that is gone fails its job saying so.
#[test]
fn add_runs_the_job_with_the_callers_environment() {
    let env = Env::new("");
    let conda_bin = env.path("conda/envs/exp/bin");
    std::fs::create_dir_all(&conda_bin).unwrap();
    let tool = conda_bin.join("mytool");
    common::write_script(&tool, "#!/bin/sh\necho from-conda\n");
    let mut command = env.command(&["--sim", "1", "--poll", "0.1", "--watch"]);
    command.env("FOO", "sched").env("ONLY_SCHED", "1");
    let sched = common::Sched::from_command(command);
    env.wait_for_ticks(1);
    let add = |args: &[&str]| {
        let path = common::path_with(&conda_bin);
        Command::new(bin())
            .arg("add")
            .args(args)
            .current_dir(env.dir.path())
            .env("GPUSCHED_LOG_DIR", &env.logs)
            .env("FOO", "caller")
            .env("PATH", path)
            .output()
            .unwrap()
    };
    let script = "echo $FOO ${ONLY_SCHED:-unset} $CUDA_VISIBLE_DEVICES > {f}; mytool >> {f} 2>&1";
    let out = add(&["--shell", &script.replace("{f}", "mine.txt")]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = add(&["--no-env", "--shell", &script.replace("{f}", "theirs.txt")]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    wait_for("both jobs to end", &mut || {
        env.status_of_opt(1).is_some() && env.status_of_opt(2).is_some()
    });
    let read = |f: &str| std::fs::read_to_string(env.path(f)).unwrap();
    assert_eq!(read("mine.txt"), "caller unset 0\nfrom-conda\n");
    assert!(
        read("theirs.txt").starts_with("sched 1 0\n"),
        "{}",
        read("theirs.txt")
    );
    assert!(!read("theirs.txt").contains("from-conda"));
    // The line names the saved environment, kept 0600 in the log directory.
    let lines = std::fs::read_to_string(&env.jobs).unwrap();
    let id = lines
        .split("env=")
        .nth(1)
        .and_then(|rest| rest.get(..16))
        .unwrap_or_else(|| panic!("no env= in {lines}"))
        .to_string();
    assert_eq!(lines.matches("env=").count(), 1, "{lines}");
    let saved = env.logs.join("env").join(format!("{id}.json"));
    let mode = std::fs::metadata(&saved).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    // Gone: the job fails and says why.
    std::fs::remove_file(&saved).unwrap();
    env.append_jobs(&format!("[env={id}] echo never\n"));
    wait_for("job 3 to end", &mut || env.status_of_opt(3).is_some());
    assert_eq!(env.status_of(3).as_deref(), Some("failed"));
    let out = sched.stop();
    assert!(
        out.stdout
            .contains("job 3 not started: cannot read the saved environment"),
        "{}",
        out.stdout
    );
}

/// From another directory, with neither `--log-dir` nor
/// `GPUSCHED_LOG_DIR`, a verb finds the caller's one running scheduler
/// through the ledger's booking files; with two running it names both.
#[test]
fn verbs_find_the_callers_running_scheduler_from_anywhere() {
    let ledger = tempfile::tempdir().unwrap();
    let hold = "[vram=1G name=hold] while [ ! -e release ]; do sleep 0.05; done\n";
    let first = Env::new(hold);
    let start = |env: &Env| {
        let mut cmd = env.command(&["--sim", "1", "--poll", "0.1", "--watch"]);
        cmd.env("GPUSCHED_LEDGER", ledger.path());
        common::Sched::from_command(cmd)
    };
    let sched = start(&first);
    wait_for("the first job to run", &mut || {
        first.board().contains("▶ job 1")
    });
    let elsewhere = tempfile::tempdir().unwrap();
    let status = || {
        Command::new(bin())
            .arg("status")
            .current_dir(elsewhere.path())
            .env_remove("GPUSCHED_LOG_DIR")
            .env("GPUSCHED_LEDGER", ledger.path())
            .output()
            .unwrap()
    };
    let out = status();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stderr).contains(&format!("using {}", first.logs.display())),
        "{out:?}"
    );
    assert!(text(&out.stdout).contains("hold"), "{out:?}");
    // A second scheduler of the same user: the verb names both.
    let second = Env::new(hold);
    let other = start(&second);
    wait_for("the second job to run", &mut || {
        second.board().contains("▶ job 1")
    });
    let out = status();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let said = text(&out.stderr);
    assert!(
        said.contains("you run 2 schedulers")
            && said.contains(&first.logs.display().to_string())
            && said.contains(&second.logs.display().to_string()),
        "{said}"
    );
    for env in [&first, &second] {
        std::fs::write(env.path("release"), "").unwrap();
    }
    sched.stop();
    other.stop();
}

/// Under `--sim`, `add` from another directory finds the caller's
/// scheduler through the simulated box's ledger when `GPUSCHED_SIM_DIR`
/// names it (as it does for users who share a simulated box); without it
/// the verb says what it looked for and adds nothing.
#[test]
fn add_under_sim_finds_the_scheduler_through_the_sim_dir() {
    let sim = tempfile::tempdir().unwrap();
    let ledger = tempfile::tempdir().unwrap();
    let env = Env::new("[vram=1G name=hold] while [ ! -e release ]; do sleep 0.05; done\n");
    let mut cmd = env.command(&["--sim", "1", "--poll", "0.1", "--watch"]);
    cmd.env("GPUSCHED_SIM_DIR", sim.path())
        .env_remove("GPUSCHED_LEDGER");
    let sched = common::Sched::from_command(cmd);
    wait_for("the first job to run", &mut || {
        env.board().contains("▶ job 1")
    });
    let elsewhere = tempfile::tempdir().unwrap();
    let add = |sim_dir: Option<&std::path::Path>| {
        let mut cmd = Command::new(bin());
        cmd.args(["add", "--vram", "1G", "--", "echo", "added from elsewhere"])
            .current_dir(elsewhere.path())
            .env_remove("GPUSCHED_LOG_DIR")
            .env_remove("GPUSCHED_SIM_DIR")
            .env("GPUSCHED_LEDGER", ledger.path())
            .stdin(Stdio::null());
        if let Some(dir) = sim_dir {
            cmd.env("GPUSCHED_SIM_DIR", dir);
        }
        cmd.output().unwrap()
    };
    let out = add(None);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        text(&out.stderr).contains("cannot find the jobs file"),
        "{out:?}"
    );
    let out = add(Some(sim.path()));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stderr).contains(&format!("using {}", env.logs.display())),
        "{out:?}"
    );
    wait_for("the added job to end ok", &mut || {
        env.events("done").iter().any(|e| e["status"] == "ok")
    });
    let jobs = std::fs::read_to_string(&env.jobs).unwrap();
    assert_eq!(jobs.matches("added from elsewhere").count(), 1, "{jobs}");
    std::fs::write(env.path("release"), "").unwrap();
    sched.stop();
}

/// `gpusched cancel 'lr0.1-*'` cancels every job whose name matches the
/// glob, and only those; a glob that matches no name cancels nothing.
#[test]
fn cancel_takes_a_glob_of_names() {
    let hold = "sh -c 'while [ ! -e release ]; do sleep 0.05; done'";
    let env = Env::new(&format!(
        "[vram=1000 name=lr0.1-s1] {hold}\n[vram=1000 name=lr0.1-s2] {hold}\n[vram=1000 name=lr0.01-s1] {hold}\n"
    ));
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("three jobs started", &mut || {
        env.events("started").len() == 3
    });
    let refused = env.verb(&["cancel", "lr9*"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("no line of the jobs file has name lr9*"),
        "{refused:?}"
    );
    let out = env.verb(&["cancel", "lr0.1-*"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    wait_for("jobs 1 and 2 cancelled", &mut || {
        (1..=2).all(|no| env.status_of_opt(no).as_deref() == Some("cancelled"))
    });
    assert_eq!(env.status_of_opt(3), None, "lr0.01-s1 still runs");
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("job 3 to end", &mut || env.status_of_opt(3).is_some());
    assert_eq!(env.status_of(3).as_deref(), Some("ok"));
    sched.stop();
}
