//! `gpusched top` as a lab reads it (docs/BEHAVIOUR.md "Seeing the whole
//! box"): each queue's jobs with their names in aligned columns, and a
//! GPU process outside every scheduler with its user and pid.

use crate::common::wait_for;
use crate::nvml::Nvml;

#[test]
fn top_names_jobs_in_columns_and_shows_whose_process_runs_outside_every_scheduler() {
    let me = std::process::id();
    let state = format!(
        "gpu GPU-11111111-aaaa 24000 0 0\ngpu GPU-22222222-bbbb 24000 0 0\nproc 1 {me} 3000\n"
    );
    let nvml = Nvml::new(
        "[name=train vram=2G] while [ ! -e release ]; do sleep 0.05; done\n\
         [vram=30G] echo too big for now\n",
        &state,
    );
    let sched = nvml.spawn(&["--poll", "0.1", "--watch"]);
    let env = &nvml.env;
    wait_for("job 1 to run", &mut || !env.events("started").is_empty());
    let top = nvml.top();
    let user = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .map_or_else(|| nix::unistd::getuid().to_string(), |u| u.name);
    assert!(
        top.contains(&format!("unscheduled: {user} pid {me} 3000 MiB")),
        "{top}"
    );
    let header = top
        .lines()
        .find(|l| l.contains("JOB") && l.contains("NAME"));
    let row = top.lines().find(|l| l.contains(" train "));
    let (Some(header), Some(row)) = (header, row) else {
        panic!("no queue table with job names: {top}");
    };
    // Aligned: the name starts under NAME, the state under STATE.
    assert_eq!(header.find("NAME"), row.find("train"), "{top}");
    assert_eq!(header.find("STATE"), row.find("running"), "{top}");
    std::fs::write(env.path("release"), "").unwrap();
    sched.stop();
}
