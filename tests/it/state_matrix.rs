//! The state matrix (docs/ARCHITECTURE.md "Closed sets"): one run leaves
//! a job in every state of `JobState::all()` — the live ones and every
//! way a job can end — and then every reader of a log directory is asked
//! about it: `status` (text and `--json`), `top --once`, `serve` (the API
//! and the page), `report`, `report --all`, the board, the summary, the
//! timeline, `metrics.prom`, `--notify` posts, MCP's `status` tool and
//! `wait`. Each must succeed and name each job's state. The jobs come
//! from an exhaustive `match` over the states, so a new state does not
//! compile here until it has a job, and then meets every reader.

use crate::box_view::{free_port, get, serve, wait_up};
use crate::common::{self, Env, bin, wait_for};
use crate::notify::Server;
use gpusched::model::{DoneStatus, JobState};
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The jobs-file line that leaves its job in `state` on `--sim 2` with
/// 24000 MiB GPUs. Jobs refer to each other by name: `runner` holds
/// 16 GiB of GPU 1 for the whole test, `failer` fails.
fn line_for(state: JobState) -> &'static str {
    match state {
        JobState::Running => "[name=runner vram=16G on=1] sleep 300",
        JobState::Pending => "[after=runner] echo later",
        // Its first attempt fits beside `runner`; the retry asks 25 %
        // more, which does not until `runner` ends.
        JobState::RetryWait => {
            "[vram=6G retries=1 on=1] gpusched simjob --vram 1000 --ramp 0.1 --oom-once retry.marker"
        }
        JobState::Done(status) => match status {
            DoneStatus::Ok => "echo ok",
            DoneStatus::Failed => "[name=failer] sh -c 'exit 3'",
            DoneStatus::FailedOom => {
                "[vram=4000 on=0] gpusched simjob --vram 1000 --ramp 0.1 --oom-once oom.marker"
            }
            DoneStatus::Timeout => "[timeout=1s] sleep 30",
            DoneStatus::Cancelled => "[cancel] echo never",
            DoneStatus::Infeasible => "[on=5] echo never",
            DoneStatus::DependencyFailed => "[after=failer] echo never",
            DoneStatus::ExceededDeclaration => {
                "[vram=2G on=0 enforce=stop] gpusched simjob --vram 8000 --ramp 0.3 --hold 3"
            }
            DoneStatus::HostOom => {
                "[gpus=0 mem=64M] python3 -c \"b = bytearray(200 * 1024 * 1024)\""
            }
        },
    }
}

/// How the board (status.txt) shows a job in `state`: the live states in
/// words for people, the ends by their word.
fn board_word(state: JobState) -> &'static str {
    match state {
        JobState::Running => "▶ job",
        JobState::Pending => "pending",
        JobState::RetryWait => "retry after OOM",
        JobState::Done(status) => status.as_str(),
    }
}

/// Whether this machine can produce `state` for real (a host OOM needs a
/// cgroup memory controller gpusched may use, as root).
fn producible(state: JobState) -> bool {
    match state {
        JobState::Done(DoneStatus::HostOom) => crate::containment::v1_with(&["memory"]),
        _ => true,
    }
}

/// The state word of every job in status.json, by job number.
fn states(env: &Env) -> Vec<(u64, String)> {
    let Ok(text) = std::fs::read_to_string(env.logs.join("status.json")) else {
        return Vec::new();
    };
    let Ok(doc) = serde_json::from_str::<Value>(&text) else {
        return Vec::new();
    };
    doc["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| {
            (
                j["no"].as_u64().unwrap_or(0),
                j["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Asks `gpusched mcp` for its `status` tool over stdio (JSON-RPC lines,
/// as an MCP client speaks it); the tool's result text.
fn mcp_status(env: &Env) -> String {
    let mut child = Command::new(bin())
        .args(["mcp", "--log-dir"])
        .arg(&env.logs)
        .current_dir(env.dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for message in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"matrix","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"status","arguments":{}}}"#,
    ] {
        writeln!(stdin, "{message}").unwrap();
    }
    // Read until the answer to the call, then hang up.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if serde_json::from_str::<Value>(&line).is_ok_and(|v| v["id"] == 2) {
                let _ = tx.send(line);
                return;
            }
        }
    });
    let answer = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("gpusched mcp answered the status call");
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    answer
}

/// Asserts that `text` names every state of `words`, saying which reader
/// forgot which.
fn names_all(reader: &str, text: &str, words: &[&str]) {
    let missing: Vec<&&str> = words.iter().filter(|w| !text.contains(**w)).collect();
    assert!(
        missing.is_empty(),
        "{reader} does not name {missing:?}:\n{text}"
    );
}

