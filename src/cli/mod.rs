//! The command line (docs/BEHAVIOUR.md "Command line"): every flag with its unit, default and edge
//! cases, validated here so that the rest of the program gets sane values.
//! A bad flag or value is a usage error: clap prints it and exits 2.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// A VRAM-aware GPU job scheduler for one shared machine.
///
/// Runs the shell commands of JOBS_FILE (one per line), packing each onto a
/// GPU with enough free memory as soon as one opens up. A line may start
/// with attributes: `[vram=18G gpus=2 timeout=2h retries=1] python train.py`
/// (all of them are listed at the end of --help).
/// Progress goes to the terminal and to <log-dir>/status.txt; each job's
/// output to <log-dir>/jobNNN_gpuN.log; the journal <log-dir>/journal.jsonl
/// lets a restarted scheduler resume where it stopped.
///
/// Try it without a GPU: `gpusched examples/jobs.txt --sim 2`.
#[derive(Debug, Parser)]
#[command(
    name = "gpusched",
    version,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Exit status: 0 when every job ended ok or cancelled; else the largest exit code of a failed job (at least 1); 2 for a usage or jobs-file error; 75 when a Slurm allocation ended with jobs left for the next one; 130 after Ctrl-C or gpusched stop. More, with every jobs-file attribute: --help."
)]
pub struct Cli {
    /// Scheduler options.
    #[command(flatten)]
    pub run: RunArgs,
    /// Helper commands.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The command line with what the derive cannot say: the attribute list
/// at the end of `--help`. Parse with this, and render the man page and
/// completions from it.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let attributes = crate::jobspec::ATTRIBUTES;
    let width = attributes.iter().map(|a| a.shown.len()).max().unwrap_or(0);
    let mut text =
        String::from("Jobs-file attributes, in one [...] block at the start of a line:\n");
    for a in attributes {
        text.push_str(&format!("  {:<width$}  {}\n", a.shown, a.help));
    }
    text.push('\n');
    text.push_str(EXIT_STATUS);
    Cli::command()
        .after_long_help(text)
        .mut_subcommand("add", |add| add.args(add_flags()))
}

/// The attributes `gpusched add` takes as flags: all of the table's but
/// `cwd=` (its own `--cwd`, resolved from where you are), `env=` (saved
/// for you; `--no-env`) and `cancel`.
fn add_flag_attributes() -> impl Iterator<Item = &'static crate::jobspec::Attribute> {
    crate::jobspec::ATTRIBUTES
        .iter()
        .filter(|a| !matches!(a.name, "cwd" | "env" | "cancel"))
}

/// One `gpusched add` flag per attribute ([`add_flag_attributes`]),
/// named as the attribute (`retry_on` as `--retry-on`), its help the
/// table's: a new attribute is an `add` flag the day it is added.
fn add_flags() -> Vec<clap::Arg> {
    add_flag_attributes()
        .map(|a| {
            let arg = clap::Arg::new(a.name)
                .long(a.name.replace('_', "-"))
                .help(format!("`{}`: {}", a.shown, a.help))
                .help_heading("Attributes of the job's line");
            if a.is_flag() {
                arg.action(clap::ArgAction::SetTrue)
            } else {
                let value_name = a.shown.split_once('=').map_or("VALUE", |(_, v)| v);
                arg.value_name(value_name)
                    .action(clap::ArgAction::Append)
                    .allow_negative_numbers(true)
            }
        })
        .collect()
}

/// The command line `matches` (from [`command`]) as a [`Cli`], the
/// attribute flags of `add` included.
///
/// Errors: clap's, for arguments the derive cannot take.
pub fn cli_from(matches: &clap::ArgMatches) -> Result<Cli, clap::Error> {
    use clap::FromArgMatches;
    let mut cli = Cli::from_arg_matches(matches)?;
    if let Some(Command::Add(args)) = cli.command.as_mut() {
        args.attributes = add_attributes(matches);
    }
    Ok(cli)
}

/// The attributes given as flags to `gpusched add` in `matches` (the
/// whole command line's): name and value, a repeated flag's values
/// joined with commas (`--after a --after b` is `after=a,b`).
pub fn add_attributes(matches: &clap::ArgMatches) -> Vec<(String, Option<String>)> {
    let Some(("add", add)) = matches.subcommand() else {
        return Vec::new();
    };
    add_flag_attributes()
        .filter_map(|a| {
            if a.is_flag() {
                return add.get_flag(a.name).then(|| (a.name.to_string(), None));
            }
            let values: Vec<&String> = add.get_many::<String>(a.name)?.collect();
            let joined = values
                .iter()
                .map(|v| v.as_str())
                .collect::<Vec<_>>()
                .join(",");
            Some((a.name.to_string(), Some(joined)))
        })
        .collect()
}

