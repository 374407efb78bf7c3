//! Unit tests of the status documents.

use super::*;
use crate::view::screen::{Colour, FinishedList, render};
use serde_json::Value;

pub(crate) fn sample_doc() -> StatusDoc {
    StatusDoc {
        schema: SCHEMA.into(),
        updated: 1.7e9,
        scheduler: SchedulerStatus {
            pid: u32::MAX,
            version: "0.1.0".into(),
            started: 1.7e9 - 60.0,
            poll_s: 5.0,
            backend: "sim".into(),
            backend_detail: "1 simulated GPU of 24000 MiB".into(),
            sim_dir: None,
            state: SchedulerState::Finished,
            paused_reason: None,
            jobs_file_problem: None,
            queue_paused: false,
            drained: Vec::new(),
            hidden_processes: None,
            starvation_hold: None,
            backfill: None,
            cwd: None,
            command: Vec::new(),
            jobs_file: "jobs.txt".into(),
            log_dir: "gpusched_logs".into(),
            ticks: 0,
            watch: false,
        },
        counts: BTreeMap::from([("ok".to_string(), 1), ("running".to_string(), 1)]),
        finished_this_run: BTreeMap::from([("ok".to_string(), 1)]),
        gpus: vec![GpuStatus {
            label: "0".into(),
            profile: None,
            index: 0,
            uuid: "GPU-x".into(),
            name: "Simulated \"GPU\"".into(),
            total_mib: 24000,
            used_mib: 3000,
            external_mib: 0,
            headroom_mib: 20000,
            closed: false,
            drained: false,
            fault: None,
            util_percent: Some(50),
            jobs: vec![2],
            busy_fraction: Some(0.5),
            mean_used_mib: Some(1500.0),
            booked_by_others: vec![OtherBooking {
                user: "bob".into(),
                mib: 14000,
                jobs: 1,
            }],
            left_behind: vec![LeftBehind {
                gpu: 0,
                pid: 4242,
                mib: Some(900),
                job: 1,
            }],
            expected_free: None,
            expected_free_source: None,
        }],
        jobs: vec![
            JobStatus {
                no: 1,
                key: "abc#0".into(),
                state: JobState::Done(DoneStatus::Ok),
                command: "python a.py".into(),
                name: None,
                gpus: vec![0],
                gpus_wanted: 1,
                retries_used: 0,
                exceeded_declaration: false,
                no_gpu_memory: false,
                declaration: None,
                last_line: None,
                note: None,
                reason: None,
                preempted_s: None,
                vram_mib: Some(4000),
                current_mib: BTreeMap::new(),
                peak_mib: BTreeMap::from([("max".to_string(), Some(3500))]),
                attempt: 1,
                queued: Some(1.7e9 - 60.0),
                started: Some(1.7e9 - 50.0),
                finished: Some(1.7e9 - 14.0),
                returncode: Some(0),
                duration_s: Some(36.0),
                avg_util: Some(80.0),
                log: Some("gpusched_logs/job001_gpu0.log".into()),
                progress: None,
                vram_source: None,
                expected_end: None,
                expected_start: None,
                expected_source: None,
            },
            JobStatus {
                no: 2,
                key: "def#0".into(),
                state: JobState::Running,
                command: "python b.py".into(),
                name: None,
                gpus: vec![0],
                gpus_wanted: 1,
                retries_used: 0,
                exceeded_declaration: false,
                no_gpu_memory: false,
                declaration: None,
                last_line: None,
                note: None,
                reason: None,
                preempted_s: None,
                vram_mib: Some(4000),
                current_mib: BTreeMap::from([("0".to_string(), 3000)]),
                peak_mib: BTreeMap::from([("0".to_string(), Some(3100))]),
                attempt: 1,
                queued: Some(1.7e9 - 60.0),
                started: Some(1.7e9 - 10.0),
                finished: None,
                returncode: None,
                duration_s: Some(10.0),
                avg_util: None,
                log: None,
                progress: Some(ProgressStatus {
                    percent: 25.0,
                    label: "step 250/1000".into(),
                    eta_s: Some(30.0),
                }),
                vram_source: Some("auto 6.4G from 5 runs".into()),
                expected_end: None,
                expected_start: None,
                expected_source: None,
            },
        ],
        box_rules: None,
        oom_blame: Vec::new(),
    }
}

#[test]
fn metrics_use_base_units_and_escape_labels() {
    let text = sample_doc().metrics();
    assert!(text.contains("# TYPE gpusched_jobs_finished_total counter"));
    assert!(text.contains("gpusched_jobs{state=\"running\"} 1"));
    assert!(text.contains("gpusched_gpu_memory_total_bytes{gpu=\"0\",uuid=\"GPU-x\"} 25165824000"));
    assert!(text.contains("gpusched_gpu_utilization_ratio{gpu=\"0\",uuid=\"GPU-x\"} 0.5"));
    assert!(
        text.contains("gpusched_job_memory_bytes{job=\"2\",key=\"def#0\",gpu=\"0\"} 3145728000")
    );
    assert!(text.contains("gpusched_up 0"));
}

