//! `tether`: build, inspect, verify, run and benchmark `.bundle` files.
//!
//! Exit codes: 0 success; 1 error (unreadable input, bad bundle content, engine failure, an
//! output that cannot be written); 2 usage error (unknown option, a value that does not parse
//! or is out of range); 3 `verify` found the bundle corrupt, or its `--self-test` failed on this
//! device; 4 `doctor --self-test` could not check TensorRT here (no GPU, TensorRT or trtexec);
//! 130 interrupted (Ctrl-C).

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

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
    /// Build a bundle from a model and its family recipe (`--family NAME --help` lists the
    /// family's own arguments).
    Build(cli::build::BuildArgs),
    /// Print a bundle's manifest and its family's configuration.
    Inspect(cli::inspect::InspectArgs),
    /// Check a bundle's structure and every checksum; exit 3 if it is corrupt.
    Verify(cli::inspect::VerifyArgs),
    /// Run a bundle's family pipeline on inputs (`tether run BUNDLE --help` lists the family's
    /// own options).
    Run(cli::run::RunArgs),
    /// Measure a bundle's latency on one input (closed or open loop, graphs vs eager,
    /// percentiles per stage, a plot) or, for a text generator without an input, its
    /// prompt and generation throughput (llama-bench's pp / tg tests).
    Bench(cli::bench::BenchArgs),
    /// Describe this machine: CPU, Jetson/L4T, power mode, CUDA driver, GPUs, TensorRT.
    Doctor(cli::doctor::DoctorArgs),
}

fn main() -> ExitCode {
    // Behave like other Unix tools when the reader of stdout goes away (`tether inspect
    // --json | head`): die of SIGPIPE instead of reporting a write error.
    // SAFETY: called before any thread is spawned; restoring the default disposition of
    // SIGPIPE has no other effect on this process.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Ctrl-C, SIGTERM, SIGHUP and SIGPIPE remove the temporary files of unfinished outputs
    // (bundles, reports, plots) before ending the process: the library leaves the signals to
    // the application, which opts in here (`bench` then takes Ctrl-C over for itself).
    tether_bundle::files::remove_temp_files_on_signal();
    // A panic inside an engine is caught at its boundary and reported as one `error:` line;
    // keep the default panic message out of stderr for those.
    tether_runtime::backend::quiet_engine_panics();
    let argv: Vec<OsString> = std::env::args_os().collect();
    let command = cli::family_args::augment(Args::command(), &argv);
    let matches = match command.try_get_matches_from(&argv) {
        Ok(m) => m,
        // --help and --version go to stdout: a failed write is an error there too.
        Err(e) if !e.use_stderr() => {
            return match cli::write_out(format_args!("{e}")) {
                Ok(()) => ExitCode::SUCCESS,
                Err(w) => {
                    cli::report(&w);
                    ExitCode::from(1)
                }
            };
        }
        Err(e) => {
            // Another family's option on this bundle: say whose it is.
            if e.kind() == clap::error::ErrorKind::UnknownArgument
                && let Some(m) = cli::family_args::foreign_option(&argv)
            {
                cli::report(&anyhow::Error::new(cli::UsageError(m)));
                return ExitCode::from(2);
            }
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    let args = match Args::from_arg_matches(&matches) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    let sub = matches.subcommand().map(|(_, m)| m.clone());
    // tract-linalg warns once per process when /proc/cpuinfo has no `Features` line (qemu-user
    // on aarch64 shows the host's): it then uses its portable kernels, which is not the user's
    // concern at the default level; `-v` shows it.
    let level = match args.verbose {
        0 => "warn,tract_linalg=error",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_timestamp_millis()
        .init();
    let sub = sub.unwrap_or_default();
    let result = match args.command {
        Command::Build(a) => cli::build::run(&a, &sub),
        Command::Inspect(a) => cli::inspect::inspect(&a),
        Command::Verify(a) => cli::inspect::verify(&a),
        Command::Run(a) => cli::run::run(&a, &sub),
        Command::Bench(a) => cli::bench::bench(&a, &sub),
        Command::Doctor(a) => cli::doctor::run(&a, args.verbose),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            cli::report(&e);
            ExitCode::from(cli::exit_code(&e))
        }
    }
}
