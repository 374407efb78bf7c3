//! `gpusched completions SHELL` and `gpusched man` (docs/BEHAVIOUR.md
//! "Everyday verbs"): shell completions and the man page, generated from
//! the command-line definition itself, so they never drift from `--help`.
//! The man page is one page, `gpusched(1)`: the subcommands are sections
//! of it, not pages of their own.

#![expect(
    clippy::disallowed_methods,
    reason = "the completions directory under the caller's own home"
)]

use crate::cli::{CompletionsArgs, EXIT_STATUS, ManArgs};
use crate::error::Error;
use std::io::Write;
use std::path::PathBuf;

/// Prints the completion script for the shell.
///
/// Errors: stdout cannot be written.
pub fn completions(args: &CompletionsArgs) -> anyhow::Result<i32> {
    let mut command = crate::cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "gpusched", &mut out);
    std::io::stdout().write_all(&out)?;
    Ok(0)
}

/// Prints the man page (roff) for `gpusched(1)`, or with `--install`
/// writes it where `man` finds it for this binary.
///
/// Errors: stdout or the page cannot be written.
pub fn man(args: &ManArgs) -> anyhow::Result<i32> {
    let page = page()?;
    if !args.install {
        std::io::stdout().write_all(&page)?;
        return Ok(0);
    }
    let (bin_dir, path) = install_path()?;
    let dir = path.parent().expect("a file in man1");
    std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&path, &page))
        .map_err(|e| {
            Error::Usage(format!(
                "cannot write {}: {}; print the page with `gpusched man` and put it in a directory on your man path instead",
                path.display(),
                crate::files::io_reason(&e)
            ))
        })?;
    println!(
        "wrote {}; `man gpusched` finds it while {} is on your PATH",
        path.display(),
        bin_dir.display()
    );
    Ok(0)
}

/// Where `man` looks for this binary's page: `man` (man-db) searches
/// `PREFIX/share/man` for each `PREFIX/bin` on the PATH, so the page goes
/// beside the binary: `~/.cargo/bin/gpusched` →
/// `~/.cargo/share/man/man1/gpusched.1`.
///
/// Returns the binary's directory (what must be on the PATH) and the
/// page's path.
///
/// Errors: the running binary's path is unknown.
fn install_path() -> anyhow::Result<(PathBuf, PathBuf)> {
    let exe = std::env::current_exe()?;
    let exe = std::fs::canonicalize(&exe).unwrap_or(exe);
    man_paths(&exe)
        .ok_or_else(|| anyhow::anyhow!("cannot tell where {} is installed", exe.display()))
}

/// For the binary at `exe` (`PREFIX/bin/gpusched`): its directory and
/// `PREFIX/share/man/man1/gpusched.1`.
fn man_paths(exe: &std::path::Path) -> Option<(PathBuf, PathBuf)> {
    let bin = exe.parent()?;
    let prefix = bin.parent()?;
    Some((bin.to_path_buf(), prefix.join("share/man/man1/gpusched.1")))
}

/// The whole page: what clap knows (name, synopsis, description, options),
/// then the subcommands, the jobs-file attributes, files and exit status.
fn page() -> std::io::Result<Vec<u8>> {
    let command = crate::cli::command();
    let man = clap_mangen::Man::new(command.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    writeln!(out, ".SH COMMANDS")?;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub.get_name();
        if name == "help" {
            continue;
        }
        writeln!(out, ".SS \"gpusched {name}\"")?;
        let about = sub
            .get_long_about()
            .or(sub.get_about())
            .map(ToString::to_string)
            .unwrap_or_default();
        writeln!(out, "{}", escape(&about))?;
        let mut options = Vec::new();
        clap_mangen::Man::new(sub.clone()).render_options_section(&mut options)?;
        // Its options under its own heading, not a second OPTIONS section.
        let options = String::from_utf8_lossy(&options).replacen(".SH OPTIONS\n", "", 1);
        let options = options.replacen(".SH ARGUMENTS\n", "", 1);
        out.write_all(options.as_bytes())?;
    }
    writeln!(out, ".SH \"JOBS FILE\"")?;
    writeln!(
        out,
        "{}",
        escape(
            "One job per line; blank lines and # comments are skipped. A line may start with one attribute block, [vram=18G gpus=2], and the rest is the command, run by /bin/sh -c. The attributes:"
        )
    )?;
    for a in crate::jobspec::ATTRIBUTES {
        writeln!(out, ".TP\n\\fB{}\\fR\n{}", escape(a.shown), escape(a.help))?;
    }
    writeln!(out, ".SH FILES")?;
    for (file, meaning) in FILES {
        writeln!(out, ".TP\n\\fI{}\\fR\n{}", escape(file), escape(meaning))?;
    }
    writeln!(out, ".SH \"EXIT STATUS\"\n{}", escape(EXIT_STATUS))?;
    writeln!(
        out,
        ".SH EXAMPLES\n.nf\ngpusched jobs.txt \\-\\-watch\ngpusched add \\-\\-vram 8G \\-\\- python train.py \\-\\-seed 3\ngpusched status\ngpusched log 3 \\-f\ngpusched stop \\-\\-keep\\-jobs\n.fi"
    )?;
    writeln!(out, ".SH VERSION\nv{}", escape(env!("CARGO_PKG_VERSION")))?;
    Ok(out)
}

/// The files of a log directory, for the man page.
const FILES: [(&str, &str); 6] = [
    (
        "<log-dir>/status.txt",
        "the board: GPUs, running, waiting and finished jobs",
    ),
    (
        "<log-dir>/status.json",
        "the same for programs (schema gpusched-status/1)",
    ),
    (
        "<log-dir>/journal.jsonl",
        "what happened to every job; a restart resumes from it",
    ),
    (
        "<log-dir>/jobNNN_gpuN.log",
        "each job's output, one file per job and GPUs",
    ),
    (
        "<log-dir>/timeline.svg",
        "the run as a picture, written when a run ends",
    ),
    (
        "<log-dir>/metrics.prom",
        "counters and gauges in Prometheus' text format",
    ),
];

/// `text` as roff body text: backslashes and hyphens escaped, and no line
/// that starts with a control character.
fn escape(text: &str) -> String {
    let text = text.replace('\\', "\\e").replace('-', "\\-");
    text.lines()
        .map(|line| {
            if line.starts_with(['.', '\'']) {
                format!("\\&{line}")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_page_goes_beside_the_binary_and_the_hint_names_its_directory() {
        let (bin, page) = man_paths(Path::new("/home/u/.cargo/bin/gpusched")).unwrap();
        assert_eq!(bin, Path::new("/home/u/.cargo/bin"));
        assert_eq!(page, Path::new("/home/u/.cargo/share/man/man1/gpusched.1"));
        let (bin, page) = man_paths(Path::new("/usr/local/bin/gpusched")).unwrap();
        assert_eq!(bin, Path::new("/usr/local/bin"));
        assert_eq!(page, Path::new("/usr/local/share/man/man1/gpusched.1"));
        assert!(man_paths(Path::new("/gpusched")).is_none());
    }
}
