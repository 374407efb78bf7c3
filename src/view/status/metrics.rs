//! `<log_dir>/metrics.prom`: the status document as a Prometheus text
//! exposition (version 0.0.4) — gauges in base units (bytes, ratios,
//! seconds) and counters of finished jobs.

use super::{GpuStatus, JOB_STATES, JobStatus, StatusDoc, TERMINAL_STATES};
use crate::model::JobState;
use std::fmt::Write as _;

impl StatusDoc {
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
