//! The benchmark llama-bench users compare: prompt processing `ppN` (N prompt tokens in
//! one request, tokens per second), text generation `tgN` (N tokens decoded one at a time
//! from an empty cache, tokens per second), time to first token, and the inter-token
//! latency percentiles of the generation runs.
//!
//! The method is llama-bench's (`tools/llama-bench/llama-bench.cpp`, `test_prompt` /
//! `test_gen`): one warm-up run, then `repetitions` timed runs, each from an empty KV cache;
//! tokens are pseudo-random ids (no sampling, no tokenizer); `pp` produces the last token's
//! logits, `tg` each token's; the mean and standard deviation of the per-run tokens per
//! second are reported. Time to first token is a `ppN` run plus the first decoded token.
//! `examples/llm_bench.rs` calls [`run`]; the CLI's `bench` calls [`run_until`], which ends
//! after the run in progress on Ctrl-C.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::forward::{ForwardError, LogitsFor, Model, State};
use crate::sample::philox4x32_10;

/// What to measure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BenchOptions {
    /// Prompt lengths (`pp`), e.g. `[128, 512]`.
    pub prompt: Vec<usize>,
    /// Generated tokens (`tg`), e.g. 128; 0 skips.
    pub generate: usize,
    /// Timed runs per test (after one warm-up).
    pub repetitions: usize,
    /// Prompt length before the first token for the time-to-first-token figure.
    pub ttft_prompt: usize,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            prompt: vec![128, 512],
            generate: 128,
            repetitions: 5,
            ttft_prompt: 128,
        }
    }
}

/// Mean and standard deviation of tokens per second over the runs of one test.
#[derive(Clone, Debug, PartialEq)]
pub struct Throughput {
    /// `pp128`, `tg128`, ...
    pub name: String,
    /// Tokens per run.
    pub tokens: usize,
    /// Mean tokens per second.
    pub mean: f64,
    /// Standard deviation of tokens per second (sample, n - 1).
    pub stddev: f64,
    /// Every run's tokens per second.
    pub runs: Vec<f64>,
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Latency {
    /// Samples.
    pub count: usize,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

impl Latency {
    /// Percentiles of `samples` (nearest rank).
    pub fn of(samples: &[f64]) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let rank = |q: f64| s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
        Latency {
            count: s.len(),
            p50: rank(0.5),
            p99: rank(0.99),
            p999: rank(0.999),
            max: s[s.len() - 1],
            mean: s.iter().sum::<f64>() / s.len() as f64,
        }
    }
}

/// The results.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchReport {
    /// `pp` tests, then `tg`.
    pub throughput: Vec<Throughput>,
    /// Time to first token: a `ttft_prompt`-token prompt pass and the first token's greedy
    /// choice, per run.
    pub time_to_first_token_ms: Latency,
    /// Intervals between consecutive generated tokens over every timed `tg` run.
    pub inter_token_ms: Latency,
    /// Threads of the forward pass.
    pub threads: usize,
    /// Instruction set of the kernels.
    pub isa: &'static str,
}

/// Mean and sample standard deviation (n - 1; 0 for one value) of per-run rates.
pub(crate) fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n.max(1.0);
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// A test's result from its timed runs' rates; `None` when no timed run finished (cut off
/// by Ctrl-C in its warm-up).
fn throughput_of(name: String, tokens: usize, runs: Vec<f64>) -> Option<Throughput> {
    if runs.is_empty() {
        return None;
    }
    let (mean, stddev) = mean_std(&runs);
    Some(Throughput {
        name,
        tokens,
        mean,
        stddev,
        runs,
    })
}

/// Pseudo-random token ids (Philox of the index) below `n_vocab`.
fn tokens(n: usize, n_vocab: usize, salt: u32) -> Vec<u32> {
    (0..n)
        .map(|i| philox4x32_10([i as u32, salt, 0, 0], [0x7e7e, 0x11])[0] % n_vocab as u32)
        .collect()
}

/// Runs the benchmark on `model` with `state` (its cache is reset before every run).
///
/// # Errors
/// [`ForwardError::ContextFull`] when a test does not fit the state's context.
pub fn run(
    model: &Model<'_>,
    state: &mut State,
    o: &BenchOptions,
) -> Result<BenchReport, ForwardError> {
    run_until(model, state, o, &AtomicBool::new(false))
}

