//! gpusched: a VRAM-aware GPU job scheduler for one shared Linux machine.
//! The binary is a thin shell over [`run`]; the modules follow the data
//! through one tick: jobs file → [`jobspec`], GPU state → [`gpu`], placement
//! → [`allocation`], processes → [`process`], durable state → [`journal`],
//! the loop → [`scheduler`], what the user reads → [`report`].

pub mod allocation;
pub mod cli;
pub mod gpu;
pub mod jobspec;
pub mod journal;
pub mod process;
pub mod progress;
pub mod report;
pub mod scheduler;
pub mod simjob;
pub mod status;

use anyhow::Context;
use gpu::GpuBackend;

/// Runs the scheduler for `args` and returns its exit code (SPEC §7).
///
/// Errors: [`scheduler::StartError`] (exit 2) for what the user must fix
/// first; anything else is a failure of the machine (exit 1).
pub fn run(args: &cli::RunArgs) -> anyhow::Result<i32> {
    let log_dir = scheduler::absolute(&args.log_dir);
    let (backend, sim_dir): (Box<dyn GpuBackend>, _) = match args.sim {
        Some(count) => {
            let dir = match std::env::var_os("GPUSCHED_SIM_DIR") {
                Some(dir) => scheduler::absolute(std::path::Path::new(&dir)),
                None => log_dir.join("sim"),
            };
            let sim = gpu::sim::SimBackend::new(count, &dir).context("cannot set up --sim")?;
            (Box::new(sim), Some(dir))
        }
        None => (Box::new(gpu::nvml::NvmlBackend::open()?), None),
    };
    scheduler::run(args, backend, sim_dir)
}

/// The exit code for an error that ended the program: 2 for a usage or
/// start-up problem (SPEC §7), else 1.
pub fn exit_code_for(error: &anyhow::Error) -> i32 {
    if error.downcast_ref::<scheduler::StartError>().is_some() {
        2
    } else {
        1
    }
}

/// Diagnostics on stderr through `tracing`; the level comes from
/// `GPUSCHED_LOG` (error, warn, info, debug, trace; default warn).
pub fn init_tracing() {
    let level = std::env::var("GPUSCHED_LOG")
        .ok()
        .and_then(|l| l.parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::WARN);
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        .init();
}
