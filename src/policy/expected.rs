//! Expected times (docs/BEHAVIOUR.md "Expected times"): when a running
//! job should end, when a GPU frees, and when a waiting job should start,
//! each with where the guess comes from. Pure: the scheduler hands in the
//! facts and a way to see the GPUs without some running jobs.
//!
//! A running job's end comes from its progress ETA when its log shows
//! one, else from the typical run time of its family's past ok runs, else
//! from its `timeout=`; a guess past the timeout is the timeout. A waiting
//! job's start is the first of those ends after which placement, taking
//! the jobs ahead of it in the queue first, gives it its GPUs — like
//! `squeue --start`. Nothing known is said as such (`None`), never made up.

use crate::allocation::{GpuLoad, PlaceOptions, Placement, Request};

/// Where an expected time comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The progress marker in the job's log and the rate so far.
    Progress,
    /// The typical run time of the family's past ok runs.
    History,
    /// The job's `timeout=`: the latest it can end.
    Timeout,
}

impl Source {
    /// The word the views and status.json use.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Progress => "progress",
            Source::History => "history",
            Source::Timeout => "timeout",
        }
    }
}

/// An expected moment (Unix seconds) and where it comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// When.
    pub at: f64,
    /// From what.
    pub source: Source,
}

/// The expected times of one moment, by job key and GPU index.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expectations {
    /// Running jobs' expected ends.
    pub running: std::collections::HashMap<String, Estimate>,
    /// Waiting jobs' expected starts.
    pub waiting: std::collections::HashMap<String, Estimate>,
    /// When each GPU with jobs of ours frees.
    pub gpus: std::collections::BTreeMap<u32, Estimate>,
}

/// Past ok runs of a family that make its typical run time.
pub const TYPICAL_RUNS: usize = 5;

/// The typical run time (seconds) of `durations`, the latest ok runs of a
/// family: their median; `None` without any.
pub fn typical_runtime(durations: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = durations
        .iter()
        .copied()
        .filter(|d| d.is_finite())
        .collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    })
}

/// A job expected to run its family's typical time is taken to run up to
/// `typical × .0 + .1` seconds: by backfill, when it asks to start before
/// a waiting job or is reserved for, and by a running job that is past its
/// typical time but not past this, which is expected to end any moment
/// (docs/BEHAVIOUR.md "Backfill", "Expected times").
pub const HISTORY_MARGIN: (f64, f64) = (1.25, 1.0);

/// `typical_s` seconds with [`HISTORY_MARGIN`].
pub fn with_margin(typical_s: f64) -> f64 {
    typical_s * HISTORY_MARGIN.0 + HISTORY_MARGIN.1
}

/// When a job that started at `started` (Unix seconds) should end, at
/// `now`: from its progress (`eta_s` seconds left), else its family's
/// `typical_s` run time — once it ran longer, any moment now (`now`),
/// until it ran longer than that with [`HISTORY_MARGIN`], the time
/// backfill gave it when it started it —, else its `timeout_s`; never past
/// the timeout. So a job a little late keeps the end backfill counted on,
/// instead of jumping to its timeout and moving every reservation behind
/// it (which let more jobs backfill and delay the job waiting for them).
pub fn running_end(
    now: f64,
    started: f64,
    eta_s: Option<f64>,
    typical_s: Option<f64>,
    timeout_s: Option<f64>,
) -> Option<Estimate> {
    let deadline = timeout_s.map(|t| started + t);
    let guess = eta_s
        .filter(|e| e.is_finite() && *e >= 0.0)
        .map(|e| Estimate {
            at: now + e,
            source: Source::Progress,
        })
        .or_else(|| {
            typical_s
                .filter(|t| started + with_margin(*t) > now)
                .map(|t| Estimate {
                    at: (started + t).max(now),
                    source: Source::History,
                })
        });
    match (guess, deadline) {
        (Some(guess), Some(deadline)) if deadline < guess.at => Some(Estimate {
            at: deadline,
            source: Source::Timeout,
        }),
        (Some(guess), _) => Some(guess),
        (None, Some(deadline)) => Some(Estimate {
            at: deadline,
            source: Source::Timeout,
        }),
        (None, None) => None,
    }
}

/// When a GPU frees: the latest expected end of the jobs on it; `None`
/// when one of them has no expected end. A GPU with no job of ours is
/// free now (not asked).
pub fn gpu_free(ends: &[Option<Estimate>]) -> Option<Estimate> {
    let mut latest: Option<Estimate> = None;
    for end in ends {
        let end = (*end)?;
        if latest.is_none_or(|l| end.at > l.at) {
            latest = Some(end);
        }
    }
    latest
}

