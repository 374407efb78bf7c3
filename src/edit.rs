//! `gpusched add` and `gpusched cancel`: the user's tools for editing the
//! user's jobs file (the scheduler itself never writes it, SPEC §5). Both
//! take an exclusive `flock` on the file so that they never interleave with
//! each other; `add` appends (as `echo … >> jobs.txt` does), `cancel`
//! rewrites through a temp file and `rename`, keeping the file's mode.

use crate::error::Error;
use crate::jobspec::{self, JobSpec};
use anyhow::Context;
use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What `gpusched add` appends: attributes and a command as argv.
#[derive(Debug, Clone, Default)]
pub struct NewJob {
    /// `vram=` as the user wrote it (validated).
    pub vram: Option<String>,
    /// `gpus=`.
    pub gpus: Option<u32>,
    /// `timeout=` as written (validated).
    pub timeout: Option<String>,
    /// `retries=`.
    pub retries: Option<u32>,
    /// The command's words; each is shell-quoted as needed.
    pub argv: Vec<String>,
}

/// The jobs-file line for `job`: attribute block, then the words quoted so
/// that `/bin/sh -c` sees exactly `argv`.
///
/// Errors ([`Error::Usage`]): a bad attribute value, an empty command, or a
/// word with a newline or NUL (a jobs-file line cannot hold it).
pub fn job_line(job: &NewJob) -> Result<String, Error> {
    if job.argv.is_empty() {
        return Err(Error::Usage(
            "no command given: gpusched add [OPTIONS] -- COMMAND [ARGS...]".into(),
        ));
    }
    let mut words = Vec::new();
    for word in &job.argv {
        if word.contains(['\n', '\r']) {
            return Err(Error::Usage(format!(
                "the argument {word:?} contains a line break, which a jobs-file line cannot hold"
            )));
        }
        let quoted = shlex::try_quote(word)
            .map_err(|_| Error::Usage(format!("the argument {word:?} contains a NUL byte")))?;
        words.push(quoted.into_owned());
    }
    let command = words.join(" ");
    let mut attributes = Vec::new();
    if let Some(vram) = &job.vram {
        jobspec::parse_vram_mib(vram).map_err(Error::Usage)?;
        attributes.push(format!("vram={vram}"));
    }
    if let Some(gpus) = job.gpus {
        attributes.push(format!("gpus={gpus}"));
    }
    if let Some(timeout) = &job.timeout {
        jobspec::parse_duration_s(timeout).map_err(Error::Usage)?;
        attributes.push(format!("timeout={timeout}"));
    }
    if let Some(retries) = job.retries {
        attributes.push(format!("retries={retries}"));
    }
    let line = if attributes.is_empty() {
        command.clone()
    } else {
        format!("[{}] {command}", attributes.join(" "))
    };
    // The same parser as the scheduler's has the last word.
    match jobspec::parse_line(&line, 1) {
        Ok(Some(spec)) if spec.command == command => Ok(line),
        Ok(_) => Err(Error::Usage(format!(
            "the command would not be read back as written: {line}"
        ))),
        Err(e) => Err(Error::Usage(e.reason)),
    }
}

/// Opens `path` (creating it when `create`), locks it exclusively, and
/// makes sure the lock is on the file the path names now (another tool may
/// have renamed a new file over it while we waited).
fn lock(path: &Path, create: bool) -> anyhow::Result<Flock<File>> {
    loop {
        let file = File::options()
            .read(true)
            .append(true)
            .create(create)
            .open(path)
            .map_err(|e| {
                Error::JobsFile(format!("cannot open jobs file {}: {e}", path.display()))
            })?;
        let locked = Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, e)| anyhow::anyhow!("cannot lock {}: {e}", path.display()))?;
        let same = std::fs::metadata(path)
            .is_ok_and(|m| m.ino() == locked.metadata().map_or(0, |l| l.ino()));
        if same {
            return Ok(locked);
        }
    }
}

/// Appends `job` to the jobs file at `path` (created if missing) under an
/// exclusive lock, adding a missing final newline first. Returns the new
/// job's key and its line.
pub fn add(path: &Path, job: &NewJob) -> anyhow::Result<(String, String)> {
    let line = job_line(job)?;
    let mut file = lock(path, true)?;
    let mut raw = Vec::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_end(&mut raw)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let text =
        jobspec::decode(raw).map_err(|e| Error::JobsFile(format!("{}: {e}", path.display())))?;
    let mut bytes = Vec::new();
    if !text.is_empty() && !text.ends_with('\n') {
        bytes.push(b'\n');
    }
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    // The new job's key is what the parser gives the last line of the file
    // as it will be.
    let (specs, errors) = jobspec::parse_jobs_lenient(&(text + std::str::from_utf8(&bytes)?));
    let key = specs
        .last()
        .map(|s| s.key.clone())
        .context("the new line did not parse")?;
    file.write_all(&bytes)
        .and_then(|_| file.sync_data())
        .with_context(|| format!("cannot append to {}", path.display()))?;
    if let Some(e) = errors.first() {
        eprintln!(
            "gpusched: note: {} has an error ({e}); a running scheduler keeps its last good queue until it is fixed",
            path.display()
        );
    }
    Ok((key, line))
}

