//! `gpusched service install` (docs/BEHAVIOUR.md "An always-on
//! scheduler"): a systemd *user* unit that keeps `gpusched JOBS_FILE
//! --watch` running, so nobody keeps a tmux session alive for it.

#![expect(
    clippy::disallowed_methods,
    reason = "the systemd user unit directory under the caller's own home"
)]

use crate::cli::ServiceAction;
use crate::error::Error;
use std::path::{Path, PathBuf};

/// Runs a `gpusched service` action; prints what it did and what to run
/// next.
///
/// Errors ([`Error::Usage`], exit 2): the jobs file is missing, the name
/// or the scheduler options are not valid; the unit cannot be written.
pub fn run(action: &ServiceAction) -> anyhow::Result<i32> {
    let ServiceAction::Install {
        jobs_file,
        name,
        print,
        options,
    } = action;
    let jobs_file = std::fs::canonicalize(jobs_file).map_err(|e| {
        Error::Usage(format!(
            "cannot use {} as the jobs file: {}",
            jobs_file.display(),
            crate::files::io_reason(&e)
        ))
    })?;
    let name = match name {
        Some(name) => name.clone(),
        None => jobs_file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    {
        return Err(Error::Usage(format!(
            "bad service name '{name}': use letters, digits, '_', '.' and '-' (--name NAME)"
        ))
        .into());
    }
    // The scheduler's own parser checks the options now, not at boot.
    let mut argv: Vec<String> = vec![
        "gpusched".into(),
        jobs_file.display().to_string(),
        "--watch".into(),
    ];
    argv.extend(options.iter().cloned());
    if let Err(e) = <crate::cli::Cli as clap::Parser>::try_parse_from(&argv) {
        return Err(Error::Usage(format!(
            "the scheduler would not start with these options: {}",
            e.to_string().lines().next().unwrap_or_default()
        ))
        .into());
    }
    let exe = std::env::current_exe()?;
    let exe = std::fs::canonicalize(&exe).unwrap_or(exe);
    let dir = jobs_file.parent().unwrap_or(Path::new("/"));
    let env: Vec<(String, String)> = RECORDED_ENV
        .iter()
        .filter_map(|name| Some((name.to_string(), std::env::var(name).ok()?)))
        .collect();
    let text = unit(&exe, &jobs_file, dir, options, &env);
    if *print {
        print!("{text}");
        return Ok(0);
    }
    let path = unit_dir()?.join(format!("gpusched-{name}.service"));
    // Another project's jobs file of the same name has this unit: never
    // overwritten, a name of its own asked for instead.
    let description = format!(
        "Description=gpusched: the jobs of {}\n",
        escape(&jobs_file.display().to_string())
    );
    if let Ok((existing, _)) = crate::trust::read_untrusted(&path, 1 << 20)
        && !String::from_utf8_lossy(&existing).contains(&description)
    {
        let project = dir
            .file_name()
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_else(|| "other".to_string());
        return Err(Error::Usage(format!(
            "{} already runs another jobs file; give this one a name of its own: --name {project}-{name}",
            path.display()
        ))
        .into());
    }
    crate::files::write_atomic(&path, text.as_bytes())
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    println!("wrote {}", path.display());
    print_next_steps(&name, dir);
    Ok(0)
}

/// What to run after the unit `gpusched-NAME` was written for the jobs
/// file in `dir`: start it, keep it after logout, read its output and
/// queue.
fn print_next_steps(name: &str, dir: &Path) {
    let user = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map_or_else(|| "$USER".to_string(), |u| u.name);
    println!("start it now and at every login:");
    println!("    systemctl --user daemon-reload");
    println!("    systemctl --user enable --now gpusched-{name}");
    println!("keep it running after you log out, and start it at boot:");
    println!("    loginctl enable-linger {user}");
    println!("its terminal output: journalctl --user -u gpusched-{name} -f");
    println!(
        "its queue: gpusched status --log-dir {}",
        dir.join("gpusched_logs").display()
    );
}

/// `~/.config/systemd/user` (or under `$XDG_CONFIG_HOME`), made if
/// missing: where systemd looks for a user's units.
///
/// Errors: no home directory is known, or the directory cannot be made.
fn unit_dir() -> anyhow::Result<PathBuf> {
    let config = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("HOME")
            .map(|home| PathBuf::from(home).join(".config"))
            .ok_or_else(|| Error::Usage("neither $XDG_CONFIG_HOME nor $HOME is set".into()))?,
    };
    let dir = config.join("systemd/user");
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("cannot make {}", dir.display()), e))?;
    Ok(dir)
}

