//! The command line, as clap derive types. Nothing outside `cli` sees these.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use hermes_ledger::{DeliveryMode, Role, SandboxMode, Workspace};
use hermes_settings::Bounds;

use crate::services::dispatch::sandbox;

mod hooks;

use crate::services::dispatch::tasks_file::{parse_delivery, parse_role};
pub use hooks::{HookCommand, HookInstallArgs};

/// hermes: durable background delegation for agent conversations.
#[derive(Debug, Parser)]
#[command(name = "hermes", bin_name = "hermes", version, about, override_usage = USAGE)]
pub struct Cli {
    /// Run one unit inline (the stateless channel): children run here and the result is printed.
    #[arg(short = 'z')]
    pub oneshot: bool,
    /// Re-attach to an active session (interactive mode).
    #[arg(long, value_name = "SESSION")]
    pub resume: Option<String>,
    #[command(flatten)]
    pub run: RunArgs,
    /// More logging on stderr (`-v` info, `-vv` debug); `RUST_LOG` works too.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// No progress display and no notes on stderr (errors are still printed).
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Color statuses on a terminal: `auto` (when stdout is a terminal and NO_COLOR is not
    /// set), `always` or `never`.
    #[arg(
        long,
        value_enum,
        value_name = "WHEN",
        default_value = "auto",
        global = true
    )]
    pub color: ColorChoice,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// What bare `hermes` does, and the two other shapes of the command line.
const USAGE: &str = "hermes [--resume SESSION]           an interactive session
       hermes -z [OPTIONS] [-- CMD...]     run one unit here and print its result
       hermes [OPTIONS] <COMMAND>";

impl RunArgs {
    /// The first option of an inline run that was given, as the user typed it (`None`: none).
    pub fn given(&self) -> Option<&'static str> {
        let d = &self.dispatch;
        [
            (self.json, "--json"),
            (d.goal.is_some(), "--goal"),
            (d.context.is_some(), "--context"),
            (!d.toolsets.is_empty(), "--toolsets"),
            (d.role.is_some(), "--role"),
            (d.model.is_some(), "--model"),
            (d.delivery.is_some(), "--delivery"),
            (d.timeout.is_some(), "--timeout"),
            (d.cwd.is_some(), "--cwd"),
            (d.group.is_some(), "--group"),
            (d.pool.is_some(), "--pool"),
            (d.workspace.is_some(), "--workspace"),
            (d.sandbox.is_some(), "--sandbox"),
            (d.network.is_some(), "--network"),
            (d.tasks.is_some(), "--tasks"),
            (d.agent.is_some(), "--agent"),
            (d.adapter.is_some(), "--adapter"),
            (!d.command.is_empty(), "-- CMD"),
        ]
        .into_iter()
        .find_map(|(set, name)| set.then_some(name))
    }
}

