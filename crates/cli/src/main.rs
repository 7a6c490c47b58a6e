//! The `hermes` binary: parses the command line, runs the command, maps errors to exit codes.

mod agent_dispatch;
mod agent_proc;
mod app;
mod args;
mod binding;
mod cmd;
mod color;
mod config;
mod deliver;
mod dispatch;
mod exit;
mod home;
mod hook;
mod interactive;
mod logfile;
mod mcp;
mod metrics;
mod output;
mod progress_view;
mod relay;
mod reports;
mod session_host;
mod tasks_file;
mod top;

fn main() -> std::process::ExitCode {
    home::make_files_private();
    exit::install_panic_hook();
    let code = match app::run() {
        Ok(code) => std::process::ExitCode::from(code as u8),
        Err(err) => exit::report(&err),
    };
    app::record_io_counts();
    code
}
