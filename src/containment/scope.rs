//! A delegated cgroup from systemd for a scheduler started by hand
//! (docs/BEHAVIOUR.md "Containment"): where gpusched finds no cgroup it
//! may use, it runs itself again under `systemd-run --user --scope -p
//! Delegate=yes`, which gives the new scope's cgroup to it — the usual
//! way an unprivileged program gets cgroups of its own on a systemd box.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// Set in the environment of the gpusched that runs in the scope, so that
/// it never asks for another.
pub const IN_SCOPE_VAR: &str = "GPUSCHED_IN_SCOPE";

/// The arguments of `systemd-run` before the command (systemd-run(1)).
pub const SCOPE_ARGS: [&str; 6] = ["--user", "--scope", "-p", "Delegate=yes", "--quiet", "--"];

/// Runs this gpusched again, with the same arguments, in a systemd user
/// scope with `Delegate=yes`, when that can work: not already in one
/// (`GPUSCHED_IN_SCOPE`), not a systemd unit itself (`INVOCATION_ID`,
/// systemd.exec(5): the service unit has `Delegate=yes` of its own), and
/// `systemd-run --user --scope` runs `true` (a user manager answers).
/// Returns only when it does not: why, for the start line, or `None`
/// when it was not tried.
pub fn run_in_a_scope() -> Option<String> {
    if std::env::var_os(IN_SCOPE_VAR).is_some() || std::env::var_os("INVOCATION_ID").is_some() {
        return None;
    }
    let works = Command::new("systemd-run")
        .args(SCOPE_ARGS)
        .arg("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !works {
        return None;
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            return Some(format!(
                "cannot find this program to run it in a systemd scope: {e}"
            ));
        }
    };
    let error = Command::new("systemd-run")
        .args(SCOPE_ARGS)
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .env(IN_SCOPE_VAR, "1")
        .exec();
    Some(format!("cannot run itself under systemd-run: {error}"))
}
