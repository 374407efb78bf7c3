//! Arguments of the commands a lab sets a box up with: `ledger`,
//! `service`, `man` and `completions`.

use clap::{Args, Subcommand};
use std::path::PathBuf;

/// Arguments of `gpusched completions`.
#[derive(Debug, Args, Clone)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh or fish (also elvish, powershell).
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// Arguments of `gpusched man`.
#[derive(Debug, Args, Clone)]
pub struct ManArgs {
    /// Write the page to PREFIX/share/man/man1/gpusched.1 for this binary
    /// in PREFIX/bin (~/.cargo/share/man/man1 after `cargo install`), where
    /// `man gpusched` finds it while PREFIX/bin is on the PATH.
    #[arg(long)]
    pub install: bool,
}

/// Arguments of `gpusched ledger`.
#[derive(Debug, Args, Clone)]
pub struct LedgerArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: LedgerAction,
}

/// `gpusched ledger` actions.
#[derive(Debug, Subcommand, Clone)]
pub enum LedgerAction {
    /// Create (or fix) the shared ledger directory as root: owned by root,
    /// mode 1777. Run once per boot, or install the systemd-tmpfiles rule
    /// it prints.
    Init {
        /// The ledger directory.
        #[arg(long, value_name = "DIR", default_value = "/dev/shm/gpusched")]
        ledger: PathBuf,
    },
}

/// Arguments of `gpusched service`.
#[derive(Debug, Args, Clone)]
pub struct ServiceArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: ServiceAction,
}

/// `gpusched service` actions (docs/BEHAVIOUR.md "An always-on
/// scheduler").
#[derive(Debug, Subcommand, Clone)]
pub enum ServiceAction {
    /// Write a systemd user unit, gpusched-NAME.service, that runs
    /// `gpusched JOBS_FILE --watch` in the jobs file's directory, and say
    /// how to start it (and keep it running after logout).
    Install {
        /// The jobs file the scheduler runs.
        #[arg(value_name = "JOBS_FILE")]
        jobs_file: PathBuf,
        /// The unit's name: gpusched-NAME.service (default: the jobs
        /// file's name without its extension).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Print the unit instead of writing it.
        #[arg(long)]
        print: bool,
        /// More options for the scheduler, after `--`: `gpusched service
        /// install jobs.txt -- --gpus 0,1 --notify https://…`.
        #[arg(last = true, value_name = "SCHEDULER_OPTIONS")]
        options: Vec<String>,
    },
}
