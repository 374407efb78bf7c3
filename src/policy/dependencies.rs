//! `after=` dependencies (docs/BEHAVIOUR.md "Queue policy"): resolving each job's references to
//! keys when the jobs file is read (a reference that matches nothing, an
//! ambiguous one, or a cycle is a parse error naming the line), and the
//! afterok rule each round: a job waits while a dependency has not ended,
//! and ends `dependency_failed` once one ended in anything but `ok`.

use crate::jobspec::{JobSpec, ParseError};
use crate::journal::{KeyState, Phase};
use crate::model::DoneStatus;
use std::collections::HashMap;

/// Jobs known besides the file's lines: display number → key, from the
/// journal and the numbers new jobs are about to get.
pub type KnownJobs = HashMap<u32, String>;

/// Resolves every `after=` reference of `specs` to a key: a `name=` of a
/// line, a display number, or a unique prefix of a key (of a line or of a
/// job the journal knows).
///
/// Errors: a [`ParseError`] naming the line for a reference that matches
/// nothing or several jobs, a job after itself, or a cycle.
pub fn resolve(
    specs: &[JobSpec],
    known: &KnownJobs,
) -> Result<HashMap<String, Vec<String>>, ParseError> {
    let mut after: HashMap<String, Vec<String>> = HashMap::new();
    for spec in specs.iter().filter(|s| !s.after().is_empty()) {
        let error = |reason: String| ParseError {
            line: spec.line,
            reason,
            text: format!("after={}", spec.after().join(",")),
        };
        let mut keys = Vec::new();
        for reference in spec.after() {
            let key = resolve_one(reference, specs, known).map_err(&error)?;
            if key == spec.key {
                return Err(error(format!(
                    "a job cannot run after itself ({reference})"
                )));
            }
            keys.push(key);
        }
        after.insert(spec.key.to_string(), keys);
    }
    if let Some(cycle) = find_cycle(&after, specs) {
        let first = specs
            .iter()
            .find(|s| s.key == cycle[0])
            .expect("in the file");
        return Err(ParseError {
            line: first.line,
            reason: format!(
                "after= makes a cycle: {}",
                cycle
                    .iter()
                    .map(|k| describe(k, specs))
                    .collect::<Vec<_>>()
                    .join(" → ")
            ),
            text: format!("after={}", first.after().join(",")),
        });
    }
    Ok(after)
}

/// One reference to a key.
fn resolve_one(reference: &str, specs: &[JobSpec], known: &KnownJobs) -> Result<String, String> {
    if let Some(spec) = specs.iter().find(|s| s.name() == Some(reference)) {
        return Ok(spec.key.to_string());
    }
    if let Ok(no) = reference.parse::<u32>() {
        return known
            .get(&no)
            .cloned()
            .ok_or_else(|| format!("after={reference}: there is no job {reference}"));
    }
    let mut matches: Vec<&str> = specs
        .iter()
        .map(|s| s.key.as_str())
        .chain(known.values().map(String::as_str))
        .filter(|k| k.starts_with(reference))
        .collect();
    matches.sort();
    matches.dedup();
    match matches.as_slice() {
        [one] => Ok((*one).to_string()),
        [] => Err(format!(
            "after={reference} matches no job (give a name=, a job number or a key prefix)"
        )),
        many => Err(format!(
            "after={reference} matches {} jobs; give more of the key",
            many.len()
        )),
    }
}

