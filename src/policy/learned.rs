//! Learned declarations (docs/BEHAVIOUR.md "Learned VRAM"): families of jobs, what their history
//! predicts, and how an OOM or an overrun raises the prediction. Pure: the
//! scheduler feeds in peaks (from its journal, the `--history` file and
//! jobs that end) and asks for predictions.

use crate::allocation::buffered_mib;
use std::collections::{HashMap, VecDeque};

/// How many of a family's latest ok peaks the prediction looks at.
pub const PREDICTION_RUNS: usize = 5;

/// A job's family (docs/BEHAVIOUR.md "Family"): `family=NAME` when given, else its
/// normalised command (docs/BEHAVIOUR.md "Jobs file") with every number that is not part of a
/// word (`42`, `3e-4`, `0.1`, `=5`) replaced by `#`. A sweep over seeds or
/// learning rates is one family; `resnet18` and `resnet50` are two.
pub fn family_of(command: &str, family: Option<&str>) -> String {
    if let Some(name) = family {
        return format!("family={name}");
    }
    let normalised = crate::jobspec::normalise_command(command);
    let chars: Vec<char> = normalised.chars().collect();
    let mut out = String::with_capacity(normalised.len());
    let mut i = 0;
    while i < chars.len() {
        let after_word = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        let starts_number = chars[i].is_ascii_digit()
            || (chars[i] == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit));
        if after_word || !starts_number {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        i = number_end(&chars, i);
        out.push('#');
    }
    out
}

/// A job's siblings (docs/BEHAVIOUR.md "Inside a Slurm allocation"): the
/// looser grouping a pilot takes a run-time bound from when the job's own
/// family ([`family_of`]) never ran. Its family with every run of digits
/// replaced by `#`, even one glued to a word, so that `echo s1` and
/// `echo s3`, `run7` and `run8`, `ckpt_c7` and `ckpt_c9` are siblings
/// (while `resnet18.py` and `resnet50.py` stay two families). `None` for
/// a job with `family=NAME`: its author named its family.
pub fn siblings_of(family: &str) -> Option<String> {
    if family.starts_with("family=") {
        return None;
    }
    let mut out = String::with_capacity(family.len());
    let mut in_digits = false;
    for c in family.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    Some(out)
}

/// The end (exclusive) of the number starting at `start`: digits, an
/// optional fraction, an optional exponent.
fn number_end(chars: &[char], start: usize) -> usize {
    let digits = |mut i: usize| {
        while chars.get(i).is_some_and(char::is_ascii_digit) {
            i += 1;
        }
        i
    };
    let mut i = digits(start);
    if chars.get(i) == Some(&'.') && chars.get(i + 1).is_some_and(char::is_ascii_digit) {
        i = digits(i + 1);
    }
    if matches!(chars.get(i), Some('e' | 'E')) {
        let sign = usize::from(matches!(chars.get(i + 1), Some('+' | '-')));
        if chars.get(i + 1 + sign).is_some_and(char::is_ascii_digit) {
            i = digits(i + 1 + sign);
        }
    }
    i
}

/// Why a family's prediction was raised above its history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raise {
    /// A job of the family ran out of memory under its prediction.
    Oom,
    /// A running job's peak went past its prediction.
    Overrun,
}

/// Where a prediction comes from, for the views.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// No ok run yet: the job runs as undeclared (an idle GPU alone).
    Cold,
    /// The highest of the last `runs` ok peaks, plus the spike buffer.
    History {
        /// How many ok runs it is taken from (at most
        /// [`PREDICTION_RUNS`]).
        runs: usize,
        /// Whether its runs' peaks differ by more than 2× (runs that
        /// differ in, say, a batch-size argument): the largest is used,
        /// and the board says so.
        spread: bool,
    },
    /// Raised above the history during this run.
    Raised(Raise),
}

/// A prediction: the declaration per GPU (MiB), `None` for a cold start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prediction {
    /// MiB per GPU, or `None` (run as undeclared).
    pub mib: Option<u64>,
    /// Where it comes from.
    pub source: Source,
}

impl std::fmt::Display for Prediction {
    /// `auto 6.4G from 5 runs`, `auto 7.9G raised after an OOM`, `auto:
    /// first of its family, on an idle GPU`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let size = |mib: u64| format!("{:.1}G", mib as f64 / 1024.0);
        match (self.mib, self.source) {
            (None, _) | (_, Source::Cold) => {
                write!(f, "auto: no ok run of its family yet, needs an idle GPU")
            }
            (Some(mib), Source::History { runs, spread }) => write!(
                f,
                "auto {} from {runs} run{}{}",
                size(mib),
                if runs == 1 { "" } else { "s" },
                if spread {
                    " (they differ by more than 2×: the largest is used; give differing runs their own family=)"
                } else {
                    ""
                }
            ),
            (Some(mib), Source::Raised(Raise::Oom)) => {
                write!(f, "auto {} raised after an OOM", size(mib))
            }
            (Some(mib), Source::Raised(Raise::Overrun)) => {
                write!(f, "auto {} raised by a peak over it", size(mib))
            }
        }
    }
}

