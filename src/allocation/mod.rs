//! Placement (docs/BEHAVIOUR.md "Placement"): one pure function from (job, GPU loads, options) to
//! GPU indices or "not now". No clock, no files, no processes: the scheduler
//! builds [`GpuLoad`]s from its latest snapshot and running jobs, and this
//! module decides. Most of the scheduler's rules are tested here.

mod choice;
pub use choice::{PlacementPolicy, SATURATED_UTIL};
use choice::{choice_cost, is_saturated};
use std::collections::BTreeMap;
mod wait;
pub use wait::WaitReason;

/// Options of placement, from the command line (docs/BEHAVIOUR.md "Command line").
#[derive(Debug, Clone, PartialEq)]
pub struct PlaceOptions {
    /// Below this effective external usage (MiB) a GPU counts as idle.
    pub idle_threshold_mib: u64,
    /// Added to every declaration (MiB).
    pub margin_mib: u64,
    /// Fractional buffer over observed peaks (0.10 = 10 %).
    pub spike_buffer: f64,
    /// At most one of our jobs per GPU.
    pub exclusive: bool,
    /// GPUs drained by `gpusched drain`, or closed because they stopped
    /// answering (bit i = GPU i): closed to new jobs, but still counted by
    /// the infeasible rule (docs/BEHAVIOUR.md "Queue policy", docs/HARDWARE.md
    /// "A sick GPU").
    pub drained_mask: crate::model::GpuMask,
    /// How the GPUs are connected, for multi-GPU jobs (docs/HARDWARE.md
    /// "Topology"); `None` when unknown.
    pub topology: Option<std::sync::Arc<Topology>>,
    /// How a declared job chooses among the GPUs it fits on
    /// (`--placement`).
    pub policy: PlacementPolicy,
    /// Under spread, for a job whose family is known to share well
    /// (docs/BEHAVIOUR.md "Spread or pack"): best fit, as pack, so that
    /// whole GPUs stay whole for the jobs that need them, but still never
    /// beside a job of ours computing flat out. Set per job by the round.
    pub tightest_fit: bool,
    /// A pilot on several nodes (docs/BEHAVIOUR.md "Several nodes"):
    /// device ids `n·k` to `n·k + k − 1` are node `n`'s GPUs, and a job's
    /// GPUs are all on one node. `None`: one box.
    pub node_gpus: Option<u32>,
}

impl Default for PlaceOptions {
    fn default() -> Self {
        PlaceOptions {
            idle_threshold_mib: 200,
            margin_mib: 512,
            spike_buffer: 0.10,
            exclusive: false,
            drained_mask: 0,
            topology: None,
            policy: PlacementPolicy::Spread,
            tightest_fit: false,
            node_gpus: None,
        }
    }
}

/// One of our jobs (running, or a live orphan of a previous scheduler) as
/// seen on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Occupant {
    /// Declared VRAM per GPU in MiB; `None` for an undeclared job, which
    /// closes the GPU to everything else.
    pub declared_mib: Option<u64>,
    /// Highest VRAM observed for this job on this GPU (MiB); `None` when none
    /// of its processes has been seen with known memory yet.
    pub peak_mib: Option<u64>,
    /// VRAM its processes use on this GPU now (MiB); `None` when unknown.
    pub current_mib: Option<u64>,
    /// When it is expected to end (Unix seconds; docs/BEHAVIOUR.md
    /// "Backfill"); `None` when nothing tells, which backfill takes as
    /// never.
    pub ends_at: Option<f64>,
    /// `[exclusive]`: no other job of ours may join it on this GPU
    /// (docs/BEHAVIOUR.md "Placement").
    pub exclusive: bool,
}

