//! One line typed at the session's prompt, split like a shell would and parsed with clap.

use clap::{Parser, Subcommand};

use crate::args::DispatchArgs;

/// A line of the interactive session.
#[derive(Debug, Parser)]
#[command(
    name = "",
    no_binary_name = true,
    disable_help_subcommand = true,
    disable_help_flag = true,
    disable_version_flag = true
)]
struct LineCli {
    #[command(subcommand)]
    command: LineCommand,
}

/// What a line asks for.
#[derive(Debug, Subcommand)]
pub enum LineCommand {
    /// Dispatch a unit into this session in the background.
    Delegate {
        #[command(flatten)]
        dispatch: Box<DispatchArgs>,
    },
    /// Run a command in the foreground (a tool call); `inject` results follow its output.
    Run {
        /// The command (after `--`, or directly).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Running, queued and recent units of this session, with live progress.
    #[command(alias = "ps")]
    Agents,
    /// One unit: its children and their delivery.
    Status {
        /// The delegation id.
        id: String,
    },
    /// The end of a child's transcript.
    Log {
        /// The delegation id.
        id: String,
        /// Which task, numbered from 1 as displayed (as `hermes delegation log --task`); every
        /// task if omitted.
        task: Option<u32>,
    },
    /// Stop one unit of this session, or all of them.
    Stop {
        /// A delegation id, or `all`.
        target: String,
    },
    /// The commands.
    #[command(alias = "?")]
    Help,
    /// End the session (asks first while children run).
    #[command(alias = "quit")]
    Exit,
}

/// What a line turned out to be.
#[derive(Debug)]
pub enum Parsed {
    /// Nothing but blanks.
    Empty,
    /// A command.
    Command(Box<LineCommand>),
    /// Not a command: what to tell the person.
    Invalid(String),
}

/// Splits and parses one line.
pub fn parse(text: &str) -> Parsed {
    let Some(words) = shlex::split(text) else {
        return Parsed::Invalid("unbalanced quotes or a trailing backslash".into());
    };
    if words.is_empty() {
        return Parsed::Empty;
    }
    match LineCli::try_parse_from(&words) {
        Ok(cli) => Parsed::Command(Box::new(cli.command)),
        Err(e) => {
            let text = e.to_string();
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("not a command")
                .trim_start_matches("error: ")
                .to_owned();
            Parsed::Invalid(format!("{first} (type help for the commands)"))
        }
    }
}

/// The text of `help`.
pub const HELP: &str = "\
commands (each line is a turn; ready results print at the end of a turn, or while idle):
  delegate [DISPATCH] -- CMD…   run CMD in the background for this session
                                (DISPATCH: --goal G --context C --toolsets a,b --role leaf|orchestrator
                                 --model M --delivery after_turn|inject --timeout SECS --cwd DIR
                                 --group NAME --tasks FILE)
  run [--] CMD…                 run CMD in the foreground (Ctrl-C stops it); `inject` results follow
  agents                        running, queued and recent units of this session
  status ID                     one unit: its children, progress and delivery
  log ID [N]                    the end of the transcript of task N (from 1), or of every task
  stop ID|all                   stop one unit of this session, or all of them
  help                          this text
  exit                          end the session (asks first while children run); Ctrl-D too
";

#[cfg(test)]
mod tests {
    use super::*;

    fn command(text: &str) -> LineCommand {
        match parse(text) {
            Parsed::Command(c) => *c,
            other => panic!("{text:?} gave {other:?}"),
        }
    }

    #[test]
    fn delegate_takes_dispatch_options_and_a_quoted_command() {
        let LineCommand::Delegate { dispatch } =
            command("delegate --goal 'slow job' -- sh -c 'sleep 1; echo done'")
        else {
            panic!("not delegate")
        };
        assert_eq!(dispatch.goal.as_deref(), Some("slow job"));
        assert_eq!(dispatch.command, ["sh", "-c", "sleep 1; echo done"]);
    }

    #[test]
    fn run_takes_a_command_with_or_without_dashes() {
        for text in ["run -- ls -l", "run ls -l"] {
            let LineCommand::Run { command } = command(text) else {
                panic!("not run")
            };
            assert_eq!(command, ["ls", "-l"], "{text}");
        }
    }

    #[test]
    fn log_takes_an_optional_task() {
        let LineCommand::Log { id, task } = command("log deleg_000000000001 2") else {
            panic!("not log")
        };
        assert_eq!(id, "deleg_000000000001");
        assert_eq!(task, Some(2));
    }

    #[test]
    fn bad_lines_say_why() {
        assert!(matches!(parse("   "), Parsed::Empty));
        assert!(matches!(parse("frobnicate"), Parsed::Invalid(_)));
        assert!(matches!(parse("run"), Parsed::Invalid(_)));
        let Parsed::Invalid(why) = parse("delegate -- 'unterminated") else {
            panic!("accepted")
        };
        assert!(why.contains("quotes"), "{why}");
        assert!(matches!(command("quit"), LineCommand::Exit));
    }
}
