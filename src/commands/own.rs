//! Finding the caller's own running scheduler (docs/BEHAVIOUR.md "Everyday
//! verbs"): a verb run from another directory, with neither `--log-dir`
//! nor `GPUSCHED_LOG_DIR`, takes the log directory of the one scheduler
//! the caller runs on this box, as the shared ledger's booking files
//! record it (and, with `GPUSCHED_SIM_DIR` set, the simulated box's
//! ledger there); with several it names them.

use crate::error::Error;
use std::path::{Path, PathBuf};

/// The default `--log-dir`, relative to the directory a verb runs in.
pub const DEFAULT_LOG_DIR: &str = "gpusched_logs";

/// The ledgers a verb looks in for the caller's running schedulers:
/// `GPUSCHED_LEDGER` (else the box's), and `$GPUSCHED_SIM_DIR/ledger`
/// when that is set (where `--sim` schedulers given that directory book;
/// one with its own `LOG_DIR/sim` is found only through `--log-dir`).
pub fn ledgers_searched() -> Vec<PathBuf> {
    let mut dirs = vec![
        std::env::var_os("GPUSCHED_LEDGER")
            .map_or_else(|| crate::ledger::store::DEFAULT_DIR.into(), PathBuf::from),
    ];
    if let Some(sim) = std::env::var_os("GPUSCHED_SIM_DIR") {
        dirs.push(crate::files::absolute(Path::new(&sim)).join("ledger"));
    }
    dirs
}

/// For a verb given the default `log_dir` where no such directory exists
/// (and no `GPUSCHED_LOG_DIR`): the log directory of the caller's one
/// running scheduler that books in one of `ledger_dirs`
/// ([`ledgers_searched`]), or `None` when there is none (the verb then
/// says what it looked for, as before). Its booking file is believed only
/// as the ledger believes files: its owner is the caller, and its
/// scheduler is alive.
///
/// Errors: [`Error::Usage`] naming each log directory when the caller
/// runs several schedulers.
pub fn running_log_dir(log_dir: &Path, ledger_dirs: &[PathBuf]) -> Result<Option<PathBuf>, Error> {
    if log_dir != Path::new(DEFAULT_LOG_DIR)
        || log_dir.exists()
        || std::env::var_os("GPUSCHED_LOG_DIR").is_some()
    {
        return Ok(None);
    }
    let me = nix::unistd::getuid().as_raw();
    let mut dirs: Vec<String> = Vec::new();
    for ledger_dir in ledger_dirs {
        let Ok(mut ledger) = crate::ledger::store::Ledger::open_reader(ledger_dir, false) else {
            continue;
        };
        ledger.refresh();
        dirs.extend(
            ledger
                .peers
                .iter()
                .filter(|p| p.uid == me && !p.log_dir.is_empty())
                .map(|p| p.log_dir.clone()),
        );
    }
    dirs.sort_unstable();
    dirs.dedup();
    match dirs.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(PathBuf::from(one))),
        several => Err(Error::Usage(format!(
            "there is no {DEFAULT_LOG_DIR} here and you run {} schedulers; name one with --log-dir (or GPUSCHED_LOG_DIR): {}",
            several.len(),
            several.join(", ")
        ))),
    }
}