/// [`run`], ending early once `stop` is set (Ctrl-C): the run in progress finishes, the
/// test it belongs to keeps the timed runs done so far (its `runs` then has fewer than
/// `repetitions` entries; a test with none is left out), and the tests after it do not run.
///
/// # Errors
/// As [`run`].
pub fn run_until(
    model: &Model<'_>,
    state: &mut State,
    o: &BenchOptions,
    stop: &AtomicBool,
) -> Result<BenchReport, ForwardError> {
    let n_vocab = model.hparams().n_vocab;
    let reps = o.repetitions.max(1);
    let stopped = || stop.load(Ordering::SeqCst);
    let mut throughput = Vec::new();
    for &n in &o.prompt {
        let prompt = tokens(n, n_vocab, n as u32);
        let mut runs = Vec::with_capacity(reps);
        for rep in 0..=reps {
            if stopped() {
                break;
            }
            state.cache_mut().reset();
            let t0 = Instant::now();
            model.forward(state, &prompt, LogitsFor::Last)?;
            let s = t0.elapsed().as_secs_f64();
            if rep > 0 {
                runs.push(n as f64 / s);
            }
        }
        match throughput_of(format!("pp{n}"), n, runs) {
            Some(t) => throughput.push(t),
            None => break,
        }
    }
    let mut itl = Vec::new();
    if o.generate > 0 && !stopped() {
        let n = o.generate;
        let decode = tokens(n, n_vocab, 0xabcd);
        let mut runs = Vec::with_capacity(reps);
        let mut times = Vec::with_capacity(n);
        for rep in 0..=reps {
            if stopped() {
                break;
            }
            state.cache_mut().reset();
            times.clear();
            let t0 = Instant::now();
            let mut prev = t0;
            for &t in &decode {
                model.forward(state, &[t], LogitsFor::Last)?;
                let now = Instant::now();
                times.push((now - prev).as_secs_f64() * 1e3);
                prev = now;
            }
            let s = t0.elapsed().as_secs_f64();
            if rep > 0 {
                runs.push(n as f64 / s);
                // The first token of a run starts the stream: intervals are between tokens.
                itl.extend_from_slice(&times[1..]);
            }
        }
        throughput.extend(throughput_of(format!("tg{n}"), n, runs));
    }
    let mut ttft = Vec::new();
    if o.ttft_prompt > 0 {
        let prompt = tokens(o.ttft_prompt, n_vocab, 0x77);
        for rep in 0..=reps {
            if stopped() {
                break;
            }
            state.cache_mut().reset();
            let t0 = Instant::now();
            model.forward(state, &prompt, LogitsFor::Last)?;
            // The first token: the prompt pass's greedy choice.
            std::hint::black_box(crate::sample::argmax(state.logits()));
            if rep > 0 {
                ttft.push(t0.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    Ok(BenchReport {
        throughput,
        time_to_first_token_ms: Latency::of(&ttft),
        inter_token_ms: Latency::of(&itl),
        threads: state.threads(),
        isa: model.isa().name(),
    })
}

impl BenchReport {
    /// A llama-bench-style markdown table plus the latency lines.
    pub fn to_markdown(&self, model_name: &str) -> String {
        let mut s = String::new();
        s.push_str("| model | threads | isa | test | t/s |\n|---|---:|---|---:|---:|\n");
        for t in &self.throughput {
            s.push_str(&format!(
                "| {model_name} | {} | {} | {} | {:.2} ± {:.2} |\n",
                self.threads, self.isa, t.name, t.mean, t.stddev
            ));
        }
        let l = &self.time_to_first_token_ms;
        s.push_str(&format!(
            "\ntime to first token: p50 {:.2} ms, p99 {:.2} ms ({} runs)\n",
            l.p50, l.p99, l.count
        ));
        let l = &self.inter_token_ms;
        s.push_str(&format!(
            "inter-token latency: p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms ({} intervals)\n",
            l.p50, l.p99, l.p999, l.max, l.count
        ));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        let l = Latency::of(&v);
        assert_eq!(
            (l.p50, l.p99, l.p999, l.max, l.count),
            (500.0, 990.0, 999.0, 1000.0, 1000)
        );
        assert_eq!(Latency::of(&[]), Latency::default());
        let (m, s) = mean_std(&[2.0, 4.0]);
        assert_eq!(m, 3.0);
        assert!((s - 2f64.sqrt()).abs() < 1e-12);
    }
}
