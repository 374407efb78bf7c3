//! How the GPUs of a box are connected, and which set of GPUs a multi-GPU
//! job gets (docs/HARDWARE.md "Topology"). GPUs that talk over NVLink move
//! data many times faster than over PCIe, and within PCIe a shared switch
//! beats the host bridge, which beats crossing between CPUs. So among the
//! sets of GPUs with room for a job, placement takes the best-connected
//! one.
//!
//! The levels are NVML's `nvmlGpuTopologyLevel_t` (the columns of
//! `nvidia-smi topo -m`); the score follows the order the NVIDIA device
//! plugin's best-effort allocator uses: every NVLink first, then same
//! board, one PCIe switch, several switches, the host bridge, the NUMA
//! node, across CPUs.

use std::collections::BTreeMap;

/// How far apart two GPUs are on PCIe (NVML `nvmlGpuTopologyLevel_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PcieLevel {
    /// On one board (`NVML_TOPOLOGY_INTERNAL`, e.g. a dual-GPU card).
    SameBoard,
    /// Behind one PCIe switch (`NVML_TOPOLOGY_SINGLE`, `PIX`).
    SingleSwitch,
    /// Behind several PCIe switches, not the host bridge
    /// (`NVML_TOPOLOGY_MULTIPLE`, `PXB`).
    MultipleSwitches,
    /// Through one host bridge (`NVML_TOPOLOGY_HOSTBRIDGE`, `PHB`).
    HostBridge,
    /// Within one NUMA node across host bridges (`NVML_TOPOLOGY_NODE`,
    /// `NODE`).
    NumaNode,
    /// Across CPUs (`NVML_TOPOLOGY_SYSTEM`, `SYS`).
    System,
}

impl PcieLevel {
    /// The name `nvidia-smi topo -m` prints.
    pub const fn label(self) -> &'static str {
        match self {
            PcieLevel::SameBoard => "BRD",
            PcieLevel::SingleSwitch => "PIX",
            PcieLevel::MultipleSwitches => "PXB",
            PcieLevel::HostBridge => "PHB",
            PcieLevel::NumaNode => "NODE",
            PcieLevel::System => "SYS",
        }
    }

    /// Its part of a pair's score: nearer is higher, every level below one
    /// NVLink.
    const fn score(self) -> u32 {
        match self {
            PcieLevel::SameBoard => 60,
            PcieLevel::SingleSwitch => 50,
            PcieLevel::MultipleSwitches => 40,
            PcieLevel::HostBridge => 30,
            PcieLevel::NumaNode => 20,
            PcieLevel::System => 10,
        }
    }
}

/// How one pair of GPUs is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Link {
    /// Active NVLinks between them.
    pub nvlinks: u32,
    /// Their PCIe distance; `None` when NVML could not tell.
    pub pcie: Option<PcieLevel>,
}

impl Link {
    /// `NV4`, `PIX`, `SYS`, … as `nvidia-smi topo -m` prints it; `?` when
    /// nothing is known.
    pub fn label(self) -> String {
        match (self.nvlinks, self.pcie) {
            (0, Some(level)) => level.label().to_string(),
            (0, None) => "?".to_string(),
            (n, _) => format!("NV{n}"),
        }
    }

    /// The pair's score: 100 per NVLink, plus the PCIe level's.
    pub fn score(self) -> u32 {
        self.nvlinks.saturating_mul(100) + self.pcie.map_or(0, PcieLevel::score)
    }
}

/// The links between the GPUs of one box, by NVML index. Read once at
/// start: topology does not change while the box runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Topology {
    /// Pairs (lower index first) and their link.
    links: BTreeMap<(u32, u32), Link>,
}

/// Sets of GPUs weighed one by one up to this many; past it the set is
/// grown greedily from the best pair (a box with more GPUs than this
/// allows combinations of is rare).
const MAX_SETS_WEIGHED: usize = 20_000;

impl Topology {
    /// Records the link between GPUs `a` and `b` (either order).
    pub fn set(&mut self, a: u32, b: u32, link: Link) {
        if a != b {
            self.links.insert((a.min(b), a.max(b)), link);
        }
    }

    /// The link between GPUs `a` and `b`; the default (nothing known) for
    /// a pair never recorded.
    pub fn link(&self, a: u32, b: u32) -> Link {
        self.links
            .get(&(a.min(b), a.max(b)))
            .copied()
            .unwrap_or_default()
    }

