//! `gpusched simjob` (docs/BEHAVIOUR.md "Simulation"): a fake GPU job for `--sim` mode. It ramps
//! its simulated VRAM from 0 to `--vram` MiB over `--ramp` seconds on each
//! GPU of `CUDA_VISIBLE_DEVICES`, holds it `--hold` seconds, and exits with
//! `--exit-code`, atomically rewriting `$GPUSCHED_SIM_DIR/<pid>.json` every
//! 50 ms and removing it on exit (also on SIGTERM / SIGINT). Like a CUDA
//! process, it fails with an out-of-memory error (exit 1) when a step of
//! its ramp would push a GPU past its capacity, counting every process
//! in the sim directory. With `--work S` it ends after S seconds of work
//! instead of `--hold`: full speed while the jobs on its GPUs ask for no
//! more than 100 % of them (by their `--util`), slower in proportion when
//! they ask for more — what sharing a GPU costs a compute-bound job.

#![expect(
    clippy::disallowed_methods,
    reason = "the simulated process's own report file, named by its pid"
)]

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
    // --work: seconds of work done, and when it was last counted.
    let mut worked = 0.0;
    let mut counted = started;
    let result = (|| -> anyhow::Result<Ending> {
        loop {
            if args.work.is_some() {
                let speed = speed(&sim::live_reports(&dir)?, pid, &gpus, args.util);
                worked += counted.elapsed().as_secs_f64() * speed;
                counted = Instant::now();
            }
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
            } else if let Some(work) = args.work {
                if worked >= work {
                    return Ok(Ending::Done);
                }
                work - worked
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
    Ok(exit_code(result?, args, oom))
}

/// The exit code of a simjob whose loop ended in `ending`, after saying
/// why on stderr as a CUDA process would (`oom`: `--oom-once` fired).
fn exit_code(ending: Ending, args: &SimjobArgs, oom: bool) -> i32 {
    match ending {
        Ending::Done if oom => {
            eprintln!(
                "torch.OutOfMemoryError: CUDA out of memory (simulated by gpusched simjob --oom-once; marker {})",
                args.oom_once.as_deref().unwrap_or(Path::new("")).display()
            );
            1
        }
        Ending::Done => i32::from(args.exit_code),
        Ending::Signalled => 143,
        Ending::OutOfMemory {
            gpu,
            asked,
            others,
            held,
        } => {
            eprintln!(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {asked} MiB. GPU {gpu} has a total capacity of {SIM_TOTAL_MIB} MiB of which {} MiB is free. Including non-PyTorch memory, this process has {held} MiB memory in use. (simulated by gpusched simjob; other processes use {others} MiB)",
                SIM_TOTAL_MIB.saturating_sub(others + held)
            );
            1
        }
    }
}

/// How fast (0–1) a job asking for `util` percent of each of `gpus` works
/// beside the other live `reports`: on each GPU, 1 while the jobs there
/// ask for 100 % or less, else 100 ÷ what they ask for; the slowest of
/// its GPUs sets the pace (a multi-GPU job waits for its slowest part).
fn speed(reports: &[SimReport], pid: u32, gpus: &[String], util: u32) -> f64 {
    gpus.iter()
        .map(|gpu| {
            let others: u32 = reports
                .iter()
                .filter(|r| r.pid != pid && r.mib.contains_key(gpu))
                .map(|r| r.util)
                .sum();
            shared_speed(others + util)
        })
        .fold(1.0, f64::min)
}

/// How fast (0–1) each job on a GPU works when the jobs there ask for
/// `asked` percent of it in all: full speed up to 100 %, in proportion
/// beyond (docs/BEHAVIOUR.md "Simulation"; the packing bench plays the
/// same rule).
pub fn shared_speed(asked: u32) -> f64 {
    if asked <= 100 {
        1.0
    } else {
        100.0 / f64::from(asked)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn report(pid: u32, gpus: &[&str], util: u32) -> SimReport {
        SimReport {
            pid,
            mib: gpus.iter().map(|g| (g.to_string(), 1000)).collect(),
            util,
        }
    }

    #[test]
    fn sharing_a_gpu_slows_a_job_in_proportion_to_what_the_jobs_ask() {
        let gpu0 = ["0".to_string()];
        // Alone, or beside jobs that together ask 100 % or less: full speed.
        assert_eq!(speed(&[report(1, &["0"], 100)], 1, &gpu0, 100), 1.0);
        assert_eq!(speed(&[report(2, &["0"], 30)], 1, &gpu0, 30), 1.0);
        // Two compute-bound jobs: half speed; three: a third.
        assert_eq!(speed(&[report(2, &["0"], 100)], 1, &gpu0, 100), 0.5);
        let three = [report(2, &["0"], 100), report(3, &["0"], 100)];
        assert!((speed(&three, 1, &gpu0, 100) - 1.0 / 3.0).abs() < 1e-9);
        // A job on another GPU costs nothing; on two GPUs the slower sets
        // the pace.
        assert_eq!(speed(&[report(2, &["1"], 100)], 1, &gpu0, 100), 1.0);
        let both = ["0".to_string(), "1".to_string()];
        assert_eq!(speed(&[report(2, &["1"], 100)], 1, &both, 100), 0.5);
    }
}
