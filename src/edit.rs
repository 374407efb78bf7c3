//! `gpusched add` and `gpusched grid --append`: the only verbs that write
//! the user's jobs file (the scheduler itself never does). They only
//! append, as `echo … >> jobs.txt` does, under an exclusive `flock` so
//! that two appends never interleave;
//! an append never loses another's concurrent append. (`gpusched cancel`
//! journals instead of editing the file: docs/BEHAVIOUR.md "Cancel".)

#![expect(
    clippy::disallowed_methods,
    reason = "the caller's own jobs file, checked on the open descriptor"
)]

use crate::error::Error;
use crate::jobspec;
use crate::policy::dependencies::{self, KnownJobs};
use anyhow::Context;
use nix::fcntl::Flock;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// What `gpusched add` appends: attributes and a command as argv.
#[derive(Debug, Clone, Default)]
pub struct NewJob {
    /// Jobs-file attributes by name as written (`vram`, `8G`), a bare flag
    /// with no value; any attribute of [`jobspec::ATTRIBUTES`], each
    /// checked by that table's own parser.
    pub attributes: Vec<(String, Option<String>)>,
    /// `argv` is one shell command line, taken as written (not quoted).
    pub shell: bool,
    /// The command's words; each is shell-quoted as needed.
    pub argv: Vec<String>,
    /// `cwd=`: the absolute directory it runs in.
    pub cwd: Option<std::path::PathBuf>,
    /// `env=`: the id of the environment saved for it
    /// ([`crate::saved_env`]).
    pub env: Option<String>,
}

impl NewJob {
    /// The value given for attribute `name`, if any.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }
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
    if job.shell && job.argv.len() != 1 {
        return Err(Error::Usage(
            "--shell takes the command as one argument: gpusched add --shell 'python t.py > out.txt'"
                .into(),
        ));
    }
    for word in &job.argv {
        if word.contains(['\n', '\r']) {
            return Err(Error::Usage(format!(
                "the argument {word:?} contains a line break, which a jobs-file line cannot hold"
            )));
        }
        // Also with --shell (and MCP's add_job), which takes the text as
        // it is: a NUL byte would reach the jobs file.
        if word.contains('\0') {
            return Err(Error::Usage(format!(
                "the argument {word:?} contains a NUL byte, which a jobs-file line cannot hold"
            )));
        }
        if job.shell {
            words.push(word.trim().to_string());
            continue;
        }
        let quoted = shlex::try_quote(word)
            .map_err(|_| Error::Usage(format!("the argument {word:?} contains a NUL byte")))?;
        words.push(quoted.into_owned());
    }
    let command = words.join(" ");
    let mut attributes = attribute_block(&job.attributes)?;
    if let Some(dir) = &job.cwd {
        let value = jobspec::encode_cwd(dir)
            .map_err(|e| Error::Usage(format!("cannot write the directory as cwd=: {e}")))?;
        attributes.push(format!("cwd={value}"));
    }
    if let Some(id) = &job.env {
        attributes.push(format!("env={id}"));
    }
    let line = if attributes.is_empty() {
        command.clone()
    } else {
        format!("[{}] {command}", attributes.join(" "))
    };
    // The same parser as the scheduler's has the last word.
    match jobspec::parse_line(&line, 1) {
        Ok(Some(spec)) if *spec.command == *command => Ok(line),
        Ok(_) => Err(Error::Usage(format!(
            "the command would not be read back as written: {line}"
        ))),
        Err(e) => Err(Error::Usage(e.reason)),
    }
}