impl Occupant {
    /// One of our running attempts, asked for as `request`, on one GPU:
    /// its highest and current VRAM there (MiB; `None` for not seen yet)
    /// and when it is expected to end (Unix seconds).
    pub fn of_running(
        request: &Request,
        peak_mib: Option<u64>,
        current_mib: Option<u64>,
        ends_at: Option<f64>,
    ) -> Occupant {
        Occupant {
            declared_mib: request.vram_mib,
            peak_mib,
            current_mib,
            ends_at,
            exclusive: request.exclusive,
        }
    }

    /// A job placed but not yet measured (a start this round, a backfill
    /// reservation), asked for as `request`, until `ends_at`.
    pub fn booked(request: &Request, ends_at: Option<f64>) -> Occupant {
        Occupant::of_running(request, None, None, ends_at)
    }
}

/// What placement needs to know about one GPU.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuLoad {
    /// NVML device index.
    pub index: u32,
    /// Total memory (MiB).
    pub total_mib: u64,
    /// Memory in use on the device now, by anyone (MiB).
    pub used_mib: u64,
    /// Σ of the observed per-process peaks (MiB) of the external processes
    /// present now, before the spike buffer.
    pub external_peak_sum_mib: u64,
    /// Our jobs on this GPU.
    pub occupants: Vec<Occupant>,
    /// MiB other schedulers booked on this GPU in the ledger beyond what
    /// their jobs already use here (docs/BEHAVIOUR.md "Sharing a box"); counted as external use.
    pub booked_mib: u64,
    /// The users behind [`GpuLoad::booked_mib`], for wait reasons.
    pub booked_by: Vec<String>,
    /// Users whose waiting job this GPU is kept for by fair share (their
    /// need is in [`GpuLoad::booked_mib`]; docs/BEHAVIOUR.md "Rules for a
    /// shared box").
    pub fair_share_held: Vec<String>,
    /// The part of [`GpuLoad::booked_mib`] kept for them (MiB).
    pub fair_share_held_mib: u64,
    /// Its utilisation over NVML's last sample period, percent, rounded
    /// to tens (so that the loads stay equal between samples); `None`
    /// when unknown.
    pub util_percent: Option<u32>,
}

/// The outcome of [`place`].
#[must_use = "a placement decides nothing until a start, end or wait is made of it"]
#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    /// Start now on these GPU indices, ascending.
    Start(Vec<u32>),
    /// Does not fit now; try again later (later jobs may backfill).
    NotNow,
    /// Could not start even if every allowed GPU were empty (docs/BEHAVIOUR.md "Order"); the reason is for the user.
    Infeasible(String),
}

/// What a job asks of placement. Each attempt's is journaled whole as
/// its `started` record's `request` (docs/BEHAVIOUR.md "The journal"), so an
/// adopted attempt keeps what it asked for, and a new field here reaches
/// the journal, its replay and adoption with no change there; a field a
/// record lacks takes its [`Default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Request {
    /// Declared VRAM per GPU in MiB, or `None` for an undeclared job.
    pub vram_mib: Option<u64>,
    /// Number of distinct GPUs, ≥ 1.
    pub gpus: u32,
    /// `on=`: the GPU indices it may use, as a bit mask (bit i = GPU i);
    /// `None` for any allowed GPU (docs/BEHAVIOUR.md "Queue policy").
    /// Not journaled: it only chooses where an attempt starts.
    #[serde(skip)]
    pub on_mask: Option<crate::model::GpuMask>,
    /// `[exclusive]`: it starts only on GPUs with no job of ours, and
    /// none joins it there while it runs (docs/BEHAVIOUR.md "Placement").
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub exclusive: bool,
}

impl Default for Request {
    /// One undeclared GPU anywhere: what a bare command line asks for
    /// (tests write `..Default::default()` for what they do not set).
    fn default() -> Request {
        Request::undeclared(1)
    }
}

impl Request {
    /// `vram_mib` MiB declared per GPU on `gpus` GPUs, any of them.
    pub const fn declared(vram_mib: u64, gpus: u32) -> Request {
        Request {
            vram_mib: Some(vram_mib),
            gpus,
            on_mask: None,
            exclusive: false,
        }
    }

