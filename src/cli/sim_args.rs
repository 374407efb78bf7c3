//! The arguments of `gpusched simjob`, the fake GPU job of `--sim` mode
//! (docs/BEHAVIOUR.md "Simulation").

use super::values::{parse_mib, parse_seconds};
use clap::Args;
use std::path::PathBuf;

/// Arguments of `gpusched simjob` (docs/BEHAVIOUR.md "Simulation").
#[derive(Debug, Args, Clone)]
pub struct SimjobArgs {
    /// Simulated VRAM to reach on each GPU, in MiB.
    #[arg(long, value_name = "MIB", value_parser = parse_mib)]
    pub vram: u64,
    /// Seconds to ramp from 0 to --vram.
    #[arg(long, value_name = "SEC", default_value_t = 0.5, value_parser = parse_seconds)]
    pub ramp: f64,
    /// Seconds to hold --vram before exiting.
    #[arg(long, value_name = "SEC", default_value_t = 1.0, value_parser = parse_seconds)]
    pub hold: f64,
    /// Exit code to end with.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub exit_code: u8,
    /// If MARKER does not exist: create it, and at the end of the ramp print
    /// a CUDA out-of-memory error and exit 1 (an OOM on the first attempt
    /// only).
    #[arg(long, value_name = "MARKER")]
    pub oom_once: Option<PathBuf>,
    /// Device utilization to report on each GPU, percent.
    #[arg(long, value_name = "PCT", default_value_t = 80, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub util: u32,
    /// Instead of --hold: run until it has done SEC seconds of work, at
    /// full speed while the simulated jobs on its GPUs ask for 100 % of
    /// them or less (by --util), slower in proportion when they ask for
    /// more (two --util 100 jobs on one GPU each run at half speed):
    /// what sharing a GPU costs a compute-bound job.
    #[arg(long, value_name = "SEC", value_parser = parse_seconds)]
    pub work: Option<f64>,
}