/// The attribute block's items for `given` (name, value), in the order of
/// [`jobspec::ATTRIBUTES`]: each name must be an attribute of the table,
/// a flag given without a value and any other with one, and each item is
/// checked by the table's own parser (docs/BEHAVIOUR.md "Jobs file").
///
/// Errors ([`Error::Usage`]): an unknown attribute, a missing or extra
/// value, or a value the parser refuses (its own words).
fn attribute_block(given: &[(String, Option<String>)]) -> Result<Vec<String>, Error> {
    let mut items = Vec::new();
    for attribute in jobspec::ATTRIBUTES {
        for (_, value) in given.iter().filter(|(n, _)| n == attribute.name) {
            let item = match (attribute.is_flag(), value) {
                (true, None) => attribute.name.to_string(),
                (false, Some(v))
                    if !v.is_empty() && !v.contains(char::is_whitespace) && !v.contains(']') =>
                {
                    format!("{}={v}", attribute.name)
                }
                (false, Some(v)) => {
                    return Err(Error::Usage(format!(
                        "{}={v:?}: a value in a jobs-file attribute cannot be empty or hold spaces or ']'",
                        attribute.name
                    )));
                }
                (true, Some(_)) => {
                    return Err(Error::Usage(format!("{} takes no value", attribute.name)));
                }
                (false, None) => {
                    return Err(Error::Usage(format!("{} needs a value", attribute.shown)));
                }
            };
            jobspec::parse_line(&format!("[{item}] true"), 1)
                .map_err(|e| Error::Usage(e.reason))?;
            items.push(item);
        }
    }
    if let Some((unknown, _)) = given.iter().find(|(n, _)| jobspec::attribute(n).is_none()) {
        return Err(Error::Usage(format!(
            "'{unknown}' is not a jobs-file attribute (they are listed at the end of gpusched --help)"
        )));
    }
    Ok(items)
}

/// Opens `path` (creating it when `create`), locks it exclusively, and
/// makes sure the lock is on the file the path names now (another tool may
/// have renamed a new file over it while we waited).
/// Refuses a jobs file that is not a regular file of this process's
/// user, checked on the open descriptor (docs/SECURITY.md "Every verb's
/// trust mode"): a user's `add` in a shared folder must never append
/// their command, secrets included, to a file someone else planted there.
///
/// Errors: [`Error::Usage`] naming the owner.
fn check_own_file(file: &File, path: &Path) -> Result<(), Error> {
    let meta = file
        .metadata()
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.is_file() {
        return Err(Error::Usage(format!(
            "the jobs file {} is not a regular file; nothing added",
            path.display()
        )));
    }
    if meta.uid() != me {
        return Err(Error::Usage(format!(
            "the jobs file {} belongs to {}, not to you ({}): gpusched adds only to jobs files of your own; nothing added (give --file FILE of yours)",
            path.display(),
            crate::files::user_name(meta.uid()),
            crate::files::user_name(me)
        )));
    }
    Ok(())
}

