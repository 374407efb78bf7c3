//! Preemption (docs/BEHAVIOUR.md "Queue policy"): a pending job that cannot start now may stop
//! running `preemptible` jobs that stand *below* it in the jobs file, if
//! that lets it start — the fewest jobs, then the least run time lost.
//! Never a job above it, never one that is not `preemptible`.

use crate::allocation::{self, GpuLoad, PlaceOptions, Placement, Request};
use crate::policy::queue::Rank;

/// A running job that might be stopped.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// An identifier the caller understands (e.g. an index).
    pub id: usize,
    /// Its line's rank in the queue ([`crate::policy::queue::rank_key`]:
    /// lower goes first); `None` when its line is gone.
    pub rank: Option<Rank>,
    /// Whether its line carries `preemptible`.
    pub preemptible: bool,
    /// Seconds it has run: the work lost if it is stopped.
    pub run_time_s: f64,
}

/// Candidates tried at most (those with the least run time), so the
/// search stays small.
const MAX_CANDIDATES: usize = 12;

/// Jobs stopped at most for one blocked job.
const MAX_VICTIMS: usize = 4;

/// The running jobs ranked after `request`'s job (whose rank is `rank`)
/// to stop so that it can start: the fewest, then the least total run
/// time.
/// `loads_without(ids)` gives the GPU loads as they would be without those
/// jobs. `None` when no allowed choice lets it start.
#[must_use]
pub fn choose_victims(
    request: &Request,
    rank: Rank,
    candidates: &[Candidate],
    opts: &PlaceOptions,
    loads_without: impl Fn(&[usize]) -> Vec<GpuLoad>,
) -> Option<Vec<usize>> {
    let mut eligible: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| c.preemptible && c.rank.is_some_and(|r| r > rank))
        .collect();
    eligible.sort_by(|a, b| a.run_time_s.total_cmp(&b.run_time_s).then(a.id.cmp(&b.id)));
    eligible.truncate(MAX_CANDIDATES);
    for size in 1..=eligible.len().min(MAX_VICTIMS) {
        let mut best: Option<(f64, Vec<usize>)> = None;
        for combo in combinations(eligible.len(), size) {
            let ids: Vec<usize> = combo.iter().map(|&i| eligible[i].id).collect();
            let lost: f64 = combo.iter().map(|&i| eligible[i].run_time_s).sum();
            if best.as_ref().is_some_and(|(b, _)| *b <= lost) {
                continue;
            }
            if matches!(
                allocation::place(request, &loads_without(&ids), opts),
                Placement::Start(_)
            ) {
                best = Some((lost, ids));
            }
        }
        if let Some((_, ids)) = best {
            return Some(ids);
        }
    }
    None
}

