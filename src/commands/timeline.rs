//! `gpusched timeline` (docs/BEHAVIOUR.md "Timeline"): draws a log directory's run as an SVG.

use crate::cli::TimelineArgs;
use crate::timeline::{render, write};
use std::path::Path;

/// Writes the picture of `args.log_dir`'s run to `-o FILE` (default
/// `<log_dir>/timeline.svg`, `-` for standard output) and says where.
///
/// Errors: the log directory has no readable journal; the output cannot be
/// written.
pub fn run(args: &TimelineArgs) -> anyhow::Result<i32> {
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| args.log_dir.join("timeline.svg"));
    if output == Path::new("-") {
        use std::io::Write;
        std::io::stdout()
            .lock()
            .write_all(render(&args.log_dir)?.as_bytes())?;
    } else {
        write(&args.log_dir, &output)?;
        println!("timeline written to {}", output.display());
    }
    Ok(0)
}
