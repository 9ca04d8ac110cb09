//! llama-bench's metrics for a GGUF file or Hugging Face directory on the CPU engine:
//! `pp128`, `pp512`, `tg128` (tokens/s), time to first token, inter-token latency.
//!
//! ```text
//! cargo run --release -p tether-llm --example llm_bench -- MODEL.gguf [--threads N]
//!     [--reps N] [--pp 128,512] [--tg 128] [--context N] [--isa scalar|avx2|neon|neon-dot]
//! ```

use tether_llm::bench::{BenchOptions, run};
use tether_llm::generate::{Generator, GeneratorOptions};
use tether_llm::kernels::Isa;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: llm_bench MODEL.gguf [--threads N] [--reps N] [--pp 128,512] [--tg 128]")?;
    let mut gopts = GeneratorOptions {
        context: Some(1024),
        ..GeneratorOptions::default()
    };
    let mut bopts = BenchOptions::default();
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--threads" => gopts.threads = Some(val()?.parse()?),
            "--reps" => bopts.repetitions = val()?.parse()?,
            "--pp" => {
                bopts.prompt = val()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--tg" => bopts.generate = val()?.parse()?,
            "--context" => gopts.context = Some(val()?.parse()?),
            "--isa" => {
                let name = val()?;
                gopts.isa = Some(
                    Isa::available()
                        .into_iter()
                        .find(|i| i.name() == name)
                        .ok_or(format!("isa {name} not available here"))?,
                )
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let t0 = std::time::Instant::now();
    let mut g = Generator::open(&path, &gopts)?;
    eprintln!(
        "opened {path} in {:.0} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    let name = std::path::Path::new(&path)
        .file_name()
        .map_or(path.clone(), |n| n.to_string_lossy().into_owned());
    let (model, state) = g.model_and_state();
    let report = run(model, state, &bopts)?;
    print!("{}", report.to_markdown(&name));
    Ok(())
}
