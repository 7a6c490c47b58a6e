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
        Err(e) => {
            let text = e.to_string();
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("invalid command line")
                .trim_start_matches("error: ")
                .to_owned();
            return Err(fail(Code::Usage, format!("{first} (see hermes --help)")));
        }
    };
    init_tracing(cli.verbose);
    match cli.command {
        Some(Command::Cron(CronCommand::Run { name, run })) => cmd::run::cron(name, &run),
        Some(Command::Delegate(args)) => cmd::delegate::run(&args),
        Some(Command::Drain(args)) => cmd::drain::run(&args),
        Some(Command::Delivery(args)) => cmd::delivery::run(&args),
        Some(Command::Delegation(c)) => cmd::delegation::run(c),
        Some(Command::Session(c)) => cmd::session::run(c),
        Some(Command::Host(args)) => cmd::host::run(&args),
        Some(Command::Mcp) => crate::mcp::run(),
        Some(Command::Hook(c)) => crate::hook::run(c),
        Some(Command::Completions { shell }) => {
            cmd::completions::run(shell);
            Ok(Code::Ok)
        }
        None if cli.oneshot => cmd::run::oneshot(&cli.run),
        None => crate::interactive::run(cli.resume.as_deref()),
    }
}

fn init_tracing(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let filter = match (
        std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty()),
        verbose,
    ) {
        (Some(spec), _) => EnvFilter::new(spec),
        (None, 0) => return,
        (None, 1) => EnvFilter::new("info"),
        (None, _) => EnvFilter::new("debug"),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
