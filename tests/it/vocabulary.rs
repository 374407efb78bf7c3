//! One vocabulary (docs/BEHAVIOUR.md "Words"): a run with a job of each
//! kind — one that exceeded its declaration and went on (`enforce=warn`),
//! one stopped for it (`exceeded_declaration`), one over-declared, one
//! within, one failed, one timed out — and every view of it: the
//! terminal, the board while the first runs, the summary, status.json,
//! `report`, the timeline, the webhook posts, `--help` and the docs. Each
//! says the one word and none says a retired one (`OVER`, `UNDER`,
//! `DECLARED TOO LITTLE`, `declared too much`, `queue drained`, `job(s)`)
//! or `1 GPUs`.

use crate::common;
use crate::notify::Server;

use common::{Env, bin};
use serde_json::Value;
use std::time::Duration;

const JOBS: &str = "\
[vram=2048 enforce=warn name=exceeds] gpusched simjob --vram 5000 --ramp 0.2 --hold 4
[vram=4096 name=over] gpusched simjob --vram 1000 --hold 1
[vram=2048 name=within] gpusched simjob --vram 2000 --hold 1
[vram=2048 enforce=stop name=stopped] gpusched simjob --vram 6000 --ramp 0.2 --hold 6
[name=fails] sh -c 'exit 3'
[timeout=1 name=slow] sleep 30
";

/// `text` says none of the retired words, nor a singular count with a
/// plural noun.
fn assert_one_vocabulary(view: &str, text: &str) {
    let plurals = ["GPUs", "jobs", "attempts", "lines", "retries"].map(|n| format!(" 1 {n}"));
    let wrong = gpusched::words::RETIRED
        .iter()
        .copied()
        .chain(plurals.iter().map(String::as_str));
    for word in wrong {
        if let Some(line) = text.lines().find(|l| l.contains(word)) {
            panic!("{view} says {word:?}: {line}");
        }
    }
}

fn output(args: &[&str], env: &Env) -> String {
    let out = env.verb(args);
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn every_view_uses_the_one_word_for_each_way_a_declaration_misses() {
    let server = Server::start(Duration::ZERO);
    let env = Env::new(JOBS);
    let sched = env.spawn(&[
        "--sim",
        "2",
        "--poll",
        "0.1",
        "--notify",
        &server.url,
        "--notify-on",
        "all",
    ]);
    // While it runs: the board marks the job that exceeded its
    // declaration, and status.json flags it.
    env.wait_for("the board to mark job 1", || {
        env.board().contains("5000 of 2048 MiB EXCEEDED")
    });
    assert_one_vocabulary("the board", &env.board());
    assert_eq!(common::status_field(&env, 1, "exceeded_declaration"), true);
    let out = sched.finish_within(Duration::from_secs(120));
    // The worst exit of its jobs: the timeout's 124 + 19, a SIGTERM.
    assert_ne!(out.code, 0, "{}{}", out.stdout, out.stderr);

    // The terminal: the completion lines' verdicts and the last line.
    let said = &out.stdout;
    for word in [
        "job 1 exceeds declared VRAM",
        "EXCEEDED its declaration by 144% (declared 2048 MiB; raise it)",
        "over-declared by 76% (declared 4096 MiB; lowering it frees room)",
        "declaration 2048 MiB within ±10%",
        "job 4 EXCEEDED its declaration",
        "queue done in ",
        "6 jobs dispatched this run",
    ] {
        assert!(said.contains(word), "the terminal lacks {word:?}:\n{said}");
    }
    assert_one_vocabulary("the terminal", said);

    // The summary, on the terminal (80 columns: the longer mark may be
    // cut) and in `gpusched status --all` on a wide terminal; the board
    // of the ended run.
    assert_one_vocabulary("status.txt", &env.board());
    for word in [
        "summary of 6 finished jobs:",
        "5000 / 2048 MiB EXCEEDED +144%",
    ] {
        assert!(said.contains(word), "the terminal lacks {word:?}:\n{said}");
    }
    let wide = std::process::Command::new(bin())
        .args(["status", "--all", "--log-dir"])
        .arg(&env.logs)
        .env("COLUMNS", "200")
        .output()
        .unwrap();
    let wide = String::from_utf8_lossy(&wide.stdout).into_owned();
    for word in [
        "summary of 6 finished jobs:",
        "5000 / 2048 MiB EXCEEDED +144%",
        "1000 / 4096 MiB over-declared -76%",
    ] {
        assert!(wide.contains(word), "status --all lacks {word:?}:\n{wide}");
    }
    assert_one_vocabulary("gpusched status --all", &wide);

    // status.json: the same checks as machine words.
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(env.logs.join("status.json")).unwrap())
            .unwrap();
    common::assert_valid_status(&doc);
    assert_eq!(doc["scheduler"]["state"], "finished");
    let fit = |no: u64| common::status_field(&env, no, "declaration")["fit"].clone();
    assert_eq!(fit(1), "exceeded");
    assert_eq!(fit(2), "over_declared");
    assert_eq!(fit(3), "within");
    // The journal keeps the words every release reads, so that an older
    // gpusched reading it runs nothing twice.
    assert_eq!(
        env.job_events(1, "done")[0]["declaration"]["fit"],
        "too_small"
    );
    assert_eq!(env.status_of(4).as_deref(), Some("exceeded_declaration"));
    assert_one_vocabulary("status.json", &doc.to_string());

    // `report`, the timeline and `gpusched status` of the ended run.
    assert_one_vocabulary("report", &output(&["report"], &env));
    let svg = std::fs::read_to_string(env.logs.join("timeline.svg")).unwrap();
    assert!(svg.contains("exceeded_declaration"), "{svg}");
    assert!(svg.contains("on 2 GPUs"), "{svg}");
    assert_one_vocabulary("the timeline", &svg);

    // The webhook posts: the stopped job's outcome and the queue done.
    let stopped = server
        .of_event("job_ended")
        .into_iter()
        .find(|b| b["job"]["no"] == 4)
        .expect("job 4's post");
    assert!(
        stopped["text"]
            .as_str()
            .unwrap()
            .contains("exceeded_declaration"),
        "{stopped}"
    );
    let done = server.of_event("drained");
    assert_eq!(done.len(), 1, "{:#?}", server.bodies());
    assert!(
        done[0]["text"].as_str().unwrap().contains("queue done ("),
        "{}",
        done[0]
    );
    for body in server.bodies() {
        assert_one_vocabulary("a webhook post", body["text"].as_str().unwrap());
    }
}

/// `--help` of the program and of every verb, the README and docs/ say
/// none of the retired words.
#[test]
fn help_and_docs_use_the_one_vocabulary() {
    let top = std::process::Command::new(bin())
        .arg("--help")
        .output()
        .unwrap();
    let top = String::from_utf8_lossy(&top.stdout).into_owned();
    assert_one_vocabulary("gpusched --help", &top);
    let verbs: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|v| v != "help")
        .collect();
    assert!(verbs.len() > 10, "{top}");
    for verb in &verbs {
        let out = std::process::Command::new(bin())
            .args([verb, "--help"])
            .output()
            .unwrap();
        assert_one_vocabulary(
            &format!("gpusched {verb} --help"),
            &String::from_utf8_lossy(&out.stdout),
        );
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "md") {
            files.push(entry.path());
        }
    }
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        assert_one_vocabulary(&file.display().to_string(), &text);
    }
}