    /// Nothing declared, on `gpus` GPUs, any of them.
    pub const fn undeclared(gpus: u32) -> Request {
        Request {
            vram_mib: None,
            gpus,
            on_mask: None,
            exclusive: false,
        }
    }

    /// Whether the job may use device `index`: its `on=` list names it
    /// or its GPU, and it is not a MIG instance when the job needs more
    /// than one GPU (CUDA shows a process one MIG instance only;
    /// docs/HARDWARE.md "MIG").
    pub fn may_use(&self, index: u32) -> bool {
        self.on_mask
            .is_none_or(|mask| crate::model::mask_covers(mask, index))
            && (self.gpus <= 1 || crate::model::mig_of(index).is_none())
    }
}

/// `ceil(value × (1 + buffer))` in MiB.
pub fn buffered_mib(value: u64, buffer: f64) -> u64 {
    (value as f64 * (1.0 + buffer)).ceil() as u64
}

/// The memory (MiB) our job holds on a GPU for placement (docs/BEHAVIOUR.md "Budget"):
/// its declaration while its observed peak stays within it, else the peak
/// with the spike buffer; never less than its current usage. A job that has
/// just started and shows no memory yet holds its full declaration. An
/// undeclared job holds what it uses (it closes the GPU anyway).
pub fn budget_mib(occupant: &Occupant, spike_buffer: f64) -> u64 {
    let current = occupant.current_mib.unwrap_or(0);
    let held = match (occupant.declared_mib, occupant.peak_mib) {
        (Some(declared), Some(peak)) if peak > declared => buffered_mib(peak, spike_buffer),
        (Some(declared), _) => declared,
        (None, peak) => peak.unwrap_or(0),
    };
    held.max(current)
}

/// Effective external usage (MiB) of a GPU (docs/BEHAVIOUR.md "Placement"): the larger of the
/// instantaneous usage not attributed to our jobs and the buffered Σ of the
/// external processes' observed peaks, plus what other schedulers booked
/// and do not use yet (docs/BEHAVIOUR.md "Sharing a box"). Memory of ours that could not be
/// attributed (unknown per-process memory) counts as external, which only
/// ever makes placement more careful.
pub fn effective_external_mib(gpu: &GpuLoad, spike_buffer: f64) -> u64 {
    let ours: u64 = gpu
        .occupants
        .iter()
        .filter_map(|o| o.current_mib)
        .fold(0, u64::saturating_add);
    let instantaneous = gpu.used_mib.saturating_sub(ours);
    instantaneous
        .max(buffered_mib(gpu.external_peak_sum_mib, spike_buffer))
        .saturating_add(gpu.booked_mib)
}

/// Effective headroom (MiB) for a new declared job (docs/BEHAVIOUR.md "Placement"): total −
/// effective external − Σ budgets of our jobs, floored at zero.
pub fn headroom_mib(gpu: &GpuLoad, spike_buffer: f64) -> u64 {
    let budgets: u64 = gpu
        .occupants
        .iter()
        .map(|o| budget_mib(o, spike_buffer))
        .fold(0, u64::saturating_add);
    gpu.total_mib
        .saturating_sub(effective_external_mib(gpu, spike_buffer))
        .saturating_sub(budgets)
}

/// Whether the GPU is fully idle: no job of ours and effective external
/// usage below the idle threshold (docs/BEHAVIOUR.md "Undeclared and exclusive jobs").
pub fn is_idle(gpu: &GpuLoad, opts: &PlaceOptions) -> bool {
    gpu.occupants.is_empty()
        && effective_external_mib(gpu, opts.spike_buffer) < opts.idle_threshold_mib
}

