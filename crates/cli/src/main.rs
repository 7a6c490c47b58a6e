//! The `hermes` binary: everything it does is `hermes::app::main`.

fn main() -> std::process::ExitCode {
    hermes::app::main()
}