/// What `gpusched cancel` names: a display number or a key (or a unique
/// prefix of one).
pub enum Target {
    /// `job 7`.
    Number(u32),
    /// `a1b2c3d4e5f6#0`, or a prefix such as `a1b2c3`.
    Key(String),
}

impl Target {
    /// Reads `7` as a number, anything else as a key or key prefix.
    pub fn parse(text: &str) -> Target {
        match text.trim().trim_start_matches("job").trim().parse::<u32>() {
            Ok(no) => Target::Number(no),
            Err(_) => Target::Key(text.trim().to_string()),
        }
    }
}

/// The key the journal gave display number `no`, read without changing the
/// journal.
fn key_of_number(journal: &Path, no: u32) -> anyhow::Result<Option<String>> {
    let file = match File::open(journal) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", journal.display())),
    };
    for line in std::io::BufRead::lines(std::io::BufReader::new(file)) {
        let Ok(line) = line else { continue };
        let Ok(value) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if value["event"] == "seen" && value["no"] == no {
            return Ok(value["key"].as_str().map(str::to_string));
        }
    }
    Ok(None)
}

/// The line text with the `cancel` flag added to its attribute block.
fn with_cancel(line: &str) -> String {
    let indent = &line[..line.len() - line.trim_start().len()];
    let trimmed = line.trim_start();
    match trimmed
        .strip_prefix('[')
        .and_then(|rest| rest.find(']').map(|close| (rest, close)))
    {
        Some((rest, close)) => {
            let block = rest[..close].trim();
            let sep = if block.is_empty() { "" } else { " " };
            format!("{indent}[{block}{sep}cancel]{}", &rest[close + 1..])
        }
        None => format!("{indent}[cancel] {trimmed}"),
    }
}

