//! Phase 9, the end of the run (docs/BEHAVIOUR.md "Board and terminal"): after a stop signal, exit 130 once
//! no job runs; without `--watch`, once nothing runs or waits, print the
//! summary and exit with [`policy::exit_code`].

use crate::journal::Phase;
use crate::policy::exit_code::exit_code;
use crate::scheduler::Scheduler;
use crate::state::Mode;
use crate::view::report;
use crate::view::status;

impl Scheduler {
    /// The exit code once the run is over, or `None` to keep going.
    pub(in crate::scheduler) fn exit_code_if_done(&mut self) -> Option<i32> {
        if let Mode::Stopping { give_up_at, .. } = self.core.mode {
            if !self.core.running.is_empty() && std::time::Instant::now() < give_up_at {
                return None;
            }
            if !self.core.running.is_empty() {
                // Nothing of theirs outlives the scheduler's container:
                // whatever is left in their cgroups dies now (their
                // groups had SIGKILL at the grace's end).
                for job in self.core.running.values() {
                    if job.may_signal()
                        && let Some(cgroup) = &job.cgroup
                    {
                        let _ = cgroup.finish();
                    }
                }
                let left: Vec<String> = self
                    .core
                    .running
                    .values()
                    .map(|j| j.no.to_string())
                    .collect();
                self.report.warn(format!(
                    "{} ({}) did not report their end in time; the next start records how they ended (from their exit records) and runs again those a kill reached",
                    crate::words::count(left.len(), "job"),
                    left.join(", ")
                ));
            }
            self.tell_left_for_next_allocation();
            self.write_timeline();
            self.flush_told_within(std::time::Duration::from_secs(1));
            let wrapped_up = self.io.pilot.as_ref().is_some_and(|p| p.wrapped_up);
            return Some(if wrapped_up {
                crate::pilot::EXIT_FOR_NEXT_ALLOCATION
            } else {
                130
            });
        }
        if self.cfg.watch || !self.core.running.is_empty() || self.pending().next().is_some() {
            return None;
        }
        let in_file = self.core.jobs.specs.iter().filter_map(|s| {
            match &self.io.journal.state(&s.key)?.phase {
                Phase::Done(done) => Some((done.status, done.returncode)),
                _ => None,
            }
        });
        let this_run = self.report.this_run.ended.values().copied();
        let ended: Vec<_> = in_file.chain(this_run).collect();
        let code = exit_code(ended.iter().copied());
        let any_failure = ended.iter().any(|(status, _)| status.is_failure());
        self.tell_drained();
        self.print_summary();
        self.report.say(format!(
            "{} in {}: {} dispatched this run{}; exit {code}",
            crate::words::QUEUE_DONE,
            crate::console::human_duration(self.now().ts - self.report.started_ts),
            crate::words::count(self.report.this_run.dispatched, "job"),
            if any_failure {
                " — some jobs did not succeed, see status.txt"
            } else {
                ""
            }
        ));
        // The summary is printed before the timeline is drawn, which can
        // take a second for a long run.
        self.speak();
        self.write_timeline();
        self.flush_told_within(super::told::FLUSH_LIMIT);
        Some(code)
    }

    /// Inside an allocation, as the pilot exits: the jobs it leaves for
    /// the next allocation (every job of the file not yet ended: those
    /// waiting, and those its stop interrupted), by number.
    fn tell_left_for_next_allocation(&mut self) {
        let Some(id) = self.io.pilot.as_ref().map(|p| p.allocation.job_id) else {
            return;
        };
        let mut left: Vec<u32> = self
            .pending()
            .filter_map(|(index, _)| {
                Some(self.io.journal.state(&self.core.jobs.specs[index].key)?.no)
            })
            .chain(self.core.running.values().map(|job| job.no))
            .collect();
        left.sort_unstable();
        left.dedup();
        if left.is_empty() {
            self.report.say(format!(
                "Slurm job {id}: nothing is left for the next allocation"
            ));
        } else {
            let numbers: Vec<String> = left.iter().map(u32::to_string).collect();
            self.report.say(format!(
                "Slurm job {id}: left for the next allocation: {}: {}",
                crate::words::count(left.len(), "job"),
                numbers.join(", ")
            ));
        }
    }

    /// Prints the summary of the run's jobs and what was learned, after
    /// the lines said so far.
    pub(in crate::scheduler) fn print_summary(&mut self) {
        self.speak();
        let mut summary = status::summary(&self.status_doc_now());
        summary.push_str(&report::learned_summary(&self.core.learned.this_run));
        let mut out = std::io::stdout().lock();
        let _ = std::io::Write::write_all(&mut out, format!("\n{summary}\n").as_bytes());
    }

    /// Draws the run into `<log_dir>/timeline.svg` (docs/BEHAVIOUR.md "Timeline"); a failure
    /// is a warning, never a different exit.
    fn write_timeline(&mut self) {
        let path = self.cfg.log_dir.join("timeline.svg");
        match crate::timeline::write(&self.cfg.log_dir, &path) {
            Ok(()) => self.report.say(format!("timeline: {}", path.display())),
            Err(e) => self
                .report
                .warn(format!("cannot draw {}: {e:#}", path.display())),
        }
    }
}
