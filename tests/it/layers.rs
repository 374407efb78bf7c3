//! The crate's shape (docs/ARCHITECTURE.md "Layers"): its layer table is the
//! code's, no import cycle
//! among the top-level modules, none among files, and no function over
//! 100 lines outside test code. Reads
//! `src/` and follows every `crate::…` and `super::…` path outside test
//! code; a child using its ancestor (an `impl` in a submodule) is not an
//! edge. Fails naming the modules of the first cycle it finds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Module = Vec<String>;

/// Every source file's module path (`src/a/b.rs` → `a::b`, `mod.rs` →
/// its folder), test files left out.
fn modules() -> BTreeMap<Module, String> {
    fn walk(dir: &Path, out: &mut BTreeMap<Module, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
                continue;
            }
            let rel = path.strip_prefix("src").unwrap().with_extension("");
            let mut parts: Module = rel.iter().map(|p| p.to_string_lossy().into()).collect();
            if parts.last().is_some_and(|p| p == "tests") {
                continue;
            }
            if parts
                .last()
                .is_some_and(|p| ["mod", "lib", "main"].contains(&p.as_str()))
            {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
            let code: String = code
                .lines()
                .map(|l| l.split("//").next().unwrap())
                .collect::<Vec<_>>()
                .join("\n");
            out.insert(parts, code);
        }
    }
    let mut out = BTreeMap::new();
    walk(Path::new("src"), &mut out);
    out
}

/// The module paths a file's code names: `crate::a::b::C`, the items of
/// `use crate::{a, b::c}` and `super::x` (resolved against `module`).
fn named_paths(module: &Module, code: &str) -> Vec<Module> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = Vec::new();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", module[..module.len().saturating_sub(1)].to_vec()),
    ] {
        for (at, _) in code.match_indices(prefix) {
            if at > 0 && code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &code[at + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find("};").unwrap_or(group.len())];
                for item in group.split([',', '{', '}']) {
                    let first = item.trim().split("::").next().unwrap_or("");
                    if !first.is_empty() && first != "self" {
                        out.push([base.clone(), vec![first.to_string()]].concat());
                    }
                }
                continue;
            }
            let path: String = rest.chars().take_while(|&c| ident(c)).collect();
            let parts = path.split("::").filter(|p| !p.is_empty()).map(String::from);
            out.push(base.iter().cloned().chain(parts).collect());
        }
    }
    out
}

/// The deepest module of `modules` that `path` lies in.
fn resolve<'m>(path: &Module, modules: &'m BTreeMap<Module, String>) -> Option<&'m Module> {
    (1..=path.len())
        .rev()
        .find_map(|n| modules.get_key_value(&path[..n]).map(|(k, _)| k))
}

/// A cycle in `graph`, if it has one (depth-first search).
fn find_cycle<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
    fn visit<N: Ord + Clone>(
        node: &N,
        graph: &BTreeMap<N, BTreeSet<N>>,
        done: &mut BTreeSet<N>,
        stack: &mut Vec<N>,
    ) -> Option<Vec<N>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            return Some(stack[at..].to_vec());
        }
        if !done.insert(node.clone()) {
            return None;
        }
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

/// Edges between files, and between top-level modules.
fn graphs() -> (
    BTreeMap<Module, BTreeSet<Module>>,
    BTreeMap<String, BTreeSet<String>>,
) {
    let modules = modules();
    let mut files: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in &modules {
        for path in named_paths(module, code) {
            let Some(target) = resolve(&path, &modules) else {
                continue;
            };
            if target == module || module.starts_with(target) {
                continue;
            }
            files
                .entry(module.clone())
                .or_default()
                .insert(target.clone());
            if let (Some(a), Some(b)) = (module.first(), target.first())
                && a != b
            {
                top.entry(a.clone()).or_default().insert(b.clone());
            }
        }
    }
    (files, top)
}

