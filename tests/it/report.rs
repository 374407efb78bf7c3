//! Accounting (docs/BEHAVIOUR.md "Accounting"): two real users' schedulers
//! run on one box; root's `gpusched report --all` adds up every user's
//! jobs, failures, GPU-hours and VRAM-hours from their journals.

use crate::common;

use common::bin;
use common::users::{Box_, spawn_as, users, users_env};
use serde_json::Value;
use std::process::Command;

#[test]
fn root_reports_every_users_gpu_hours_jobs_and_failures() {
    let Some([alice, bob, _]) = users() else {
        return;
    };
    let b = Box_::new("");
    let a_env = users_env("[vram=2G gpus=2] sleep 0.5\n[vram=1G] false\n", alice);
    let b_env = users_env("[name=bobjob vram=1G] sleep 0.5\n", bob);
    let out = spawn_as(&a_env, alice, &b, 2, false).finish();
    assert_eq!(out.code, 1, "job 2 fails: {}{}", out.stdout, out.stderr);
    let out = spawn_as(&b_env, bob, &b, 2, false).finish();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let report = |args: &[&str]| {
        Command::new(bin())
            .arg("report")
            .args(["--all", "--ledger"])
            .arg(&b.ledger)
            .args(["--log-dir", "/nonexistent-gpusched-logs"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = report(&["--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |user: &str| {
        doc["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["user"] == user)
            .cloned()
            .unwrap_or_else(|| panic!("no row for {user}: {doc:#}"))
    };
    let a = row("gpusched-t-alice");
    assert_eq!(
        (a["jobs"].as_u64(), a["failed"].as_u64()),
        (Some(2), Some(1)),
        "{doc:#}"
    );
    // Two GPUs for at least half a second.
    assert!(
        a["gpu_hours"].as_f64().unwrap() >= 1.0 / 3600.0 * 0.99,
        "{doc:#}"
    );
    assert!(a["vram_gib_hours"].as_f64().unwrap() > 0.0, "{doc:#}");
    let bo = row("gpusched-t-bob");
    assert_eq!(
        (bo["jobs"].as_u64(), bo["failed"].as_u64()),
        (Some(1), Some(0))
    );
    // As a table, and per job name.
    let out = report(&["--by", "name"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text.contains("2 log directories"), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("bobjob"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.starts_with("gpusched-t-bob"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("total")), "{text}");
    // A period that ends before the runs counts nothing.
    let out = report(&["--json", "--until", "2020-01-01"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        doc["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["jobs"] == 0 && r["gpu_hours"] == 0.0),
        "{doc:#}"
    );
    // Nothing readable: a clear error.
    let out = Command::new(bin())
        .args(["report", "--log-dir", "/nonexistent-gpusched-logs"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no journal could be read"),
        "{out:?}"
    );
    // --all with a ledger that remembers nothing: the hint names the fix
    // (--ledger DIR), never "use --all" (what the previous release said).
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(bin())
        .args(["report", "--all", "--ledger"])
        .arg(empty.path().join("ledger"))
        .current_dir(empty.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        said.contains("--ledger DIR") && !said.contains("use --all"),
        "{said}"
    );
}
