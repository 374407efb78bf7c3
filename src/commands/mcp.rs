//! `gpusched mcp` (docs/BEHAVIOUR.md "Agents"): a Model Context Protocol
//! server on stdin and stdout, on the official Rust SDK (`rmcp`), for
//! coding agents that queue experiments. It finds its scheduler like the
//! other verbs (`--log-dir`; the jobs file from status.json or `--file`),
//! and each tool runs the very verb a person would (`run_to` of `add`,
//! `cancel`, `retry`, `log`; `status.json` for `status`): the same checks,
//! the same words, the same refusals, which come back as tool errors with
//! the verb's message.

use crate::cli::{AddArgs, JobSelection, LogArgs, McpArgs};
use rmcp::{
    Json, ServerHandler, ServiceExt,
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    tool, tool_handler, tool_router,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Serves MCP on stdio until the client closes it.
///
/// Errors: the runtime cannot start, or the transport fails.
pub fn run(args: &McpArgs) -> anyhow::Result<i32> {
    let server = Server {
        log_dir: args.log_dir.dir.clone(),
        file: args.file.clone(),
        tool_router: Server::tool_router(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        // Between stdin and the SDK: each line checked first, so that a
        // line that is no JSON, or over MAX_MESSAGE_BYTES, is answered
        // with a JSON-RPC error instead of being dropped in silence.
        let (to_server, server_in) = tokio::io::duplex(1 << 20);
        let (server_out, from_server) = tokio::io::duplex(1 << 20);
        tokio::spawn(screen_input(to_server));
        tokio::spawn(copy_output(from_server));
        let service = server
            .serve((server_in, server_out))
            .await
            .map_err(|e| anyhow::anyhow!("MCP handshake failed: {e}"))?;
        service.waiting().await?;
        anyhow::Ok(())
    })?;
    Ok(0)
}

/// The largest JSON-RPC message read from the client (bytes).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// One line for stdout, written whole (the SDK's messages and ours never
/// interleave: each is one `write_all` under stdout's lock).
fn write_line(line: &[u8]) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line);
    let _ = out.flush();
}

/// A JSON-RPC error answer with no id (JSON-RPC 2.0 §5.1: the id could not
/// be read).
fn error_line(code: i32, message: &str) -> Vec<u8> {
    let mut line = serde_json::to_vec(&serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": code, "message": message},
    }))
    .unwrap_or_default();
    line.push(b'\n');
    line
}

/// Reads stdin line by line into `to_server`: a line over
/// [`MAX_MESSAGE_BYTES`] is skipped to its end and answered -32600
/// (Invalid Request), one that is no JSON -32700 (Parse error); the rest
/// goes on as it came. Never holds more than one message's bytes.
async fn screen_input(mut to_server: tokio::io::DuplexStream) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut input = tokio::io::BufReader::new(tokio::io::stdin());
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let (done, used) = match input.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(bytes) => match memchr::memchr(b'\n', bytes) {
                Some(at) => {
                    if !too_long && line.len() + at <= MAX_MESSAGE_BYTES {
                        line.extend_from_slice(&bytes[..at]);
                    } else {
                        too_long = true;
                    }
                    (true, at + 1)
                }
                None => {
                    if !too_long && line.len() + bytes.len() <= MAX_MESSAGE_BYTES {
                        line.extend_from_slice(bytes);
                    } else {
                        too_long = true;
                        line = Vec::new();
                    }
                    (false, bytes.len())
                }
            },
        };
        input.consume(used);
        if !done {
            continue;
        }
        let blank = line.iter().all(u8::is_ascii_whitespace);
        if too_long {
            write_line(&error_line(
                -32600,
                &format!("message over {MAX_MESSAGE_BYTES} bytes: not read"),
            ));
        } else if !blank && serde_json::from_slice::<serde::de::IgnoredAny>(&line).is_err() {
            write_line(&error_line(-32700, "parse error: the line is no JSON"));
        } else if !blank {
            line.push(b'\n');
            if to_server.write_all(&line).await.is_err() {
                break;
            }
        }
        line.clear();
        too_long = false;
    }
    let _ = to_server.shutdown().await;
}

/// Copies the SDK's messages to stdout, line by line.
async fn copy_output(from_server: tokio::io::DuplexStream) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(from_server);
    let mut line = Vec::new();
    while lines
        .read_until(b'\n', &mut line)
        .await
        .is_ok_and(|n| n > 0)
    {
        write_line(&line);
        line.clear();
    }
}

/// The MCP server: where the scheduler is.
#[derive(Debug, Clone)]
pub struct Server {
    log_dir: PathBuf,
    file: Option<PathBuf>,
    tool_router: ToolRouter<Self>,
}