/// How a verb treats a directory it does not own (docs/SECURITY.md "Every
/// verb's trust mode"): one entry per subcommand in [`Command::trust`],
/// whose `match` has no `_` arm, so a new verb does not build until it
/// says which it is.
#[derive(Debug)]
pub enum Trust<'a> {
    /// Reads or changes one log directory (and the jobs file and
    /// environments it names): root becomes the directory's owner before
    /// touching anything there (`trust::act_as_owner_of`); any other user
    /// who does not own it is refused with a message naming the owner
    /// (`trust::refuse_foreign`).
    LogDir(&'a mut PathBuf),
    /// Reserves or releases memory in the box's shared ledger: as
    /// [`Trust::LogDir`] on the log directory it follows (its simulated
    /// GPUs) when that exists; the ledger itself is opened on descriptors
    /// and refused when another user owns it.
    Ledger(&'a mut PathBuf),
    /// Reads the whole box (others' bookings, status.json files and
    /// journals) only through the hostile-file reader and never writes
    /// there; its own files (a token) are under the caller's home.
    ReadsOthers,
    /// Touches no log directory: prints text, or writes the caller's own
    /// files (completions, the man page, a systemd user unit, a jobs file
    /// named on the command line), or is root's own (`ledger init`).
    Own,
}

impl Command {
    /// This verb's [`Trust`] mode, with the log directory it acts in.
    pub fn trust(&mut self) -> Trust<'_> {
        match self {
            Command::Status(a) => Trust::LogDir(&mut a.log_dir.dir),
            Command::Add(a) => Trust::LogDir(&mut a.log_dir.dir),
            Command::Cancel(a) | Command::Retry(a) | Command::Hold(a) | Command::Release(a) => {
                Trust::LogDir(&mut a.log_dir.dir)
            }
            Command::Log(a) => Trust::LogDir(&mut a.log_dir.dir),
            Command::Wait(a) => Trust::LogDir(&mut a.log_dir.dir),
            Command::Mcp(a) => Trust::LogDir(&mut a.log_dir.dir),
            Command::Pause(a) | Command::Resume(a) => Trust::LogDir(&mut a.log_dir.dir),
            Command::Drain(a) | Command::Undrain(a) => Trust::LogDir(&mut a.log_dir.dir),
            Command::Stop(a) => Trust::LogDir(&mut a.log_dir.dir),
            Command::Timeline(a) => Trust::LogDir(&mut a.log_dir.dir),
            Command::Export(a) => Trust::LogDir(&mut a.log_dir),
            Command::Doctor(a) => Trust::LogDir(&mut a.log_dir.dir),
            Command::Reserve(a) => Trust::Ledger(&mut a.place.log_dir.dir),
            Command::Unreserve(a) => Trust::Ledger(&mut a.place.log_dir.dir),
            Command::Top(_) | Command::Serve(_) | Command::Report(_) => Trust::ReadsOthers,
            Command::Grid(_)
            | Command::Completions(_)
            | Command::Man(_)
            | Command::Ledger(_)
            | Command::Service(_)
            | Command::Simjob(_) => Trust::Own,
        }
    }
}

/// The exit statuses of the scheduler (docs/BEHAVIOUR.md "Exit status").
pub const EXIT_STATUS: &str = "Exit status: 0 when every job ended ok or cancelled; else the largest exit code of a failed job (at least 1); 2 for a usage or jobs-file error; 75 when a Slurm allocation ended with jobs left for the next one; 130 after Ctrl-C or gpusched stop.";

