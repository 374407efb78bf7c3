//! Backfill that never delays a waiting job's reservation
//! (docs/BEHAVIOUR.md "Backfill"), as Slurm's backfill scheduler does it:
//! the first waiting jobs in queue order (up to [`RESERVED_JOBS`]) each
//! get a reservation at their earliest expected start — the first expected
//! end of our running jobs or of an earlier reservation from which
//! placement gives them their GPUs for their whole expected run beside
//! everything booked then — and any job may start now only if it fits for
//! its whole expected run beside the reservations: on GPUs they do not
//! need, or ending before they start, or in the VRAM that stays free beside
//! them. A job without an expected end counts as running forever.
//! Conservative backfill (a reservation per waiting job, not only the
//! first: EASY); docs/PERFORMANCE.md "Backfill" has the measurement.
//! Pure: loads, requests and Unix seconds in, answers out.

use crate::allocation::{GpuLoad, Occupant, PlaceOptions, Placement, Request, place};
use crate::model::{GpuMask, gpu_mask};
use std::borrow::Cow;

/// Expected ends tried as a waiting job's start, earliest first: past
/// these, its start counts as unknown.
const ENDS_TRIED: usize = 64;

/// How many waiting jobs, first in queue order, get a reservation in a
/// round; later ones only start now where they delay none of these.
pub const RESERVED_JOBS: usize = 32;

/// The loads as they will be at `at` (Unix seconds): without the
/// occupants expected to end by then, whose current memory frees.
pub fn loads_at(loads: &[GpuLoad], at: f64) -> Vec<GpuLoad> {
    loads.iter().map(|g| gpu_at(g, at)).collect()
}

/// One GPU's load as it will be at `at` (Unix seconds), as [`loads_at`].
fn gpu_at(gpu: &GpuLoad, at: f64) -> GpuLoad {
    let ended = |o: &Occupant| o.ends_at.is_some_and(|end| end <= at);
    let freed = gpu
        .occupants
        .iter()
        .filter(|o| ended(o))
        .filter_map(|o| o.current_mib)
        .fold(0, u64::saturating_add);
    // Field by field, so the occupants are copied once.
    GpuLoad {
        index: gpu.index,
        total_mib: gpu.total_mib,
        used_mib: gpu.used_mib.saturating_sub(freed),
        external_peak_sum_mib: gpu.external_peak_sum_mib,
        occupants: gpu
            .occupants
            .iter()
            .filter(|o| !ended(o))
            .copied()
            .collect(),
        booked_mib: gpu.booked_mib,
        booked_by: gpu.booked_by.clone(),
        fair_share_held: gpu.fair_share_held.clone(),
        fair_share_held_mib: gpu.fair_share_held_mib,
        // Once some of its jobs have ended, how busy it is is not known.
        util_percent: if gpu.occupants.iter().any(ended) {
            None
        } else {
            gpu.util_percent
        },
    }
}

/// One waiting job's reservation.
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    /// The job's index in the jobs file's lines.
    pub job: usize,
    /// What it asks for.
    request: Request,
    /// When it is expected to start (Unix seconds).
    pub at: f64,
    /// When it is expected to end (Unix seconds; infinite when unknown).
    until: f64,
    /// The GPUs it gets then, ascending.
    pub gpus: Vec<u32>,
}

impl Reservation {
    /// Whether it holds its GPUs at `at` (Unix seconds).
    fn holds_at(&self, at: f64) -> bool {
        self.at <= at && at < self.until
    }

    /// Whether it holds any of `gpus` at some moment of [from, to).
    fn overlaps(&self, gpus: &[u32], from: f64, to: f64) -> bool {
        self.at < to && from < self.until && gpus.iter().any(|g| self.gpus.contains(g))
    }
}

/// The reservations of one round, in queue order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reservations {
    list: Vec<Reservation>,
    /// Waiting jobs a reservation was sought for, found or not.
    tried: usize,
    /// Requests refused a start, with their expected end's bits, and the
    /// reservation each would delay (job, start): within a round the
    /// loads and reservations only grow, so an equal request is refused
    /// again (a long queue of look-alike jobs costs a look-up each).
    refused: std::collections::HashMap<(Request, u64), (usize, f64)>,
}

