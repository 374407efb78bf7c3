//! How a declared job chooses among the GPUs it fits on (`--placement`;
//! docs/BEHAVIOUR.md "Placement"): spread, the default, or pack.

use super::{GpuLoad, PlaceOptions, is_idle};

/// How a declared job chooses among the GPUs it fits on (`--placement`;
/// docs/BEHAVIOUR.md "Placement").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PlacementPolicy {
    /// A GPU where nobody's job runs first (the least loaded: memory, then
    /// recent utilisation), and best fit only when every usable GPU has
    /// work: sharing a GPU buys concurrency, not throughput, so a job
    /// shares only when no GPU is idle.
    #[default]
    Spread,
    /// Best fit always (the smallest headroom that suffices): the roomier
    /// GPUs stay whole for larger jobs; for small memory-bound jobs.
    Pack,
}

impl PlacementPolicy {
    /// The word `--placement` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            PlacementPolicy::Spread => "spread",
            PlacementPolicy::Pack => "pack",
        }
    }
}

impl std::str::FromStr for PlacementPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "spread" => Ok(PlacementPolicy::Spread),
            "pack" => Ok(PlacementPolicy::Pack),
            other => Err(format!(
                "'{other}' is not a placement: use spread (an idle GPU first, the default) or pack (best fit)"
            )),
        }
    }
}

/// Under [`PlacementPolicy::Spread`], what a GPU with work costs over any idle one,
/// so that a set of GPUs with fewer busy ones always wins.
const BUSY_COST: u64 = 1 << 50;

/// Headroom (MiB) counted by [`choice_cost`], which packs it in 27 bits.
const HEADROOM_BITS: u32 = 27;

/// What choosing `gpu` (with `headroom` MiB) costs a declared job under
/// `opts.policy`; the GPUs of least cost are chosen (docs/BEHAVIOUR.md
/// "Placement"). Spread: an idle GPU costs its memory in use (MiB), then
/// its utilisation (percent), then its headroom (the smallest GPU that
/// fits, so that big GPUs stay whole for big jobs); a busy one
/// [`BUSY_COST`] plus its headroom (best fit among them). Pack: the
/// headroom.
pub(super) fn choice_cost(gpu: &GpuLoad, headroom: u64, opts: &PlaceOptions) -> u64 {
    let fit = headroom.min((1 << HEADROOM_BITS) - 1);
    match opts.policy {
        PlacementPolicy::Pack => headroom,
        PlacementPolicy::Spread if opts.tightest_fit => headroom,
        PlacementPolicy::Spread if is_idle(gpu, opts) => {
            let load = gpu.total_mib.saturating_sub(headroom).min(16_383);
            let util = u64::from(gpu.util_percent.unwrap_or(0).min(100));
            ((load * 128 + util) << HEADROOM_BITS) | fit
        }
        PlacementPolicy::Spread => BUSY_COST + fit,
    }
}

/// Utilisation (percent, NVML's last sample period) from which a GPU
/// counts as computing flat out: under [`PlacementPolicy::Spread`] a declared job
/// does not join a job of ours there — sharing would slow both to what one
/// gets alone — but waits for a GPU to free, as a loop over
/// `CUDA_VISIBLE_DEVICES` would.
pub const SATURATED_UTIL: u32 = 90;

/// Whether `gpu` computes flat out ([`SATURATED_UTIL`]) with a job of ours
/// on it, which will free it. A GPU saturated by other people's work only
/// is not waited for: nothing tells when it frees.
pub(super) fn is_saturated(gpu: &GpuLoad) -> bool {
    !gpu.occupants.is_empty() && gpu.util_percent.is_some_and(|u| u >= SATURATED_UTIL)
}