/// When each of `waiting` (requests in queue order) should start: at the
/// first expected end among `ends` (one per running job, in the order
/// `loads_without` takes them) after which it is placed, the jobs ahead
/// of it placed first. `loads_without(ended)` gives the GPUs as they
/// would be without the running jobs `ended` (indices into `ends`).
/// Jobs that do not start before the last known end get `None`; so do
/// jobs that could start now (placement will start them).
pub fn waiting_starts(
    ends: &[Option<Estimate>],
    loads_without: &dyn Fn(&[usize]) -> Vec<GpuLoad>,
    waiting: &[Request],
    opts: &PlaceOptions,
) -> Vec<Option<Estimate>> {
    let mut order: Vec<(usize, Estimate)> = ends
        .iter()
        .enumerate()
        .filter_map(|(i, end)| Some((i, (*end)?)))
        .collect();
    order.sort_by(|a, b| a.1.at.total_cmp(&b.1.at));
    let mut starts: Vec<Option<Estimate>> = vec![None; waiting.len()];
    let mut ended = Vec::new();
    for (i, end) in order {
        ended.push(i);
        let mut loads = loads_without(&ended);
        let placements = crate::policy::round::plan_queue(waiting, &mut loads, opts);
        for (start, placement) in starts.iter_mut().zip(&placements) {
            if start.is_none() && matches!(placement, Placement::Start(_)) {
                *start = Some(end);
            }
        }
        if starts.iter().all(Option::is_some) {
            break;
        }
    }
    starts
}

/// What each family's latest ended attempt showed of its GPU use, for
/// whether its jobs share a GPU well (docs/BEHAVIOUR.md "Spread or
/// pack"): its mean utilisation over the attempt, 0 when it ended before
/// any sample (a tiny job). Kept as jobs end.
#[derive(Debug, Default)]
pub struct ComputeLoads {
    /// The latest attempt's mean utilisation of each family (percent).
    pub by_family: std::collections::HashMap<String, u32>,
    /// Each family's latest ok run times alone on their GPUs and sharing
    /// one with another job of ours (seconds).
    pub runs: std::collections::HashMap<String, SharingRuns>,
}

/// A family's latest ok run times (seconds), alone and sharing, at most
/// [`TYPICAL_RUNS`] of each.
#[derive(Debug, Default)]
pub struct SharingRuns {
    /// Runs that had their GPUs to themselves (of our jobs).
    pub alone: std::collections::VecDeque<f64>,
    /// Runs that shared a GPU with another of our jobs at some moment.
    pub shared: std::collections::VecDeque<f64>,
}

/// How much longer (typical shared ÷ typical alone) a family's runs may
/// take when sharing a GPU before it is spread: under 1.25× sharing pays
/// (two jobs on one GPU finish sooner than one after the other up to
/// 2×, and a quarter covers the noise of run times).
pub const SLOWS_WHEN_SHARING: f64 = 1.25;

/// The shortest typical run alone (seconds) whose slowdown counts: below
/// it a run is mostly its start, and a flood of tiny jobs is never spread
/// for noise.
pub const SLOWDOWN_MIN_RUN_S: f64 = 1.0;

impl ComputeLoads {
    /// Records an ended attempt of `family` with mean utilisation
    /// `avg_util` (percent; `None`: it ended before any sample).
    pub fn note(&mut self, family: String, avg_util: Option<f64>) {
        let util = avg_util.map_or(0, |u| u.clamp(0.0, 100.0).round() as u32);
        self.by_family.insert(family, util);
    }

    /// Records an ok run of `family` that took `duration_s` seconds,
    /// `shared` or alone on its GPUs.
    pub fn note_run(&mut self, family: String, duration_s: f64, shared: bool) {
        let runs = self.runs.entry(family).or_default();
        let list = if shared {
            &mut runs.shared
        } else {
            &mut runs.alone
        };
        if list.len() == TYPICAL_RUNS {
            list.pop_front();
        }
        list.push_back(duration_s);
    }

    /// How many times longer `family`'s typical run takes sharing a GPU
    /// than alone, once at least two of each ended ok and its typical run
    /// alone is at least [`SLOWDOWN_MIN_RUN_S`].
    pub fn slowdown(&self, family: &str) -> Option<f64> {
        let runs = self.runs.get(family)?;
        if runs.alone.len() < 2 || runs.shared.len() < 2 {
            return None;
        }
        let typical = |list: &std::collections::VecDeque<f64>| {
            typical_runtime(&list.iter().copied().collect::<Vec<_>>())
        };
        let alone = typical(&runs.alone).filter(|&t| t >= SLOWDOWN_MIN_RUN_S)?;
        Some(typical(&runs.shared)? / alone)
    }

