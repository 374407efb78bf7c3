//! The scheduler's exit status once its queue drained (docs/BEHAVIOUR.md "Board and terminal"): 0 if
//! every job ended ok or cancelled; otherwise the largest exit code among
//! failed jobs, at least 1 and at most 255.

use crate::model::DoneStatus;

/// The exit status for jobs that ended with these (status, exit code)
/// pairs. A failed job without an exit code (infeasible, never started)
/// counts as 1.
#[must_use]
pub fn exit_code(ended: impl IntoIterator<Item = (DoneStatus, Option<i32>)>) -> i32 {
    ended
        .into_iter()
        .filter(|(status, _)| status.is_failure())
        .map(|(_, returncode)| returncode.unwrap_or(1).clamp(1, 255))
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use DoneStatus::*;

    #[test]
    fn exit_code_rule() {
        type Ended = (DoneStatus, Option<i32>);
        let table: [(&[Ended], i32); 8] = [
            (&[], 0),
            (&[(Ok, Some(0)), (Cancelled, None)], 0),
            (&[(Ok, Some(0)), (Failed, Some(3))], 3),
            (&[(Failed, Some(3)), (Failed, Some(7)), (Ok, Some(0))], 7),
            (&[(Infeasible, None)], 1),
            (&[(Failed, Some(0))], 1),
            (&[(Timeout, Some(143))], 143),
            (&[(FailedOom, Some(-4)), (Failed, Some(300))], 255),
        ];
        for (ended, code) in table {
            assert_eq!(exit_code(ended.iter().copied()), code, "{ended:?}");
        }
    }
}
