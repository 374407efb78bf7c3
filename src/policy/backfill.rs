//! Backfill that never delays the head job (docs/BEHAVIOUR.md
//! "Backfill"), as Slurm's backfill scheduler does it: the first job in
//! queue order that cannot start now (the head job) gets a reservation at
//! its earliest expected start — the first expected end of our running
//! jobs after which placement gives it its GPUs — and a later job may
//! start now only if that start stays where it is: the job goes on GPUs
//! the reservation does not need, or it is expected to end before the
//! reserved start, or it fits in the VRAM that stays free beside the head
//! job then. A job without an expected end counts as running forever.
//! One reservation per round (EASY backfill); docs/PERFORMANCE.md says
//! why not more. Pure: loads, requests and Unix seconds in, answers out.

use crate::allocation::{GpuLoad, Occupant, PlaceOptions, Placement, Request, place};
use crate::model::GpuMask;

/// Expected ends tried as the head job's start, earliest first: past
/// these, its start counts as unknown.
const ENDS_TRIED: usize = 64;

/// The loads as they will be at `at` (Unix seconds): without the
/// occupants expected to end by then, whose current memory frees.
pub fn loads_at(loads: &[GpuLoad], at: f64) -> Vec<GpuLoad> {
    loads
        .iter()
        .map(|g| {
            let (gone, stay): (Vec<Occupant>, Vec<Occupant>) = g
                .occupants
                .iter()
                .partition(|o| o.ends_at.is_some_and(|end| end <= at));
            let freed = gone
                .iter()
                .filter_map(|o| o.current_mib)
                .fold(0, u64::saturating_add);
            GpuLoad {
                used_mib: g.used_mib.saturating_sub(freed),
                occupants: stay,
                ..g.clone()
            }
        })
        .collect()
}

/// The head job's reservation in one round.
#[derive(Debug, Clone, PartialEq)]
pub struct Shadow {
    /// The head job's index in the jobs file's lines.
    pub head: usize,
    /// What it asks for, kept to the reserved GPUs.
    request: Request,
    /// When it is expected to start (Unix seconds).
    pub at: f64,
    /// The GPUs it gets then, ascending.
    pub gpus: Vec<u32>,
    /// The loads at [`Shadow::at`], with the jobs started since that run
    /// past it.
    loads: Vec<GpuLoad>,
}

impl Shadow {
    /// The reservation of the head job `head` (line index), which asks
    /// for `request` and cannot start on `loads` now: the earliest
    /// expected end of an occupant after which it is placed; `None` when
    /// no known end frees enough (its start is unknown).
    pub fn of(
        head: usize,
        request: &Request,
        loads: &[GpuLoad],
        opts: &PlaceOptions,
    ) -> Option<Shadow> {
        let mut ends: Vec<f64> = loads
            .iter()
            .flat_map(|g| g.occupants.iter().filter_map(|o| o.ends_at))
            .filter(|t| t.is_finite())
            .collect();
        ends.sort_by(f64::total_cmp);
        ends.dedup();
        ends.into_iter().take(ENDS_TRIED).find_map(|at| {
            let then = loads_at(loads, at);
            let Placement::Start(gpus) = place(request, &then, opts) else {
                return None;
            };
            Some(Shadow {
                head,
                request: Request {
                    on_mask: Some(crate::model::gpu_mask(&gpus)),
                    ..*request
                },
                at,
                gpus,
                loads: then,
            })
        })
    }

    /// The reserved GPUs as a mask.
    pub fn mask(&self) -> GpuMask {
        crate::model::gpu_mask(&self.gpus)
    }

    /// Whether `request` may start now on `chosen`, expected to end at
    /// `ends_at` (Unix seconds; `None`: never known), without moving the
    /// head job's start: it avoids the reserved GPUs, or it ends by the
    /// reserved start, or the head job still fits on its GPUs beside it.
    pub fn allows(
        &self,
        request: &Request,
        chosen: &[u32],
        ends_at: Option<f64>,
        opts: &PlaceOptions,
    ) -> bool {
        if chosen.iter().all(|g| !self.gpus.contains(g)) {
            return true;
        }
        if ends_at.is_some_and(|end| end <= self.at) {
            return true;
        }
        let mut then = self.loads.clone();
        hold(&mut then, request, chosen);
        matches!(place(&self.request, &then, opts), Placement::Start(_))
    }

    /// Takes in a start that [`Shadow::allows`]: one that runs past the
    /// reserved start holds its declaration there.
    pub fn add(&mut self, request: &Request, chosen: &[u32], ends_at: Option<f64>) {
        if ends_at.is_none_or(|end| end > self.at) {
            hold(&mut self.loads, request, chosen);
        }
    }
}

