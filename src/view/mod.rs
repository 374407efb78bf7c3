//! What people and exporters read, built from the scheduler's state as
//! data (HOUSE habit 15): the status document ([`doc`]) that status.json,
//! metrics.prom and the summary ([`status`]), the board ([`board`]) and the
//! `gpusched status` screen ([`screen`]) are
//! rendered from, and the terminal lines ([`report`]). Nothing here
//! changes the scheduler's state; the loop only calls in.

pub mod board;
pub mod box_view;
pub mod doc;
pub mod report;
pub mod screen;
pub mod status;