/// Decides where `request` may start now. `gpus` are the allowed GPUs only.
///
/// Rules (docs/BEHAVIOUR.md "Placement"): an undeclared job needs idle GPUs, lowest index first; a
/// declared job of E MiB needs headroom ≥ E + margin on each GPU, chosen
/// by `opts.policy` (spread: idle GPUs first, the least loaded, then best
/// fit, never joining a job of ours on a GPU computing flat out; pack: best
/// fit, the smallest sufficient headroom; ties by index),
/// the best-connected set first for several GPUs; a GPU running an
/// undeclared or `[exclusive]` job of ours is closed; an `[exclusive]`
/// request takes only GPUs with no job of ours, and `--exclusive` makes
/// every request so. A request that could not start even on empty GPUs
/// is infeasible.
pub fn place(request: &Request, gpus: &[GpuLoad], opts: &PlaceOptions) -> Placement {
    let wanted = request.gpus.max(1) as usize;
    if let Some(reason) = infeasible_reason(request, gpus, opts) {
        return Placement::Infeasible(reason);
    }
    let allowed: Vec<&GpuLoad> = gpus
        .iter()
        .filter(|g| request.may_use(g.index) && !is_drained(g.index, opts))
        .collect();
    let gpus = allowed.as_slice();
    // The GPUs with room, each with what choosing it costs.
    let fits: Vec<(u64, u32)> = match request.vram_mib {
        // Lowest index first, whatever the order of the snapshot.
        None => gpus
            .iter()
            .filter(|g| is_idle(g, opts))
            .map(|g| (0, g.index))
            .collect(),
        Some(vram) => {
            let need = vram.saturating_add(opts.margin_mib);
            gpus.iter()
                .filter(|g| !is_closed(g, opts))
                .filter(|g| !request.exclusive || g.occupants.is_empty())
                .filter(|g| opts.policy == PlacementPolicy::Pack || !is_saturated(g))
                .map(|g| (g, headroom_mib(g, opts.spike_buffer)))
                .filter(|&(_, headroom)| headroom >= need)
                .map(|(g, headroom)| (choice_cost(g, headroom, opts), g.index))
                .collect()
        }
    };
    let mut chosen = match opts.node_gpus {
        // Several nodes: the cheapest node that has room for all of it.
        Some(per_node) if wanted > 1 => {
            let mut nodes: BTreeMap<u32, Vec<(u64, u32)>> = BTreeMap::new();
            for fit in fits {
                nodes.entry(fit.1 / per_node.max(1)).or_default().push(fit);
            }
            nodes
                .into_values()
                .map(|fits| choose_set(fits, wanted, opts))
                .filter(|set| set.len() == wanted)
                .min_by_key(|set| set.iter().map(|(cost, _)| *cost).sum::<u64>())
                .unwrap_or_default()
        }
        _ => choose_set(fits, wanted, opts),
    }
    .into_iter()
    .map(|(_, index)| index)
    .collect::<Vec<u32>>();
    if chosen.len() < wanted {
        return Placement::NotNow;
    }
    chosen.sort_unstable();
    Placement::Start(chosen)
}

/// `wanted` GPUs of `fits` (cost, index): the best-connected set where
/// the links differ (docs/HARDWARE.md "Topology"), else the cheapest;
/// fewer when fewer fit.
fn choose_set(mut fits: Vec<(u64, u32)>, wanted: usize, opts: &PlaceOptions) -> Vec<(u64, u32)> {
    match &opts.topology {
        Some(topology) if wanted > 1 && topology.matters() => {
            let set = topology.best_set(&fits, wanted).unwrap_or_default();
            fits.retain(|(_, index)| set.contains(index));
            fits
        }
        _ => {
            fits.sort_unstable();
            fits.truncate(wanted);
            fits
        }
    }
}

/// The starvation hold (docs/BEHAVIOUR.md "Queue policy"): the GPUs held
/// for one pending job; no other job starts on them until it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StarvationHold {
    /// Index of the held-for job in the plan's requests.
    pub request_index: usize,
    /// The held GPUs (bit i = GPU i).
    pub gpu_mask: crate::model::GpuMask,
}

