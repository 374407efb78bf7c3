//! NVML backend (SPEC §10), through `nvml-wrapper`.

use super::{GpuBackend, GpuSnapshot};
use crate::scheduler::StartError;

/// Reads GPU state from NVML.
pub struct NvmlBackend {}

impl NvmlBackend {
    /// Loads and initialises NVML once for the run.
    pub fn open() -> anyhow::Result<Self> {
        Err(StartError("NVML backend not built yet; use --sim N".into()).into())
    }
}

impl GpuBackend for NvmlBackend {
    fn snapshot(&mut self) -> anyhow::Result<GpuSnapshot> {
        unreachable!()
    }
    fn describe(&self) -> String {
        String::new()
    }
}
