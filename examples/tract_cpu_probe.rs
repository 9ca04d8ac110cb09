//! Why is the CPU engine (tract) slow on this CPU? Loads an ONNX model the way tether's CPU
//! engine does and reports what tract decided on this machine and where the time goes:
//!
//! - the instruction set tract detected and the matrix-multiply dispatch ladder (tiers);
//! - which matrix-multiply kernels the optimised model uses, and how many operations each;
//! - the latency of a whole run (p50, min, mean) on 1 or N threads;
//! - a per-operator profile (time per operator kind, the slowest nodes);
//! - denormal (subnormal) f32 values in every intermediate tensor, and the run again with
//!   flush-to-zero / denormals-are-zero set (`--ftz`, x86_64, calling thread).
//!
//! ```text
//! tract-cpu-probe MODEL.onnx --shape 1x3x320x320 [--image IMG.png] [--runs 30] [--warmup 5]
//!                 [--threads N] [--ftz]
//! ```
//! tract's own knobs apply (`TRACT_CPU_ISA=-avx512f` takes the AVX-512 kernels out,
//! `TRACT_X86_KIND=amd|intel` forces the vendor cost model), so one binary can try them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tract_linalg::multithread::Executor;
use tract_onnx::prelude::*;

struct Args {
    model: PathBuf,
    shape: Vec<usize>,
    image: Option<PathBuf>,
    runs: usize,
    warmup: usize,
    threads: usize,
    ftz: bool,
}

fn usage(why: &str) -> ! {
    eprintln!("error: {why}");
    eprintln!(
        "usage: tract-cpu-probe MODEL.onnx --shape 1x3xHxW [--image IMG.png] [--runs 30] [--warmup 5] [--threads N] [--ftz]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        model: PathBuf::new(),
        shape: Vec::new(),
        image: None,
        runs: 30,
        warmup: 5,
        threads: 1,
        ftz: false,
    };
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        let number = |v: String, what: &str| -> usize {
            v.parse()
                .ok()
                .filter(|&n| n > 0)
                .unwrap_or_else(|| usage(&format!("{what} must be a positive integer")))
        };
        match arg.as_str() {
            "--shape" => {
                a.shape = value()
                    .split('x')
                    .map(|d| d.parse().unwrap_or_else(|_| usage("--shape 1x3xHxW")))
                    .collect()
            }
            "--image" => a.image = Some(PathBuf::from(value())),
            "--runs" => a.runs = number(value(), "--runs"),
            "--warmup" => a.warmup = value().parse().unwrap_or_else(|_| usage("--warmup N")),
            "--threads" => a.threads = number(value(), "--threads"),
            "--ftz" => a.ftz = true,
            s if s.starts_with('-') => usage(&format!("unknown option {s}")),
            s => a.model = PathBuf::from(s),
        }
    }
    if a.model.as_os_str().is_empty() || a.shape.len() != 4 {
        usage("give MODEL.onnx and --shape 1x3xHxW");
    }
    a
}

/// The input: an image stretched to HxW, RGB planes in [0, 1], or a fixed pseudo-random
/// pattern in [0, 1).
fn input(a: &Args) -> Result<Tensor, Box<dyn std::error::Error>> {
    let (c, h, w) = (a.shape[1], a.shape[2], a.shape[3]);
    let mut data = vec![0f32; a.shape.iter().product()];
    match &a.image {
        Some(p) => {
            let img = image::open(p)?.to_rgb8();
            let img = image::imageops::resize(
                &img,
                w as u32,
                h as u32,
                image::imageops::FilterType::Triangle,
            );
            for (x, y, px) in img.enumerate_pixels() {
                for ch in 0..c.min(3) {
                    data[ch * h * w + y as usize * w + x as usize] = f32::from(px[ch]) / 255.0;
                }
            }
        }
        None => {
            let mut s = 0x9E37_79B9u32;
            for v in &mut data {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                *v = (s >> 8) as f32 / (1u32 << 24) as f32;
            }
        }
    }
    Ok(Tensor::from_shape(&a.shape, &data)?)
}

