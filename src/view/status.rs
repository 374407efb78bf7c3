//! Machine-readable state (status issue): `<log_dir>/status.json` (schema
//! `docs/status.schema.json`, described in the README) and
//! `<log_dir>/metrics.prom` (Prometheus text exposition format, for
//! node_exporter's textfile collector), both rewritten atomically every
//! round from one [`StatusDoc`]; and the end-of-run summary. The
//! `gpusched status` screen is [`crate::view::screen`].

use crate::model::{DoneStatus, JobState, SchedulerState};
use crate::view::report::{self, human_duration};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The `schema` field of `status.json`; bumped on incompatible changes.
pub const SCHEMA: &str = "gpusched-status/1";

/// Jobs of each kind (waiting, finished) listed in `status.json`; the
/// `counts` object always covers every job.
pub const JSON_LIST_LIMIT: usize = 200;

/// The whole of `status.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusDoc {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// When this document was written (Unix seconds).
    pub updated: f64,
    /// The scheduler process.
    pub scheduler: SchedulerStatus,
    /// Number of jobs per state, over every job of the jobs file.
    pub counts: BTreeMap<String, usize>,
    /// Jobs finished during this scheduler's life, per status (for
    /// Prometheus counters).
    pub finished_this_run: BTreeMap<String, u64>,
    /// Every GPU the scheduler may use, by index.
    pub gpus: Vec<GpuStatus>,
    /// Running jobs, then waiting ones (the first [`JSON_LIST_LIMIT`] in
    /// queue order), then finished ones (the last [`JSON_LIST_LIMIT`]).
    pub jobs: Vec<JobStatus>,
}

/// The scheduler process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerStatus {
    /// Its pid (to tell whether it still runs).
    pub pid: u32,
    /// gpusched version.
    pub version: String,
    /// When it started (Unix seconds).
    pub started: f64,
    /// `--poll` in seconds.
    pub poll_s: f64,
    /// `sim` or `nvml`.
    pub backend: String,
    /// E.g. `2 simulated GPUs of 24000 MiB`.
    pub backend_detail: String,
    /// `running` (dispatching), `draining` (no job left to start; waiting for
    /// running ones), `paused-by-errors` (GPU queries failing), `stopping`
    /// (after Ctrl-C / SIGTERM), `stopped` (ended by a signal) or `finished`
    /// (queue drained, exited).
    pub state: SchedulerState,
    /// Why dispatching is paused by errors, when it is.
    pub paused_reason: Option<String>,
    /// Whether `gpusched pause` holds new dispatch (SPEC §12).
    #[serde(default)]
    pub queue_paused: bool,
    /// GPUs `gpusched drain` closed to new jobs.
    #[serde(default)]
    pub drained: Vec<u32>,
    /// The reservation against starvation in force (SPEC §12), if any.
    #[serde(default)]
    pub reservation: Option<ReservationStatus>,
    /// The jobs file.
    pub jobs_file: String,
    /// The log directory.
    pub log_dir: String,
    /// Whether `--watch` is on.
    pub watch: bool,
}

/// GPUs held for one blocked job (SPEC §12).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReservationStatus {
    /// The job's display number.
    pub job: u32,
    /// The GPU indices held for it.
    pub gpus: Vec<u32>,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuStatus {
    /// NVML index.
    pub index: u32,
    /// UUID.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Total memory (MiB).
    pub total_mib: u64,
    /// Used by anyone (MiB).
    pub used_mib: u64,
    /// Effective external usage (MiB), SPEC §2.
    pub external_mib: u64,
    /// Room for a new declared job, before the margin (MiB), SPEC §2; 0
    /// when the GPU is closed to new jobs.
    pub headroom_mib: u64,
    /// Closed to new jobs: one of our undeclared jobs holds it, or
    /// `--exclusive` and one of our jobs runs on it (SPEC §2, §12).
    #[serde(default)]
    pub closed: bool,
    /// Drained by `gpusched drain`: no new job starts on it (SPEC §12).
    #[serde(default)]
    pub drained: bool,
    /// Device utilization, percent; null when not reported.
    pub util_percent: Option<u32>,
    /// Display numbers of our jobs on it.
    pub jobs: Vec<u32>,
    /// Fraction of this run's samples in which a job of ours was on it.
    pub busy_fraction: Option<f64>,
    /// Mean memory in use over this run's samples (MiB).
    pub mean_used_mib: Option<f64>,
    /// Memory other schedulers on this box booked on it, per user (SPEC
    /// §14); empty without a ledger.
    #[serde(default)]
    pub booked_by_others: Vec<OtherBooking>,
}