/// Places a queue one request at a time, in queue order, so that a
/// round over a long queue need not hold a placement per job; the round
/// ([`crate::policy::round::plan`]) drives it.
pub struct Planner<'a> {
    gpus: &'a mut [GpuLoad],
    /// What the job the starvation hold is for sees.
    opts: &'a PlaceOptions,
    /// What every other job sees: the held GPUs closed.
    others: PlaceOptions,
    /// What every other job whose family shares well sees
    /// ([`PlaceOptions::tightest_fit`]).
    sharing: PlaceOptions,
    /// Requests that did not fit since the last start: an equal one
    /// cannot fit either (the loads only grew).
    blocked: rustc_hash::FxHashSet<Request>,
    /// The last request found in `blocked`: a sweep's lines ask alike,
    /// and an equal one needs no hashing.
    last_blocked: Option<Request>,
}

impl<'a> Planner<'a> {
    /// A round over `gpus`; `held_mask` (bit i = GPU i), the starvation
    /// hold's GPUs, is closed to every job but the one it is for.
    pub fn new(
        gpus: &'a mut [GpuLoad],
        opts: &'a PlaceOptions,
        held_mask: Option<crate::model::GpuMask>,
    ) -> Self {
        let others = PlaceOptions {
            drained_mask: opts.drained_mask | held_mask.unwrap_or(0),
            ..opts.clone()
        };
        Planner {
            gpus,
            opts,
            sharing: PlaceOptions {
                tightest_fit: true,
                ..others.clone()
            },
            others,
            blocked: rustc_hash::FxHashSet::default(),
            last_blocked: None,
        }
    }

    /// The loads as the round's starts so far left them.
    pub fn loads(&self) -> &[GpuLoad] {
        self.gpus
    }

    /// Places the next request of the queue (`held_for`: it is the job
    /// the reservation is for) and books a start on the loads.
    pub fn next(&mut self, request: &Request, held_for: bool) -> Placement {
        let placement = self.try_place(request, held_for, 0);
        if let Placement::Start(chosen) = &placement {
            self.book(request, chosen, None, false);
        }
        placement
    }

    /// The options a job is placed under: the starvation hold's job's (`held_for`),
    /// or every other job's, with the held GPUs closed.
    pub fn options(&self, held_for: bool) -> &PlaceOptions {
        if held_for { self.opts } else { &self.others }
    }

    /// Where `request` would start now, with the GPUs of `avoid` closed
    /// too, without booking it ([`Planner::book`] does).
    pub fn try_place(
        &mut self,
        request: &Request,
        held_for: bool,
        avoid: crate::model::GpuMask,
    ) -> Placement {
        self.try_place_as(request, held_for, avoid, || false)
    }

    /// [`Planner::try_place`] for a job that, when `shares()` says its
    /// family shares well, is placed by best fit under spread
    /// ([`PlaceOptions::tightest_fit`]). Which GPUs fit does not depend on
    /// it, only which are chosen: `shares` is asked only of a job that
    /// can start.
    pub fn try_place_as(
        &mut self,
        request: &Request,
        held_for: bool,
        avoid: crate::model::GpuMask,
        shares: impl FnOnce() -> bool,
    ) -> Placement {
        if !held_for
            && (self.last_blocked.as_ref() == Some(request) || self.blocked.contains(request))
        {
            self.last_blocked = Some(*request);
            return Placement::NotNow;
        }
        let base = if held_for { self.opts } else { &self.others };
        let closed = |base: &PlaceOptions| PlaceOptions {
            drained_mask: base.drained_mask | avoid,
            ..base.clone()
        };
        let mut placement = if avoid == 0 {
            place(request, self.gpus, base)
        } else {
            place(request, self.gpus, &closed(base))
        };
        if matches!(placement, Placement::Start(_))
            && !held_for
            && self.others.policy == PlacementPolicy::Spread
            && shares()
        {
            placement = if avoid == 0 {
                place(request, self.gpus, &self.sharing)
            } else {
                place(request, self.gpus, &closed(&self.sharing))
            };
        }
        if placement == Placement::NotNow && !held_for && avoid == 0 {
            self.blocked.insert(*request);
        }
        placement
    }

