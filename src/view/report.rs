//! What the user reads (docs/BEHAVIOUR.md "Monitoring", "Board and terminal"): timestamped terminal lines, the
//! declared-vs-actual verdict of a completion line, and the status board
//! `<log_dir>/status.txt`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// MiB for people: `8000 MiB`, or `n/a` when unknown.
pub fn mib(value: Option<u64>) -> String {
    value.map_or_else(|| "n/a".to_string(), |v| format!("{v} MiB"))
}

/// A job's log file name (docs/BEHAVIOUR.md "Running a job"): `job007_gpu0-1.log`.
pub fn log_name(no: u32, gpus: &[u32]) -> String {
    if gpus.is_empty() {
        // On a Slurm cluster (docs/BEHAVIOUR.md "Slurm") the GPUs are not known at submission.
        return format!("job{no:03}.log");
    }
    format!("job{no:03}_gpu{}.log", crate::console::gpu_ids(gpus, "-"))
}

/// Per-GPU peaks for a completion line: `peak GPU0 7950 MiB, GPU1 n/a`.
pub fn peaks_text(peaks: &BTreeMap<u32, Option<u64>>) -> String {
    let parts: Vec<String> = peaks
        .iter()
        .map(|(gpu, peak)| format!("GPU{gpu} {}", mib(*peak)))
        .collect();
    if parts.is_empty() {
        return "peak not measured".to_string();
    }
    format!("peak {}", parts.join(", "))
}

/// What the completion line of an attempt says (docs/BEHAVIOUR.md "Monitoring").
#[derive(Debug)]
pub struct CompletionLine<'a> {
    /// Display number.
    pub no: u32,
    /// How it ended.
    pub status: crate::model::DoneStatus,
    /// Run time (seconds).
    pub duration_s: f64,
    /// `exit 3`, `killed by SIGKILL`, `exit status unknown`.
    pub exit_text: String,
    /// Peak MiB per GPU index; `None` where never measured.
    pub peaks: &'a BTreeMap<u32, Option<u64>>,
    /// Mean device utilization, percent.
    pub avg_util: Option<f64>,
    /// GPU samples taken while it ran.
    pub samples: u32,
    /// Its declaration per GPU (MiB).
    pub vram_mib: Option<u64>,
    /// What was observed of it, once, at its end.
    pub observed: &'a crate::policy::outcome::Observations,
    /// The MPS memory limit (MiB per GPU) it ran out of memory at, under
    /// `--enforce mps`: said instead of the verdict, which would call a
    /// job stopped at its limit as over-declared.
    pub mps_limit_mib: Option<u64>,
    /// `--tolerance`, for the verdict.
    pub tolerance: f64,
    /// Its log, named when it failed.
    pub log: Option<&'a std::path::Path>,
    /// The limits it asked for that nothing enforced (`mem=`, `cpus=`
    /// with no cgroup to hold them), said at its end as at its start.
    pub unenforced: Option<&'a str>,
}

/// What a completion line, the board and the summary say of a declared
/// job that never showed GPU memory.
pub const NO_GPU_MEMORY: &str = "no GPU memory seen: it probably ran on the CPU";

/// The last line with text that an attempt wrote to its log since byte
/// `from` (gpusched's own header lines left out), its control characters
/// shown as `�` and cut to 120 characters; `None` when there is none.
pub fn last_log_line(path: &std::path::Path, from: u64) -> Option<String> {
    let tail = crate::files::read_tail(path, from, 4096);
    let line = tail
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("==== gpusched:"))?;
    Some(crate::console::shorten(line, 120))
}

