//! The status board `<log_dir>/status.txt` (docs/BEHAVIOUR.md "Board and terminal"), rendered from one
//! round's status document: a header (version, backend, GPUs, pauses,
//! jobs-file problems, stopping), then running, waiting and finished jobs.

use crate::model::JobState;
use crate::view::report::{self, BoardRow, BoardSection, BoardState};
use crate::view::status::{self, JobStatus, StatusDoc};

/// What the board says besides the document.
#[derive(Debug, Default)]
pub struct BoardNotes {
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

/// The header lines: who, counts, one line per GPU, pauses and problems,
/// each at most [`report::LINE_WIDTH`] characters.
fn header(doc: &StatusDoc, notes: &BoardNotes) -> Vec<String> {
    let width = report::LINE_WIDTH;
    // Inside a Slurm allocation, which of the GPUs are ours gets a line
    // of its own (docs/BEHAVIOUR.md "Inside a Slurm allocation").
    let (backend, allocation) = match doc.scheduler.backend_detail.split_once(" — inside ") {
        Some((backend, rest)) => (backend, Some(format!("inside {rest}"))),
        None => (doc.scheduler.backend_detail.as_str(), None),
    };
    let mut header = vec![
        crate::console::shorten(
            &format!(
                "gpusched {} — {backend} — updated {}",
                env!("CARGO_PKG_VERSION"),
                crate::console::date_time(doc.updated)
            ),
            width,
        ),
        format!(
            "jobs file: {}",
            report::shorten_left(&doc.scheduler.jobs_file, width - 11)
        ),
        counts_line(doc, width),
    ];
    if let Some(allocation) = allocation {
        header.insert(1, crate::console::shorten(&allocation, width));
    }
    for gpu in &doc.gpus {
        header.push(gpu_line(gpu, width));
    }
    header.extend(box_lines(doc, width));
    if let Some(reason) = &doc.scheduler.paused_reason {
        header.extend(wrap(&format!("PAUSED: {reason}"), width));
    }
    header.extend(control_lines(doc, width));
    if let Some(error) = &doc.scheduler.jobs_file_problem {
        header.extend(wrap(&format!("jobs file problem: {error}"), width));
    }
    match notes.stopping_done {
        Some(true) => header
            .push("stopped by a signal: interrupted jobs run again on the next start".to_string()),
        Some(false) => header.push("stopping: waiting for running jobs to exit".to_string()),
        None => {}
    }
    header
}

/// The box rules (docs/BEHAVIOUR.md "Rules for a shared box"): our
/// user's factor, usage and quota use, a table of the box's users, and
/// the personal reservations; nothing without a rules file.
pub fn box_lines(doc: &StatusDoc, width: usize) -> Vec<String> {
    let Some(b) = &doc.box_rules else {
        return Vec::new();
    };
    let factor = |f: Option<f64>| f.map_or_else(|| "-".to_string(), |f| format!("{f:.2}"));
    let limit = |used: String, max: Option<String>| match max {
        Some(max) => format!("{used} of {max}"),
        None => used,
    };
    let mut lines = wrap(&format!("box rules: {}", b.rules_file), width);
    lines.extend(wrap(
        &format!(
            "{}: {}usage {:.1} GiB·h ({:.1} GPU·h)",
            b.user,
            if b.fair_share {
                format!("fair-share factor {}, ", factor(b.factor))
            } else {
                String::new()
            },
            b.usage_mib_s / 1024.0 / 3600.0,
            b.usage_gpu_s / 3600.0
        ),
        width,
    ));
    let q = &b.quota;
    if q.is_limited() {
        lines.extend(wrap(
            &format!(
                "{} quota: {} GPUs, {} MiB, {} running",
                b.user,
                limit(
                    b.quota_use.gpus.to_string(),
                    q.max_gpus.map(|m| m.to_string())
                ),
                limit(
                    b.quota_use.vram_mib.to_string(),
                    q.max_vram_mib.map(|m| m.to_string())
                ),
                limit(
                    b.quota_use.running.to_string(),
                    q.max_running.map(|m| m.to_string())
                ),
            ),
            width,
        ));
    }
    lines.extend(users_table(&b.users));
    for r in &b.reservations {
        lines.extend(wrap(&r.line(), width));
    }
    lines
}

/// The table of a box's users: name, jobs running and waiting, MiB
/// booked, fair-share factor (`-` without fair share), reservations,
/// quota.
pub fn users_table(users: &[status::BoxUser]) -> Vec<String> {
    let row = |cells: [&str; 7]| {
        format!(
            "{:<16} {:>7} {:>7} {:>10} {:>6} {:>8} {}",
            crate::console::shorten(cells[0], 16),
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            cells[5],
            cells[6]
        )
    };
    let mut lines = vec![row([
        "USER",
        "RUNNING",
        "PENDING",
        "BOOKED MIB",
        "FACTOR",
        "RESERVED",
        "QUOTA",
    ])];
    for u in users {
        let factor = u
            .factor
            .map_or_else(|| "-".to_string(), |f| format!("{f:.2}"));
        lines.push(row([
            &u.user,
            &u.running.to_string(),
            &u.pending.to_string(),
            &u.booked_mib.to_string(),
            &factor,
            &u.reservations.to_string(),
            &quota_words(&u.quota),
        ]));
    }
    lines
}

/// A quota in a few characters: `2 GPUs`, `96G`, `8 run`, joined by
/// commas; `-` for no limit.
fn quota_words(q: &crate::rules::quota::Quota) -> String {
    let parts: Vec<String> = [
        q.max_gpus
            .map(|n| format!("{n} GPU{}", if n == 1 { "" } else { "s" })),
        q.max_vram_mib.map(|m| {
            if m % 1024 == 0 {
                format!("{}G", m / 1024)
            } else {
                format!("{m}M")
            }
        }),
        q.max_running.map(|n| format!("{n} run")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        "-".to_string()
    } else {
        parts.join(",")
    }
}

/// What `gpusched pause` and `drain` and the starvation hold hold in
/// force, each wrapped at words to `width` characters.
pub fn control_lines(doc: &StatusDoc, width: usize) -> Vec<String> {
    let mut texts = Vec::new();
    if doc.scheduler.queue_paused {
        texts.push("QUEUE PAUSED: no new job starts until `gpusched resume`".to_string());
    }
    if let Some(hold) = &doc.scheduler.starvation_hold {
        texts.push(format!(
            "starvation hold: GPU {} kept for job {} (it waited --reserve-after blocked)",
            crate::console::gpu_ids(&hold.gpus, ", "),
            hold.job
        ));
    }
    if let Some(head) = &doc.scheduler.backfill {
        texts.push(format!(
            "backfill: job {} expected to start ~{} on GPU {}; later jobs start before it only if they do not delay it",
            head.job,
            crate::console::clock_short(head.start),
            crate::console::gpu_ids(&head.gpus, ", "),
        ));
    }
    if let Some(note) = &doc.scheduler.hidden_processes {
        texts.push(format!("note: {note}"));
    }
    if !doc.scheduler.drained.is_empty() {
        texts.push(format!(
            "drained: GPU {} (`gpusched undrain` opens it again)",
            crate::console::gpu_ids(&doc.scheduler.drained, ", ")
        ));
    }
    // Wrapped at words, never cut: each says something to act on.
    texts.iter().flat_map(|text| wrap(text, width)).collect()
}

/// `jobs: 4 running, 2 pending, 3 ok` — every state with jobs, in the
/// order of [`status::JOB_STATES`]; `jobs: none` for an empty queue.
pub fn counts_line(doc: &StatusDoc, width: usize) -> String {
    let parts: Vec<String> = status::JOB_STATES
        .iter()
        .filter_map(|k| {
            let n = doc.counts.get(*k).copied().unwrap_or(0);
            (n > 0).then(|| format!("{n} {}", k.replace('_', " ")))
        })
        .collect();
    let text = if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join(", ")
    };
    crate::console::shorten(&format!("jobs: {text}"), width)
}

/// `GPU 1: 9000 / 24000 MiB used, external 0 MiB, headroom 14488 MiB, jobs 1,2`
/// with the job list cut to fit, and, when other schedulers booked memory
/// on it, a second line naming them (docs/BEHAVIOUR.md "Sharing a box").
pub fn gpu_line(gpu: &status::GpuStatus, width: usize) -> String {
    let jobs = if gpu.jobs.is_empty() {
        "-".to_string()
    } else {
        crate::console::numbers(&gpu.jobs, ",")
    };
    let name = match &gpu.profile {
        Some(profile) => format!("{} {profile}", crate::model::device_label(gpu.index)),
        None => crate::model::device_label(gpu.index),
    };
    if let Some(fault) = &gpu.fault {
        // Its memory is not known while it does not answer; why it is
        // closed is what matters, on a line of its own so that it is
        // never the part cut off (docs/HARDWARE.md "A sick GPU").
        let opens = if fault.lasting {
            format!("closed until `gpusched undrain {name}`")
        } else {
            format!(
                "opens after {} good samples in a row ({} so far) or `gpusched undrain {name}`",
                fault.reopen_after, fault.good_samples
            )
        };
        let line = format!(
            "GPU {name}: CLOSED since {}, jobs {jobs}; {opens}",
            crate::console::clock(fault.since),
        );
        return format!(
            "{}\n{}",
            crate::console::shorten(&line, width),
            crate::console::shorten(&format!("       {}", fault.reason), width)
        );
    }
    // External memory is others' use now, or their buffered peaks plus
    // what other schedulers booked, whichever is more: more than is in
    // use at all says which it is.
    let external = if gpu.external_mib > gpu.used_mib {
        format!("{} MiB (others' peaks and bookings)", gpu.external_mib)
    } else {
        format!("{} MiB", gpu.external_mib)
    };
    let line = format!(
        "GPU {name}: {} / {} MiB used, external {external}, headroom {} MiB{}, jobs {jobs}",
        gpu.used_mib,
        gpu.total_mib,
        gpu.headroom_mib,
        if gpu.drained {
            " (drained)"
        } else if gpu.closed {
            " (closed)"
        } else {
            ""
        }
    );
    let mut line = crate::console::shorten(&line, width);
    // Processes of finished jobs, each on a line of its own.
    for left in &gpu.left_behind {
        let held = left
            .mib
            .map_or("memory".to_string(), |mib| format!("{mib} MiB"));
        let text = format!(
            "       pid {} of finished job {} still holds {held}: left behind (kill it)",
            left.pid, left.job
        );
        line.push('\n');
        line.push_str(&crate::console::shorten(&text, width));
    }
    if gpu.booked_by_others.is_empty() {
        return line;
    }
    // Others' bookings on a line of their own, so that they are never the
    // part cut off (docs/BEHAVIOUR.md "Sharing a box").
    let others = format!(
        "       booked by other schedulers: {}",
        gpu.booked_by_others
            .iter()
            .map(|b| match b.jobs {
                0 => format!("{} {} MiB (reserved)", b.user, b.mib),
                n => format!(
                    "{} {} MiB ({n} job{})",
                    b.user,
                    b.mib,
                    if n == 1 { "" } else { "s" }
                ),
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    format!("{line}\n{}", crate::console::shorten(&others, width))
}

/// `text` broken at spaces into lines of at most `width` characters
/// (a word longer than that is cut).
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let needed = line.chars().count() + usize::from(!line.is_empty()) + word.chars().count();
        if !line.is_empty() && needed > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
        .into_iter()
        .map(|l| crate::console::shorten(&l, width))
        .collect()
}

/// A board line from a job's status.
fn board_row(job: &JobStatus) -> BoardRow {
    let state = match job.state {
        JobState::Running => BoardState::Running {
            gpus: job.gpus.clone(),
            elapsed_s: job.duration_s.unwrap_or(0.0),
            current_mib: job.current_mib.values().copied().max(),
            peak_mib: job.peak_mib.values().copied().max().flatten(),
            vram_mib: job.vram_mib,
            over: job.exceeded_declaration,
            note: {
                let parts: Vec<String> = [
                    running_note(job).or_else(|| job.vram_source.clone()),
                    job.expected_text(),
                ]
                .into_iter()
                .flatten()
                .collect();
                (!parts.is_empty()).then(|| parts.join("; "))
            },
        },
        JobState::Pending => BoardState::Pending {
            vram_mib: job.vram_mib,
            gpus: job.gpus_wanted,
            reason: job.explanation(),
        },
        JobState::RetryWait => BoardState::RetryWait {
            next_vram_mib: job.vram_mib,
            retries_used: job.retries_used,
        },
        JobState::Done(status) => BoardState::Done {
            status,
            returncode: job.returncode,
            no_gpu_memory: job.no_gpu_memory,
            last_line: job.last_line.clone(),
        },
    };
    BoardRow {
        no: job.no,
        command: job.shown_command(),
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
                crate::console::human_duration(e)
            ))
        )),
        (n, None) => n.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DoneStatus;

