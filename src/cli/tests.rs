use super::*;
use clap::CommandFactory;

#[test]
fn verify_cli() {
    Cli::command().debug_assert();
    SuperviseArgs::command().debug_assert();
}

#[test]
fn the_supervisor_takes_no_arguments() {
    assert!(SuperviseArgs::try_parse_from(Vec::<String>::new()).is_ok());
    assert!(SuperviseArgs::try_parse_from(["--key", "k#0"]).is_err());
}

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    let matches =
        command().try_get_matches_from(std::iter::once("gpusched").chain(args.iter().copied()))?;
    super::cli_from(&matches)
}

#[test]
fn defaults_match_the_spec() {
    let cli = parse(&["jobs.txt"]).unwrap();
    let run = cli.run;
    assert_eq!(run.jobs_file, Some(PathBuf::from("jobs.txt")));
    assert_eq!(run.idle_threshold, 200);
    assert_eq!(run.margin, 512);
    assert_eq!(run.tolerance, 0.10);
    assert_eq!(run.spike_buffer, 0.10);
    assert_eq!(run.poll, 5.0);
    assert_eq!(run.oom_retries, 0);
    assert_eq!(run.log_dir, PathBuf::from("gpusched_logs"));
    assert!(!run.exclusive && !run.watch && !run.fresh && !run.verbose);
    assert_eq!(run.sim, None);
    assert_eq!(run.gpus, None);
}

#[test]
fn gpu_list_is_validated() {
    let cli = parse(&["j", "--gpus", "3,0,1"]).unwrap();
    assert_eq!(cli.run.gpus, Some(GpuList(vec![0, 1, 3])));
    assert!(parse(&["j", "--gpus", "0,0"]).is_err());
    assert!(parse(&["j", "--gpus", "a"]).is_err());
    assert!(parse(&["j", "--gpus", ""]).is_err());
}

#[test]
fn bad_values_are_usage_errors() {
    for args in [
        &["j", "--margin", "-5"][..],
        &["j", "--poll", "0"],
        &["j", "--poll", "-1"],
        &["j", "--poll", "nan"],
        &["j", "--poll", "1e20"],
        &["j", "--poll", "inf"],
        &["j", "--margin", "99999999999999999999"],
        &["j", "--idle-threshold", "18446744073709551615"],
        &["j", "--oom-retries", "99999999999"],
        &["simjob", "--vram", "1", "--hold", "1e300"],
        &["simjob", "--vram", "1", "--ramp", "-1"],
        &["stop", "--timeout", "0"],
        &["j", "--tolerance", "-0.1"],
        &["j", "--spike-buffer", "x"],
        &["j", "--sim", "0"],
        &["j", "--idle-threshold", "1.5"],
        &["j", "--bogus"],
        &[],
    ] {
        let err = parse(args).expect_err(&format!("{args:?} should fail"));
        assert_eq!(err.exit_code(), 2, "{args:?}");
    }
}