#[test]
fn every_state_meets_every_reader() {
    let states_wanted: Vec<JobState> = JobState::all().filter(|&s| producible(s)).collect();
    let jobs: String = states_wanted
        .iter()
        .map(|&s| format!("{}\n", line_for(s)))
        .collect();
    let env = Env::new(&jobs);
    let hooks = Server::start(Duration::ZERO);
    let sched = env.spawn(&[
        "--sim",
        "2",
        "--poll",
        "0.1",
        "--notify",
        &hooks.url,
        "--notify-on",
        "all",
    ]);
    let expected: Vec<(u64, String)> = states_wanted
        .iter()
        .enumerate()
        .map(|(i, s)| (i as u64 + 1, s.as_str().to_string()))
        .collect();
    wait_for("every job in its state", &mut || {
        let mut now = states(&env);
        now.sort();
        now == expected
    });
    let words: Vec<&str> = states_wanted.iter().map(|s| s.as_str()).collect();
    let terminal: Vec<&str> = states_wanted
        .iter()
        .filter(|s| s.is_terminal())
        .map(|s| s.as_str())
        .collect();

    // `status`, as text (every finished job) and as the document.
    let out = env.verb(&["status", "--all"]);
    assert!(out.status.success(), "status: {out:?}");
    names_all("status", &String::from_utf8_lossy(&out.stdout), &words);
    let out = env.verb(&["status", "--json"]);
    assert!(out.status.success(), "status --json: {out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    common::assert_valid_status(&doc);

    // The board and the metrics the scheduler writes.
    let board_words: Vec<&str> = states_wanted.iter().map(|&s| board_word(s)).collect();
    names_all("status.txt", &env.board(), &board_words);
    let metrics = std::fs::read_to_string(env.logs.join("metrics.prom")).unwrap();
    for word in &words {
        names_all("metrics.prom", &metrics, &[&format!("state=\"{word}\"")]);
    }

    // The box view, once.
    let out = env.verb(&["top", "--once"]);
    assert!(
        out.status.success(),
        "top --once: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("runner"));

    // serve: the API and the page.
    let port = free_port();
    let args: Vec<String> = vec![
        "--log-dir".into(),
        env.logs.display().to_string(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
    ];
    let server = serve(&args, None);
    let bearer = server.bearer();
    let auth = [("authorization", bearer.as_str())];
    wait_up(port, &auth);
    let (code, body) = get(port, "/api/v1/status", &auth);
    assert_eq!(code, 200, "{body}");
    names_all("serve /api/v1/status", &body, &words);
    let (code, body) = get(port, "/", &auth);
    assert_eq!(code, 200, "{body}");
    let (code, body) = get(port, "/api/v1/box", &auth);
    assert_eq!(code, 200, "{body}");
    drop(server);

    // MCP's status tool.
    names_all("mcp status", &mcp_status(&env), &words);

    // The timeline, drawn now.
    let out = env.verb(&["timeline", "-o", "t.svg"]);
    assert!(out.status.success(), "timeline: {out:?}");

    // wait: the finished jobs are named by how they ended.
    let numbers: Vec<String> = expected
        .iter()
        .filter(|(_, w)| terminal.contains(&w.as_str()))
        .map(|(no, _)| no.to_string())
        .collect();
    let mut args: Vec<&str> = vec!["wait"];
    args.extend(numbers.iter().map(String::as_str));
    let out = env.verb(&args);
    assert_eq!(out.status.code(), Some(1), "wait: {out:?}");
    names_all("wait", &String::from_utf8_lossy(&out.stdout), &terminal);

    // Accounts: this directory, and every one the ledger remembers.
    let out = env.verb(&["report"]);
    assert!(out.status.success(), "report: {out:?}");
    let ledger = env.logs.join("sim/ledger");
    let out = Command::new(bin())
        .args(["report", "--all", "--ledger"])
        .arg(&ledger)
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "report --all: {out:?}");

    // --notify posted each ending.
    wait_for("a post per ending", &mut || {
        hooks.of_event("job_ended").len() >= terminal.len()
    });
    let posted: String = hooks
        .of_event("job_ended")
        .iter()
        .map(|b| format!("{}\n", b["job"]["status"]))
        .collect();
    names_all("--notify", &posted, &terminal);

    // The summary the run ends with names the finished ones.
    let out = sched.stop();
    names_all("the summary", &out.stdout, &terminal);
}