/// The completion line (docs/BEHAVIOUR.md "Monitoring"): status, duration, exit, per-GPU peak,
/// mean utilization, then the declared-vs-actual verdict (or what an
/// undeclared job would have needed), and the log of a failed job.
pub fn completion_line(c: &CompletionLine) -> String {
    let mut line = format!(
        "{} job {} {} in {} ({})",
        c.status.mark(),
        c.no,
        c.status.as_str(),
        crate::console::human_duration(c.duration_s),
        c.exit_text,
    );
    // A job on a Slurm cluster ran on no GPU of ours: nothing was measured.
    if !c.peaks.is_empty() {
        let _ = write!(
            line,
            ", {}, util {} ({} GPU sample{})",
            peaks_text(c.peaks),
            c.avg_util.map_or("n/a".to_string(), |u| format!("{u:.0}%")),
            c.samples,
            if c.samples == 1 { "" } else { "s" },
        );
    }
    let peak = c.peaks.values().copied().max().flatten();
    match (c.vram_mib, peak, c.mps_limit_mib) {
        (_, _, Some(limit)) => {
            let _ = write!(
                line,
                " — hit its MPS memory limit of {limit} MiB (its declaration): raise vram="
            );
        }
        (Some(declared), _, None) => {
            if let Some(check) = c.observed.declaration {
                line.push_str(" — ");
                line.push_str(&crate::words::verdict(check, declared, c.tolerance));
            }
        }
        (None, Some(p), None) => {
            let _ = write!(
                line,
                " — undeclared; [vram={}] would fit",
                crate::allocation::buffered_mib(p, c.tolerance)
            );
        }
        (None, None, None) => {}
    }
    if c.observed.no_gpu_memory {
        let _ = write!(line, " — {NO_GPU_MEMORY}");
    }
    if let Some(last) = &c.observed.last_line
        && c.status.is_failure()
    {
        let _ = write!(line, " — {last}");
    }
    if c.status == crate::model::DoneStatus::FailedOom && c.mps_limit_mib.is_none() {
        line.push_str(" — CUDA out of memory, no retries left (add retries=N or --oom-retries N)");
    }
    if let Some(unenforced) = c.unenforced {
        let _ = write!(line, " — {unenforced}");
    }
    if let Some(path) = c.log
        && c.status.is_failure()
    {
        let _ = write!(line, "; log {}", path.display());
    }
    line
}

/// One job's line on the board.
#[derive(Debug, Clone, PartialEq)]
pub enum BoardState {
    /// `▶`: running (or a live orphan of a previous scheduler).
    Running {
        /// GPU indices.
        gpus: Vec<u32>,
        /// Seconds since start.
        elapsed_s: f64,
        /// MiB in use now on its busiest GPU (per GPU, like the
        /// declaration and the peak); `None` if nothing seen.
        current_mib: Option<u64>,
        /// Highest per-GPU peak so far.
        peak_mib: Option<u64>,
        /// Declaration per GPU.
        vram_mib: Option<u64>,
        /// Measured beyond its declaration plus the tolerance.
        over: bool,
        /// Extra words (`orphan pgid 123`, `stopping`).
        note: Option<String>,
    },
    /// `·`: waiting for room.
    Pending {
        /// Declaration per GPU.
        vram_mib: Option<u64>,
        /// GPUs wanted.
        gpus: u32,
        /// Why it waits (docs/BEHAVIOUR.md "Queue policy"), shown on a line of its own.
        reason: Option<String>,
    },
    /// `↻`: waiting to retry after an OOM with a larger declaration.
    RetryWait {
        /// Declaration of the next attempt.
        next_vram_mib: Option<u64>,
        /// OOM attempts so far.
        retries_used: u32,
    },
    /// `✓ ✗ ⊘`: ended.
    Done {
        /// How it ended.
        status: crate::journal::DoneStatus,
        /// Exit code, if it ran.
        returncode: Option<i32>,
        /// Declared, yet never seen on its GPUs: it probably ran on the
        /// CPU.
        no_gpu_memory: bool,
        /// For a failure: the last line it wrote to its log.
        last_line: Option<String>,
    },
}

/// A job as shown on the board.
#[derive(Debug, Clone, PartialEq)]
pub struct BoardRow {
    /// Display number.
    pub no: u32,
    /// The command.
    pub command: String,
    /// Its state.
    pub state: BoardState,
}

/// Jobs of each kind listed on the board; the rest are counted in one line
/// so the board stays small and cheap with huge queues.
pub const BOARD_LIST_LIMIT: usize = 50;

/// The mark of a row (docs/BEHAVIOUR.md "Board and terminal").
fn mark(state: &BoardState) -> char {
    match state {
        BoardState::Running { .. } => '▶',
        BoardState::Pending { .. } => '·',
        BoardState::RetryWait { .. } => '↻',
        BoardState::Done { status, .. } => status.mark(),
    }
}

/// `path` cut from the left to `width` characters (`…/exp/jobs.txt`), so
/// the file name stays visible.
pub fn shorten_left(path: &str, width: usize) -> String {
    let count = path.chars().count();
    if count <= width {
        return path.to_string();
    }
    let tail: String = path.chars().skip(count - width.saturating_sub(1)).collect();
    format!("…{tail}")
}

/// The width every board and `gpusched status` line fits in (docs/BEHAVIOUR.md "Everyday verbs").
pub const LINE_WIDTH: usize = 80;

/// `prefix`, two spaces, then `command` cut to what is left of `width`
/// (at least 12 characters of it; a longer prefix is cut first). The
/// command stays last, so the line reads left to right.
pub fn fit_line(prefix: &str, command: &str, width: usize) -> String {
    const MIN_COMMAND: usize = 12;
    let prefix = crate::console::shorten(prefix, width.saturating_sub(MIN_COMMAND + 2));
    let room = width.saturating_sub(prefix.chars().count() + 2);
    format!("{prefix}  {}", crate::console::shorten(command, room))
}

