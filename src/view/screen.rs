//! The `gpusched status` screen (docs/BEHAVIOUR.md "Everyday verbs"): `status.json` rendered for
//! people in a given width — whether the scheduler still runs, the GPUs,
//! running and waiting jobs (with why they wait), then finished ones — and
//! the run's summary once it is over.

use crate::console::{date_time, gpu_ids, human_duration, shorten};
use crate::model::JobState;
use crate::view::report;
use crate::view::status::{JobStatus, StatusDoc, TERMINAL_STATES, summary_within, table};
use std::fmt::Write as _;

/// How `gpusched status` colours its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Colour {
    /// Plain text.
    Never,
    /// ANSI colours.
    Always,
}

fn paint(colour: Colour, code: &str, text: &str) -> String {
    match colour {
        Colour::Never => text.to_string(),
        Colour::Always => format!("\x1b[{code}m{text}\x1b[0m"),
    }
}

/// What `gpusched status` lists of the finished jobs.
#[derive(Debug, Clone)]
pub enum FinishedList {
    /// The latest this many, from status.json.
    Latest(usize),
    /// Every one, from the journal (`--all`): rows of (number, status,
    /// exit code, run time in seconds, command), oldest first.
    All(Vec<FinishedRow>),
}

/// One finished job for `gpusched status --all`.
#[derive(Debug, Clone)]
pub struct FinishedRow {
    /// Display number.
    pub no: u32,
    /// Status word.
    pub status: String,
    /// Exit code.
    pub returncode: Option<i64>,
    /// Run time (seconds).
    pub duration_s: f64,
    /// The command.
    pub command: String,
}

/// For a log directory no scheduler runs: how many of its jobs are not
/// finished, and how to start it again (no lines when none is left).
fn unattended(doc: &StatusDoc, width: usize) -> Vec<String> {
    let left: usize = doc
        .counts
        .iter()
        .filter(|(word, _)| JobState::from_word(word).is_some_and(|s| !s.is_terminal()))
        .map(|(_, n)| n)
        .sum();
    if left == 0 {
        return Vec::new();
    }
    let text = format!(
        "{} not finished and no scheduler to run them: start it again {} (or `systemctl --user start gpusched-NAME` if it is a service)",
        crate::words::count(left, "job"),
        restart_hint(
            &doc.scheduler.jobs_file,
            doc.scheduler.cwd.as_deref(),
            &doc.scheduler.command
        )
    );
    crate::view::board::wrap(&text, width)
}

/// How to start a scheduler again as it was started (docs/BEHAVIOUR.md
/// "Stopping"): `in DIR with `gpusched ARGS…`` from its working
/// directory and the arguments it was started with (status.json keeps
/// both), and, where a URL among them was cut to its host, that it must
/// be given in full again. Without the arguments (a status.json of an
/// earlier version), `with `gpusched JOBS_FILE --watch``.
pub fn restart_hint(jobs_file: &str, cwd: Option<&str>, command: &[String]) -> String {
    if command.is_empty() {
        return format!("with `gpusched {jobs_file} --watch`");
    }
    let quoted: Vec<String> = command
        .iter()
        .map(|a| shlex::try_quote(a).map_or_else(|_| a.clone(), |q| q.into_owned()))
        .collect();
    let mut hint = format!("with `gpusched {}`", quoted.join(" "));
    if let Some(cwd) = cwd {
        hint = format!("in {cwd} {hint}");
    }
    if command.iter().any(|a| a.contains(crate::notifier::CUT)) {
        hint.push_str(", giving the URLs cut to their host here in full");
    }
    hint
}

