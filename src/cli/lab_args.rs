//! Arguments of the commands a lab sets a box up and keeps accounts
//! with: `ledger`, `service`, `report`, `man` and `completions`.

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
        /// Set up a simulated box several users share instead: DIR (where
        /// simulated GPUs' jobs report) and DIR/ledger, both root's with
        /// mode 1777; the users then run `--sim N --sim-dir DIR`.
        #[arg(long, value_name = "DIR", conflicts_with = "ledger")]
        sim_dir: Option<PathBuf>,
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

/// Arguments of `gpusched report`.
#[derive(Debug, Args, Clone)]
pub struct ReportArgs {
    /// A scheduler's log directory to account for; repeat for several.
    #[arg(
        long = "log-dir",
        value_name = "DIR",
        default_value = "gpusched_logs",
        env = "GPUSCHED_LOG_DIR"
    )]
    pub log_dirs: Vec<PathBuf>,
    /// Every log directory a scheduler on this box ran with, as the
    /// ledger remembers them (everyone's for root; others' only where
    /// their journals are readable).
    #[arg(long)]
    pub all: bool,
    /// The ledger directory, for --all.
    #[arg(long, value_name = "DIR", default_value = "/dev/shm/gpusched")]
    pub ledger: PathBuf,
    /// From this day (`2026-11-01`, local midnight) or this long ago
    /// (`7d`, `12h`). Default: everything.
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Up to this day (exclusive) or this long ago. Default: now.
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,
    /// One row per user, or per user and job name (`name=`), or per user
    /// and group (`group=`).
    #[arg(long, value_name = "WHAT", default_value = "user", value_parser = ["user", "name", "group"])]
    pub by: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}