/// A MiB figure for the board: `8500`, or `n/a` when unknown.
fn mib_or_na(value: Option<u64>) -> String {
    value.map_or_else(|| "n/a".to_string(), |v| v.to_string())
}

/// Renders one row in lines of at most `width` characters: mark, number,
/// state details, then the command, cut with `…`; a running job's note
/// (adopted, stopping, progress) on a second, indented line. Memory
/// figures are per GPU.
pub fn render_row(row: &BoardRow, width: usize) -> String {
    let details = match &row.state {
        BoardState::Running {
            gpus,
            elapsed_s,
            current_mib,
            peak_mib,
            vram_mib,
            over,
            note,
        } => {
            let unit = if gpus.len() > 1 { "MiB/GPU" } else { "MiB" };
            let declared = vram_mib.map_or(String::new(), |v| format!(" of {v}"));
            let unit = if *over {
                format!("{unit} {}", crate::words::EXCEEDED)
            } else {
                unit.to_string()
            };
            let details = if gpus.is_empty() {
                // On a Slurm cluster: where and how much is Slurm's to know.
                format!(
                    "Slurm     {:>6}  {}",
                    crate::console::human_duration(*elapsed_s),
                    vram_mib.map_or("undeclared".to_string(), |v| format!("{v} MiB declared")),
                )
            } else {
                format!(
                    "GPU {:<5} {:>6}  {}{declared} {unit}, peak {}",
                    crate::console::gpu_ids(gpus, ","),
                    crate::console::human_duration(*elapsed_s),
                    mib_or_na(*current_mib),
                    mib_or_na(*peak_mib),
                )
            };
            let prefix = format!("{} job {:<4} {details}", mark(&row.state), row.no);
            let mut line = fit_line(&prefix, &row.command, width);
            // Notes (adopted, stopping, progress) go on a line of their own.
            if let Some(note) = note {
                line.push('\n');
                line.push_str(&crate::console::shorten(
                    &format!("           {note}"),
                    width,
                ));
            }
            return line;
        }
        BoardState::Pending {
            vram_mib,
            gpus,
            reason,
        } => {
            let details = format!(
                "pending  {}{}",
                vram_mib.map_or("undeclared".to_string(), |v| format!("{v} MiB")),
                if *gpus > 1 {
                    format!(" × {gpus} GPUs")
                } else {
                    String::new()
                }
            );
            let prefix = format!("{} job {:<4} {details}", mark(&row.state), row.no);
            return with_note(fit_line(&prefix, &row.command, width), reason, width);
        }
        BoardState::RetryWait {
            next_vram_mib,
            retries_used,
        } => format!(
            "retry after OOM #{retries_used}, next vram {}",
            next_vram_mib.map_or("undeclared".to_string(), |v| format!("{v} MiB"))
        ),
        BoardState::Done {
            status,
            returncode,
            no_gpu_memory,
            last_line,
        } => {
            return done_row(
                row,
                (*status, *returncode, *no_gpu_memory),
                last_line,
                width,
            );
        }
    };
    let prefix = format!("{} job {:<4} {details}", mark(&row.state), row.no);
    fit_line(&prefix, &row.command, width)
}

/// An ended job's board line: how it ended, then its command; a failure's
/// last log line on a line of its own, as a wait's reason is.
fn done_row(
    row: &BoardRow,
    (status, returncode, no_gpu_memory): (crate::journal::DoneStatus, Option<i32>, bool),
    last_line: &Option<String>,
    width: usize,
) -> String {
    let ended = match returncode {
        Some(rc) => format!("{} (exit {rc})", status.as_str()),
        None => status.as_str().to_string(),
    };
    let details = if no_gpu_memory {
        format!("{ended}, no GPU memory seen (CPU?)")
    } else {
        ended
    };
    let prefix = format!("{} job {:<4} {details}", mark(&row.state), row.no);
    with_note(fit_line(&prefix, &row.command, width), last_line, width)
}

/// `line`, then `note` (a wait's reason, a failure's last log line) on a
/// line of its own under the job's, cut to `width`.
fn with_note(mut line: String, note: &Option<String>, width: usize) -> String {
    if let Some(note) = note {
        line.push('\n');
        line.push_str(&crate::console::shorten(
            &format!("           {note}"),
            width,
        ));
    }
    line
}

/// The jobs of one section of the board: the rows shown and how many the
/// section has in all (the rest are counted in one line).
#[derive(Debug, Default)]
pub struct BoardSection {
    /// Rows to show, at most [`BOARD_LIST_LIMIT`].
    pub rows: Vec<BoardRow>,
    /// Jobs in this section, shown or not.
    pub total: usize,
}