/// A cycle among the file's dependencies, as keys from and back to its
/// first job, if there is one.
fn find_cycle(after: &HashMap<String, Vec<String>>, specs: &[JobSpec]) -> Option<Vec<String>> {
    fn visit(
        key: &str,
        after: &HashMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::HashSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|k| k == key) {
            let mut cycle = path[start..].to_vec();
            cycle.push(key.to_string());
            return Some(cycle);
        }
        if done.contains(key) {
            return None;
        }
        path.push(key.to_string());
        for next in after.get(key).into_iter().flatten() {
            if let Some(cycle) = visit(next, after, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(key.to_string());
        None
    }
    let mut done = std::collections::HashSet::new();
    for spec in specs {
        if let Some(cycle) = visit(&spec.key, after, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

/// `train` for a named job, else its command.
fn describe(key: &str, specs: &[JobSpec]) -> String {
    specs
        .iter()
        .find(|s| s.key == key)
        .map_or(key.to_string(), |s| {
            s.name()
                .map(str::to_string)
                .unwrap_or_else(|| s.command.to_string())
        })
}

/// Where a job's dependencies stand.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Every dependency ended `ok` (or it has none): it may start.
    Ready,
    /// This dependency has not ended yet.
    Waiting {
        /// Its display number.
        no: u32,
        /// `running`, `pending`, …
        state: &'static str,
    },
    /// This dependency ended in anything but `ok`, or can never run: the
    /// job ends `dependency_failed`.
    Failed {
        /// Its display number.
        no: u32,
        /// Why, for people: `failed`, `no longer in the jobs file`.
        why: String,
    },
}

/// The afterok rule for one job whose dependencies are `deps`. `state_of`
/// gives the journal's fold of a key; `running` and `in_file` whether an
/// attempt of it runs now and whether its line is in the jobs file;
/// `handed_over` whether it runs on a cluster that enforces the rule
/// itself (Slurm's `afterok`, docs/BEHAVIOUR.md "Slurm"), so the job may be submitted now.
pub fn readiness<'a>(
    deps: &[String],
    state_of: impl Fn(&str) -> Option<&'a KeyState>,
    running: impl Fn(&str) -> bool,
    in_file: impl Fn(&str) -> bool,
    handed_over: impl Fn(&str) -> bool,
) -> Readiness {
    let mut waiting = None;
    for key in deps {
        let Some(state) = state_of(key) else {
            continue; // seen in this very round: waiting below
        };
        match &state.phase {
            Phase::Done(done) if done.status == DoneStatus::Ok => {}
            Phase::Done(done) => {
                return Readiness::Failed {
                    no: state.no,
                    why: done.status.as_str().to_string(),
                };
            }
            _ if handed_over(key) => {}
            _ if running(key) => {
                waiting.get_or_insert(Readiness::Waiting {
                    no: state.no,
                    state: "running",
                });
            }
            _ if !in_file(key) => {
                return Readiness::Failed {
                    no: state.no,
                    why: "no longer in the jobs file".to_string(),
                };
            }
            _ => {
                waiting.get_or_insert(Readiness::Waiting {
                    no: state.no,
                    state: "pending",
                });
            }
        }
    }
    waiting.unwrap_or(Readiness::Ready)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobspec::parse_jobs;
    use crate::journal::Finished;

    fn known(specs: &[JobSpec]) -> KnownJobs {
        specs
            .iter()
            .enumerate()
            .map(|(i, s)| (i as u32 + 1, s.key.to_string()))
            .collect()
    }

    #[test]
    fn references_resolve_by_name_number_and_key_prefix() {
        let specs = parse_jobs(
            "[name=train] python t.py\necho b\n[after=train,2] python e.py\n[after=1] echo d\n",
        )
        .unwrap();
        let after = resolve(&specs, &known(&specs)).unwrap();
        assert_eq!(
            after[specs[2].key.as_str()],
            vec![specs[0].key.to_string(), specs[1].key.to_string()]
        );
        assert_eq!(after[specs[3].key.as_str()], vec![specs[0].key.to_string()]);
        let prefix = &specs[1].key[..6];
        let specs2 = parse_jobs(&format!("echo b\n[after={prefix}] echo c\n")).unwrap();
        let after = resolve(&specs2, &known(&specs2)).unwrap();
        assert_eq!(
            after[specs2[1].key.as_str()],
            vec![specs2[0].key.to_string()]
        );
    }

    #[test]
    fn bad_references_and_cycles_are_parse_errors_naming_the_line() {
        let table = [
            ("echo a\n[after=nobody] echo b\n", 2, "matches no job"),
            ("echo a\n[after=9] echo b\n", 2, "there is no job 9"),
            ("[name=a after=a] echo a\n", 1, "after itself"),
            (
                "[name=a after=b] echo a\n[name=b after=a] echo b\n",
                1,
                "cycle: a → b → a",
            ),
        ];
        for (text, line, words) in table {
            let specs = parse_jobs(text).unwrap();
            let error = resolve(&specs, &known(&specs)).unwrap_err();
            assert_eq!(error.line, line, "{text}");
            assert!(error.reason.contains(words), "{text}: {error}");
        }
    }

    fn state(no: u32, phase: Phase) -> KeyState {
        let mut state = KeyState::new(no, 0.0);
        state.phase = phase;
        state
    }

    fn done(status: DoneStatus) -> Phase {
        Phase::Done(Box::new(Finished::of_status(status)))
    }

    #[test]
    fn afterok_rule() {
        let states: HashMap<&str, KeyState> = HashMap::from([
            ("ok", state(1, done(DoneStatus::Ok))),
            ("failed", state(2, done(DoneStatus::Timeout))),
            ("running", state(3, Phase::Waiting)),
            ("pending", state(4, Phase::Waiting)),
            ("gone", state(5, Phase::Waiting)),
            ("cluster", state(6, Phase::Waiting)),
        ]);
        let check = |deps: &[&str]| {
            let deps: Vec<String> = deps.iter().map(|d| d.to_string()).collect();
            readiness(
                &deps,
                |k| states.get(k),
                |k| k == "running" || k == "cluster",
                |k| k != "gone",
                |k| k == "cluster",
            )
        };
        assert_eq!(check(&["ok", "cluster"]), Readiness::Ready);
        assert_eq!(check(&[]), Readiness::Ready);
        assert_eq!(check(&["ok"]), Readiness::Ready);
        assert_eq!(
            check(&["ok", "running"]),
            Readiness::Waiting {
                no: 3,
                state: "running"
            }
        );
        assert_eq!(
            check(&["pending"]),
            Readiness::Waiting {
                no: 4,
                state: "pending"
            }
        );
        assert_eq!(
            check(&["running", "failed"]),
            Readiness::Failed {
                no: 2,
                why: "timeout".into()
            }
        );
        assert_eq!(
            check(&["gone"]),
            Readiness::Failed {
                no: 5,
                why: "no longer in the jobs file".into()
            }
        );
    }
}
