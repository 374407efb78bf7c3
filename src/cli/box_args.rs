//! The arguments of the commands about the whole box (docs/BEHAVIOUR.md
//! "Rules for a shared box", "Seeing the whole box"): `reserve`,
//! `release`, `top`, `serve` and `doctor`, which take the scheduler's own options to
//! find the same GPUs, ledger and rules.

use super::LogDir;
use super::values::parse_poll;
use clap::Args;
use std::path::PathBuf;

/// Where the box's GPUs, ledger and rules are: the scheduler's own
/// options, so that `reserve` and `release` see what it sees.
#[derive(Debug, Args, Clone)]
pub struct BoxArgs {
    /// Simulated GPUs, as the scheduler's --sim N. Without it, the
    /// scheduler of --log-dir's GPUs, else as many as a scheduler
    /// simulated in --sim-dir or $GPUSCHED_SIM_DIR.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub sim: Option<u32>,
    /// The simulated GPUs' directory, as the scheduler's --sim-dir
    /// (default: $GPUSCHED_SIM_DIR, else LOG_DIR/sim).
    #[arg(long, value_name = "DIR")]
    pub sim_dir: Option<PathBuf>,
    /// The ledger directory, as the scheduler's --ledger (default:
    /// $GPUSCHED_LEDGER, else /dev/shm/gpusched; with --sim:
    /// SIM_DIR/ledger).
    #[arg(long, value_name = "DIR", env = "GPUSCHED_LEDGER")]
    pub ledger: Option<PathBuf>,
    /// The box rules, as the scheduler's --box-rules.
    #[arg(long, value_name = "FILE")]
    pub box_rules: Option<PathBuf>,
    #[command(flatten)]
    pub log_dir: LogDir,
}

/// Arguments of `gpusched reserve`.
#[derive(Debug, Args, Clone)]
pub struct ReserveArgs {
    /// How long to keep it: 90m, 2h, 1d (at most the rules'
    /// `[reservations] max_duration`, else 7d).
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration_arg, required_unless_present = "list")]
    pub duration: Option<f64>,
    /// The GPU (index). Default: the one with the most memory free.
    #[arg(long, value_name = "N")]
    pub gpu: Option<u32>,
    /// How much memory: 20000 (MiB), 20G. Default: the whole GPU.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub vram: Option<u64>,
    /// What it is for, shown to everyone.
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub note: String,
    /// List everyone's reservations instead.
    #[arg(long, conflicts_with_all = ["duration", "gpu", "vram"])]
    pub list: bool,
    #[command(flatten)]
    pub place: BoxArgs,
}

/// Arguments of `gpusched top`.
#[derive(Debug, Args, Clone)]
pub struct TopArgs {
    /// Seconds between refreshes.
    #[arg(long, value_name = "SEC", default_value_t = 1.0, value_parser = parse_poll)]
    pub interval: f64,
    /// Print the view once and exit, even on a terminal.
    #[arg(long)]
    pub once: bool,
    #[command(flatten)]
    pub place: BoxArgs,
}

/// Arguments of `gpusched serve`.
#[derive(Debug, Args, Clone)]
pub struct ServeArgs {
    /// Address and port to listen on. Anything but a loopback address
    /// needs --token-file.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8765")]
    pub listen: std::net::SocketAddr,
    /// A file holding the access token (readable by you alone): requests
    /// must carry it as `Authorization: Bearer TOKEN`, or open
    /// /login?token=TOKEN once to get a cookie. Default on loopback:
    /// ~/.config/gpusched/serve-token, made on first run (the URL to open
    /// is printed).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    #[command(flatten)]
    pub place: BoxArgs,
}

/// Arguments of `gpusched unreserve`.
#[derive(Debug, Args, Clone)]
pub struct UnreserveArgs {
    /// The reservation's number (from `gpusched reserve --list`). Default:
    /// all of yours.
    #[arg(value_name = "ID")]
    pub id: Option<u32>,
    #[command(flatten)]
    pub place: BoxArgs,
}

/// A size like the jobs file's `vram=`: 20000 (MiB), 800M, 20G.
fn parse_size(text: &str) -> Result<u64, String> {
    crate::jobspec::parse_vram_mib(text)
        .map_err(|_| format!("'{text}' is not a size: use MiB (20000) or 800M, 20G"))
}

/// A duration like the jobs file's `timeout=`: 90, 90s, 15m, 2h, 1.5d.
pub(super) fn parse_duration_arg(text: &str) -> Result<f64, String> {
    crate::jobspec::parse_duration_s(text)
        .map_err(|_| format!("'{text}' is not a duration: use 90s, 15m, 2h or 1.5d"))
}

/// Arguments of `gpusched doctor`.
#[derive(Debug, Args, Clone)]
pub struct DoctorArgs {
    /// Check N simulated GPUs instead of NVML, as the scheduler's --sim N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub sim: Option<u32>,
    /// NVLink pairs of the simulated GPUs, as the scheduler's --sim-nvlink.
    #[arg(long, value_name = "PAIRS", requires = "sim", value_parser = parse_nvlink_pairs)]
    pub sim_nvlink: Option<NvlinkPairs>,
    /// The ledger directory, as the scheduler's --ledger (default:
    /// $GPUSCHED_LEDGER, else /dev/shm/gpusched; with --sim:
    /// LOG_DIR/sim/ledger).
    #[arg(long, value_name = "DIR", env = "GPUSCHED_LEDGER")]
    pub ledger: Option<PathBuf>,
    #[command(flatten)]
    pub log_dir: LogDir,
}

/// `--sim-nvlink`: (GPU, GPU, links) triples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvlinkPairs(pub Vec<(u32, u32, u32)>);

pub(super) fn parse_nvlink_pairs(text: &str) -> Result<NvlinkPairs, String> {
    let pair = |item: &str| -> Option<(u32, u32, u32)> {
        let (gpus, links) = match item.split_once('x') {
            Some((gpus, links)) => (gpus, links.trim().parse().ok().filter(|&n| n > 0)?),
            None => (item, 4),
        };
        let (a, b) = gpus.split_once('-')?;
        let (a, b) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        (a != b).then_some((a, b, links))
    };
    text.split(',')
        .map(|item| {
            pair(item.trim()).ok_or_else(|| {
                format!(
                    "'{}' is not a GPU pair: write two different GPU indices as A-B, optionally with a link count as A-BxN (e.g. 0-2,1-3 or 0-1x12)",
                    item.trim()
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(NvlinkPairs)
}