    /// Books a start of `request` on `chosen`, holding its full
    /// declaration until `ends_at` (Unix seconds; `None`: unknown). Its
    /// GPUs count as computing flat out until a sample says otherwise, so
    /// that under `--placement spread` one round does not stack jobs that
    /// no sample has seen yet — unless `leaves_room`: its family is known
    /// to share well.
    pub fn book(
        &mut self,
        request: &Request,
        chosen: &[u32],
        ends_at: Option<f64>,
        leaves_room: bool,
    ) {
        self.blocked.clear();
        self.last_blocked = None;
        for gpu in self.gpus.iter_mut().filter(|g| chosen.contains(&g.index)) {
            if !leaves_room {
                gpu.util_percent = Some(100);
            }
            gpu.occupants.push(Occupant::booked(request, ends_at));
        }
    }
}

/// The GPUs `request` will fit on once our running jobs there end
/// (ignoring them, not other people's use), for a reservation; `None` when
/// it would not fit even then.
pub fn starvation_hold_gpus(
    request: &Request,
    gpus: &[GpuLoad],
    opts: &PlaceOptions,
) -> Option<Vec<u32>> {
    let without_ours: Vec<GpuLoad> = gpus
        .iter()
        .map(|g| GpuLoad {
            occupants: Vec::new(),
            used_mib: g.used_mib.saturating_sub(
                g.occupants
                    .iter()
                    .filter_map(|o| o.current_mib)
                    .fold(0, u64::saturating_add),
            ),
            ..g.clone()
        })
        .collect();
    match place(request, &without_ours, opts) {
        Placement::Start(chosen) => Some(chosen),
        _ => None,
    }
}

/// Whether `gpusched drain` (or a fault) closed device `index` to new
/// jobs, itself or through its GPU.
pub fn is_drained(index: u32, opts: &PlaceOptions) -> bool {
    crate::model::mask_covers(opts.drained_mask, index)
}

/// Whether a GPU is closed to new jobs: one of our undeclared or
/// `[exclusive]` jobs holds it (docs/BEHAVIOUR.md "Placement"), or
/// `--exclusive` and one of our jobs is on it.
pub fn is_closed(gpu: &GpuLoad, opts: &PlaceOptions) -> bool {
    gpu.occupants
        .iter()
        .any(|o| o.declared_mib.is_none() || o.exclusive)
        || (opts.exclusive && !gpu.occupants.is_empty())
}

/// Room for a new declared job on a GPU (MiB): its headroom, or 0 when it
/// is closed to new jobs.
pub fn open_headroom_mib(gpu: &GpuLoad, opts: &PlaceOptions) -> u64 {
    if is_closed(gpu, opts) {
        0
    } else {
        headroom_mib(gpu, opts.spike_buffer)
    }
}