#[test]
fn add_takes_the_command_after_its_options() {
    let cli = parse(&[
        "add", "--vram", "8G", "--", "python", "train.py", "--lr", "1e-4",
    ])
    .unwrap();
    match cli.command {
        Some(Command::Add(args)) => {
            assert_eq!(
                args.attributes,
                [("vram".to_string(), Some("8G".to_string()))]
            );
            assert_eq!(args.command, ["python", "train.py", "--lr", "1e-4"]);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        parse(&["add", "--vram", "8G"]).is_err(),
        "a command is required"
    );
}

/// Every attribute of the table is a flag of `gpusched add` (but `cwd=`,
/// `env=` and `cancel`, which `add` writes itself or never), and reaches
/// the job's line: a new attribute is an `add` flag the day it is added.
#[test]
fn every_attribute_is_an_add_flag_that_reaches_the_line() {
    let samples = |name: &str| match name {
        "vram" | "mem" => "8G",
        "gpus" | "cpus" | "retries" | "priority" | "limit" => "2",
        "timeout" | "retry_delay" => "2h",
        "retry_on" => "fail",
        "begin" => "+2h",
        "name" | "family" | "group" => "x",
        "after" => "1",
        "on" => "0,1",
        "enforce" => "warn",
        other => panic!("give attribute {other} a sample value here"),
    };
    for attribute in crate::jobspec::ATTRIBUTES {
        if matches!(attribute.name, "cwd" | "env" | "cancel") {
            continue;
        }
        let flag = format!("--{}", attribute.name.replace('_', "-"));
        let mut argv = vec!["add", flag.as_str()];
        if !attribute.is_flag() {
            argv.push(samples(attribute.name));
        }
        argv.extend(["--", "true"]);
        let cli = parse(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        let Some(Command::Add(args)) = cli.command else {
            panic!("{argv:?}");
        };
        let job = crate::edit::NewJob {
            attributes: args.attributes,
            argv: args.command,
            ..Default::default()
        };
        let line = crate::edit::job_line(&job).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        let spec = crate::jobspec::parse_line(&line, 1).unwrap().unwrap();
        assert!((attribute.given)(&spec), "{argv:?} wrote {line}");
    }
}

#[test]
fn typos_of_subcommands_are_recognised() {
    assert_eq!(subcommand_typo("statu").as_deref(), Some("status"));
    assert_eq!(subcommand_typo("stauts").as_deref(), Some("status"));
    assert_eq!(subcommand_typo("cancle").as_deref(), Some("cancel"));
    assert_eq!(subcommand_typo("jobs.txt"), None);
    for exact in [
        "simjob", "status", "cancel", "ledger", "man", "--help", "-v",
    ] {
        assert!(
            typo_error(std::ffi::OsStr::new(exact)).is_none(),
            "{exact} is no typo"
        );
    }
    assert!(typo_error(std::ffi::OsStr::new("cancle")).is_some());
    assert_eq!(subcommand_typo("experiments"), None);
    assert_eq!(
        subcommand_typo("__supervis"),
        None,
        "internal commands are never suggested"
    );
}

#[test]
fn the_help_lists_every_attribute() {
    let help = command().render_long_help().to_string();
    for a in crate::jobspec::ATTRIBUTES {
        assert!(
            help.contains(a.shown) && help.contains(a.help),
            "{}",
            a.shown
        );
    }
}

#[test]
fn simjob_subcommand() {
    let cli = parse(&["simjob", "--vram", "1000", "--hold", "2"]).unwrap();
    match cli.command {
        Some(Command::Simjob(args)) => {
            assert_eq!(args.vram, 1000);
            assert_eq!(args.hold, 2.0);
            assert_eq!(args.ramp, 0.5);
            assert_eq!(args.exit_code, 0);
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Every verb that takes the shared `--log-dir` hands exactly that
/// directory to its trust mode, so it finds the caller's running
/// scheduler and, run by root, acts as the directory's owner, and run by
/// anyone else, refuses a directory not theirs (docs/SECURITY.md "Every
/// verb's trust mode"); `hold`, `release`, `reserve` and `unreserve` were
/// once left out. A verb with a `--log-dir` whose mode names no
/// directory fails here.
#[test]
fn every_verb_with_a_log_dir_hands_it_to_its_trust_mode() {
    let root = command();
    let mut checked = 0;
    for sub in root.get_subcommands() {
        let shared = sub.get_arguments().any(|a| a.get_long() == Some("log-dir"));
        if !shared {
            continue;
        }
        let mut argv = vec![sub.get_name().to_string(), "--log-dir".into(), "/x".into()];
        if sub.get_name() == "reserve" {
            argv.push("--list".into());
        }
        let required: Vec<_> = sub
            .get_arguments()
            .filter(|a| a.is_positional() && a.is_required_set())
            .collect();
        if !required.is_empty() {
            argv.push("--".into());
            argv.extend(required.iter().map(|_| "1".to_string()));
        }
        let mut cli = parse(&argv.iter().map(String::as_str).collect::<Vec<_>>())
            .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        let dir = match cli.command.as_mut().map(|c| c.trust()) {
            Some(super::Trust::LogDir(dir) | super::Trust::Ledger(dir)) => Some(dir.clone()),
            Some(super::Trust::ReadsOthers) => {
                // A box view reads others' files through the hostile-file
                // reader only; it takes a --log-dir for its user's queue.
                assert!(
                    ["top", "serve", "report"].contains(&sub.get_name()),
                    "gpusched {} reads others' files but takes a --log-dir",
                    sub.get_name()
                );
                checked += 1;
                continue;
            }
            _ => None,
        };
        assert_eq!(
            dir,
            Some(PathBuf::from("/x")),
            "gpusched {}",
            sub.get_name()
        );
        checked += 1;
    }
    assert!(checked >= 18, "only {checked} verbs checked");
}
