//! Framework memory caps from a job's declaration (docs/HARDWARE.md
//! "Preallocating frameworks"). JAX preallocates 75 % of its GPU and
//! TensorFlow maps nearly all of it unless told otherwise, whatever the
//! job needs, so a small declared job packed beside others would take the
//! GPU from them the moment it starts. A declared job is therefore given,
//! unless its user already set them:
//!
//! * `XLA_PYTHON_CLIENT_MEM_FRACTION` alone: the fraction of the device
//!   JAX/XLA preallocates (JAX "GPU memory allocation"; old and new JAX
//!   read it), set so that the pool plus the process's CUDA context
//!   ([`CUDA_CONTEXT_MIB`]) stays within the declaration. Never its newer
//!   name `XLA_CLIENT_MEM_FRACTION` too: JAX 0.11's CUDA plugin refuses
//!   the pair ("XLA_CLIENT_MEM_FRACTION is specified together with
//!   XLA_PYTHON_CLIENT_MEM_FRACTION") and falls back to the CPU; and none
//!   at all when the user set either name;
//! * `TF_FORCE_GPU_ALLOW_GROWTH=true`: TensorFlow allocates as it grows
//!   instead of mapping the whole device (TensorFlow "Limiting GPU memory
//!   growth").
//!
//! An undeclared job runs alone on its GPUs and gets none of them.

/// The JAX variables: the one [`framework_caps`] sets, then its newer
/// name, which it never sets (a user who sets either gets neither).
pub const JAX_VARIABLES: [&str; 2] = ["XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION"];

/// TensorFlow's growth switch.
pub const TF_GROWTH: &str = "TF_FORCE_GPU_ALLOW_GROWTH";

/// The device memory a JAX process holds beyond its pool (MiB): its CUDA
/// context, cuBLAS/cuDNN workspaces and the XLA runtime. Measured on an
/// NVIDIA H100 80GB (driver 580.159, CUDA 13.0, JAX 0.11.2): a pool of
/// 12,162 MiB (fraction 0.15) showed 12,778 MiB in nvidia-smi, 616 MiB
/// more; rounded up to leave headroom for other driver versions.
pub const CUDA_CONTEXT_MIB: u64 = 768;

/// The caps for a job declaring `vram_mib` per GPU on GPUs whose smallest
/// has `device_mib` (MiB). `set_already(name)` says whether the user set a
/// variable already (in the scheduler's environment, or on the job's own
/// command line); those are left as they are, and a user who set either
/// JAX name gets no JAX cap. Returns (name, value) pairs.
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
    if let Some(device) = device_mib.filter(|&d| d > 0)
        && !JAX_VARIABLES.iter().any(|name| set_already(name))
    {
        // The pool leaves room for the context, rounded down to a
        // thousandth so that pool and context never exceed the
        // declaration; at least a thousandth.
        let pool = vram.saturating_sub(CUDA_CONTEXT_MIB);
        let fraction = ((pool as f64 / device as f64).min(1.0) * 1000.0)
            .floor()
            .max(1.0)
            / 1000.0;
        caps.push((JAX_VARIABLES[0].to_string(), format!("{fraction}")));
    }
    if !set_already(TF_GROWTH) {
        caps.push((TF_GROWTH.to_string(), "true".to_string()));
    }
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
    fn a_declared_job_gets_its_share_of_the_device_less_the_context_and_growth() {
        assert_eq!(
            caps(Some(6144 + CUDA_CONTEXT_MIB), Some(24576), &[]),
            vec![
                ("XLA_PYTHON_CLIENT_MEM_FRACTION".into(), "0.25".into()),
                ("TF_FORCE_GPU_ALLOW_GROWTH".into(), "true".into()),
            ]
        );
        // Rounded down, never above the declaration; capped at the device.
        assert_eq!(
            caps(Some(8000 + CUDA_CONTEXT_MIB), Some(24000), &[])[0].1,
            "0.333"
        );
        assert_eq!(caps(Some(90_000), Some(81_920), &[])[0].1, "1");
        assert_eq!(caps(Some(1), Some(81_920), &[])[0].1, "0.001");
        // The H100 case: a 12 GiB declaration keeps JAX's pool
        // plus its 616 MiB context under 12,288 MiB.
        let fraction: f64 = caps(Some(12_288), Some(81_559), &[])[0].1.parse().unwrap();
        assert!(fraction * 81_559.0 + 616.0 <= 12_288.0, "{fraction}");
    }

    #[test]
    fn never_both_jax_names() {
        for vram in [1, 6000, 24_000, 90_000] {
            let names: Vec<String> = caps(Some(vram), Some(24_000), &[])
                .into_iter()
                .map(|(name, _)| name)
                .collect();
            let jax = names
                .iter()
                .filter(|n| JAX_VARIABLES.contains(&n.as_str()))
                .count();
            assert_eq!(jax, 1, "{names:?}");
            assert!(!names.contains(&"XLA_CLIENT_MEM_FRACTION".to_string()));
        }
    }

    #[test]
    fn undeclared_jobs_get_nothing_and_the_users_own_settings_win() {
        assert!(caps(None, Some(24000), &[]).is_empty());
        // Either JAX name set by the user: no JAX cap at all.
        for set in JAX_VARIABLES {
            assert_eq!(
                caps(Some(6000), Some(24000), &[set, "TF_FORCE_GPU_ALLOW_GROWTH"]),
                vec![]
            );
        }
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
