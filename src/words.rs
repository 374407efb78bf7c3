//! The words gpusched uses for the same thing in every view, defined once
//! (docs/BEHAVIOUR.md "Words"): the board, the summary, the completion
//! line, status.json, `report`, the timeline's legend, notifications and
//! the docs all take them from here, and `tests/it/vocabulary.rs` holds
//! each view to them.
//!
//! - A job whose peak went beyond its declaration (plus `--tolerance`)
//!   **EXCEEDED** it — in capitals, because it can take a neighbour's
//!   memory. Its outcome, when `enforce=stop` stopped it, is
//!   `exceeded_declaration`.
//! - A job whose peak stayed well under its declaration (by more than
//!   `--tolerance`) is **over-declared**: lowering it frees room.
//! - A GPU closed to new jobs by `gpusched drain` is **drained**; a queue
//!   with nothing left to run or wait is **done** (`queue done`).
//! - Counts agree with their noun: `1 GPU`, `2 GPUs` ([`count`]), never
//!   `GPU(s)`.

use crate::model::{DeclarationCheck, Fit};

/// A peak beyond the declaration plus `--tolerance`.
pub const EXCEEDED: &str = "EXCEEDED";

/// A peak under the declaration by more than `--tolerance`.
pub const OVER_DECLARED: &str = "over-declared";

/// A GPU closed to new jobs by `gpusched drain`.
pub const DRAINED: &str = "drained";

/// A queue with nothing left to run or wait for.
pub const QUEUE_DONE: &str = "queue done";

/// The words no view may use for these things any more (what the
/// vocabulary test looks for in every view): the board's old `OVER`, the
/// summary's `UNDER`, the completion line's `DECLARED TOO LITTLE` and
/// `declared too much`, `queue drained`, and `(s)` plurals.
pub const RETIRED: &[&str] = &[
    " OVER",
    "UNDER",
    "TOO LITTLE",
    "declared too much",
    "queue drained",
    "job(s)",
    "GPU(s)",
    "attempt(s)",
];

/// `n noun`, the noun in the plural unless `n` is 1: `1 GPU`, `3 jobs`,
/// `2 retries`.
pub fn count(n: impl TryInto<u64>, noun: &str) -> String {
    let n = n.try_into().unwrap_or(u64::MAX);
    format!("{n} {}", noun_for(n, noun))
}

/// The noun alone, in the plural unless `n` is 1 (`job 4`, `jobs 4, 5`):
/// a noun ending in a consonant and `y` takes `ies`, any other an `s`.
pub fn noun_for(n: impl TryInto<u64>, noun: &str) -> String {
    if n.try_into().ok() == Some(1) {
        return noun.to_string();
    }
    let before_y = noun.strip_suffix('y').and_then(|stem| stem.chars().last());
    match before_y {
        Some(c) if !"aeiou".contains(c) => format!("{}ies", &noun[..noun.len() - 1]),
        _ => format!("{noun}s"),
    }
}

/// The short mark beside a peak and its declaration (board, summary,
/// `status --all`): ` EXCEEDED +144%`, ` over-declared -27%`, or nothing
/// within `--tolerance` or when unknown.
pub fn fit_mark(check: Option<DeclarationCheck>) -> String {
    match check {
        Some(c) if c.fit == Fit::Exceeded => format!(" {EXCEEDED} +{}%", c.percent),
        Some(c) if c.fit == Fit::OverDeclared => format!(" {OVER_DECLARED} -{}%", c.percent),
        _ => String::new(),
    }
}

/// The completion line's verdict (docs/BEHAVIOUR.md "Monitoring"), from
/// the check made when the job ended: `declaration N MiB within ±T%`,
/// `over-declared by N% (…; lowering it frees room)` or `EXCEEDED its
/// declaration by N% (…; raise it)`, N relative to the declaration of
/// `declared_mib`; `tolerance` is a fraction.
pub fn verdict(check: DeclarationCheck, declared_mib: u64, tolerance: f64) -> String {
    let percent = check.percent;
    match check.fit {
        Fit::Exceeded => format!(
            "{EXCEEDED} its declaration by {percent}% (declared {declared_mib} MiB; raise it)"
        ),
        Fit::OverDeclared => format!(
            "{OVER_DECLARED} by {percent}% (declared {declared_mib} MiB; lowering it frees room)"
        ),
        Fit::Within => format!(
            "declaration {declared_mib} MiB within ±{:.0}%",
            tolerance * 100.0
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(fit: Fit, percent: u32) -> DeclarationCheck {
        DeclarationCheck { fit, percent }
    }

    #[test]
    fn counts_agree_with_their_noun() {
        assert_eq!(count(1u32, "GPU"), "1 GPU");
        assert_eq!(count(0u32, "GPU"), "0 GPUs");
        assert_eq!(count(3usize, "job"), "3 jobs");
        assert_eq!(count(2u32, "retry"), "2 retries");
        assert_eq!(count(2u32, "day"), "2 days");
        assert_eq!(noun_for(1u32, "job"), "job");
        assert_eq!(noun_for(2u32, "message"), "messages");
    }

    #[test]
    fn one_word_each_way() {
        assert_eq!(fit_mark(Some(check(Fit::Exceeded, 144))), " EXCEEDED +144%");
        assert_eq!(
            fit_mark(Some(check(Fit::OverDeclared, 27))),
            " over-declared -27%"
        );
        assert_eq!(fit_mark(Some(check(Fit::Within, 3))), "");
        assert!(
            verdict(check(Fit::Exceeded, 25), 8000, 0.1)
                .starts_with("EXCEEDED its declaration by 25%")
        );
        assert!(
            verdict(check(Fit::OverDeclared, 50), 8000, 0.1).starts_with("over-declared by 50%")
        );
        assert_eq!(
            verdict(check(Fit::Within, 2), 8000, 0.1),
            "declaration 8000 MiB within ±10%"
        );
        for text in [
            fit_mark(Some(check(Fit::Exceeded, 1))),
            verdict(check(Fit::OverDeclared, 50), 1, 0.1),
        ] {
            assert!(RETIRED.iter().all(|w| !text.contains(w)), "{text}");
        }
    }
}
