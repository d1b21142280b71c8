//! The `kintsugi` binary: one entry point for memory nodes, the control
//! plane, benchmarks, chaos experiments and the demo.

#![forbid(unsafe_code)]

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
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
