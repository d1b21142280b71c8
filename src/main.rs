//! The `kintsugi` binary: one entry point for memory nodes, the control
//! plane, benchmarks, chaos experiments and the demo.

#![forbid(unsafe_code)]

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    cli::init_tracing(args.verbose);
    if let Err(e) = harness::launch::stop_with_parent() {
        eprintln!("error: {e:#}");
        return std::process::ExitCode::FAILURE;
    }
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