/// Whether the scheduler runs and how old the data is.
fn first_line(doc: &StatusDoc, now: f64, live: bool) -> String {
    let age = human_duration(now - doc.updated);
    if live {
        format!(
            "scheduler pid {} {} on {}; data from {age} ago",
            doc.scheduler.pid,
            doc.scheduler.state.as_str(),
            doc.scheduler.backend_detail,
        )
    } else {
        format!(
            "no scheduler is running for this log dir (pid {} is gone, last state {}); data from {} ({age} ago)",
            doc.scheduler.pid,
            doc.scheduler.state.as_str(),
            date_time(doc.updated)
        )
    }
}

/// Renders `status.json` for people in lines of at most `width`
/// characters: whether the scheduler still runs and how old the data is,
/// the GPUs, the running and waiting jobs, then the finished ones
/// ([`FinishedList`]); the summary once the run has finished.
pub fn render(
    doc: &StatusDoc,
    now: f64,
    colour: Colour,
    width: usize,
    finished: &FinishedList,
) -> String {
    let mut out = String::new();
    let live = crate::process::is_alive(doc.scheduler.pid) && !doc.scheduler.state.is_final();
    let first = first_line(doc, now, live);
    for (i, line) in crate::view::board::wrap(&first, width)
        .into_iter()
        .enumerate()
    {
        let code = if live { "32" } else { "33" };
        let _ = writeln!(
            out,
            "{}",
            if i == 0 {
                paint(colour, code, &line)
            } else {
                line
            }
        );
    }
    let _ = writeln!(
        out,
        "jobs file: {}",
        report::shorten_left(&doc.scheduler.jobs_file, width.saturating_sub(11))
    );
    if !live {
        for line in unattended(doc, width) {
            let _ = writeln!(out, "{}", paint(colour, "33", &line));
        }
    }
    if let Some(reason) = &doc.scheduler.paused_reason {
        for line in crate::view::board::wrap(&format!("PAUSED: {reason}"), width) {
            let _ = writeln!(out, "{}", paint(colour, "31", &line));
        }
    }
    if let Some(problem) = &doc.scheduler.jobs_file_problem {
        let text = format!("jobs file problem: {problem}");
        for line in crate::view::board::wrap(&text, width) {
            let _ = writeln!(out, "{}", paint(colour, "31", &line));
        }
    }
    for line in crate::view::board::control_lines(doc, width) {
        let _ = writeln!(out, "{}", paint(colour, "33", &line));
    }
    let _ = writeln!(out, "{}", crate::view::board::counts_line(doc, width));
    for gpu in &doc.gpus {
        let _ = writeln!(out, "{}", crate::view::board::gpu_line(gpu, width));
    }
    for line in crate::view::board::box_lines(doc, width) {
        let _ = writeln!(out, "{line}");
    }
    out.push('\n');
    let mut rows = vec![job_header()];
    let active: Vec<&JobStatus> = doc.jobs.iter().filter(|j| !j.state.is_terminal()).collect();
    for job in &active {
        rows.push(job_row(job, now - doc.updated));
    }
    if active.is_empty() {
        out.push_str("nothing running or waiting\n");
    } else {
        // A waiting job's reason goes on a line of its own under it.
        let mut table_text = String::new();
        push_table(&mut table_text, &rows, width, colour);
        for (i, line) in table_text.lines().enumerate() {
            out.push_str(line);
            out.push('\n');
            if let Some(reason) = i.checked_sub(1).and_then(|j| active[j].explanation()) {
                let _ = writeln!(out, "{}", shorten(&format!("     {reason}"), width));
            }
        }
    }
    // Once the run is over the summary lists the finished jobs, unless
    // every one (`--all`) was asked for.
    if live || matches!(finished, FinishedList::All(_)) {
        render_finished(&mut out, doc, finished, width, colour);
    }
    if !live {
        out.push('\n');
        out.push_str(&summary_within(doc, width));
    }
    out
}

/// The column titles of the job table.
fn job_header() -> [String; 9] {
    [
        "JOB", "STATE", "GPUS", "VRAM", "NOW", "PEAK", "ELAPSED", "PROGRESS", "COMMAND",
    ]
    .map(String::from)
}