impl Reservations {
    /// The reservations so far, in queue order.
    pub fn list(&self) -> &[Reservation] {
        &self.list
    }

    /// How many waiting jobs a reservation was sought for, found or not.
    pub fn tried(&self) -> usize {
        self.tried
    }

    /// Where `request` may start now (`now`, Unix seconds) and run until
    /// `until` (infinite: unknown) beside `loads` (our jobs as they run
    /// now, with their expected ends) without moving any reservation:
    /// `chosen` when it fits there for the whole run, else the GPUs
    /// placement gives it under `opts` with the reservations held, else
    /// `Err` with the first reservation it would delay (its job's line
    /// index and expected start).
    pub fn start_now(
        &mut self,
        request: &Request,
        chosen: &[u32],
        (now, until): (f64, f64),
        loads: &[GpuLoad],
        opts: &PlaceOptions,
    ) -> Result<Vec<u32>, (usize, f64)> {
        let window = Window {
            from: now,
            to: until,
            now,
        };
        if self.list.is_empty() {
            return Ok(chosen.to_vec());
        }
        let seen = (*request, until.to_bits());
        if let Some(&delayed) = self.refused.get(&seen) {
            return Err(delayed);
        }
        self.place(request, window, loads, opts, chosen)
            .ok_or_else(|| {
                let first = self
                    .list
                    .iter()
                    .find(|r| r.overlaps(chosen, now, until))
                    .unwrap_or(&self.list[0]);
                self.refused.insert(seen, (first.job, first.at));
                (first.job, first.at)
            })
    }

    /// Reserves for `job`, which asks for `request`, cannot start now
    /// (`now`, Unix seconds) and is expected to run `estimate_s` (`None`:
    /// for ever): the earliest expected end, of a running job on `loads`
    /// or of a reservation, from which it fits for its whole run. `None`
    /// when no known end frees enough (its start is unknown, and no later
    /// job is held for it).
    pub fn reserve(
        &mut self,
        job: usize,
        request: &Request,
        (now, estimate_s): (f64, Option<f64>),
        loads: &[GpuLoad],
        opts: &PlaceOptions,
    ) -> Option<&Reservation> {
        self.tried += 1;
        let mut ends: Vec<f64> = loads
            .iter()
            .flat_map(|g| g.occupants.iter().filter_map(|o| o.ends_at))
            .chain(self.list.iter().map(|r| r.until))
            .filter(|t| t.is_finite())
            .map(|t| t.max(now))
            .collect();
        ends.sort_by(f64::total_cmp);
        ends.dedup();
        let run_s = estimate_s.unwrap_or(f64::INFINITY);
        let (at, gpus) = ends.into_iter().take(ENDS_TRIED).find_map(|at| {
            let window = Window {
                from: at,
                to: at + run_s,
                now: f64::NEG_INFINITY,
            };
            Some((at, self.place(request, window, loads, opts, &[])?))
        })?;
        self.list.push(Reservation {
            job,
            request: *request,
            at,
            until: at + run_s,
            gpus,
        });
        self.list.last()
    }

    /// GPUs for `request` that hold it over `window`: `preferred` when
    /// the job fits on exactly those at the window's start and at every
    /// moment a reservation begins within it, else placement at the
    /// window's start, its GPUs checked at those moments, those that fail
    /// closed and placement tried again.
    fn place(
        &self,
        request: &Request,
        window: Window,
        loads: &[GpuLoad],
        opts: &PlaceOptions,
        preferred: &[u32],
    ) -> Option<Vec<u32>> {
        let first = self.loads_then(loads, window.from, window);
        let holds_later = |g: &u32| self.holds_later(request, *g, window, loads, opts);
        if !preferred.is_empty() {
            let kept = Request {
                gpus: preferred.len() as u32,
                on_mask: Some(gpu_mask(preferred)),
                ..*request
            };
            if matches!(place(&kept, &first, opts), Placement::Start(_))
                && preferred.iter().all(holds_later)
            {
                return Some(preferred.to_vec());
            }
        }
        let mut closed: GpuMask = 0;
        loop {
            let opts_now = PlaceOptions {
                drained_mask: opts.drained_mask | closed,
                ..opts.clone()
            };
            let Placement::Start(gpus) = place(request, &first, &opts_now) else {
                return None;
            };
            let failing: Vec<u32> = gpus.iter().copied().filter(|g| !holds_later(g)).collect();
            if failing.is_empty() {
                return Some(gpus);
            }
            closed |= gpu_mask(&failing);
        }
    }