    /// Whether a job of `family` is known to leave its GPU room to share
    /// (docs/BEHAVIOUR.md "Spread or pack"): measured run times decide
    /// first — it shares when its runs sharing a GPU took under
    /// [`SLOWS_WHEN_SHARING`]× its runs alone — else its latest attempt
    /// averaged under [`crate::allocation::SATURATED_UTIL`] or ended
    /// before any sample. `false` for a family nothing is known of (it
    /// may compute flat out until a sample says otherwise).
    pub fn leaves_room(&self, family: &str) -> bool {
        if let Some(ratio) = self.slowdown(family) {
            return ratio < SLOWS_WHEN_SHARING;
        }
        self.by_family
            .get(family)
            .is_some_and(|&util| util < crate::allocation::SATURATED_UTIL)
    }
}

/// The latest ok run times of each family (seconds), for typical run
/// times; filled from the journal on first use, then kept as jobs end.
#[derive(Debug, Default)]
pub struct RunTimes {
    /// Whether they were filled from the journal.
    pub loaded: bool,
    /// The latest runs of each family, oldest first.
    pub by_family: std::collections::HashMap<String, std::collections::VecDeque<f64>>,
    /// The longest ok run (seconds) of any family of each sibling group
    /// ([`crate::policy::learned::siblings_of`]).
    pub longest_by_siblings: std::collections::HashMap<String, f64>,
}

impl RunTimes {
    /// Adds an ok run of `family` that took `duration_s` seconds.
    pub fn add(&mut self, family: String, duration_s: f64) {
        if let Some(siblings) = crate::policy::learned::siblings_of(&family) {
            let longest = self.longest_by_siblings.entry(siblings).or_insert(0.0);
            *longest = longest.max(duration_s);
        }
        let runs = self.by_family.entry(family).or_default();
        if runs.len() == TYPICAL_RUNS {
            runs.pop_front();
        }
        runs.push_back(duration_s);
    }

    /// The typical run time of `family`, if it ever ran ok.
    pub fn typical(&self, family: &str) -> Option<f64> {
        let runs: Vec<f64> = self.by_family.get(family)?.iter().copied().collect();
        typical_runtime(&runs)
    }

