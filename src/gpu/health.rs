//! Which GPUs are closed because they stopped answering (docs/HARDWARE.md
//! "A sick GPU"). A GPU that fails alone in a snapshot ([`GpuFault`]) is
//! closed to new jobs with its reason and the time; the other GPUs keep
//! scheduling, and jobs already on it are left alone. It reopens by itself
//! after [`REOPEN_AFTER_SAMPLES`] good samples in a row, or at once with
//! `gpusched undrain`. Pure: the scheduler feeds it snapshots and prints
//! the [`HealthChange`]s it returns.

use super::{GpuFault, GpuSnapshot};
use std::collections::BTreeMap;

/// Good samples in a row after which a closed GPU opens again by itself.
/// A GPU that fell off the bus and came back once may well fall again, so
/// one good answer is not enough.
pub const REOPEN_AFTER_SAMPLES: u32 = 5;

/// A GPU closed because it stopped answering.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultedGpu {
    /// Why, from its latest failure: `NVML: GPU is lost`.
    pub reason: String,
    /// When it was closed (Unix seconds).
    pub since: f64,
    /// Good samples in a row since its latest failure.
    pub good_samples: u32,
    /// Closed until `gpusched undrain`, whatever it answers (an XID
    /// error event).
    pub lasting: bool,
    /// Its memory when it was last seen answering (MiB); 0 when it never
    /// answered in this run.
    pub total_mib: u64,
    /// Memory in use when it was last seen answering (MiB).
    pub used_mib: u64,
}

/// What changed in one snapshot, for the console and notifications.
#[must_use]
#[derive(Debug, Clone, PartialEq)]
pub enum HealthChange {
    /// GPU `index` stopped answering and is closed to new jobs.
    Closed {
        /// NVML device index.
        index: u32,
        /// Why.
        reason: String,
        /// Only `gpusched undrain` opens it again.
        lasting: bool,
    },
    /// GPU `index` answered [`REOPEN_AFTER_SAMPLES`] times in a row and
    /// is open to new jobs again.
    Reopened {
        /// NVML device index.
        index: u32,
        /// Why it had been closed.
        was: String,
    },
}

/// The closed GPUs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Health {
    /// Closed GPUs by NVML index.
    pub faulted: BTreeMap<u32, FaultedGpu>,
}

impl Health {
    /// Takes one snapshot in: closes the GPUs among its faults that were
    /// open, counts good samples of closed GPUs that answered, and reopens
    /// those that answered long enough. `last` is the previous good
    /// snapshot (where a newly closed GPU's memory is read from); `now` is
    /// Unix seconds.
    pub fn observe(
        &mut self,
        snapshot: &GpuSnapshot,
        last: Option<&GpuSnapshot>,
        now: f64,
    ) -> Vec<HealthChange> {
        let mut changes = Vec::new();
        for GpuFault {
            index,
            reason,
            lasting,
        } in &snapshot.faults
        {
            match self.faulted.get_mut(index) {
                Some(closed) => {
                    closed.good_samples = 0;
                    closed.lasting |= lasting;
                    closed.reason.clone_from(reason);
                }
                None => {
                    // A GPU in MIG mode was seen as its MIG instances.
                    let seen = last.map_or((0, 0), |s| {
                        s.gpus
                            .iter()
                            .filter(|g| crate::model::parent_gpu(g.index) == *index)
                            .fold((0, 0), |(t, u), g| (t + g.total_mib, u + g.used_mib))
                    });
                    self.faulted.insert(
                        *index,
                        FaultedGpu {
                            reason: reason.clone(),
                            since: now,
                            good_samples: 0,
                            lasting: *lasting,
                            total_mib: seen.0,
                            used_mib: seen.1,
                        },
                    );
                    changes.push(HealthChange::Closed {
                        index: *index,
                        reason: reason.clone(),
                        lasting: *lasting,
                    });
                }
            }
        }
        let closed: Vec<u32> = self.faulted.keys().copied().collect();
        for index in closed {
            // A GPU in MIG mode answers through its MIG instances.
            let answered: Vec<_> = snapshot
                .gpus
                .iter()
                .filter(|g| crate::model::parent_gpu(g.index) == index || g.index == index)
                .collect();
            if answered.is_empty() {
                continue;
            }
            let Some(closed) = self.faulted.get_mut(&index) else {
                continue;
            };
            closed.total_mib = answered.iter().map(|g| g.total_mib).sum();
            closed.used_mib = answered.iter().map(|g| g.used_mib).sum();
            if closed.lasting || snapshot.faults.iter().any(|f| f.index == index) {
                continue;
            }
            closed.good_samples += 1;
            if closed.good_samples >= REOPEN_AFTER_SAMPLES {
                let was = self.faulted.remove(&index).map(|c| c.reason);
                changes.push(HealthChange::Reopened {
                    index,
                    was: was.unwrap_or_default(),
                });
            }
        }
        changes
    }

    /// Opens GPU `index` now (`gpusched undrain`); returns why it had been
    /// closed, or `None` when it was not.
    pub fn reopen(&mut self, index: u32) -> Option<String> {
        self.faulted.remove(&index).map(|c| c.reason)
    }

