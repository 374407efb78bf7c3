//! `gpusched status` (SPEC §13): renders `<log_dir>/status.json` for
//! people, or prints it as is with `--json`.

use crate::cli::StatusArgs;
use crate::error::Error;
use crate::journal;
use crate::view;
use anyhow::Context;

/// `gpusched status`: renders `<log_dir>/status.json` (or prints it with
/// `--json`). Colour only on a terminal, never with `NO_COLOR`.
///
/// Errors: no status.json in that directory (exit 2).
pub fn run(args: &StatusArgs) -> anyhow::Result<i32> {
    use std::io::IsTerminal;
    let path = args.log_dir.join("status.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Error::Usage(format!(
            "cannot read {} ({e}): no scheduler has run with --log-dir {}",
            path.display(),
            args.log_dir.display()
        ))
    })?;
    if args.json {
        print!("{text}");
        return Ok(0);
    }
    let doc: view::status::StatusDoc = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a gpusched status document", path.display()))?;
    let colour = if std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
    {
        view::status::Colour::Always
    } else {
        view::status::Colour::Never
    };
    print!("{}", view::status::render(&doc, journal::now_ts(), colour));
    Ok(0)
}
