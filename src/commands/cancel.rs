//! `gpusched cancel` (SPEC §6): adds the `cancel` flag to a job's line.

use crate::cli::CancelArgs;
use crate::edit;

/// `gpusched cancel`: adds the `cancel` flag to the job's line.
pub fn run(args: &CancelArgs) -> anyhow::Result<i32> {
    let target = edit::Target::parse(&args.job);
    let (_, message) = edit::cancel(&args.file, &args.log_dir, &target)?;
    println!("{message}");
    Ok(0)
}
