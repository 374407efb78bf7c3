//! The README matches the program (SPEC §13): every example command in it
//! is one the command line accepts, its error sample is what the program
//! prints, and its status-board sample fits 80 columns. Fails when an
//! example stops working.

mod common;

use clap::Parser;
use common::{Env, bin};
use gpusched::cli::Cli;
use std::process::Command;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

/// The `gpusched …` commands of the README's indented examples, without
/// comments, redirections or what follows `&&`.
fn example_commands(readme: &str) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    for line in readme.lines() {
        let Some(code) = line.strip_prefix("    ") else {
            continue;
        };
        let code = code.trim_start_matches("$ ");
        let code = code
            .split(" && ")
            .find(|part| part.contains("gpusched ") && !part.contains("cargo build"))
            .unwrap_or(code);
        let code = code.trim().trim_start_matches("./target/release/");
        let Some(rest) = code.strip_prefix("gpusched ") else {
            continue;
        };
        // Output lines (`gpusched 0.1.0 — …`) and the synopsis are not
        // commands.
        if rest.starts_with(|c: char| c.is_ascii_digit()) || rest.contains('[') {
            continue;
        }
        let code = code
            .split(" #")
            .next()
            .unwrap()
            .split(" > ")
            .next()
            .unwrap();
        let words = shlex::split(code).unwrap_or_else(|| panic!("unquotable: {line}"));
        commands.push(words);
    }
    commands
}

#[test]
fn every_example_command_parses() {
    let commands = example_commands(&readme());
    assert!(
        commands.len() >= 15,
        "found only {} examples",
        commands.len()
    );
    for words in commands {
        if let Err(e) = Cli::try_parse_from(&words) {
            panic!(
                "README example `{}` no longer parses:\n{e}",
                words.join(" ")
            );
        }
    }
}

#[test]
fn the_error_sample_is_what_the_program_prints() {
    let readme = readme();
    let sample = readme
        .lines()
        .find(|l| l.contains("gpusched: error: jobs.txt: line 2:"))
        .expect("the README shows a jobs-file error")
        .trim();
    let env = Env::new("python train.py\n[vram=8G gpus=two] python train.py\n");
    let out = Command::new(bin())
        .arg("jobs.txt")
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), sample);
}

#[test]
fn the_board_sample_fits_80_columns() {
    let readme = readme();
    let start = readme
        .find("atomically on every round:")
        .expect("the status.txt sample");
    let sample: Vec<&str> = readme[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .collect();
    assert!(sample.iter().any(|l| l.contains("▶ job")), "{sample:?}");
    for line in sample {
        assert!(
            line.trim_start_matches("    ").chars().count() <= 80,
            "{line:?}"
        );
    }
}