    /// Whether one GPU's share of `request` (its per-GPU VRAM) fits on GPU
    /// `gpu` at each moment a reservation begins within `window` after its
    /// start.
    fn holds_later(
        &self,
        request: &Request,
        gpu: u32,
        window: Window,
        loads: &[GpuLoad],
        opts: &PlaceOptions,
    ) -> bool {
        let Some(load) = loads.iter().find(|g| g.index == gpu) else {
            return false;
        };
        let one = Request {
            gpus: 1,
            on_mask: Some(gpu_mask(&[gpu])),
            ..*request
        };
        self.list
            .iter()
            .filter(|r| window.from < r.at && r.at < window.to && r.gpus.contains(&gpu))
            .all(|r| {
                let then = [self.gpu_then(load, r.at, window)];
                matches!(place(&one, &then, opts), Placement::Start(_))
            })
    }

    /// The loads at `at`: our running jobs as they run now (at `now`) or
    /// as expected then, with the reservations that hold their GPUs then;
    /// the loads themselves when nothing changes them.
    fn loads_then<'l>(&self, loads: &'l [GpuLoad], at: f64, window: Window) -> Cow<'l, [GpuLoad]> {
        if at <= window.now && !self.list.iter().any(|r| r.holds_at(at)) {
            return Cow::Borrowed(loads);
        }
        Cow::Owned(loads.iter().map(|g| self.gpu_then(g, at, window)).collect())
    }

    /// One GPU's load at `at`, as [`Reservations::loads_then`] has it.
    fn gpu_then(&self, gpu: &GpuLoad, at: f64, window: Window) -> GpuLoad {
        let mut then = if at <= window.now {
            gpu.clone()
        } else {
            gpu_at(gpu, at)
        };
        for r in self
            .list
            .iter()
            .filter(|r| r.holds_at(at) && r.gpus.contains(&then.index))
        {
            then.occupants.push(Occupant::booked(
                &r.request,
                Some(r.until).filter(|t| t.is_finite()),
            ));
        }
        then
    }
}

/// A stretch of time a job would run (Unix seconds), and now: the loads
/// at or before `now` are the real ones, later ones are as expected.
#[derive(Clone, Copy)]
struct Window {
    from: f64,
    to: f64,
    now: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adds `request` as an occupant holding its full declaration on `chosen`
    /// until `ends_at`.
    fn hold(loads: &mut [GpuLoad], request: &Request, chosen: &[u32], ends_at: Option<f64>) {
        for gpu in loads.iter_mut().filter(|g| chosen.contains(&g.index)) {
            gpu.occupants.push(Occupant {
                declared_mib: request.vram_mib,
                ends_at: ends_at.filter(|t| t.is_finite()),
                ..Occupant::default()
            });
        }
    }

    const NOW: f64 = 1_000.0;

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

    /// Reserves for `job` on `loads` with `estimate_s`; its start and GPUs.
    fn reserve(
        r: &mut Reservations,
        job: usize,
        request: Request,
        estimate_s: Option<f64>,
        loads: &[GpuLoad],
    ) -> Option<(f64, Vec<u32>)> {
        let opts = PlaceOptions::default();
        r.reserve(job, &request, (NOW, estimate_s), loads, &opts)
            .map(|r| (r.at, r.gpus.clone()))
    }

    /// Whether `request` may start now on `chosen` until `until`.
    fn starts(
        r: &mut Reservations,
        request: Request,
        chosen: &[u32],
        until: Option<f64>,
        loads: &[GpuLoad],
    ) -> Result<Vec<u32>, (usize, f64)> {
        let run = (NOW, until.unwrap_or(f64::INFINITY));
        r.start_now(&request, chosen, run, loads, &PlaceOptions::default())
    }