/// `add_job`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AddJob {
    /// The job's shell command line, run by /bin/sh -c as written.
    pub command: String,
    /// Declared peak GPU memory per GPU: MiB (18000) or 800M, 12.5G, or
    /// auto to learn it from earlier runs of its family.
    pub vram: Option<String>,
    /// Number of GPUs (default 1).
    pub gpus: Option<u32>,
    /// A name to refer to the job by (letters, digits, _ . -; unique).
    pub name: Option<String>,
    /// Jobs that must end ok first: names, job numbers or key prefixes.
    pub after: Option<Vec<String>>,
    /// Wall-clock limit: 90, 90s, 15m, 2h, 1.5d.
    pub timeout: Option<String>,
    /// Any other jobs-file attribute by its name, as `gpusched --help`
    /// lists them: `{"priority": "5", "group": "sweep", "limit": "2",
    /// "mem": "16G", "retries": "1", "preemptible": ""}` (a bare flag
    /// with an empty value). Checked by the jobs file's own parser.
    pub attributes: Option<std::collections::BTreeMap<String, String>>,
}

/// A job named by its number (`7`), its `name=`, or its key (prefix).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct JobRef {
    /// The job: its number, its name, or its key or a unique prefix.
    pub job: String,
}

/// `job_log`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct JobLog {
    /// The job: its number, its name, or its key or a unique prefix.
    pub job: String,
    /// Only the last this many lines (default 200).
    pub lines: Option<usize>,
}

/// What a verb said.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Said {
    /// Its message, as the command line prints it.
    pub message: String,
}

/// What `add_job` did.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Added {
    /// The new job's key.
    pub key: String,
    /// Its number, once a running scheduler has seen the line.
    pub job: Option<u32>,
    /// What `gpusched add` said.
    pub message: String,
}

/// The queue as the scheduler last wrote it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Status {
    /// Whether a scheduler holds the log directory now.
    pub scheduler_running: bool,
    /// `status.json` (schema gpusched-status/1): the scheduler, counts,
    /// GPUs, running jobs, waiting ones with why they wait, the latest
    /// finished ones.
    pub status: serde_json::Value,
}

/// A job's output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Log {
    /// The last lines of its latest attempt's output, after the header.
    pub text: String,
}

/// Runs `verb` with writers for its words off the async runtime's thread;
/// a refusal or failure is the tool's error, with the verb's message.
async fn verb(
    verb: impl FnOnce(&mut Vec<u8>, &mut Vec<u8>) -> anyhow::Result<i32> + Send + 'static,
) -> Result<(String, String), String> {
    let ran = tokio::task::spawn_blocking(move || {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = verb(&mut out, &mut err);
        (code, out, err)
    })
    .await
    .map_err(|e| format!("the command did not finish: {e}"))?;
    let (code, out, err) = ran;
    let (out, err) = (
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    );
    match code {
        Ok(0) => Ok((out, err)),
        Ok(_) => Err(said(&out, &err).0.message),
        Err(e) => Err(format!("{e:#}")),
    }
}

#[tool_handler(
    router = self.tool_router,
    name = "gpusched",
    instructions = "gpusched runs shell commands as GPU jobs on this machine, each on a GPU with enough free memory. Use status to see the queue, add_job to queue an experiment (declare vram when you know its peak), job_log to read its output, cancel_job and retry_job to steer."
)]
impl ServerHandler for Server {}

#[tool_router(router = tool_router)]
impl Server {
    /// The queue: the GPUs, running jobs (progress, memory), waiting jobs
    /// with why each waits, and the latest finished jobs with their exit
    /// codes.
    #[tool(name = "status")]
    pub async fn status(&self) -> Result<Json<Status>, String> {
        let (bytes, _) =
            crate::view::status::read_status(&self.log_dir).map_err(|e| e.to_string())?;
        let status = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        Ok(Json(Status {
            scheduler_running: crate::lockfile::holder(&self.log_dir).is_some(),
            status,
        }))
    }

