//! The `shortlist` binary: every capability as a subcommand; exit codes are decided here.

mod cli;
mod web;

fn main() -> std::process::ExitCode {
    cli::main()
}