    /// Whether any pair differs from another, so that the choice of set
    /// matters.
    pub fn matters(&self) -> bool {
        let mut scores = self.links.values().map(|l| l.score());
        scores
            .next()
            .is_some_and(|first| scores.any(|s| s != first))
    }

    /// Σ of the pair scores within `set`.
    pub fn set_score(&self, set: &[u32]) -> u32 {
        let mut score = 0u32;
        for (i, &a) in set.iter().enumerate() {
            for &b in &set[i + 1..] {
                score = score.saturating_add(self.link(a, b).score());
            }
        }
        score
    }

    /// The best-connected `wanted` GPUs among `candidates` (each with what
    /// choosing it costs: its headroom in MiB under best fit, so the
    /// roomier GPUs stay whole for larger jobs; see `choice_cost`):
    /// highest [`Topology::set_score`], then the least cost, then the
    /// lowest indices. `None` when there are fewer
    /// candidates than `wanted`.
    pub fn best_set(&self, candidates: &[(u64, u32)], wanted: usize) -> Option<Vec<u32>> {
        if wanted == 0 || candidates.len() < wanted {
            return None;
        }
        let mut sorted = candidates.to_vec();
        sorted.sort_unstable_by_key(|&(headroom, index)| (index, headroom));
        if combinations(sorted.len(), wanted) > MAX_SETS_WEIGHED {
            return Some(self.grow_greedily(&sorted, wanted));
        }
        let mut best: Option<(u32, u64, Vec<u32>)> = None;
        let mut picks: Vec<usize> = (0..wanted).collect();
        loop {
            let set: Vec<u32> = picks.iter().map(|&i| sorted[i].1).collect();
            let score = self.set_score(&set);
            let headroom: u64 = picks.iter().map(|&i| sorted[i].0).sum();
            let better = best
                .as_ref()
                .is_none_or(|(s, h, _)| score > *s || (score == *s && headroom < *h));
            if better {
                best = Some((score, headroom, set));
            }
            if !next_combination(&mut picks, sorted.len()) {
                break;
            }
        }
        best.map(|(_, _, set)| set)
    }

    /// A large box: the best pair, then each time the candidate that adds
    /// the most score.
    fn grow_greedily(&self, sorted: &[(u64, u32)], wanted: usize) -> Vec<u32> {
        let mut set: Vec<u32> = Vec::with_capacity(wanted);
        let best_pair = sorted
            .iter()
            .enumerate()
            .flat_map(|(i, a)| sorted[i + 1..].iter().map(move |b| (a, b)))
            .max_by_key(|((ha, a), (hb, b))| {
                (
                    self.link(*a, *b).score(),
                    std::cmp::Reverse(ha + hb),
                    std::cmp::Reverse((*a, *b)),
                )
            });
        if let Some(((_, a), (_, b))) = best_pair {
            set.extend([*a, *b]);
        }
        set.truncate(wanted);
        while set.len() < wanted {
            let next = sorted
                .iter()
                .filter(|(_, index)| !set.contains(index))
                .max_by_key(|(headroom, index)| {
                    let added: u32 = set.iter().map(|&s| self.link(s, *index).score()).sum();
                    (
                        added,
                        std::cmp::Reverse(*headroom),
                        std::cmp::Reverse(*index),
                    )
                })
                .map(|&(_, index)| index)
                .expect("enough candidates");
            set.push(next);
        }
        set.sort_unstable();
        set
    }

    /// The matrix as `nvidia-smi topo -m` prints it, for `gpus` in order:
    /// a header row, then one row per GPU (`X` on the diagonal).
    pub fn matrix(&self, gpus: &[u32]) -> String {
        let mut out = String::from("      ");
        for g in gpus {
            out.push_str(&format!("{:<6}", format!("GPU{g}")));
        }
        out = out.trim_end().to_string();
        out.push('\n');
        for &a in gpus {
            let mut row = format!("{:<6}", format!("GPU{a}"));
            for &b in gpus {
                let cell = if a == b {
                    "X".to_string()
                } else {
                    self.link(a, b).label()
                };
                row.push_str(&format!("{cell:<6}"));
            }
            out.push_str(row.trim_end());
            out.push('\n');
        }
        out
    }
}

/// n choose k, saturating.
fn combinations(n: usize, k: usize) -> usize {
    let k = k.min(n - k);
    (0..k).fold(1usize, |acc, i| acc.saturating_mul(n - i) / (i + 1))
}

