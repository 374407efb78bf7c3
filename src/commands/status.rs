//! `gpusched status [--all] [--json]` (docs/BEHAVIOUR.md "Everyday verbs"): renders
//! `<log_dir>/status.json` for people — running jobs, waiting ones, then
//! the 10 latest finished (`--all`: every one, from the journal) — in the
//! terminal's width (80 columns when not a terminal); `--json` prints the
//! file as is.

use super::index::JobIndex;
use crate::cli::StatusArgs;
use crate::error::Error;
use crate::view;
use crate::view::screen::FinishedList;

/// `gpusched status`: renders `<log_dir>/status.json` (or prints it with
/// `--json`). Colour only on a terminal, never with `NO_COLOR`.
///
/// Errors: no status.json in that directory (exit 2).
pub fn run(args: &StatusArgs) -> anyhow::Result<i32> {
    use std::io::IsTerminal;
    let (bytes, doc) = match view::status::read_status(&args.log_dir) {
        Ok(read) => read,
        Err(e @ view::status::StatusReadError::Missing { .. }) => {
            return Err(Error::Usage(e.to_string()).into());
        }
        Err(e) => return Err(e.into()),
    };
    if args.json {
        let _ = std::io::Write::write_all(&mut std::io::stdout(), &bytes);
        return Ok(0);
    }
    // The document may be another user's (root's status on their log
    // directory): its strings are shown, never sent to the terminal.
    let doc = if view::may_hold_controls(&bytes) {
        view::printable_strings(doc)
    } else {
        doc
    };
    let colour = if std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
    {
        view::screen::Colour::Always
    } else {
        view::screen::Colour::Never
    };
    let finished = if args.all {
        FinishedList::All(JobIndex::read(&args.log_dir)?.finished())
    } else {
        FinishedList::Latest(LATEST_FINISHED)
    };
    let text = view::screen::render(&doc, crate::clock::now_ts(), colour, width(), &finished);
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    Ok(0)
}

/// Finished jobs shown without `--all` (docs/BEHAVIOUR.md "Everyday verbs").
const LATEST_FINISHED: usize = 10;

/// The width to fit: the terminal's when stdout is one, else `$COLUMNS`,
/// else 80 (docs/BEHAVIOUR.md "Everyday verbs").
fn width() -> usize {
    use std::io::IsTerminal;
    if std::io::stdout().is_terminal()
        && let Ok((columns, _)) = ratatui::crossterm::terminal::size()
        && columns >= 40
    {
        return usize::from(columns);
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&c: &usize| c >= 40)
        .unwrap_or(crate::view::report::LINE_WIDTH)
}
