//! The verb walk (docs/SECURITY.md "Every verb's trust mode"): every
//! subcommand of clap's command tree is run by root against a hostile
//! user's log directory, and by a second user from a world-writable
//! shared folder where the hostile user planted a `gpusched_logs`. The
//! hostile directory holds what a neighbour can plant: a FIFO for
//! status.json, links to `/dev/zero` and to root's files, a status.json
//! naming her own jobs file (mode 666) and a simulation directory whose
//! `ledger` is a link to a directory of root's, an `env/` of mode 777.
//!
//! Each run must end within its deadline (nothing blocks on a FIFO or
//! reads `/dev/zero` forever), and afterwards nothing outside the
//! attacker's own files changed: root's files keep their contents and
//! modes, nothing root's or the second user's is left in her tree, her
//! jobs file holds no line of theirs. A verb that acts in one log
//! directory refuses the second user, naming the owner. A verb the walk
//! does not know fails the test until it is given a line here.

use crate::common::users::users;
use crate::common::{self, bin};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The arguments each verb is run with (its `--log-dir` is added where
/// it takes one); `None` for the internal `simjob`, which only a
/// simulated job runs.
fn sample(verb: &str, scratch: &Path) -> Option<Vec<String>> {
    let words: Vec<String> = match verb {
        "status" => vec!["status".into()],
        "add" => [
            "add",
            "--",
            "curl",
            "-H",
            "Authorization: token s3cret",
            "x",
        ]
        .map(String::from)
        .to_vec(),
        "cancel" | "log" | "retry" | "hold" | "release" => vec![verb.into(), "1".into()],
        "wait" => ["wait", "--timeout", "2"].map(String::from).to_vec(),
        "grid" => ["grid", "echo {a}", "a=1,2"].map(String::from).to_vec(),
        "mcp" | "pause" | "resume" | "stop" | "report" | "unreserve" => vec![verb.into()],
        "drain" | "undrain" => vec![verb.into(), "0".into()],
        "timeline" => vec![
            "timeline".into(),
            "-o".into(),
            scratch.join("t.svg").display().to_string(),
        ],
        "export" => ["export", "--slurm", "jobs.txt"].map(String::from).to_vec(),
        "completions" => ["completions", "bash"].map(String::from).to_vec(),
        "man" => vec!["man".into()],
        "ledger" => ["ledger", "init", "--ledger"]
            .map(String::from)
            .into_iter()
            .chain([scratch.join("ledger").display().to_string()])
            .collect(),
        "service" => ["service", "install", "--print", "jobs.txt"]
            .map(String::from)
            .to_vec(),
        "reserve" => ["reserve", "--for", "1h"].map(String::from).to_vec(),
        "top" => ["top", "--once"].map(String::from).to_vec(),
        "serve" => ["serve", "--listen", "127.0.0.1:0"]
            .map(String::from)
            .to_vec(),
        "doctor" => ["doctor", "--sim", "1"].map(String::from).to_vec(),
        "simjob" => return None,
        other => {
            panic!("gpusched {other} is a verb the walk does not know: give it a line in sample()")
        }
    };
    Some(words)
}

/// Verbs that run until stopped: given a few seconds, then killed.
const LONG_RUNNING: [&str; 1] = ["serve"];

/// How long a verb may take before it counts as hung (generous: a loaded
/// 2-core machine).
const DEADLINE: Duration = Duration::from_secs(60);

/// Runs `cmd` to its end, or kills it past `limit` (a long-running verb
/// after a few seconds); its exit code (`None` when killed) and stderr.
fn run_bounded(mut cmd: Command, verb: &str) -> (Option<i32>, String) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let limit = if LONG_RUNNING.contains(&verb) {
        Duration::from_secs(3)
    } else {
        DEADLINE
    };
    let began = Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if began.elapsed() > limit {
            assert!(
                LONG_RUNNING.contains(&verb),
                "gpusched {verb} hung for {limit:?} on the hostile directory"
            );
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    use std::io::Read;
    let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
    (code, stderr)
}

/// Every path under `dir`, not following links.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

/// What the hostile user prepared, and root's files beside it.
struct Planted {
    /// A world-writable, sticky shared folder (`/tmp`-like).
    shared: tempfile::TempDir,
    /// Root's own directory and file, which must not change.
    root_dir: tempfile::TempDir,
    victim: PathBuf,
    mal: (u32, u32),
}

const VICTIM: &str = "# root's file\n";
const HER_JOBS: &str = "echo hers\n";

impl Planted {
    fn new() -> Option<Planted> {
        let [_, _, mal] = users()?;
        let shared = tempfile::tempdir().unwrap();
        common::users::chmod(shared.path(), 0o1777);
        let root_dir = tempfile::tempdir().unwrap();
        common::users::chmod(root_dir.path(), 0o755);
        let victim = root_dir.path().join("file");
        std::fs::write(&victim, VICTIM).unwrap();
        common::users::chmod(&victim, 0o644);
        let planted = Planted {
            shared,
            root_dir,
            victim,
            mal,
        };
        let script = format!(
            "set -e
             printf '{HER_JOBS}' > jobs.txt; chmod 666 jobs.txt
             mkdir -p gpusched_logs/env sim fifo_logs
             chmod 777 gpusched_logs/env
             ln -s {root} sim/ledger
             printf '{{\"schema\":\"gpusched-status/1\",\"scheduler\":{{\"backend\":\"sim\",\"sim_dir\":\"%s/sim\",\"jobs_file\":\"%s/jobs.txt\",\"cwd\":\"%s\"}},\"gpus\":[]}}' \"$PWD\" \"$PWD\" \"$PWD\" > gpusched_logs/status.json
             ln -s {victim} gpusched_logs/control.json
             ln -s /dev/zero gpusched_logs/journal.jsonl
             mkfifo fifo_logs/status.json
             ln -s /dev/zero fifo_logs/journal.jsonl
             ln -s {victim} fifo_logs/lock",
            root = planted.root_dir.path().display(),
            victim = planted.victim.display(),
        );
        let out = Command::new("sh")
            .args(["-c", &script])
            .current_dir(planted.shared.path())
            .uid(mal.0)
            .gid(mal.1)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        Some(planted)
    }

    fn logs(&self) -> PathBuf {
        self.shared.path().join("gpusched_logs")
    }

    /// Nothing outside her own files changed; `as_her`: the verb acted
    /// as her (root's), so her jobs file is hers to change.
    fn assert_no_harm(&self, what: &str, as_her: bool) {
        assert_eq!(
            std::fs::read_to_string(&self.victim).unwrap(),
            VICTIM,
            "{what}: root's file was written"
        );
        for (path, mode) in [(&self.victim, 0o644), (&self.root_dir.path().into(), 0o755)] {
            assert_eq!(
                std::fs::metadata(path).unwrap().mode() & 0o7777,
                mode,
                "{what}: {} changed mode",
                path.display()
            );
        }
        if !as_her {
            assert_eq!(
                std::fs::read_to_string(self.shared.path().join("jobs.txt")).unwrap(),
                HER_JOBS,
                "{what}: her jobs file got a line"
            );
        }
        for path in walk(self.shared.path()) {
            let meta = std::fs::symlink_metadata(&path).unwrap();
            assert_eq!(
                meta.uid(),
                self.mal.0,
                "{what}: {} is not hers (left by the verb)",
                path.display()
            );
        }
    }
}

/// Every verb, with `--log-dir` where it takes one.
fn verbs() -> Vec<(String, bool)> {
    gpusched::cli::command()
        .get_subcommands()
        .map(|sub| {
            let log_dir = sub.get_arguments().any(|a| a.get_long() == Some("log-dir"));
            (sub.get_name().to_string(), log_dir)
        })
        .collect()
}

#[test]
fn every_verb_run_by_root_on_a_hostile_directory_harms_nothing() {
    let Some(planted) = Planted::new() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    for (verb, takes_log_dir) in verbs() {
        let Some(args) = sample(&verb, scratch.path()) else {
            continue;
        };
        for dir in [planted.logs(), planted.shared.path().join("fifo_logs")] {
            let mut cmd = Command::new(bin());
            cmd.arg(&args[0]);
            if takes_log_dir {
                cmd.arg("--log-dir").arg(&dir);
            }
            cmd.args(&args[1..])
                .current_dir(planted.shared.path())
                .env("XDG_CONFIG_HOME", config.path())
                .env("HOME", config.path())
                .env_remove("GPUSCHED_LEDGER");
            let (code, stderr) = run_bounded(cmd, &verb);
            planted.assert_no_harm(
                &format!(
                    "root's {verb} on {}: exit {code:?}: {stderr}",
                    dir.display()
                ),
                true,
            );
        }
    }
}

#[test]
fn every_verb_run_by_another_user_in_a_shared_folder_harms_nothing() {
    let Some(planted) = Planted::new() else {
        return;
    };
    let [_, bob, _] = users().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    common::users::chown(scratch.path(), bob);
    let mut refused = 0;
    for (verb, takes_log_dir) in verbs() {
        let Some(args) = sample(&verb, scratch.path()) else {
            continue;
        };
        // Bob, in the shared folder, gives no --log-dir: the planted
        // gpusched_logs is what the verbs find.
        let mut cmd = Command::new(bin());
        cmd.args(&args)
            .current_dir(planted.shared.path())
            .env("XDG_CONFIG_HOME", scratch.path())
            .env("HOME", scratch.path())
            .env_remove("GPUSCHED_LEDGER")
            .env_remove("GPUSCHED_LOG_DIR")
            .uid(bob.0)
            .gid(bob.1);
        let (code, stderr) = run_bounded(cmd, &verb);
        planted.assert_no_harm(&format!("bob's {verb}: exit {code:?}: {stderr}"), false);
        let acts_in_log_dir = takes_log_dir
            && !["top", "serve", "report", "reserve", "unreserve"].contains(&verb.as_str());
        if acts_in_log_dir {
            assert_eq!(code, Some(2), "bob's {verb} must refuse: {stderr}");
            assert!(
                stderr.contains("belongs to gpusched-t-mal, not to you (gpusched-t-bob)"),
                "bob's {verb} names the owner: {stderr}"
            );
            refused += 1;
        }
    }
    assert!(refused >= 15, "only {refused} verbs refused");
    // Her env/ directory got nothing of his.
    let env = planted.logs().join("env");
    assert!(
        std::fs::read_dir(&env).unwrap().next().is_none(),
        "nothing saved in her env/"
    );
}