    /// Queue a job: its line is appended to the jobs file the scheduler
    /// runs, checked with the scheduler's own parser.
    #[tool(name = "add_job")]
    pub async fn add_job(&self, params: Parameters<AddJob>) -> Result<Json<Added>, String> {
        let job = params.0;
        let mut attributes: Vec<(String, Option<String>)> = [
            ("vram", job.vram),
            ("gpus", job.gpus.map(|g| g.to_string())),
            ("name", job.name),
            ("after", job.after.map(|a| a.join(","))),
            ("timeout", job.timeout),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_string(), Some(value?))))
        .collect();
        // Any other attribute of the jobs file's table, by its name; a
        // bare flag (`preemptible`) with an empty value.
        for (name, value) in job.attributes.unwrap_or_default() {
            let flag = crate::jobspec::attribute(&name).is_some_and(|a| a.is_flag());
            attributes.push((name, (!flag).then_some(value)));
        }
        let args = AddArgs {
            file: self.file.clone(),
            log_dir: crate::cli::LogDir::new(self.log_dir.clone()),
            attributes,
            shell: true,
            cwd: None,
            no_env: false,
            command: vec![job.command],
        };
        let (out, err) = verb(move |out, err| super::add::run_to(&args, out, err)).await?;
        let job = err
            .split("queued as job ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok());
        Ok(Json(Added {
            key: out.trim().to_string(),
            job,
            message: err.trim().to_string(),
        }))
    }

    /// Cancel a job: a running one is stopped (SIGTERM, SIGKILL after the
    /// grace), a waiting one never starts.
    #[tool(name = "cancel_job")]
    pub async fn cancel_job(&self, params: Parameters<JobRef>) -> Result<Json<Said>, String> {
        let args = JobSelection {
            jobs: vec![params.0.job],
            file: self.file.clone(),
            log_dir: crate::cli::LogDir::new(self.log_dir.clone()),
        };
        let (out, err) = verb(move |out, err| super::cancel::run_to(&args, out, err)).await?;
        Ok(said(&out, &err))
    }

    /// Run a finished job again (any outcome), as its next attempt.
    #[tool(name = "retry_job")]
    pub async fn retry_job(&self, params: Parameters<JobRef>) -> Result<Json<Said>, String> {
        let args = JobSelection {
            jobs: vec![params.0.job],
            file: self.file.clone(),
            log_dir: crate::cli::LogDir::new(self.log_dir.clone()),
        };
        let (out, err) = verb(move |out, err| super::retry::run_to(&args, out, err)).await?;
        Ok(said(&out, &err))
    }

    /// A job's output (its latest attempt), whichever GPUs it ran on.
    #[tool(name = "job_log")]
    pub async fn job_log(&self, params: Parameters<JobLog>) -> Result<Json<Log>, String> {
        let JobLog { job, lines } = params.0;
        let args = LogArgs {
            job,
            follow: false,
            attempt: None,
            log_dir: crate::cli::LogDir::new(self.log_dir.clone()),
        };
        let keep = lines.unwrap_or(200).min(MAX_LOG_LINES);
        // Only the last lines are kept as the log streams by: a 400 MB
        // log costs its reading, not its size in memory.
        let ran = tokio::task::spawn_blocking(move || {
            let (mut tail, mut err) = (LastLines::new(keep), Vec::new());
            let code = super::log::run_to(&args, &mut tail, &mut err);
            (code, tail.text(), err)
        })
        .await
        .map_err(|e| format!("the command did not finish: {e}"))?;
        match ran {
            (Ok(0), text, _) => Ok(Json(Log { text })),
            (Ok(_), text, err) => Err(said(&text, &String::from_utf8_lossy(&err)).0.message),
            (Err(e), _, _) => Err(format!("{e:#}")),
        }
    }
}

/// The most lines `job_log` returns.
pub const MAX_LOG_LINES: usize = 10_000;

/// The longest line `job_log` keeps whole (bytes); longer ones are cut.
const MAX_LINE_BYTES: usize = 64 * 1024;

/// A writer that keeps only the last `keep` lines written to it, each cut
/// at [`MAX_LINE_BYTES`].
struct LastLines {
    keep: usize,
    lines: std::collections::VecDeque<Vec<u8>>,
    current: Vec<u8>,
}

impl LastLines {
    fn new(keep: usize) -> LastLines {
        LastLines {
            keep,
            lines: std::collections::VecDeque::new(),
            current: Vec::new(),
        }
    }

    /// The lines kept, joined by newlines.
    fn text(mut self) -> String {
        if !self.current.is_empty() {
            let last = std::mem::take(&mut self.current);
            self.push(last);
        }
        let joined: Vec<u8> = self.lines.into_iter().collect::<Vec<_>>().join(&b'\n');
        String::from_utf8_lossy(&joined).into_owned()
    }

    fn push(&mut self, line: Vec<u8>) {
        if self.keep == 0 {
            return;
        }
        if self.lines.len() == self.keep {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }
}

impl std::io::Write for LastLines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        for piece in bytes.split_inclusive(|&b| b == b'\n') {
            let (body, ends) = match piece.strip_suffix(b"\n") {
                Some(body) => (body, true),
                None => (piece, false),
            };
            let room = MAX_LINE_BYTES.saturating_sub(self.current.len());
            self.current
                .extend_from_slice(&body[..body.len().min(room)]);
            if ends {
                let line = std::mem::take(&mut self.current);
                self.push(line);
            }
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a verb printed, both streams, as one message.
fn said(out: &str, err: &str) -> Json<Said> {
    Json(Said {
        message: format!("{out}{err}").trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn only_the_last_lines_are_kept_and_long_lines_are_cut() {
        let mut tail = LastLines::new(2);
        for i in 0..100_000 {
            writeln!(tail, "line {i}").unwrap();
        }
        tail.write_all(b"partial").unwrap();
        assert_eq!(tail.text(), "line 99999\npartial");
        let mut long = LastLines::new(1);
        long.write_all(&vec![b'x'; 3 * MAX_LINE_BYTES]).unwrap();
        long.write_all(b"\n").unwrap();
        assert_eq!(long.text().len(), MAX_LINE_BYTES);
        assert_eq!(LastLines::new(0).text(), "");
    }
}
