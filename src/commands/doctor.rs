//! `gpusched doctor` (docs/HARDWARE.md "gpusched doctor"): what a lab
//! admin runs first. It reads the GPUs as the scheduler would (NVML, or
//! `--sim`), and checks what gpusched needs around them: the ledger
//! directory and the log directory. Each finding is `ok`, `warn` or
//! `error`, with a fix where there is one; the exit code is 1 when any is
//! an error. On a machine without the NVIDIA driver it says so in one line.

use crate::allocation::Topology;
use crate::cli::DoctorArgs;
use crate::gpu::nvml::{self, DeviceReport, HostReport};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// As it should be.
    Ok,
    /// Works, but worth a look.
    Warn,
    /// gpusched cannot work so: the exit code is 1.
    Error,
}

impl Level {
    const fn word(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

/// One thing the doctor found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// How much it matters.
    pub level: Level,
    /// What was found.
    pub text: String,
    /// What to do about it, if anything.
    pub fix: Option<String>,
}

impl Finding {
    fn new(level: Level, text: impl Into<String>) -> Finding {
        Finding {
            level,
            text: text.into(),
            fix: None,
        }
    }

    fn fix(mut self, fix: impl Into<String>) -> Finding {
        self.fix = Some(fix.into());
        self
    }
}

/// Runs the checks and prints them; 0 when nothing is an error, else 1.
///
/// Errors: none beyond printing; every problem is a finding.
pub fn run(args: &DoctorArgs) -> anyhow::Result<i32> {
    let mut findings = Vec::new();
    let mut matrix = None;
    match args.sim {
        Some(count) => {
            findings.push(Finding::new(
                Level::Ok,
                format!(
                    "{count} simulated GPU{} of {} MiB (--sim; no NVML needed)",
                    if count == 1 { "" } else { "s" },
                    crate::gpu::sim::SIM_TOTAL_MIB
                ),
            ));
            let nvlink = args.sim_nvlink.as_ref().map_or(&[][..], |p| &p.0[..]);
            let topology = crate::gpu::sim::topology(count, nvlink);
            matrix = Some((topology, (0..count).collect::<Vec<u32>>()));
        }
        None => match nvml::inspect() {
            Ok(report) => {
                findings.extend(gpu_findings(&report, |pid| {
                    Path::new(&format!("/proc/{pid}")).exists()
                }));
                findings.extend(allocation_finding(&report));
                let indices = report.devices.iter().map(|d| d.index).collect();
                matrix = Some((report.topology, indices));
            }
            Err(nvml_wrapper::error::NvmlError::LibloadingError(e)) => {
                println!(
                    "gpusched doctor: no NVIDIA driver here: cannot load {} ({e}); install the NVIDIA driver, or try gpusched without GPUs with --sim N",
                    nvml::NVML_LIBRARY
                );
                return Ok(1);
            }
            Err(e) => findings.push(nvml_start_finding(&e)),
        },
    }
    let ledger = args.ledger.clone().unwrap_or_else(|| match &args.sim {
        Some(_) => crate::files::absolute(&args.log_dir)
            .join("sim")
            .join("ledger"),
        None => crate::ledger::store::DEFAULT_DIR.into(),
    });
    findings.push(ledger_finding(&ledger, args.sim.is_some()));
    findings.push(log_dir_finding(&args.log_dir));
    findings.push(containment_finding(&args.log_dir));
    print!("{}", render(&findings, matrix.as_ref()));
    Ok(i32::from(findings.iter().any(|f| f.level == Level::Error)))
}

/// Inside a Slurm allocation (docs/BEHAVIOUR.md "Inside a Slurm
/// allocation"): which GPUs a pilot started here would use, matched as
/// the scheduler matches them; an error when they cannot be matched.
/// `None` outside Slurm.
fn allocation_finding(report: &HostReport) -> Option<Finding> {
    let allocation = crate::pilot::Allocation::from_env()?;
    let answered: Vec<(u32, String)> = report
        .devices
        .iter()
        .filter(|d| d.error.is_none())
        .map(|d| (d.index, d.uuid.clone()))
        .collect();
    let failing = |permission: bool| -> Vec<u32> {
        report
            .devices
            .iter()
            .filter(|d| {
                d.error
                    .as_deref()
                    .is_some_and(|e| e.contains("Insufficient Permissions") == permission)
            })
            .map(|d| d.index)
            .collect()
    };
    Some(
        match allocation.gpus(&answered, &failing(true), &failing(false)) {
            Ok((gpus, how)) => Finding::new(
                Level::Ok,
                format!(
                    "{} ({}): a scheduler started here uses only these, without the box ledger, and stops its jobs {} s before the allocation ends",
                    allocation.describe(&gpus),
                    how.words(),
                    crate::pilot::WRAP_UP_S
                ),
            ),
            Err(why) => Finding::new(Level::Error, why)
                .fix("or run the scheduler with --no-allocation to use every GPU NVML shows"),
        },
    )
}

/// Whether jobs would get cgroups of their own (docs/BEHAVIOUR.md
/// "Containment"), found as the scheduler finds them; the parents made
/// to check are removed again.
fn containment_finding(log_dir: &Path) -> Finding {
    let tag = crate::containment::log_dir_tag(&crate::files::absolute(log_dir));
    match crate::containment::Containment::setup(None, &tag) {
        Ok(found) => {
            found.remove_bases();
            Finding::new(Level::Ok, format!("cgroups for jobs: {}", found.describe()))
        }
        Err(why) => {
            let systemd = std::process::Command::new("systemd-run")
                .args(crate::containment::scope::SCOPE_ARGS)
                .arg("true")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            #[expect(
                clippy::disallowed_methods,
                reason = "a kernel file (/proc), no user can plant it"
            )]
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
            let v2 = crate::containment::cgroupfs::mounts(&mountinfo)
                .iter()
                .any(|m| m.version == crate::containment::cgroupfs::Version::V2);
            Finding::new(
                Level::Warn,
                format!("no cgroups for jobs: {why}; {}", routes_here(systemd, v2)),
            )
        }
    }
}