/// Why `request` cannot start on `gpus` now (call when [`place`] said
/// [`Placement::NotNow`]).
pub fn wait_reason(request: &Request, gpus: &[GpuLoad], opts: &PlaceOptions) -> WaitReason {
    let wanted = request.gpus.max(1);
    if opts.drained_mask != 0 {
        let undrained = PlaceOptions {
            drained_mask: 0,
            ..opts.clone()
        };
        if let Placement::Start(chosen) = place(request, gpus, &undrained) {
            return WaitReason::Drained {
                gpus: chosen
                    .into_iter()
                    .filter(|&g| is_drained(g, opts))
                    .collect(),
            };
        }
    }
    if let Some(reason) = booked_reason(request, gpus, opts) {
        return reason;
    }
    if opts.policy == PlacementPolicy::Spread && request.vram_mib.is_some() {
        let pack = PlaceOptions {
            policy: PlacementPolicy::Pack,
            ..opts.clone()
        };
        if let Placement::Start(chosen) = place(request, gpus, &pack) {
            return WaitReason::Computing {
                gpus: chosen,
                measured: None,
            };
        }
    }
    if waits_for_exclusivity(request, gpus, opts) {
        return WaitReason::Exclusive { gpus: wanted };
    }
    match request.vram_mib {
        None => WaitReason::IdleGpu { gpus: wanted },
        Some(vram) => {
            let need_mib = vram.saturating_add(opts.margin_mib);
            type Rooms = Vec<(u32, u64)>;
            let (room, short): (Rooms, Rooms) = gpus
                .iter()
                .filter(|g| request.may_use(g.index) && !is_drained(g.index, opts))
                .map(|g| (g.index, open_headroom_mib(g, opts)))
                .partition(|&(_, mib)| mib >= need_mib);
            WaitReason::Headroom {
                need_mib,
                gpus: wanted,
                room: room.into_iter().map(|(index, _)| index).collect(),
                most_free: short
                    .into_iter()
                    .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0))),
            }
        }
    }
}

/// When other schedulers' bookings (or fair share's holds) alone keep
/// `request` from starting: whose, on which GPUs.
fn booked_reason(request: &Request, gpus: &[GpuLoad], opts: &PlaceOptions) -> Option<WaitReason> {
    if gpus.iter().all(|g| g.booked_mib == 0) {
        return None;
    }
    let unbooked: Vec<GpuLoad> = gpus
        .iter()
        .map(|g| GpuLoad {
            booked_mib: 0,
            ..g.clone()
        })
        .collect();
    if let Placement::Start(chosen) = place(request, &unbooked, opts) {
        let on_chosen = || gpus.iter().filter(|g| chosen.contains(&g.index));
        let mut users: Vec<String> = on_chosen()
            .flat_map(|g| g.booked_by.iter().cloned())
            .collect();
        users.sort();
        users.dedup();
        let mut kept_for: Vec<String> = on_chosen()
            .flat_map(|g| g.fair_share_held.iter().cloned())
            .collect();
        kept_for.sort();
        kept_for.dedup();
        // Kept for fair share alone: it would fit beside the bookings.
        if !kept_for.is_empty() {
            let without_holds: Vec<GpuLoad> = gpus
                .iter()
                .map(|g| GpuLoad {
                    booked_mib: g.booked_mib.saturating_sub(g.fair_share_held_mib),
                    fair_share_held: Vec::new(),
                    fair_share_held_mib: 0,
                    ..g.clone()
                })
                .collect();
            if let Placement::Start(free) = place(request, &without_holds, opts) {
                return Some(WaitReason::FairShare {
                    gpus: free,
                    users: kept_for,
                });
            }
        }
        return Some(WaitReason::Booked {
            gpus: chosen,
            users,
        });
    }
    None
}

/// Whether `request` (`[exclusive]`, declared) would start now beside
/// jobs of ours, so that only its exclusivity keeps it waiting.
fn waits_for_exclusivity(request: &Request, gpus: &[GpuLoad], opts: &PlaceOptions) -> bool {
    let sharing = Request {
        exclusive: false,
        ..*request
    };
    request.exclusive
        && request.vram_mib.is_some()
        && matches!(place(&sharing, gpus, opts), Placement::Start(_))
}