/// The unit file. gpusched stops its jobs itself on SIGTERM (SIGKILL after
/// 10 s; they run again at the next start), so systemd sends SIGTERM to it
/// alone and waits long enough (`KillMode=mixed`, `TimeoutStopSec=40`).
/// Exit status 130 (`gpusched stop`) and 2 (a usage or jobs-file error)
/// are not failures to restart after (systemd.service(5)). `Delegate=yes`
/// hands the unit's cgroup to gpusched, which puts each job in a cgroup of
/// its own there (systemd.resource-control(5); docs/BEHAVIOUR.md
/// "Containment").
/// The variables of the installing shell the unit records, so that jobs
/// find the same programs and Python environment as when it was installed
/// (systemd starts user services with a bare environment): `PATH`, the
/// active conda environment or virtualenv, and the library and module
/// search paths (docs/BEHAVIOUR.md "A job's environment").
pub const RECORDED_ENV: [&str; 9] = [
    "PATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "CONDA_EXE",
    "CONDA_PYTHON_EXE",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
];

/// One `Environment=` line (systemd.exec(5)): the assignment double-quoted
/// with `\` and `"` escaped, `%` doubled.
fn environment_line(name: &str, value: &str) -> String {
    let assignment = escape(&format!("{name}={value}"))
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    format!("Environment=\"{assignment}\"\n")
}

/// The unit file, with `env` (from [`RECORDED_ENV`]) recorded as
/// `Environment=` lines.
pub fn unit(
    exe: &Path,
    jobs_file: &Path,
    dir: &Path,
    options: &[String],
    env: &[(String, String)],
) -> String {
    let mut exec = vec![
        quote(&exe.display().to_string()),
        quote(&jobs_file.display().to_string()),
        "--watch".to_string(),
    ];
    exec.extend(options.iter().map(|o| quote(o)));
    format!(
        "# Written by `gpusched service install`; `systemctl --user edit` to change it.\n\
         [Unit]\n\
         Description=gpusched: the jobs of {jobs}\n\
         Documentation=man:gpusched(1)\n\
         \n\
         [Service]\n\
         Type=simple\n\
         WorkingDirectory={dir}\n\
         ExecStart={exec}\n\
         KillMode=mixed\n\
         Delegate=yes\n\
         TimeoutStopSec=40\n\
         Restart=on-failure\n\
         RestartSec=10\n\
         SuccessExitStatus=130\n\
         RestartPreventExitStatus=2 130\n\
         Environment=NO_COLOR=1\n\
         {environment}\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        jobs = escape(&jobs_file.display().to_string()),
        dir = quote(&dir.display().to_string()),
        exec = exec.join(" "),
        environment = env
            .iter()
            .map(|(name, value)| environment_line(name, value))
            .collect::<String>(),
    )
}

/// A word for a unit file (systemd.syntax(7), systemd.service(5)
/// "Command lines"): `%` and `$` doubled so systemd expands nothing,
/// double-quoted with `\` escapes when it holds a space or a quote.
fn quote(word: &str) -> String {
    let escaped = escape(word).replace('$', "$$");
    if escaped.is_empty()
        || escaped
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | ';'))
    {
        format!("\"{}\"", escaped.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        escaped
    }
}

/// `%` doubled: systemd expands specifiers in most settings.
fn escape(text: &str) -> String {
    text.replace('%', "%%")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_systemd() {
        assert_eq!(quote("/usr/bin/gpusched"), "/usr/bin/gpusched");
        assert_eq!(quote("/home/a/my jobs.txt"), "\"/home/a/my jobs.txt\"");
        assert_eq!(quote("100%"), "100%%");
        assert_eq!(quote("$HOME"), "$$HOME");
        assert_eq!(quote("a\"b"), "\"a\\\"b\"");
        assert_eq!(quote(";"), "\";\"");
        assert_eq!(quote(""), "\"\"");
    }

    #[test]
    fn the_unit_runs_the_scheduler_watching_its_file() {
        let text = unit(
            Path::new("/usr/local/bin/gpusched"),
            Path::new("/home/ada/exp/jobs.txt"),
            Path::new("/home/ada/exp"),
            &["--gpus".into(), "0,1".into()],
            &[
                ("PATH".into(), "/opt/conda/envs/a b/bin:/usr/bin".into()),
                ("CONDA_PREFIX".into(), "/opt/conda/envs/100%\"q".into()),
            ],
        );
        assert!(
            text.contains("Environment=\"PATH=/opt/conda/envs/a b/bin:/usr/bin\"\n"),
            "{text}"
        );
        assert!(
            text.contains("Environment=\"CONDA_PREFIX=/opt/conda/envs/100%%\\\"q\"\n"),
            "{text}"
        );
        assert!(text.contains(
            "ExecStart=/usr/local/bin/gpusched /home/ada/exp/jobs.txt --watch --gpus 0,1\n"
        ));
        assert!(text.contains("WorkingDirectory=/home/ada/exp\n"));
        assert!(text.contains("RestartPreventExitStatus=2 130\n"));
        assert!(text.contains("WantedBy=default.target\n"));
    }
}