/// Which of the documented routes to containment would work on this
/// machine, from whether a systemd user manager answers (`systemd-run
/// --user --scope` ran `true`) and whether a cgroup v2 hierarchy is
/// mounted (systemd delegates only v2).
fn routes_here(systemd: bool, v2: bool) -> String {
    match (systemd, v2) {
        (true, true) => "on this machine a systemd user manager answers: `systemd-run --user --scope -p Delegate=yes gpusched …` or `gpusched service install` gives containment (a scheduler started by hand tries the first itself)".to_string(),
        (true, false) => "on this machine systemd answers but no cgroup v2 hierarchy is mounted, so it has nothing to delegate: only root, or a cgroup an admin makes yours (--cgroup DIR), gives containment".to_string(),
        (false, _) => "on this machine no systemd user manager answers (`systemd-run --user` fails; is this an ssh session without a login manager, or a container?): only root, or a cgroup an admin makes yours (--cgroup DIR), gives containment".to_string(),
    }
}

#[cfg(test)]
mod route_tests {
    #[test]
    fn the_route_named_is_the_one_this_machine_has() {
        assert!(super::routes_here(true, true).contains("systemd-run --user --scope"));
        assert!(super::routes_here(true, false).contains("no cgroup v2 hierarchy"));
        assert!(super::routes_here(false, true).contains("no systemd user manager answers"));
    }
}

/// Why NVML did not start, with the fix.
fn nvml_start_finding(error: &nvml_wrapper::error::NvmlError) -> Finding {
    let fix = match nvml::host_fault(error) {
        Some(fault) => fault.hint,
        None => "check `nvidia-smi`".into(),
    };
    Finding::new(Level::Error, format!("NVML cannot start: {error}")).fix(fix)
}

/// The findings about the GPUs; `visible(pid)` says whether a pid exists
/// in this PID namespace.
pub fn gpu_findings(report: &HostReport, visible: impl Fn(u32) -> bool) -> Vec<Finding> {
    let mut findings = vec![Finding::new(
        Level::Ok,
        format!(
            "NVML {} loaded; driver {}; {} GPU{}",
            report.nvml_version,
            report.driver_version,
            report.devices.len(),
            if report.devices.len() == 1 { "" } else { "s" }
        ),
    )];
    if report.devices.is_empty() {
        findings.push(
            Finding::new(Level::Error, "NVML counts no GPU")
                .fix("check `nvidia-smi`; use --sim N to try gpusched without GPUs"),
        );
    }
    for device in &report.devices {
        findings.extend(device_findings(device));
    }
    let hidden: Vec<u32> = report
        .devices
        .iter()
        .flat_map(|d| d.pids.iter().copied())
        .filter(|&pid| !visible(pid))
        .collect();
    if !hidden.is_empty() {
        findings.push(
            Finding::new(
                Level::Warn,
                format!(
                    "NVML reports GPU processes this PID namespace cannot see (pid {}): gpusched runs in a container without the host's PID namespace, so it cannot tell its jobs' VRAM apart",
                    crate::console::numbers(&hidden, ", ")
                ),
            )
            .fix("run it in the host's PID namespace (`docker run --pid=host`)"),
        );
    }
    findings
}

