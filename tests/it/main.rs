//! The black-box suite in one test binary (one link of the crate instead
//! of one per file): each module drives the real `gpusched` binary, mostly
//! in `--sim` mode, through the harness in `common`. Run one part with
//! `cargo test --test it stopping::`.

#![expect(
    clippy::disallowed_methods,
    reason = "the suite reads the temporary files its runs made"
)]

mod backfill;
mod box_rules;
mod box_view;
mod chaos;
mod checks;
mod common;
mod containment;
mod declarations;
mod exactly_once;
mod expected;
mod first_day;
mod groups;
mod hostile;
mod layers;
mod learned;
mod lifecycle;
mod mcp;
mod mig;
mod mps;
mod neighbours;
mod never_panics;
mod notify;
mod nvml;
mod pilot;
mod placement_properties;
mod queue_order;
mod queue_policy;
mod reactivity;
mod readme;
mod report;
mod scheduler;
mod service;
mod shared_dirs;
mod sharing;
mod slurm;
mod slurm_cancel;
mod slurm_nodes;
mod slurm_pilot;
mod spread;
mod state_matrix;
mod steering;
mod stopping;
mod timeline;
mod top;
mod topology;
mod verb_walk;
mod verbs;
mod vocabulary;
