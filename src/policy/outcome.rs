//! How an ended attempt is recorded (docs/BEHAVIOUR.md "Monitoring", "The live queue", "Out of memory and timeouts"): from how its process
//! ended, why we killed it (if we did), its log tail and its retry budget,
//! [`decide`] returns the [`Outcome`] the loop then journals and prints.

use crate::jobspec::RetryOn;
use crate::model::{Culprit, DeclarationCheck, DoneStatus, Fit, OomCause};
use crate::policy::kill::KillReason;
use crate::policy::oom::Exhausted;

/// Bytes of a failed job's log searched for a CUDA OOM signature (docs/BEHAVIOUR.md "Out of memory and timeouts").
pub const OOM_TAIL_BYTES: u64 = 16 * 1024;

/// The declaration (MiB per GPU) for the attempt after an OOM (docs/BEHAVIOUR.md "Out of memory and timeouts"):
/// ceil(1.25 × max(peak, declaration)), at least ceil(1.25 × declaration).
/// With neither known the job stays undeclared. Saturates instead of
/// overflowing.
pub fn oom_bump(declared_mib: Option<u64>, peak_mib: Option<u64>) -> Option<u64> {
    let base = declared_mib.max(peak_mib)?;
    Some(base.saturating_mul(5).div_ceil(4))
}

/// The declaration (MiB per GPU) for the attempt after a stop for
/// over-use or an OOM at its MPS limit (docs/BEHAVIOUR.md "Declarations
/// that hold"): the larger of twice the declaration and ceil(1.25 × the
/// peak seen). The job was stopped on its way up — its peak is where it
/// was stopped, not where it would have ended — so 1.25 × that peak
/// retries a ramping job short again and again; twice the declaration
/// reaches a peak up to twice what was declared in one retry. With
/// neither known the job stays undeclared. Saturates.
pub fn enforced_bump(declared_mib: Option<u64>, peak_mib: Option<u64>) -> Option<u64> {
    let doubled = declared_mib.map(|d| d.saturating_mul(2));
    let peak = peak_mib.map(|p| p.saturating_mul(5).div_ceil(4));
    doubled.max(peak)
}

/// Whether a peak of `peak_mib` is over a declaration of `declared_mib`
/// beyond `--tolerance` (a fraction): what warns, what `enforce=stop`
/// stops, what the board marks `OVER`, and who is blamed for a
/// neighbour's OOM (docs/BEHAVIOUR.md "Monitoring", "Declarations that
/// hold").
pub fn beyond_declaration(declared_mib: u64, peak_mib: u64, tolerance: f64) -> bool {
    peak_mib as f64 > declared_mib as f64 * (1.0 + tolerance)
}

/// How a peak of `peak_mib` compares with a declaration of
/// `declared_mib` (docs/BEHAVIOUR.md "Monitoring"): within ±`tolerance`
/// (a fraction), or too large or too small by the percent of the
/// declaration. `None` when either is unknown.
pub fn check_declaration(
    declared_mib: Option<u64>,
    peak_mib: Option<u64>,
    tolerance: f64,
) -> Option<DeclarationCheck> {
    let (declared, peak) = (declared_mib?, peak_mib?);
    let ratio = peak as f64 / declared.max(1) as f64;
    let percent = ((ratio - 1.0).abs() * 100.0).round().min(u32::MAX as f64) as u32;
    let fit = if beyond_declaration(declared, peak, tolerance) {
        Fit::Exceeded
    } else if ratio < 1.0 - tolerance {
        Fit::OverDeclared
    } else {
        Fit::Within
    };
    Some(DeclarationCheck { fit, percent })
}

/// What was observed of an attempt that ended for good, worked out once
/// at its end and journaled in its `done` event: the completion line,
/// status.json and the summary all read it from there, so they cannot
/// disagree (docs/BEHAVIOUR.md "Monitoring").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observations {
    /// Its peak against its declaration; `None` when either is unknown.
    pub declaration: Option<DeclarationCheck>,
    /// Declared, yet never seen on its GPUs: it probably ran on the CPU.
    pub no_gpu_memory: bool,
    /// A failed attempt's last line of output (gpusched's own lines left
    /// out), where the reason usually is.
    pub last_line: Option<String>,
}

/// How a job's process ended, as a shell reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal number.
    Signal(i32),
}

impl Exit {
    /// The exit code as the journal records it: the code, or 128 + signal.
    pub fn returncode(self) -> i32 {
        match self {
            Exit::Code(code) => code,
            Exit::Signal(signal) => 128 + signal,
        }
    }

