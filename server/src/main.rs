//! The `shortlist` binary: every capability as a subcommand; exit codes are decided here.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