impl JobStatus {
    /// What the views print under a waiting or running job: where an
    /// `auto` declaration comes from, and why it waits (SPEC §12, §17).
    pub fn explanation(&self) -> Option<String> {
        match (&self.vram_source, &self.reason) {
            (Some(source), Some(reason)) => Some(format!("{source}; {reason}")),
            (Some(text), None) | (None, Some(text)) => Some(text.clone()),
            (None, None) => None,
        }
    }
}

/// What one other user's scheduler booked on one GPU (SPEC §14).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OtherBooking {
    /// Their user name (or `uid N`).
    pub user: String,
    /// MiB booked, the budgets of their running jobs on this GPU.
    pub mib: u64,
    /// How many of their jobs.
    pub jobs: usize,
}

/// One job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobStatus {
    /// Display number.
    pub no: u32,
    /// Identity key.
    pub key: String,
    /// `running`, `pending`, `retry_wait`, or a terminal status (`ok`,
    /// `failed`, `failed_oom`, `timeout`, `cancelled`, `infeasible`,
    /// `dependency_failed`).
    pub state: JobState,
    /// The command.
    pub command: String,
    /// GPU indices of the current or last attempt (empty if never run).
    pub gpus: Vec<u32>,
    /// GPUs the job asks for (`gpus=`).
    pub gpus_wanted: u32,
    /// Declaration per GPU (MiB) of the current or next attempt.
    pub vram_mib: Option<u64>,
    /// MiB in use now per GPU index (running jobs).
    pub current_mib: BTreeMap<String, u64>,
    /// Peak MiB per GPU index; null where never measured. For finished
    /// jobs, one entry `"max"`.
    pub peak_mib: BTreeMap<String, Option<u64>>,
    /// Attempts started so far.
    pub attempt: u32,
    /// Attempts that ended in a CUDA OOM so far.
    pub oom_attempts: u32,
    /// When queued (first seen), Unix seconds.
    pub queued: Option<f64>,
    /// When its first attempt started.
    pub started: Option<f64>,
    /// When it ended.
    pub finished: Option<f64>,
    /// Exit code, once ended (null if it never ran).
    pub returncode: Option<i32>,
    /// Run time of the current or last attempt, seconds.
    pub duration_s: Option<f64>,
    /// Mean device utilization, percent.
    pub avg_util: Option<f64>,
    /// Its log file.
    pub log: Option<String>,
    /// Progress read from its log (running jobs).
    pub progress: Option<ProgressStatus>,
    /// Extra words: `from a previous scheduler, pgid 123`, `stopping:
    /// timeout`, `attempt 2`.
    pub note: Option<String>,
    /// Why a waiting job waits (SPEC §12), e.g. `needs 14848 MiB on 1 GPU;
    /// most free: GPU 1 9664 MiB`; `null` for other jobs.
    #[serde(default)]
    pub reason: Option<String>,
    /// Run time lost to preemption over all attempts, seconds (SPEC §12);
    /// `null` when never preempted.
    #[serde(default)]
    pub preempted_s: Option<f64>,
    /// For a `vram=auto` job that is waiting or running: where its
    /// declaration comes from, e.g. `auto 6.4G from 5 runs` (SPEC §17).
    #[serde(default)]
    pub vram_source: Option<String>,
}

/// Progress of a running job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressStatus {
    /// 0–100.
    pub percent: f64,
    /// The marker as printed: `450/1000`, `epoch 3/10`, `45%`.
    pub label: String,
    /// Seconds left at the rate observed so far.
    pub eta_s: Option<f64>,
}