/// Every `k`-element subset of `0..n`, as ascending index lists.
fn combinations(n: usize, k: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut combo: Vec<usize> = (0..k).collect();
    if k == 0 || k > n {
        return out;
    }
    loop {
        out.push(combo.clone());
        let Some(i) = (0..k).rev().find(|&i| combo[i] != i + n - k) else {
            return out;
        };
        combo[i] += 1;
        for j in i + 1..k {
            combo[j] = combo[j - 1] + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocation::Occupant;

    /// One 24000 MiB GPU with one occupant per candidate, each holding
    /// `budgets[id]` MiB; `loads_without` drops the chosen ones.
    fn scene(budgets: &[u64]) -> impl Fn(&[usize]) -> Vec<GpuLoad> + '_ {
        move |without: &[usize]| {
            vec![GpuLoad {
                index: 0,
                total_mib: 24000,
                occupants: budgets
                    .iter()
                    .enumerate()
                    .filter(|(id, _)| !without.contains(id))
                    .map(|(_, &mib)| Occupant {
                        declared_mib: Some(mib),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }]
        }
    }

    /// The rank of line `index` with no `priority=`.
    fn line(index: usize) -> Rank {
        (std::cmp::Reverse(0), index)
    }

    /// The rank of line `index` with `priority=`.
    fn ranked(priority: i32, index: usize) -> Rank {
        (std::cmp::Reverse(priority), index)
    }

    fn candidate(id: usize, file_index: usize, preemptible: bool, run_time_s: f64) -> Candidate {
        Candidate {
            id,
            rank: Some(line(file_index)),
            preemptible,
            run_time_s,
        }
    }

    fn request(vram: u64) -> Request {
        Request::declared(vram, 1)
    }

    #[test]
    fn victim_choice_rules() {
        let opts = PlaceOptions::default();
        // Three jobs of 8000 MiB below the blocked one (line 0).
        let budgets = [8000, 8000, 8000];
        let below = |run: [f64; 3]| {
            (0..3)
                .map(|i| candidate(i, i + 1, true, run[i]))
                .collect::<Vec<_>>()
        };
        // 7000 (+ 512 margin) MiB needs one job gone: the one that ran least.
        assert_eq!(
            choose_victims(
                &request(7000),
                line(0),
                &below([30.0, 5.0, 60.0]),
                &opts,
                scene(&budgets)
            ),
            Some(vec![1])
        );
        // 15000 MiB needs two: the two cheapest together.
        assert_eq!(
            choose_victims(
                &request(15000),
                line(0),
                &below([30.0, 5.0, 60.0]),
                &opts,
                scene(&budgets)
            ),
            Some(vec![1, 0])
        );
        // Fewest jobs wins over run time: one 12000 job (long) versus two
        // short 6000 ones.
        let mixed = [12000, 6000, 6000];
        let cands = vec![
            candidate(0, 1, true, 100.0),
            candidate(1, 2, true, 1.0),
            candidate(2, 3, true, 1.0),
        ];
        assert_eq!(
            choose_victims(&request(11000), line(0), &cands, &opts, scene(&mixed)),
            Some(vec![0])
        );
        // Never a job above the blocked one, never a non-preemptible one.
        let cands = vec![
            candidate(0, 0, true, 1.0),  // above (same line index as 0 is not below)
            candidate(1, 5, false, 1.0), // not preemptible
            candidate(2, 6, true, 1.0),
        ];
        assert_eq!(
            choose_victims(&request(7000), line(3), &cands, &opts, scene(&budgets)),
            Some(vec![2])
        );
        assert_eq!(
            choose_victims(&request(15000), line(3), &cands, &opts, scene(&budgets)),
            None,
            "the only other preemptible job is above"
        );
        // A line that is gone is no candidate.
        let gone = vec![Candidate {
            rank: None,
            ..candidate(0, 1, true, 1.0)
        }];
        assert_eq!(
            choose_victims(&request(20000), line(0), &gone, &opts, scene(&[8000])),
            None
        );
    }

    /// Preemption follows the rank, not the line: a job of higher
    /// priority further down stops a preemptible one above it, and a job
    /// of lower priority never stops one of higher priority below it.
    #[test]
    fn victims_are_ranked_after_the_blocked_job() {
        let opts = PlaceOptions::default();
        let budgets = [8000, 8000];
        let cands = vec![
            Candidate {
                rank: Some(ranked(0, 0)),
                ..candidate(0, 0, true, 1.0)
            },
            Candidate {
                rank: Some(ranked(9, 1)),
                ..candidate(1, 1, true, 1.0)
            },
        ];
        assert_eq!(
            choose_victims(&request(7000), ranked(5, 7), &cands, &opts, scene(&budgets)),
            Some(vec![0]),
            "line 7 at priority 5 outranks line 0 at 0, not line 1 at 9"
        );
        assert_eq!(
            choose_victims(
                &request(17000),
                ranked(5, 7),
                &cands,
                &opts,
                scene(&budgets)
            ),
            None,
            "both would have to stop, and line 1 at priority 9 is ranked first"
        );
        assert_eq!(
            choose_victims(
                &request(7000),
                ranked(-1, 0),
                &cands,
                &opts,
                scene(&budgets)
            ),
            None,
            "a negative priority stops nobody at 0"
        );
    }

    #[test]
    fn combinations_are_complete() {
        assert_eq!(combinations(4, 2).len(), 6);
        assert_eq!(combinations(3, 3), vec![vec![0, 1, 2]]);
        assert!(combinations(2, 3).is_empty());
    }
}
