//! Real Unix users for the tests that need them (sharing a box, box
//! rules): created as root, acted as with `Command::uid`. Without root a
//! test says so and does nothing; with `GPUSCHED_USERS_REQUIRED=1` (set by
//! `.ci/run`) that is a failure.

use super::Env;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A real user of the machine for tests, created if missing; `None` (and
/// a line saying why) without root.
pub fn test_user(name: &str) -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        let why = "skipped: the shared-directory tests need root to create test users";
        assert!(
            std::env::var_os("GPUSCHED_USERS_REQUIRED").is_none(),
            "{why} (GPUSCHED_USERS_REQUIRED is set)"
        );
        eprintln!("{why}");
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
