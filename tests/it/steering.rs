//! Seeing and steering a queue (status issue): status.json against its
//! documented schema, `gpusched status` on live and dead schedulers,
//! `gpusched add` and `gpusched cancel`, progress from real tqdm-style
//! output, the summary, and metrics.prom through a Prometheus parser.

use crate::common;

use common::{Env, wait_for};
use serde_json::Value;
use std::process::Command;

/// A job that runs until `release` exists in the working directory.
const HOLD: &str = "sh -c 'while [ ! -e release ]; do sleep 0.05; done'";

fn gpusched(env: &Env, args: &[&str]) -> std::process::Output {
    Command::new(common::bin())
        .args(args)
        .current_dir(env.dir.path())
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn status_json(env: &Env) -> Value {
    serde_json::from_str(&std::fs::read_to_string(env.logs.join("status.json")).unwrap()).unwrap()
}

use common::assert_valid_status as assert_valid;

fn job(doc: &Value, no: u64) -> &Value {
    doc["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["no"] == no)
        .unwrap_or_else(|| panic!("no job {no} in {doc:#}"))
}

/// tqdm writes its updates separated by carriage returns.
const TQDM_JOB: &str = "[vram=2G] printf 'train:   0%%|          | 0/1000 [00:00<?, ?it/s]\\rtrain:  45%%|████▌     | 450/1000 [00:10<00:12, 44.50it/s]'; gpusched simjob --vram 1500 --ramp 0.1 --hold 600 & while [ ! -e release ]; do sleep 0.05; done; kill $!";

#[test]
fn status_json_progress_and_status_command_while_running_and_after() {
    let env = Env::new(&format!("{TQDM_JOB}\n[vram=30G] echo never\n"));
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1"]);
    wait_for("progress and memory in status.json", &mut || {
        let Ok(text) = std::fs::read_to_string(env.logs.join("status.json")) else {
            return false;
        };
        let Ok(doc) = serde_json::from_str::<Value>(&text) else {
            return false;
        };
        let first = &doc["jobs"][0];
        first["progress"]["label"] == "450/1000" && first["current_mib"]["0"] == 1500
    });
    let live = status_json(&env);
    assert_valid(&live);
    assert_eq!(live["scheduler"]["state"], "finishing");
    assert_eq!(live["scheduler"]["backend"], "sim");
    let running = job(&live, 1);
    assert_eq!(running["state"], "running");
    assert_eq!(running["progress"]["percent"], 45.0);
    assert_eq!(running["progress"]["label"], "450/1000");
    assert!(running["progress"]["eta_s"].as_f64().is_some());
    assert_eq!(running["current_mib"]["0"], 1500);
    assert_eq!(live["gpus"][0]["jobs"], serde_json::json!([1]));
    assert_eq!(live["counts"]["infeasible"], 1);
    assert!(env.board().contains("45% 450/1000"), "{}", env.board());

    let shown = gpusched(&env, &["status", "--log-dir", "logs"]);
    assert!(shown.status.success());
    let shown = text(&shown.stdout);
    assert!(
        shown.contains(&format!("scheduler pid {} finishing", sched.pid())),
        "{shown}"
    );
    assert!(shown.contains("JOB  STATE"), "{shown}");
    assert!(shown.contains("45% 450/1000"), "{shown}");
    assert!(
        !shown.contains('\x1b'),
        "NO_COLOR and no terminal: no colour"
    );

    std::fs::write(env.path("release"), "").unwrap();
    let out = sched.finish();
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(
        out.stdout.contains("summary of 2 finished jobs:"),
        "{}",
        out.stdout
    );
    let after = status_json(&env);
    assert_valid(&after);
    assert_eq!(after["scheduler"]["state"], "finished");
    assert_eq!(job(&after, 1)["state"], "ok");
    assert_eq!(job(&after, 1)["peak_mib"]["max"], 1500);
    assert_eq!(after["finished_this_run"]["ok"], 1);

    let dead = text(&gpusched(&env, &["status", "--log-dir", "logs"]).stdout);
    assert!(
        dead.contains("no scheduler is running for this log dir"),
        "{dead}"
    );
    assert!(dead.contains("summary of 2 finished jobs:"), "{dead}");
    assert!(dead.contains("1500 / 2048 MiB"), "{dead}");
    let json = gpusched(&env, &["status", "--log-dir", "logs", "--json"]);
    assert_eq!(
        serde_json::from_slice::<Value>(&json.stdout).unwrap(),
        after
    );
}

#[test]
fn status_without_a_scheduler_says_so() {
    let env = Env::new("echo hi\n");
    let out = gpusched(&env, &["status", "--log-dir", "nowhere"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no scheduler has run with --log-dir nowhere"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn add_quotes_arguments_and_the_job_sees_them_exactly() {
    let env = Env::new("echo first"); // no final newline
    let args = [
        "printf", "<%s>\\n", "a b", "it's", "$HOME", "\"q\"", "`x`", "-n",
    ];
    let mut cmd = vec!["add", "--file", "jobs.txt", "--vram", "1G", "--"];
    cmd.extend(args);
    let out = gpusched(&env, &cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let key = text(&out.stdout).trim().to_string();
    let file = std::fs::read_to_string(&env.jobs).unwrap();
    let lines: Vec<&str> = file.lines().collect();
    assert_eq!(
        lines[0], "echo first",
        "a final newline was added before the new line"
    );
    assert!(lines[1].starts_with("[vram=1G] printf"), "{file}");
    assert!(file.ends_with('\n'));
    let parsed = gpusched::jobspec::parse_jobs(&file).unwrap();
    assert_eq!(parsed[1].key, key);

    // A bad value is refused and the file is left alone.
    let bad = gpusched(
        &env,
        &["add", "--file", "jobs.txt", "--vram", "lots", "--", "true"],
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("bad vram value 'lots'"),
        "{}",
        text(&bad.stderr)
    );
    assert_eq!(std::fs::read_to_string(&env.jobs).unwrap(), file);

    env.write_jobs(&file);
    let run = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let log = std::fs::read_to_string(env.logs.join("job002_gpu0.log")).unwrap();
    assert!(
        log.ends_with("<a b>\n<it's>\n<$HOME>\n<\"q\">\n<`x`>\n<-n>\n"),
        "{log}"
    );
}

#[test]
fn add_creates_the_file_and_a_watching_scheduler_runs_the_job() {
    let env = Env::new("");
    let sched = env.spawn(&["--sim", "1", "--poll", "0.2", "--watch"]);
    wait_for("the scheduler", &mut || env.board().contains("jobs:"));
    let out = gpusched(
        &env,
        &[
            "add",
            "--file",
            "jobs.txt",
            "--",
            "sh",
            "-c",
            "echo added > added.txt",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_for("the added job", &mut || env.path("added.txt").exists());
    sched.stop();
}

#[test]
fn cancel_by_number_and_by_key_on_pending_and_running_jobs() {
    let env = Env::new(&format!(
        "[vram=20G] {HOLD}\n[vram=20G] echo never > never.txt\n"
    ));
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("job 1 running, job 2 pending", &mut || {
        env.board().contains("▶ job 1") && env.board().contains("· job 2")
    });
    // The pending one, by number.
    let out = gpusched(
        &env,
        &["cancel", "2", "--file", "jobs.txt", "--log-dir", "logs"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("job 2 cancelled (scheduler pid"),
        "{}",
        text(&out.stdout)
    );
    wait_for("job 2 cancelled", &mut || env.status_of_opt(2).is_some());
    assert_eq!(env.status_of(2).as_deref(), Some("cancelled"));
    // The running one, by a prefix of its key.
    let key = env.key_of(1);
    let out = gpusched(
        &env,
        &[
            "cancel",
            &key[..8],
            "--file",
            "jobs.txt",
            "--log-dir",
            "logs",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_for("job 1 cancelled", &mut || env.status_of_opt(1).is_some());
    assert_eq!(env.status_of(1).as_deref(), Some("cancelled"));
    // The jobs file is never rewritten: the cancels are journal events.
    env.assert_jobs_untouched();
    assert_eq!(env.events("cancel").len(), 2);
    assert!(!env.path("never.txt").exists());
    // Unknown and ambiguous targets are refused.
    let out = gpusched(
        &env,
        &["cancel", "9", "--file", "jobs.txt", "--log-dir", "logs"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no job 9"),
        "{}",
        text(&out.stderr)
    );
    // Retry undoes a cancel, as for any finished job.
    let out = gpusched(&env, &["retry", "2", "--log-dir", "logs"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_for("job 2 ran after its retry", &mut || {
        env.path("never.txt").exists()
    });
    sched.stop();
}

#[test]
fn metrics_are_valid_prometheus_text() {
    let env = Env::new(
        "[vram=4G] gpusched simjob --vram 3000 --ramp 0.1 --hold 600\n[vram=30G] echo never\n",
    );
    let sched = env.spawn(&["--sim", "2", "--poll", "0.1"]);
    wait_for("the job's full memory in metrics.prom", &mut || {
        std::fs::read_to_string(env.logs.join("metrics.prom")).is_ok_and(|t| {
            t.lines().any(|l| {
                l.starts_with("gpusched_job_memory_peak_bytes{") && l.ends_with(" 3145728000")
            })
        })
    });
    let text = std::fs::read_to_string(env.logs.join("metrics.prom")).unwrap();
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let value = |name: &str, label: (&str, &str)| -> f64 {
        let sample = scrape
            .samples
            .iter()
            .find(|s| s.metric == name && s.labels.get(label.0) == Some(label.1))
            .unwrap_or_else(|| panic!("no {name}{{{}={}}} in\n{text}", label.0, label.1));
        match sample.value {
            prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => panic!("unexpected sample type"),
        }
    };
    assert_eq!(value("gpusched_jobs", ("state", "running")), 1.0);
    assert_eq!(
        value("gpusched_jobs_finished_total", ("status", "infeasible")),
        1.0
    );
    assert_eq!(
        value("gpusched_gpu_memory_total_bytes", ("gpu", "1")),
        24000.0 * 1048576.0
    );
    assert_eq!(
        value("gpusched_gpu_memory_used_bytes", ("gpu", "0")),
        3000.0 * 1048576.0
    );
    assert_eq!(
        value("gpusched_job_memory_peak_bytes", ("job", "1")),
        3000.0 * 1048576.0
    );
    // Every family has HELP and TYPE, and the counter is typed as one.
    for name in [
        "gpusched_jobs",
        "gpusched_gpu_headroom_bytes",
        "gpusched_job_memory_bytes",
    ] {
        assert!(scrape.docs.contains_key(name), "no HELP for {name}");
    }
    assert!(text.contains("# TYPE gpusched_jobs_finished_total counter"));
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap();
        assert!(series.starts_with("gpusched_"), "{line}");
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }
    sched.stop();
}

/// docs/BEHAVIOUR.md "Pause and drain": a garbled control.json is said at
/// start (nothing paused or drained), and the first pause or drain that
/// writes it afresh says it is whole again (the previous release said
/// nothing).
#[test]
fn a_garbled_control_file_is_said_and_so_is_its_repair() {
    let env = Env::new("echo one\n");
    std::fs::create_dir_all(&env.logs).unwrap();
    std::fs::write(env.logs.join("control.json"), "{\"paused\": tru").unwrap();
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("the warning", &mut || {
        sched.stdout().contains("is not a control file")
    });
    let out = env.verb(&["pause"]);
    assert!(out.status.success(), "{out:?}");
    wait_for("the repair to be said", &mut || {
        sched
            .stdout()
            .contains("control.json is a control file again")
    });
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(env.logs.join("control.json")).unwrap())
            .unwrap();
    assert_eq!(doc["paused"], true, "{doc}");
    let out = sched.stop();
    assert!(
        out.stdout.matches("is a control file again").count() == 1,
        "{}",
        out.stdout
    );
}