/// Helper commands next to the scheduler itself.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the queue of a scheduler (running or finished) from
    /// <log-dir>/status.json: GPUs, jobs with elapsed time, progress and
    /// ETA; the summary once the run is over.
    Status(StatusArgs),
    /// Append one job to the jobs file, quoting its words for the shell:
    /// `gpusched add --vram 8G -- python train.py --name "run 1"`.
    Add(AddArgs),
    /// Cancel jobs by number, name, key, group=NAME or a glob of names
    /// (`gpusched cancel 3 7 group=sweep1 'lr0.1-*'`): a running scheduler
    /// stops them (SIGTERM, SIGKILL
    /// after 10 s) or never starts them. The jobs file is not touched (the
    /// cancel is journaled); `gpusched retry` undoes it.
    Cancel(JobSelection),
    /// Print a job's output (its last attempt, or --attempt K), whichever
    /// GPUs it ran on; -f follows it until the attempt ends.
    Log(LogArgs),
    /// Queue finished jobs again (any status) as a new attempt, same key:
    /// `gpusched retry 7 12`. Refused while the job's line carries `cancel`
    /// or is gone.
    #[command(mut_arg("jobs", |a| a.help(RETRY_JOBS_HELP)))]
    Retry(JobSelection),
    /// Keep waiting jobs from starting until `gpusched release`:
    /// `gpusched hold 7 train 'lr0.1-*'` (numbers, names, keys,
    /// group=NAME, name globs). Journaled, so a restart keeps it; they
    /// wait "held".
    Hold(JobSelection),
    /// Let held jobs start again: `gpusched release 7 train`. (A personal
    /// reservation is given back with `gpusched unreserve`.)
    Release(JobSelection),
    /// Block until jobs have ended (default: every job of the jobs file):
    /// exit 0 when all ended ok, 1 otherwise, 124 after --timeout. For
    /// scripts: `gpusched wait train && python report.py`.
    Wait(WaitArgs),
    /// Make the lines of a sweep from a template: `gpusched grid
    /// '[vram=8G] python train.py --lr {lr} --seed {seed}' lr=1e-3,1e-4
    /// seed=1..5 --append jobs.txt`. Values: a,b,c, 1..5, 0.1..0.5:0.1.
    Grid(GridArgs),
    /// Serve the Model Context Protocol on stdin/stdout, for coding agents:
    /// tools status, add_job, cancel_job, retry_job, job_log, each doing
    /// what the verb of the same name does. Register it with an MCP
    /// client as the command `gpusched mcp --log-dir DIR`.
    Mcp(McpArgs),
    /// Stop starting new jobs (running ones go on) until `gpusched resume`;
    /// kept across restarts.
    Pause(LogDirArgs),
    /// Start dispatching again after `gpusched pause`.
    Resume(LogDirArgs),
    /// Close GPUs to new jobs (running ones go on), e.g. for maintenance:
    /// `gpusched drain 0 2`; kept across restarts.
    Drain(GpuArgs),
    /// Open drained GPUs to new jobs again.
    Undrain(GpuArgs),
    /// Stop the scheduler running on a log directory, as Ctrl-C would: its
    /// running jobs get SIGTERM (SIGKILL after 10 s) and run again on the
    /// next start.
    Stop(StopArgs),
    /// Draw the run as an SVG picture: one lane per GPU over time, a bar
    /// per job attempt coloured by outcome (hover for details), memory used
    /// by our jobs and by others, OOM retries, preemptions, reservations.
    /// Works during a run, after it, and on a copied log directory; also
    /// written to <log-dir>/timeline.svg when a run ends.
    Timeline(TimelineArgs),
    /// Print the `sbatch` command lines that `--slurm` would run, one per
    /// job, as a shell script (`gpusched export --slurm jobs.txt | sh`
    /// submits them by hand): `gpusched export --slurm jobs.txt
    /// --shard-mib 4096`. With --pilot, one sbatch script that runs
    /// gpusched inside an allocation instead: `gpusched export --slurm
    /// --pilot --gpus 4 --time 4h jobs.txt > pilot.sh; sbatch pilot.sh`.
    Export(ExportArgs),
    /// Print a shell completion script: `mkdir -p
    /// ~/.local/share/bash-completion/completions && gpusched completions
    /// bash > ~/.local/share/bash-completion/completions/gpusched` (zsh:
    /// into a directory on $fpath as `_gpusched`; fish: into
    /// ~/.config/fish/completions/gpusched.fish).
    Completions(CompletionsArgs),
    /// Print the man page (roff), or install it beside this binary with
    /// `gpusched man --install` (then `man gpusched`).
    Man(ManArgs),
    /// Set up the ledger shared by everyone's schedulers on this box:
    /// `sudo gpusched ledger init` makes /dev/shm/gpusched belong to root
    /// with mode 1777, so nobody but root can remove another user's
    /// bookings.
    Ledger(LedgerArgs),
    /// Keep a scheduler running without tmux: `gpusched service install
    /// jobs.txt` writes a systemd user unit that runs `gpusched jobs.txt
    /// --watch` at login (with `loginctl enable-linger`, from boot) and
    /// restarts it if it fails.
    Service(ServiceArgs),
    /// Accounting, as sreport does it: GPU-hours, jobs, failures and
    /// VRAM-hours per user (or per job name or group) over a period, from
    /// the journals: `gpusched report --since 2026-11-01 --all`.
    Report(ReportArgs),
    /// Keep GPU memory for yourself, not for a job — a notebook, a
    /// debugging session, a demo: `gpusched reserve --for 2h` keeps a
    /// whole GPU; every user's scheduler leaves it alone until it ends or
    /// `gpusched unreserve` gives it back. `--list` shows everyone's.
    Reserve(ReserveArgs),
    /// Give back your personal reservations (`gpusched unreserve 3`, or
    /// all of yours without an ID).
    Unreserve(UnreserveArgs),
    /// The whole box, live, full screen: every GPU with each user's jobs
    /// and reservations and when it should free, every user's queue.
    /// `q` quits. Not on a terminal, it prints the view once.
    Top(TopArgs),
    /// The same view as a web page that updates itself, with this user's
    /// queue and timeline, and a read-only API: /api/v1/status,
    /// /api/v1/box, /metrics. Listens on 127.0.0.1:8765 (reach it with
    /// `ssh -L 8765:localhost:8765`) and prints the /login?token=… URL to
    /// open; any other address needs --token-file.
    Serve(ServeArgs),
    /// A fake GPU job for --sim mode: holds simulated VRAM on the GPUs of
    /// CUDA_VISIBLE_DEVICES, reporting it to $GPUSCHED_SIM_DIR.
    Simjob(SimjobArgs),
    /// Check this machine for gpusched, first thing on a new box: NVML and
    /// the driver, each GPU (lost, persistence, ECC, pages to retire, MIG),
    /// how the GPUs are connected, the PID namespace, the shared ledger
    /// and the log directory; each problem with its fix. Exit 1 on errors.
    Doctor(DoctorArgs),
}