impl StatusDoc {
    /// Writes `status.json` and `metrics.prom` into `log_dir`, each
    /// atomically, readable as the umask allows (SPEC §13). Errors: the directory is not writable.
    pub fn write(&self, log_dir: &Path) -> std::io::Result<()> {
        let mut json = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        json.push(b'\n');
        crate::files::write_for_people(&log_dir.join("status.json"), &json)?;
        crate::files::write_for_people(&log_dir.join("metrics.prom"), self.metrics().as_bytes())
    }

    /// The Prometheus text exposition (version 0.0.4): gauges in base units
    /// (bytes, ratios, seconds) and counters of finished jobs.
    pub fn metrics(&self) -> String {
        let mut out = Exposition::default();
        self.scheduler_metrics(&mut out);
        self.gpu_metrics(&mut out);
        self.job_metrics(&mut out);
        out.text
    }

    /// `gpusched_up`, start time, jobs by state, finished counters.
    fn scheduler_metrics(&self, out: &mut Exposition) {
        out.family(
            "gpusched_up",
            "gauge",
            "1 while the scheduler runs, 0 once it has exited.",
            vec![(
                String::new(),
                f64::from(u8::from(!self.scheduler.state.is_final())),
            )],
        );
        out.family(
            "gpusched_start_time_seconds",
            "gauge",
            "Unix time the scheduler started.",
            vec![(String::new(), self.scheduler.started)],
        );
        out.family(
            "gpusched_jobs",
            "gauge",
            "Jobs of the jobs file by state.",
            JOB_STATES
                .iter()
                .map(|s| {
                    (
                        label(&[("state", s.to_string())]),
                        self.counts.get(*s).copied().unwrap_or(0) as f64,
                    )
                })
                .collect(),
        );
        out.family(
            "gpusched_jobs_finished_total",
            "counter",
            "Jobs that ended during this scheduler's life, by status.",
            TERMINAL_STATES
                .iter()
                .map(|s| {
                    (
                        label(&[("status", s.to_string())]),
                        self.finished_this_run.get(*s).copied().unwrap_or(0) as f64,
                    )
                })
                .collect(),
        );
    }

    /// Per-GPU memory, headroom and utilization gauges.
    fn gpu_metrics(&self, out: &mut Exposition) {
        let gpu_labels =
            |g: &GpuStatus| label(&[("gpu", g.index.to_string()), ("uuid", g.uuid.clone())]);
        for (name, help, value) in [
            (
                "gpusched_gpu_memory_total_bytes",
                "Total GPU memory.",
                (|g: &GpuStatus| Some(g.total_mib as f64 * MIB)) as fn(&GpuStatus) -> Option<f64>,
            ),
            (
                "gpusched_gpu_memory_used_bytes",
                "GPU memory in use by anyone.",
                |g| Some(g.used_mib as f64 * MIB),
            ),
            (
                "gpusched_gpu_memory_external_bytes",
                "Effective GPU memory used by processes that are not our jobs.",
                |g| Some(g.external_mib as f64 * MIB),
            ),
            (
                "gpusched_gpu_headroom_bytes",
                "Room for a new declared job, before the margin.",
                |g| Some(g.headroom_mib as f64 * MIB),
            ),
            (
                "gpusched_gpu_utilization_ratio",
                "Device utilization, 0 to 1.",
                |g| g.util_percent.map(|u| f64::from(u) / 100.0),
            ),
        ] {
            out.family(
                name,
                "gauge",
                help,
                self.gpus
                    .iter()
                    .filter_map(|g| Some((gpu_labels(g), value(g)?)))
                    .collect(),
            );
        }
    }