/// Adds `request` as an occupant holding its full declaration on `chosen`.
fn hold(loads: &mut [GpuLoad], request: &Request, chosen: &[u32]) {
    for gpu in loads.iter_mut().filter(|g| chosen.contains(&g.index)) {
        gpu.occupants.push(Occupant {
            declared_mib: request.vram_mib,
            ..Occupant::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: f64 = 1_000.0;

    fn declared(vram_mib: u64, gpus: u32) -> Request {
        Request {
            vram_mib: Some(vram_mib),
            gpus,
            on_mask: None,
        }
    }

    /// GPUs of 24000 MiB, each with one job of ours holding `mib` until
    /// `ends_at`.
    fn busy(jobs: &[(u64, Option<f64>)]) -> Vec<GpuLoad> {
        jobs.iter()
            .enumerate()
            .map(|(index, &(mib, ends_at))| GpuLoad {
                index: index as u32,
                total_mib: 24_000,
                used_mib: mib,
                occupants: vec![Occupant {
                    declared_mib: Some(mib),
                    current_mib: Some(mib),
                    ends_at,
                    ..Occupant::default()
                }],
                ..GpuLoad::default()
            })
            .collect()
    }

    #[test]
    fn the_head_job_starts_at_the_first_end_that_frees_enough() {
        // Two 20G jobs end at 1006 and 1003; a two-GPU 20G job needs both.
        let loads = busy(&[(20_480, Some(NOW + 6.0)), (20_480, Some(NOW + 3.0))]);
        let opts = PlaceOptions::default();
        let shadow = Shadow::of(2, &declared(20_480, 2), &loads, &opts).unwrap();
        assert_eq!(
            (shadow.head, shadow.at, shadow.gpus.clone()),
            (2, NOW + 6.0, vec![0, 1])
        );
        // One GPU is enough for a 10G job: the first end.
        let shadow = Shadow::of(2, &declared(10_240, 1), &loads, &opts).unwrap();
        assert_eq!((shadow.at, shadow.gpus), (NOW + 3.0, vec![1]));
        // An end nobody knows frees nothing.
        let loads = busy(&[(20_480, None), (20_480, Some(NOW + 3.0))]);
        assert_eq!(Shadow::of(2, &declared(20_480, 2), &loads, &opts), None);
    }

    #[test]
    fn a_later_job_starts_only_where_it_does_not_delay_the_head() {
        let opts = PlaceOptions::default();
        // GPU 1 is free now; the head needs both GPUs once GPU 0's job ends
        // at 1006.
        let mut loads = busy(&[(20_480, Some(NOW + 6.0)), (0, None)]);
        loads[1].occupants.clear();
        let shadow = Shadow::of(0, &declared(20_480, 2), &loads, &opts).unwrap();
        assert_eq!(shadow.at, NOW + 6.0);
        let short = declared(3_072, 1);
        // Ends before the reserved start: fine.
        assert!(shadow.allows(&short, &[1], Some(NOW + 3.0), &opts));
        assert!(shadow.allows(&short, &[1], Some(NOW + 6.0), &opts));
        // Runs past it, or for ever: 3G beside the head's 20G does not fit.
        assert!(!shadow.allows(&short, &[1], Some(NOW + 9.0), &opts));
        assert!(!shadow.allows(&short, &[1], None, &opts));
        // A small one fits beside the head job: fine even for ever.
        let tiny = declared(1_024, 1);
        assert!(shadow.allows(&tiny, &[1], None, &opts));
        // GPUs the reservation does not need: fine.
        // (GPU 2, 48000 MiB, holds a 20G job for ever: best fit keeps the
        // head on GPUs 0 and 1.)
        let mut three = loads.clone();
        let mut big = busy(&[(20_480, None)]).remove(0);
        big.index = 2;
        big.total_mib = 48_000;
        three.push(big);
        let shadow = Shadow::of(0, &declared(20_480, 2), &three, &opts).unwrap();
        assert_eq!(shadow.gpus, vec![0, 1]);
        assert!(shadow.allows(&short, &[2], None, &opts));
    }

    #[test]
    fn starts_taken_in_count_for_the_next_job() {
        let opts = PlaceOptions::default();
        let mut loads = busy(&[(20_480, Some(NOW + 6.0)), (0, None)]);
        loads[1].occupants.clear();
        let mut shadow = Shadow::of(0, &declared(18_000, 1), &loads, &opts).unwrap();
        assert_eq!(shadow.gpus, vec![0], "ties go to the lowest index");
        // 2G jobs that run for ever beside it: 24000 - 18000 - 512 MiB
        // leaves room for two.
        let small = declared(2_048, 1);
        assert!(shadow.allows(&small, &[0], None, &opts));
        shadow.add(&small, &[0], None);
        assert!(shadow.allows(&small, &[0], None, &opts));
        shadow.add(&small, &[0], None);
        assert!(
            !shadow.allows(&small, &[0], None, &opts),
            "a third would delay it"
        );
        // One that ends in time is not held at the reserved start.
        shadow.add(&small, &[0], Some(NOW + 1.0));
        assert!(!shadow.allows(&small, &[0], None, &opts));
        assert!(shadow.allows(&small, &[0], Some(NOW + 2.0), &opts));
    }

    #[test]
    fn loads_at_a_moment_free_what_ends_by_then() {
        let loads = busy(&[(20_480, Some(NOW + 6.0)), (10_000, None)]);
        let then = loads_at(&loads, NOW + 6.0);
        assert!(then[0].occupants.is_empty());
        assert_eq!(then[0].used_mib, 0);
        assert_eq!(then[1].occupants.len(), 1);
        assert_eq!(then[1].used_mib, 10_000);
        assert_eq!(loads_at(&loads, NOW + 5.0)[0].occupants.len(), 1);
    }
}
