//! `gpusched add` (SPEC §13): appends one validated, shell-quoted line to
//! the jobs file.

use crate::cli::AddArgs;
use crate::edit;

/// `gpusched add`: appends one validated, shell-quoted line; prints its key.
pub fn run(args: &AddArgs) -> anyhow::Result<i32> {
    let job = edit::NewJob {
        vram: args.vram.clone(),
        gpus: args.gpus,
        timeout: args.timeout.clone(),
        retries: args.retries,
        argv: args.command.clone(),
    };
    let (key, line) = edit::add(&args.file, &job)?;
    println!("{key}");
    eprintln!("added to {}: {line}", args.file.display());
    Ok(0)
}