/// A table with its title row in bold.
fn push_table<const N: usize>(
    out: &mut String,
    rows: &[[String; N]],
    width: usize,
    colour: Colour,
) {
    for (i, line) in table(rows, width).lines().enumerate() {
        let line = if i == 0 {
            paint(colour, "1", line)
        } else {
            line.to_string()
        };
        out.push_str(&line);
        out.push('\n');
    }
}

/// The finished jobs: the latest few from the document, or every one.
fn render_finished(
    out: &mut String,
    doc: &StatusDoc,
    finished: &FinishedList,
    width: usize,
    colour: Colour,
) {
    let total: usize = TERMINAL_STATES
        .iter()
        .map(|s| doc.counts.get(*s).copied().unwrap_or(0))
        .sum();
    let mut rows = vec![["JOB", "STATUS", "EXIT", "RUN", "COMMAND"].map(String::from)];
    let shown = match finished {
        FinishedList::Latest(n) => {
            let mut done: Vec<&JobStatus> =
                doc.jobs.iter().filter(|j| j.state.is_terminal()).collect();
            done.sort_by(|a, b| {
                a.finished
                    .unwrap_or(0.0)
                    .total_cmp(&b.finished.unwrap_or(0.0))
            });
            let skip = done.len().saturating_sub(*n);
            for job in &done[skip..] {
                rows.push([
                    job.no.to_string(),
                    job.state.as_str().to_string(),
                    job.returncode.map_or("-".into(), |c| c.to_string()),
                    job.duration_s
                        .filter(|_| job.started.is_some())
                        .map_or("-".into(), human_duration),
                    job.shown_command(),
                ]);
            }
            done.len() - skip
        }
        FinishedList::All(all) => {
            for job in all {
                rows.push([
                    job.no.to_string(),
                    job.status.clone(),
                    job.returncode.map_or("-".into(), |c| c.to_string()),
                    human_duration(job.duration_s),
                    job.command.clone(),
                ]);
            }
            all.len()
        }
    };
    if shown == 0 {
        return;
    }
    out.push('\n');
    let title = match finished {
        FinishedList::Latest(_) if shown < total => format!(
            "the latest {shown} of {total} finished (`gpusched status --all` lists every one):"
        ),
        _ => format!("{shown} finished:"),
    };
    let _ = writeln!(out, "{}", shorten(&title, width));
    push_table(out, &rows, width, colour);
}

/// One job's row in `gpusched status`; `age_s` is how old the document is,
/// added to a running job's elapsed time.
fn job_row(job: &JobStatus, age_s: f64) -> [String; 9] {
    // Per GPU, like the declaration: the busiest GPU's figures.
    let now_mib = job.current_mib.values().copied().max();
    let peak = job.peak_mib.values().copied().max().flatten();
    let elapsed = match (job.state, job.duration_s) {
        (JobState::Running, Some(d)) => human_duration(d + age_s.max(0.0)),
        (_, Some(d)) if job.started.is_some() => human_duration(d),
        _ => "-".into(),
    };
    let progress = job.progress.as_ref().map_or("-".into(), |p| {
        let eta = p
            .eta_s
            .map_or(String::new(), |e| format!(" ETA {}", human_duration(e)));
        format!("{:.0}% {}{eta}", p.percent, p.label)
    });
    [
        job.no.to_string(),
        job.state.as_str().to_string(),
        if job.gpus.is_empty() {
            "-".into()
        } else {
            gpu_ids(&job.gpus, ",")
        },
        job.vram_mib.map_or("-".into(), |v| format!("{v}")),
        now_mib.map_or("-".into(), |m| m.to_string()),
        peak.map_or(
            if job.state == JobState::Running || job.started.is_some() {
                "n/a".into()
            } else {
                "-".into()
            },
            |p| p.to_string(),
        ),
        elapsed,
        progress,
        job.shown_command(),
    ]
}