/// One family's memory.
#[derive(Debug, Default, Clone)]
struct Family {
    /// The latest ok peaks (MiB per GPU) with who measured them (log
    /// directory and key), oldest first, at most [`PREDICTION_RUNS`].
    peaks: VecDeque<(String, u64)>,
    /// A floor set during this run, with why.
    raised: Option<(u64, Raise)>,
}

/// Every family's history, as far as this run knows it.
#[derive(Debug, Default, Clone)]
pub struct Families {
    map: HashMap<String, Family>,
}

impl Families {
    /// Takes in one ok run's peak (MiB, the highest on any of its GPUs).
    /// `who` names the run (log directory and key), so that reading the
    /// same run twice — from the journal and from `--history` — counts it
    /// once; its later peak replaces the earlier.
    pub fn record_ok(&mut self, family: &str, who: &str, peak_mib: u64) {
        let entry = self.map.entry(family.to_string()).or_default();
        entry.peaks.retain(|(w, _)| w != who);
        entry.peaks.push_back((who.to_string(), peak_mib));
        while entry.peaks.len() > PREDICTION_RUNS {
            entry.peaks.pop_front();
        }
    }

    /// Raises the family's prediction to at least `mib` for the jobs not
    /// yet started (docs/BEHAVIOUR.md "Learned VRAM": after an OOM, or a peak past the prediction).
    pub fn raise(&mut self, family: &str, mib: u64, why: Raise) {
        let entry = self.map.entry(family.to_string()).or_default();
        if entry.raised.is_none_or(|(m, _)| mib > m) {
            entry.raised = Some((mib, why));
        }
    }

    /// The declaration per GPU for the family's next job (docs/BEHAVIOUR.md "Learned VRAM"): the highest of its last [`PREDICTION_RUNS`] ok peaks
    /// plus `spike_buffer`, or a raise if higher; a cold start when it has
    /// neither.
    #[must_use]
    pub fn predict(&self, family: &str, spike_buffer: f64) -> Prediction {
        let Some(entry) = self.map.get(family) else {
            return Prediction {
                mib: None,
                source: Source::Cold,
            };
        };
        let peaks = entry.peaks.iter().map(|(_, p)| *p);
        let learned = peaks.clone().max().map(|p| buffered_mib(p, spike_buffer));
        let spread = peaks
            .clone()
            .min()
            .zip(peaks.max())
            .is_some_and(|(lo, hi)| hi > lo.saturating_mul(2));
        match (learned, entry.raised) {
            (Some(l), Some((r, _))) if l >= r => Prediction {
                mib: Some(l),
                source: Source::History {
                    runs: entry.peaks.len(),
                    spread,
                },
            },
            (_, Some((r, why))) => Prediction {
                mib: Some(r),
                source: Source::Raised(why),
            },
            (Some(l), None) => Prediction {
                mib: Some(l),
                source: Source::History {
                    runs: entry.peaks.len(),
                    spread,
                },
            },
            (None, None) => Prediction {
                mib: None,
                source: Source::Cold,
            },
        }
    }

