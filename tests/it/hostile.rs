//! docs/SECURITY.md: a hostile neighbour (the test user `gpusched-t-mal`)
//! prepares their own log directory, then root runs an everyday verb on
//! it. Each test performs one attack and checks that nothing outside the
//! attacker's own files changed and that root's process acted as them.

use crate::common::{self, Env, bin, wait_for};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Mallory's directory with a log directory of theirs, and a root-owned
/// file beside it standing in for root's shell start-up file.
struct Attack {
    env: Env,
    mal: (u32, u32),
    victim: PathBuf,
    _root_dir: tempfile::TempDir,
}

const VICTIM: &str = "# root's ~/.bashrc\n";

impl Attack {
    fn new(jobs: &str) -> Option<Attack> {
        let [_, _, mal] = common::users::users()?;
        let env = common::users::users_env(jobs, mal);
        common::users::chown(&env.jobs, mal);
        std::fs::create_dir(&env.logs).unwrap();
        common::users::chown(&env.logs, mal);
        // Root's own file, somewhere only root may write.
        let root_dir = tempfile::tempdir().unwrap();
        let victim = root_dir.path().join("bashrc");
        std::fs::write(&victim, VICTIM).unwrap();
        common::users::chmod(&victim, 0o644);
        Some(Attack {
            env,
            mal,
            victim,
            _root_dir: root_dir,
        })
    }

    /// Runs `cmd` as mallory, to prepare the attack.
    fn as_mal(&self, script: &str) {
        run_as(self.mal, &self.env.logs, script);
    }

    /// Root's verb on mallory's log directory.
    fn root_verb(&self, args: &[&str]) -> Output {
        self.env.verb(args)
    }

    /// Nothing outside mallory's files changed: root's file is as it was,
    /// and every file in mallory's log directory is mallory's.
    fn assert_no_harm(&self, what: &str) {
        assert_eq!(
            std::fs::read_to_string(&self.victim).unwrap(),
            VICTIM,
            "{what}: root's file was written"
        );
        assert_eq!(
            std::fs::metadata(&self.victim).unwrap().mode() & 0o7777,
            0o644,
            "{what}: root's file changed mode"
        );
        for path in walk(&self.env.logs) {
            let meta = std::fs::symlink_metadata(&path).unwrap();
            assert_eq!(
                meta.uid(),
                self.mal.0,
                "{what}: {} is not mallory's (root left it there)",
                path.display()
            );
        }
    }
}