/// Options of the scheduler (`gpusched JOBS_FILE [options]`).
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// The jobs file: one shell command per line, `#` comments, optional
    /// `[vram=.. gpus=.. timeout=.. retries=.. cancel]` block first. Re-read
    /// whenever it changes; never written by gpusched.
    #[arg(value_name = "JOBS_FILE", required = true)]
    pub jobs_file: Option<PathBuf>,

    /// GPU indices the scheduler may use, comma-separated (e.g. 0,1,3); a
    /// GPU in MIG mode brings its MIG instances, and `0:1` names one MIG
    /// instance. Default: all GPUs.
    #[arg(long, value_name = "LIST", value_parser = parse_gpu_list, conflicts_with = "slurm")]
    pub gpus: Option<GpuList>,

    /// A GPU whose memory used by others is below this many MiB counts as
    /// idle; undeclared jobs only start on idle GPUs.
    #[arg(long, value_name = "MIB", default_value_t = 200, value_parser = parse_mib)]
    pub idle_threshold: u64,

    /// MiB added to every declaration when checking headroom.
    #[arg(long, value_name = "MIB", default_value_t = 512, value_parser = parse_mib)]
    pub margin: u64,

    /// Band for declared-vs-actual verdicts, as a fraction (0.10 = ±10 %).
    /// A job whose peak exceeds its declaration by more gets a warning.
    #[arg(long, value_name = "FRAC", default_value_t = 0.10, value_parser = parse_fraction)]
    pub tolerance: f64,

    /// What happens to a job whose measured VRAM goes beyond its
    /// declaration plus --tolerance: `auto` (stopped while it shares a GPU
    /// with anyone — another job, another user's booking or processes —,
    /// else warned: neighbours protected, someone alone not bothered),
    /// `warn` (a warning; it runs on), `stop` (stopped at once, before it
    /// can take a neighbour down, and retried as an OOM is with a bigger
    /// declaration), or `mps` (NVIDIA MPS limits each job's memory to its
    /// declaration; for GPUs one user has to themselves). A line's
    /// enforce=stop|warn|auto overrides it.
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = parse_enforce)]
    pub enforce: crate::jobspec::Enforce,

    /// Buffer over observed peaks, as a fraction (0.10 = 10 %), applied to
    /// other users' processes and to jobs that outgrew their declaration.
    #[arg(long, value_name = "FRAC", default_value_t = 0.10, value_parser = parse_fraction)]
    pub spike_buffer: f64,

    /// GPU sampling interval in seconds (decimals allowed, > 0). Job exits
    /// and jobs-file edits are handled at once, not at the next sample.
    #[arg(long, value_name = "SEC", default_value_t = 5.0, value_parser = parse_poll)]
    pub poll: f64,

    /// How a declared job chooses among the GPUs it fits on: `spread` (a
    /// GPU where nobody's job runs first, the least loaded; it shares a
    /// GPU by best fit only when every GPU has work, and never beside a
    /// job of ours computing flat out, at 90 % or more: sharing buys
    /// concurrency, not speed; a job whose family was measured to share
    /// well, its runs beside another job under 1.25× its runs alone, is
    /// placed by best fit at once) or `pack` (best fit always, the fullest
    /// GPU that fits: for small memory-bound jobs, keeping GPUs whole for
    /// large ones).
    #[arg(long, value_name = "HOW", default_value = "spread")]
    pub placement: crate::allocation::PlacementPolicy,

    /// At most one of our jobs per GPU, declared or not.
    #[arg(long)]
    pub exclusive: bool,

    /// Starvation guard: when the first blocked job in file order has
    /// waited this many seconds, the GPUs it will fit on once our running
    /// jobs there end are reserved for it; no other job starts on them until
    /// it starts (one reservation at a time).
    #[arg(long, value_name = "SEC", default_value_t = 600.0, value_parser = parse_seconds)]
    pub reserve_after: f64,

    /// Stay up when the queue is done and wait for new lines in JOBS_FILE.
    #[arg(long)]
    pub watch: bool,

    /// Treat every job without vram= as vram=auto: its declaration is the
    /// highest peak of the last 5 ok runs of its family (same command up to
    /// numbers, or family=) plus --spike-buffer; the first of a family runs
    /// alone on an idle GPU.
    #[arg(long)]
    pub auto_vram: bool,

    /// Do not give declared jobs the framework memory caps: by default a
    /// job with vram= gets XLA_PYTHON_CLIENT_MEM_FRACTION at its
    /// declaration's share of its GPU (less 768 MiB for the CUDA context),
    /// and TF_FORCE_GPU_ALLOW_GROWTH=true, so JAX and TensorFlow do not
    /// take the whole GPU (unless you set them, or for JAX
    /// XLA_CLIENT_MEM_FRACTION, yourself).
    #[arg(long)]
    pub no_framework_caps: bool,

    /// A file of measured peaks shared between log directories (JSON
    /// lines, appended under a lock, kept small): vram=auto jobs learn from
    /// every run recorded there, and every ok run here is added to it.
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,

    /// Default number of automatic re-runs after a CUDA out-of-memory
    /// failure, each with a 25 % larger declaration. A line's `retries=`
    /// overrides it.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub oom_retries: u32,

    /// Seconds to wait before retrying a job that failed under
    /// `retry_on=fail|any` (a line's `retry_delay=` overrides it). Without
    /// either: 10 s, doubling with each retry, at most 5 minutes. OOM
    /// retries never wait: they wait for room anyway.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub retry_delay: Option<f64>,

    /// Remove the journal first and re-run every job.
    #[arg(long)]
    pub fresh: bool,

    /// Directory for job logs, the journal and the status board.
    #[arg(long, value_name = "DIR", default_value = "gpusched_logs")]
    pub log_dir: PathBuf,

    /// Print a line each time a running job's peak VRAM grows by 256 MiB or
    /// more.
    #[arg(short, long)]
    pub verbose: bool,

    /// Use N simulated GPUs of 24000 MiB instead of NVML (no GPU needed).
    /// Jobs are real processes; `gpusched simjob` pretends to use VRAM.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64), conflicts_with = "slurm")]
    pub sim: Option<u32>,

    /// Where the simulated GPUs live (with --sim): every simjob reports its
    /// memory there. Give two schedulers the same directory and they share
    /// the same simulated GPUs, as two users share a real box. Default:
    /// $GPUSCHED_SIM_DIR, else LOG_DIR/sim.
    #[arg(long, value_name = "DIR", requires = "sim")]
    pub sim_dir: Option<PathBuf>,

    /// GPU pairs joined by NVLink in the simulation (with --sim), e.g.
    /// `0-2,1-3` for two NVLink pairs, `0-1x12` for 12 links (default 4).
    /// Other pairs meet at the host bridge. Multi-GPU jobs get the
    /// best-connected GPUs, as on a real box (docs/HARDWARE.md "Topology").
    #[arg(long, value_name = "PAIRS", requires = "sim", value_parser = parse_nvlink_pairs)]
    pub sim_nvlink: Option<NvlinkPairs>,

    /// The ledger directory shared with other schedulers on this box: each
    /// books its running jobs' memory there, so two schedulers never start
    /// jobs into the same free memory. Default: $GPUSCHED_LEDGER, else
    /// /dev/shm/gpusched (with --sim: SIM_DIR/ledger).
    #[arg(
        long,
        value_name = "DIR",
        env = "GPUSCHED_LEDGER",
        conflicts_with = "no_ledger"
    )]
    pub ledger: Option<PathBuf>,

    /// The box rules everyone's schedulers on this machine follow: fair
    /// share, quotas, how long a `gpusched reserve` may last. Written by
    /// root; refused unless root owns it and nobody else can write it.
    /// Default: $GPUSCHED_BOX_RULES, else /etc/gpusched/box.toml if it
    /// exists (none: no rules).
    #[arg(long, value_name = "FILE")]
    pub box_rules: Option<PathBuf>,

    /// Neither publish bookings nor read other schedulers' (they are then
    /// seen only through the memory their jobs already use).
    #[arg(long)]
    pub no_ledger: bool,

    /// Run as on a plain box even inside a Slurm allocation
    /// (SLURM_JOB_ID set): every GPU NVML shows, the box ledger, no
    /// wrap-up before the allocation's end.
    #[arg(long)]
    pub no_allocation: bool,

    /// Inside a Slurm allocation, run each job as a job step (`srun
    /// --overlap` on this node), so that Slurm accounts for it (`sacct
    /// -j ALLOCATION` lists one step per attempt) and stops it with the
    /// allocation. gpusched still chooses each job's GPUs. Needs
    /// SLURM_JOB_ID set (a pilot started by sbatch or srun).
    #[arg(long, conflicts_with_all = ["no_allocation", "sim", "slurm"])]
    pub job_steps: bool,

    /// POST a JSON message to this URL when a job fails (see --notify-on):
    /// a `text` line for people (Slack and Mattermost incoming webhooks
    /// show it as is) and the job's facts; `mailto:ADDRESS` sends it as an
    /// e-mail instead, through the SMTP relay $GPUSCHED_SMTP names
    /// (HOST:PORT), else the system's sendmail. Repeat for several; also
    /// read from $GPUSCHED_NOTIFY (separated by spaces). Sent off the
    /// scheduling loop: 10 s per try; a message that did not go is tried
    /// again after 1 s, doubling up to 60 s, for up to 24 h; each outcome
    /// at most once, also across restarts.
    #[arg(
        long,
        value_name = "URL",
        env = "GPUSCHED_NOTIFY",
        value_delimiter = ' '
    )]
    pub notify: Vec<String>,

    /// What --notify posts, comma-separated (the events are below).
    #[arg(
        long,
        value_name = "EVENTS",
        value_enum,
        value_delimiter = ',',
        default_value = "failed"
    )]
    pub notify_on: Vec<crate::notifier::NotifyOn>,

    /// Run CMD for every attempt that ends (ok, failed, an OOM retry, a
    /// preemption). CMD is split into words once, like a shell would, and
    /// run without a shell; the job's facts come only in its environment:
    /// GPUSCHED_JOB, _KEY, _NAME, _STATUS, _EXIT_CODE, _COMMAND, _LOG,
    /// _PEAK_MIB, _DURATION_S, _GPUS, _ATTEMPT. At most 4 at once, 30 s
    /// each; output to LOG_DIR/hooks.log. Example: --on-finish
    /// 'sh -c "notify-send \"job $GPUSCHED_JOB: $GPUSCHED_STATUS\""'.
    #[arg(long, value_name = "CMD")]
    pub on_finish: Option<String>,

    #[command(flatten)]
    pub slurm: SlurmArgs,

    #[command(flatten)]
    pub contain: ContainArgs,
}

