//! Declarations that hold (docs/HARDWARE.md "Preallocating frameworks"):
//! the framework memory caps a declared job gets.

use crate::common;

use common::{Env, Sched};

/// The variables a job saw, from `env > FILE`.
fn seen(env: &Env, file: &str) -> Vec<String> {
    std::fs::read_to_string(env.path(file))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("XLA_") || l.starts_with("TF_FORCE_GPU_ALLOW_GROWTH"))
        .map(str::to_string)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

#[test]
fn declared_jobs_get_framework_caps_and_the_users_own_settings_win() {
    let env = Env::new(
        "[vram=6000] env > declared.txt\n\
         env > undeclared.txt\n\
         [vram=6000] XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 env > own.txt\n",
    );
    // The scheduler's own environment sets one of them.
    let mut command = env.command(&["--sim", "1", "--poll", "0.1"]);
    command.env("TF_FORCE_GPU_ALLOW_GROWTH", "false");
    let out = Sched::from_command(command).finish();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    // 6000 of the simulated GPU's 24000 MiB.
    assert_eq!(
        seen(&env, "declared.txt"),
        [
            "TF_FORCE_GPU_ALLOW_GROWTH=false",
            "XLA_CLIENT_MEM_FRACTION=0.25",
            "XLA_PYTHON_CLIENT_MEM_FRACTION=0.25"
        ]
        .map(String::from)
    );
    // An undeclared job runs alone: nothing but what the scheduler had.
    assert_eq!(
        seen(&env, "undeclared.txt"),
        ["TF_FORCE_GPU_ALLOW_GROWTH=false"].map(String::from)
    );
    let own = seen(&env, "own.txt");
    assert!(
        own.contains(&"XLA_PYTHON_CLIENT_MEM_FRACTION=0.9".to_string()),
        "{own:?}"
    );
    assert!(
        own.contains(&"XLA_CLIENT_MEM_FRACTION=0.25".to_string()),
        "{own:?}"
    );
}

#[test]
fn no_framework_caps_sets_none() {
    let env = Env::new("[vram=6000] env > declared.txt\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1", "--no-framework-caps"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        seen(&env, "declared.txt").is_empty(),
        "{:?}",
        seen(&env, "declared.txt")
    );
}
