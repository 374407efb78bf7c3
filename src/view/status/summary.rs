//! The end-of-run summary: the status document's finished jobs and GPUs
//! as a table for the terminal.

use super::{JobStatus, StatusDoc};
use crate::console::human_duration;
use crate::view::report;
use std::fmt::Write as _;

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
                "{} / {}{}",
                peak.map_or("n/a".into(), |p| format!("{p}")),
                job.vram_mib.map_or("-".into(), |v| format!("{v} MiB")),
                crate::words::fit_mark(job.declaration)
            ),
            job.avg_util.map_or("-".into(), |u| format!("{u:.0}%")),
            job.shown_command(),
        ]);
    }
    let _ = writeln!(
        out,
        "summary of {}:",
        crate::words::count(finished.len(), "finished job")
    );
    out.push_str(&table(&rows, width));
    out.push_str(&notes(doc, &finished, width));
    let mut gpu_rows = vec![[
        "GPU".to_string(),
        "BUSY".into(),
        "MEAN VRAM".into(),
        "NAME".into(),
    ]];
    for gpu in &doc.gpus {
        gpu_rows.push([
            crate::model::device_label(gpu.index),
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

/// The lines under the jobs table: preempted jobs, jobs that probably ran
/// on the CPU, and who caused whose OOM.
fn notes(doc: &StatusDoc, finished: &[&JobStatus], width: usize) -> String {
    let mut out = String::new();
    for job in doc.jobs.iter().filter(|j| j.preempted_s.is_some()) {
        let _ = writeln!(
            out,
            "{}",
            crate::console::shorten(
                &format!(
                    "job {} was preempted: {} of run time redone",
                    job.no,
                    human_duration(job.preempted_s.unwrap_or(0.0))
                ),
                width
            )
        );
    }
    for job in finished.iter().filter(|j| j.no_gpu_memory) {
        let _ = writeln!(
            out,
            "{}",
            crate::console::shorten(&format!("job {}: {}", job.no, report::NO_GPU_MEMORY), width)
        );
    }
    // Who caused whose OOM (docs/BEHAVIOUR.md "Declarations that hold").
    for blame in &doc.oom_blame {
        let _ = writeln!(
            out,
            "{}",
            crate::console::shorten(
                &format!(
                    "OOM of job {} caused by job {}: {} MiB on a {} MiB declaration (+{:.0}%)",
                    blame.victim,
                    blame.culprit,
                    blame.peak_mib,
                    blame.declared_mib,
                    (blame.peak_mib as f64 / blame.declared_mib.max(1) as f64 - 1.0) * 100.0
                ),
                width
            )
        );
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
                line.push_str(&crate::console::shorten(cell, last));
            } else {
                let _ = write!(line, "{cell:<w$}  ");
            }
        }
        out.push_str(&crate::console::shorten(line.trim_end(), width));
        out.push('\n');
    }
    out
}