    /// Current and peak memory of running jobs, per GPU.
    fn job_metrics(&self, out: &mut Exposition) {
        let running: Vec<&JobStatus> = self
            .jobs
            .iter()
            .filter(|j| j.state == JobState::Running)
            .collect();
        let job_labels = |j: &JobStatus, gpu: &str| {
            label(&[
                ("job", j.no.to_string()),
                ("key", j.key.clone()),
                ("gpu", gpu.to_string()),
            ])
        };
        out.family(
            "gpusched_job_memory_bytes",
            "gauge",
            "GPU memory a running job uses now, per GPU.",
            running
                .iter()
                .flat_map(|j| {
                    j.current_mib
                        .iter()
                        .map(move |(gpu, mib)| (job_labels(j, gpu), *mib as f64 * MIB))
                })
                .collect(),
        );
        out.family(
            "gpusched_job_memory_peak_bytes",
            "gauge",
            "Highest GPU memory a running job has used, per GPU.",
            running
                .iter()
                .flat_map(|j| {
                    j.peak_mib.iter().filter_map(move |(gpu, mib)| {
                        Some((job_labels(j, gpu), (*mib)? as f64 * MIB))
                    })
                })
                .collect(),
        );
    }
}

/// Bytes per MiB.
const MIB: f64 = 1024.0 * 1024.0;

/// A Prometheus text exposition being written.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    /// One metric family: HELP, TYPE, then one line per (labels, value).
    fn family(&mut self, name: &str, kind: &str, help: &str, samples: Vec<(String, f64)>) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(self.text, "{name}{labels} {value}");
        }
    }
}

