//! One error type for what ends a command, and one exit-code table
//! (docs/BEHAVIOUR.md "Board and terminal", "Command line", "Everyday verbs"). Modules return [`Error`] for what the user must fix,
//! wrapped in `anyhow` with context at the edges; [`exit_code_for`] is the
//! only place that turns an error into an exit status.

/// Why a command could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad flag, argument or subcommand use. Exit 2.
    #[error("{0}")]
    Usage(String),
    /// The jobs file is missing, unreadable or does not parse (the message
    /// names the line and its text). Exit 2.
    #[error("{0}")]
    JobsFile(String),
    /// No GPU state can be had: NVML missing or failing, no GPUs, a `--gpus`
    /// index that does not exist. Exit 2.
    #[error("{0}")]
    Gpu(String),
    /// Another scheduler already runs on this log directory (docs/BEHAVIOUR.md "Exactly once"). Exit 2.
    #[error("{0}")]
    AlreadyRunning(String),
    /// A file operation failed; `doing` says what was being done and on
    /// which path. Exit 1: a failure of the machine, not of the user.
    #[error("{doing}: {source}")]
    Io {
        /// E.g. `cannot create log directory /x/logs`.
        doing: String,
        /// The operating system's error.
        source: std::io::Error,
    },
}

impl Error {
    /// The exit status for this error (docs/BEHAVIOUR.md "Board and terminal": 2 for usage and start-up
    /// problems the user must fix, 1 for failures of the machine).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) | Error::JobsFile(_) | Error::Gpu(_) | Error::AlreadyRunning(_) => 2,
            Error::Io { .. } => 1,
        }
    }

    /// An [`Error::Io`] saying what was being done.
    pub fn io(doing: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            doing: doing.into(),
            source,
        }
    }
}

/// The exit status for an error that ended the program: the [`Error`]'s
/// code when there is one in the chain, else 1.
pub fn exit_code_for(error: &anyhow::Error) -> i32 {
    error
        .chain()
        .find_map(|e| e.downcast_ref::<Error>())
        .map_or(1, Error::exit_code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn exit_codes_follow_the_table() {
        let cases = [
            (Error::Usage("x".into()), 2),
            (Error::JobsFile("x".into()), 2),
            (Error::Gpu("x".into()), 2),
            (Error::AlreadyRunning("x".into()), 2),
            (
                Error::io("cannot write x", std::io::Error::other("full")),
                1,
            ),
        ];
        for (error, code) in cases {
            assert_eq!(error.exit_code(), code, "{error}");
            assert_eq!(exit_code_for(&anyhow::Error::new(error)), code);
        }
        assert_eq!(exit_code_for(&anyhow::anyhow!("plain")), 1);
    }

    #[test]
    fn context_keeps_the_exit_code() {
        let error = Err::<(), _>(Error::JobsFile("line 3: bad".into()))
            .context("while starting")
            .unwrap_err();
        assert_eq!(exit_code_for(&error), 2);
    }
}
