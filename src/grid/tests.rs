use super::*;

fn values(text: &str) -> Vec<String> {
    parse_values(text).unwrap()
}

#[test]
fn values_parse_as_written() {
    let table: [(&str, &[&str]); 12] = [
        ("a,b,c", &["a", "b", "c"]),
        ("resnet18", &["resnet18"]),
        ("1..5", &["1", "2", "3", "4", "5"]),
        ("5..3", &["5", "4", "3"]),
        ("-1..1", &["-1", "0", "1"]),
        ("1..10:3", &["1", "4", "7", "10"]),
        ("0.1..0.5:0.1", &["0.1", "0.2", "0.3", "0.4", "0.5"]),
        ("0.1..0.3:0.05", &["0.10", "0.15", "0.20", "0.25", "0.30"]),
        ("1..2:0.5", &["1.0", "1.5", "2.0"]),
        ("1e-4,3e-4", &["1e-4", "3e-4"]),
        // Scientific notation in a range, as learning rates are written.
        ("1e-3..3e-3:1e-3", &["0.001", "0.002", "0.003"]),
        ("1e2..3e2:1E2", &["100", "200", "300"]),
    ];
    for (text, expected) in table {
        assert_eq!(values(text), expected, "{text}");
    }
    // No floating-point noise however long the range.
    let many = values("0.0..1.0:0.1");
    assert_eq!(many.len(), 11);
    assert!(many.iter().all(|v| v.len() == 3), "{many:?}");
}

#[test]
fn bad_values_name_the_problem() {
    for (text, error) in [
        ("a,,b", "empty value"),
        ("1..x", "\"x\" is not a number"),
        ("0.1..0.5", "needs a step"),
        ("1..5:0", "the step is 0"),
        ("1..5:-1", "use a positive step"),
        ("0..100000000", "over 1000000"),
    ] {
        let e = parse_values(text).unwrap_err();
        assert!(e.contains(error), "{text}: {e}");
    }
    assert!(parse_axis("lr").unwrap_err().contains("KEY=VALUES"));
    assert!(
        parse_axis("1lr=1")
            .unwrap_err()
            .contains("not a placeholder name")
    );
}

fn axes(args: &[&str]) -> Vec<Axis> {
    args.iter().map(|a| parse_axis(a).unwrap()).collect()
}

#[test]
fn a_product_varies_the_last_key_fastest_and_keeps_attributes() {
    let lines = expand(
        "[name=lr{lr}-s{seed} vram=8G] python train.py --lr {lr} --seed {seed}",
        &axes(&["lr=0.1,0.01", "seed=1..3"]),
        Combine::Product,
        None,
    )
    .unwrap();
    assert_eq!(
        lines,
        vec![
            "[name=lr0.1-s1 vram=8G] python train.py --lr 0.1 --seed 1",
            "[name=lr0.1-s2 vram=8G] python train.py --lr 0.1 --seed 2",
            "[name=lr0.1-s3 vram=8G] python train.py --lr 0.1 --seed 3",
            "[name=lr0.01-s1 vram=8G] python train.py --lr 0.01 --seed 1",
            "[name=lr0.01-s2 vram=8G] python train.py --lr 0.01 --seed 2",
            "[name=lr0.01-s3 vram=8G] python train.py --lr 0.01 --seed 3",
        ]
    );
}

#[test]
fn zip_pairs_and_shell_braces_are_left_alone() {
    let lines = expand(
        "python t.py --m {model} --bs {bs} --out ${HOME}/{model} {not a key}",
        &axes(&["model=a,b", "bs=32,64"]),
        Combine::Zip,
        None,
    )
    .unwrap();
    assert_eq!(
        lines,
        vec![
            "python t.py --m a --bs 32 --out ${HOME}/a {not a key}",
            "python t.py --m b --bs 64 --out ${HOME}/b {not a key}",
        ]
    );
}

