//! Multi-GPU jobs on a box whose GPUs are not all alike connected
//! (docs/HARDWARE.md "Topology"): on simulated GPUs with `--sim-nvlink`;
//! the NVML path is in `nvml.rs`.

use crate::common;

use common::Env;

#[test]
fn two_pair_jobs_on_a_box_with_two_nvlink_pairs_each_get_a_pair() {
    // 16G per GPU: one such job fills a pair.
    let env = Env::new(
        "[vram=16G gpus=2] echo $CUDA_VISIBLE_DEVICES > a.txt\n\
         [vram=16G gpus=2] echo $CUDA_VISIBLE_DEVICES > b.txt\n",
    );
    let out = env.run(&["--sim", "4", "--sim-nvlink", "0-2,1-3", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("4 simulated GPUs of 24000 MiB, NVLink 0-2x4,1-3x4"),
        "{}",
        out.stdout
    );
    let read = |f: &str| std::fs::read_to_string(env.path(f)).unwrap();
    assert_eq!(read("a.txt"), "0,2\n");
    assert_eq!(read("b.txt"), "1,3\n");
    // Without the links: the lowest indices, as ever.
    let env = Env::new("[vram=16G gpus=2] echo $CUDA_VISIBLE_DEVICES > a.txt\n");
    let out = env.run(&["--sim", "4", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(std::fs::read_to_string(env.path("a.txt")).unwrap(), "0,1\n");
}

#[test]
fn a_bad_nvlink_pair_is_refused_with_what_to_write() {
    let env = Env::new("echo hi\n");
    let out = env.run(&["--sim", "2", "--sim-nvlink", "0-3"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("--sim-nvlink names GPU pair 0-3, but --sim 2 has GPU 0 to 1"),
        "{}",
        out.stderr
    );
    let out = env.run(&["--sim", "2", "--sim-nvlink", "0-0"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("'0-0' is not a GPU pair"),
        "{}",
        out.stderr
    );
    assert!(env.events("started").is_empty());
}
