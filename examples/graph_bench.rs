//! The model API with a CUDA-graph benchmark of any bundle: every network of the bundle is
//! run on its own (inputs filled with a fixed pseudo-random pattern), as one captured CUDA
//! graph per run and, interleaved run by run, with every step launched eagerly; then the
//! bare launch + wait of the captured graph alone, the floor a run cannot go under.
//!
//! ```text
//! graph-bench BUNDLE [--runs 1000] [--warmup 20] [--device auto|cpu|cuda|cuda:N]
//! ```
//!
//! Build with `--features gpu` for the GPU engines and the eager side; without it (or on a
//! machine without a GPU) the networks run on the CPU engine and only the host time shows.
//! Times are host wall time per call (the run includes the wait for the GPU).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use hdrhistogram::Histogram;
use tether::runtime::session::Check;
use tether::runtime::tensor::view_mut;
use tether::runtime::{
    DType, Device, Model, ModelOptions, Network, PipelineSpec, RegionKind, Session,
};

struct Args {
    bundle: PathBuf,
    runs: u64,
    warmup: u64,
    device: Device,
}

fn usage(why: &str) -> ! {
    eprintln!("error: {why}");
    eprintln!(
        "usage: graph-bench BUNDLE [--runs 1000] [--warmup 20] [--device auto|cpu|cuda|cuda:N]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        bundle: PathBuf::new(),
        runs: 1000,
        warmup: 20,
        device: Device::Auto,
    };
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        match arg.as_str() {
            "--runs" => {
                a.runs = value()
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .unwrap_or_else(|| usage("--runs must be a positive integer"))
            }
            "--warmup" => a.warmup = value().parse().unwrap_or_else(|_| usage("--warmup N")),
            "--device" => {
                a.device = value()
                    .parse()
                    .unwrap_or_else(|e| usage(&format!("--device: {e}")))
            }
            s if s.starts_with('-') => usage(&format!("unknown option {s}")),
            s if a.bundle.as_os_str().is_empty() => a.bundle = PathBuf::from(s),
            s => usage(&format!("unexpected argument {s}")),
        }
    }
    if a.bundle.as_os_str().is_empty() {
        usage("give a BUNDLE");
    }
    a
}

fn options(device: Device, graphs: bool) -> ModelOptions {
    #[allow(unused_mut)]
    let mut o = ModelOptions {
        device,
        ..ModelOptions::default()
    };
    #[cfg(feature = "gpu")]
    {
        o.session.graphs = graphs;
    }
    #[cfg(not(feature = "gpu"))]
    let _ = graphs;
    o
}

/// A session running network `net` alone, its inputs filled with a fixed pattern.
fn session(model: &Model, net: &Network) -> Result<Session, Box<dyn std::error::Error>> {
    let io = net.io().clone();
    // Graph replays are checked against an eager run: bit-exact, or within 1e-3 for f32
    // outputs (libraries may pick other reduction orders between runs).
    let check = if io.outputs.iter().all(|t| t.dtype == DType::F32) {
        Check::F32Abs(1e-3)
    } else {
        Check::Exact
    };
    let mut spec = PipelineSpec::new();
    let (inputs, _) = spec.network_with_regions(
        net.name(),
        net.plan().clone(),
        RegionKind::Input,
        RegionKind::Output,
        check,
    )?;
    let mut s = model.session(spec)?;
    let mut state = 0x9E37_79B9u32;
    for (id, t) in inputs.iter().zip(&io.inputs) {
        let bytes = s.input_mut(*id)?;
        if t.dtype == DType::F32 {
            for v in view_mut::<f32>(DType::F32, bytes)? {
                // xorshift32: the same values on every machine.
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                *v = (state >> 8) as f32 / (1u32 << 24) as f32;
            }
        } else {
            bytes.fill(0);
        }
    }
    Ok(s)
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("static bounds")
}

fn line(name: &str, h: &Histogram<u64>) {
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
    println!(
        "  {name:<28} {:>8} runs  p50 {:>9.1} us  p99 {:>9.1} us  p99.9 {:>9.1} us  max {:>9.1} us",
        h.len(),
        us(0.5),
        us(0.99),
        us(0.999),
        h.max() as f64 / 1e3
    );
}

fn main() -> ExitCode {
    let args = parse_args();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let graph_model = Model::open(&args.bundle, &options(args.device, true))?;
    let on_gpu = graph_model.device() != Device::Cpu;
    // The eager side: a second model of the same bundle whose sessions launch eagerly.
    let eager_model = if on_gpu && cfg!(feature = "gpu") {
        Some(Model::open(
            &args.bundle,
            &options(graph_model.device(), false),
        )?)
    } else {
        None
    };
    println!(
        "{} on {} ({} runs each after {} warm-up, interleaved)",
        args.bundle.display(),
        graph_model.device(),
        args.runs,
        args.warmup
    );
    for (i, net) in graph_model.networks().iter().enumerate() {
        println!("network `{}`: {}", net.name(), net.choice());
        let mut variants: Vec<(&str, Session, Histogram<u64>)> = vec![(
            if on_gpu { "graph" } else { "host (CPU engine)" },
            session(&graph_model, net)?,
            hist(),
        )];
        if let Some(m) = &eager_model {
            variants.push(("eager", session(m, &m.networks()[i])?, hist()));
        }
        for (_, s, _) in &mut variants {
            for _ in 0..args.warmup {
                s.run()?;
            }
        }
        for _ in 0..args.runs {
            for (_, s, h) in &mut variants {
                let t0 = Instant::now();
                s.run()?;
                let _ = h.record((t0.elapsed().as_nanos() as u64).max(1));
            }
        }
        for (name, _, h) in &variants {
            line(name, h);
        }
        if variants.len() == 2 {
            let p50 = |h: &Histogram<u64>| h.value_at_quantile(0.5) as f64;
            println!(
                "  eager / graph at p50: {:.3}x",
                p50(&variants[1].2) / p50(&variants[0].2).max(1.0)
            );
        }
        #[cfg(feature = "gpu")]
        if let Some(d) = variants[0].1.device_mut() {
            let note = d.exec_mode().1.to_string();
            let mut floor = hist();
            let mut why = None;
            for _ in 0..args.runs {
                let t0 = Instant::now();
                if let Err(e) = d.launch_graphs_and_wait() {
                    why = Some(e);
                    break;
                }
                let _ = floor.record((t0.elapsed().as_nanos() as u64).max(1));
            }
            if let Some(e) = why.filter(|_| floor.is_empty()) {
                println!("  no bare graph launch: {e} ({note})");
            } else {
                line("bare graph launch + wait", &floor);
            }
        }
    }
    Ok(())
}