/// Runs the shell `script` as `user` in `dir`, to prepare an attack; it
/// must succeed.
fn run_as(user: (u32, u32), dir: &Path, script: &str) {
    let out = Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .uid(user.0)
        .gid(user.1)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// Every path under `dir`, not following links.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

/// Finding 1: a journal that is a link to root's start-up file, and a
/// jobs line with `$(…)`: root's `cancel` (or `retry`, `hold`, `release`,
/// `pause`, `drain`) with no scheduler running must not append the line
/// to root's file.
#[test]
fn roots_cancel_never_writes_through_a_planted_journal_link() {
    let Some(attack) = Attack::new("echo $(touch /tmp/gpusched-owned)\n") else {
        return;
    };
    attack.as_mal(&format!(
        "ln -s {} journal.jsonl && printf '{{\"jobs_file\":\"{}\"}}' > status.json",
        attack.victim.display(),
        attack.env.jobs.display()
    ));
    for verb in [
        &["cancel", "1"][..],
        &["retry", "1"],
        &["hold", "1"],
        &["release", "1"],
        &["pause"],
        &["drain", "0"],
    ] {
        let out = attack.root_verb(verb);
        attack.assert_no_harm(&format!("{verb:?}: {out:?}"));
    }
}

/// Finding 2 and 7: root's verbs that write in mallory's directory (the
/// lock, control.json, the journal) make mallory's files, so a swap of a
/// temp file for a link between create and chmod could only ever reach
/// mallory's own files; and mallory's scheduler still starts afterwards
/// (a root-owned lock used to stop it with exit 1).
#[test]
fn roots_verbs_leave_only_the_owners_files_and_the_owners_scheduler_starts() {
    let Some(attack) = Attack::new("echo hi\n") else {
        return;
    };
    for verb in [
        &["pause"][..],
        &["resume"],
        &["drain", "0"],
        &["undrain", "0"],
    ] {
        let out = attack.root_verb(verb);
        assert!(out.status.success(), "{verb:?}: {out:?}");
        attack.assert_no_harm(&format!("{verb:?}"));
    }
    let mut cmd = attack
        .env
        .command(&["--sim", "1", "--poll", "0.1", "--no-ledger"]);
    cmd.uid(attack.mal.0).gid(attack.mal.1);
    let out = common::Sched::from_command(cmd).finish();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
}

/// Finding 3: mallory holds the flock on their own lock file with the pid
/// of a root process written in it; root's `stop` must not signal it.
#[test]
fn roots_stop_signals_only_a_scheduler_that_holds_the_lock() {
    let Some(attack) = Attack::new("echo hi\n") else {
        return;
    };
    let mut bystander = Command::new("sleep").arg("120").spawn().unwrap();
    let lock = attack.env.logs.join("lock");
    let mut holder = Command::new("flock")
        .arg(&lock)
        .args([
            "sh",
            "-c",
            &format!("echo {} > {}; sleep 120", bystander.id(), lock.display()),
        ])
        .uid(attack.mal.0)
        .gid(attack.mal.1)
        .spawn()
        .unwrap();
    wait_for("mallory's lock with root's pid in it", &mut || {
        std::fs::read_to_string(&lock).is_ok_and(|t| t.trim() == bystander.id().to_string())
    });
    let out = attack.root_verb(&["stop", "--timeout", "1"]);
    let alive = bystander.try_wait().unwrap().is_none();
    let _ = holder.kill();
    let _ = holder.wait();
    let _ = bystander.kill();
    let _ = bystander.wait();
    assert!(alive, "root's process was signalled: {out:?}");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no scheduler is running"),
        "{out:?}"
    );
}

/// Root acting on its own log directory through a path another user
/// controls (a link in mallory's directory) is refused: mallory could
/// swap the link between root's check and root's writes.
#[test]
fn root_refuses_its_own_log_dir_under_a_path_another_user_controls() {
    let Some(attack) = Attack::new("echo hi\n") else {
        return;
    };
    // A root-owned log directory inside mallory's directory.
    let inside = attack.env.path("roots-logs");
    std::fs::create_dir(&inside).unwrap();
    let out = Command::new(bin())
        .args(["pause", "--log-dir"])
        .arg(&inside)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("belongs to gpusched-t-mal") && stderr.contains("nothing was changed"),
        "{stderr}"
    );
    assert!(!inside.join("control.json").exists());
}

/// Finding 6: mallory pre-creates booking files under bob's uid for the
/// next two thousand pids in the shared ledger; bob's scheduler must
/// still start, publish and run (before, the rename onto a name mallory
/// owned failed with EPERM and bob's scheduler exited at start).
#[test]
fn names_taken_in_the_ledger_do_not_stop_another_users_scheduler() {
    let Some([_, bob, mal]) = common::users::users() else {
        return;
    };
    let b = common::users::Box_::new("");
    let next: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(1);
    let script = format!(
        "for p in $(seq {} {}); do : > {}/{}.$p.json; done",
        next,
        next + 2000,
        b.ledger.display(),
        bob.0
    );
    run_as(mal, Path::new("/"), &script);
    let env = common::users::users_env("[vram=1000] echo ran\n", bob);
    let sched = common::users::spawn_as(&env, bob, &b, 1, false);
    let out = sched.finish();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(env.status_of(1).as_deref(), Some("ok"), "{}", out.stdout);
}

/// Finding 8 (and the views): escape sequences written in a command reach
/// no terminal raw — neither the scheduler's lines, nor `gpusched
/// status`, nor status.txt.
#[test]
fn escape_sequences_in_a_command_never_reach_a_terminal() {
    let env = Env::new("echo '\u{1b}]0;owned\u{7}\u{1b}[2J' > /dev/null\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("owned"), "{}", out.stdout);
    for (what, text) in [
        ("the scheduler's lines", out.stdout.clone()),
        (
            "gpusched status",
            String::from_utf8_lossy(&env.verb(&["status"]).stdout).into_owned(),
        ),
        (
            "status.txt",
            std::fs::read_to_string(env.logs.join("status.txt")).unwrap(),
        ),
    ] {
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{what}: {text:?}"
        );
    }
}