#[test]
fn the_top_level_modules_form_layers() {
    let (_, top) = graphs();
    assert!(top.contains_key("scheduler") && top["scheduler"].contains("allocation"));
    if let Some(cycle) = find_cycle(&top) {
        panic!(
            "top-level modules import each other in a circle: {}",
            cycle.join(" → ")
        );
    }
}

/// docs/ARCHITECTURE.md's layer table: each top-level module's layer.
fn documented_layers() -> BTreeMap<String, u32> {
    let text = std::fs::read_to_string("docs/ARCHITECTURE.md").unwrap();
    let table = text
        .split("| layer | modules |")
        .nth(1)
        .expect("docs/ARCHITECTURE.md has a layer table");
    let mut layers = BTreeMap::new();
    for row in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').collect();
        let layer: u32 = cells[0].trim().parse().unwrap();
        for module in cells[1].split(',') {
            layers.insert(module.trim().trim_matches('`').to_string(), layer);
        }
    }
    layers
}

/// The layer table in docs/ARCHITECTURE.md is the code's: it names every
/// top-level module once, and every import goes to a lower layer.
#[test]
fn the_layer_table_is_the_code() {
    let layers = documented_layers();
    let (_, top) = graphs();
    let modules: BTreeSet<String> = modules()
        .keys()
        .filter_map(|m| m.first().cloned())
        .filter(|m| !m.is_empty())
        .collect();
    // Longest-path layers of the code, for the message.
    let mut depth: BTreeMap<String, u32> = BTreeMap::new();
    for _ in 0..top.len() + 1 {
        for module in &modules {
            let d = top
                .get(module)
                .into_iter()
                .flatten()
                .map(|t| depth.get(t).copied().unwrap_or(0) + 1)
                .max()
                .unwrap_or(0);
            depth.insert(module.clone(), d);
        }
    }
    let listed: BTreeSet<String> = layers.keys().cloned().collect();
    assert_eq!(
        listed, modules,
        "the layer table and src/ list different modules"
    );
    let mut wrong = Vec::new();
    for (from, targets) in &top {
        for to in targets {
            if layers[from] <= layers[to] {
                wrong.push(format!(
                    "{from} (layer {}) uses {to} (layer {})",
                    layers[from], layers[to]
                ));
            }
        }
    }
    let mut by_layer: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for (module, d) in &depth {
        by_layer.entry(*d).or_default().push(module);
    }
    assert!(
        wrong.is_empty(),
        "imports that go up or sideways: {wrong:#?}\nthe code's layers (each module as low as it can be): {by_layer:?}"
    );
}

#[test]
fn no_file_imports_itself_through_others() {
    let (files, _) = graphs();
    assert!(files.len() > 50, "read only {} files", files.len());
    if let Some(cycle) = find_cycle(&files) {
        let names: Vec<String> = cycle.iter().map(|m| m.join("::")).collect();
        panic!("files import each other in a circle: {}", names.join(" → "));
    }
}

#[test]
fn the_cycle_finder_finds_a_planted_cycle() {
    let graph: BTreeMap<u32, BTreeSet<u32>> = [
        (1, BTreeSet::from([2])),
        (2, BTreeSet::from([3])),
        (3, BTreeSet::from([1])),
        (4, BTreeSet::from([1])),
    ]
    .into();
    let mut cycle = find_cycle(&graph).expect("a cycle");
    cycle.sort();
    assert_eq!(cycle, vec![1, 2, 3]);
    let acyclic: BTreeMap<u32, BTreeSet<u32>> =
        [(1, BTreeSet::from([2])), (2, BTreeSet::from([3]))].into();
    assert_eq!(find_cycle(&acyclic), None);
    let module: Module = vec!["scheduler".into(), "phases".into(), "dispatch".into()];
    let named = named_paths(
        &module,
        "use crate::{files, view::report};\nsuper::booking::x",
    );
    assert!(named.contains(&vec!["files".to_string()]));
    assert!(named.contains(&vec!["view".to_string()]));
    assert!(named.contains(&vec![
        "scheduler".into(),
        "phases".into(),
        "booking".into(),
        "x".into()
    ]));
}

