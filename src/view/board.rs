//! The status board `<log_dir>/status.txt` (SPEC §7), rendered from one
//! round's status document: a header (version, backend, GPUs, pauses,
//! jobs-file problems, stopping), then running, waiting and finished jobs.

use crate::model::JobState;
use crate::view::report::{self, BoardRow, BoardSection, BoardState};
use crate::view::status::{self, JobStatus, StatusDoc};

/// What the board says besides the document.
#[derive(Debug, Default)]
pub struct BoardNotes<'a> {
    /// The jobs file's current problem, if any.
    pub jobs_file_problem: Option<&'a str>,
    /// `Some(false)` while stopping with jobs still running, `Some(true)`
    /// once stopped; `None` when no stop was asked for.
    pub stopping_done: Option<bool>,
}

/// The whole board text.
pub fn render(doc: &StatusDoc, notes: &BoardNotes) -> String {
    let header = header(doc, notes);
    let (mut running, mut waiting, mut finished) = (
        BoardSection::default(),
        BoardSection::default(),
        BoardSection::default(),
    );
    for job in &doc.jobs {
        let section = match job.state {
            JobState::Running => &mut running,
            JobState::Pending | JobState::RetryWait => &mut waiting,
            JobState::Done(_) => &mut finished,
        };
        section.rows.push(board_row(job));
    }
    let total = |states: &[&str]| {
        states
            .iter()
            .map(|s| doc.counts.get(*s).copied().unwrap_or(0))
            .sum()
    };
    running.total = total(&[JobState::Running.as_str()]);
    waiting.total = total(&[JobState::Pending.as_str(), JobState::RetryWait.as_str()]);
    finished.total = total(&status::TERMINAL_STATES);
    waiting.rows.truncate(report::BOARD_LIST_LIMIT);
    let skip = finished.rows.len().saturating_sub(report::BOARD_LIST_LIMIT);
    finished.rows.drain(..skip);
    report::render_board(
        &header,
        &[
            ("running", &running),
            ("waiting", &waiting),
            ("finished", &finished),
        ],
    )
}

/// The header lines: who, counts, one line per GPU, pauses and problems.
fn header(doc: &StatusDoc, notes: &BoardNotes) -> Vec<String> {
    let mut header = vec![
        format!(
            "gpusched {} — {} — {} — updated {}",
            env!("CARGO_PKG_VERSION"),
            doc.scheduler.backend_detail,
            doc.scheduler.jobs_file,
            report::date_time(doc.updated)
        ),
        format!(
            "jobs: {}",
            status::JOB_STATES
                .iter()
                .map(|k| format!(
                    "{} {}",
                    doc.counts.get(*k).copied().unwrap_or(0),
                    k.replace('_', " ")
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ];
    for gpu in &doc.gpus {
        header.push(format!(
            "GPU {}: {} / {} MiB used, external {} MiB, {} of our job(s), headroom {} MiB",
            gpu.index,
            gpu.used_mib,
            gpu.total_mib,
            gpu.external_mib,
            gpu.jobs.len(),
            gpu.headroom_mib
        ));
    }
    if let Some(reason) = &doc.scheduler.paused_reason {
        header.push(format!("PAUSED: {reason}"));
    }
    if let Some(error) = notes.jobs_file_problem {
        header.push(format!("jobs file problem: {error}"));
    }
    match notes.stopping_done {
        Some(true) => header
            .push("stopped by a signal: interrupted jobs run again on the next start".to_string()),
        Some(false) => header.push("stopping: waiting for running jobs to exit".to_string()),
        None => {}
    }
    header
}

/// A board line from a job's status.
fn board_row(job: &JobStatus) -> BoardRow {
    let state = match job.state {
        JobState::Running => BoardState::Running {
            gpus: job.gpus.clone(),
            elapsed_s: job.duration_s.unwrap_or(0.0),
            current_mib: (!job.current_mib.is_empty()).then(|| job.current_mib.values().sum()),
            peak_mib: job.peak_mib.values().copied().max().flatten(),
            vram_mib: job.vram_mib,
            note: running_note(job),
        },
        JobState::Pending => BoardState::Pending {
            vram_mib: job.vram_mib,
            gpus: job.gpus_wanted,
        },
        JobState::RetryWait => BoardState::RetryWait {
            next_vram_mib: job.vram_mib,
            oom_attempts: job.oom_attempts,
        },
        JobState::Done(status) => BoardState::Done {
            status,
            returncode: job.returncode,
        },
    };
    BoardRow {
        no: job.no,
        command: job.command.clone(),
        state,
    }
}

/// A running job's note and progress, as one text.
fn running_note(job: &JobStatus) -> Option<String> {
    match (&job.note, &job.progress) {
        (Some(n), Some(p)) => Some(format!("{n}; {:.0}% {}", p.percent, p.label)),
        (None, Some(p)) => Some(format!(
            "{:.0}% {}{}",
            p.percent,
            p.label,
            p.eta_s.map_or(String::new(), |e| format!(
                ", ETA {}",
                report::human_duration(e)
            ))
        )),
        (n, None) => n.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DoneStatus;

    #[test]
    fn done_rows_keep_their_status() {
        let job = JobStatus {
            no: 3,
            key: "k#0".into(),
            state: JobState::Done(DoneStatus::Timeout),
            command: "sleep 9".into(),
            gpus: vec![0],
            gpus_wanted: 1,
            vram_mib: None,
            current_mib: Default::default(),
            peak_mib: Default::default(),
            attempt: 1,
            oom_attempts: 0,
            queued: None,
            started: None,
            finished: None,
            returncode: Some(143),
            duration_s: None,
            avg_util: None,
            log: None,
            progress: None,
            note: None,
        };
        assert_eq!(
            board_row(&job).state,
            BoardState::Done {
                status: DoneStatus::Timeout,
                returncode: Some(143)
            }
        );
    }
}
