//! Why a running job is being killed, and the one escalation rule
//! (HOUSE habit 12): a kill only ever escalates to a stronger reason, so a
//! timeout can become a cancel and anything can become a shutdown, but a
//! shutdown is never downgraded and nothing is killed twice.

/// Why we are killing a running job, weakest first: the order is the
/// escalation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KillReason {
    /// A blocked job above it needs its GPUs and it is `preemptible`
    /// (docs/BEHAVIOUR.md "Queue policy"): journaled `preempted`, pending again, no retry used.
    Preempt,
    /// It used more VRAM than it declared, under `--enforce stop`
    /// (docs/BEHAVIOUR.md "Declarations that hold"): retried as an OOM is,
    /// with a bigger declaration, or ends `exceeded_declaration`.
    ExceededDeclaration,
    /// Its `timeout=` was reached (docs/BEHAVIOUR.md "Out of memory and timeouts"): ends `timeout`.
    Timeout,
    /// The user added `cancel` to its line (docs/BEHAVIOUR.md "Out of memory and timeouts"): ends `cancelled`.
    Cancel,
    /// The scheduler is stopping (Ctrl-C, SIGTERM; docs/BEHAVIOUR.md "Board and terminal"): nothing is
    /// recorded as done, the job runs again on the next start.
    Shutdown,
}

impl KillReason {
    /// The word for boards and notes: `preempt`, `exceeded_declaration`,
    /// `timeout`, `cancel`, `shutdown`.
    pub fn as_str(self) -> &'static str {
        match self {
            KillReason::Preempt => "preempt",
            KillReason::ExceededDeclaration => "exceeded_declaration",
            KillReason::Timeout => "timeout",
            KillReason::Cancel => "cancel",
            KillReason::Shutdown => "shutdown",
        }
    }
}

/// What to do when a kill for `requested` is asked for a job whose current
/// kill reason is `current`.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillStep {
    /// No kill yet: send SIGTERM to the group now and start the grace.
    Begin,
    /// A kill is under way for a weaker reason: keep its signals and grace,
    /// record the stronger reason.
    Escalate,
    /// A kill for this reason or a stronger one is under way: nothing to do.
    Keep,
}

/// The escalation rule: begin when nothing is under way, escalate only to
/// a stronger reason, never downgrade.
pub fn kill_step(current: Option<KillReason>, requested: KillReason) -> KillStep {
    match current {
        None => KillStep::Begin,
        Some(current) if requested > current => KillStep::Escalate,
        Some(_) => KillStep::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::KillReason::*;
    use super::*;

    #[test]
    fn kills_only_escalate() {
        let table = [
            (None, Preempt, KillStep::Begin),
            (Some(Preempt), Timeout, KillStep::Escalate),
            (Some(Preempt), Cancel, KillStep::Escalate),
            (Some(Timeout), Preempt, KillStep::Keep),
            (Some(Cancel), Preempt, KillStep::Keep),
            (Some(Shutdown), Preempt, KillStep::Keep),
            (None, Timeout, KillStep::Begin),
            (None, Cancel, KillStep::Begin),
            (None, Shutdown, KillStep::Begin),
            (Some(Timeout), Timeout, KillStep::Keep),
            (Some(Timeout), Cancel, KillStep::Escalate),
            (Some(Timeout), Shutdown, KillStep::Escalate),
            (Some(Cancel), Timeout, KillStep::Keep),
            (Some(Cancel), Cancel, KillStep::Keep),
            (Some(Cancel), Shutdown, KillStep::Escalate),
            (Some(Shutdown), Timeout, KillStep::Keep),
            (Some(Shutdown), Cancel, KillStep::Keep),
            (Some(Shutdown), Shutdown, KillStep::Keep),
        ];
        for (current, requested, step) in table {
            assert_eq!(
                kill_step(current, requested),
                step,
                "{current:?} → {requested:?}"
            );
        }
    }
}