    /// Whether it ended as a signal ends a process: killed by one, or a
    /// shell's `128 + signal` (a shell that caught the signal, ran its
    /// EXIT trap and exited so; `srun` passing its task's on). While the
    /// scheduler stops, such an end is the stop reaching the job first
    /// (docs/BEHAVIOUR.md "Stopping").
    pub fn by_a_signal(self) -> bool {
        match self {
            Exit::Signal(_) => true,
            Exit::Code(code) => (129..=128 + 64).contains(&code),
        }
    }

    /// Words for the completion line: `exit 3`, `killed by SIGKILL`.
    pub fn describe(self) -> String {
        match self {
            Exit::Code(code) => format!("exit {code}"),
            Exit::Signal(signal) => {
                let name = nix::sys::signal::Signal::try_from(signal)
                    .map_or_else(|_| signal.to_string(), |s| s.to_string());
                format!("killed by {name}")
            }
        }
    }

    /// From a reaped child's status; `None` when it says neither.
    pub fn from_status(status: &std::process::ExitStatus) -> Option<Exit> {
        use std::os::unix::process::ExitStatusExt;
        status
            .code()
            .map(Exit::Code)
            .or_else(|| status.signal().map(Exit::Signal))
    }
}

/// Everything [`decide`] needs about an attempt that ended.
#[derive(Debug, Clone, Copy)]
pub struct AttemptEnd {
    /// How its process ended; `None` when that cannot be known (its
    /// scheduler died and nothing recorded the exit).
    pub exit: Option<Exit>,
    /// Why we killed it, if we did.
    pub kill: Option<KillReason>,
    /// Which memory ran out, as the last [`OOM_TAIL_BYTES`] of this
    /// attempt's log say ([`crate::policy::oom::classify`]); `None` when
    /// they name no memory exhaustion.
    pub ran_out_of: Option<Exhausted>,
    /// Retries used before this attempt (OOMs and, under `retry_on=`,
    /// failures: one budget).
    pub retries_used: u32,
    /// Retries allowed (`retries=`, else `--oom-retries`).
    pub retries_allowed: u32,
    /// What the retries are for (`retry_on=`).
    pub retry_on: RetryOn,
    /// This attempt's declaration per GPU (MiB).
    pub declared_mib: Option<u64>,
    /// Its highest per-GPU peak (MiB), if measured.
    pub peak_mib: Option<u64>,
    /// What its GPU OOM message says it was reaching (MiB per GPU: what
    /// it held plus the allocation that failed,
    /// [`crate::policy::oom::Reach`]); an OOM retry asks at least 1.25×
    /// that, since a job that ramps between samples dies far above its
    /// last sampled peak.
    pub reaching_mib: Option<u64>,
    /// What whoever ran it said beyond the exit (docs/BEHAVIOUR.md "Slurm"), if anything.
    pub verdict: Option<Verdict>,
    /// Another job on its GPUs that was over its own declaration when
    /// this one ended (docs/BEHAVIOUR.md "Declarations that hold").
    pub neighbour_over: Option<Culprit>,
    /// It ran under an MPS memory limit of its declaration (`--enforce
    /// mps`): a GPU OOM is that limit.
    pub mps_limited: bool,
    /// The kernel's OOM killer killed a process of its cgroup, at its
    /// host memory limit (docs/BEHAVIOUR.md "Containment"): a failure of
    /// host memory, never retried as a GPU OOM.
    pub host_oom: bool,
}

/// What a launcher says about an ended attempt that no exit code carries
/// (docs/BEHAVIOUR.md "Slurm": Slurm's own states).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Ended by the cluster (NODE_FAIL, the host's OUT_OF_MEMORY, …):
    /// `failed`.
    Failed,
    /// Cancelled because an `after=` dependency can never end ok:
    /// `dependency_failed`.
    DependencyFailed,
    /// Cancelled by the cluster for a dependency that runs again (an OOM
    /// retry): pending again, submitted anew.
    Requeue,
}

