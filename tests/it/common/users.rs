//! Real Unix users for the tests that need them (sharing a box, box
//! rules): created as root, acted as with `Command::uid`. Without root a
//! test says so and does nothing; with `GPUSCHED_USERS_REQUIRED=1` (set by
//! `.ci/run`) that is a failure.

use super::{Env, Sched};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A real user of the machine for tests, created if missing; `None` (and
/// a line saying why) without root.
pub fn test_user(name: &str) -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        let why = "the multi-user tests need root to create test users";
        assert!(
            std::env::var_os("GPUSCHED_USERS_REQUIRED").is_none(),
            "{why} (GPUSCHED_USERS_REQUIRED is set)"
        );
        super::skipped(why);
        return None;
    }
    // Tests run in parallel: another may be adding a user (useradd then
    // cannot lock /etc/passwd for a moment) or have added this one.
    let mut tries = 0;
    while nix::unistd::User::from_name(name).ok().flatten().is_none() {
        let out = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ])
            .output()
            .expect("useradd runs");
        tries += 1;
        assert!(
            out.status.success() || tries < 100,
            "useradd {name}: {out:?}"
        );
        if !out.status.success() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let user = nix::unistd::User::from_name(name).unwrap().unwrap();
    Some((user.uid.as_raw(), user.gid.as_raw()))
}

pub fn chown(path: &Path, (uid, gid): (u32, u32)) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}

pub fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// An Env whose directory other users may enter (the temp dir is 0700).
pub fn open_env(jobs: &str) -> Env {
    let env = Env::new(jobs);
    chmod(env.dir.path(), 0o755);
    env
}

/// A root-owned shared ledger, as `gpusched ledger init` makes it.
pub fn shared_ledger(env: &Env) -> std::path::PathBuf {
    let ledger = env.path("ledger");
    let init = Command::new(super::bin())
        .args(["ledger", "init", "--ledger"])
        .arg(&ledger)
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    ledger
}

/// The root-owned things users share: a rules file, the ledger, the
/// simulated GPUs.
pub struct Box_ {
    pub root: Env,
    pub rules: PathBuf,
    pub ledger: PathBuf,
    pub sim: PathBuf,
}

impl Box_ {
    pub fn new(rules: &str) -> Box_ {
        let root = open_env("");
        let path = root.path("box.toml");
        std::fs::write(&path, rules).unwrap();
        // Set up as the docs say: `ledger init --sim-dir` makes the
        // simulated GPUs' directory and its ledger root's, mode 1777.
        let sim = root.path("gpus");
        let init = Command::new(super::bin())
            .args(["ledger", "init", "--sim-dir"])
            .arg(&sim)
            .output()
            .unwrap();
        assert!(init.status.success(), "{init:?}");
        let ledger = sim.join("ledger");
        Box_ {
            root,
            rules: path,
            ledger,
            sim,
        }
    }

    /// The options that put a scheduler or a verb on this box, with the
    /// rules or without.
    pub fn args(&self, gpus: u32, with_rules: bool) -> Vec<String> {
        let mut args = vec![
            "--sim".to_string(),
            gpus.to_string(),
            "--sim-dir".into(),
            self.sim.display().to_string(),
            "--ledger".into(),
            self.ledger.display().to_string(),
        ];
        if with_rules {
            args.push("--box-rules".into());
            args.push(self.rules.display().to_string());
        }
        args
    }
}

/// The test users, all created before any test acts as one (creating a
/// user rewrites /etc/passwd, and a name looked up meanwhile can fail).
pub fn users() -> Option<[(u32, u32); 3]> {
    static USERS: std::sync::OnceLock<Option<[(u32, u32); 3]>> = std::sync::OnceLock::new();
    *USERS.get_or_init(|| {
        Some([
            test_user("gpusched-t-alice")?,
            test_user("gpusched-t-bob")?,
            test_user("gpusched-t-mal")?,
        ])
    })
}

/// `user`'s own directory with `jobs`, which they own.
pub fn users_env(jobs: &str, user: (u32, u32)) -> Env {
    let env = open_env(jobs);
    chown(env.dir.path(), user);
    env
}

/// `user`'s scheduler on `b`, sampling every half second.
pub fn spawn_as(env: &Env, user: (u32, u32), b: &Box_, gpus: u32, with_rules: bool) -> Sched {
    spawn_polling(env, user, b, gpus, with_rules, "0.5")
}

/// `user`'s scheduler on `b`, sampling every `poll` seconds.
pub fn spawn_polling(
    env: &Env,
    user: (u32, u32),
    b: &Box_,
    gpus: u32,
    with_rules: bool,
    poll: &str,
) -> Sched {
    let mut args: Vec<String> = b.args(gpus, with_rules);
    args.extend(["--poll", poll].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = env.command(&args);
    cmd.uid(user.0).gid(user.1);
    Sched::from_command(cmd)
}
