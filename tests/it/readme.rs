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

/// `text` with every run of white space made one space, so that a
/// sentence wrapped in Markdown or by `--help` matches.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn help_of(args: &[&str]) -> String {
    let out = Command::new(bin()).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}");
    flat(&String::from_utf8_lossy(&out.stdout))
}

fn behaviour() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/BEHAVIOUR.md")).unwrap()
}

/// docs/BEHAVIOUR.md "Being told": what `--help`, the README and
/// BEHAVIOUR say of `--notify` is the program's own: the retry schedule
/// from its constants, every `--notify-on` event, the outcomes `failed`
/// picks (from the filter itself), and e-mail with its relay variable.
#[test]
fn notify_help_and_docs_match_the_program() {
    use gpusched::notifier::{Filter, NotifyOn};
    use strum::VariantArray;
    let help = help_of(&["--help"]);
    let (readme, behaviour) = (flat(&readme()), flat(&behaviour()));
    let schedule = gpusched::notifier::retry_schedule();
    for (what, text) in [
        ("--help", &help),
        ("README", &readme),
        ("BEHAVIOUR", &behaviour),
    ] {
        assert!(text.contains(&schedule), "{what} lacks {schedule:?}");
        assert!(
            text.contains("mailto:") && text.contains(gpusched::notifier::mail::SMTP_VAR),
            "{what} does not say how to mail"
        );
    }
    for on in <NotifyOn as clap::ValueEnum>::value_variants() {
        let name = clap::ValueEnum::to_possible_value(on).unwrap();
        let name = name.get_name();
        assert!(help.contains(&format!("- {name}: ")), "--help lacks {name}");
        assert!(
            readme.contains(&format!("`{name}`")),
            "README lacks `{name}`"
        );
    }
    // The outcomes `failed` picks: each named in its help line, and the
    // README names the ones it leaves out.
    let failed = Filter::of(&[NotifyOn::Failed]);
    let line = help
        .split("- failed: ")
        .nth(1)
        .and_then(|rest| rest.split(" - ok: ").next())
        .unwrap()
        .to_string();
    let words: Vec<&str> = line
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .collect();
    let mut left_out = Vec::new();
    for status in gpusched::model::DoneStatus::VARIANTS {
        let word = status.as_str();
        if failed.wants_outcome(*status) {
            assert!(words.contains(&word), "`failed` picks {word}: {line}");
        } else {
            assert!(!words.contains(&word), "`failed` leaves out {word}: {line}");
            left_out.push(format!("`{word}`"));
        }
    }
    let but = format!("every ending but {}", left_out.join(" and "));
    assert!(readme.contains(&but), "README lacks {but:?}");
}

/// The README's completions lines work on a fresh account, whose
/// `~/.local/share` has no bash-completion directory yet.
#[test]
fn the_readmes_completions_lines_work_on_a_fresh_account() {
    let readme = readme();
    let lines: Vec<&str> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("    "))
        .filter(|l| l.contains("bash-completion/completions"))
        .collect();
    assert!(!lines.is_empty(), "no completions line");
    let home = tempfile::tempdir().unwrap();
    let dir = std::path::Path::new(bin()).parent().unwrap();
    let out = Command::new("sh")
        .args(["-ec", &lines.join("\n")])
        .env("HOME", home.path())
        .env("PATH", common::path_with(dir))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = home
        .path()
        .join(".local/share/bash-completion/completions/gpusched");
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(text.contains("_gpusched"), "{text}");
}

/// docs/BEHAVIOUR.md "Spread or pack": the README and `--placement`'s help
/// say when a job shares a GPU with the program's own thresholds — flat
/// out and the slowdown under which a family counts as sharing well.
#[test]
fn spread_or_pack_is_said_where_users_look() {
    let flat_out = format!("{} %", gpusched::allocation::SATURATED_UTIL);
    let slowdown = format!("{}×", gpusched::policy::expected::SLOWS_WHEN_SHARING);
    for (what, text) in [
        ("--help", help_of(&["--help"])),
        ("README", flat(&readme())),
    ] {
        for said in [&flat_out, &slowdown, &"share well".to_string()] {
            assert!(text.contains(said.as_str()), "{what} lacks {said:?}");
        }
    }
}