/// Running on a Slurm cluster (docs/BEHAVIOUR.md "Slurm"), for the scheduler and `export`.
#[derive(Debug, Args, Clone, Default)]
pub struct SlurmArgs {
    /// Run the jobs on a Slurm cluster instead of this machine's GPUs:
    /// each becomes one `sbatch` job (named gpusched-<key>, output to its
    /// log in --log-dir, which must be on a filesystem the nodes share).
    /// Slurm places them; gpusched keeps the live jobs file, the journal,
    /// retries, dependencies and the views. Ctrl-C stops gpusched, not the
    /// cluster's jobs; the next start picks them up.
    #[arg(long)]
    pub slurm: bool,

    /// Slurm partition to submit to (default: the cluster's default).
    #[arg(long, value_name = "NAME", requires = "slurm")]
    pub partition: Option<String>,

    /// MiB of GPU memory per Slurm `gres/shard`, as the cluster's admin
    /// configured it: a one-GPU job declaring vram=E then asks for
    /// ceil(E / MIB) shards instead of a whole GPU. Without it, every job
    /// gets whole GPUs.
    #[arg(long, value_name = "MIB", value_parser = parse_mib, requires = "slurm")]
    pub shard_mib: Option<u64>,

    /// An extra `sbatch` option for every job, e.g. --sbatch-arg=--account=lab
    /// (repeat for several).
    #[arg(
        long,
        value_name = "ARG",
        allow_hyphen_values = true,
        requires = "slurm"
    )]
    pub sbatch_arg: Vec<String>,
}