/// The findings about one GPU.
fn device_findings(device: &DeviceReport) -> Vec<Finding> {
    let index = device.index;
    if let Some(error) = &device.error {
        return vec![
            Finding::new(Level::Error, format!("GPU {index}: {error}"))
                .fix(format!("look at `nvidia-smi` and `dmesg` (XID errors); reset it (`nvidia-smi -r -i {index}`) or reboot; meanwhile gpusched keeps it closed and uses the others")),
        ];
    }
    let on_off = |v: Option<bool>| match v {
        Some(true) => "on",
        Some(false) => "off",
        None => "n/a",
    };
    let mut findings = vec![Finding::new(
        Level::Ok,
        format!(
            "GPU {index}: {} ({}), {} MiB, {} MiB used; persistence {}, ECC {}; {}",
            device.name,
            device.uuid,
            device.total_mib,
            device.used_mib,
            on_off(device.persistence),
            on_off(device.ecc),
            if device.process_util {
                "each process's utilisation reported (a job's own is measured sharing too)"
            } else {
                "no per-process utilisation (a job's own is measured only while it is alone on this GPU)"
            }
        ),
    )];
    if device.persistence == Some(false) {
        findings.push(
            Finding::new(Level::Warn, format!("GPU {index}: persistence mode is off: the driver may unload between jobs, and each start then waits for it"))
                .fix(format!("sudo nvidia-smi -pm 1 -i {index} (or enable nvidia-persistenced)")),
        );
    }
    if device.pages_pending == Some(true) {
        findings.push(
            Finding::new(
                Level::Warn,
                format!("GPU {index}: memory pages are waiting to be retired after ECC errors"),
            )
            .fix(format!(
                "reset the GPU (`nvidia-smi -r -i {index}`) or reboot when it is idle"
            )),
        );
    }
    if device.mig == Some(true) && device.mig_instances.is_empty() {
        findings.push(
            Finding::new(Level::Warn, format!("GPU {index}: MIG mode is on with no MIG instances: CUDA cannot use it whole, so no job can run on it"))
                .fix(format!("create instances (`sudo nvidia-smi mig -i {index} -cgi 3g.40gb,3g.40gb -C`, see `nvidia-smi mig -lgip`), or disable MIG (`sudo nvidia-smi -mig 0 -i {index}`)")),
        );
    }
    for instance in &device.mig_instances {
        findings.push(Finding::new(
            Level::Ok,
            format!(
                "GPU {index}:{}: MIG {} ({}), {} MiB, {} MiB used; jobs on it get CUDA_VISIBLE_DEVICES={}",
                instance.mig_index,
                instance.profile,
                instance.uuid,
                instance.total_mib,
                instance.used_mib,
                instance.uuid
            ),
        ));
    }
    findings
}

/// The shared ledger directory: present, and owned by root with mode 1777
/// (docs/BEHAVIOUR.md "Sharing a box"). `sim`: a simulation's own ledger,
/// which need not belong to root.
fn ledger_finding(dir: &Path, sim: bool) -> Finding {
    let meta = match std::fs::metadata(dir) {
        Ok(meta) => meta,
        Err(_) if sim => {
            return Finding::new(
                Level::Ok,
                format!("ledger {}: made at the first run", dir.display()),
            );
        }
        Err(_) => {
            return Finding::new(
                Level::Warn,
                format!("ledger {} does not exist: the first scheduler makes it, owned by its user", dir.display()),
            )
            .fix("sudo gpusched ledger init (root-owned, mode 1777: nobody can remove another user's bookings)");
        }
    };
    let mode = meta.mode() & 0o7777;
    if sim || (meta.uid() == 0 && mode == 0o1777) {
        return Finding::new(
            Level::Ok,
            format!(
                "ledger {}: owner uid {}, mode {mode:o}",
                dir.display(),
                meta.uid()
            ),
        );
    }
    Finding::new(
        Level::Warn,
        format!(
            "ledger {}: owner uid {}, mode {mode:o}; other users' schedulers may not be able to book, or may remove bookings",
            dir.display(),
            meta.uid()
        ),
    )
    .fix("sudo gpusched ledger init")
}