/// Advances `picks` (ascending indices below `n`) to the next combination
/// in lexicographic order; `false` after the last.
fn next_combination(picks: &mut [usize], n: usize) -> bool {
    let k = picks.len();
    let Some(i) = (0..k).rev().find(|&i| picks[i] < n - k + i) else {
        return false;
    };
    picks[i] += 1;
    for j in i + 1..k {
        picks[j] = picks[j - 1] + 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four GPUs on one host bridge, NVLink pairs (0,2) and (1,3).
    fn two_pairs() -> Topology {
        let mut t = Topology::default();
        for a in 0..4 {
            for b in a + 1..4 {
                t.set(
                    a,
                    b,
                    Link {
                        nvlinks: 0,
                        pcie: Some(PcieLevel::HostBridge),
                    },
                );
            }
        }
        for (a, b) in [(0, 2), (1, 3)] {
            t.set(
                a,
                b,
                Link {
                    nvlinks: 4,
                    pcie: Some(PcieLevel::HostBridge),
                },
            );
        }
        t
    }

    #[test]
    fn a_pair_joined_by_nvlink_wins_over_lower_indices() {
        let t = two_pairs();
        assert!(t.matters());
        let all = [(24_000, 0), (24_000, 1), (24_000, 2), (24_000, 3)];
        assert_eq!(t.best_set(&all, 2), Some(vec![0, 2]));
        // With 0 and 2 taken, the other pair.
        assert_eq!(t.best_set(&[(24_000, 1), (24_000, 3)], 2), Some(vec![1, 3]));
        // Only one of a pair has room: the best of what is left.
        assert_eq!(
            t.best_set(&[(24_000, 0), (24_000, 1), (24_000, 3)], 2),
            Some(vec![1, 3])
        );
        assert_eq!(t.best_set(&[(24_000, 0)], 2), None);
    }

    #[test]
    fn equal_links_fall_back_to_best_fit_then_index() {
        let t = two_pairs();
        // (0,2) and (1,3) score alike: the one that takes less headroom.
        let all = [(24_000, 0), (9_000, 1), (24_000, 2), (9_000, 3)];
        assert_eq!(t.best_set(&all, 2), Some(vec![1, 3]));
        let flat = Topology::default();
        assert!(!flat.matters());
        assert_eq!(
            flat.best_set(&[(5, 3), (5, 1), (5, 2)], 2),
            Some(vec![1, 2])
        );
    }

    #[test]
    fn pcie_distance_orders_sets_without_nvlink() {
        let mut t = Topology::default();
        let level = |l| Link {
            nvlinks: 0,
            pcie: Some(l),
        };
        t.set(0, 1, level(PcieLevel::System));
        t.set(0, 2, level(PcieLevel::SingleSwitch));
        t.set(1, 2, level(PcieLevel::NumaNode));
        assert_eq!(t.best_set(&[(1, 0), (1, 1), (1, 2)], 2), Some(vec![0, 2]));
        assert_eq!(t.link(2, 0).label(), "PIX");
        assert_eq!(t.link(0, 1).label(), "SYS");
    }

    #[test]
    fn a_large_box_grows_the_set_greedily_from_the_best_pair() {
        // 32 GPUs, 16 of them wanted: too many sets to weigh one by one.
        let mut t = Topology::default();
        for (a, b) in [(5, 9), (9, 30), (5, 30)] {
            t.set(
                a,
                b,
                Link {
                    nvlinks: 2,
                    pcie: None,
                },
            );
        }
        let all: Vec<(u64, u32)> = (0..32).map(|i| (100, i)).collect();
        assert!(combinations(32, 16) > MAX_SETS_WEIGHED);
        let set = t.best_set(&all, 16).unwrap();
        assert_eq!(set.len(), 16);
        for gpu in [5, 9, 30] {
            assert!(set.contains(&gpu), "{set:?}");
        }
    }

    #[test]
    fn the_matrix_reads_like_nvidia_smi_topo() {
        let t = two_pairs();
        assert_eq!(
            t.matrix(&[0, 1, 2, 3]),
            "      GPU0  GPU1  GPU2  GPU3\n\
             GPU0  X     PHB   NV4   PHB\n\
             GPU1  PHB   X     PHB   NV4\n\
             GPU2  NV4   PHB   X     PHB\n\
             GPU3  PHB   NV4   PHB   X\n"
        );
    }

    #[test]
    fn every_combination_is_visited_once() {
        let mut picks = vec![0, 1];
        let mut seen = vec![picks.clone()];
        while next_combination(&mut picks, 4) {
            seen.push(picks.clone());
        }
        assert_eq!(seen.len(), combinations(4, 2));
        assert_eq!(seen.last(), Some(&vec![2, 3]));
    }
}