/// Functions of `code` longer than `limit` lines, as (name, first line,
/// length): a `fn` line up to the `}` at its own indentation.
fn long_functions(code: &str, limit: usize) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let after = [
            "pub(in crate::scheduler) ",
            "pub(super) ",
            "pub(crate) ",
            "pub ",
            "",
        ]
        .iter()
        .find_map(|p| trimmed.strip_prefix(p))
        .unwrap_or(trimmed);
        let Some(rest) = after.strip_prefix("fn ") else {
            continue;
        };
        let Some(open) = lines[at..]
            .iter()
            .position(|l| l.trim_end().ends_with('{') || l.trim_end().ends_with(';'))
        else {
            continue;
        };
        if lines[at + open].trim_end().ends_with(';') {
            continue;
        }
        let end = format!("{indent}}}");
        if let Some(close) = lines[at + open..].iter().position(|l| *l == end) {
            let length = open + close + 1;
            if length > limit {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.push((name, at + 1, length));
            }
        }
    }
    out
}

/// The cap is 100 lines; none may come within 10 of it, so that a change
/// to a function has room without a split in the same commit.
const FUNCTION_LINES: usize = 90;

#[test]
fn no_function_is_over_100_lines() {
    let mut long = Vec::new();
    for (module, code) in modules() {
        for (name, line, length) in long_functions(&code, FUNCTION_LINES) {
            long.push(format!(
                "src/{}: {name} at line {line}, {length} lines",
                module.join("/")
            ));
        }
    }
    assert!(
        long.is_empty(),
        "functions over {FUNCTION_LINES} lines (split them):\n{}",
        long.join("\n")
    );
    let planted = format!(
        "fn short() {{\n}}\n    pub fn long() {{\n{}    }}\n",
        "        x;\n".repeat(120)
    );
    assert_eq!(
        long_functions(&planted, 100),
        vec![("long".to_string(), 3, 122)]
    );
}

/// Whether `code` calls the console's `say` or `warn` itself (by path or
/// by an import of them).
fn prints_directly(code: &str) -> bool {
    code.contains("console::say(")
        || code.contains("console::warn(")
        || code.lines().any(|l| {
            l.trim_start().starts_with("use crate::console::")
                && (l.contains("say") || l.contains("warn"))
        })
}

/// No `impl` block is over 600 lines: a type whose methods need more is
/// split by what they do, one file each (as dispatch and the GPU loads).
#[test]
fn no_impl_block_is_over_600_lines() {
    let mut long = Vec::new();
    for (module, code) in modules() {
        let mut start = None;
        for (n, line) in code.lines().enumerate() {
            if line.starts_with("impl") && !line.trim_end().ends_with(';') {
                start = Some(n);
            } else if line == "}"
                && let Some(from) = start.take()
                && n - from > 600
            {
                long.push(format!(
                    "{} line {}: {} lines",
                    module.join("/"),
                    from + 1,
                    n - from
                ));
            }
        }
    }
    assert!(long.is_empty(), "split these impl blocks: {long:?}");
}

