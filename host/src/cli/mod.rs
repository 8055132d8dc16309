//! The `portcullis` command line: `serve`, `check-config`, `plugins`, and the offline SCRAM
//! credential tools (`scram add|list|delete`, like `kafka-storage format --add-scram`).
//!
//! Exit codes: 0 success, 1 error (printed as `error: ...` with its causes), 2 usage.
//!
//! | module    | its one job                                                        |
//! |-----------|--------------------------------------------------------------------|
//! | `args`    | the clap definitions: every command and its arguments              |
//! | `load`    | loading a command's configuration; the file-store-only check       |
//! | `serve`   | `serve`                                                            |
//! | `inspect` | `check-config` and `plugins`                                       |
//! | `scram`   | `scram add\|list\|delete`                                           |
//! | `store`   | `store check\|recover` and `cluster status`                         |
//! | `reload`  | `reload`: asks the running node to reload, over its admin endpoint  |

mod args;
mod inspect;
mod load;
mod reload;
mod scram;
mod serve;
mod store;

use std::io;

pub use args::{
    Cli, ClusterCommand, Command, ConfigArg, OptionalConfigArg, ReloadArgs, ScramAdd, ScramCommand,
    ScramDelete, StoreCommand, StoreRecover,
};
use inspect::{check_config, plugins};
use scram::{read_password, scram_add, scram_delete, scram_list};
use serve::serve;
use store::{cluster_status, store_check, store_recover};

/// Runs a parsed command line.
///
/// # Errors
/// Whatever the command failed with; the caller prints it and exits with 1.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match cli.command {
        Command::Serve(args) => serve(&args.config),
        Command::CheckConfig(args) => check_config(&args.config, &mut out),
        Command::Plugins(args) => plugins(args.config.as_deref(), &mut out),
        Command::Scram(ScramCommand::Add(args)) => {
            let password = read_password(io::stdin().lock())?;
            scram_add(&args, &password, &mut out)
        }
        Command::Scram(ScramCommand::List(args)) => scram_list(&args.config, &mut out),
        Command::Scram(ScramCommand::Delete(args)) => scram_delete(&args, &mut out),
        Command::Store(StoreCommand::Check(args)) => store_check(&args.config, &mut out),
        Command::Cluster(ClusterCommand::Status(args)) => cluster_status(&args.config, &mut out),
        Command::Store(StoreCommand::Recover(args)) => store_recover(&args.config.config, &mut out),
        Command::Reload(args) => Ok(reload::reload(
            &args.config.config,
            args.admin.as_deref(),
            &mut out,
        )?),
    }
}

#[cfg(test)]
mod tests;
