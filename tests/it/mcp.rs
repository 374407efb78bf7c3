//! `gpusched mcp` (docs/BEHAVIOUR.md "Agents") driven by a real MCP client:
//! the official Python SDK (`mcp` from PyPI, in a virtual environment the
//! test makes once under the target directory) runs
//! `tests/mcp/client.py`, an agent-style session — list the tools, add a
//! job that a running scheduler starts, read the status and the log, get
//! a verb's refusal as a tool error. Without Python or PyPI the test says
//! SKIPPED; `.ci/run` sets GPUSCHED_MCP_REQUIRED=1, which makes that a
//! failure.

use crate::common;

use common::{Env, bin};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// The virtual environment with the official MCP SDK, made once; `None`
/// (with SKIPPED) when it cannot be made.
fn python_with_mcp() -> Option<PathBuf> {
    common::python_venv(
        "mcp-venv",
        "import mcp.client.stdio",
        "mcp>=2,<3",
        "GPUSCHED_MCP_REQUIRED",
        "the official MCP Python SDK (PyPI's `mcp`)",
    )
}

#[test]
fn an_agent_adds_a_job_reads_the_status_and_the_log() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let env = Env::new("");
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    let out = Command::new(&python)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py"))
        .arg(bin())
        .arg(&env.logs)
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["server"], "gpusched");
    assert_eq!(
        seen["tools"],
        serde_json::json!(["add_job", "cancel_job", "job_log", "retry_job", "status"])
    );
    assert_eq!(seen["add_error"], false, "{seen:#}");
    assert_eq!(seen["added"]["job"], 1, "{seen:#}");
    assert_eq!(seen["scheduler_running"], true);
    assert_eq!(seen["agent_job"]["state"], "ok", "{seen:#}");
    assert_eq!(seen["log"]["text"], "second line", "{seen:#}");
    assert_eq!(seen["cancel_error"], true);
    assert!(
        seen["cancel_text"]
            .as_str()
            .unwrap()
            .starts_with("no job 99"),
        "{seen:#}"
    );
    // The job went into the jobs file as the CLI would have written it.
    // With the MCP server's environment saved, as `add` saves the caller's.
    assert_eq!(
        common::env_ids_as_id(&std::fs::read_to_string(&env.jobs).unwrap()),
        "[vram=1G name=agent env=ID] echo hello from an agent; echo second line\n"
    );
    sched.stop();
}

/// docs/SECURITY.md: a line that is no JSON is answered -32700, one over
/// 16 MiB -32600 (before, both were dropped without an answer), and the
/// server still answers a proper request afterwards.
#[test]
fn garbage_and_oversized_messages_get_json_rpc_errors() {
    use std::io::{BufRead, BufReader, Write};
    let env = Env::new("");
    std::fs::create_dir_all(&env.logs).unwrap();
    let mut server = Command::new(bin())
        .args(["mcp", "--log-dir"])
        .arg(&env.logs)
        .current_dir(env.dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut to = server.stdin.take().unwrap();
    let mut from = BufReader::new(server.stdout.take().unwrap());
    let mut answer = || {
        let mut line = String::new();
        from.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line).unwrap()
    };
    to.write_all(b"this is no json\n").unwrap();
    let garbage = answer();
    assert_eq!(garbage["error"]["code"], -32700, "{garbage}");
    assert!(garbage["id"].is_null(), "{garbage}");
    let mut huge = br#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":""#.to_vec();
    huge.extend(std::iter::repeat_n(b'a', 17 << 20));
    huge.extend_from_slice(b"\"}}\n");
    to.write_all(&huge).unwrap();
    let oversized = answer();
    assert_eq!(oversized["error"]["code"], -32600, "{oversized}");
    to.write_all(
        br#"{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    )
    .unwrap();
    to.write_all(b"\n").unwrap();
    let initialized = answer();
    assert_eq!(initialized["id"], 7, "{initialized}");
    assert!(
        initialized["result"]["serverInfo"].is_object(),
        "{initialized}"
    );
    drop(to);
    let _ = server.wait();
}
