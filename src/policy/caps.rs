//! Framework memory caps from a job's declaration (docs/HARDWARE.md
//! "Preallocating frameworks"). JAX preallocates 75 % of its GPU and
//! TensorFlow maps nearly all of it unless told otherwise, whatever the
//! job needs, so a small declared job packed beside others would take the
//! GPU from them the moment it starts. A declared job is therefore given,
//! unless its user already set them:
//!
//! * `XLA_PYTHON_CLIENT_MEM_FRACTION` and its newer name
//!   `XLA_CLIENT_MEM_FRACTION`: the fraction of the device JAX/XLA
//!   preallocates (JAX "GPU memory allocation"), set to the declaration
//!   over the device's memory;
//! * `TF_FORCE_GPU_ALLOW_GROWTH=true`: TensorFlow allocates as it grows
//!   instead of mapping the whole device (TensorFlow "Limiting GPU memory
//!   growth").
//!
//! An undeclared job runs alone on its GPUs and gets none of them.

/// The variables [`framework_caps`] may set.
pub const CAP_VARIABLES: [&str; 3] = [
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_CLIENT_MEM_FRACTION",
    "TF_FORCE_GPU_ALLOW_GROWTH",
];

/// The caps for a job declaring `vram_mib` per GPU on GPUs whose smallest
/// has `device_mib` (MiB). `set_already(name)` says whether the user set a
/// variable already (in the scheduler's environment, or on the job's own
/// command line); those are left as they are. Returns (name, value) pairs.
#[must_use]
pub fn framework_caps(
    vram_mib: Option<u64>,
    device_mib: Option<u64>,
    set_already: impl Fn(&str) -> bool,
) -> Vec<(String, String)> {
    let Some(vram) = vram_mib else {
        return Vec::new();
    };
    let mut caps = Vec::new();
    if let Some(device) = device_mib.filter(|&d| d > 0) {
        // Rounded down to a thousandth, so that the cap never exceeds the
        // declaration; at least a thousandth.
        let fraction = ((vram as f64 / device as f64).min(1.0) * 1000.0)
            .floor()
            .max(1.0)
            / 1000.0;
        for name in &CAP_VARIABLES[..2] {
            caps.push((name.to_string(), format!("{fraction}")));
        }
    }
    caps.push((CAP_VARIABLES[2].to_string(), "true".to_string()));
    caps.retain(|(name, _)| !set_already(name));
    caps
}

/// Whether `command` sets `name` itself (`NAME=… cmd`, `export NAME=…`,
/// `env NAME=… cmd`): a word `NAME=` anywhere in the line.
pub fn line_sets(command: &str, name: &str) -> bool {
    command.match_indices(name).any(|(at, _)| {
        let before = command[..at].chars().next_back();
        let after = &command[at + name.len()..];
        before.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_')) && after.starts_with('=')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(vram: Option<u64>, device: Option<u64>, set: &[&str]) -> Vec<(String, String)> {
        framework_caps(vram, device, |name| set.contains(&name))
    }

    #[test]
    fn a_declared_job_gets_its_share_of_the_device_and_growth() {
        assert_eq!(
            caps(Some(6144), Some(24576), &[]),
            vec![
                ("XLA_PYTHON_CLIENT_MEM_FRACTION".into(), "0.25".into()),
                ("XLA_CLIENT_MEM_FRACTION".into(), "0.25".into()),
                ("TF_FORCE_GPU_ALLOW_GROWTH".into(), "true".into()),
            ]
        );
        // Rounded down, never above the declaration; capped at the device.
        assert_eq!(caps(Some(8000), Some(24000), &[])[0].1, "0.333");
        assert_eq!(caps(Some(90_000), Some(81_920), &[])[0].1, "1");
        assert_eq!(caps(Some(1), Some(81_920), &[])[0].1, "0.001");
    }

    #[test]
    fn undeclared_jobs_get_nothing_and_the_users_own_settings_win() {
        assert!(caps(None, Some(24000), &[]).is_empty());
        assert_eq!(
            caps(
                Some(6000),
                Some(24000),
                &[
                    "XLA_PYTHON_CLIENT_MEM_FRACTION",
                    "TF_FORCE_GPU_ALLOW_GROWTH"
                ]
            ),
            vec![("XLA_CLIENT_MEM_FRACTION".into(), "0.25".into())]
        );
        // No device size known (a cluster picks the GPU): growth only.
        assert_eq!(
            caps(Some(6000), None, &[]),
            vec![("TF_FORCE_GPU_ALLOW_GROWTH".into(), "true".into())]
        );
    }

    #[test]
    fn a_line_that_sets_a_variable_is_seen() {
        let name = "XLA_PYTHON_CLIENT_MEM_FRACTION";
        assert!(line_sets(
            "XLA_PYTHON_CLIENT_MEM_FRACTION=.5 python a.py",
            name
        ));
        assert!(line_sets(
            "export XLA_PYTHON_CLIENT_MEM_FRACTION=0.9; python a.py",
            name
        ));
        assert!(line_sets(
            "env A=1 XLA_PYTHON_CLIENT_MEM_FRACTION=1 python",
            name
        ));
        assert!(!line_sets(
            "python a.py --XLA_PYTHON_CLIENT_MEM_FRACTION",
            name
        ));
        assert!(!line_sets(
            "MY_XLA_PYTHON_CLIENT_MEM_FRACTION=1 python",
            name
        ));
        assert!(!line_sets("echo $XLA_PYTHON_CLIENT_MEM_FRACTION", name));
    }
}
