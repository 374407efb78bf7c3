//! gpusched: a VRAM-aware GPU job scheduler for one shared Linux machine.
//! The binary is a thin shell over [`run`]; the modules follow the data
//! through one tick: jobs file → [`jobspec`], GPU state → [`gpu`], placement
//! → [`allocation`], rules → [`policy`], processes → [`process`], durable
//! state → [`journal`], the loop → [`scheduler`], what the user reads →
//! [`view`]. `docs/ARCHITECTURE.md` maps each SPEC rule to its file.

pub mod allocation;
pub mod cli;
pub mod edit;
pub mod error;
pub mod files;
pub mod gpu;
pub mod jobspec;
pub mod journal;
pub mod model;
pub mod policy;
pub mod process;
pub mod progress;
pub mod scheduler;
pub mod simjob;
pub mod view;

pub use error::exit_code_for;

use anyhow::Context;
use gpu::GpuBackend;

/// Runs the scheduler for `args` and returns its exit code (SPEC §7).
///
/// Errors: [`error::Error`] (exit 2) for what the user must fix first;
/// anything else is a failure of the machine (exit 1).
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

/// `gpusched status`: renders `<log_dir>/status.json` (or prints it with
/// `--json`). Colour only on a terminal, never with `NO_COLOR`.
///
/// Errors: no status.json in that directory (exit 2).
pub fn status_command(args: &cli::StatusArgs) -> anyhow::Result<i32> {
    use std::io::IsTerminal;
    let path = args.log_dir.join("status.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        error::Error::Usage(format!(
            "cannot read {} ({e}): no scheduler has run with --log-dir {}",
            path.display(),
            args.log_dir.display()
        ))
    })?;
    if args.json {
        print!("{text}");
        return Ok(0);
    }
    let doc: view::status::StatusDoc = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a gpusched status document", path.display()))?;
    let colour = if std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
    {
        view::status::Colour::Always
    } else {
        view::status::Colour::Never
    };
    print!("{}", view::status::render(&doc, journal::now_ts(), colour));
    Ok(0)
}

/// `gpusched add`: appends one validated, shell-quoted line; prints its key.
pub fn add_command(args: &cli::AddArgs) -> anyhow::Result<i32> {
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

/// `gpusched cancel`: adds the `cancel` flag to the job's line.
pub fn cancel_command(args: &cli::CancelArgs) -> anyhow::Result<i32> {
    let target = edit::Target::parse(&args.job);
    let (_, message) = edit::cancel(&args.file, &args.log_dir, &target)?;
    println!("{message}");
    Ok(0)
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
