//! `gpusched cancel` (SPEC §6): adds the `cancel` flag to a job's line in
//! the jobs file the scheduler runs.

use super::index::find_jobs_file;
use crate::cli::CancelArgs;
use crate::edit;

/// Adds the `cancel` flag to the job's line.
///
/// Errors: no jobs file can be found, or the job is not in it.
pub fn run(args: &CancelArgs) -> anyhow::Result<i32> {
    let file = match &args.file {
        Some(file) => file.clone(),
        None => find_jobs_file(&args.log_dir)?,
    };
    let target = edit::Target::parse(&args.job);
    let (_, message) = edit::cancel(&file, &args.log_dir, &target)?;
    println!("{message}");
    Ok(0)
}
