//! Writes a synthetic checkpoint of SmolLM2-135M's shape (width 576, 9 query heads and 3 KV
//! heads of 64, FFN 1536, vocabulary 49,152, tied embeddings) as a GGUF file, every matrix
//! of one type with pseudo-random values (`tether_llm::testing::synthetic_gguf`): a model to
//! build a bundle from and benchmark (`tether bench`) where the real weights cannot travel.
//! Its text is meaningless; its speed is the real shape's.
//!
//! ```text
//! cargo run --release -p tether-llm --example synthetic_gguf -- OUT.gguf [--layers 30] [--type Q4_1]
//! ```

use tether_llm::quant::TensorType;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = args
        .next()
        .ok_or("usage: synthetic_gguf OUT.gguf [--layers N] [--type Q4_1]")?;
    let (mut layers, mut ty) = (30u32, TensorType::Q4_1);
    while let Some(a) = args.next() {
        let val = args.next().ok_or(format!("{a} needs a value"))?;
        match a.as_str() {
            "--layers" => layers = val.parse()?,
            "--type" => {
                ty = TensorType::ALL
                    .into_iter()
                    .find(|t| t.name().eq_ignore_ascii_case(&val))
                    .ok_or(format!("--type {val}: one of {:?}", TensorType::ALL))?
            }
            _ => return Err(format!("unknown argument {a}").into()),
        }
    }
    let cfg = tether_llm::testing::smollm2_config(layers);
    let bytes = tether_llm::testing::synthetic_gguf(&cfg, &|_, _| ty).to_bytes();
    std::fs::write(&out, &bytes)?;
    eprintln!(
        "{out}: {layers} layers of SmolLM2-135M's shape, matrices {}, {} bytes",
        ty.name(),
        bytes.len()
    );
    Ok(())
}