/// Finding 7: a booking whose log directory holds a FIFO as status.json,
/// and a list of log directories with a link to another user's log
/// directory and a FIFO for a journal. `top --once` and root's `report
/// --all` must finish (they hung on the FIFO) and count bob's journal once
/// (the link counted it twice).
#[test]
fn fifos_and_links_in_others_files_neither_hang_nor_double_count_the_box_views() {
    let Some([_, bob, mal]) = common::users::users() else {
        return;
    };
    let b = common::users::Box_::new("");
    // Bob's finished run: one job in his journal.
    let bob_env = common::users::users_env("[vram=1000] true\n", bob);
    let out = common::users::spawn_as(&bob_env, bob, &b, 1, false).finish();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    // Mallory: a live process of hers backs a booking file naming a log
    // directory whose status.json is a FIFO; her list of log directories
    // names a link to bob's and a directory whose journal is a FIFO.
    let mal_dir = tempfile::tempdir().unwrap();
    common::users::chmod(mal_dir.path(), 0o755);
    common::users::chown(mal_dir.path(), mal);
    let m = mal_dir.path().display().to_string();
    let mut sleeper = Command::new("sleep")
        .arg("120")
        .uid(mal.0)
        .gid(mal.1)
        .spawn()
        .unwrap();
    let ticks = common::start_ticks(sleeper.id());
    let booking = format!(
        r#"{{"version":1,"pid":{},"start_ticks":{ticks},"log_dir":"{m}/logs","bookings":[],"demand":[],"pending":0}}"#,
        sleeper.id()
    );
    let script = format!(
        "set -e; mkdir {m}/logs {m}/other; mkfifo {m}/logs/status.json {m}/other/journal.jsonl; \
         ln -s {bob_logs} {m}/bobs; printf '%s' '{booking}' > {ledger}/{uid}.{pid}.0.json; \
         printf '%s\\n' {bob_logs} {m}/bobs {m}/other > {ledger}/{uid}.logdirs",
        bob_logs = bob_env.logs.display(),
        ledger = b.ledger.display(),
        uid = mal.0,
        pid = sleeper.id(),
    );
    run_as(mal, Path::new("/"), &script);
    let run = |args: &[&str]| {
        let mut child = Command::new(bin())
            .args(args)
            .args(b.args(1, false))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > common::DEADLINE {
                let _ = child.kill();
                panic!("gpusched {args:?} hung on a FIFO");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        child.wait_with_output().unwrap()
    };
    let top = run(&["top", "--once"]);
    assert!(top.status.success(), "{top:?}");
    let report = Command::new(bin())
        .args(["report", "--all", "--ledger"])
        .arg(&b.ledger)
        .output()
        .unwrap();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(report.status.success(), "{report:?}");
    let bob_row = text
        .lines()
        .find(|l| l.starts_with("gpusched-t-bob"))
        .unwrap_or_else(|| panic!("{text}"));
    let jobs: Vec<&str> = bob_row.split_whitespace().collect();
    assert_eq!(
        jobs.get(1),
        Some(&"1"),
        "bob's one job counted once: {text}"
    );
}

/// Root's `add` in a user's log directory saves no environment there: the
/// user would read root's variables (a token in root's shell) in the file
/// `add` saves for its job, and the job would run with root's `PATH`.
#[test]
fn roots_add_keeps_its_environment_out_of_the_users_log_directory() {
    let Some(attack) = Attack::new("") else {
        return;
    };
    // A status.json naming the jobs file, as the user's scheduler writes.
    attack.as_mal(&format!(
        "printf '{{\"scheduler\":{{\"jobs_file\":\"{}\"}}}}' > status.json",
        attack.env.jobs.display()
    ));
    let out = Command::new(bin())
        .args(["add", "--log-dir"])
        .arg(&attack.env.logs)
        .args(["--", "echo", "hi"])
        .current_dir(attack.env.dir.path())
        .env("ROOT_TOKEN", "s3cret")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("root's environment is not saved in another user's log directory"),
        "{out:?}"
    );
    let line = std::fs::read_to_string(&attack.env.jobs).unwrap();
    assert!(!line.contains("env="), "{line}");
    for path in walk(&attack.env.logs) {
        let text = std::fs::read(&path).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&text).contains("s3cret"),
            "root's variable in {}",
            path.display()
        );
    }
    attack.assert_no_harm("add");
}

