//! Arguments of job containment (docs/BEHAVIOUR.md "Containment"): where
//! jobs' cgroups go, the default host memory and CPUs per GPU, and how
//! many CPU-only jobs run at once.

use clap::Args;
use std::path::PathBuf;

/// The scheduler's containment arguments.
#[derive(Debug, Args, Clone, Default)]
pub struct ContainArgs {
    /// Make each job's cgroup under DIR: a cgroup v2 directory you may
    /// write (delegated to you), or one under a cgroup v1 controller's
    /// mount (the same path is then used in the memory, freezer and cpuset
    /// hierarchies). Default: found by itself — the v1 controllers under
    /// gpusched's own cgroups, a v2 subtree delegated to it (systemd-run
    /// --user --scope -p Delegate=yes, a service with Delegate=yes), as
    /// root the top of the v2 hierarchy, else gpusched runs itself again
    /// under systemd-run where a user manager answers.
    #[arg(long, value_name = "DIR")]
    pub cgroup: Option<PathBuf>,

    /// Run jobs without cgroups, as a plain shell loop would.
    #[arg(long, conflicts_with = "cgroup")]
    pub no_containment: bool,

    /// Default host memory limit per GPU a job uses, for jobs without
    /// mem= (800M, 16G): a 2-GPU job gets twice it, a CPU-only job once.
    #[arg(long, value_name = "SIZE", value_parser = crate::jobspec::parse_mem_mib)]
    pub mem_per_gpu: Option<u64>,

    /// Default CPU cores per GPU a job uses, for jobs without cpus=, taken
    /// from the CPUs nearest its GPUs (NVML's CPU affinity); a CPU-only
    /// job gets it once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub cpus_per_gpu: Option<u32>,

    /// How many CPU-only jobs (gpus=0) run at once.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub cpu_jobs: u32,
}