/// What to record for an ended attempt.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Stopped because the scheduler is stopping: nothing is recorded as
    /// done, so the next start runs it again (docs/BEHAVIOUR.md "Board and terminal").
    StoppedWithScheduler,
    /// Its outcome cannot be known: record `interrupted`, run it again
    /// (docs/BEHAVIOUR.md "Orphans").
    Interrupted,
    /// Stopped for a blocked job above it (docs/BEHAVIOUR.md "Queue policy"): record `preempted`,
    /// pending again; not a failure, no retry used.
    Preempted,
    /// A CUDA OOM with retries left: record `oom` and requeue with a
    /// bigger declaration (docs/BEHAVIOUR.md "Out of memory and timeouts").
    OomRetry {
        /// OOM attempts so far, this one included (unchanged when a
        /// neighbour caused it).
        attempts: u32,
        /// Declaration per GPU (MiB) for the next attempt.
        next_vram_mib: Option<u64>,
        /// Why, when not simply its own OOM.
        cause: Option<OomCause>,
    },
    /// A failure that is no OOM (`failed`, `timeout`) with retries left
    /// under `retry_on=fail|any`: record `requeued` and run it again as
    /// it was.
    FailRetry {
        /// Retries so far, this one included.
        attempts: u32,
        /// How the attempt ended.
        status: DoneStatus,
    },
    /// It ended for good with this status.
    Done(DoneStatus),
}

/// The outcome rule. A kill decides first (shutdown, cancel, timeout: a
/// cancel uses no retry; a stop for over-use is retried as an OOM with a
/// bigger declaration while retries are left, else `exceeded_declaration`); then
/// an unknown exit is `interrupted`; exit 0 is `ok`; a failure whose log
/// shows a CUDA OOM is retried with the same declaration and no retry
/// used when a neighbour was over its declaration, else with a bigger one
/// while retries are left, else `failed_oom`; any other failure is
/// `failed`. Under `retry_on=` (docs/BEHAVIOUR.md "Out of memory and
/// timeouts") `fail` moves the retries from OOMs to the other failures
/// (`failed`, `timeout`), which run again as they were, and `any` retries
/// both.
pub fn decide(end: &AttemptEnd) -> Outcome {
    let decided = decide_oom(end);
    let Outcome::Done(status @ (DoneStatus::Failed | DoneStatus::Timeout)) = decided else {
        return decided;
    };
    if end.retry_on.failures() && end.retries_used < end.retries_allowed {
        return Outcome::FailRetry {
            attempts: end.retries_used + 1,
            status,
        };
    }
    decided
}