impl SlurmArgs {
    /// The options of the Slurm launcher.
    pub fn options(&self) -> crate::launcher::slurm::SlurmOptions {
        crate::launcher::slurm::SlurmOptions {
            partition: self.partition.clone(),
            shard_mib: self.shard_mib,
            sbatch_args: self.sbatch_arg.clone(),
        }
    }
}

/// Arguments of `gpusched export`.
#[derive(Debug, Args, Clone)]
pub struct ExportArgs {
    /// The jobs file.
    #[arg(value_name = "JOBS_FILE")]
    pub jobs_file: PathBuf,
    /// Where job logs would go (as for the scheduler).
    #[arg(long, value_name = "DIR", default_value = "gpusched_logs")]
    pub log_dir: PathBuf,
    #[command(flatten)]
    pub slurm: SlurmArgs,
    #[command(flatten)]
    pub pilot: PilotArgs,
}

/// Arguments of `gpusched status`.
#[derive(Debug, Args, Clone)]
pub struct StatusArgs {
    #[command(flatten)]
    pub log_dir: LogDir,
    /// Print status.json as it is (schema: docs/status.schema.json).
    #[arg(long)]
    pub json: bool,
    /// List every finished job (from the journal), not only the 10 latest.
    #[arg(long)]
    pub all: bool,
}

