//! Generate text from a GGUF file or Hugging Face directory on the CPU engine (a stand-in
//! for `tether run` until the CLI is wired).
//!
//! ```text
//! cargo run --release -p tether-llm --example llm_generate -- MODEL.gguf "prompt"
//!     [--chat] [--max-tokens N] [--temperature T] [--seed S] [--threads N]
//! ```

use std::io::Write;

use tether_llm::ChatMessage;
use tether_llm::generate::{GenerateParams, Generator, GeneratorOptions, Prompt};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: llm_generate MODEL PROMPT [--chat] [--max-tokens N] [--temperature T] [--seed S] [--threads N]";
    let path = args.next().ok_or(usage)?;
    let prompt = args.next().ok_or(usage)?;
    let mut chat = false;
    let mut opts = GeneratorOptions {
        context: Some(2048),
        ..GeneratorOptions::default()
    };
    let mut params = GenerateParams::greedy(64);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--chat" => chat = true,
            "--max-tokens" => params.max_tokens = val()?.parse()?,
            "--temperature" => params.sampler.temperature = val()?.parse()?,
            "--seed" => params.sampler.seed = val()?.parse()?,
            "--threads" => opts.threads = Some(val()?.parse()?),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let mut g = Generator::open(&path, &opts)?;
    let messages = [ChatMessage::new("user", prompt.clone())];
    let p = if chat {
        Prompt::Chat(&messages)
    } else {
        Prompt::Text(&prompt)
    };
    let mut run = g.generate(p, &params)?;
    let mut out = std::io::stdout().lock();
    while let Some(piece) = run.next_piece()? {
        write!(out, "{}", piece.text)?;
        out.flush()?;
    }
    let done = run.finish();
    let t = &done.timings;
    eprintln!(
        "\n[{}] prompt {} tokens in {:.1} ms ({:.1} tok/s), {} generated, {:.1} tok/s, ttft {:.1} ms; ids {:?}",
        done.finish_reason.as_str(),
        t.prompt_tokens,
        t.prompt_ms,
        t.prompt_tokens_per_s(),
        t.generated_tokens,
        t.generation_tokens_per_s(),
        t.time_to_first_token_ms,
        done.tokens
    );
    Ok(())
}
