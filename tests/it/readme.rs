//! The README matches the program (docs/BEHAVIOUR.md "Everyday verbs"): every example command in it
//! is one the command line accepts, its error sample is what the program
//! prints, and its status-board sample fits 80 columns. Fails when an
//! example stops working.

use crate::common;

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
        // Output lines (`gpusched 0.1.0 — …`, `gpusched top — 4 GPUs — …`)
        // and the synopsis are not commands.
        if rest.starts_with(|c: char| c.is_ascii_digit())
            || rest.contains('[')
            || rest.contains(" — ")
        {
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

/// Every tracked text file that may cite the behaviour reference.
fn sources() -> Vec<(String, String)> {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("git")
        .args([
            "ls-files",
            "src",
            "tests",
            "docs",
            "scripts",
            "benches",
            "README.md",
        ])
        .current_dir(root)
        .output();
    let listed = match out {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        _ => {
            eprintln!("git is not available; the citations were not checked");
            return Vec::new();
        }
    };
    listed
        .lines()
        .filter_map(|path| {
            let text = std::fs::read_to_string(format!("{root}/{path}")).ok()?;
            Some((path.to_string(), text))
        })
        .collect()
}

#[test]
fn the_readme_is_a_first_day_read_and_cites_the_repositorys_own_reference() {
    let readme = readme();
    let lines = readme.lines().count();
    assert!(
        lines < 450,
        "README.md has {lines} lines; move detail to docs/"
    );
    assert!(
        readme.contains("cargo install --locked --path ."),
        "no install step"
    );
    // The behaviour reference is in the repository: nothing cites a
    // document that is not.
    let foreign = ["SPEC", " §"].concat();
    for (path, text) in sources() {
        assert!(
            !text.contains(&foreign),
            "{path} cites a SPEC section; cite docs/BEHAVIOUR.md instead"
        );
    }
}

#[test]
fn every_cited_behaviour_section_exists() {
    let reference =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/BEHAVIOUR.md")).unwrap();
    let headings: Vec<&str> = reference
        .lines()
        .filter_map(|l| l.strip_prefix("## ").or_else(|| l.strip_prefix("### ")))
        .collect();
    let mut cited = 0;
    for (path, text) in sources()
        .into_iter()
        .filter(|(path, _)| path != "tests/it/readme.rs")
    {
        // A citation may run over comment lines: join them first.
        let joined: String = text
            .lines()
            .map(|l| {
                let l = l.trim_start();
                l.strip_prefix("//!")
                    .or_else(|| l.strip_prefix("///"))
                    .or_else(|| l.strip_prefix("//"))
                    .unwrap_or(l)
                    .trim()
            })
            .collect::<Vec<_>>()
            .join(" ");
        for (at, _) in joined.match_indices("BEHAVIOUR.md \"") {
            let mut rest = &joined[at + "BEHAVIOUR.md ".len()..];
            // "A", "B" and "C" — every quoted name of the list.
            while let Some(after_quote) = rest.strip_prefix('"') {
                let Some(end) = after_quote.find('"') else {
                    break;
                };
                let name = &after_quote[..end];
                cited += 1;
                assert!(
                    headings.contains(&name),
                    "{path} cites docs/BEHAVIOUR.md \"{name}\", which has no such section"
                );
                rest = after_quote[end + 1..]
                    .trim_start_matches([',', ' '])
                    .trim_start_matches("and ");
            }
        }
    }
    assert!(
        cited > 100 || sources().is_empty(),
        "only {cited} citations found"
    );
}