/// Only the reporter speaks (docs/ARCHITECTURE.md "The order of one
/// tick"): every module of the library says its lines to a reporter —
/// the loop's phases, wake sources, launcher, ledger and notifier to
/// `Reporting`, which prints them. Only these reach the console: the
/// verbs (`commands`, each its own program), `scheduler/parts.rs` (the
/// reporter), `scheduler/startup.rs` (before the loop exists), and the
/// programs of their own (`simjob`, the supervisor's `daemon`).
#[test]
fn only_the_reporter_prints_the_loops_lines() {
    let speakers: &[&[&str]] = &[
        &["commands"],
        &["console"],
        &["main"],
        &["scheduler", "parts"],
        &["scheduler", "startup"],
        &["simjob"],
        &["process", "supervisor", "daemon"],
    ];
    let printing: Vec<String> = modules()
        .into_iter()
        .filter(|(module, _)| {
            // `src/main.rs` (the program) is the empty path.
            !module.is_empty()
                && !speakers
                    .iter()
                    .any(|s| module.len() >= s.len() && module[..s.len()] == **s)
        })
        .filter(|(_, code)| prints_directly(code))
        .map(|(module, _)| module.join("/"))
        .collect();
    assert!(
        printing.is_empty(),
        "these print directly instead of through a reporter: {printing:?}"
    );
    assert!(prints_directly("use crate::console::{say, warn};\n"));
    assert!(prints_directly("    crate::console::warn(&x);\n"));
    assert!(!prints_directly("crate::console::gpu_ids(&g, \",\")\n"));
}

/// docs/ARCHITECTURE.md names only files that exist: each row of its
/// file table (relative to `src/`), each `src/…` or `tests/…` path, and
/// each test it cites as `` `tests/it/F.rs`'s `NAME` `` is in that file (it
/// once cited a test of tests/it/slurm.rs as being in
/// src/launcher/slurm.rs).
#[test]
fn architecture_cites_files_and_tests_that_exist() {
    let text = std::fs::read_to_string("docs/ARCHITECTURE.md").unwrap();
    let mut named = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("| `") {
            let path = rest.split('`').next().unwrap_or("");
            if path.ends_with(".rs") || path.ends_with('/') {
                named.push(format!("src/{path}"));
            }
        }
    }
    for part in text.split('`').skip(1).step_by(2) {
        if part.starts_with("src/") || part.starts_with("tests/") {
            named.push(part.split([' ', ':']).next().unwrap().to_string());
        }
    }
    assert!(named.len() > 30, "{named:?}");
    for path in &named {
        assert!(
            Path::new(path).exists(),
            "docs/ARCHITECTURE.md names {path}, which is not there"
        );
    }
    let mut cited = 0;
    for (at, _) in text.match_indices("`'s `") {
        let file = text[..at].rsplit('`').next().unwrap();
        let name = text[at + 5..].split('`').next().unwrap();
        // A file is named from the root, from src/, or among the phases.
        let code = [
            file.to_string(),
            format!("src/{file}"),
            format!("src/scheduler/{file}"),
        ]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .unwrap_or_else(|| panic!("docs/ARCHITECTURE.md cites {file}, which is not there"));
        assert!(
            code.contains(&format!("fn {name}(")),
            "docs/ARCHITECTURE.md cites {name} in {file}, which has no such function"
        );
        cited += 1;
    }
    assert!(cited >= 1, "no test cited");
    // A black-box test named any other way (`slurm::NAME` reads as
    // src/launcher/slurm.rs) is a citation without its file.
    let mut tests = BTreeSet::new();
    for entry in std::fs::read_dir("tests/it").unwrap().flatten() {
        let code = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let mut lines = code.lines();
        while let Some(line) = lines.next() {
            if line.trim() == "#[test]" {
                let next = lines.next().unwrap_or("");
                if let Some(rest) = next.trim().strip_prefix("fn ") {
                    tests.insert(rest.split('(').next().unwrap().to_string());
                }
            }
        }
    }
    let parts: Vec<&str> = text.split('`').collect();
    for (i, part) in parts.iter().enumerate().skip(1).step_by(2) {
        let name = part.rsplit("::").next().unwrap();
        if tests.contains(name) {
            let before = parts[i - 1];
            assert!(
                before.ends_with("'s ") && parts[i - 2].starts_with("tests/it/"),
                "docs/ARCHITECTURE.md names the test {part} without its file (`tests/it/F.rs`'s `{name}`)"
            );
        }
    }
}