    /// The 80-column header cut the backfill line mid-word; it wraps.
    #[test]
    fn control_lines_wrap_at_words_within_the_width() {
        let mut doc = crate::view::status::tests::sample_doc();
        doc.scheduler.queue_paused = true;
        doc.scheduler.backfill = Some(status::BackfillStatus {
            job: 3,
            start: 1_700_000_000.0,
            gpus: vec![0, 1],
        });
        let lines = control_lines(&doc, 80);
        assert!(lines.iter().all(|l| l.chars().count() <= 80), "{lines:?}");
        assert!(!lines.iter().any(|l| l.contains('…')), "{lines:?}");
        let text = lines.join(" ");
        assert!(text.ends_with("only if they do not delay it"), "{text}");
        assert!(text.starts_with("QUEUE PAUSED"), "{text}");
    }

    #[test]
    fn wrapping_keeps_lines_within_the_width() {
        let text = "PAUSED: cannot write journal /a/very/long/path/to/the/log/dir/journal.jsonl: No space left on device (os error 28); no new job starts until the log directory can be written again";
        let lines = wrap(text, 80);
        assert!(lines.len() >= 3, "{lines:?}");
        assert!(lines.iter().all(|l| l.chars().count() <= 80), "{lines:?}");
        assert_eq!(lines.join(" "), text);
        assert_eq!(wrap("", 80), vec![String::new()]);
    }

