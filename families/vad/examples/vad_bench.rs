//! CPU latency of the streaming VAD, one chunk at a time, single thread.
//!
//! ```sh
//! cargo run --release -p tether-vad --example vad_bench -- MODEL.onnx WAV [--runs N]
//! ```
//!
//! The WAV is read and resampled once (not timed); then its 512-sample chunks
//! are pushed with `Vad::push_chunk` over and over (a reset at the end of the
//! file), `--runs` chunks timed after 50 warm-up chunks. Prints p50 / p99 /
//! mean per chunk in microseconds, the real-time factor (32 ms of audio per
//! chunk), the host CPU model and the load average (a shared host is often
//! busy). Compare with `golden/bench_ort.py` on the same file.

use std::time::Instant;

use tether_testkit::bench;
use tether_vad::{CHUNK_SAMPLES, Vad, VadConfig, read_wav};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        return Err("usage: bench MODEL.onnx WAV [--runs N]".into());
    }
    let runs = bench::runs_arg(&args, 2000)?;
    let onnx = std::fs::read(&args[1])?;
    let audio = read_wav(&args[2])?;
    let chunks: Vec<&[f32]> = audio.samples.chunks_exact(CHUNK_SAMPLES).collect();
    let mut vad = Vad::from_onnx(&onnx, VadConfig::default())?;
    let mut times = Vec::with_capacity(runs);
    let mut k = 0;
    for i in 0..runs + 50 {
        if k == chunks.len() {
            vad.reset()?;
            k = 0;
        }
        let t = Instant::now();
        let r = vad.push_chunk(chunks[k])?;
        let dt = t.elapsed();
        std::hint::black_box(r);
        k += 1;
        if i >= 50 {
            times.push(dt.as_secs_f64() * 1e6);
        }
    }
    times.sort_by(f64::total_cmp);
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    let p = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let cpu = bench::cpu_model();
    println!(
        "tract CPU engine, Silero VAD streaming, 1 thread, {runs} chunks of {CHUNK_SAMPLES} samples"
    );
    println!("cpu: {cpu}");
    println!("loadavg: {}", bench::load_average());
    println!(
        "per chunk: p50 {:.1} us, p99 {:.1} us, mean {:.1} us; real-time factor {:.4} (32 ms of audio per chunk)",
        p(0.5),
        p(0.99),
        mean,
        mean / 32_000.0
    );
    Ok(())
}