#[test]
fn a_sample_is_distinct_and_reproducible() {
    let grid = axes(&["a=1..10", "b=1..10", "c=1..10"]);
    let one = expand("x {a} {b} {c}", &grid, Combine::Product, Some((7, 42))).unwrap();
    let again = expand("x {a} {b} {c}", &grid, Combine::Product, Some((7, 42))).unwrap();
    let other = expand("x {a} {b} {c}", &grid, Combine::Product, Some((7, 43))).unwrap();
    assert_eq!(one, again);
    assert_ne!(one, other);
    let distinct: std::collections::BTreeSet<&String> = one.iter().collect();
    assert_eq!(distinct.len(), 7);
    // The whole grid, sampled whole, is the grid.
    let all = expand("x {a}", &axes(&["a=1..4"]), Combine::Product, Some((4, 1))).unwrap();
    assert_eq!(all, vec!["x 1", "x 2", "x 3", "x 4"]);
    // Sampling a grid too large to list is fine.
    let huge = axes(&["a=1..1000", "b=1..1000", "c=1..1000"]);
    assert_eq!(
        expand("{a} {b} {c}", &huge, Combine::Product, Some((3, 0)))
            .unwrap()
            .len(),
        3
    );
    assert!(
        expand("{a} {b} {c}", &huge, Combine::Product, None)
            .unwrap_err()
            .contains("use --sample")
    );
}

#[test]
fn mistakes_are_named() {
    let cases: [(&str, &[&str], Combine, &str); 4] = [
        (
            "x {lr} {seed}",
            &["lr=1,2"],
            Combine::Product,
            "{seed} has no values",
        ),
        (
            "x {lr}",
            &["lr=1,2", "seed=1..3"],
            Combine::Product,
            "seed is not used",
        ),
        (
            "x {a} {b}",
            &["a=1,2", "b=1..3"],
            Combine::Zip,
            "a has 2, b has 3",
        ),
        (
            "x {a}",
            &["a=1", "a=2"],
            Combine::Product,
            "a is given twice",
        ),
    ];
    for (template, args, combine, error) in cases {
        let e = expand(template, &axes(args), combine, None).unwrap_err();
        assert!(e.contains(error), "{template}: {e}");
    }
    let e = expand("x {a}", &axes(&["a=1,2"]), Combine::Product, Some((3, 0))).unwrap_err();
    assert!(
        e.contains("--sample 3 is more than the 2 combinations"),
        "{e}"
    );
}

#[test]
fn values_are_quoted_for_where_they_stand_and_read_back_as_written() {
    let n = parse_axis("n=a b,c;d,it's,plain").unwrap();
    let lines = |template: &str| {
        expand(template, std::slice::from_ref(&n), Combine::Product, None).unwrap()
    };
    // Outside quotes, in '…' and in "…": the shell reads each value back
    // as one word, as written.
    for template in [
        "python t.py --name {n}",
        "sh -c 'echo {n}'",
        "python t.py --name \"{n}\"",
    ] {
        for (line, value) in lines(template).iter().zip(&n.values) {
            let words = shlex::split(line).unwrap_or_else(|| panic!("{line}"));
            let last = words.last().unwrap();
            assert!(
                last.ends_with(value.as_str()),
                "{template}: {line} → {words:?}"
            );
            if template.starts_with("python") {
                assert_eq!(last, value, "{line}");
            }
        }
    }
    assert_eq!(
        lines("python t.py --name {n}")[0],
        "python t.py --name 'a b'"
    );
    assert_eq!(
        lines("python t.py --name {n}")[3],
        "python t.py --name plain"
    );
    // The attribute block and `{n:raw}` take the value as written.
    assert_eq!(
        lines("[name=x-{n}] echo {n:raw}")[1],
        "[name=x-c;d] echo c;d"
    );
}

#[test]
fn the_widest_ranges_are_refused_not_a_panic() {
    for text in [
        "9223372036854775807..-9223372036854775808",
        "-9223372036854775808..9223372036854775807",
        "0..18446744073709551615",
    ] {
        let error = parse_values(text).unwrap_err();
        assert!(
            error.contains("over 1000000") || error.contains("bad range"),
            "{text}: {error}"
        );
    }
}