/// The log directory: writable, and whether a scheduler runs on it.
fn log_dir_finding(dir: &Path) -> Finding {
    if !dir.exists() {
        return Finding::new(
            Level::Ok,
            format!("log directory {}: made at the first run", dir.display()),
        );
    }
    if nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_err() {
        return Finding::new(
            Level::Error,
            format!("log directory {} cannot be written", dir.display()),
        )
        .fix("give yourself write access, or choose another with --log-dir DIR");
    }
    let running = crate::lockfile::holder(dir)
        .map_or("no scheduler runs on it".to_string(), |pid| {
            format!("scheduler pid {pid} runs on it")
        });
    Finding::new(
        Level::Ok,
        format!("log directory {}: writable; {running}", dir.display()),
    )
}

/// The report: one line per finding (`ok    …`, `warn  …  → fix: …`),
/// the topology matrix, and a count.
pub fn render(findings: &[Finding], matrix: Option<&(Topology, Vec<u32>)>) -> String {
    let mut out = String::new();
    for finding in findings {
        out.push_str(&format!("{:<6}{}\n", finding.level.word(), finding.text));
        if let Some(fix) = &finding.fix {
            out.push_str(&format!("      → fix: {fix}\n"));
        }
    }
    if let Some((topology, gpus)) = matrix
        && gpus.len() > 1
    {
        out.push_str("\ntopology (as `nvidia-smi topo -m`: NV# = NVLinks, PIX/PXB = PCIe switches, PHB = host bridge, NODE = NUMA node, SYS = across CPUs):\n");
        for line in topology.matrix(gpus).lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    let count = |level| findings.iter().filter(|f| f.level == level).count();
    out.push_str(&format!(
        "\n{} error{}, {} warning{}\n",
        count(Level::Error),
        if count(Level::Error) == 1 { "" } else { "s" },
        count(Level::Warn),
        if count(Level::Warn) == 1 { "" } else { "s" }
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(index: u32) -> DeviceReport {
        DeviceReport {
            index,
            name: "A100".into(),
            uuid: format!("GPU-{index}"),
            total_mib: 81_920,
            used_mib: 0,
            persistence: Some(true),
            ecc: Some(true),
            ..DeviceReport::default()
        }
    }

    #[test]
    fn a_lost_gpu_is_an_error_and_soft_problems_are_warnings() {
        let mut lost = device(1);
        lost.error = Some("NVML_ERROR_GPU_IS_LOST: device fell off the bus".into());
        let mut tired = device(2);
        tired.persistence = Some(false);
        tired.pages_pending = Some(true);
        tired.mig = Some(true);
        tired.pids = vec![4242];
        let report = HostReport {
            nvml_version: "12.555".into(),
            driver_version: "555.42".into(),
            devices: vec![device(0), lost, tired],
            topology: Topology::default(),
        };
        let findings = gpu_findings(&report, |pid| pid != 4242);
        let levels: Vec<Level> = findings.iter().map(|f| f.level).collect();
        assert_eq!(
            levels,
            [
                Level::Ok,
                Level::Ok,
                Level::Error,
                Level::Ok,
                Level::Warn,
                Level::Warn,
                Level::Warn,
                Level::Warn
            ]
        );
        assert!(findings[2].text.contains("GPU 1: NVML_ERROR_GPU_IS_LOST"));
        assert!(findings[7].text.contains("pid 4242"), "{:?}", findings[7]);
        let text = render(&findings, None);
        assert!(text.contains("→ fix: sudo nvidia-smi -pm 1 -i 2"), "{text}");
        assert!(text.ends_with("\n1 error, 4 warnings\n"), "{text}");
    }

    #[test]
    fn the_matrix_is_shown_for_more_than_one_gpu() {
        let text = render(&[], Some(&(crate::gpu::sim::topology(2, &[]), vec![0, 1])));
        assert!(text.contains("  GPU0  X     PHB\n"), "{text}");
        assert!(
            !render(&[], Some(&(crate::gpu::sim::topology(1, &[]), vec![0]))).contains("topology")
        );
    }
}
