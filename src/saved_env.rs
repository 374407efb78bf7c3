//! The caller's environment, saved by `gpusched add` for its job
//! (docs/BEHAVIOUR.md "A job's environment"): `gpusched add` from a shell
//! with a conda environment or a virtualenv active runs the job with that
//! shell's `PATH` and variables, as pueue and task-spooler do, not with the
//! scheduler's. The variables are saved once per distinct environment as
//! `LOG_DIR/env/<id>.json` (mode 0600: environments hold tokens), the id
//! being the first 16 hex digits of the SHA-256 of the file's contents, and
//! the line names it as `env=<id>`.

use anyhow::Context;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Hex digits of an environment's id.
pub use crate::jobspec::ENV_ID_LEN as ID_LEN;

/// The largest saved environment read back, in bytes.
pub const MAX_BYTES: u64 = 1 << 20;

/// Variables never saved: the ones gpusched sets for each job, and the
/// shell's own bookkeeping of where and how deep it is.
fn is_left_out(name: &str) -> bool {
    name.starts_with("GPUSCHED_")
        || matches!(
            name,
            "CUDA_VISIBLE_DEVICES" | "CUDA_DEVICE_ORDER" | "PWD" | "OLDPWD" | "SHLVL" | "_"
        )
}

/// The environment of this process to save for a job: every variable
/// whose name and value are UTF-8 (on Linux, all but exotic ones), less
/// those gpusched sets itself.
pub fn capture() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .filter(|(name, _)| !is_left_out(name))
        .collect()
}

/// Whether `id` is an environment id: [`ID_LEN`] lowercase hex digits.
pub use crate::jobspec::is_env_id as is_id;

/// Where the environment `id` is saved under `log_dir`.
pub fn path(log_dir: &Path, id: &str) -> PathBuf {
    log_dir.join("env").join(format!("{id}.json"))
}

/// Saves `vars` under `log_dir` (its `env` directory made 0700 if
/// missing; the file 0600, written atomically) unless the same
/// environment is saved already; returns its id.
///
/// Errors: the directory or the file cannot be written.
pub fn save(log_dir: &Path, vars: &BTreeMap<String, String>) -> anyhow::Result<String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let text = serde_json::to_vec_pretty(vars)?;
    let digest = Sha256::digest(&text);
    let id: String = digest
        .iter()
        .take(ID_LEN / 2)
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = log_dir.join("env");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let file = path(log_dir, &id);
    if load(log_dir, &id).is_ok_and(|saved| &saved == vars) {
        return Ok(id);
    }
    crate::files::write_atomic_with(
        &file,
        &text,
        &crate::files::AtomicOptions {
            mode: Some(std::fs::Permissions::from_mode(0o600)),
            sync: true,
        },
    )
    .with_context(|| format!("cannot save the environment as {}", file.display()))?;
    Ok(id)
}

/// The environment `id` saved under `log_dir`, read without following a
/// link or blocking on a FIFO, at most [`MAX_BYTES`]. Like a request, it
/// must belong to the log directory's owner and be writable by nobody
/// else, and so must its `env` directory (docs/SECURITY.md "Saved
/// environments"): a `PATH` planted by a group member would run their
/// programs as the owner.
///
/// Errors: no such file, not a regular file, too large, owned by another
/// user or writable by others, or not a JSON object of strings.
pub fn load(log_dir: &Path, id: &str) -> anyhow::Result<BTreeMap<String, String>> {
    use std::os::unix::fs::MetadataExt;
    anyhow::ensure!(is_id(id), "'{id}' is not an environment id");
    let file = path(log_dir, id);
    let owner = std::fs::metadata(log_dir)
        .with_context(|| format!("cannot read {}", log_dir.display()))?
        .uid();
    let dir = log_dir.join("env");
    let dir_meta = std::fs::symlink_metadata(&dir)
        .with_context(|| format!("cannot read {}", dir.display()))?;
    anyhow::ensure!(
        dir_meta.is_dir() && dir_meta.uid() == owner && dir_meta.mode() & 0o022 == 0,
        "refusing the saved environment {}: its directory is not {}'s own (owner {}, mode {:04o})",
        file.display(),
        crate::files::user_name(owner),
        crate::files::user_name(dir_meta.uid()),
        dir_meta.mode() & 0o7777
    );
    let (bytes, meta) = crate::trust::read_untrusted(&file, MAX_BYTES)
        .with_context(|| format!("cannot read the saved environment {}", file.display()))?;
    anyhow::ensure!(
        meta.uid() == owner && meta.mode() & 0o022 == 0,
        "refusing the saved environment {}: it belongs to {} (mode {:04o}), not to {}, the log directory's owner",
        file.display(),
        crate::files::user_name(meta.uid()),
        meta.mode() & 0o7777,
        crate::files::user_name(owner)
    );
    serde_json::from_slice(&bytes)
        .with_context(|| format!("the saved environment {} is not valid", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_environment_saves_once_under_its_id_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let vars = BTreeMap::from([
            (
                "PATH".to_string(),
                "/opt/conda/envs/a/bin:/usr/bin".to_string(),
            ),
            ("FOO".to_string(), "caller".to_string()),
        ]);
        let id = save(dir.path(), &vars).unwrap();
        assert!(is_id(&id), "{id}");
        assert_eq!(save(dir.path(), &vars).unwrap(), id);
        assert_eq!(load(dir.path(), &id).unwrap(), vars);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path(dir.path(), &id))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let other = BTreeMap::from([("FOO".to_string(), "other".to_string())]);
        assert_ne!(save(dir.path(), &other).unwrap(), id);
        assert!(load(dir.path(), "../../etc/passwd").is_err());
        assert!(load(dir.path(), "0123456789abcdef").is_err());
    }

    #[test]
    fn what_gpusched_sets_itself_is_never_saved() {
        for name in ["CUDA_VISIBLE_DEVICES", "GPUSCHED_JOB", "PWD", "SHLVL", "_"] {
            assert!(is_left_out(name), "{name}");
        }
        for name in ["PATH", "CONDA_PREFIX", "VIRTUAL_ENV", "HF_HOME"] {
            assert!(!is_left_out(name), "{name}");
        }
    }
}