/// `{k="v",…}` with Prometheus escaping of `\`, `"` and newlines.
fn label(pairs: &[(&str, String)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| {
            format!(
                "{k}=\"{}\"",
                v.replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n")
            )
        })
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// The terminal states: the words of [`DoneStatus::ALL`].
pub const TERMINAL_STATES: [&str; 7] = {
    let mut words = [""; 7];
    let mut i = 0;
    while i < words.len() {
        words[i] = DoneStatus::ALL[i].as_str();
        i += 1;
    }
    words
};

/// Every state a job can be in, as `counts` keys: the live states, then
/// the terminal ones.
pub const JOB_STATES: [&str; 10] = {
    let mut words = [
        "running",
        "pending",
        "retry_wait",
        "",
        "",
        "",
        "",
        "",
        "",
        "",
    ];
    let mut i = 0;
    while i < TERMINAL_STATES.len() {
        words[3 + i] = TERMINAL_STATES[i];
        i += 1;
    }
    words
};

/// The end-of-run summary: one line per finished job (queue wait, run time,
/// GPU-hours, peak vs declared, mean utilization, status) and one per GPU
/// (busy fraction of the run, mean VRAM occupancy).
pub fn summary(doc: &StatusDoc) -> String {
    summary_within(doc, report::LINE_WIDTH)
}

/// [`summary`] with lines of at most `width` characters.
pub fn summary_within(doc: &StatusDoc, width: usize) -> String {
    let mut out = String::new();
    let finished: Vec<&JobStatus> = doc.jobs.iter().filter(|j| j.state.is_terminal()).collect();
    let mut rows = vec![[
        "JOB".to_string(),
        "STATUS".into(),
        "WAIT".into(),
        "RUN".into(),
        "GPU-H".into(),
        "PEAK/DECLARED".into(),
        "UTIL".into(),
        "COMMAND".into(),
    ]];
    for job in &finished {
        let peak = job.peak_mib.values().copied().max().flatten();
        let gpus = job.gpus.len().max(1) as f64;
        rows.push([
            job.no.to_string(),
            job.state.as_str().to_string(),
            match (job.queued, job.started) {
                (Some(q), Some(s)) => human_duration(s - q),
                _ => "-".into(),
            },
            job.duration_s
                .filter(|_| job.started.is_some())
                .map_or("-".into(), human_duration),
            job.duration_s
                .filter(|_| job.started.is_some())
                .map_or("-".into(), |d| format!("{:.3}", d * gpus / 3600.0)),
            format!(
                "{} / {}",
                peak.map_or("n/a".into(), |p| format!("{p}")),
                job.vram_mib.map_or("-".into(), |v| format!("{v} MiB"))
            ),
            job.avg_util.map_or("-".into(), |u| format!("{u:.0}%")),
            job.command.clone(),
        ]);
    }
    let _ = writeln!(out, "summary of {} finished job(s):", finished.len());
    out.push_str(&table(&rows, width));
    for job in doc.jobs.iter().filter(|j| j.preempted_s.is_some()) {
        let _ = writeln!(
            out,
            "{}",
            report::shorten(
                &format!(
                    "job {} was preempted: {} of run time redone",
                    job.no,
                    human_duration(job.preempted_s.unwrap_or(0.0))
                ),
                width
            )
        );
    }
    let mut gpu_rows = vec![[
        "GPU".to_string(),
        "BUSY".into(),
        "MEAN VRAM".into(),
        "NAME".into(),
    ]];
    for gpu in &doc.gpus {
        gpu_rows.push([
            gpu.index.to_string(),
            gpu.busy_fraction
                .map_or("-".into(), |b| format!("{:.0}%", b * 100.0)),
            gpu.mean_used_mib
                .map_or("-".into(), |m| format!("{m:.0} / {} MiB", gpu.total_mib)),
            gpu.name.clone(),
        ]);
    }
    // On a Slurm cluster there are no GPUs of ours to report.
    if !doc.gpus.is_empty() {
        out.push_str(&table(&gpu_rows, width));
    }
    out
}

/// Left-aligned columns separated by two spaces; the last column (the
/// command) is cut with `…` so every line fits `width` characters.
pub(crate) fn table<const N: usize>(rows: &[[String; N]], width: usize) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let used: usize = widths[..N - 1].iter().map(|w| w + 2).sum();
    let last = width.saturating_sub(used).max(12);
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == N {
                line.push_str(&report::shorten(cell, last));
            } else {
                let _ = write!(line, "{cell:<w$}  ");
            }
        }
        out.push_str(&report::shorten(line.trim_end(), width));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
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
                state: SchedulerState::Finished,
                paused_reason: None,
                queue_paused: false,
                drained: Vec::new(),
                reservation: None,
                jobs_file: "jobs.txt".into(),
                log_dir: "gpusched_logs".into(),
                watch: false,
            },
            counts: BTreeMap::from([("ok".to_string(), 1), ("running".to_string(), 1)]),
            finished_this_run: BTreeMap::from([("ok".to_string(), 1)]),
            gpus: vec![GpuStatus {
                index: 0,
                uuid: "GPU-x".into(),
                name: "Simulated \"GPU\"".into(),
                total_mib: 24000,
                used_mib: 3000,
                external_mib: 0,
                headroom_mib: 20000,
                closed: false,
                drained: false,
                util_percent: Some(50),
                jobs: vec![2],
                busy_fraction: Some(0.5),
                mean_used_mib: Some(1500.0),
                booked_by_others: vec![OtherBooking {
                    user: "bob".into(),
                    mib: 14000,
                    jobs: 1,
                }],
            }],
            jobs: vec![
                JobStatus {
                    no: 1,
                    key: "abc#0".into(),
                    state: JobState::Done(DoneStatus::Ok),
                    command: "python a.py".into(),
                    gpus: vec![0],
                    gpus_wanted: 1,
                    oom_attempts: 0,
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
                },
                JobStatus {
                    no: 2,
                    key: "def#0".into(),
                    state: JobState::Running,
                    command: "python b.py".into(),
                    gpus: vec![0],
                    gpus_wanted: 1,
                    oom_attempts: 0,
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
                },
            ],
        }
    }

    #[test]
    fn metrics_use_base_units_and_escape_labels() {
        let text = sample_doc().metrics();
        assert!(text.contains("# TYPE gpusched_jobs_finished_total counter"));
        assert!(text.contains("gpusched_jobs{state=\"running\"} 1"));
        assert!(
            text.contains("gpusched_gpu_memory_total_bytes{gpu=\"0\",uuid=\"GPU-x\"} 25165824000")
        );
        assert!(text.contains("gpusched_gpu_utilization_ratio{gpu=\"0\",uuid=\"GPU-x\"} 0.5"));
        assert!(
            text.contains(
                "gpusched_job_memory_bytes{job=\"2\",key=\"def#0\",gpu=\"0\"} 3145728000"
            )
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
}