    /// A GPU's utilisation holds until one of its jobs is expected to end:
    /// after that, how busy it is is not known (spread then does not take
    /// it for computing flat out in a reservation's future).
    #[test]
    fn utilisation_is_unknown_once_a_job_has_ended() {
        let gpu = GpuLoad {
            index: 0,
            total_mib: 24_000,
            util_percent: Some(100),
            occupants: vec![Occupant {
                declared_mib: Some(8_000),
                ends_at: Some(100.0),
                ..Occupant::default()
            }],
            ..GpuLoad::default()
        };
        assert_eq!(
            loads_at(std::slice::from_ref(&gpu), 50.0)[0].util_percent,
            Some(100)
        );
        assert_eq!(loads_at(&[gpu], 150.0)[0].util_percent, None);
    }

    #[test]
    fn a_waiting_job_is_reserved_at_the_first_end_that_frees_enough() {
        // Two 20G jobs end at 1006 and 1003; a two-GPU 20G job needs both.
        let loads = busy(&[(20_480, Some(NOW + 6.0)), (20_480, Some(NOW + 3.0))]);
        let mut r = Reservations::default();
        assert_eq!(
            reserve(&mut r, 2, Request::declared(20_480, 2), None, &loads),
            Some((NOW + 6.0, vec![0, 1]))
        );
        // One GPU is enough for a 10G job: the first end.
        let mut r = Reservations::default();
        assert_eq!(
            reserve(&mut r, 2, Request::declared(10_240, 1), Some(5.0), &loads),
            Some((NOW + 3.0, vec![1]))
        );
        // An end nobody knows frees nothing: no reservation, but tried.
        let loads = busy(&[(20_480, None), (20_480, Some(NOW + 3.0))]);
        let mut r = Reservations::default();
        assert_eq!(
            reserve(&mut r, 2, Request::declared(20_480, 2), None, &loads),
            None
        );
        assert!(r.list().is_empty());
        assert_eq!(r.tried(), 1);
    }

    #[test]
    fn a_job_starts_now_only_where_it_delays_no_reservation() {
        // GPU 1 is free now; the first waiting job needs both GPUs once
        // GPU 0's job ends at 1006.
        let mut loads = busy(&[(20_480, Some(NOW + 6.0)), (0, None)]);
        loads[1].occupants.clear();
        let mut r = Reservations::default();
        assert_eq!(
            reserve(&mut r, 0, Request::declared(20_480, 2), None, &loads),
            Some((NOW + 6.0, vec![0, 1]))
        );
        let short = Request::declared(3_072, 1);
        // Ends before the reserved start: fine.
        assert_eq!(
            starts(&mut r, short, &[1], Some(NOW + 3.0), &loads),
            Ok(vec![1])
        );
        assert_eq!(
            starts(&mut r, short, &[1], Some(NOW + 6.0), &loads),
            Ok(vec![1])
        );
        // Runs past it, or for ever: 3G beside its 20G does not fit.
        let delays = Err((0, NOW + 6.0));
        assert_eq!(starts(&mut r, short, &[1], Some(NOW + 9.0), &loads), delays);
        assert_eq!(starts(&mut r, short, &[1], None, &loads), delays);
        // A small one fits beside it: fine even for ever.
        let tiny = Request::declared(1_024, 1);
        assert_eq!(starts(&mut r, tiny, &[1], None, &loads), Ok(vec![1]));
        // GPUs the reservation does not need: fine, and a job placed on
        // its GPUs goes there instead. (GPU 2, 48000 MiB, holds a 20G job
        // for ever: best fit keeps the reservation on GPUs 0 and 1.)
        let mut three = loads.clone();
        let mut big = busy(&[(20_480, None)]).remove(0);
        big.index = 2;
        big.total_mib = 48_000;
        three.push(big);
        let mut r = Reservations::default();
        assert_eq!(
            reserve(&mut r, 0, Request::declared(20_480, 2), None, &three),
            Some((NOW + 6.0, vec![0, 1]))
        );
        assert_eq!(starts(&mut r, short, &[2], None, &three), Ok(vec![2]));
        assert_eq!(starts(&mut r, short, &[1], None, &three), Ok(vec![2]));
    }

