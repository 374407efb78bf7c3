//! `gpusched grid TEMPLATE KEY=VALUES… [--zip] [--sample N [--seed S]]
//! [--group NAME [--limit N]] [--append FILE]` (docs/BEHAVIOUR.md
//! "Sweeps"): the lines of a sweep ([`crate::grid`]), each checked with
//! the scheduler's own parser, printed or appended to a jobs file in one
//! write.

use crate::cli::GridArgs;
use crate::error::Error;
use crate::grid::{self, Combine};
use crate::jobspec;

/// Prints or appends the sweep's lines.
///
/// Errors ([`Error::Usage`], exit 2, nothing written): a bad `KEY=VALUES`,
/// a placeholder without values or values without a placeholder, unequal
/// `--zip` lengths, a line that does not parse (naming it), a name used
/// twice; with `--append`, a jobs file that does not parse.
pub fn run(args: &GridArgs) -> anyhow::Result<i32> {
    let axes = args
        .axes
        .iter()
        .map(|a| grid::parse_axis(a))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::Usage)?;
    let template = with_group(&args.template, args.group.as_deref(), args.limit);
    let combine = if args.zip {
        Combine::Zip
    } else {
        Combine::Product
    };
    let lines = grid::expand(
        &template,
        &axes,
        combine,
        args.sample.map(|n| (n, args.seed)),
    )
    .map_err(Error::Usage)?;
    for (i, line) in lines.iter().enumerate() {
        jobspec::parse_line(line, i + 1)
            .map_err(|e| Error::Usage(format!("line {} of the grid does not parse: {e}", i + 1)))?;
    }
    jobspec::parse_jobs(&lines.join("\n"))
        .map_err(|e| Error::Usage(format!("the grid's lines do not go together: {e}")))?;
    let Some(file) = &args.append else {
        let mut out = lines.join("\n");
        out.push('\n');
        std::io::Write::write_all(&mut std::io::stdout(), out.as_bytes())?;
        return Ok(0);
    };
    crate::edit::append_lines(file, &lines, |_| Ok(()))?;
    eprintln!(
        "appended {} to {}",
        crate::words::count(lines.len(), "line"),
        file.display()
    );
    Ok(0)
}

/// `template` with `group=NAME` (and `limit=N`) added to its attribute
/// block, or in a block of their own.
fn with_group(template: &str, group: Option<&str>, limit: Option<u32>) -> String {
    let Some(group) = group else {
        return template.to_string();
    };
    let mut attributes = format!("group={group}");
    if let Some(limit) = limit {
        attributes.push_str(&format!(" limit={limit}"));
    }
    let trimmed = template.trim_start();
    match trimmed.strip_prefix('[') {
        Some(rest) if rest.contains(']') => format!("[{attributes} {rest}"),
        _ => format!("[{attributes}] {trimmed}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_group_joins_the_attribute_block() {
        assert_eq!(
            with_group("[vram=8G] python t.py", Some("sweep"), Some(2)),
            "[group=sweep limit=2 vram=8G] python t.py"
        );
        assert_eq!(
            with_group("python t.py", Some("sweep"), None),
            "[group=sweep] python t.py"
        );
        assert_eq!(with_group("python t.py", None, None), "python t.py");
    }
}
