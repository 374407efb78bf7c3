//! The console: the one place terminal lines are printed, and the local
//! clock they are stamped with (docs/BEHAVIOUR.md "Board and terminal").
//! It sits at the bottom of the crate so that any module may speak
//! without importing the views.

use chrono::{Datelike, Local, Offset, TimeZone, Timelike};
use std::io::Write as _;

/// Local wall-clock time of `unix_s` as (year, month, day, hour, minute,
/// second), in the zone `TZ` or `/etc/localtime` names.
fn local_parts(unix_s: f64) -> (i32, u32, u32, u32, u32, u32) {
    let t = Local
        .timestamp_opt(unix_s.floor() as i64, 0)
        .single()
        .unwrap_or_else(|| Local.timestamp_opt(0, 0).unwrap());
    (
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
    )
}

/// Seconds east of UTC of the local clock at `unix_s` (for pictures that
/// are labelled in local time but drawn by pure functions).
pub fn utc_offset_s(unix_s: f64) -> i64 {
    Local
        .timestamp_opt(unix_s.floor() as i64, 0)
        .single()
        .map_or(0, |t| i64::from(t.offset().fix().local_minus_utc()))
}

/// `HH:MM:SS` local time of `unix_s`.
pub fn clock(unix_s: f64) -> String {
    let (_, _, _, h, m, s) = local_parts(unix_s);
    format!("{h:02}:{m:02}:{s:02}")
}

/// `HH:MM` local time of `unix_s`, with the date (`MM-DD HH:MM`) when
/// it is not within the next day.
pub fn clock_short(unix_s: f64) -> String {
    clock_of(unix_s, false)
}

/// `HH:MM:SS` local time of `unix_s`, with the date (`MM-DD HH:MM:SS`)
/// when it is not within the next day: a moment something starts at,
/// told to the second.
pub fn clock_seconds(unix_s: f64) -> String {
    clock_of(unix_s, true)
}

/// [`clock_short`], or with `seconds` [`clock_seconds`].
fn clock_of(unix_s: f64, seconds: bool) -> String {
    let (_, mo, d, h, m, s) = local_parts(unix_s);
    let time = if seconds {
        format!("{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}")
    };
    if (unix_s - crate::clock::now_ts()).abs() < 86_400.0 {
        time
    } else {
        format!("{mo:02}-{d:02} {time}")
    }
}

/// `YYYY-MM-DD HH:MM:SS` local time of `unix_s`.
pub fn date_time(unix_s: f64) -> String {
    let (y, mo, d, h, m, s) = local_parts(unix_s);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{m:02}:{s:02}")
}

/// A terminal line said by a part of the loop and printed later by its
/// reporter (docs/ARCHITECTURE.md "The order of one tick").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Said {
    /// A line of what happened ([`say`]).
    Line(String),
    /// A warning: something the user should look at ([`warn`]).
    Warning(String),
}

impl Said {
    /// Prints it.
    pub fn print(&self) {
        print_lines(std::slice::from_ref(self));
    }

    /// Its terminal line, `[HH:MM:SS] text\n` (a warning's text after
    /// `WARN `).
    fn line(&self) -> String {
        match self {
            Said::Line(text) => line(text),
            Said::Warning(text) => line(&format!("WARN {text}")),
        }
    }
}

/// Lines said by threads beside the loop (the notifier's sender, the
/// `--on-finish` runners), kept for the loop's reporter to print in order
/// with its own ([`SaidLater::take`]). Clones share one list; what is
/// never taken is printed when the last clone goes.
#[derive(Debug, Clone, Default)]
pub struct SaidLater(std::sync::Arc<std::sync::Mutex<Vec<Said>>>);

impl SaidLater {
    /// Keeps a line of what happened.
    pub fn say(&self, text: String) {
        if let Ok(mut said) = self.0.lock() {
            said.push(Said::Line(text));
        }
    }

    /// Keeps a warning.
    pub fn warn(&self, text: String) {
        if let Ok(mut said) = self.0.lock() {
            said.push(Said::Warning(text));
        }
    }

    /// The lines kept since the last call, in order.
    pub fn take(&self) -> Vec<Said> {
        self.0
            .lock()
            .map(|mut said| std::mem::take(&mut *said))
            .unwrap_or_default()
    }
}

impl Drop for SaidLater {
    /// The last clone prints what nobody took.
    fn drop(&mut self) {
        if std::sync::Arc::strong_count(&self.0) == 1 {
            print_lines(&self.take());
        }
    }
}

