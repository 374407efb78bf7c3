//! Black-box tests of the queue policy (SPEC §12) implemented so far:
//! `on=` allow-lists, and the reasons waiting jobs give.

mod common;

use common::Env;

#[test]
fn on_keeps_a_job_to_its_gpus_and_is_judged_by_them() {
    let env = Env::new(
        "[on=1] sh -c 'echo $CUDA_VISIBLE_DEVICES > one.txt'\n[on=0,1 gpus=2] sh -c 'echo $CUDA_VISIBLE_DEVICES > both.txt'\n[on=5] echo never\n[vram=20G on=0] echo fits\n",
    );
    let out = env.run(&["--sim", "2", "--poll", "0.1"]);
    assert_eq!(out.code, 1, "infeasible job 3 fails the run: {}", out.stdout);
    assert_eq!(std::fs::read_to_string(env.path("one.txt")).unwrap(), "1\n");
    assert_eq!(std::fs::read_to_string(env.path("both.txt")).unwrap(), "0,1\n");
    assert_eq!(env.status_of(3).as_deref(), Some("infeasible"));
    assert!(
        out.stdout.contains("only 0 are allowed by its on= and --gpus"),
        "{}",
        out.stdout
    );
    assert_eq!(env.status_of(4).as_deref(), Some("ok"));
    assert_eq!(env.job_events(4, "started")[0]["gpus"], serde_json::json!([0]));
}