/// Renders the whole board: the header lines, then running, waiting and
/// finished jobs, each section's hidden rest counted in one line.
pub fn render_board(header: &[String], sections: &[(&str, &BoardSection)]) -> String {
    let mut out = String::new();
    for line in header {
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    for (name, section) in sections {
        for row in &section.rows {
            out.push_str(&render_row(row, LINE_WIDTH));
            out.push('\n');
        }
        if section.total > section.rows.len() {
            let _ = writeln!(
                out,
                "  … and {} more {name}",
                section.total - section.rows.len()
            );
        }
    }
    out
}

/// The summary's part on learned declarations (docs/BEHAVIOUR.md "Learned VRAM"): per family that
/// `vram=auto` jobs used this run, the highest prediction they started
/// with against the ok peaks measured. Empty when no `auto` job ran.
pub fn learned_summary(
    families: &std::collections::BTreeMap<String, (Option<u64>, Vec<u64>)>,
) -> String {
    if families.is_empty() {
        return String::new();
    }
    let mut out = String::from("learned VRAM (vram=auto), predicted vs actual peak:\n");
    for (family, (predicted, peaks)) in families {
        let predicted = predicted.map_or("none (first run)".to_string(), |p| format!("{p} MiB"));
        let actual = match (peaks.iter().min(), peaks.iter().max()) {
            (Some(lo), Some(hi)) if lo == hi => format!("{hi} MiB"),
            (Some(lo), Some(hi)) => format!("{lo}–{hi} MiB"),
            _ => "no ok run".to_string(),
        };
        out.push_str(&crate::console::shorten(&format!("  {family}"), LINE_WIDTH));
        out.push_str(&format!(
            "\n    predicted {predicted}, actual {actual} over {}\n",
            crate::words::count(peaks.len(), "ok run")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::DoneStatus;

    #[test]
    fn durations() {
        assert_eq!(crate::console::human_duration(0.84), "0.8s");
        assert_eq!(crate::console::human_duration(42.0), "42s");
        assert_eq!(crate::console::human_duration(303.0), "5m03s");
        assert_eq!(crate::console::human_duration(7500.0), "2h05m");
        assert_eq!(
            crate::console::human_duration(3.0 * 86400.0 + 4.0 * 3600.0),
            "3d04h"
        );
    }

    #[test]
    fn peaks_and_mib() {
        let peaks = BTreeMap::from([(0, Some(7950)), (1, None)]);
        assert_eq!(peaks_text(&peaks), "peak GPU0 7950 MiB, GPU1 n/a");
        assert_eq!(crate::console::gpu_ids(&[0, 1], "-"), "0-1");
    }

    #[test]
    fn board_marks_and_caps() {
        let running = BoardSection {
            rows: vec![BoardRow {
                no: 1,
                command: "python train.py".into(),
                state: BoardState::Running {
                    gpus: vec![0],
                    elapsed_s: 12.0,
                    current_mib: Some(100),
                    peak_mib: Some(200),
                    vram_mib: Some(8000),
                    over: false,
                    note: None,
                },
            }],
            total: 1,
        };
        let waiting = BoardSection {
            rows: (2..(2 + BOARD_LIST_LIMIT as u32))
                .map(|no| BoardRow {
                    no,
                    command: "wait".into(),
                    state: BoardState::Pending {
                        vram_mib: None,
                        gpus: 1,
                        reason: Some("waiting for an idle GPU".into()),
                    },
                })
                .collect(),
            total: BOARD_LIST_LIMIT + 1,
        };
        let finished = BoardSection {
            rows: (101..(101 + BOARD_LIST_LIMIT as u32))
                .map(|no| BoardRow {
                    no,
                    command: "x".into(),
                    state: BoardState::Done {
                        status: DoneStatus::Cancelled,
                        returncode: None,
                        no_gpu_memory: false,
                        last_line: None,
                    },
                })
                .collect(),
            total: BOARD_LIST_LIMIT + 1,
        };
        let board = render_board(
            &["header".into()],
            &[
                ("running", &running),
                ("waiting", &waiting),
                ("finished", &finished),
            ],
        );
        assert!(board.starts_with("header\n"));
        assert!(board.contains("▶ job 1"), "{board}");
        assert!(board.contains("· job 2 "), "{board}");
        assert!(
            board.contains("\n           waiting for an idle GPU\n"),
            "{board}"
        );
        assert!(!board.contains("· job 52 "), "{board}");
        assert!(board.contains("… and 1 more waiting"), "{board}");
        assert!(board.contains("⊘ job 150"), "{board}");
        assert!(board.contains("… and 1 more finished"), "{board}");
    }
}
