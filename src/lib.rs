//! gpusched: a VRAM-aware GPU job scheduler for one shared Linux machine.
//! The binary is a thin shell over [`run`]; the modules follow the data
//! through one tick: jobs file → [`jobspec`], GPU state → [`gpu`], placement
//! → [`allocation`], rules → [`policy`], processes → [`process`], durable
//! state → [`journal`], the loop → [`scheduler`], what the user reads →
//! [`view`]. `docs/ARCHITECTURE.md` maps each behaviour of docs/BEHAVIOUR.md to its file.

#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests read the temporary files they made themselves"
    )
)]

pub mod allocation;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod console;
pub mod containment;
pub mod control;
pub mod dirfd;
pub mod edit;
pub mod error;
pub mod files;
pub mod gpu;
pub mod grid;
pub mod history;
pub mod jobspec;
pub mod journal;
pub mod jsonl;
pub mod launcher;
pub mod ledger;
pub mod lockfile;
pub mod model;
pub mod notifier;
pub mod pilot;
pub mod policy;
pub mod process;
pub mod progress;
pub mod rules;
pub mod saved_env;
pub mod scheduler;
pub mod simjob;
pub mod state;
pub mod timeline;
pub mod trust;
pub mod view;
pub mod words;

pub use error::exit_code_for;

use gpu::GpuBackend;

/// Runs the scheduler for `args` and returns its exit code (docs/BEHAVIOUR.md "Board and terminal").
///
/// Errors: [`error::Error`] (exit 2) for what the user must fix first;
/// anything else is a failure of the machine (exit 1).
pub fn run(args: &cli::RunArgs) -> anyhow::Result<i32> {
    if let Some(error) = args
        .jobs_file
        .as_ref()
        .and_then(|path| cli::typo_error(path.as_os_str()))
    {
        return Err(error.into());
    }
    scheduler::run(args, open_backend)
}

/// The GPU backend the command line asks for: `--sim N` simulated GPUs
/// in `--sim-dir` (else `GPUSCHED_SIM_DIR` if set, else `<log_dir>/sim`),
/// none to watch with `--slurm` (the cluster's GPUs are Slurm's), or NVML.
/// Returns it with the simulator's directory, if any.
///
/// Errors: NVML missing or failing ([`error::Error::Gpu`]); the sim
/// directory cannot be created.
pub fn open_backend(
    args: &cli::RunArgs,
) -> anyhow::Result<(Box<dyn GpuBackend>, Option<std::path::PathBuf>)> {
    let log_dir = files::absolute(&args.log_dir);
    if args.slurm.slurm {
        return Ok((Box::new(launcher::ClusterGpus), None));
    }
    let nvlink = args.sim_nvlink.as_ref().map_or(&[][..], |p| &p.0[..]);
    open_gpus(args.sim, args.sim_dir.as_deref(), &log_dir, nvlink)
}

/// The GPUs themselves: `sim` simulated GPUs in `sim_dir` (else
/// `GPUSCHED_SIM_DIR` if set, else `<log_dir>/sim`) joined by the NVLink
/// pairs `nvlink` (GPU, GPU, links), or NVML; with the simulator's
/// directory, if any.
///
/// Errors: NVML missing or failing ([`error::Error::Gpu`]); the sim
/// directory cannot be created; an NVLink pair names a GPU the simulation
/// does not have ([`error::Error::Usage`]).
pub fn open_gpus(
    sim: Option<u32>,
    sim_dir: Option<&std::path::Path>,
    log_dir: &std::path::Path,
    nvlink: &[(u32, u32, u32)],
) -> anyhow::Result<(Box<dyn GpuBackend>, Option<std::path::PathBuf>)> {
    Ok(match sim {
        Some(count) => {
            let dir = sim_dir_of(sim_dir, log_dir);
            if let Some(&(a, b, _)) = nvlink.iter().find(|(a, b, _)| *a >= count || *b >= count) {
                return Err(error::Error::Usage(format!(
                    "--sim-nvlink names GPU pair {a}-{b}, but --sim {count} has GPU 0 to {}",
                    count - 1
                ))
                .into());
            }
            let sim = gpu::sim::SimBackend::new(count, &dir)?.with_nvlink(nvlink);
            (Box::new(sim), Some(dir))
        }
        None => (Box::new(gpu::nvml::NvmlBackend::open()?), None),
    })
}

/// The simulated GPUs' directory: `sim_dir` (`--sim-dir`), else
/// `GPUSCHED_SIM_DIR` if set, else `<log_dir>/sim`; made absolute.
pub fn sim_dir_of(
    sim_dir: Option<&std::path::Path>,
    log_dir: &std::path::Path,
) -> std::path::PathBuf {
    match (sim_dir, std::env::var_os("GPUSCHED_SIM_DIR")) {
        (Some(dir), _) => files::absolute(dir),
        (None, Some(dir)) => files::absolute(std::path::Path::new(&dir)),
        (None, None) => files::absolute(log_dir).join("sim"),
    }
}

/// Diagnostics on stderr through `tracing`; the level comes from
/// `GPUSCHED_LOG` (error, warn, info, debug, trace; default warn).
pub fn init_tracing() {
    let level = std::env::var("GPUSCHED_LOG")
        .ok()
        .and_then(|l| l.parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::WARN);
    use std::io::IsTerminal;
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        .with_ansi(colour)
        .init();
}