#[test]
fn render_of_a_finished_run_has_the_summary() {
    let text = render(
        &sample_doc(),
        1.7e9 + 5.0,
        Colour::Never,
        80,
        &FinishedList::Latest(10),
    );
    assert!(
        text.contains("no scheduler is running for this log dir"),
        "{text}"
    );
    assert!(text.contains("5.0s ago"), "{text}");
    assert!(text.contains("summary of 1 finished job:"), "{text}");
    // queue wait 10 s, run 36 s, 0.010 GPU-hours, peak 3500 of 4000 MiB.
    assert!(
        text.contains("10s") && text.contains("36s") && text.contains("0.010"),
        "{text}"
    );
    assert!(text.contains("3500 / 4000 MiB"), "{text}");
    assert!(text.contains("25% step 250/1000"), "{text}");
    assert!(text.contains("GPU  BUSY  MEAN VRAM"), "{text}");
    assert!(text.contains("50%   1500 / 24000 MiB"), "{text}");
    assert!(!text.contains('\x1b'), "no colour when not asked");
}

#[test]
fn colour_only_when_asked() {
    let text = render(
        &sample_doc(),
        1.7e9,
        Colour::Always,
        80,
        &FinishedList::Latest(10),
    );
    assert!(text.contains("\x1b["));
}

#[test]
fn every_line_fits_the_width() {
    let mut doc = sample_doc();
    for job in &mut doc.jobs {
        job.command = format!("python train.py {}", "--flag value ".repeat(20));
    }
    doc.scheduler.jobs_file = format!("/{}/jobs.txt", "deep/".repeat(40));
    doc.scheduler.paused_reason = Some("x ".repeat(100));
    for width in [40, 80, 120] {
        let text = render(&doc, 1.7e9, Colour::Never, width, &FinishedList::Latest(10));
        for line in text.lines() {
            assert!(line.chars().count() <= width, "{width}: {line:?}");
        }
        assert!(text.contains('…'), "commands are cut: {text}");
    }
}

/// The schema node `node` stands for: a `$ref` followed into `$defs`, and
/// of a `oneOf` with `null`, the branch for `value`'s type.
fn resolve<'a>(schema: &'a Value, node: &'a Value, value: &Value) -> &'a Value {
    if let Some(path) = node["$ref"].as_str() {
        let name = path.trim_start_matches("#/$defs/");
        return resolve(schema, &schema["$defs"][name], value);
    }
    if let Some(branches) = node["oneOf"].as_array() {
        let wanted = if value.is_object() { "object" } else { "array" };
        if let Some(branch) = branches
            .iter()
            .find(|b| b["type"] == wanted || b.get("$ref").is_some())
        {
            return resolve(schema, branch, value);
        }
    }
    node
}

/// Walks `value` with its schema `node`: every object that allows no
/// other properties has exactly the schema's properties (none missing,
/// none unknown; only what the schema does not require may be left out),
/// recursively; `at` names the place for the message.
fn same_shape(schema: &Value, node: &Value, value: &Value, at: &str, problems: &mut Vec<String>) {
    let node = resolve(schema, node, value);
    match value {
        Value::Object(fields) => {
            if let Some(properties) = node["properties"].as_object()
                && node["additionalProperties"] == Value::Bool(false)
            {
                for key in fields.keys().filter(|k| !properties.contains_key(*k)) {
                    problems.push(format!("{at}.{key} is not in the schema"));
                }
                let required = node["required"].as_array().cloned().unwrap_or_default();
                for key in properties.keys().filter(|k| !fields.contains_key(*k)) {
                    // Only a part the struct leaves out when empty may be
                    // optional in the schema.
                    if required.iter().any(|r| r == key.as_str()) {
                        problems.push(format!(
                            "{at}.{key} is required by the schema, not in the struct"
                        ));
                    }
                }
                for (key, field) in fields {
                    if let Some(sub) = properties.get(key) {
                        same_shape(schema, sub, field, &format!("{at}.{key}"), problems);
                    }
                }
            } else if node["additionalProperties"].is_object() {
                for (key, field) in fields {
                    let sub = &node["additionalProperties"];
                    same_shape(schema, sub, field, &format!("{at}.{key}"), problems);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                same_shape(
                    schema,
                    &node["items"],
                    item,
                    &format!("{at}[{i}]"),
                    problems,
                );
            }
        }
        _ => {}
    }
}

/// docs/status.schema.json and [`StatusDoc`] describe the same document:
/// a status document with every optional part filled in has exactly the
/// properties the schema lists, at every level (a field added to one and
/// not the other fails here, not in a user's parser).
#[test]
fn the_schema_and_the_struct_agree() {
    let schema: Value =
        serde_json::from_str(include_str!("../../../docs/status.schema.json")).unwrap();
    let mut doc = sample_doc();
    doc.scheduler.starvation_hold = Some(StarvationHoldStatus {
        job: 3,
        gpus: vec![0],
    });
    doc.scheduler.backfill = Some(BackfillStatus {
        job: 4,
        start: 1.7e9,
        gpus: vec![0],
    });
    for job in &mut doc.jobs {
        job.declaration = Some(crate::model::DeclarationCheck {
            fit: crate::model::Fit::OverDeclared,
            percent: 40,
        });
        job.progress = Some(ProgressStatus {
            percent: 50.0,
            label: "step 5/10".into(),
            eta_s: Some(30.0),
        });
    }
    let value = serde_json::to_value(&doc).unwrap();
    let mut problems = Vec::new();
    same_shape(&schema, &schema, &value, "status.json", &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");
    // The check can fail: a field the schema lacks is named.
    let mut extra = value.clone();
    extra["jobs"][0]["invented"] = Value::Bool(true);
    let mut found = Vec::new();
    same_shape(&schema, &schema, &extra, "status.json", &mut found);
    assert_eq!(found, ["status.json.jobs[0].invented is not in the schema"]);
}
