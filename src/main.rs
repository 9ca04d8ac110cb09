//! `tether`: build, inspect, verify and run `.bundle` files.
//!
//! Exit codes: 0 success; 1 error (unreadable input, bad bundle content,
//! engine failure); 2 usage error; 3 `verify` found the bundle corrupt;
//! 4 `doctor --self-test` could not check TensorRT here (no GPU, TensorRT or trtexec).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

/// Build, inspect, verify and run tether bundles.
#[derive(Parser, Debug)]
#[command(name = "tether", version, about, long_about = None)]
struct Args {
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Build a bundle from an ONNX model and its family recipe.
    Build(cli::build::BuildArgs),
    /// Print a bundle's manifest.
    Inspect(cli::inspect::InspectArgs),
    /// Check a bundle's structure and every checksum; exit 3 if it is corrupt.
    Verify(cli::inspect::VerifyArgs),
    /// Run a bundle's family pipeline on inputs (detection: image files).
    Run(cli::run::RunArgs),
    /// Measure a bundle's latency on one input (p50/p99 over many runs).
    Bench(cli::run::BenchArgs),
    /// Describe this machine: CPU, Jetson/L4T, power mode, CUDA driver, GPUs, TensorRT.
    Doctor(cli::doctor::DoctorArgs),
}

fn main() -> ExitCode {
    // Behave like other Unix tools when the reader of stdout goes away
    // (`tether inspect --json | head`): die of SIGPIPE instead of panicking
    // on a failed print.
    // SAFETY: called before any thread is spawned; restoring the default
    // disposition of SIGPIPE has no other effect on this process.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args = Args::parse();
    let level = match args.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_timestamp_millis()
        .init();
    let result = match args.command {
        Command::Build(a) => cli::build::run(&a),
        Command::Inspect(a) => cli::inspect::inspect(&a),
        Command::Verify(a) => cli::inspect::verify(&a),
        Command::Run(a) => cli::run::run(&a),
        Command::Bench(a) => cli::run::bench(&a),
        Command::Doctor(a) => cli::doctor::run(&a, args.verbose),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            cli::report(&e);
            ExitCode::from(1)
        }
    }
}
