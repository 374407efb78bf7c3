//! The subcommands besides the scheduler itself, one file each (docs/BEHAVIOUR.md "Everyday verbs").
//! Each takes its parsed arguments and returns an exit code.

pub mod add;
pub mod box_source;
pub mod cancel;
pub mod completions;
pub mod control;
pub mod doctor;
pub mod export;
pub mod grid;
pub mod hold;
pub mod index;
pub mod log;
pub mod mcp;
pub mod own;
pub mod report;
pub mod request;
pub mod reserve;
pub mod retry;
pub mod serve;
pub mod service;
pub mod status;
pub mod stop;
pub mod timeline;
pub mod top;
pub mod wait;
