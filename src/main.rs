//! `gpusched`: parse the command line, run, map the outcome to an exit code.

use clap::Parser;
use gpusched::cli::{Command, SUPERVISE, SuperviseArgs, Trust};
use gpusched::commands::control;
use gpusched::control::ControlChange;

fn main() {
    let mut argv = std::env::args_os();
    if argv.nth(1).is_some_and(|a| a == SUPERVISE) {
        let _args: SuperviseArgs = SuperviseArgs::parse_from(argv);
        finish(gpusched::process::supervisor::run());
    }
    // A pilot's agent on another node of its allocation
    // (docs/BEHAVIOUR.md "Several nodes").
    let mut argv = std::env::args();
    if argv
        .nth(1)
        .is_some_and(|a| a == gpusched::gpu::nodes::NODE_AGENT)
    {
        let poll = argv.next().and_then(|p| p.parse::<f64>().ok());
        finish(match poll.filter(|p| p.is_finite() && *p > 0.0) {
            Some(poll) => gpusched::gpu::nodes::run_agent(poll),
            None => Err(gpusched::error::Error::Usage(format!(
                "usage: gpusched {} POLL_SECONDS",
                gpusched::gpu::nodes::NODE_AGENT
            ))
            .into()),
        });
    }
    // `gpusched cancle 3`: clap would take `cancle` for the jobs file and
    // complain about `3`; say what was meant instead.
    if let Some(error) = std::env::args_os()
        .nth(1)
        .and_then(|first| gpusched::cli::typo_error(&first))
    {
        finish(Err(error.into()));
    }
    let mut cli = match gpusched::cli::cli_from(&gpusched::cli::command().get_matches()) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    gpusched::init_tracing();
    if let Some(command) = cli.command.as_mut() {
        quiet_on_a_closed_pipe(command);
        apply_trust(command);
    }
    let result = match &cli.command {
        Some(Command::Simjob(args)) => gpusched::simjob::run(args),
        Some(Command::Status(args)) => gpusched::commands::status::run(args),
        Some(Command::Add(args)) => gpusched::commands::add::run(args),
        Some(Command::Cancel(args)) => gpusched::commands::cancel::run(args),
        Some(Command::Stop(args)) => gpusched::commands::stop::run(args),
        Some(Command::Log(args)) => gpusched::commands::log::run(args),
        Some(Command::Retry(args)) => gpusched::commands::retry::run(args),
        Some(Command::Wait(args)) => gpusched::commands::wait::run(args),
        Some(Command::Grid(args)) => gpusched::commands::grid::run(args),
        Some(Command::Mcp(args)) => gpusched::commands::mcp::run(args),
        Some(Command::Pause(args)) => control::run(&args.log_dir, ControlChange::Pause),
        Some(Command::Resume(args)) => control::run(&args.log_dir, ControlChange::Resume),
        Some(Command::Drain(args)) => control::run(
            &args.log_dir,
            ControlChange::Drain {
                gpus: args.gpus.clone(),
            },
        ),
        Some(Command::Undrain(args)) => control::run(
            &args.log_dir,
            ControlChange::Undrain {
                gpus: args.gpus.clone(),
            },
        ),
        Some(Command::Reserve(args)) => gpusched::commands::reserve::run(args),
        Some(Command::Unreserve(args)) => gpusched::commands::reserve::release(args),
        Some(Command::Hold(args)) => gpusched::commands::hold::run(args, true),
        Some(Command::Release(args)) => gpusched::commands::hold::run(args, false),
        Some(Command::Top(args)) => gpusched::commands::top::run(args),
        Some(Command::Serve(args)) => gpusched::commands::serve::run(args),
        Some(Command::Timeline(args)) => gpusched::commands::timeline::run(args),
        Some(Command::Export(args)) => gpusched::commands::export::run(args),
        Some(Command::Completions(args)) => gpusched::commands::completions::completions(args),
        Some(Command::Man(args)) => gpusched::commands::completions::man(args),
        Some(Command::Doctor(args)) => gpusched::commands::doctor::run(args),
        Some(Command::Service(args)) => gpusched::commands::service::run(&args.action),
        Some(Command::Report(args)) => gpusched::commands::report::run(args),
        Some(Command::Ledger(args)) => ledger(&args.action),
        None => gpusched::run(&cli.run),
    };
    finish(result);
}