    /// A reservation for an `[exclusive]` job keeps our other jobs off its
    /// GPUs from its start, however little they ask.
    #[test]
    fn an_exclusive_jobs_reservation_admits_no_job_of_ours_beside_it() {
        let mut loads = busy(&[(20_480, Some(NOW + 6.0)), (0, None)]);
        loads[1].occupants.clear();
        let exclusive = Request {
            exclusive: true,
            ..Request::declared(8_192, 2)
        };
        let mut r = Reservations::default();
        assert_eq!(
            reserve(&mut r, 0, exclusive, None, &loads),
            Some((NOW + 6.0, vec![0, 1]))
        );
        let tiny = Request::declared(1_024, 1);
        // Beside a plain 8G reservation this would fit for ever; beside
        // an exclusive one it may only end before the start.
        assert_eq!(
            starts(&mut r, tiny, &[1], None, &loads),
            Err((0, NOW + 6.0))
        );
        assert_eq!(
            starts(&mut r, tiny, &[1], Some(NOW + 3.0), &loads),
            Ok(vec![1])
        );
        let mut plain = Reservations::default();
        reserve(&mut plain, 0, Request::declared(8_192, 2), None, &loads);
        assert_eq!(starts(&mut plain, tiny, &[1], None, &loads), Ok(vec![1]));
    }

    #[test]
    fn every_waiting_job_gets_its_own_reservation_and_none_is_delayed() {
        // GPU 0: a 20G job until 1006; GPU 1: a 12G job until 1003.
        let loads = busy(&[(20_480, Some(NOW + 6.0)), (12_288, Some(NOW + 3.0))]);
        let mut r = Reservations::default();
        // The first waiting job (20G, 10 s) gets GPU 1 from 1003 to 1013.
        assert_eq!(
            reserve(&mut r, 0, Request::declared(20_480, 1), Some(10.0), &loads),
            Some((NOW + 3.0, vec![1]))
        );
        // The second (20G, 4 s) is not pushed behind it: GPU 0 from 1006.
        assert_eq!(
            reserve(&mut r, 1, Request::declared(20_480, 1), Some(4.0), &loads),
            Some((NOW + 6.0, vec![0]))
        );
        // The third (a two-GPU 20G job) after both: 1013, when the first
        // ends (the second ends at 1010).
        assert_eq!(
            reserve(&mut r, 2, Request::declared(20_480, 2), None, &loads),
            Some((NOW + 13.0, vec![0, 1]))
        );
        // A 3G job of 5 s fits now on neither GPU without delaying one:
        // it would delay the first reservation on GPU 1 (and the second
        // on GPU 0).
        let small = Request::declared(3_072, 1);
        assert_eq!(
            starts(&mut r, small, &[1], Some(NOW + 5.0), &loads),
            Err((0, NOW + 3.0))
        );
        // One of 2 s ends before either: fine.
        assert_eq!(
            starts(&mut r, small, &[1], Some(NOW + 2.0), &loads),
            Ok(vec![1])
        );
        // A refusal is remembered for equal requests.
        assert_eq!(
            starts(&mut r, small, &[0], Some(NOW + 5.0), &loads),
            Err((0, NOW + 3.0))
        );
    }

    #[test]
    fn starts_taken_in_count_for_the_next_job() {
        // A 10G job until 1006; an 18G job waits for it.
        let mut loads = busy(&[(10_240, Some(NOW + 6.0))]);
        let mut r = Reservations::default();
        assert_eq!(
            reserve(&mut r, 0, Request::declared(18_000, 1), None, &loads),
            Some((NOW + 6.0, vec![0]))
        );
        // 2G jobs that run for ever beside it: 24000 - 18000 - 512 MiB
        // leaves room for two (five would fit now).
        let small = Request::declared(2_048, 1);
        for _ in 0..2 {
            assert_eq!(starts(&mut r, small, &[0], None, &loads), Ok(vec![0]));
            hold(&mut loads, &small, &[0], None);
        }
        assert_eq!(
            starts(&mut r, small, &[0], None, &loads),
            Err((0, NOW + 6.0)),
            "a third would delay it"
        );
        // One that ends in time is not there at the reserved start.
        assert_eq!(
            starts(&mut r, small, &[0], Some(NOW + 2.0), &loads),
            Ok(vec![0])
        );
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