fn lock(path: &Path, create: bool) -> anyhow::Result<Flock<File>> {
    loop {
        let file = File::options()
            .read(true)
            .append(true)
            .create(create)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| {
                Error::JobsFile(format!("cannot open jobs file {}: {e}", path.display()))
            })?;
        check_own_file(&file, path)?;
        let locked = crate::lockfile::lock_exclusive(file, path)?;
        // The jobs file may be a symbolic link: compare with the file it
        // names now (unlike the ledger's lock, which never follows one).
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
///
/// Errors: the file does not parse as it is ([`Error::JobsFile`]), or the
/// new line would not (a name the file uses, an `after=` that resolves to
/// nothing given the journal's jobs `known`) ([`Error::Usage`]); nothing is
/// appended then.
pub fn add(path: &Path, job: &NewJob, known: &KnownJobs) -> anyhow::Result<(String, String)> {
    let line = job_line(job)?;
    let specs = append_lines(path, std::slice::from_ref(&line), |specs| {
        if job.attribute("after").is_none() {
            Ok(())
        } else {
            check_after(specs, known)
        }
    })?;
    let key = specs
        .last()
        .map(|s| s.key.to_string())
        .context("the new line did not parse")?;
    Ok((key, line))
}

/// Appends `lines` to the jobs file at `path` (created if missing) in one
/// write, under an exclusive lock, adding a missing final newline first;
/// `check` sees the whole file as it would be and may refuse. Returns the
/// file's jobs as they are now.
///
/// Errors: the file does not parse as it is ([`Error::JobsFile`]), or
/// would not with the lines (a bad line, a name in use), or `check`
/// refuses ([`Error::Usage`]); nothing is appended then.
pub fn append_lines(
    path: &Path,
    lines: &[String],
    check: impl FnOnce(&[jobspec::JobSpec]) -> Result<(), Error>,
) -> anyhow::Result<Vec<jobspec::JobSpec>> {
    let mut file = lock(path, true)?;
    let mut raw = Vec::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_end(&mut raw)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let text =
        jobspec::decode(raw).map_err(|e| Error::JobsFile(format!("{}: {e}", path.display())))?;
    // A line behind a broken one would wait, unseen, until the file is
    // fixed: refuse, naming what to fix.
    if let Err(e) = jobspec::parse_jobs(&text) {
        return Err(Error::JobsFile(format!(
            "{}: {e}\nnothing added: a scheduler ignores every edit until that line is fixed",
            path.display()
        ))
        .into());
    }
    let mut bytes = Vec::new();
    if !text.is_empty() && !text.ends_with('\n') {
        bytes.push(b'\n');
    }
    for line in lines {
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
    }
    // A name the file already uses, or a bad line, is refused here.
    let specs = jobspec::parse_jobs(&(text + std::str::from_utf8(&bytes)?))
        .map_err(|e| Error::Usage(format!("{}: nothing added: {e}", path.display())))?;
    check(&specs)?;
    file.write_all(&bytes)
        .and_then(|_| file.sync_data())
        .with_context(|| format!("cannot append to {}", path.display()))?;
    Ok(specs)
}

/// Refuses an `after=` of the new line (the last of `specs`) that a
/// scheduler could not resolve: a reference to nothing, to several jobs,
/// or a cycle. `known` maps the journal's display numbers to keys.
fn check_after(specs: &[jobspec::JobSpec], known: &KnownJobs) -> Result<(), Error> {
    let mut known = known.clone();
    let mut next_no = known.keys().max().map_or(1, |n| n + 1);
    let numbered: std::collections::HashSet<String> = known.values().cloned().collect();
    for spec in specs {
        if !numbered.contains(spec.key.as_str()) {
            known.insert(next_no, spec.key.to_string());
            next_no += 1;
        }
    }
    dependencies::resolve(specs, &known)
        .map(|_| ())
        .map_err(|e| Error::Usage(format!("nothing added: {e}")))
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

    /// Sets attribute `name` of `job` to `value` (`None`: removes it).
    fn set(job: &mut NewJob, name: &str, value: Option<&str>) {
        job.attributes.retain(|(n, _)| n != name);
        if let Some(v) = value {
            job.attributes.push((name.into(), Some(v.into())));
        }
    }

    #[test]
    fn attributes_are_validated() {
        let mut job = argv(&["true"]);
        set(&mut job, "retries", Some("1"));
        set(&mut job, "vram", Some("8G"));
        set(&mut job, "gpus", Some("2"));
        set(&mut job, "timeout", Some("2h"));
        assert_eq!(
            job_line(&job).unwrap(),
            "[vram=8G gpus=2 timeout=2h retries=1] true",
            "in the table's order"
        );
        set(&mut job, "vram", Some("eight"));
        assert!(
            job_line(&job)
                .unwrap_err()
                .to_string()
                .contains("bad vram value 'eight'")
        );
        set(&mut job, "vram", None);
        set(&mut job, "gpus", Some("0"));
        set(&mut job, "mem", Some("2G"));
        set(&mut job, "cpus", Some("4"));
        assert_eq!(
            job_line(&job).unwrap(),
            "[gpus=0 mem=2G cpus=4 timeout=2h retries=1] true",
            "a CPU-only job with its limits"
        );
        set(&mut job, "mem", Some("lots"));
        assert!(
            job_line(&job)
                .unwrap_err()
                .to_string()
                .contains("bad mem value 'lots'")
        );
        set(&mut job, "mem", None);
        set(&mut job, "cpus", Some("0"));
        assert!(
            job_line(&job)
                .unwrap_err()
                .to_string()
                .contains("bad cpus value '0'")
        );
        set(&mut job, "cpus", None);
        set(&mut job, "gpus", Some("2000"));
        assert!(
            job_line(&job)
                .unwrap_err()
                .to_string()
                .contains("bad gpus value")
        );
        assert!(job_line(&argv(&[])).is_err());
        assert!(job_line(&argv(&["echo", "a\nb"])).is_err());
        // A NUL byte, quoted or taken as shell text (--shell, MCP add_job).
        assert!(job_line(&argv(&["echo", "a\0b"])).is_err());
        let mut shell = argv(&["echo a\0b > out"]);
        shell.shell = true;
        assert!(
            job_line(&shell)
                .unwrap_err()
                .to_string()
                .contains("NUL byte")
        );
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
    fn add_appends_with_a_final_newline_and_counts_occurrences() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.txt");
        std::fs::write(&path, "echo hi").unwrap();
        let (key, line) = add(&path, &argv(&["echo", "hi"]), &KnownJobs::new()).unwrap();
        assert_eq!(line, "echo hi");
        assert!(key.ends_with("#1"), "{key}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "echo hi\necho hi\n"
        );
        let parsed = jobspec::parse_jobs(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(parsed[1].key, key);
    }
}
