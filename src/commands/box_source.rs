//! Where `top`, `serve` and `reserve` read the box from: the GPUs, the
//! ledger and the rules that a scheduler with the same options would see
//! (docs/BEHAVIOUR.md "Seeing the whole box"). The document itself is
//! built by [`crate::view::box_view`].

use crate::cli::BoxArgs;
use crate::gpu::GpuBackend;
use crate::ledger::store::Ledger;
use crate::rules::BoxRules;
use crate::view::box_view::{BoxDoc, build, gather};
use std::path::PathBuf;

/// What the box document is read from: the GPUs, the ledger, the rules.
pub struct BoxSource {
    backend: Box<dyn GpuBackend>,
    ledger: Ledger,
    rules: Option<BoxRules>,
}

/// The GPUs, ledger and rules that `args` name, as a scheduler with the
/// same options would see them; `create`: make the ledger directory if
/// missing (for `reserve`).
///
/// Errors: the rules file is refused; no GPU can be read; the ledger
/// directory is refused.
pub fn open_box(
    args: &BoxArgs,
    create: bool,
) -> anyhow::Result<(Box<dyn GpuBackend>, Ledger, Option<BoxRules>)> {
    let rules = crate::rules::load(args.box_rules.as_deref())?;
    // Without --sim, the GPUs of the scheduler on --log-dir: simulated
    // ones if it runs on them.
    let followed = following_sim(&args.log_dir, create);
    let (sim, sim_dir, owner) = match (args.sim, followed) {
        (None, Some((count, dir, owner))) => (Some(count), Some(dir), Some(owner)),
        (None, None) => (recorded_sim(args)?, args.sim_dir.clone(), None),
        _ => (args.sim, args.sim_dir.clone(), None),
    };
    let (backend, sim_dir) = if create {
        crate::open_gpus(sim, sim_dir.as_deref(), &args.log_dir, &[])?
    } else {
        view_gpus(sim, sim_dir, &args.log_dir, owner)?
    };
    let dir = match (&args.ledger, &sim_dir) {
        (Some(dir), _) => crate::files::absolute(dir),
        (None, Some(sim)) => sim.join("ledger"),
        (None, None) => PathBuf::from(crate::ledger::store::DEFAULT_DIR),
    };
    let mut ledger = Ledger::open_reader(&dir, create)?;
    ledger.max_reservation_s = rules.as_ref().map_or(
        crate::rules::DEFAULT_MAX_RESERVATION_S,
        BoxRules::max_reservation_s,
    );
    Ok((backend, ledger, rules))
}

/// Without `--sim` and without a scheduler to follow: the count of GPUs a
/// scheduler simulated in `--sim-dir`, else `$GPUSCHED_SIM_DIR`
/// (docs/BEHAVIOUR.md "Simulation"); `None` when neither is given (NVML).
///
/// Errors: the directory was named but no scheduler simulated GPUs there
/// yet, or its count cannot be read.
fn recorded_sim(args: &BoxArgs) -> anyhow::Result<Option<u32>> {
    let (dir, named_by) = match (&args.sim_dir, std::env::var_os("GPUSCHED_SIM_DIR")) {
        (Some(dir), _) => (dir.clone(), "--sim-dir"),
        (None, Some(dir)) => (PathBuf::from(dir), "$GPUSCHED_SIM_DIR"),
        (None, None) => return Ok(None),
    };
    match crate::gpu::sim::recorded_count(&dir)? {
        Some(count) => Ok(Some(count)),
        None => Err(crate::error::Error::Usage(format!(
            "{named_by} names {}, where no scheduler has simulated GPUs yet: give --sim N, or start one there with --sim N first",
            dir.display()
        ))
        .into()),
    }
}

/// The GPUs a view (`top`, `serve`) reads: `sim` simulated GPUs in
/// `sim_dir` (else `GPUSCHED_SIM_DIR`, else `<log_dir>/sim`) read only,
/// through a descriptor, and — when a status.json named the directory —
/// only if it is that status.json's `owner`'s or root's
/// ([`crate::gpu::sim::SimBackend::follow`]); else NVML.
///
/// Errors: as [`crate::gpu::sim::SimBackend::follow`]'s, or NVML's.
fn view_gpus(
    sim: Option<u32>,
    sim_dir: Option<PathBuf>,
    log_dir: &std::path::Path,
    owner: Option<u32>,
) -> anyhow::Result<(Box<dyn GpuBackend>, Option<PathBuf>)> {
    let Some(count) = sim else {
        return crate::open_gpus(None, None, log_dir, &[]);
    };
    let dir = crate::sim_dir_of(sim_dir.as_deref(), log_dir);
    let backend = crate::gpu::sim::SimBackend::follow(count, &dir, owner)?;
    Ok((Box::new(backend), Some(dir)))
}

/// The simulated GPUs (count, directory, and the uid of the status.json
/// that named them) of the scheduler whose status.json is in `log_dir`,
/// when it runs with `--sim`. A verb that writes (`writes`: `reserve`,
/// `unreserve`) follows only a log directory of its own user: another
/// user's status.json must not choose where we create and write files
/// (docs/SECURITY.md "Root's verbs"); a view follows it read-only.
fn following_sim(log_dir: &std::path::Path, writes: bool) -> Option<(u32, PathBuf, u32)> {
    let (owner, doc) = match crate::view::status::read_status_of(log_dir) {
        Ok((_, doc, owner)) => (owner, doc),
        Err(crate::view::status::StatusReadError::Missing { .. }) => return None,
        // Said as what it is, not left to surface later as a missing NVML.
        Err(e) => {
            crate::console::warn(&format!("{e}; not following its GPUs"));
            return None;
        }
    };
    if writes && !owned_by_me(log_dir) {
        return None;
    }
    if doc.scheduler.backend != "sim" {
        return None;
    }
    let dir = doc.scheduler.sim_dir.map(PathBuf::from)?;
    // Its GPUs may be fewer than the simulation's (--gpus): the highest.
    let count = doc.gpus.iter().map(|g| g.index + 1).max().unwrap_or(1);
    Some((count, dir, owner))
}

/// Whether `log_dir` (not followed if a link) belongs to this process's
/// effective user.
fn owned_by_me(log_dir: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(log_dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == nix::unistd::geteuid().as_raw())
}

impl BoxSource {
    /// Opens what `args` name, reading only (see [`open_box`]).
    ///
    /// Errors: as [`open_box`]'s.
    pub fn open(args: &BoxArgs) -> anyhow::Result<BoxSource> {
        let (backend, ledger, rules) = open_box(args, false)?;
        Ok(BoxSource {
            backend,
            ledger,
            rules,
        })
    }

    /// Reads the box now.
    ///
    /// Errors: the GPUs cannot be read.
    pub fn read(&mut self) -> anyhow::Result<BoxDoc> {
        let snapshot = self.backend.snapshot()?;
        self.ledger.refresh();
        crate::console::print_lines(&self.ledger.take_said());
        let facts = gather(&snapshot, &self.ledger);
        // Other users' commands, notes and paths, shown as text only.
        Ok(crate::view::printable_strings(build(
            &snapshot,
            &self.ledger,
            self.rules.as_ref(),
            &facts,
        )))
    }
}