/// Set flush-to-zero and denormals-are-zero on this thread (x86_64 MXCSR bits 15 and 6).
#[cfg(target_arch = "x86_64")]
fn set_ftz() -> bool {
    #[allow(deprecated)]
    // SAFETY: reading and writing MXCSR only changes how this thread rounds subnormals.
    unsafe {
        use std::arch::x86_64::{_mm_getcsr, _mm_setcsr};
        _mm_setcsr(_mm_getcsr() | 0x8040);
    }
    true
}

#[cfg(not(target_arch = "x86_64"))]
fn set_ftz() -> bool {
    false
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn timed(
    plan: &Arc<TypedSimplePlan>,
    x: &Tensor,
    warmup: usize,
    runs: usize,
) -> TractResult<Vec<Duration>> {
    let mut state = TypedSimpleState::new(plan)?;
    for _ in 0..warmup {
        state.run(tvec!(x.clone().into_tvalue()))?;
    }
    let mut t = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        state.run(tvec!(x.clone().into_tvalue()))?;
        t.push(t0.elapsed());
    }
    t.sort();
    Ok(t)
}

fn report(label: &str, t: &[Duration]) {
    let mean = t.iter().map(Duration::as_secs_f64).sum::<f64>() / t.len() as f64 * 1e3;
    println!(
        "{label}: p50 {:.2} ms  min {:.2} ms  mean {:.2} ms  p90 {:.2} ms  ({} runs)",
        percentile(t, 0.5),
        percentile(t, 0.0),
        mean,
        percentile(t, 0.9),
        t.len()
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = parse_args();
    print_machine();

    let onnx = std::fs::read(&a.model)?;
    let mut model = tract_onnx::onnx()
        .with_ignore_value_info(true)
        .model_for_read(&mut &onnx[..])?;
    model.set_input_fact(
        0,
        InferenceFact::dt_shape(f32::datum_type(), a.shape.as_slice()),
    )?;
    let t0 = Instant::now();
    let typed = model.into_typed()?.into_optimized()?;
    println!("optimised in {:.0} ms", t0.elapsed().as_secs_f64() * 1e3);
    print_kernels(&typed);

    let executor = (a.threads > 1).then(|| Executor::multithread_with_name(a.threads, "probe"));
    let plan =
        typed
            .clone()
            .into_runnable_with_options(&tract_onnx::tract_core::runtime::RunOptions {
                executor,
                ..Default::default()
            })?;
    let x = input(&a)?;
    let t = timed(&plan, &x, a.warmup, a.runs)?;
    report(&format!("run on {} thread(s)", a.threads), &t);

    profile(&plan, &x, typed.nodes().len(), 5)?.print();

    if a.ftz {
        if set_ftz() {
            let t = timed(&plan, &x, a.warmup, a.runs)?;
            report("with FTZ/DAZ (calling thread)", &t);
        } else {
            println!("--ftz: not an x86_64 build");
        }
    }
    Ok(())
}

/// The CPU's name, the instruction set tract detected, its matrix-multiply tiers and the
/// tract knobs set in the environment.
fn print_machine() {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let isa = tract_linalg::isa::native();
    println!("cpu: {cpu}");
    println!("tract ISA: {isa:?}");
    let tiers: Vec<&str> = tract_linalg::mmm_tiers::for_isa(&isa)
        .iter()
        .map(|t| t.name)
        .collect();
    println!("tract mmm tiers: {}", tiers.join(" > "));
    for knob in [
        "TRACT_CPU_ISA",
        "TRACT_X86_KIND",
        "TRACT_AVX512_FMA_UNITS",
        "TRACT_AMX_BF16",
    ] {
        if let Ok(v) = std::env::var(knob) {
            println!("knob {knob}={v}");
        }
    }
}

/// Which matrix-multiply kernels the optimised graph runs, and how many operations each.
fn print_kernels(typed: &TypedModel) {
    let mut kernels: BTreeMap<String, usize> = BTreeMap::new();
    for node in typed.nodes() {
        for line in node.op().info().unwrap_or_default() {
            if let Some(rest) = line.strip_prefix("Mult: ") {
                let k = rest.split_once(" with ").map_or(rest, |(_, k)| k);
                *kernels.entry(k.to_string()).or_default() += 1;
            }
        }
    }
    println!("matrix-multiply kernels (operations using each):");
    for (k, n) in &kernels {
        println!("  {n:>4}  {k}");
    }
}

/// Per-operator and per-node times over `runs` runs, and the subnormal f32 values of every
/// intermediate tensor of the first run.
struct Profile {
    runs: usize,
    per_op: BTreeMap<String, Duration>,
    per_node: Vec<(Duration, String)>,
    subnormal: u64,
    values: u64,
    /// `(subnormal values, node)` for every node output that has any.
    worst: Vec<(u64, String)>,
}

fn profile(
    plan: &Arc<TypedSimplePlan>,
    x: &Tensor,
    nodes: usize,
    runs: usize,
) -> TractResult<Profile> {
    let mut state = TypedSimpleState::new(plan)?;
    let mut p = Profile {
        runs,
        per_op: BTreeMap::new(),
        per_node: vec![(Duration::ZERO, String::new()); nodes],
        subnormal: 0,
        values: 0,
        worst: Vec::new(),
    };
    for r in 0..runs {
        state.run_plan_with_eval(
            tvec!(x.clone().into_tvalue()),
            |ctx, op_state, node, inputs| {
                let t0 = Instant::now();
                let out = tract_onnx::tract_core::plan::eval(ctx, op_state, node, inputs);
                let dt = t0.elapsed();
                *p.per_op.entry(node.op().name().to_string()).or_default() += dt;
                p.per_node[node.id].0 += dt;
                if p.per_node[node.id].1.is_empty() {
                    p.per_node[node.id].1 = format!("{} ({})", node.name, node.op().name());
                }
                if r == 0
                    && let Ok(outs) = &out
                {
                    for v in outs.iter() {
                        if let Some(plain) = v.as_plain_ram()
                            && plain.datum_type() == DatumType::F32
                            && let Ok(s) = plain.as_slice::<f32>()
                        {
                            let n = s.iter().filter(|f| f.is_subnormal()).count() as u64;
                            p.subnormal += n;
                            p.values += s.len() as u64;
                            if n > 0 {
                                p.worst
                                    .push((n, format!("{} ({})", node.name, node.op().name())));
                            }
                        }
                    }
                }
                out
            },
        )?;
    }
    Ok(p)
}

impl Profile {
    fn print(mut self) {
        let runs = self.runs as f64;
        let total: Duration = self.per_op.values().sum();
        let mut ops: Vec<(&String, &Duration)> = self.per_op.iter().collect();
        ops.sort_by(|x, y| y.1.cmp(x.1));
        println!(
            "profile ({} runs, {:.2} ms a run in operators):",
            self.runs,
            total.as_secs_f64() * 1e3 / runs
        );
        for (op, d) in ops.iter().take(12) {
            println!(
                "  {:>6.2} ms  {:>5.1} %  {op}",
                d.as_secs_f64() * 1e3 / runs,
                d.as_secs_f64() / total.as_secs_f64().max(1e-12) * 100.0
            );
        }
        self.per_node.sort_by_key(|x| std::cmp::Reverse(x.0));
        println!("slowest nodes:");
        for (d, name) in self.per_node.iter().take(8) {
            println!("  {:>6.2} ms  {name}", d.as_secs_f64() * 1e3 / runs);
        }
        self.worst.sort_by_key(|x| std::cmp::Reverse(x.0));
        println!(
            "subnormal f32 values in intermediate tensors: {} of {} ({:.4} %){}",
            self.subnormal,
            self.values,
            self.subnormal as f64 / self.values.max(1) as f64 * 100.0,
            self.worst
                .first()
                .map(|(n, w)| format!("; most in {w}: {n}"))
                .unwrap_or_default()
        );
    }
}
