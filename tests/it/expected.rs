//! Black-box tests of expected times (docs/BEHAVIOUR.md "Expected
//! times"): a running job's expected end from its timeout, its family's
//! past run time or its progress, the GPU's expected free time, and a
//! waiting job's expected start, in status.json and on the board, each
//! with its source; nothing known stays null.

use crate::common;

use common::{Env, wait_for};
use serde_json::Value;

const HOLD: &str = "while [ ! -e release ]; do sleep 0.05; done";

fn status(env: &Env) -> Value {
    std::fs::read_to_string(env.logs.join("status.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

fn job(doc: &Value, no: u64) -> Value {
    doc["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|j| j["no"] == no).cloned())
        .unwrap_or(Value::Null)
}

fn started_ts(env: &Env, no: u64) -> f64 {
    env.job_events(no, "started")[0]["ts"].as_f64().unwrap()
}

#[test]
fn a_timeout_bounds_the_end_and_sets_the_next_start() {
    // Undeclared: job 2 needs job 1's GPU, which frees by job 1's timeout.
    let env = Env::new(&format!(
        "[timeout=1h] sh -c '{HOLD}'\necho next\necho unknown\n"
    ));
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("job 1's expected end", &mut || {
        job(&status(&env), 1)["expected_source"] == "timeout"
    });
    let doc = status(&env);
    // Whole seconds from the job's start: the journal's `started` stamp
    // and the clock the status is written by may round either side of a
    // half second.
    let end = job(&doc, 1)["expected_end"].as_f64().unwrap_or(f64::NAN);
    assert!(
        (end - (started_ts(&env, 1) + 3600.0)).abs() <= 1.0,
        "{doc:#}"
    );
    assert_eq!(
        job(&doc, 2)["expected_start"].as_f64(),
        Some(end),
        "{doc:#}"
    );
    assert_eq!(job(&doc, 2)["expected_source"], "timeout");
    assert_eq!(doc["gpus"][0]["expected_free"].as_f64(), Some(end));
    assert_eq!(doc["gpus"][0]["expected_free_source"], "timeout");
    // Behind job 2 (which holds the GPU after it, end unknown): nothing.
    assert!(job(&doc, 3)["expected_start"].is_null(), "{doc:#}");
    wait_for("the board to say it", &mut || {
        env.board().contains("ends ~") && env.board().contains("(timeout)")
    });
    // A paused queue starts nothing: no start is predicted; the end is.
    let out = env.verb(&["pause"]);
    assert!(out.status.success(), "{out:?}");
    wait_for("the paused queue to predict no start", &mut || {
        let doc = status(&env);
        job(&doc, 2)["expected_start"].is_null() && job(&doc, 1)["expected_end"].is_number()
    });
    assert!(!env.board().contains("starts ~"), "{}", env.board());
    std::fs::write(env.path("release"), "").unwrap();
    sched.stop();
}

#[test]
fn past_runs_of_the_family_and_progress_give_the_end() {
    // The journal says a run of family `train` took an hour.
    let env = Env::new("[family=train] echo warm-up\n");
    assert_eq!(env.run(&["--sim", "1", "--poll", "0.1"]).code, 0);
    let journal = std::fs::read_to_string(env.logs.join("journal.jsonl")).unwrap();
    let hour = regex_free_duration(&journal, 3600.0);
    std::fs::write(env.logs.join("journal.jsonl"), hour).unwrap();
    env.write_jobs(&format!(
        "[family=train] echo warm-up\n[family=train] sh -c '{HOLD}'\nsh -c 'echo step 1/100; {HOLD}'\n"
    ));
    let sched = env.spawn(&["--sim", "2", "--poll", "0.1", "--watch"]);
    wait_for("both expected ends", &mut || {
        let doc = status(&env);
        job(&doc, 2)["expected_source"] == "history"
            && job(&doc, 3)["expected_source"] == "progress"
    });
    let doc = status(&env);
    let end = (started_ts(&env, 2) + 3600.0).round();
    let got = job(&doc, 2)["expected_end"].as_f64().unwrap();
    assert!((got - end).abs() <= 1.0, "{got} vs {end}");
    std::fs::write(env.path("release"), "").unwrap();
    sched.stop();
}

/// The journal with every `done` of it saying `duration_s` seconds.
fn regex_free_duration(journal: &str, duration_s: f64) -> String {
    journal
        .lines()
        .map(|line| {
            let mut record: Value = serde_json::from_str(line).unwrap();
            if record["event"] == "done" {
                record["duration_s"] = duration_s.into();
            }
            record.to_string() + "\n"
        })
        .collect()
}
