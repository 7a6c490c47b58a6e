//! `hermes completions SHELL`.

use clap::CommandFactory;

use crate::args::Cli;

/// Prints the completion script for `shell`.
pub fn run(shell: clap_complete::Shell) {
    clap_complete::generate(shell, &mut Cli::command(), "hermes", &mut std::io::stdout());
}
