//! `gpusched timeline` (docs/BEHAVIOUR.md "Timeline"): draws a log directory's run as an SVG.

use crate::cli::TimelineArgs;
use crate::journal::now_ts;
use crate::timeline;
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

/// Draws `log_dir`'s run into `output` (atomically, readable by people).
///
/// Errors: the log directory has no readable journal; `output` cannot be
/// written.
pub fn write(log_dir: &Path, output: &Path) -> anyhow::Result<()> {
    let svg = render(log_dir)?;
    crate::files::write_atomic_with(
        output,
        svg.as_bytes(),
        &crate::files::AtomicOptions {
            mode: Some(crate::files::people_mode()),
            sync: false,
        },
    )
    .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", output.display()))
}

/// The SVG of a log directory's run as of now.
///
/// Errors: the log directory has no readable journal.
pub fn render(log_dir: &Path) -> anyhow::Result<String> {
    let now = now_ts();
    let run = timeline::from_log_dir(log_dir, now)?;
    Ok(timeline::svg::render(
        &run,
        &timeline::svg::Options {
            utc_offset_s: crate::view::report::utc_offset_s(run.start),
            subtitle: format!(
                "{} · {} attempt(s) on {} GPU(s) · drawn {}",
                log_dir.display(),
                run.attempts.len(),
                run.gpus.len(),
                crate::view::report::date_time(now)
            ),
        },
    ))
}
