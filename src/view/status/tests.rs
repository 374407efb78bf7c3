//! Unit tests of the status documents.

use super::*;
use crate::view::screen::{Colour, FinishedList, render};

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
                over_declared: false,
                no_gpu_memory: false,
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
                over_declared: false,
                no_gpu_memory: false,
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
    assert!(text.contains("summary of 1 finished job(s):"), "{text}");
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
