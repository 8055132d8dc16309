//! The `portcullis` binary: parses the command line and runs it (see [`portcullis_host::cli`]).

use std::process::ExitCode;

use clap::Parser;
use portcullis_host::cli::{self, Cli};

fn main() -> ExitCode {
    // Usage errors exit with 2 (and --help/--version with 0) inside `parse`.
    let cli = Cli::parse();
    match cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // `{:#}` prints the whole cause chain: "context: cause: root cause".
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
