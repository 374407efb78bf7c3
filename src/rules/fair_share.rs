//! Fair share (docs/BEHAVIOUR.md "Rules for a shared box"): each user's
//! past usage, decayed with a half-life, against their share, as Slurm's
//! classic factor F = 2^(−U/S). Pure: the ledger brings the numbers.

use std::collections::BTreeMap;

/// `value` decayed from `from_ms` to `to_ms` (Unix ms): halved every
/// `half_life_s` seconds. A `to_ms` before `from_ms` (a clock stepped back)
/// decays nothing.
pub fn decayed(value: f64, from_ms: u64, to_ms: u64, half_life_s: f64) -> f64 {
    let elapsed_s = to_ms.saturating_sub(from_ms) as f64 / 1000.0;
    if half_life_s <= 0.0 || !half_life_s.is_finite() {
        return value;
    }
    value * 0.5f64.powf(elapsed_s / half_life_s)
}

/// One user's fair-share inputs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Standing {
    /// Decayed usage (MiB·s).
    pub usage: f64,
    /// Share (relative weight, > 0).
    pub share: f64,
}

/// Every user's factor F = 2^(−U/S) in (0, 1]: U is the user's part of
/// all users' decayed usage, S their part of all users' shares (both
/// over the users given). Nobody has used anything: everyone 1. A higher
/// factor goes first.
pub fn factors(users: &BTreeMap<String, Standing>) -> BTreeMap<String, f64> {
    let total_usage: f64 = users.values().map(|s| s.usage.max(0.0)).sum();
    let total_share: f64 = users.values().map(|s| s.share.max(0.0)).sum();
    users
        .iter()
        .map(|(user, s)| {
            let u = if total_usage > 0.0 {
                s.usage.max(0.0) / total_usage
            } else {
                0.0
            };
            let share = if total_share > 0.0 {
                s.share.max(0.0) / total_share
            } else {
                0.0
            };
            let f = if u == 0.0 {
                1.0
            } else if share == 0.0 {
                0.0
            } else {
                2f64.powf(-u / share)
            };
            (user.clone(), f)
        })
        .collect()
}

/// Whether a factor `theirs` goes before `mine`: strictly higher, by more
/// than rounding (equal factors race as without rules).
pub fn goes_first(theirs: f64, mine: f64) -> bool {
    theirs > mine + 1e-9
}
