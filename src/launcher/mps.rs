//! `--enforce mps` (docs/BEHAVIOUR.md "Declarations that hold"): NVIDIA's
//! Multi-Process Service for this scheduler's jobs, so that the driver
//! itself holds each job to its declaration. The scheduler starts its own
//! MPS control daemon (`nvidia-cuda-mps-control -d`) with its pipe and log
//! directories under the log directory, gives each declared job
//! `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` for its devices by the ordinals the
//! job sees, and tells the daemon to `quit` when it exits — and, after a
//! crash, at the next start before starting a new one. Over its limit a
//! job gets an ordinary CUDA out-of-memory error, which the OOM retry
//! handles.
//!
//! Sources: NVIDIA's "Multi-Process Service" guide (the control daemon,
//! `CUDA_MPS_PIPE_DIRECTORY`, `CUDA_MPS_LOG_DIRECTORY`,
//! `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`, available from CUDA 11.5 on Volta
//! and newer).

#![expect(
    clippy::disallowed_methods,
    reason = "the MPS pipe and log directories inside the scheduler's own log directory"
)]

use crate::error::Error;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The control program NVIDIA ships with the driver.
pub const MPS_CONTROL: &str = "nvidia-cuda-mps-control";

/// This scheduler's MPS daemon.
#[derive(Debug)]
pub struct Mps {
    pipe_dir: PathBuf,
    log_dir: PathBuf,
    /// Whose daemon it is: the only user it may serve on a GPU.
    pub user: String,
}

impl Mps {
    /// Quits a daemon a crashed scheduler left on `log_dir`, if any, and
    /// starts a new one.
    ///
    /// Errors ([`Error::Usage`], exit 2): `nvidia-cuda-mps-control` is not
    /// on `PATH`, or the daemon does not start; the directories cannot be
    /// made.
    pub fn start(log_dir: &Path) -> Result<Mps, Error> {
        let found = std::env::var_os("PATH")
            .map(|path| std::env::split_paths(&path).any(|d| d.join(MPS_CONTROL).is_file()))
            .unwrap_or(false);
        if !found {
            return Err(Error::Usage(format!(
                "--enforce mps needs NVIDIA MPS, but {MPS_CONTROL} is not on PATH (it comes with the NVIDIA driver); use --enforce stop instead"
            )));
        }
        let mps = Mps {
            pipe_dir: log_dir.join("mps").join("pipe"),
            log_dir: log_dir.join("mps").join("log"),
            user: crate::files::user_name(nix::unistd::getuid().as_raw()),
        };
        for dir in [&mps.pipe_dir, &mps.log_dir] {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        }
        // A daemon of a scheduler that died: its jobs are gone or adopted
        // and it would serve nobody's limits.
        if mps.pipe_dir.join("control").exists() {
            mps.quit();
        }
        let status = mps
            .command()
            .arg("-d")
            .stdin(Stdio::null())
            .status()
            .map_err(|e| Error::Usage(format!("cannot run {MPS_CONTROL}: {e}")))?;
        if !status.success() {
            return Err(Error::Usage(format!(
                "{MPS_CONTROL} -d failed ({status}); see {}",
                mps.log_dir.display()
            )));
        }
        Ok(mps)
    }

    /// `nvidia-cuda-mps-control` with this daemon's directories.
    fn command(&self) -> Command {
        let mut command = Command::new(MPS_CONTROL);
        command
            .env("CUDA_MPS_PIPE_DIRECTORY", &self.pipe_dir)
            .env("CUDA_MPS_LOG_DIRECTORY", &self.log_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    }

    /// Tells the daemon to quit (`echo quit | nvidia-cuda-mps-control`);
    /// a daemon that is not there is no error.
    pub fn quit(&self) {
        let Ok(mut child) = self.command().stdin(Stdio::piped()).spawn() else {
            return;
        };
        if let Some(stdin) = child.stdin.as_mut() {
            let _ = stdin.write_all(b"quit\n");
        }
        drop(child.stdin.take());
        let _ = child.wait();
    }

    /// A job's MPS variables: the daemon's directories, and for a declared
    /// job a pinned memory limit of `vram_mib` on each of its `gpus`
    /// devices, by the ordinals it sees (`0=8192M,1=8192M`).
    pub fn job_env(&self, vram_mib: Option<u64>, gpus: usize) -> Vec<(String, String)> {
        let mut env = vec![
            (
                "CUDA_MPS_PIPE_DIRECTORY".to_string(),
                self.pipe_dir.display().to_string(),
            ),
            (
                "CUDA_MPS_LOG_DIRECTORY".to_string(),
                self.log_dir.display().to_string(),
            ),
        ];
        if let Some(mib) = vram_mib {
            let limits: Vec<String> = (0..gpus).map(|i| format!("{i}={mib}M")).collect();
            env.push((
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_string(),
                limits.join(","),
            ));
        }
        env
    }
}

impl Drop for Mps {
    fn drop(&mut self) {
        self.quit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declared_job_gets_its_limit_on_each_device_it_sees() {
        let mps = Mps {
            pipe_dir: "/l/mps/pipe".into(),
            log_dir: "/l/mps/log".into(),
            user: "alice".into(),
        };
        let env = mps.job_env(Some(8192), 2);
        assert_eq!(
            env.last().unwrap(),
            &(
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_string(),
                "0=8192M,1=8192M".to_string()
            )
        );
        assert_eq!(env[0].1, "/l/mps/pipe");
        // Undeclared: the daemon's directories only.
        assert_eq!(mps.job_env(None, 1).len(), 2);
    }
}
