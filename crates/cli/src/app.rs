//! From the command line to the command that runs it: parses the arguments, runs the command,
//! maps its error to an exit code. The dispatcher is the one module that names every front-end
//! (`cmd`, `mcp`, `hook`, `interactive`, `top`); the front-ends never name each other.

use clap::error::{ContextKind, ErrorKind};
use clap::{CommandFactory, Parser};

use crate::args::{Cli, Command, CronCommand};
use crate::cmd;
use crate::services::exit::{self, Code, fail};

/// The whole process: parses the command line, runs the command, reports its error and returns
/// the exit code.
pub fn main() -> std::process::ExitCode {
    crate::services::home::make_files_private();
    exit::install_panic_hook();
    let code = match run() {
        Ok(code) => std::process::ExitCode::from(code as u8),
        Err(err) => exit::report(&err),
    };
    record_io_counts();
    code
}

/// Parses the command line and runs it.
fn run() -> anyhow::Result<Code> {
    // Lossy: an argument that is not UTF-8 (a child's file name) is clap's to judge, not ours.
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let hook_event = is_hook_event(&args);
    if !hook_event && wants_json(&args) {
        exit::report_errors_as_json();
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version.
            let _ = e.print();
            return Ok(Code::Ok);
        }
        // A hook never exits with an agent's "block" code, not even for a
        // command line it cannot parse.
        Err(e) if hook_event => {
            return Err(fail(Code::WorkFailed, usage_line(&e.to_string())));
        }
        // `hermes delegation`: the subcommand's help, on stderr, exit 2 (clap's convention).
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return Ok(Code::Usage);
        }
        Err(e) => return Err(fail(Code::Usage, parse_error(&e, &args))),
    };
    check_shape(&cli)?;
    if cli.quiet {
        crate::services::home::quiet();
    }
    crate::services::color::init(cli.color);
    // The runs a person watches keep their warnings in a file under the home (`logfile.rs`).
    let logs_to_file = matches!(cli.command, None | Some(Command::Cron(_)));
    init_tracing(cli.verbose, logs_to_file, cli.quiet);
    match cli.command {
        Some(Command::Cron(CronCommand::Run { name, run })) => {
            cmd::run::cron(name, &run, cli.quiet)
        }
        Some(Command::Delegate(args)) => cmd::delegate::run(&args),
        Some(Command::Drain(args)) => cmd::drain::run(&args),
        Some(Command::Delivery(args)) => cmd::claim::run(&args),
        Some(Command::Delegation(c)) => cmd::delegation::run(c),
        Some(Command::Session(c)) => cmd::session::run(c),
        Some(Command::Host(args)) => cmd::host::run(&args, cli.quiet),
        Some(Command::Ledger(c)) => cmd::ledger::run(c),
        Some(Command::Worker(args)) => cmd::worker::run(&args, cli.quiet),
        Some(Command::Workspace(c)) => cmd::workspace::run(c),
        Some(Command::Home(a)) => cmd::home::run(a),
        Some(Command::Top) => crate::top::run(),
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

/// Refuses options that mean nothing where they were given: a subcommand with `-z`, `--resume`
/// or a dispatch option; `--resume` with `-z`; a dispatch option (or `-- CMD`) without `-z`,
/// which bare `hermes` (an interactive session) would otherwise ignore.
fn check_shape(cli: &Cli) -> anyhow::Result<()> {
    let given = cli.run.given();
    if cli.command.is_some() {
        let option = if cli.oneshot {
            Some("-z")
        } else if cli.resume.is_some() {
            Some("--resume")
        } else {
            given
        };
        if let Some(option) = option {
            return Err(fail(
                Code::Usage,
                format!(
                    "{option} before a subcommand: -z, --resume and the dispatch options are bare hermes' own; a subcommand takes its options after its name (see hermes --help)"
                ),
            ));
        }
        return Ok(());
    }
    match (cli.oneshot, &cli.resume, given) {
        (true, Some(_), _) => Err(fail(
            Code::Usage,
            "--resume re-attaches an interactive session and does not go with -z (see hermes --help)",
        )),
        (false, resume, Some(option)) => {
            let (what, example) = match option {
                "-- CMD" => ("a command after --", "hermes -z -- CMD".to_owned()),
                option => (option, format!("hermes -z {option} …")),
            };
            let instead = if resume.is_some() {
                "leave out --resume and "
            } else {
                ""
            };
            Err(fail(
                Code::Usage,
                format!(
                    "{what} needs -z: bare hermes starts an interactive session; to run one unit here, {instead}add -z ({example}) (see hermes --help)"
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// Whether `--json` was asked for (before any `--`): errors then go to stdout as JSON too.
fn wants_json(args: &[String]) -> bool {
    args.iter()
        .take_while(|a| a.as_str() != "--")
        .any(|a| a == "--json")
}

/// Whether this process runs a hook event (`hermes hook stop`, not `hook install` nor a
/// subcommand `hook` does not have).
fn is_hook_event(args: &[String]) -> bool {
    let (Some("hook"), Some(event)) = (
        args.first().map(String::as_str),
        args.get(1).map(String::as_str),
    ) else {
        return false;
    };
    let cli = Cli::command();
    cli.find_subcommand("hook").is_some_and(|hook| {
        hook.get_subcommands().any(|c| {
            c.get_name() == event && !matches!(c.get_name(), "install" | "uninstall" | "help")
        })
    })
}

/// A command line clap refused, as one line. A word where a subcommand goes gets clap's
/// suggestions (`delegaton` → `delegation`): the `-- CMD` of bare hermes would otherwise make
/// clap call it an unexpected argument.
fn parse_error(e: &clap::Error, args: &[String]) -> String {
    let unknown = e.get(ContextKind::InvalidArg).map(ToString::to_string);
    if e.kind() == ErrorKind::UnknownArgument
        && let Some(word) = args.first().filter(|w| unknown.as_ref() == Some(*w))
        && !word.starts_with('-')
    {
        let subcommands = clap::Command::new("hermes")
            .bin_name("hermes")
            .subcommands(Cli::command().get_subcommands().cloned());
        if let Err(e) = subcommands.try_get_matches_from(["hermes", word]) {
            return usage_line(&e.to_string());
        }
    }
    usage_line(&e.to_string())
}

/// clap's error as one line: the message and what it names (a missing `<ID>`, a tip), up to the
/// usage block, then where to read more: the help of the (sub)command the usage names.
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
    line.push_str(&format!(" (see {} --help)", command_path(text)));
    line
}

/// The command a clap error's usage names (`hermes delegation status`), or `hermes`.
fn command_path(text: &str) -> String {
    let usage = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage:"))
        .unwrap_or_default();
    let words: Vec<&str> = usage
        .split_whitespace()
        .take_while(|w| !w.starts_with(['[', '<', '-']))
        .collect();
    if words.first() == Some(&"hermes") {
        words.join(" ")
    } else {
        "hermes".to_owned()
    }
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
        .then(|| crate::services::config::home_dir(&crate::services::home::env_var).ok())
        .flatten()
        .map(|home| {
            let log = crate::services::logfile::LogFile::under(&home);
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
fn record_io_counts() {
    let Some(path) = std::env::var_os("HERMES_DEBUG_SYNC_COUNT") else {
        return;
    };
    let counts = hermes_ledger::io_counts();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    fn shape(line: &str) -> Result<(), String> {
        let cli = Cli::try_parse_from(std::iter::once("hermes".to_owned()).chain(words(line)))
            .expect("parses");
        check_shape(&cli).map_err(|e| e.to_string())
    }

    #[test]
    fn options_of_an_inline_run_need_z_and_resume_does_not_go_with_it() {
        assert!(shape("").is_ok());
        assert!(shape("--resume S").is_ok());
        assert!(shape("-z --goal g -- true").is_ok());
        assert!(shape("delegation list").is_ok());
        let refused = shape("-- echo hi").expect_err("refused");
        assert!(
            refused.starts_with("a command after -- needs -z"),
            "{refused}"
        );
        let refused = shape("--resume S --json").expect_err("refused");
        assert!(refused.contains("leave out --resume"), "{refused}");
        let refused = shape("-z --resume S -- true").expect_err("refused");
        assert!(refused.starts_with("--resume re-attaches"), "{refused}");
        let refused = shape("-z delegation list").expect_err("refused");
        assert!(refused.starts_with("-z before a subcommand"), "{refused}");
    }

    #[test]
    fn json_is_asked_for_before_the_command_only() {
        assert!(wants_json(&words("delegation list --json")));
        assert!(!wants_json(&words("-z -- jq --json")));
        assert!(!wants_json(&words("delegation list")));
    }

    #[test]
    fn a_usage_error_points_at_the_help_of_the_command_its_usage_names() {
        let err = Cli::try_parse_from(["hermes", "delegation", "status"]).expect_err("refused");
        let line = usage_line(&err.to_string());
        assert!(line.contains("<ID>"), "{line}");
        assert!(
            line.ends_with(" (see hermes delegation status --help)"),
            "{line}"
        );
        assert_eq!(command_path("no usage here"), "hermes");
        assert_eq!(command_path("Usage: hermes [--resume SESSION] …"), "hermes");
    }

    #[test]
    fn an_unknown_flag_of_a_subcommand_is_named_as_it_is() {
        let args = words("session end --bogus x");
        let err = Cli::try_parse_from(std::iter::once("hermes".to_owned()).chain(args.clone()))
            .expect_err("refused");
        let line = parse_error(&err, &args);
        assert!(line.contains("'--bogus'"), "{line}");
        assert!(line.ends_with("(see hermes session end --help)"), "{line}");
    }

    #[test]
    fn a_misspelled_command_gets_clap_s_suggestion() {
        let args = words("delegaton");
        let err = Cli::try_parse_from(std::iter::once("hermes".to_owned()).chain(args.clone()))
            .expect_err("refused");
        let line = parse_error(&err, &args);
        assert!(line.contains("'delegation'"), "{line}");
    }
}
