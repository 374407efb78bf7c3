//! `gpusched`: parse the command line, run, map the outcome to an exit code.

use clap::Parser;
use std::io::Write;
use gpusched::cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    gpusched::init_tracing();
    let result = match &cli.command {
        Some(Command::Simjob(args)) => gpusched::simjob::run(args),
        Some(Command::Supervise(args)) => gpusched::process::supervisor::run(args),
        Some(Command::Status(args)) => gpusched::commands::status::run(args),
        Some(Command::Add(args)) => gpusched::commands::add::run(args),
        Some(Command::Cancel(args)) => gpusched::commands::cancel::run(args),
        Some(Command::Stop(args)) => gpusched::commands::stop::run(args),
        None => gpusched::run(&cli.run),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(error) => {
            // A terminal that went away must not turn the exit code into a panic.
            let _ = writeln!(std::io::stderr(), "gpusched: error: {error:#}");
            std::process::exit(gpusched::error::exit_code_for(&error));
        }
    }
}