    #[test]
    fn external_memory_over_what_is_in_use_says_what_it_is() {
        let mut gpu = crate::view::status::tests::sample_doc().gpus.remove(0);
        gpu.external_mib = 2000;
        let line = gpu_line(&gpu, 200);
        assert!(line.contains("external 2000 MiB, headroom"), "{line}");
        // Others' booked memory and peaks, more than the GPU uses now.
        gpu.external_mib = 22280;
        let line = gpu_line(&gpu, 200);
        assert!(
            line.contains("external 22280 MiB (others' peaks and bookings), headroom"),
            "{line}"
        );
    }

    #[test]
    fn done_rows_keep_their_status() {
        let job = JobStatus {
            no: 3,
            key: "k#0".into(),
            state: JobState::Done(DoneStatus::Timeout),
            command: "sleep 9".into(),
            name: None,
            gpus: vec![0],
            gpus_wanted: 1,
            vram_mib: None,
            current_mib: Default::default(),
            peak_mib: Default::default(),
            attempt: 1,
            retries_used: 0,
            exceeded_declaration: false,
            no_gpu_memory: false,
            last_line: None,
            declaration: None,
            queued: None,
            started: None,
            finished: None,
            returncode: Some(143),
            duration_s: None,
            avg_util: None,
            log: None,
            progress: None,
            note: None,
            reason: None,
            preempted_s: None,
            vram_source: None,
            expected_end: None,
            expected_start: None,
            expected_source: None,
        };
        assert_eq!(
            board_row(&job).state,
            BoardState::Done {
                status: DoneStatus::Timeout,
                returncode: Some(143),
                no_gpu_memory: false,
                last_line: None,
            }
        );
    }
}
