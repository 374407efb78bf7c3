//! A whole jobs file parsed at once (docs/BEHAVIOUR.md "Identity"): its
//! lines parsed and hashed in stretches on several threads, then keyed in
//! one pass over the stretches' sorted hashes (a million lines take about
//! 0.4 s on two cores).

use super::identity::{LineHashes, Occurrences, count_repeats, key_text, sorted_hashes, without};
use super::{JobSpec, ParseError, claim_name, parse_line};
use rustc_hash::FxHashMap;

/// Parses every good line of a jobs file and collects the errors of the
/// bad ones, in line order. Keys are assigned over the good lines — the one
/// place the identity rule (docs/BEHAVIOUR.md "Identity") is applied.
pub fn parse_jobs_lenient(text: &str) -> (Vec<JobSpec>, Vec<ParseError>) {
    let threads = if text.len() < PARALLEL_PARSE_BYTES {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
    };
    parse_lenient_on(text, threads)
}

/// [`parse_jobs_lenient`] with the lines parsed and hashed on `threads`
/// threads: the same answer whatever their number.
pub(super) fn parse_lenient_on(text: &str, threads: usize) -> (Vec<JobSpec>, Vec<ParseError>) {
    let chunks = parse_chunks(text, threads);
    let lines: usize = chunks.iter().map(|c| c.specs.len()).sum();
    let legacy_differs = chunks.iter().any(|c| c.legacy_differs);
    let mut errors = Vec::new();
    let mut names: FxHashMap<String, usize> = FxHashMap::default();
    let mut jobs: Vec<JobSpec> = Vec::new();
    // The older rule counts from every line's hashes in one pass; else
    // each stretch's sorted hashes, with its first job's index, are merged.
    let mut hashes: Vec<LineHashes> = Vec::with_capacity(if legacy_differs { lines } else { 0 });
    let mut runs: Vec<(usize, Vec<(u64, u32)>)> = Vec::new();
    let mut first_line = 0;
    for mut chunk in chunks {
        errors.extend(chunk.errors.into_iter().map(|mut e| {
            e.line += first_line;
            e
        }));
        // A line whose name an earlier line has is an error, and takes no
        // occurrence of its command.
        for spec in &mut chunk.specs {
            spec.line += first_line;
        }
        let mut clashes = Vec::new();
        for &(i, raw) in &chunk.named {
            if let Err(e) = claim_name(&mut names, &chunk.specs[i], raw) {
                errors.push(e);
                clashes.push(i as u32);
            }
        }
        if !clashes.is_empty() {
            chunk.sorted = without(chunk.sorted, &clashes);
        }
        for &i in clashes.iter().rev() {
            chunk.specs.remove(i as usize);
            chunk.hashes.remove(i as usize);
        }
        if legacy_differs {
            hashes.append(&mut chunk.hashes);
        } else {
            runs.push((jobs.len(), chunk.sorted));
        }
        first_line += chunk.lines;
        // The first stretch's lines become the queue; the others are
        // moved after them (a large block grows in place).
        if jobs.is_empty() {
            jobs = chunk.specs;
            jobs.reserve(lines.saturating_sub(jobs.len()));
        } else {
            jobs.append(&mut chunk.specs);
        }
    }
    if legacy_differs {
        // Some line's key differs under the older rule: count both rules
        // in one pass, in order.
        let mut occurrences = Occurrences::with_capacity(lines);
        for (spec, hashes) in jobs.iter_mut().zip(&hashes) {
            let (key, legacy_key) = occurrences.keys(*hashes);
            spec.key = key;
            if legacy_key.is_some() {
                spec.rare_mut().legacy_key = legacy_key;
            }
        }
    } else {
        count_repeats(&mut jobs, runs);
    }
    // Parse errors and name clashes, in line order.
    errors.sort_by_key(|e| e.line);
    (jobs, errors)
}

/// One stretch of a jobs file's lines, parsed and hashed: its specs with
/// their line numbers counted from the stretch's start, each keyed as its
/// command's first occurrence, with their hashes (and the named lines'
/// text, for a clash); its bad lines likewise; how many lines it has; and whether a
/// line's key differs under the older rule.
struct Chunk<'a> {
    specs: Vec<JobSpec>,
    hashes: Vec<LineHashes>,
    /// `hashes` as [`sorted_hashes`] gives them (empty when
    /// `legacy_differs`: the older rule counts in one pass instead).
    sorted: Vec<(u64, u32)>,
    /// The lines with a `name=`: index in `specs` and text (for a clash).
    named: Vec<(usize, &'a str)>,
    errors: Vec<ParseError>,
    lines: usize,
    legacy_differs: bool,
}

/// Text below which a jobs file is parsed on one thread.
pub(super) const PARALLEL_PARSE_BYTES: usize = 1 << 20;

/// Parses and hashes `text`'s lines in stretches on `threads` threads:
/// per line, the work is independent;
/// repeated commands get their counts afterwards ([`count_repeats`]).
fn parse_chunks(text: &str, threads: usize) -> Vec<Chunk<'_>> {
    let mut stretches = Vec::with_capacity(threads);
    let mut rest = text;
    for left in (1..=threads).rev() {
        let cut = rest.len() / left;
        // Cut after a line's end.
        let cut = match rest.as_bytes()[cut..].iter().position(|&b| b == b'\n') {
            Some(at) if left > 1 => cut + at + 1,
            _ => rest.len(),
        };
        let (stretch, tail) = rest.split_at(cut);
        stretches.push(stretch);
        rest = tail;
    }
    if stretches.len() == 1 {
        return vec![parse_stretch(text)];
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = stretches
            .into_iter()
            .map(|stretch| scope.spawn(move || parse_stretch(stretch)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a parse thread does not panic"))
            .collect()
    })
}

/// Parses and hashes the lines of `stretch`, numbered from 1.
fn parse_stretch(stretch: &str) -> Chunk<'_> {
    let mut chunk = Chunk {
        specs: Vec::new(),
        hashes: Vec::new(),
        sorted: Vec::new(),
        named: Vec::new(),
        errors: Vec::new(),
        lines: 0,
        legacy_differs: false,
    };
    // About one job per 40 bytes of a sweep's lines.
    let lines = stretch.len() / 40;
    chunk.specs.reserve(lines);
    chunk.hashes.reserve(lines);
    for (index, raw) in stretch.lines().enumerate() {
        chunk.lines = index + 1;
        match parse_line(raw, index + 1) {
            Ok(Some(mut spec)) => {
                let hashes = LineHashes::of(&spec.command);
                chunk.legacy_differs |= hashes.legacy != hashes.hash;
                spec.key = key_text(hashes.hash, 0);
                if spec.name().is_some() {
                    chunk.named.push((chunk.specs.len(), raw));
                }
                chunk.specs.push(spec);
                chunk.hashes.push(hashes);
            }
            Ok(None) => {}
            Err(e) => chunk.errors.push(e),
        }
    }
    // Sorted here, on this stretch's thread: the merge of the stretches'
    // runs is then one pass each. Unused when some stretch's keys differ
    // under the older rule (`legacy_differs` of any chunk): that is seen
    // only once all are parsed, and this stretch alone may not know it.
    if !chunk.legacy_differs {
        chunk.sorted = sorted_hashes(&chunk.hashes);
    }
    chunk
}
