//! Quotas (docs/BEHAVIOUR.md "Rules for a shared box"): how many GPUs,
//! how much booked memory and how many running jobs one user may hold
//! across all their schedulers and personal reservations. Pure arithmetic
//! over what the ledger says the user holds.

use crate::allocation::{Request, WaitReason};
use std::collections::BTreeSet;

/// One user's limits; `None` is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Quota {
    /// GPUs with a job or a reservation of this user.
    pub max_gpus: Option<u32>,
    /// MiB booked by this user, all GPUs together (a job's budget per
    /// GPU × its GPUs; an undeclared job books whole GPUs).
    #[serde(rename = "max_vram_mib")]
    pub max_vram_mib: Option<u64>,
    /// Jobs running at once.
    pub max_running: Option<u32>,
}

impl Quota {
    /// Whether any limit is set.
    pub fn is_limited(&self) -> bool {
        self.max_gpus.is_some() || self.max_vram_mib.is_some() || self.max_running.is_some()
    }
}

/// What one user holds now, box-wide.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct QuotaUse {
    /// The GPUs (indices) with a job or a reservation of theirs.
    pub gpus: BTreeSet<u32>,
    /// MiB booked (jobs and reservations).
    pub vram_mib: u64,
    /// Jobs running (reservations are not jobs).
    pub running: u32,
}

impl QuotaUse {
    /// Counts a job that starts on `gpus` booking `mib_per_gpu` on each.
    pub fn add(&mut self, gpus: &[u32], mib_per_gpu: u64) {
        self.gpus.extend(gpus.iter().copied());
        self.vram_mib = self
            .vram_mib
            .saturating_add(mib_per_gpu.saturating_mul(gpus.len() as u64));
        self.running += 1;
    }
}

/// The limit a job would go over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Over {
    /// `max_gpus`: GPUs held, the limit.
    Gpus(u32, u32),
    /// `max_vram`: MiB booked, the limit, MiB the job would add.
    Vram(u64, u64, u64),
    /// `max_running`: jobs running, the limit.
    Running(u32, u32),
}

impl std::fmt::Display for Over {
    /// As in a wait reason after "quota: alice ": `uses 2 of 2 GPUs`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Over::Gpus(used, limit) => {
                write!(f, "uses {used} of {}", crate::words::count(*limit, "GPU"))
            }
            Over::Vram(used, limit, more) => {
                write!(
                    f,
                    "books {used} of {limit} MiB (this job needs {more} more)"
                )
            }
            Over::Running(used, limit) => {
                write!(f, "runs {used} of {}", crate::words::count(*limit, "job"))
            }
        }
    }
}

/// MiB a request books per GPU: its declaration, or a whole GPU of
/// `gpu_mib` when it declared nothing.
pub fn booked_per_gpu(request: &Request, gpu_mib: u64) -> u64 {
    request.vram_mib.unwrap_or(gpu_mib)
}

/// Whether `request` may be placed now under `quota` given `held`, and
/// where: `Ok(None)` anywhere, `Ok(Some(mask))` only on the GPUs of the
/// bit mask ([`crate::model::gpu_mask`]: the GPUs the user holds already, when one
/// more would go over `max_gpus`), or the limit it would go over.
/// `gpu_mib` is one GPU's memory (MiB), for an undeclared job.
///
/// A multi-GPU job that would need more new GPUs than the user has left
/// is kept to GPUs already held: it may wait longer than it must, never
/// take the user over.
pub fn admit(
    quota: &Quota,
    held: &QuotaUse,
    request: &Request,
    gpu_mib: u64,
) -> Result<Option<crate::model::GpuMask>, Over> {
    if let Some(limit) = quota.max_running
        && held.running >= limit
    {
        return Err(Over::Running(held.running, limit));
    }
    let more = booked_per_gpu(request, gpu_mib).saturating_mul(u64::from(request.gpus.max(1)));
    if let Some(limit) = quota.max_vram_mib
        && held.vram_mib.saturating_add(more) > limit
    {
        return Err(Over::Vram(held.vram_mib, limit, more));
    }
    let Some(limit) = quota.max_gpus else {
        return Ok(None);
    };
    let holding = held.gpus.len() as u32;
    if holding.saturating_add(request.gpus.max(1)) <= limit {
        return Ok(None);
    }
    let mask = crate::model::gpu_mask(&held.gpus);
    if (held.gpus.len() as u32) < request.gpus.max(1) {
        return Err(Over::Gpus(holding, limit));
    }
    Ok(Some(mask))
}

/// Why `request` can never start under `quota` (it alone goes over a
/// limit), or `None`.
pub fn never_fits(user: &str, quota: &Quota, request: &Request, gpu_mib: u64) -> Option<String> {
    let gpus = request.gpus.max(1);
    if let Some(limit) = quota.max_gpus
        && gpus > limit
    {
        return Some(format!(
            "needs {}, but {user}'s quota is {limit}",
            crate::words::count(gpus, "GPU")
        ));
    }
    let mib = booked_per_gpu(request, gpu_mib).saturating_mul(u64::from(gpus));
    if let Some(limit) = quota.max_vram_mib
        && mib > limit
    {
        return Some(format!(
            "books {mib} MiB, but {user}'s quota is {limit} MiB"
        ));
    }
    None
}
/// Our user's quota over one placement round: the limits, and what the
/// user holds so far, the round's starts included.
pub struct QuotaRound {
    limits: Quota,
    held: QuotaUse,
    user: String,
    /// One GPU's memory (MiB), what an undeclared job books.
    gpu_mib: u64,
}

/// Where the quota lets a job be placed.
pub enum Admission {
    /// Anywhere placement finds room.
    Anywhere,
    /// Only as this request: kept to the GPUs the user holds already.
    Only(Request),
    /// Not now: it would go over a limit.
    Wait(WaitReason),
    /// Never: it alone goes over a limit (the job ends `infeasible`).
    Never(String),
}

impl QuotaRound {
    /// The round for `user` under `limits`, who holds `held` so far; one
    /// GPU has `gpu_mib` MiB.
    pub fn new(limits: Quota, held: QuotaUse, user: String, gpu_mib: u64) -> QuotaRound {
        QuotaRound {
            limits,
            held,
            user,
            gpu_mib,
        }
    }

    /// What the quota allows `request` now.
    pub fn admit(&self, request: &Request) -> Admission {
        if let Some(why) = never_fits(&self.user, &self.limits, request, self.gpu_mib) {
            return Admission::Never(format!("over the box quota: {why}"));
        }
        match admit(&self.limits, &self.held, request, self.gpu_mib) {
            Ok(None) => Admission::Anywhere,
            Ok(Some(mask)) => Admission::Only(Request {
                on_mask: Some(request.on_mask.unwrap_or(crate::model::GpuMask::MAX) & mask),
                ..*request
            }),
            Err(over) => Admission::Wait(self.reason(&over)),
        }
    }

    /// Why a job kept to the GPUs the user holds waits.
    pub fn over_gpus(&self) -> WaitReason {
        let limit = self.limits.max_gpus.unwrap_or(0);
        self.reason(&Over::Gpus(self.held.gpus.len() as u32, limit))
    }

    fn reason(&self, over: &Over) -> WaitReason {
        WaitReason::Quota {
            user: self.user.clone(),
            over: over.to_string(),
        }
    }

    /// Counts a start of `request` on `gpus`.
    pub fn add(&mut self, gpus: &[u32], request: &Request) {
        self.held.add(gpus, booked_per_gpu(request, self.gpu_mib));
    }
}