/// What to run: the DISPATCH options shared by `-z`, `cron run` and `delegate`.
#[derive(Debug, Args, Clone, Default)]
pub struct DispatchArgs {
    /// What the child is for (default: its command line).
    #[arg(long)]
    pub goal: Option<String>,
    /// Context passed along with the goal.
    #[arg(long)]
    pub context: Option<String>,
    /// Toolsets, comma separated.
    #[arg(long, value_delimiter = ',')]
    pub toolsets: Vec<String>,
    /// The child's role.
    #[arg(long, value_parser = role())]
    pub role: Option<Role>,
    /// The model the child uses.
    #[arg(long)]
    pub model: Option<String>,
    /// When the result is delivered.
    #[arg(long, value_parser = delivery())]
    pub delivery: Option<DeliveryMode>,
    /// Wall-clock limit per child, in seconds (0: the configured default).
    #[arg(long, value_name = "SECS", value_parser = timeout)]
    pub timeout: Option<Duration>,
    /// Working directory of the children.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// A group name for the unit.
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
    /// Run on a worker pool (`hermes worker --pool NAME`) instead of the session's own host;
    /// bare `--pool` is the pool `default`.
    #[arg(long, value_name = "NAME", num_args = 0..=1, default_missing_value = "default")]
    pub pool: Option<String>,
    /// Where each child works: `none` (the working directory) or `worktree` (its own git
    /// worktree and branch `hermes/<delegation>-<task>`; its changes come back committed there).
    /// Default: `delegation.workspace`.
    #[arg(long, value_name = "KIND", value_parser = workspace())]
    pub workspace: Option<Workspace>,
    /// What each child may do, enforced by the kernel: `read-only` (writes only to its own
    /// temporary directory), `workspace-write` (also under its working directory; `.git` stays
    /// read-only) or `full`. Default: `sandbox.default`.
    #[arg(long, value_name = "MODE", value_parser = sandbox::mode_parser())]
    pub sandbox: Option<SandboxMode>,
    /// Whether the children reach the network (`on` or `off`). Default:
    /// `sandbox.network_commands` for commands, `sandbox.network_agents` for agents.
    #[arg(long, value_name = "on|off", value_parser = sandbox::network_parser())]
    pub network: Option<bool>,
    /// A JSON tasks file (`-` for stdin) describing a batch.
    #[arg(long, value_name = "FILE|-")]
    pub tasks: Option<String>,
    // Run an agent CLI on the goal instead of a command (the agents listed from the table).
    #[arg(long, value_name = "NAME", help = agent_help::child())]
    pub agent: Option<String>,
    // How to read the child's stdout (the adapters listed from the table).
    #[arg(long, value_name = "ADAPTER", help = agent_help::adapter())]
    pub adapter: Option<String>,
    /// The command to run, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Options of an inline run (`-z`, `cron run`).
#[derive(Debug, Args, Clone, Default)]
pub struct RunArgs {
    #[command(flatten)]
    pub dispatch: DispatchArgs,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `--role`: the names a tasks file takes, read into the ledger's type.
fn role() -> impl TypedValueParser<Value = Role> {
    PossibleValuesParser::new(["leaf", "orchestrator"])
        .try_map(|text| parse_role(&text).ok_or("must be leaf or orchestrator"))
}

/// `--workspace`: `none` or `worktree`.
fn workspace() -> impl TypedValueParser<Value = Workspace> {
    PossibleValuesParser::new(["none", "worktree"])
        .try_map(|text| Workspace::parse(&text).ok_or("must be none or worktree"))
}

/// `--delivery`: the names a tasks file takes (`after-turn` too), read into the ledger's type.
fn delivery() -> impl TypedValueParser<Value = DeliveryMode> {
    PossibleValuesParser::new([
        PossibleValue::new("after_turn")
            .alias("after-turn")
            .help("At the next turn boundary"),
        PossibleValue::new("inject")
            .help("At the next tool boundary too, behind the tool-boundary carrier"),
    ])
    .try_map(|text| parse_delivery(&text).ok_or("must be after_turn or inject"))
}

#[derive(Debug, Clone, Copy, ValueEnum, Default)]
pub enum BoundaryArg {
    #[default]
    Turn,
    Tool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Scheduled runs: like `-z`, never tied to a session.
    #[command(subcommand)]
    Cron(CronCommand),
    /// Dispatch into a session in the background (starts a headless host if it has none).
    Delegate(DelegateArgs),
    /// Deliver a session's ready results at a boundary.
    Drain(DrainArgs),
    /// Settle a claim taken with `drain --hold`.
    Delivery(DeliveryCmd),
    /// Inspect and stop delegations.
    #[command(subcommand)]
    Delegation(DelegationCommand),
    /// List and end sessions.
    #[command(subcommand)]
    Session(SessionCommand),
    /// The headless host of a session (started for you by `delegate`).
    Host(HostArgs),
    /// Where the ledger lives, and its schema (PostgreSQL).
    #[command(subcommand)]
    Ledger(LedgerCommand),
    /// A worker: runs the units dispatched with `--pool NAME`, from any session, until stopped
    /// (SIGTERM/SIGINT); `worker list` shows the live workers.
    Worker(WorkerArgs),
    /// The branches hermes made for `--workspace worktree` children (`hermes/…`, recorded
    /// when kept): list them, or delete them (never any other branch).
    #[command(subcommand)]
    Workspace(WorkspaceCommand),
    /// Where hermes keeps its ledger and settings (`HERMES_HOME`, else
    /// `~/.local/share/hermes`), and moving a home an older hermes made in `~/.hermes` (upstream
    /// Hermes Agent's home) to a place of its own.
    Home(HomeArgs),
    /// A live full-screen view of every unit on every machine (needs a terminal).
    Top,
    /// The ledger's state in the Prometheus text exposition format, on stdout.
    Metrics(MetricsArgs),
    /// A Model Context Protocol server on stdio, for an agent to delegate work through.
    Mcp,
    /// Hooks for hook-driven agent CLIs: read the hook's JSON on stdin, answer on stdout.
    #[command(subcommand)]
    Hook(HookCommand),
    /// Checks this machine: the home, the ledger, the configuration, agent CLIs, installed
    /// hooks and the kernel's sandbox support. Exit 2: bad configuration; 6: the ledger is
    /// unreachable; 1: another check failed.
    Doctor {
        /// Print JSON: one object per check.
        #[arg(long)]
        json: bool,
    },
    /// The settings in force.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Shell completions.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Subcommand)]
pub enum WorkspaceCommand {
    /// The branches hermes made and kept: repository, commits, whether merged into its `HEAD`.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Deletes the branches hermes made: every one, or those merged into their repository's
    /// `HEAD` (`--merged`) and/or whose last commit is older than D (`--older-than 7d`); and the
    /// spare worktrees hermes keeps for reuse.
    Clean {
        #[arg(long)]
        merged: bool,
        /// An age: `90s`, `30m`, `12h`, `7d`, `2w`.
        #[arg(long, value_name = "D")]
        older_than: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct HomeArgs {
    #[command(subcommand)]
    pub command: Option<HomeCommand>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum HomeCommand {
    /// Moves hermes' files from `~/.hermes` (where older versions made the home, and where
    /// upstream Hermes Agent keeps its own) to the default home, leaving every other file there
    /// alone. Refused while anything of it runs or waits for delivery.
    Migrate {
        #[arg(long)]
        json: bool,
    },
}

/// When to color output.
#[derive(Debug, Clone, Copy, ValueEnum, Default, PartialEq, Eq)]
pub enum ColorChoice {
    /// When stdout is a terminal and `NO_COLOR` is not set.
    #[default]
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Every setting in force and where it came from: its default, config.toml, or a
    /// HERMES_* variable (a password is masked).
    Show {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Create or migrate the PostgreSQL schema now (hermes also does it on first use), under
    /// an advisory lock; prints the schema version.
    Migrate {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Which ledger this home uses (`ledger.url` or the embedded file), without a password.
    Info {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Run a unit inline, ignoring `HERMES_SESSION_*` from the environment.
    Run {
        /// A name for the job, shown in logs.
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        run: RunArgs,
    },
}

#[derive(Debug, Args)]
pub struct DelegateArgs {
    /// The session (default: `$HERMES_SESSION_ID`).
    #[arg(long)]
    pub session: Option<String>,
    #[command(flatten)]
    pub dispatch: DispatchArgs,
    /// The delegation id to record the unit under (`deleg_` + 12 lowercase hex digits). Sending
    /// the same dispatch again with the id a failed one printed is a no-op if that one landed.
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// Print the handle as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DrainArgs {
    /// The session (default: `$HERMES_SESSION_ID`).
    #[arg(long)]
    pub session: Option<String>,
    /// The boundary being crossed.
    #[arg(long, value_enum, default_value = "turn")]
    pub boundary: BoundaryArg,
    /// Keep the claims: print their tokens and settle them with `hermes delivery`.
    #[arg(long)]
    pub hold: bool,
    /// Lease of the claims, in seconds (default `delivery.claim_lease_seconds`).
    #[arg(long, value_name = "SECS", value_parser = lease)]
    pub lease: Option<Duration>,
    /// Wait up to SECS for something to become deliverable.
    #[arg(long, value_name = "SECS", value_parser = wait)]
    pub wait: Option<Duration>,
    /// The consumer's name, recorded with the claim.
    #[arg(long, value_name = "NAME")]
    pub consumer: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DeliveryCmd {
    /// What to do with the claim.
    #[arg(value_enum)]
    pub action: DeliveryAction,
    /// The claim token printed by `drain --hold`.
    pub claim: String,
    /// New lease for `renew`, in seconds (default `delivery.claim_lease_seconds`).
    #[arg(long, value_name = "SECS", value_parser = lease)]
    pub lease: Option<Duration>,
    /// Why, for `drop`.
    #[arg(long, value_name = "R")]
    pub reason: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DeliveryAction {
    Ack,
    Release,
    Defer,
    Renew,
    Drop,
}

#[derive(Debug, Subcommand)]
pub enum DelegationCommand {
    /// Running, queued and recent delegations.
    List {
        /// Only this session's.
        #[arg(long)]
        session: Option<String>,
        /// Every recent delegation, not only the last 20: a page of --limit (1000 unless
        /// given) at a time.
        #[arg(long)]
        all: bool,
        /// At most this many recent delegations (default 20, with --all 1000).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
        /// The ended delegations dispatched after delegation ID (the `next` of a page), or
        /// within the last DURATION (`90m`, `12h`, `7d`), oldest first: a page of the history.
        #[arg(long, value_name = "ID|DURATION")]
        since: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One delegation, its children and their delivery.
    Status {
        /// The delegation id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop a delegation, a session's delegations or all of them.
    Stop {
        /// The delegation id.
        #[arg(required_unless_present_any = ["session", "all"], conflicts_with_all = ["session", "all"])]
        id: Option<String>,
        /// Every delegation of this session.
        #[arg(long, conflicts_with = "all")]
        session: Option<String>,
        /// Every delegation.
        #[arg(long)]
        all: bool,
        /// Why.
        #[arg(long, default_value = "stopped_by_user")]
        reason: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a child's transcript.
    Log {
        /// The delegation id.
        id: String,
        /// Which task, numbered from 1 as displayed (`TASK 2/3` is `--task 2`); default: every
        /// task.
        #[arg(long)]
        task: Option<u32>,
        /// Keep printing until the delegation ends.
        #[arg(short, long)]
        follow: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Every session with its counts.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// End a session: stop its work, drop what it has not received.
    End {
        /// The session.
        session: String,
        /// Answer in JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// The text format.
    #[arg(long, value_enum, default_value_t)]
    pub format: crate::services::metrics::exposition::Format,
}

#[derive(Debug, Args)]
pub struct HostArgs {
    /// The session to host.
    #[arg(long)]
    pub session: String,
    /// Serve Prometheus metrics at `http://ADDR/metrics` while it runs (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Leave the starter's process tree first (what hermes passes when it starts a session's
    /// host: an agent may end its MCP server's whole tree when it exits).
    #[arg(long, hide = true)]
    pub detach: bool,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct WorkerArgs {
    #[command(subcommand)]
    pub command: Option<WorkerCommand>,
    /// The pool whose units it runs (any name: a pool exists when named).
    #[arg(long, value_name = "NAME", default_value = "default")]
    pub pool: String,
    /// Units it runs at once, also the parallelism inside one batch (default
    /// `delegation.max_concurrent_children`).
    #[arg(long, value_name = "N", value_parser = capacity)]
    pub capacity: Option<u32>,
    /// On SIGTERM/SIGINT, let running children finish for up to SECS before interrupting them
    /// (default 0: interrupt at once, reason `worker_shutdown`).
    #[arg(long, value_name = "SECS", value_parser = drain_timeout)]
    pub drain_timeout: Option<Duration>,
    /// Serve Prometheus metrics at `http://ADDR/metrics` while it runs (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Leave the starter's process tree first (what hermes passes when it starts a session's
    /// host: an agent may end its MCP server's whole tree when it exits).
    #[arg(long, hide = true)]
    pub detach: bool,
}

#[derive(Debug, Subcommand)]
pub enum WorkerCommand {
    /// The live workers: pool, capacity, running units, machine, lease.
    List {
        /// Only this pool's workers.
        #[arg(long, value_name = "NAME")]
        pool: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn capacity(raw: &str) -> Result<u32, String> {
    Bounds::CAPACITY
        .parse("", raw)
        .map(|n| n as u32)
        .map_err(|_| format!("must be {}", Bounds::CAPACITY.expected()))
}

fn drain_timeout(raw: &str) -> Result<Duration, String> {
    seconds(Bounds::DRAIN_TIMEOUT, raw)
}

/// A number of seconds within `bounds`, as clap's value parser: the error names the flag.
fn seconds(bounds: Bounds, raw: &str) -> Result<Duration, String> {
    bounds
        .parse_duration("", raw)
        .map(Option::unwrap_or_default)
        .map_err(|_| format!("must be {}", bounds.expected()))
}

fn lease(raw: &str) -> Result<Duration, String> {
    seconds(Bounds::LEASE, raw)
}

fn wait(raw: &str) -> Result<Duration, String> {
    seconds(Bounds::WAIT, raw)
}

fn timeout(raw: &str) -> Result<Duration, String> {
    seconds(Bounds::TIMEOUT, raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn oneshot_takes_a_command_after_dashes() {
        let cli = Cli::try_parse_from(["hermes", "-z", "--goal", "g", "--", "echo", "hi"])
            .expect("parses");
        assert!(cli.oneshot);
        assert_eq!(cli.run.dispatch.command, ["echo", "hi"]);
    }

    #[test]
    fn delegate_takes_toolsets_and_a_command() {
        let cli = Cli::try_parse_from([
            "hermes",
            "delegate",
            "--session",
            "s",
            "--toolsets",
            "a,b",
            "--",
            "sh",
            "-c",
            "x",
        ])
        .expect("parses");
        let Some(Command::Delegate(d)) = cli.command else {
            panic!("not delegate")
        };
        assert_eq!(d.dispatch.toolsets, ["a", "b"]);
        assert_eq!(d.dispatch.command, ["sh", "-c", "x"]);
    }
}

/// Help texts that list agents: from `hermes_agents`' table, never by hand.
mod agent_help {
    use hermes_agents::{AGENTS, child_names, names};

    /// `--agent` of `delegate`.
    pub fn child() -> String {
        format!(
            "Run an agent CLI on the goal instead of a command: {}, or an [agents.NAME] of config.toml (no `--` needed)",
            child_names("")
        )
    }

    /// `--adapter` of `delegate`.
    pub fn adapter() -> String {
        format!(
            "How to read the child's stdout: plain, or an agent's stream ({}). Default: recognised from the agent or the command",
            child_names("")
        )
    }

    /// `--agent` of `hook EVENT`.
    pub fn hook() -> String {
        format!(
            "The agent CLI whose hook this is (its protocol: input fields, answer, budget): {}. The installed hooks always name it",
            names("or")
        )
    }

    /// `AGENT` of `hook install`.
    pub fn install() -> String {
        format!("The agent CLI: {}", names("or"))
    }

    /// `--local` of `hook install`.
    pub fn local() -> String {
        let files: Vec<String> = AGENTS
            .iter()
            .filter_map(|a| a.install.local())
            .map(|parts| format!("`{}`", parts.join("/")))
            .collect();
        format!(
            "Write the hooks into the agent's per-user, uncommitted project settings ({}), with the absolute path",
            hermes_agents::listed(files.iter().map(String::as_str), "or")
        )
    }
}
