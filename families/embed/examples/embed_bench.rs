//! CPU latency of sentence embedding, single thread.
//!
//! ```sh
//! cargo run --release -p tether-embed --example embed_bench -- MODEL.onnx TOKENIZER.json [--runs N] [--lazy]
//! ```
//!
//! Texts of 8, 16, 47, 92 and 256 tokens (from `golden/reference.py`'s
//! sentences), one at a time, and a batch of 8 short sentences. Every bucket
//! is prepared before timing (`--lazy`: only the 6 buckets used, on first
//! use, during the warm-up runs; for comparing peak memory). Each line: p50 / mean of `Embedder::embed`
//! (tokenise + network + pooling) in milliseconds over `--runs` runs (default
//! 30) after 3 warm-up runs, and the p50 of tokenisation alone. Prints the host
//! CPU model and the load average. Compare with `golden/bench_ort.py`.

use std::time::Instant;

use tether_embed::config::EmbedConfig;
use tether_embed::{EMBEDDING_DIM, Embedder, Prepare};
use tether_testkit::bench;

const LONG: &str = "Autonomous mobile robots in a warehouse share aisles with people, forklifts and other robots, so every navigation decision is checked against a map that is updated many times per second from lidar, cameras and wheel odometry. ";

fn stats(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v.iter().sum::<f64>() / v.len() as f64)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        return Err("usage: bench MODEL.onnx TOKENIZER.json [--runs N]".into());
    }
    let runs = bench::runs_arg(&args, 30)?;
    let onnx = std::fs::read(&args[1])?;
    let tok = std::fs::read(&args[2])?;
    let prepare = if args.iter().any(|a| a == "--lazy") {
        Prepare::Lazy
    } else {
        Prepare::All
    };
    let mut e = Embedder::from_parts(onnx, &tok, EmbedConfig::default(), prepare)?;
    let cpu = bench::cpu_model();
    println!("tract CPU engine, all-MiniLM-L6-v2 int8, 1 thread, {runs} runs per line");
    println!("cpu: {cpu}");
    let long2 = LONG.repeat(2);
    let long8 = LONG.repeat(8);
    let texts = [
        "A man is eating food.",
        "Turn left at the next intersection, then go straight for 20 meters.",
        LONG,
        long2.as_str(),
        long8.as_str(),
    ];
    for text in texts {
        let tokens = e.token_ids(text)?.len();
        let bucket = e
            .seq_buckets()
            .iter()
            .find(|&&b| b >= tokens)
            .copied()
            .unwrap_or(0);
        let mut net = Vec::new();
        let mut tk = Vec::new();
        for i in 0..runs + 3 {
            let t = Instant::now();
            std::hint::black_box(e.token_ids(text)?);
            let dt_tok = t.elapsed();
            let t = Instant::now();
            std::hint::black_box(e.embed(text)?);
            let dt = t.elapsed();
            if i >= 3 {
                net.push(dt.as_secs_f64() * 1e3);
                tk.push(dt_tok.as_secs_f64() * 1e3);
            }
        }
        let (p50, mean) = stats(net);
        let (tok50, _) = stats(tk);
        println!(
            "{tokens:4} tokens (bucket [1, {bucket}]): embed p50 {p50:.2} ms, mean {mean:.2} ms; tokenise p50 {tok50:.3} ms"
        );
    }
    let batch = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The robot should stop at the red line.",
        "Where is the charging station?",
        "Pick up the blue cup from the kitchen table.",
        "The quick brown fox jumps over the lazy dog.",
        "I can't find my keys; have you seen them?",
        "A dog is playing in the park.",
    ];
    let mut out = vec![[0f32; EMBEDDING_DIM]; batch.len()];
    let mut times = Vec::new();
    for i in 0..runs + 3 {
        let t = Instant::now();
        e.embed_batch(&batch, &mut out)?;
        if i >= 3 {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let (p50, mean) = stats(times);
    println!(
        "batch of 8 short sentences (bucket [8, 16]): p50 {p50:.2} ms, mean {mean:.2} ms ({:.2} ms per sentence)",
        p50 / 8.0
    );
    println!("buckets prepared: {:?}", e.prepared());
    println!("loadavg: {}", bench::load_average());
    Ok(())
}
