//! The `kintsugi` binary: one entry point for memory nodes, the control
//! plane, benchmarks, chaos experiments and the demo.

#![forbid(unsafe_code)]

mod cli;

use clap::{CommandFactory, FromArgMatches};

fn main() -> std::process::ExitCode {
    // A daemon's `--config FILE` becomes flags ahead of the typed ones.
    let argv = match cli::config_file::expand(std::env::args_os().collect()) {
        Ok(argv) => argv,
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            return std::process::ExitCode::FAILURE;
        }
    };
    let matches = cli::Cli::command().get_matches_from(argv);
    match cli::config_file::printed(&matches) {
        Ok(Some(text)) => {
            print!("{text}");
            return std::process::ExitCode::SUCCESS;
        }
        Ok(None) => {}
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            return std::process::ExitCode::FAILURE;
        }
    }
    let args = cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    cli::init_tracing(args.verbose, args.quiet_by_default());
    if let Err(e) = harness::launch::stop_with_parent() {
        eprintln!("error: {e}");
        return std::process::ExitCode::FAILURE;
    }
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error and its sources on one line. The libraries' errors show their
/// source in their own message as well as through `source()`, so a cause
/// already said is not said again.
fn chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}
