//! The `hermes` binary: everything it does is `hermes_cli::app::main`.

fn main() -> std::process::ExitCode {
    hermes_cli::app::main()
}