    /// The closed GPUs as a bit mask ([`crate::model::gpu_mask`]).
    pub fn mask(&self) -> crate::model::GpuMask {
        crate::model::gpu_mask(self.faulted.keys())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuInfo;

    fn gpu(index: u32) -> GpuInfo {
        GpuInfo {
            index,
            uuid: format!("GPU-{index}"),
            name: "test".into(),
            total_mib: 80_000,
            used_mib: 1_000 * u64::from(index + 1),
            util_percent: None,
            profile: None,
        }
    }

    fn snapshot(good: &[u32], lost: &[u32]) -> GpuSnapshot {
        GpuSnapshot {
            gpus: good.iter().map(|&i| gpu(i)).collect(),
            processes: Vec::new(),
            faults: lost
                .iter()
                .map(|&index| GpuFault {
                    index,
                    reason: "NVML: GPU is lost".into(),
                    lasting: false,
                })
                .collect(),
            ..GpuSnapshot::default()
        }
    }

    #[test]
    fn a_lost_gpu_is_closed_once_with_its_last_memory_and_the_others_stay_open() {
        let mut health = Health::default();
        let before = snapshot(&[0, 1], &[]);
        assert!(health.observe(&before, None, 1.0).is_empty());
        let changes = health.observe(&snapshot(&[1], &[0]), Some(&before), 2.0);
        assert_eq!(
            changes,
            vec![HealthChange::Closed {
                index: 0,
                reason: "NVML: GPU is lost".into(),
                lasting: false,
            }]
        );
        assert_eq!(health.mask(), 0b1);
        let closed = &health.faulted[&0];
        assert_eq!(
            (closed.since, closed.total_mib, closed.used_mib),
            (2.0, 80_000, 1_000)
        );
        // Still lost: no second word, the time it closed stays.
        assert!(health.observe(&snapshot(&[1], &[0]), None, 3.0).is_empty());
        assert_eq!(health.faulted[&0].since, 2.0);
    }

    #[test]
    fn it_reopens_only_after_enough_good_samples_in_a_row() {
        let mut health = Health::default();
        let _ = health.observe(&snapshot(&[1], &[0]), None, 1.0);
        for _ in 1..REOPEN_AFTER_SAMPLES {
            assert!(
                health
                    .observe(&snapshot(&[0, 1], &[]), None, 2.0)
                    .is_empty()
            );
        }
        // A relapse starts the count again.
        assert!(health.observe(&snapshot(&[1], &[0]), None, 3.0).is_empty());
        for _ in 1..REOPEN_AFTER_SAMPLES {
            assert!(
                health
                    .observe(&snapshot(&[0, 1], &[]), None, 4.0)
                    .is_empty()
            );
        }
        assert_eq!(health.mask(), 0b1);
        assert_eq!(
            health.observe(&snapshot(&[0, 1], &[]), None, 5.0),
            vec![HealthChange::Reopened {
                index: 0,
                was: "NVML: GPU is lost".into()
            }]
        );
        assert_eq!(health.mask(), 0);
    }

    #[test]
    fn an_xid_error_keeps_a_gpu_closed_until_undrain_however_well_it_answers() {
        let mut health = Health::default();
        let mut xid = snapshot(&[0, 1], &[]);
        xid.faults.push(GpuFault {
            index: 1,
            reason: "XID 79".into(),
            lasting: true,
        });
        assert_eq!(health.observe(&xid, None, 1.0).len(), 1);
        for _ in 0..3 * REOPEN_AFTER_SAMPLES {
            assert!(
                health
                    .observe(&snapshot(&[0, 1], &[]), None, 2.0)
                    .is_empty()
            );
        }
        assert_eq!(health.mask(), 0b10);
        assert_eq!(health.reopen(1).as_deref(), Some("XID 79"));
    }

    #[test]
    fn undrain_reopens_at_once() {
        let mut health = Health::default();
        let _ = health.observe(&snapshot(&[], &[2]), None, 1.0);
        assert_eq!(health.faulted[&2].total_mib, 0, "never seen answering");
        assert_eq!(health.reopen(2).as_deref(), Some("NVML: GPU is lost"));
        assert_eq!(health.reopen(2), None);
        assert_eq!(health.mask(), 0);
    }

    #[test]
    fn a_gpu_in_mig_mode_answers_through_its_instances() {
        let mut health = Health::default();
        let instance = |mig| GpuInfo {
            index: crate::model::mig_device_id(1, mig).unwrap(),
            total_mib: 40_000,
            used_mib: 500,
            ..GpuInfo::default()
        };
        let before = GpuSnapshot {
            gpus: vec![gpu(0), instance(0), instance(1)],
            ..GpuSnapshot::default()
        };
        let _ = health.observe(&snapshot(&[0], &[1]), Some(&before), 1.0);
        assert_eq!(
            health.faulted[&1].total_mib, 80_000,
            "both instances' memory"
        );
        for n in 1..=REOPEN_AFTER_SAMPLES {
            let changes = health.observe(&before, None, 1.0 + f64::from(n));
            assert_eq!(changes.is_empty(), n < REOPEN_AFTER_SAMPLES, "sample {n}");
        }
        assert!(health.faulted.is_empty());
    }
}