    /// The longest ok run (seconds) among the siblings of `family`
    /// ([`crate::policy::learned::siblings_of`]), if any ran.
    pub fn longest_sibling(&self, family: &str) -> Option<f64> {
        let siblings = crate::policy::learned::siblings_of(family)?;
        self.longest_by_siblings.get(&siblings).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocation::Occupant;

    const NOW: f64 = 1000.0;

    #[test]
    fn a_family_leaves_room_once_its_latest_attempt_stayed_under_the_mark() {
        let mut loads = ComputeLoads::default();
        assert!(
            !loads.leaves_room("f"),
            "nothing known: it may compute flat out"
        );
        loads.note("f".into(), None);
        assert!(loads.leaves_room("f"), "ended before any sample");
        loads.note("f".into(), Some(97.0));
        assert!(!loads.leaves_room("f"), "its latest ran flat out");
        loads.note("f".into(), Some(30.0));
        assert!(loads.leaves_room("f"));
        assert!(!loads.leaves_room("g"));
    }

    #[test]
    fn run_times_sharing_against_alone_decide_before_utilisation() {
        let mut loads = ComputeLoads::default();
        // Utilisation says it leaves room...
        loads.note("f".into(), Some(40.0));
        assert!(loads.leaves_room("f"));
        // ...but its runs took 1.9x as long sharing: spread it.
        for (d, shared) in [(10.0, false), (10.4, false), (19.0, true), (19.2, true)] {
            loads.note_run("f".into(), d, shared);
        }
        assert_eq!(loads.slowdown("f"), Some(19.1 / 10.2));
        assert!(!loads.leaves_room("f"), "1.9x slower sharing");
        // A family that computes flat out yet loses nothing sharing
        // (its kernels leave gaps): pack it.
        loads.note("g".into(), Some(97.0));
        for (d, shared) in [(10.0, false), (10.0, false), (11.0, true), (11.5, true)] {
            loads.note_run("g".into(), d, shared);
        }
        assert!(loads.leaves_room("g"), "1.1x: sharing pays");
        // One run of each, or tiny runs: not enough to say.
        loads.note("h".into(), None);
        for (d, shared) in [(0.02, false), (0.03, false), (0.08, true), (0.09, true)] {
            loads.note_run("h".into(), d, shared);
        }
        assert_eq!(loads.slowdown("h"), None, "tiny runs are their start");
        assert!(loads.leaves_room("h"), "a flood of tiny jobs still packs");
    }

    #[test]
    fn a_running_job_ends_by_progress_then_history_then_timeout() {
        let e = |at, source| Some(Estimate { at, source });
        type Row = (Option<f64>, Option<f64>, Option<f64>, Option<Estimate>);
        let table: [Row; 10] = [
            // eta, typical, timeout → expected end
            (Some(60.0), Some(500.0), None, e(1060.0, Source::Progress)),
            (None, Some(500.0), None, e(1400.0, Source::History)),
            (None, Some(500.0), Some(7200.0), e(1400.0, Source::History)),
            // 100 s in: a little late (90 s typical, 113.5 s with the
            // margin) is any moment now, with a timeout or without; later
            // than the margin (50 s typical, 63.5 s) leaves the timeout,
            // or nothing.
            (None, Some(90.0), Some(600.0), e(NOW, Source::History)),
            (None, Some(90.0), None, e(NOW, Source::History)),
            (None, Some(50.0), Some(600.0), e(1500.0, Source::Timeout)),
            (None, Some(50.0), None, None),
            (None, None, Some(600.0), e(1500.0, Source::Timeout)),
            // A guess past the timeout is the timeout.
            (Some(9000.0), None, Some(600.0), e(1500.0, Source::Timeout)),
            (None, None, None, None),
        ];
        for (eta, typical, timeout, expected) in table {
            assert_eq!(
                running_end(NOW, 900.0, eta, typical, timeout),
                expected,
                "eta {eta:?} typical {typical:?} timeout {timeout:?}"
            );
        }
        assert_eq!(typical_runtime(&[30.0, 10.0, 20.0]), Some(20.0));
        assert_eq!(typical_runtime(&[10.0, 20.0]), Some(15.0));
        assert_eq!(typical_runtime(&[]), None);
    }

    #[test]
    fn a_gpu_frees_with_its_last_job_and_not_when_one_is_unknown() {
        let at = |at| {
            Some(Estimate {
                at,
                source: Source::History,
            })
        };
        assert_eq!(gpu_free(&[at(5.0), at(9.0)]).map(|e| e.at), Some(9.0));
        assert_eq!(gpu_free(&[at(5.0), None]), None);
    }

    /// One GPU of 24000 MiB holding the running jobs of `budgets` (MiB).
    fn loads(budgets: &[u64], without: &[usize]) -> Vec<GpuLoad> {
        let occupants: Vec<Occupant> = budgets
            .iter()
            .enumerate()
            .filter(|(i, _)| !without.contains(i))
            .map(|(_, mib)| Occupant {
                declared_mib: Some(*mib),
                ..Default::default()
            })
            .collect();
        vec![GpuLoad {
            index: 0,
            total_mib: 24000,
            used_mib: 0,
            external_peak_sum_mib: 0,
            occupants,
            booked_mib: 0,
            booked_by: Vec::new(),
            ..Default::default()
        }]
    }

    #[test]
    fn a_waiting_job_starts_when_enough_frees_after_the_jobs_ahead() {
        let budgets = [12000, 8000];
        let ends = [
            Some(Estimate {
                at: 2000.0,
                source: Source::History,
            }),
            Some(Estimate {
                at: 1500.0,
                source: Source::Progress,
            }),
        ];
        let request = |mib| Request::declared(mib, 1);
        let opts = PlaceOptions {
            policy: crate::allocation::PlacementPolicy::Pack,
            ..PlaceOptions::default()
        };
        // 4000 free now. 10000 fits once the 8000 job ends (1500); a
        // second 10000 behind it needs the 12000 job gone too (2000); a
        // 30000 never fits (nothing known).
        let starts = waiting_starts(
            &ends,
            &|without| loads(&budgets, without),
            &[request(10000), request(10000), request(30000)],
            &opts,
        );
        assert_eq!(
            starts[0].map(|e| (e.at, e.source)),
            Some((1500.0, Source::Progress))
        );
        assert_eq!(
            starts[1].map(|e| (e.at, e.source)),
            Some((2000.0, Source::History))
        );
        assert_eq!(starts[2], None);
        // An unknown end frees nothing.
        let starts = waiting_starts(
            &[None, ends[1]],
            &|without| loads(&budgets, without),
            &[request(14000)],
            &opts,
        );
        assert_eq!(starts[0], None);
    }
}
