//! `tether bench BUNDLE` without an INPUT: the family's throughput tests
//! ([`Runner::throughput_bench`]; a text generator's llama-bench `pp`/`tg` tests), reported
//! in the style of the latency report (the machine header, one table) and as JSON
//! (`docs/cli-json.md`, `"mode": "throughput"`).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use anyhow::Result;
use clap::ArgMatches;
use clap::parser::ValueSource;
use serde_json::json;
use tether_bundle::{Bundle, Verify};
use tether_family::family::{RunOptions, ThroughputOptions, ThroughputReport, find};

use super::BenchArgs;
use super::machine::Machine;
use crate::cli::escape;
use crate::cli::run::{JSON_SCHEMA_VERSION, loaded, runner_on};
use crate::outln;
use tether::families::REGISTRY;

/// Options of the latency benchmark that have no meaning for throughput tests: given
/// explicitly, they are refused rather than ignored.
const LATENCY_ONLY: [&str; 10] = [
    "duration", "warmup", "rate", "deadline", "graph", "eager", "compare", "plot", "staged",
    "floor",
];

/// Run the throughput tests of the bundle's family.
pub(super) fn bench(
    a: &BenchArgs,
    matches: &ArgMatches,
    threads: usize,
    threads_why: &str,
) -> Result<ExitCode> {
    let options = RunOptions {
        device: a.device.clone(),
        threads: Some(threads),
        precision: a.precision,
        sync: a.sync,
        staging: a.staging,
        ..RunOptions::default()
    };
    if let Err(e) = options.device() {
        crate::usage!("--device {e}");
    }
    // The family is read from the mapped manifest: one benchmarked per input is told so
    // before its model is loaded (and before any option of the latency benchmark is
    // refused as the throughput tests'; the family has none).
    let opened = Bundle::open(&a.bundle, Verify::Lazy);
    let no_input = |family: &str| -> Result<ExitCode> {
        crate::usage!(
            "give an INPUT: the {family} family is benchmarked on an input (`tether bench BUNDLE INPUT`, or `--text TEXT` for a text family)"
        );
    };
    if let Ok(b) = &opened
        && let Some(f) = find(REGISTRY, b.identity().family)
        && !f.has_throughput_bench()
    {
        return no_input(f.name());
    }
    if let Some(name) = LATENCY_ONLY
        .iter()
        .find(|n| matches.value_source(n) == Some(ValueSource::CommandLine))
    {
        crate::usage!(
            "--{name} is an option of the latency benchmark, which times runs on an INPUT (`tether bench BUNDLE INPUT`); without one, bench runs the family's throughput tests, which do not take it"
        );
    }
    let bundle = loaded(&a.bundle, opened, "bench model.bundle")?;
    let (bundle, family, mut runner) = runner_on(bundle, &a.bundle, matches, &options)?;
    // The throughput tests look at the flag between tests; no runner to cancel.
    let (stop, _) = super::stop_on_ctrl_c();
    let repetitions = a.runs.unwrap_or(DEFAULT_REPETITIONS) as usize;
    let Some(report) = runner.throughput_bench(&ThroughputOptions { repetitions }, &stop) else {
        return no_input(family.name());
    };
    let report = report?;
    let interrupted = stop.load(Ordering::SeqCst);
    let env = runner.environment();
    let machine = Machine::probe(&env, a.sync, a.staging, a.precision, threads_why);
    let engines: BTreeMap<String, String> = runner.engines().into_iter().collect();
    let doc = json!({
        "schema_version": JSON_SCHEMA_VERSION,
        "command": "bench",
        "mode": "throughput",
        "bundle": { "path": a.bundle.display().to_string(), "name": bundle.identity().name },
        "family": family.name(),
        "engines": engines,
        "environment": machine.json(),
        "repetitions": repetitions,
        "interrupted": interrupted,
        "tests": report.tests.iter().map(|t| json!({
            "name": t.name,
            "per_run": t.per_run,
            "unit": t.unit,
            "mean_per_s": t.mean,
            // One timed run has no sample deviation: null, as the text prints "n/a".
            "stddev_per_s": (t.runs.len() >= 2).then_some(t.stddev),
            "runs_per_s": t.runs,
        })).collect::<Vec<_>>(),
        // A line of no samples has no figures: null, as the text prints "n/a".
        "latencies_ms": report.latencies_ms.iter().map(|l| {
            let v = |x: f64| (l.count > 0).then_some(x);
            json!({
                "name": l.name, "count": l.count, "p50": v(l.p50), "p99": v(l.p99),
                "p99.9": v(l.p999), "max": v(l.max), "mean": v(l.mean),
            })
        }).collect::<Vec<_>>(),
        "notes": report.notes.iter().cloned().collect::<BTreeMap<String, String>>(),
    });
    let show = a.json.as_ref().is_none_or(|p| p.as_os_str() != "-");
    match &a.json {
        Some(p) if p.as_os_str() != "-" => super::write_json_report(p, &doc)?,
        Some(_) => outln!("{}", serde_json::to_string_pretty(&doc)?)?,
        None => {}
    }
    if show {
        print(a, &machine, &report, repetitions, interrupted)?;
    }
    Ok(if interrupted {
        ExitCode::from(crate::cli::EXIT_INTERRUPTED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Whether the family's note `k: v` only repeats a line of the machine header (the text
/// form prints it once; the JSON keeps every note): its thread count under `cpu threads`, its
/// kernels named in the `engine` line.
fn repeats_header(k: &str, v: &str, machine: &Machine) -> bool {
    machine.lines.iter().any(|(mk, mv)| {
        (mk.ends_with(k) && mv.split_whitespace().next() == Some(v))
            || (k == "kernels" && *mk == "engine" && mv.contains(v))
    })
}

/// Timed repetitions of each test without `--runs` (llama-bench's `-r 5`).
const DEFAULT_REPETITIONS: u64 = 5;

/// Samples a latency line needs before its p99.9 (nearest rank) is not simply its maximum.
const TAIL_SAMPLES: usize = 1000;

fn print(
    a: &BenchArgs,
    machine: &Machine,
    r: &ThroughputReport,
    repetitions: usize,
    interrupted: bool,
) -> Result<()> {
    outln!(
        "{} (throughput tests; {repetitions} timed run{} each{})",
        a.bundle.display(),
        if repetitions == 1 { "" } else { "s" },
        if interrupted { "; interrupted" } else { "" }
    )?;
    for (k, v) in &machine.lines {
        outln!("  {:<13} {}", k, escape(v))?;
    }
    for (k, v) in &r.notes {
        if !repeats_header(k, v, machine) {
            outln!("  {:<13} {}", escape(k), escape(v))?;
        }
    }
    outln!()?;
    outln!(
        "  {:<14} {:>12} {:>24} {:>8}",
        "test",
        "per run",
        "per second (mean ± sd)",
        "cv %"
    )?;
    for t in &r.tests {
        // One timed run has no sample deviation: "n/a", not a 0 that reads as no spread.
        let (sd, cv) = if t.runs.len() < 2 {
            ("n/a".to_string(), "n/a".to_string())
        } else {
            let cv = if t.mean > 0.0 {
                t.stddev / t.mean * 100.0
            } else {
                0.0
            };
            (format!("{:.2}", t.stddev), format!("{cv:.2}"))
        };
        outln!(
            "  {:<14} {:>12} {:>24} {:>8}",
            escape(&t.name),
            match t.per_run {
                1 => format!("1 {}", t.unit.strip_suffix('s').unwrap_or(t.unit)),
                n => format!("{n} {}", t.unit),
            },
            format!("{:.2} ± {sd}", t.mean),
            cv
        )?;
    }
    if interrupted {
        // The family checks for Ctrl-C between runs: a test cut short has fewer runs.
        let short: Vec<String> = r
            .tests
            .iter()
            .filter(|t| t.runs.len() < repetitions)
            .map(|t| {
                format!(
                    "{} ran {} of {repetitions} runs",
                    escape(&t.name),
                    t.runs.len()
                )
            })
            .collect();
        outln!(
            "  interrupted by Ctrl-C after the run in progress: {}; what came after did not run",
            if short.is_empty() {
                "the tests listed ran in full".to_string()
            } else {
                short.join(", ")
            }
        )?;
    }
    // As the latency benchmark warns of its total: a test whose runs spread widely.
    for t in &r.tests {
        if t.runs.len() >= 2 && t.mean > 0.0 && t.stddev / t.mean > super::stats::NOISY_CV {
            outln!(
                "  warning: {}'s coefficient of variation is {:.1} % (> {} %): the figures are noisy",
                escape(&t.name),
                t.stddev / t.mean * 100.0,
                super::stats::NOISY_CV * 100.0
            )?;
        }
    }
    if !r.latencies_ms.is_empty() {
        outln!()?;
        outln!(
            "  {:<30} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "latency",
            "count",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms",
            "mean ms"
        )?;
        for l in &r.latencies_ms {
            // No samples (e.g. `--n-gen 1`: no interval between tokens): n/a, not zeros
            // that read as no latency.
            let ms = |v: f64| {
                if l.count == 0 {
                    "n/a".to_string()
                } else {
                    format!("{v:.3}")
                }
            };
            outln!(
                "  {:<30} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}",
                escape(&l.name),
                l.count,
                ms(l.p50),
                ms(l.p99),
                ms(l.p999),
                ms(l.max),
                ms(l.mean)
            )?;
        }
        // Nearest rank: below 1,000 samples p99.9 is the largest sample, one slow step.
        if r.latencies_ms
            .iter()
            .any(|l| l.count > 0 && l.count < TAIL_SAMPLES)
        {
            outln!(
                "  note: in a line of fewer than {TAIL_SAMPLES} samples p99.9 is the maximum (nearest rank)"
            )?;
        }
    }
    Ok(())
}
