//! What the families' CPU benchmark examples (`families/*/examples/*_bench.rs`) share: their
//! `--runs N` option and the host lines every report ends with, so that a measurement on a
//! shared, busy host can be recognised.

/// `--runs N` of an example's arguments, `default` when absent.
///
/// # Errors
/// `--runs` without a value, or a value that is not a count.
pub fn runs_arg(args: &[String], default: usize) -> Result<usize, Box<dyn std::error::Error>> {
    match args.iter().position(|a| a == "--runs") {
        Some(i) => Ok(args.get(i + 1).ok_or("--runs needs a value")?.parse()?),
        None => Ok(default),
    }
}

/// The host CPU's name, as `tether bench` and `tether doctor` print it.
pub use tether_targets::cpu_model;

/// /proc/loadavg as the kernel writes it (1, 5 and 15 minute load averages, runnable and
/// total tasks, last PID); empty where there is none.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}