/// Arguments of `gpusched timeline`.
#[derive(Debug, Args, Clone)]
pub struct TimelineArgs {
    #[command(flatten)]
    pub log_dir: LogDir,
    /// Where to write the SVG (`-` for standard output). Default:
    /// <log-dir>/timeline.svg.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Arguments of `gpusched add`.
#[derive(Debug, Args, Clone)]
pub struct AddArgs {
    /// The jobs file to append to (created if missing). Default: the file
    /// the scheduler with --log-dir runs (from its status.json), else
    /// ./jobs.txt if it exists.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub log_dir: LogDir,
    /// The jobs-file attributes given as flags (`--vram 8G`, `--group
    /// sweep`, `--preemptible`): one flag per attribute of
    /// `jobspec::ATTRIBUTES` but `cwd=` (its own flag), `env=` (saved
    /// for you) and `cancel`, added to the command by [`command`] and read
    /// back by [`add_attributes`]. Name and value as written.
    #[arg(skip)]
    pub attributes: Vec<(String, Option<String>)>,
    /// COMMAND is one shell command line, taken as written (pipes and
    /// redirections kept): `gpusched add --shell 'python t.py > out.txt'`.
    #[arg(long)]
    pub shell: bool,
    /// The directory the job runs in, written as `cwd=` on its line.
    /// Default: the directory you run `gpusched add` from.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Run the job with the scheduler's environment, not yours. By
    /// default your environment (PATH, an active conda environment or
    /// virtualenv, every variable) is saved in the log directory (0600)
    /// and the job runs with it, named as env= on its line.
    #[arg(long)]
    pub no_env: bool,
    /// The command and its arguments (after `--` if they start with `-`).
    #[arg(
        value_name = "COMMAND",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<String>,
}

/// The jobs a verb acts on and where they are: the arguments of `gpusched
/// cancel`, `hold` and `release` (and of `retry`, which takes no group or
/// glob), one struct so that the verbs find jobs alike.
#[derive(Debug, Args, Clone)]
pub struct JobSelection {
    /// The jobs: display numbers (`7`), `name=`s, keys (`a1b2c3d4e5f6#0`,
    /// or unique prefixes), `group=NAME` for every job of a group not yet
    /// ended, or a glob of names (`*` any characters, `?` one; quote it
    /// from the shell) for every job whose name matches, not yet ended:
    /// `gpusched cancel 3 7 group=sweep1 'lr0.1-*'`.
    #[arg(value_name = "JOB", required = true)]
    pub jobs: Vec<String>,
    /// The jobs file. Default: the file the scheduler with --log-dir runs
    /// (from its status.json), else ./jobs.txt if it exists.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub log_dir: LogDir,
}

/// The help of `retry`'s jobs, which are finished ones named one by one.
pub const RETRY_JOBS_HELP: &str = "The jobs: display numbers (`7`), `name=`s, or keys (or unique prefixes); finished ones, each named on its own (no group= or glob)";

/// Arguments of `gpusched log`.
#[derive(Debug, Args, Clone)]
pub struct LogArgs {
    /// The job: its display number (`7`), its `name=`, or its key (or a
    /// unique prefix).
    #[arg(value_name = "JOB")]
    pub job: String,
    /// Keep printing new output until the attempt ends.
    #[arg(short, long)]
    pub follow: bool,
    /// The attempt to show (1-based; default: the last).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..))]
    pub attempt: Option<u32>,
    #[command(flatten)]
    pub log_dir: LogDir,
}

/// Arguments of `gpusched grid`.
#[derive(Debug, Args, Clone)]
pub struct GridArgs {
    /// The line to fill: `{KEY}` placeholders anywhere, an attribute block
    /// first if wanted (`[name=lr{lr} vram=8G] python train.py --lr {lr}`).
    /// `${...}` is left to the shell.
    #[arg(value_name = "TEMPLATE")]
    pub template: String,
    /// The values of each placeholder: a list `a,b,c`, integers `1..5`
    /// (`10..1` counts down, `1..10:3` steps), decimals `0.1..0.5:0.1`
    /// (printed with the step's decimals, never 0.30000000000000004).
    #[arg(value_name = "KEY=VALUES", required = true)]
    pub axes: Vec<String>,
    /// Pair the i-th values of every key instead of every combination
    /// (the lists must be equally long).
    #[arg(long)]
    pub zip: bool,
    /// Only N distinct combinations, picked at random (reproducibly, see
    /// --seed), listed in grid order.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub sample: Option<u64>,
    /// The seed of --sample.
    #[arg(long, value_name = "S", default_value_t = 0, requires = "sample")]
    pub seed: u64,
    /// Put every line in group NAME (`group=NAME` in its attribute block).
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
    /// With --group: at most N of the group's jobs run at once.
    #[arg(long, value_name = "N", requires = "group", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// Append the lines to this jobs file in one write (refused while the
    /// file has a line that does not parse), instead of printing them.
    #[arg(long, value_name = "FILE")]
    pub append: Option<PathBuf>,
}

/// Arguments of `gpusched mcp`.
#[derive(Debug, Args, Clone)]
pub struct McpArgs {
    #[command(flatten)]
    pub log_dir: LogDir,
    /// The jobs file (default: the one the scheduler with --log-dir runs).
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
}

/// Arguments of `gpusched wait`.
#[derive(Debug, Args, Clone)]
pub struct WaitArgs {
    /// The jobs: display numbers (`7`), `name=`s, or keys (or unique
    /// prefixes). Default: every job of the jobs file.
    #[arg(value_name = "JOB")]
    pub jobs: Vec<String>,
    /// Give up after this many seconds (exit 124).
    #[arg(long, value_name = "SEC", value_parser = parse_poll)]
    pub timeout: Option<f64>,
    /// The jobs file (default: the one the scheduler with --log-dir runs).
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub log_dir: LogDir,
}

/// Arguments of `gpusched pause` and `resume`.
#[derive(Debug, Args, Clone)]
pub struct LogDirArgs {
    #[command(flatten)]
    pub log_dir: LogDir,
}

/// Arguments of `gpusched drain` and `undrain`.
#[derive(Debug, Args, Clone)]
pub struct GpuArgs {
    /// GPU indices, or MIG instances as GPU:MIG device (`0:1`, as
    /// nvidia-smi numbers them); draining a GPU drains its MIG instances.
    #[arg(value_name = "GPU", required = true, value_parser = parse_device)]
    pub gpus: Vec<u32>,
    #[command(flatten)]
    pub log_dir: LogDir,
}

/// Arguments of `gpusched stop`.
#[derive(Debug, Args, Clone)]
pub struct StopArgs {
    #[command(flatten)]
    pub log_dir: LogDir,
    /// Seconds to wait for it to exit (it gives its jobs a 10 s grace).
    #[arg(long, value_name = "SEC", default_value_t = 30.0, value_parser = parse_poll)]
    pub timeout: f64,
    /// Leave the running jobs running: the scheduler exits at once, and
    /// the next start on this log directory adopts them and records how
    /// they end (once).
    #[arg(long)]
    pub keep_jobs: bool,
}

/// Arguments of the internal `gpusched __supervise` (docs/BEHAVIOUR.md "Exactly once"): the
/// scheduler's supervisor, started by the scheduler, never by people. It
/// takes no arguments (its requests come on its stdin, see
/// [`crate::process::supervisor`]). Parsed on its own, before the user's
/// command line ([`SUPERVISE`]), so it appears in no help, completion or
/// man page.
#[derive(Debug, Parser, Clone)]
#[command(name = "gpusched __supervise", no_binary_name = true)]
pub struct SuperviseArgs {}

pub use crate::process::supervisor::SUPERVISE;

/// For a jobs-file argument that names no file: the subcommand it looks
/// like a typo of (`statu` → `status`), if any.
pub fn subcommand_typo(word: &str) -> Option<String> {
    use clap::CommandFactory;
    if word.contains(['/', '.']) || word.is_empty() {
        return None;
    }
    Cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name().to_string())
        .map(|name| (strsim::jaro_winkler(word, &name), name))
        .filter(|(score, _)| *score >= 0.88)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, name)| name)
}

