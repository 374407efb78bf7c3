//! `gpusched simjob` (docs/BEHAVIOUR.md "Simulation"): a fake GPU job for `--sim` mode. It ramps
//! its simulated VRAM from 0 to `--vram` MiB over `--ramp` seconds on each
//! GPU of `CUDA_VISIBLE_DEVICES`, holds it `--hold` seconds, and exits with
//! `--exit-code`, atomically rewriting `$GPUSCHED_SIM_DIR/<pid>.json` every
//! 50 ms and removing it on exit (also on SIGTERM / SIGINT). Like a CUDA
//! process, it fails with an out-of-memory error (exit 1) when a step of
//! its ramp would push a GPU past its capacity, counting every process
//! in the sim directory.

use crate::cli::SimjobArgs;
use crate::gpu::sim::{self, SIM_TOTAL_MIB, SimReport};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the report file is rewritten.
const REPORT_EVERY: Duration = Duration::from_millis(50);

/// Runs the fake job; returns its exit code.
///
/// Errors: `CUDA_VISIBLE_DEVICES` or `GPUSCHED_SIM_DIR` missing or malformed,
/// or the report file cannot be written.
pub fn run(args: &SimjobArgs) -> anyhow::Result<i32> {
    let gpus = visible_gpus()?;
    let dir = PathBuf::from(
        std::env::var_os("GPUSCHED_SIM_DIR")
            .context("GPUSCHED_SIM_DIR is not set: run simjob as a job of `gpusched --sim N`")?,
    );
    let pid = std::process::id();
    let report_path = dir.join(format!("{pid}.json"));
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    let oom = match &args.oom_once {
        Some(marker) if !marker.exists() => {
            std::fs::write(marker, b"")
                .with_context(|| format!("cannot create marker {}", marker.display()))?;
            true
        }
        _ => false,
    };
    let started = Instant::now();
    // The hold counts from when the whole --vram is held, so a simjob the
    // machine left unscheduled during its ramp still holds its peak for
    // --hold seconds where the scheduler can sample it.
    let mut full_since: Option<Instant> = None;
    let mut held = 0;
    let result = (|| -> anyhow::Result<Ending> {
        loop {
            let elapsed = started.elapsed().as_secs_f64();
            let fraction = if args.ramp > 0.0 {
                (elapsed / args.ramp).min(1.0)
            } else {
                1.0
            };
            let mib = (args.vram as f64 * fraction).round() as u64;
            if mib > held {
                // Allocate like CUDA: check the GPU's capacity and take the
                // memory in one step, under the sim directory's lock.
                let _lock = lock_sim_dir(&dir)?;
                let reports = sim::live_reports(&dir)?;
                if let Some((gpu, others)) = sim::over_capacity(&reports, pid, &gpus, mib) {
                    return Ok(Ending::OutOfMemory {
                        gpu,
                        asked: mib - held,
                        others,
                        held,
                    });
                }
                write_report(&report_path, pid, &gpus, mib, args.util)?;
                held = mib;
            } else {
                write_report(&report_path, pid, &gpus, mib, args.util)?;
            }
            if stop.load(Ordering::Relaxed) {
                return Ok(Ending::Signalled);
            }
            let left = if fraction < 1.0 {
                args.ramp - elapsed
            } else if oom {
                return Ok(Ending::Done);
            } else {
                let since = *full_since.get_or_insert_with(Instant::now);
                let held_s = since.elapsed().as_secs_f64();
                if held_s >= args.hold {
                    return Ok(Ending::Done);
                }
                args.hold - held_s
            };
            std::thread::sleep(REPORT_EVERY.min(Duration::from_secs_f64(left.max(0.0))));
        }
    })();
    let _ = std::fs::remove_file(&report_path);
    match result? {
        Ending::Done => {}
        Ending::Signalled => return Ok(143),
        Ending::OutOfMemory {
            gpu,
            asked,
            others,
            held,
        } => {
            eprintln!(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {asked} MiB. GPU {gpu} has a total capacity of {SIM_TOTAL_MIB} MiB of which {} MiB is free. This process has {held} MiB in use; other processes use {others} MiB. (simulated by gpusched simjob)",
                SIM_TOTAL_MIB.saturating_sub(others + held)
            );
            return Ok(1);
        }
    }
    if oom {
        eprintln!(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (simulated by gpusched simjob; marker {})",
            args.oom_once.as_deref().unwrap_or(Path::new("")).display()
        );
        return Ok(1);
    }
    Ok(i32::from(args.exit_code))
}

/// The GPU indices of `CUDA_VISIBLE_DEVICES`, as the sim reports name
/// them.
///
/// Errors: the variable is missing, empty, or holds something else than
/// GPU indices.
fn visible_gpus() -> anyhow::Result<Vec<String>> {
    let visible = std::env::var("CUDA_VISIBLE_DEVICES")
        .context("CUDA_VISIBLE_DEVICES is not set: run simjob as a job of `gpusched --sim N`")?;
    let gpus: Vec<String> = visible
        .split(',')
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u32>()
                .map(|i| i.to_string())
                .map_err(|_| anyhow::anyhow!("CUDA_VISIBLE_DEVICES has '{s}', not a GPU index"))
        })
        .collect::<anyhow::Result<_>>()?;
    if gpus.is_empty() {
        bail!("CUDA_VISIBLE_DEVICES is empty: no GPU to use");
    }
    Ok(gpus)
}

/// How the fake job's loop ended.
enum Ending {
    /// It ran its course.
    Done,
    /// SIGTERM or SIGINT.
    Signalled,
    /// The next step of its ramp did not fit on `gpu` (docs/BEHAVIOUR.md "Simulation").
    OutOfMemory {
        gpu: String,
        asked: u64,
        others: u64,
        held: u64,
    },
}

/// The sim directory's allocation lock (`<dir>/.lock`), so that two
/// simjobs never both take the last free memory of a GPU.
fn lock_sim_dir(dir: &Path) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    let path = dir.join(".lock");
    // Another user's simjob may have made it (a sim dir shared between
    // users, as a real box is): a flock needs only read access.
    let file = crate::lockfile::open_shared(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    crate::lockfile::lock_exclusive(file, &path)
}

/// Atomically replaces the report (temp file, then rename).
fn write_report(path: &Path, pid: u32, gpus: &[String], mib: u64, util: u32) -> anyhow::Result<()> {
    let report = SimReport {
        pid,
        mib: gpus.iter().map(|g| (g.clone(), mib)).collect(),
        util,
    };
    // Readable by everyone, as NVML shows every user's memory.
    use std::os::unix::fs::PermissionsExt;
    crate::files::write_atomic_with(
        path,
        &serde_json::to_vec(&report)?,
        &crate::files::AtomicOptions {
            mode: Some(std::fs::Permissions::from_mode(0o644)),
            sync: false,
        },
    )
    .with_context(|| format!("cannot write {}", path.display()))
}