/// Adds the `cancel` flag to the line of the job `target` names (SPEC §6),
/// atomically (temp file + rename, keeping the file's mode). Returns the
/// job's key and a message for the user.
///
/// Errors ([`Error::Usage`]): the file does not parse, the job is not in it,
/// or a key prefix matches several jobs.
pub fn cancel(path: &Path, log_dir: &Path, target: &Target) -> anyhow::Result<(String, String)> {
    let mut file = lock(path, false)?;
    let mut raw = Vec::new();
    file.read_to_end(&mut raw)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let text =
        jobspec::decode(raw).map_err(|e| Error::JobsFile(format!("{}: {e}", path.display())))?;
    let specs = jobspec::parse_jobs(&text).map_err(|e| {
        Error::JobsFile(format!(
            "{}: {e} — fix it first, so the job can be found",
            path.display()
        ))
    })?;
    let spec: &JobSpec = match target {
        Target::Number(no) => {
            let key = key_of_number(&log_dir.join("journal.jsonl"), *no)?.ok_or_else(|| {
                Error::Usage(format!(
                    "no job {no} in {} (is --log-dir right?)",
                    log_dir.join("journal.jsonl").display()
                ))
            })?;
            specs
                .iter()
                .find(|s| s.key == key || s.legacy_key().map(String::as_str) == Some(key.as_str()))
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "job {no} ({key}) has no line in {} any more",
                        path.display()
                    ))
                })?
        }
        Target::Key(name) if specs.iter().any(|s| s.name() == Some(name.as_str())) => specs
            .iter()
            .find(|s| s.name() == Some(name.as_str()))
            .expect("found above"),
        Target::Key(prefix) => {
            let matches: Vec<&JobSpec> = specs
                .iter()
                .filter(|s| {
                    s.key.starts_with(prefix.as_str())
                        || s.legacy_key()
                            .is_some_and(|k| k.starts_with(prefix.as_str()))
                })
                .collect();
            match matches.as_slice() {
                [one] => one,
                [] => {
                    return Err(Error::Usage(format!(
                        "no job with key {prefix} in {}",
                        path.display()
                    ))
                    .into());
                }
                many => {
                    return Err(Error::Usage(format!(
                        "{prefix} is ambiguous in {}: it matches {} (lines {})",
                        path.display(),
                        many.iter()
                            .map(|s| s.key.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                        many.iter()
                            .map(|s| s.line.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                    .into());
                }
            }
        }
    };
    if spec.cancel {
        return Ok((
            spec.key.clone(),
            format!(
                "{} (line {}) already has the cancel flag",
                spec.key, spec.line
            ),
        ));
    }
    let mut out = String::with_capacity(text.len() + 9);
    for (i, chunk) in text.split_inclusive('\n').enumerate() {
        if i + 1 == spec.line {
            let body = chunk.trim_end_matches(['\n', '\r']);
            out.push_str(&with_cancel(body));
            out.push_str(&chunk[body.len()..]);
        } else {
            out.push_str(chunk);
        }
    }
    let options = crate::files::AtomicOptions {
        mode: Some(file.metadata()?.permissions()),
        sync: true,
    };
    crate::files::write_atomic_with(path, out.as_bytes(), &options)
        .with_context(|| format!("cannot replace {}", path.display()))?;
    Ok((
        spec.key.clone(),
        format!(
            "marked {} (line {}) with cancel: a running scheduler stops it if it runs and never starts it otherwise",
            spec.key, spec.line
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> NewJob {
        NewJob {
            argv: words.iter().map(|w| w.to_string()).collect(),
            ..NewJob::default()
        }
    }

    #[test]
    fn quotes_words_for_the_shell() {
        let line = job_line(&argv(&[
            "python", "train.py", "--name", "my run", "it's", "$HOME", "a\"b",
        ]))
        .unwrap();
        assert_eq!(
            line,
            r#"python train.py --name 'my run' "it's" '$HOME' 'a"b'"#
        );
        // What sh -c sees is exactly the argv.
        let out = std::process::Command::new("/bin/sh")
            .args([
                "-c",
                &format!("printf '%s\\n' {}", &line["python ".len()..]),
            ])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "train.py\n--name\nmy run\nit's\n$HOME\na\"b\n"
        );
    }

    #[test]
    fn attributes_are_validated() {
        let mut job = argv(&["true"]);
        job.vram = Some("8G".into());
        job.gpus = Some(2);
        job.timeout = Some("2h".into());
        job.retries = Some(1);
        assert_eq!(
            job_line(&job).unwrap(),
            "[vram=8G gpus=2 timeout=2h retries=1] true"
        );
        job.vram = Some("eight".into());
        assert!(
            job_line(&job)
                .unwrap_err()
                .to_string()
                .contains("bad vram value 'eight'")
        );
        job.vram = None;
        job.gpus = Some(0);
        assert!(
            job_line(&job)
                .unwrap_err()
                .to_string()
                .contains("bad gpus value")
        );
        assert!(job_line(&argv(&[])).is_err());
        assert!(job_line(&argv(&["echo", "a\nb"])).is_err());
    }

    #[test]
    fn leading_hash_or_bracket_is_quoted_not_a_comment() {
        assert_eq!(
            job_line(&argv(&["#notacomment"])).unwrap(),
            "'#notacomment'"
        );
        assert_eq!(
            job_line(&argv(&["[", "-f", "x", "]"])).unwrap(),
            "'[' -f x ]"
        );
    }

    #[test]
    fn cancel_flag_goes_into_the_block() {
        assert_eq!(with_cancel("python a.py"), "[cancel] python a.py");
        assert_eq!(
            with_cancel("  [vram=8G] python a.py"),
            "  [vram=8G cancel] python a.py"
        );
        assert_eq!(with_cancel("[] python a.py"), "[cancel] python a.py");
    }

    #[test]
    fn add_appends_with_a_final_newline_and_counts_occurrences() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.txt");
        std::fs::write(&path, "echo hi").unwrap();
        let (key, line) = add(&path, &argv(&["echo", "hi"])).unwrap();
        assert_eq!(line, "echo hi");
        assert!(key.ends_with("#1"), "{key}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "echo hi\necho hi\n"
        );
        let parsed = jobspec::parse_jobs(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(parsed[1].key, key);
    }

    #[test]
    fn cancel_by_key_prefix_keeps_mode_and_other_lines() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.txt");
        std::fs::write(&path, "# header\r\necho a\n[vram=1G] echo b\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let key = jobspec::parse_jobs("[vram=1G] echo b").unwrap()[0]
            .key
            .clone();
        cancel(&path, dir.path(), &Target::Key(key[..8].to_string())).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "# header\r\necho a\n[vram=1G cancel] echo b\n"
        );
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o640
        );
        let again = cancel(&path, dir.path(), &Target::Key(key.clone())).unwrap();
        assert!(again.1.contains("already"));
        let missing = cancel(&path, dir.path(), &Target::Key("ffffffff".into())).unwrap_err();
        assert!(missing.to_string().contains("no job with key"), "{missing}");
        let none = cancel(&path, dir.path(), &Target::Number(3)).unwrap_err();
        assert!(none.to_string().contains("no job 3"), "{none}");
    }

    #[test]
    fn ambiguous_prefix_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.txt");
        std::fs::write(&path, "echo a\necho a\n").unwrap();
        let hash = jobspec::command_hash("echo a");
        let err = cancel(&path, dir.path(), &Target::Key(hash)).unwrap_err();
        assert!(err.to_string().contains("ambiguous"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "echo a\necho a\n");
    }
}