    /// The peaks the prediction is built from, newest last.
    #[cfg(test)]
    pub fn peaks(&self, family: &str) -> Vec<u64> {
        self.map
            .get(family)
            .map(|f| f.peaks.iter().map(|(_, p)| *p).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sweeps as people write them: what is one family, and what only
    /// siblings (a bound for a family that never ran).
    #[test]
    fn siblings_strip_every_digit_run_even_glued_to_a_word() {
        let siblings = |a: &str, b: &str| {
            let (fa, fb) = (family_of(a, None), family_of(b, None));
            (fa == fb, siblings_of(&fa) == siblings_of(&fb))
        };
        // Two families, one sibling group: a number glued to a word.
        for (a, b) in [
            ("sh -c 'echo s1; sleep 25'", "sh -c 'echo s3; sleep 25'"),
            ("python train.py --name run7", "python train.py --name run8"),
            (
                "python train.py --resume ckpt_c7/last.pt",
                "python train.py --resume ckpt_c9/last.pt",
            ),
            (
                "python sweep.py --out runs/lr3e-4_seed1",
                "python sweep.py --out runs/lr1e-3_seed2",
            ),
            ("bash jobs/job_017.sh", "bash jobs/job_018.sh"),
        ] {
            assert_eq!(siblings(a, b), (false, true), "{a} / {b}");
        }
        // One family already: free-standing numbers.
        assert_eq!(
            siblings("python train.py --seed 1", "python train.py --seed 2"),
            (true, true)
        );
        // Different scripts stay apart, at both levels.
        assert_eq!(
            siblings("python eval.py --run 7", "python train.py --run 7"),
            (false, false)
        );
        // resnet18 and resnet50 are two families, but siblings.
        assert_eq!(
            siblings("python resnet18.py", "python resnet50.py"),
            (false, true)
        );
        assert_eq!(
            siblings_of(&family_of("sh -c 'echo s12x3'", None)).as_deref(),
            Some("sh -c 'echo s#x#'")
        );
        // A named family has no siblings.
        assert_eq!(siblings_of(&family_of("anything 1", Some("sweep"))), None);
    }

    #[test]
    fn families_replace_free_standing_numbers() {
        let cases = [
            ("python train.py --seed 42", "python train.py --seed #"),
            (
                "python train.py --lr=3e-4 --wd 0.1",
                "python train.py --lr=# --wd #",
            ),
            (
                "python train.py --lr .5 --x 1E+3",
                "python train.py --lr # --x #",
            ),
            ("SEED=7 ./run.sh", "SEED=# ./run.sh"),
            // Numbers inside words name different things.
            ("python resnet50.py --gpu0", "python resnet50.py --gpu0"),
            ("python   a.py  -n 10", "python a.py -n #"),
            ("x 1.2.3", "x #.#"),
            ("echo 3e", "echo #e"),
        ];
        for (command, family) in cases {
            assert_eq!(family_of(command, None), family, "{command}");
        }
        assert_eq!(
            family_of("python a.py --seed 1", None),
            family_of("python a.py --seed 2", None)
        );
        assert_ne!(
            family_of("python resnet18.py", None),
            family_of("python resnet50.py", None)
        );
        // family= overrides, and never collides with a command.
        assert_eq!(family_of("python a.py", Some("bert")), "family=bert");
        assert_eq!(
            family_of("python a.py", Some("bert")),
            family_of("python b.py --seed 3", Some("bert"))
        );
    }

    #[test]
    fn prediction_is_the_max_of_the_last_five_ok_peaks_plus_the_buffer() {
        let mut f = Families::default();
        assert_eq!(
            f.predict("t", 0.1),
            Prediction {
                mib: None,
                source: Source::Cold
            }
        );
        f.record_ok("t", "a#0", 6000);
        assert_eq!(f.predict("t", 0.1).mib, Some(buffered_mib(6000, 0.1)));
        assert_eq!(
            f.predict("t", 0.1).source,
            Source::History {
                runs: 1,
                spread: false
            }
        );
        assert_eq!(f.predict("t", 0.1).to_string(), "auto 6.4G from 1 run");
        // An old high peak falls out after five newer runs.
        f.record_ok("t", "a#1", 9000);
        for (i, peak) in [5000, 5100, 5200, 5300, 5400].into_iter().enumerate() {
            f.record_ok("t", &format!("b#{i}"), peak);
        }
        assert_eq!(f.predict("t", 0.0).mib, Some(5400));
        assert_eq!(
            f.predict("t", 0.0).source,
            Source::History {
                runs: 5,
                spread: false
            }
        );
        assert_eq!(f.peaks("t"), vec![5000, 5100, 5200, 5300, 5400]);
        // The same run read twice counts once, with its latest peak.
        f.record_ok("t", "b#4", 5500);
        assert_eq!(f.peaks("t"), vec![5000, 5100, 5200, 5300, 5500]);
        // Other families are not affected.
        assert_eq!(f.predict("u", 0.1).source, Source::Cold);
    }

    #[test]
    fn a_family_whose_runs_differ_by_more_than_twice_says_so_and_uses_the_largest() {
        let mut f = Families::default();
        f.record_ok("t", "a#0", 3000);
        f.record_ok("t", "a#1", 9000);
        let p = f.predict("t", 0.0);
        assert_eq!(p.mib, Some(9000));
        assert_eq!(
            p.source,
            Source::History {
                runs: 2,
                spread: true
            }
        );
        assert!(
            p.to_string()
                .contains("differ by more than 2×: the largest is used"),
            "{p}"
        );
        // Within 2×: nothing to say.
        f.record_ok("u", "b#0", 5000);
        f.record_ok("u", "b#1", 9000);
        assert_eq!(f.predict("u", 0.0).to_string(), "auto 8.8G from 2 runs");
    }

    #[test]
    fn an_oom_or_an_overrun_raises_the_prediction() {
        let mut f = Families::default();
        f.record_ok("t", "a#0", 6000);
        f.raise("t", 8250, Raise::Oom);
        let p = f.predict("t", 0.1);
        assert_eq!(p.mib, Some(8250));
        assert_eq!(p.to_string(), "auto 8.1G raised after an OOM");
        // A lower raise does not lower it.
        f.raise("t", 7000, Raise::Overrun);
        assert_eq!(f.predict("t", 0.1).mib, Some(8250));
        // History that catches up wins again.
        f.record_ok("t", "a#1", 8000);
        assert_eq!(f.predict("t", 0.1).mib, Some(buffered_mib(8000, 0.1)));
        assert_eq!(
            f.predict("t", 0.1).source,
            Source::History {
                runs: 2,
                spread: false
            }
        );
        // A cold family raised by an OOM gets a declaration.
        f.raise("cold", 30000, Raise::Oom);
        assert_eq!(f.predict("cold", 0.1).mib, Some(30000));
    }
}
