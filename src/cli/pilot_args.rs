//! The arguments of `gpusched export --slurm --pilot` (docs/BEHAVIOUR.md
//! "Inside a Slurm allocation"): the sbatch script that runs the
//! scheduler inside one allocation.

use super::box_args::parse_duration_arg;
use clap::Args;

/// How `export --slurm --pilot` sizes the pilot's allocation.
#[derive(Debug, Args, Clone, Default)]
pub struct PilotArgs {
    /// Print one sbatch script that runs gpusched inside a Slurm
    /// allocation (a pilot) instead of one sbatch line per job: the
    /// pilot packs the jobs onto the allocation's GPUs, needs no process
    /// on the login node, and leaves what it could not finish to the next
    /// allocation (see --chain).
    #[arg(long, requires = "slurm")]
    pub pilot: bool,

    /// GPUs of the pilot's allocation on each node (`--gres=gpu:N`).
    #[arg(
        long,
        value_name = "N",
        requires = "pilot",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=64)
    )]
    pub gpus: u32,

    /// The allocation's time limit (`sbatch --time`, whole minutes
    /// rounded up): 90m, 4h, 1d. Default: the partition's.
    #[arg(long, value_name = "DURATION", requires = "pilot", value_parser = parse_duration_arg)]
    pub time: Option<f64>,

    /// Submit up to N successors, each waiting for the one before to end
    /// (`--dependency=afterany`), while jobs are left: a sweep longer
    /// than one allocation runs through allocations one after another.
    #[arg(long, value_name = "N", requires = "pilot", default_value_t = 0)]
    pub chain: u32,

    /// The pilot runs each job as a job step of its allocation (gpusched
    /// `--job-steps`): Slurm accounts for every job (`sacct`) and stops
    /// them with the allocation.
    #[arg(long, requires = "pilot")]
    pub job_steps: bool,

    /// Nodes of the pilot's allocation (`sbatch --nodes`), each with
    /// --gpus GPUs. More than one runs every job as a job step on the node
    /// of its GPUs (as --job-steps), with a gpusched agent on each other
    /// node sampling its GPUs; gpusched must be at the same path on every
    /// node.
    #[arg(
        long,
        value_name = "N",
        requires = "pilot",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=crate::pilot::MAX_NODES as i64)
    )]
    pub nodes: u32,
}