/// [`decide`] as far as OOMs go: what `retry_on=oom` (the default)
/// decides; without `retry_on=` naming OOMs, none is retried.
fn decide_oom(end: &AttemptEnd) -> Outcome {
    let oom_retry_left = end.retry_on.ooms() && end.retries_used < end.retries_allowed;
    match end.kill {
        Some(KillReason::Shutdown) => return Outcome::StoppedWithScheduler,
        Some(KillReason::ExceededDeclaration) => {
            return if oom_retry_left {
                Outcome::OomRetry {
                    attempts: end.retries_used + 1,
                    next_vram_mib: enforced_bump(end.declared_mib, end.peak_mib),
                    cause: Some(OomCause::ExceededDeclaration {
                        peak_mib: end.peak_mib,
                    }),
                }
            } else {
                Outcome::Done(DoneStatus::ExceededDeclaration)
            };
        }
        Some(KillReason::Cancel) => return Outcome::Done(DoneStatus::Cancelled),
        Some(KillReason::Timeout) => return Outcome::Done(DoneStatus::Timeout),
        Some(KillReason::Preempt) => return Outcome::Preempted,
        None => {}
    }
    match end.verdict {
        Some(Verdict::Failed) => return Outcome::Done(DoneStatus::Failed),
        Some(Verdict::DependencyFailed) => return Outcome::Done(DoneStatus::DependencyFailed),
        Some(Verdict::Requeue) => return Outcome::Interrupted,
        None => {}
    }
    let Some(exit) = end.exit else {
        return Outcome::Interrupted;
    };
    if exit == Exit::Code(0) {
        return Outcome::Done(DoneStatus::Ok);
    }
    if end.host_oom {
        return Outcome::Done(DoneStatus::HostOom);
    }
    if end.ran_out_of != Some(Exhausted::Gpu) {
        return Outcome::Done(DoneStatus::Failed);
    }
    // Its declaration was right: the same again, no retry used.
    if let Some(culprit) = end.neighbour_over {
        return Outcome::OomRetry {
            attempts: end.retries_used,
            next_vram_mib: end.declared_mib,
            cause: Some(OomCause::Neighbour(culprit)),
        };
    }
    let mps_limit = end.declared_mib.filter(|_| end.mps_limited);
    if oom_retry_left {
        Outcome::OomRetry {
            attempts: end.retries_used + 1,
            next_vram_mib: match mps_limit {
                Some(_) => enforced_bump(end.declared_mib, end.peak_mib.max(end.reaching_mib)),
                None => oom_bump(end.declared_mib, end.peak_mib.max(end.reaching_mib)),
            },
            cause: mps_limit.map(|limit_mib| OomCause::MpsLimit { limit_mib }),
        }
    } else {
        Outcome::Done(DoneStatus::FailedOom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a failed job's log tail shows that it ran out of GPU memory
    /// (what `decide` is given as `ran_out_of`).
    fn is_oom(log_tail: &str) -> bool {
        crate::policy::oom::classify(log_tail).is_some_and(|s| s.memory == Exhausted::Gpu)
    }

    #[test]
    fn oom_signatures_match_case_insensitively() {
        assert!(is_oom(
            "RuntimeError: CUDA out of memory. Tried to allocate"
        ));
        assert!(is_oom("torch.OutOfMemoryError: boom"));
        assert!(is_oom("CUDA error: out of memory"));
        assert!(is_oom("CUDA_ERROR_OUT_OF_MEMORY"));
        assert!(is_oom("cudaErrorMemoryAllocation"));
        assert!(is_oom("ResourceExhaustedError: RESOURCE_EXHAUSTED: OOM"));
        assert!(is_oom("cuda OUT OF MEMORY"));
        assert!(!is_oom("Segmentation fault"));
        assert!(!is_oom("host out of memory"));
    }

    #[test]
    fn declaration_checks() {
        let check = |declared, peak| check_declaration(declared, peak, 0.1);
        let fit = |fit, percent| Some(DeclarationCheck { fit, percent });
        assert_eq!(check(None, Some(100)), None);
        assert_eq!(check(Some(100), None), None);
        assert_eq!(check(Some(8000), Some(8700)), fit(Fit::Within, 9));
        assert_eq!(check(Some(8000), Some(7300)), fit(Fit::Within, 9));
        assert_eq!(check(Some(8000), Some(4000)), fit(Fit::OverDeclared, 50));
        assert_eq!(check(Some(8000), Some(10000)), fit(Fit::Exceeded, 25));
    }

    #[test]
    fn oom_bump_rules() {
        // ceil(1.25 × max(peak, declaration)).
        assert_eq!(oom_bump(Some(4000), Some(2000)), Some(5000));
        assert_eq!(oom_bump(Some(4000), Some(6001)), Some(7502));
        assert_eq!(oom_bump(Some(4001), None), Some(5002));
        assert_eq!(oom_bump(None, Some(1000)), Some(1250));
        assert_eq!(oom_bump(None, None), None);
        assert_eq!(oom_bump(Some(u64::MAX), None), Some(u64::MAX / 4 + 1));
    }

    #[test]
    fn exit_words_and_codes() {
        assert_eq!(Exit::Code(3).returncode(), 3);
        assert_eq!(Exit::Signal(9).returncode(), 137);
        assert_eq!(Exit::Code(3).describe(), "exit 3");
        assert_eq!(Exit::Signal(9).describe(), "killed by SIGKILL");
    }

    const OOM_LOG: &str = "...\ntorch.OutOfMemoryError: CUDA out of memory\n";

    fn end(exit: Option<Exit>, kill: Option<KillReason>, tail: &str, used: u32) -> AttemptEnd {
        AttemptEnd {
            exit,
            kill,
            ran_out_of: crate::policy::oom::classify(tail).map(|s| s.memory),
            retries_used: used,
            retries_allowed: 2,
            declared_mib: Some(4000),
            peak_mib: Some(4500),
            reaching_mib: None,
            verdict: None,
            neighbour_over: None,
            mps_limited: false,
            host_oom: false,
            retry_on: RetryOn::Oom,
        }
    }

    /// `retry_on=`: `oom` retries OOMs only (as before), `fail` the other
    /// failures and timeouts only, `any` both; one budget; never a
    /// cancel, a preemption, a stop with the scheduler or a success.
    #[test]
    fn retry_on_chooses_what_is_retried() {
        let with = |retry_on, exit, kill, tail, used| AttemptEnd {
            retry_on,
            ..end(exit, kill, tail, used)
        };
        let fail = Some(Exit::Code(3));
        let oom = |r| decide(&with(r, fail, None, OOM_LOG, 0));
        let failed = |r| decide(&with(r, fail, None, "boom", 0));
        let timeout = |r| decide(&with(r, None, Some(KillReason::Timeout), "", 1));
        let retried = |attempts, status| Outcome::FailRetry { attempts, status };
        assert!(matches!(oom(RetryOn::Oom), Outcome::OomRetry { .. }));
        assert_eq!(failed(RetryOn::Oom), Outcome::Done(DoneStatus::Failed));
        assert_eq!(timeout(RetryOn::Oom), Outcome::Done(DoneStatus::Timeout));
        assert_eq!(oom(RetryOn::Fail), Outcome::Done(DoneStatus::FailedOom));
        assert_eq!(failed(RetryOn::Fail), retried(1, DoneStatus::Failed));
        assert_eq!(timeout(RetryOn::Fail), retried(2, DoneStatus::Timeout));
        assert!(matches!(oom(RetryOn::Any), Outcome::OomRetry { .. }));
        assert_eq!(failed(RetryOn::Any), retried(1, DoneStatus::Failed));
        // The budget is shared and runs out.
        assert_eq!(
            decide(&with(RetryOn::Any, fail, None, "boom", 2)),
            Outcome::Done(DoneStatus::Failed)
        );
        // Never retried, whatever retry_on says.
        for kill in [
            KillReason::Cancel,
            KillReason::Preempt,
            KillReason::Shutdown,
        ] {
            let outcome = decide(&with(RetryOn::Any, fail, Some(kill), "boom", 0));
            assert!(!matches!(outcome, Outcome::FailRetry { .. }), "{kill:?}");
        }
        assert_eq!(
            decide(&with(RetryOn::Any, Some(Exit::Code(0)), None, "", 0)),
            Outcome::Done(DoneStatus::Ok)
        );
        // A stop for over-use is an OOM's kind of retry.
        let over = with(
            RetryOn::Fail,
            fail,
            Some(KillReason::ExceededDeclaration),
            "",
            0,
        );
        assert_eq!(
            decide(&over),
            Outcome::Done(DoneStatus::ExceededDeclaration)
        );
    }

    /// A ramping job stopped at 7,395 MiB on its way to 12,000 used to be
    /// retried at 9,244, then 10,466, and end `exceeded_declaration`: twice its
    /// declaration reaches the peak in one retry; 1.25 × a peak far past
    /// the declaration is used when larger.
    #[test]
    fn retries_after_enforcement_reach_a_ramping_peak() {
        assert_eq!(enforced_bump(Some(6600), Some(7395)), Some(13_200));
        assert_eq!(enforced_bump(Some(4000), Some(9000)), Some(11_250));
        assert_eq!(enforced_bump(None, Some(4000)), Some(5000));
        assert_eq!(enforced_bump(None, None), None);
        assert_eq!(enforced_bump(Some(u64::MAX), None), Some(u64::MAX));
    }

    /// Under `--enforce mps` a GPU OOM is the job's MPS limit: retried at
    /// the enforcement size and said so; without MPS the plain OOM bump.
    #[test]
    fn an_oom_at_the_mps_limit_is_retried_past_it() {
        let mps = AttemptEnd {
            mps_limited: true,
            ..end(Some(Exit::Code(1)), None, OOM_LOG, 0)
        };
        assert_eq!(
            decide(&mps),
            Outcome::OomRetry {
                attempts: 1,
                next_vram_mib: Some(8000),
                cause: Some(OomCause::MpsLimit { limit_mib: 4000 }),
            }
        );
        assert_eq!(
            decide(&end(Some(Exit::Code(1)), None, OOM_LOG, 0)),
            Outcome::OomRetry {
                attempts: 1,
                next_vram_mib: Some(5625),
                cause: None,
            }
        );
        let last = AttemptEnd {
            mps_limited: true,
            ..end(Some(Exit::Code(1)), None, OOM_LOG, 2)
        };
        assert_eq!(decide(&last), Outcome::Done(DoneStatus::FailedOom));
    }

    #[test]
    fn a_job_stopped_for_over_use_is_retried_bigger_within_its_budget() {
        let stopped = |used| {
            end(
                Some(Exit::Signal(15)),
                Some(KillReason::ExceededDeclaration),
                "",
                used,
            )
        };
        assert_eq!(
            decide(&stopped(0)),
            Outcome::OomRetry {
                attempts: 1,
                // Twice its declaration (4000), more than 1.25 × the
                // 4500 it was stopped at on its way up.
                next_vram_mib: Some(8000),
                cause: Some(OomCause::ExceededDeclaration {
                    peak_mib: Some(4500)
                }),
            }
        );
        assert_eq!(
            decide(&stopped(2)),
            Outcome::Done(DoneStatus::ExceededDeclaration)
        );
    }

    #[test]
    fn a_neighbours_over_use_is_blamed_and_costs_the_victim_nothing() {
        let culprit = Culprit {
            job: 1,
            peak_mib: 13_900,
            declared_mib: 10_240,
        };
        let victim = |used| AttemptEnd {
            neighbour_over: Some(culprit),
            ..end(Some(Exit::Code(1)), None, OOM_LOG, used)
        };
        // Same declaration, no retry used, even with none left.
        for used in [0, 2] {
            assert_eq!(
                decide(&victim(used)),
                Outcome::OomRetry {
                    attempts: used,
                    next_vram_mib: Some(4000),
                    cause: Some(OomCause::Neighbour(culprit)),
                }
            );
        }
        // A failure that is no OOM is its own, whoever was over.
        let crashed = AttemptEnd {
            neighbour_over: Some(culprit),
            ..end(Some(Exit::Code(1)), None, "Segmentation fault", 0)
        };
        assert_eq!(decide(&crashed), Outcome::Done(DoneStatus::Failed));
        assert_eq!(
            culprit.describe(),
            "job 1 (13900 MiB on a 10240 MiB declaration, +36%)"
        );
    }

    #[test]
    fn launcher_verdicts_come_after_kills_and_before_exits() {
        let with = |verdict, kill| AttemptEnd {
            verdict: Some(verdict),
            ..end(Some(Exit::Code(0)), kill, OOM_LOG, 0)
        };
        assert_eq!(
            decide(&with(Verdict::Failed, None)),
            Outcome::Done(DoneStatus::Failed)
        );
        assert_eq!(
            decide(&with(Verdict::DependencyFailed, None)),
            Outcome::Done(DoneStatus::DependencyFailed)
        );
        assert_eq!(decide(&with(Verdict::Requeue, None)), Outcome::Interrupted);
        assert_eq!(
            decide(&with(Verdict::Failed, Some(KillReason::Cancel))),
            Outcome::Done(DoneStatus::Cancelled)
        );
    }

    #[test]
    fn outcome_rules() {
        use DoneStatus::{Cancelled, Failed, FailedOom, Ok};
        use KillReason::{Cancel, Shutdown};
        const TIMEOUT_KILL: Option<KillReason> = Some(KillReason::Timeout);
        let ok = Some(Exit::Code(0));
        let fail = Some(Exit::Code(1));
        let killed = Some(Exit::Signal(15));
        let table = [
            // Kills decide first, whatever the exit and the log say.
            (
                end(killed, Some(Shutdown), OOM_LOG, 0),
                Outcome::StoppedWithScheduler,
            ),
            (
                end(None, Some(Shutdown), "", 0),
                Outcome::StoppedWithScheduler,
            ),
            (
                end(killed, Some(Cancel), OOM_LOG, 0),
                Outcome::Done(Cancelled),
            ),
            (end(ok, Some(Cancel), "", 0), Outcome::Done(Cancelled)),
            (
                end(killed, TIMEOUT_KILL, OOM_LOG, 0),
                Outcome::Done(DoneStatus::Timeout),
            ),
            (
                end(None, TIMEOUT_KILL, "", 0),
                Outcome::Done(DoneStatus::Timeout),
            ),
            // No kill: an unknown exit is interrupted.
            (end(None, None, OOM_LOG, 0), Outcome::Interrupted),
            // Exit 0 is ok even with an OOM line in the log.
            (end(ok, None, OOM_LOG, 0), Outcome::Done(Ok)),
            // A failure with an OOM signature and retries left is retried
            // with ceil(1.25 × max(peak, declaration)).
            (
                end(fail, None, OOM_LOG, 0),
                Outcome::OomRetry {
                    attempts: 1,
                    next_vram_mib: Some(5625),
                    cause: None,
                },
            ),
            (
                end(killed, None, OOM_LOG, 1),
                Outcome::OomRetry {
                    attempts: 2,
                    next_vram_mib: Some(5625),
                    cause: None,
                },
            ),
            // No retries left.
            (end(fail, None, OOM_LOG, 2), Outcome::Done(FailedOom)),
            // Other failures never use retries.
            (
                end(fail, None, "Segmentation fault", 0),
                Outcome::Done(Failed),
            ),
            (end(killed, None, "", 0), Outcome::Done(Failed)),
        ];
        for (end, outcome) in table {
            assert_eq!(decide(&end), outcome, "{end:?}");
        }
    }
}