/// `gpusched ledger init [--sim-dir DIR]`: makes the shared ledger, or a
/// shared simulated box's directory with the ledger in it, as the docs
/// say to share one.
fn ledger(action: &gpusched::cli::LedgerAction) -> anyhow::Result<i32> {
    let gpusched::cli::LedgerAction::Init { ledger, sim_dir } = action;
    let said = match sim_dir {
        Some(dir) => gpusched::ledger::store::init(dir).and_then(|first| {
            let ledger = gpusched::ledger::store::init(&dir.join("ledger"))?;
            Ok(format!("{first}\n{ledger}"))
        }),
        None => gpusched::ledger::store::init(ledger),
    };
    println!("{}", said?);
    Ok(0)
}

/// Applies the verb's trust mode (docs/SECURITY.md "Every verb's trust
/// mode") before it touches anything: root becomes the owner of the log
/// directory it acts in, anyone else is refused one that is not theirs.
/// Exits with the error when refused.
fn apply_trust(command: &mut Command) {
    match command.trust() {
        Trust::LogDir(log_dir) => {
            // From another directory: the caller's own running scheduler.
            match gpusched::commands::own::running_log_dir(
                log_dir,
                &gpusched::commands::own::ledgers_searched(),
            ) {
                Ok(Some(found)) => {
                    gpusched::console::note(&format!(
                        "using {} (your running scheduler's log directory)",
                        found.display()
                    ));
                    *log_dir = found;
                }
                Ok(None) => {}
                Err(error) => finish(Err(error.into())),
            }
            // Root acts in a user's log directory as that user; anyone
            // else acts only in their own.
            if let Err(error) = gpusched::trust::act_as_owner_of(log_dir)
                .and_then(|()| gpusched::trust::refuse_foreign(log_dir))
            {
                finish(Err(error.into()));
            }
        }
        Trust::Ledger(log_dir) => {
            // Root follows a user's log directory (their simulated GPUs)
            // only as that user; a log directory that is not there names
            // nobody to become.
            if log_dir.exists()
                && let Err(error) = gpusched::trust::act_as_owner_of(log_dir)
            {
                finish(Err(error.into()));
            }
        }
        Trust::ReadsOthers | Trust::Own => {}
    }
}

/// Exits with the command's code, or prints its error and exits with the
/// code for that error.
fn finish(result: anyhow::Result<i32>) -> ! {
    match result {
        Ok(code) => std::process::exit(code),
        // A reader that went away (`gpusched top | head`): quiet, and the
        // status a shell gives a process killed by SIGPIPE, as git does.
        Err(error) if broken_pipe(&error) => std::process::exit(128 + libc::SIGPIPE),
        Err(error) => {
            // A terminal that went away must not turn the exit code into a
            // panic; a path or name in the error is someone's text.
            gpusched::console::error(&format!("{error:#}"));
            std::process::exit(gpusched::error::exit_code_for(&error));
        }
    }
}

/// A one-shot view whose reader went away (`gpusched report | head`)
/// ends quietly, killed by SIGPIPE as `cat` and `git` are (the shell
/// says 141), instead of a panic in `println!`: Rust ignores SIGPIPE, so
/// its default action is given back here. Never for what runs on (the
/// scheduler, `serve`, `mcp`, `wait`, `top` without `--once`…), which
/// meet a closed pipe as an error (exit 141 too, quietly: [`finish`]).
fn quiet_on_a_closed_pipe(command: &Command) {
    let view = match command {
        Command::Status(_)
        | Command::Log(_)
        | Command::Report(_)
        | Command::Export(_)
        | Command::Completions(_)
        | Command::Man(_)
        | Command::Doctor(_)
        | Command::Timeline(_) => true,
        Command::Top(args) => args.once,
        _ => false,
    };
    if view {
        // SAFETY: SIG_DFL installs no handler; no thread runs yet.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
}

/// Whether `error` comes from writing to a pipe nobody reads (EPIPE):
/// Rust ignores SIGPIPE, so such a write fails instead of ending us.
fn broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
