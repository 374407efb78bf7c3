//! `gpusched completions SHELL` and `gpusched man` (SPEC §13): shell
//! completions and the man page, generated from the command-line
//! definition itself, so they never drift from `--help`.

use crate::cli::{Cli, CompletionsArgs};
use clap::CommandFactory;

/// Prints the completion script for the shell.
///
/// Errors: stdout cannot be written.
pub fn completions(args: &CompletionsArgs) -> anyhow::Result<i32> {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "gpusched", &mut out);
    std::io::Write::write_all(&mut std::io::stdout(), &out)?;
    Ok(0)
}

/// Prints the man page (roff) for `gpusched(1)`.
///
/// Errors: stdout cannot be written.
pub fn man() -> anyhow::Result<i32> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut out)?;
    std::io::Write::write_all(&mut std::io::stdout(), &out)?;
    Ok(0)
}
