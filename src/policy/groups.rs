//! Groups (docs/BEHAVIOUR.md "Groups"): `[group=NAME limit=N]` caps how
//! many jobs of a group run at once. A group's limit is the smallest any
//! of its lines gives (a group whose lines give none is not capped); lines
//! that disagree are worth one warning. Pure: the dispatch phase counts
//! the running jobs and asks.

use crate::jobspec::JobSpec;
use std::collections::{BTreeMap, BTreeSet};

/// Every group's limit, from the lines of a jobs file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupLimits {
    /// Group → the limits its lines give.
    given: BTreeMap<String, BTreeSet<u32>>,
}

impl GroupLimits {
    /// The limits of `specs`.
    pub fn of(specs: &[JobSpec]) -> GroupLimits {
        let mut limits = GroupLimits::default();
        limits.add(specs);
        limits
    }

    /// Takes in lines appended to the file.
    pub fn add(&mut self, specs: &[JobSpec]) {
        for spec in specs {
            if let Some(group) = spec.group() {
                let given = self.given.entry(group.to_string()).or_default();
                given.extend(spec.limit());
            }
        }
    }

    /// Whether no line names a group.
    pub fn is_empty(&self) -> bool {
        self.given.is_empty()
    }

    /// The limit of `group`: the smallest its lines give; `None` when
    /// none gives one.
    pub fn limit(&self, group: &str) -> Option<u32> {
        self.given.get(group)?.first().copied()
    }

    /// The warning for groups whose lines give different limits, naming
    /// the limit in force; `None` when they all agree.
    pub fn disagreement(&self) -> Option<String> {
        let groups: Vec<String> = self
            .given
            .iter()
            .filter(|(_, limits)| limits.len() > 1)
            .map(|(group, limits)| {
                let all: Vec<String> = limits.iter().map(u32::to_string).collect();
                format!(
                    "group {group}'s lines give limit={}; the smallest, {}, is in force",
                    all.join(", limit="),
                    limits.first().copied().unwrap_or_default()
                )
            })
            .collect();
        (!groups.is_empty()).then(|| groups.join("; "))
    }
}

/// Whether a job of `group` may start while `running` of its jobs run
/// (started this round included), under `limits`.
pub fn has_room(limits: &GroupLimits, group: &str, running: u32) -> bool {
    limits.limit(group).is_none_or(|limit| running < limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(text: &str) -> Vec<JobSpec> {
        crate::jobspec::parse_jobs(text).unwrap()
    }

    #[test]
    fn the_smallest_limit_of_a_group_wins_and_disagreement_is_named() {
        let limits = GroupLimits::of(&specs(
            "[group=a limit=3] x 1\n[group=a limit=2] x 2\n[group=a] x 3\n[group=b] y\nz\n",
        ));
        assert_eq!(limits.limit("a"), Some(2));
        assert_eq!(limits.limit("b"), None, "no line of b gives a limit");
        assert_eq!(limits.limit("c"), None);
        assert_eq!(
            limits.disagreement().as_deref(),
            Some("group a's lines give limit=2, limit=3; the smallest, 2, is in force")
        );
        assert!(has_room(&limits, "a", 1) && !has_room(&limits, "a", 2));
        assert!(has_room(&limits, "b", 100));
        let agreeing = GroupLimits::of(&specs("[group=a limit=2] x 1\n[group=a limit=2] x 2\n"));
        assert_eq!(agreeing.disagreement(), None);
        assert!(GroupLimits::of(&specs("x\n")).is_empty());
    }

    #[test]
    fn appended_lines_tighten_a_limit() {
        let mut limits = GroupLimits::of(&specs("[group=a limit=4] x 1\n"));
        limits.add(&specs("[group=a limit=1] x 2\n"));
        assert_eq!(limits.limit("a"), Some(1));
    }

    #[test]
    fn group_and_limit_are_checked_when_parsed() {
        for (line, error) in [
            ("[group=a b] x", "unknown attribute 'b'"),
            ("[group=a/b] x", "bad group 'a/b'"),
            ("[limit=0] x", "bad limit value '0'"),
            ("[limit=two] x", "bad limit value 'two'"),
        ] {
            let e = crate::jobspec::parse_line(line, 1).unwrap_err();
            assert!(e.reason.contains(error), "{line}: {}", e.reason);
        }
    }
}