/// The error for a first argument that names no file but looks like a
/// mistyped subcommand (`gpusched cancle 3`), whatever follows it; `None`
/// when it is a file, or like no subcommand.
pub fn typo_error(first: &std::ffi::OsStr) -> Option<crate::error::Error> {
    use clap::CommandFactory;
    let word = first.to_str()?;
    // A subcommand itself (hidden ones too), an option, or a file.
    if word.starts_with('-')
        || word == SUPERVISE
        || Cli::command().find_subcommand(word).is_some()
        || std::path::Path::new(first).exists()
    {
        return None;
    }
    let name = subcommand_typo(word)?;
    Some(crate::error::Error::Usage(format!(
        "no command or jobs file named '{}': did you mean `gpusched {name}`? (see `gpusched --help`)",
        first.to_string_lossy()
    )))
}

mod log_dir;
mod values;
pub use log_dir::LogDir;
pub use values::GpuList;
use values::{
    parse_device, parse_enforce, parse_fraction, parse_gpu_list, parse_mib, parse_poll,
    parse_seconds,
};

mod box_args;
mod contain_args;
pub use contain_args::ContainArgs;
mod lab_args;
mod pilot_args;
pub use pilot_args::PilotArgs;
mod sim_args;
use box_args::parse_nvlink_pairs;
pub use box_args::{
    BoxArgs, DoctorArgs, NvlinkPairs, ReserveArgs, ServeArgs, TopArgs, UnreserveArgs,
};
pub use lab_args::{
    CompletionsArgs, LedgerAction, LedgerArgs, ManArgs, ReportArgs, ServiceAction, ServiceArgs,
};
pub use sim_args::SimjobArgs;

#[cfg(test)]
mod tests;
