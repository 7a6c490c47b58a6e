//! From parsed arguments to the command that runs them.

use clap::Parser;

use crate::args::{Cli, Command, CronCommand};
use crate::cmd;
use crate::exit::{Code, fail};

/// Parses the command line and runs it.
pub fn run() -> anyhow::Result<Code> {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version.
            let _ = e.print();
            return Ok(Code::Ok);
        }
        // A hook never exits with an agent's "block" code (SPEC §13.1), not even for a
        // command line it cannot parse.
        Err(e) if is_hook_event() => {
            return Err(fail(Code::WorkFailed, usage_line(&e.to_string())));
        }
        Err(e) => return Err(fail(Code::Usage, usage_line(&e.to_string()))),
    };
    if cli.command.is_some() && (cli.oneshot || cli.resume.is_some() || cli.run.is_set()) {
        return Err(fail(
            Code::Usage,
            "-z, --resume and the dispatch options go without a subcommand (see hermes --help)",
        ));
    }
    crate::color::init(cli.color);
    // The runs a person watches keep their warnings in a file under the home (`logfile.rs`).
    let logs_to_file = matches!(cli.command, None | Some(Command::Cron(_)));
    init_tracing(cli.verbose, logs_to_file, cli.quiet);
    match cli.command {
        Some(Command::Cron(CronCommand::Run { name, run })) => {
            cmd::run::cron(name, &run, cli.quiet)
        }
        Some(Command::Delegate(args)) => cmd::delegate::run(&args),
        Some(Command::Drain(args)) => cmd::drain::run(&args),
        Some(Command::Delivery(args)) => cmd::delivery::run(&args),
        Some(Command::Delegation(c)) => cmd::delegation::run(c),
        Some(Command::Session(c)) => cmd::session::run(c),
        Some(Command::Host(args)) => cmd::host::run(&args, cli.quiet),
        Some(Command::Ledger(c)) => cmd::ledger::run(c),
        Some(Command::Worker(args)) => cmd::worker::run(&args, cli.quiet),
        Some(Command::Top) => cmd::top::run(),
        Some(Command::Metrics(args)) => cmd::metrics::run(&args),
        Some(Command::Mcp) => crate::mcp::run(),
        Some(Command::Hook(c)) => crate::hook::run(c),
        Some(Command::Doctor { json }) => cmd::doctor::run(json),
        Some(Command::Config(c)) => cmd::config::run(c),
        Some(Command::Completions { shell }) => {
            cmd::completions::run(shell);
            Ok(Code::Ok)
        }
        None if cli.oneshot => cmd::run::oneshot(&cli.run, cli.quiet),
        None => crate::interactive::run(cli.resume.as_deref()),
    }
}

/// Whether this process runs a hook event (`hermes hook EVENT`, not `hook install`).
fn is_hook_event() -> bool {
    let args: Vec<String> = std::env::args().skip(1).take(2).collect();
    args.first().map(String::as_str) == Some("hook")
        && args.get(1).map(String::as_str) != Some("install")
}

/// clap's error as one line: the message and what it names (a missing `<ID>`, a tip), up to the
/// usage block.
fn usage_line(text: &str) -> String {
    let mut line = String::new();
    for part in text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty())
    {
        if !line.is_empty() {
            line.push_str(if line.ends_with(':') { " " } else { "; " });
        }
        line.push_str(part.trim_start_matches("error: "));
    }
    if line.is_empty() {
        line.push_str("invalid command line");
    }
    line.push_str(" (see hermes --help)");
    line
}

/// Logging: on stderr with `-v` (info), `-vv` (debug) or `RUST_LOG`; and for the runs a
/// person watches (`logs_to_file`), warnings and errors to `$HERMES_HOME/logs/hermes.log`,
/// pointed at once on stderr unless `quiet`.
fn init_tracing(verbose: u8, logs_to_file: bool, quiet: bool) {
    use tracing_subscriber::filter::LevelFilter;
    use tracing_subscriber::layer::{Layer as _, SubscriberExt as _};
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{EnvFilter, fmt};
    let filter = match (
        std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty()),
        verbose,
    ) {
        (Some(spec), _) => Some(EnvFilter::new(spec)),
        (None, 0) => None,
        (None, 1) => Some(EnvFilter::new("info")),
        (None, _) => Some(EnvFilter::new("debug")),
    };
    let stderr = filter.map(|filter| {
        fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter)
    });
    let file = logs_to_file
        .then(|| crate::config::home_dir(&crate::home::env_var).ok())
        .flatten()
        .map(|home| {
            let log = crate::logfile::LogFile::under(&home);
            fmt::layer()
                .with_writer(if quiet { log.quietly() } else { log })
                .with_ansi(false)
                .with_filter(LevelFilter::WARN)
        });
    if stderr.is_none() && file.is_none() {
        return;
    }
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(file)
        .try_init();
}

/// With `HERMES_DEBUG_SYNC_COUNT=FILE`, appends one JSON line to FILE when the process ends:
/// its pid, its command line, and the `fdatasync`s, writes and durable commits it made on the
/// ledger (counted by the ledger's storage layer, open and close included). The benchmarks read
/// it; nothing else does.
pub fn record_io_counts() {
    let Some(path) = std::env::var_os("HERMES_DEBUG_SYNC_COUNT") else {
        return;
    };
    let counts = ledger::io_counts();
    let line = serde_json::json!({
        "pid": std::process::id(),
        "args": std::env::args().skip(1).collect::<Vec<_>>(),
        "syncs": counts.syncs,
        "writes": counts.writes,
        "commits": counts.commits,
    });
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes()));
    if let Err(err) = appended {
        tracing::warn!(error = %err, "cannot record the I/O counts");
    }
}