/// Root's `hold` and `release` in mallory's log directory, with her
/// scheduler running, act as mallory: the request files (and the
/// `requests/` directory) are hers, never root's, and her scheduler says
/// root asked.
#[test]
fn roots_hold_and_release_act_as_the_owner() {
    let Some(attack) = Attack::new(
        "[name=a] sh -c 'while [ ! -e release ]; do sleep 0.05; done'\n[name=b] echo b > b.txt\n",
    ) else {
        return;
    };
    let mut cmd = attack
        .env
        .command(&["--sim", "1", "--poll", "0.1", "--watch", "--no-ledger"]);
    cmd.uid(attack.mal.0).gid(attack.mal.1);
    let sched = common::Sched::from_command(cmd);
    common::wait_for("job 1 to start", &mut || {
        !attack.env.events("started").is_empty()
    });
    for verb in ["hold", "release"] {
        let out = attack.root_verb(&[verb, "b"]);
        assert!(out.status.success(), "{verb}: {out:?}");
        attack.assert_no_harm(verb);
    }
    // The scheduler says each request as it takes it, a moment after the
    // verb returned (seen in a loaded suite run: the release not said yet).
    common::wait_for("both requests said", &mut || {
        sched.stdout().contains("hold of job 2 asked by root")
            && sched.stdout().contains("release of job 2 asked by root")
    });
    run_as(attack.mal, &attack.env.logs, "touch ../release");
    common::wait_for("job 2 to run", &mut || attack.env.path("b.txt").exists());
    sched.stop();
}

/// docs/SECURITY.md "Text for terminals": a jobs file whose name carries
/// terminal escapes (retitle the window, clear the screen), and a log
/// directory named the same way in `report`: `status` and `report` show
/// them as text, never send them (the previous release printed them raw).
#[test]
fn escapes_in_a_jobs_files_name_or_a_log_directorys_never_reach_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let name = "jobs\u{1b}]0;pwned\u{7}\u{1b}[2J.txt";
    std::fs::write(dir.path().join(name), "echo hi\n").unwrap();
    let logs = dir.path().join("logs");
    let out = Command::new(bin())
        .arg(name)
        .arg("--log-dir")
        .arg(&logs)
        .args(["--sim", "1", "--poll", "0.1"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    for verb in [&["status"][..], &["status", "--all"]] {
        let out = Command::new(bin())
            .args(verb)
            .arg("--log-dir")
            .arg(&logs)
            .current_dir(dir.path())
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("jobs"), "{text}");
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{verb:?}: {text:?}"
        );
    }
    // A log directory named with escapes, listed for report: its skipped
    // line shows them as text.
    let odd = dir.path().join("logs\u{1b}[2J");
    let out = Command::new(bin())
        .args(["report", "--log-dir"])
        .arg(&odd)
        .arg("--log-dir")
        .arg(&logs)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("skipped"), "{said}");
    assert!(!said.contains('\u{1b}'), "{said:?}");
    // Only that one: no journal at all, and the error names it as text
    // (the previous release's error printed ESC]0;PWNED BEL ESC[2J raw).
    let titled = dir.path().join("logs\u{1b}]0;PWNED\u{7}\u{1b}[2J");
    std::fs::create_dir(&titled).unwrap();
    let out = Command::new(bin())
        .args(["report", "--log-dir"])
        .arg(&titled)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(said.contains("no journal could be read"), "{said}");
    assert!(said.contains("PWNED"), "{said}");
    assert!(
        !said.contains('\u{1b}') && !said.contains('\u{7}'),
        "{said:?}"
    );
}