/// Why too few GPUs are allowed for `request`, as the tails of its
/// reason: the GPUs its `on=` names that this scheduler lacks, and the
/// MIG instances that cannot serve a job of several GPUs.
fn too_few_why(request: &Request, gpus: &[GpuLoad]) -> (String, String) {
    // GPUs its on= names that this scheduler does not have.
    let unknown: Vec<u32> = request
        .on_mask
        .map(crate::model::gpus_of_mask)
        .unwrap_or_default()
        .into_iter()
        .filter(|i| !gpus.iter().any(|g| g.index == *i))
        .collect();
    let mut present: Vec<u32> = gpus.iter().map(|g| g.index).collect();
    present.sort_unstable();
    let missing = if unknown.is_empty() {
        String::new()
    } else {
        format!(
            "; its on= names GPU {}, which {} not among this scheduler's GPUs ({})",
            crate::console::gpu_ids(&unknown, ", "),
            if unknown.len() == 1 { "is" } else { "are" },
            crate::console::gpu_ids(&present, ", ")
        )
    };
    // MIG instances that would count but for being MIG instances.
    let mig = gpus
        .iter()
        .filter(|g| crate::model::mig_of(g.index).is_some())
        .filter(|g| {
            Request {
                gpus: 1,
                ..*request
            }
            .may_use(g.index)
        })
        .count();
    let mig = if mig == 0 {
        String::new()
    } else {
        format!(
            "; {mig} MIG instance{} cannot serve it: CUDA shows a process one MIG instance only",
            if mig == 1 { "" } else { "s" }
        )
    };
    (missing, mig)
}

fn infeasible_reason(request: &Request, gpus: &[GpuLoad], opts: &PlaceOptions) -> Option<String> {
    let wanted = request.gpus.max(1) as usize;
    let allowed: Vec<&GpuLoad> = gpus.iter().filter(|g| request.may_use(g.index)).collect();
    if wanted > allowed.len() {
        let (missing, mig) = too_few_why(request, gpus);
        return Some(format!(
            "needs {} but only {} {} allowed{}{missing}{mig}",
            crate::words::count(wanted, "GPU"),
            allowed.len(),
            if allowed.len() == 1 { "is" } else { "are" },
            if request.on_mask.is_some() {
                " by its on= and --gpus"
            } else {
                ""
            }
        ));
    }
    if let Some(per_node) = opts.node_gpus.filter(|_| wanted > 1) {
        let mut on_node: BTreeMap<u32, usize> = BTreeMap::new();
        for gpu in &allowed {
            *on_node.entry(gpu.index / per_node.max(1)).or_default() += 1;
        }
        let most = on_node.values().copied().max().unwrap_or(0);
        if most < wanted {
            return Some(format!(
                "needs {wanted} GPUs on one node, and no node of the allocation has more than {most} allowed"
            ));
        }
    }
    let gpus = allowed.as_slice();
    let vram = request.vram_mib?;
    let need = vram.saturating_add(opts.margin_mib);
    let big_enough = gpus.iter().filter(|g| g.total_mib >= need).count();
    if big_enough < wanted {
        let largest = gpus.iter().map(|g| g.total_mib).max().unwrap_or(0);
        return Some(format!(
            "needs {vram} MiB + {} MiB margin = {need} MiB on {}, but {} (largest GPU has {largest} MiB)",
            opts.margin_mib,
            crate::words::count(wanted, "GPU"),
            if big_enough == 0 {
                "no allowed GPU is that large".to_string()
            } else {
                format!(
                    "only {} that large",
                    if big_enough == 1 {
                        "1 allowed GPU is".to_string()
                    } else {
                        format!("{big_enough} allowed GPUs are")
                    }
                )
            }
        ));
    }
    None
}

/// One job a placement round kept: its line in the jobs file, what it
/// asked for, and what placement said.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// Its index in the jobs file's specs.
    pub index: usize,
    /// What it asked for.
    pub request: Request,
    /// Start, infeasible, or not now.
    pub placement: Placement,
}

impl Planned {
    /// Whether it waits (placement said not now).
    pub fn waits(&self) -> bool {
        self.placement == Placement::NotNow
    }
}

pub mod topology;
pub use topology::Topology;

#[cfg(test)]
mod tests;