/// Prints `said` in one write: a tick that starts and ends hundreds of
/// tiny jobs prints their lines together.
pub fn print_lines(said: &[Said]) {
    if said.is_empty() {
        return;
    }
    let text: String = said.iter().map(Said::line).collect();
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// `text` as a terminal may show it: every control character (ESC and
/// the other C0 and C1 codes, DEL) but the line breaks and tabs given in
/// `keep` replaced by `�`, so a command or note someone wrote cannot move
/// the cursor, retitle the window or hide text (docs/SECURITY.md).
pub fn printable_keeping<'a>(text: &'a str, keep: &[char]) -> std::borrow::Cow<'a, str> {
    if !text.chars().any(|c| c.is_control() && !keep.contains(&c)) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.chars()
            .map(|c| {
                if c.is_control() && !keep.contains(&c) {
                    '\u{fffd}'
                } else {
                    c
                }
            })
            .collect(),
    )
}

/// [`printable_keeping`] nothing: one line, no control character.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    printable_keeping(text, &[])
}

/// Prints one terminal line, `[HH:MM:SS] text`, to stdout (control
/// characters but line breaks shown as `�`).
pub fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line(text).as_bytes());
    let _ = out.flush();
}

/// One terminal line, `[HH:MM:SS] text\n`, control characters but line
/// breaks shown as `�`.
fn line(text: &str) -> String {
    let text = printable_keeping(text, &['\n']);
    format!("[{}] {text}\n", clock(crate::clock::now_ts()))
}

/// Prints a verb's error to stderr, `gpusched: error: text`, with every
/// control character but line breaks and tabs shown as `�`: errors name
/// paths and files other users chose (docs/SECURITY.md "Text for
/// terminals"). A closed stderr is ignored.
pub fn error(text: &str) {
    let text = printable_keeping(text, &['\n', '\t']);
    let _ = writeln!(std::io::stderr(), "gpusched: error: {text}");
}

/// Prints a verb's remark to stderr, `gpusched: text`, made printable as
/// [`error`]'s text is.
pub fn note(text: &str) {
    let text = printable_keeping(text, &['\n', '\t']);
    let _ = writeln!(std::io::stderr(), "gpusched: {text}");
}

/// Prints a warning line, `[HH:MM:SS] WARN text`.
pub fn warn(text: &str) {
    Said::Warning(text.to_string()).print();
}

/// A duration for people: `0.8s`, `42s`, `5m03s`, `2h05m`, `3d04h`.
pub fn human_duration(seconds: f64) -> String {
    let s = seconds.max(0.0);
    if s < 10.0 {
        return format!("{s:.1}s");
    }
    let total = s.round() as u64;
    match total {
        0..60 => format!("{total}s"),
        60..3600 => format!("{}m{:02}s", total / 60, total % 60),
        3600..86400 => format!("{}h{:02}m", total / 3600, (total % 3600) / 60),
        _ => format!("{}d{:02}h", total / 86400, (total % 86400) / 3600),
    }
}

/// Devices for people and file names: `0`, `0-1` (joined by `sep`), `0:1`
/// for a MIG instance ([`crate::model::device_label`]).
pub fn gpu_ids(gpus: &[u32], sep: &str) -> String {
    gpus.iter()
        .map(|&id| crate::model::device_label(id))
        .collect::<Vec<_>>()
        .join(sep)
}

/// Numbers (job numbers, pids) joined by `sep`: `1,2`.
pub fn numbers(values: &[u32], sep: &str) -> String {
    values
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(sep)
}

/// The most characters of a command the views show (the start line,
/// status.json, the board): a 10 MB command is kept whole in the jobs
/// file and the journal, not printed whole at every start and rewrite.
pub const SHOWN_COMMAND_CHARS: usize = 2_000;

/// `command` as the views show it: whole up to
/// [`SHOWN_COMMAND_CHARS`], else its start and how long it is.
pub fn shown_command(command: &str) -> std::borrow::Cow<'_, str> {
    if command.len() <= SHOWN_COMMAND_CHARS {
        return std::borrow::Cow::Borrowed(command);
    }
    let cut: String = command.chars().take(SHOWN_COMMAND_CHARS).collect();
    std::borrow::Cow::Owned(format!(
        "{cut}… ({} bytes in all; the jobs file and the journal keep it whole)",
        command.len()
    ))
}

/// `text` cut to `width` characters, with `…` when cut, its control
/// characters shown as `�` ([`printable`]).
pub fn shorten(command: &str, width: usize) -> String {
    let command = printable(command);
    if command.chars().count() <= width {
        command.to_string()
    } else {
        let cut: String = command.chars().take(width.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_sent() {
        assert_eq!(printable("python train.py"), "python train.py");
        assert_eq!(
            printable("a\u{1b}]0;title\u{7}b\u{9b}c\u{7f}"),
            "a\u{fffd}]0;title\u{fffd}b\u{fffd}c\u{fffd}"
        );
        assert_eq!(
            printable_keeping("one\ntwo\u{1b}", &['\n']),
            "one\ntwo\u{fffd}"
        );
        assert_eq!(shorten("ab\u{1b}[2Jcd", 5), "ab\u{fffd}[…");
    }
}
