//! Choosing the next token from the logits: greedy, or a chain of filters and a draw from a
//! counter-based random generator.
//!
//! **The chain** (the order of llama.cpp's default `common_params_sampling::samplers`,
//! without the DRY, top-n-sigma, typical-p and XTC stages, which are off by default there):
//!
//! 1. **repetition penalty** over the last `repeat_last_n` tokens of the sequence (prompt
//!    included, as `llama-cli` feeds the prompt to its sampler): each distinct token in that
//!    window has its logit divided by `repeat_penalty` when positive, multiplied when
//!    negative (llama.cpp `penalty_repeat`, CTRL's rule with the sign fix);
//! 2. **greedy** when `temperature <= 0`: the largest logit wins (lowest id on a tie), and
//!    nothing below runs;
//! 3. **top-k**: keep the `top_k` largest logits (0 = off);
//! 4. **top-p** (nucleus): keep the smallest set of the most probable tokens whose
//!    probabilities (softmax of the logits at this point) add up to at least `top_p`
//!    (1 = off);
//! 5. **min-p**: keep tokens whose probability is at least `min_p` times the most probable
//!    one's, i.e. `logit >= max_logit + ln(min_p)` (0 = off);
//! 6. **temperature**: divide the surviving logits by `temperature`;
//! 7. **draw**: `u` uniform in `[0, 1)` from Philox4x32-10 (below); walk the survivors in
//!    ascending token id, accumulating `exp(logit - max)`, and take the first token whose
//!    running sum exceeds `u * total`.
//!
//! Every filter keeps at least one token. Defaults ([`SamplerParams::default`]) are
//! llama.cpp's: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, repetition penalty 1.0
//! (off) over 64 tokens.
//!
//! **The random generator** is Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random
//! numbers: as easy as 1, 2, 3", SC 2011; the Random123 library, and cuRAND's default
//! generator): a pure function of a 64-bit key (the seed) and a 128-bit counter, here
//! `(step, request)` with `step` the index of the generated token in its request. The same
//! seed gives the same draws on every run, on every thread count and on any device that
//! evaluates the same function (the GPU sampler of issue 26), with no state to carry or
//! reset. Checked against Random123's published known-answer vectors.

use crate::forward::Hparams;

/// Tokens of penalty window a generator's sampler keeps at most (CPU and GPU alike): a
/// larger `repeat_last_n` covers this many.
pub const MAX_PENALTY_WINDOW: usize = 4096;

/// The smallest positive temperature (below it, and above 0, is refused): the sampler
/// scales the logits by `1 / temperature`, and a scale above 1e6 would overflow `f32` for
/// logits beyond 3.4e32 / 1e6, which no sane model emits but a smaller bound could not rule
/// out (at 1e-38 a logit of 4 already overflows, and the draw would be NaN). As the
/// temperature falls the draw tends to the greedy one; give 0 for that.
pub const MIN_TEMPERATURE: f32 = 1e-6;

/// The repetition penalty's bounds: a penalised logit is divided by it (positive logits) or
/// multiplied by it (negative ones), so outside `[1e-6, 1e6]` a logit could overflow `f32`
/// as [`MIN_TEMPERATURE`] says (at 1e-40 a logit of 1 already becomes infinite and wins
/// every draw).
pub const REPEAT_PENALTY_RANGE: (f32, f32) = (1e-6, 1e6);

/// Philox4x32 multipliers and Weyl key increments (Salmon et al. 2011, Random123
/// `philox.h`: `PHILOX_M4x32_0/1`, `PHILOX_W32_0/1`).
const PHILOX_M0: u32 = 0xD251_1F53;
const PHILOX_M1: u32 = 0xCD9E_8D57;
const PHILOX_W0: u32 = 0x9E37_79B9;
const PHILOX_W1: u32 = 0xBB67_AE85;

/// Philox4x32 with 10 rounds: four 32-bit random words from a counter and a key.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k[0] = k[0].wrapping_add(PHILOX_W0);
            k[1] = k[1].wrapping_add(PHILOX_W1);
        }
        let p0 = u64::from(PHILOX_M0) * u64::from(c[0]);
        let p1 = u64::from(PHILOX_M1) * u64::from(c[2]);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// The uniform draw in `[0, 1)` of `(seed, request, step)`: the top 24 bits of Philox's
/// first output word, so the value is exact in f32 on every device.
pub fn uniform(seed: u64, request: u64, step: u64) -> f32 {
    let r = philox4x32_10(
        [
            step as u32,
            (step >> 32) as u32,
            request as u32,
            (request >> 32) as u32,
        ],
        [seed as u32, (seed >> 32) as u32],
    );
    (r[0] >> 8) as f32 * (1.0 / (1u32 << 24) as f32)
}

/// Parameters of the sampler chain (see the [module docs](self) for the order).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplerParams {
    /// `<= 0`: greedy. Otherwise the logits are divided by it before the draw.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; 0 = off.
    pub top_k: usize,
    /// Nucleus mass in `(0, 1]`; 1 = off.
    pub top_p: f32,
    /// Minimum probability relative to the most likely token, `[0, 1)`; 0 = off.
    pub min_p: f32,
    /// Repetition penalty, > 0; 1 = off.
    pub repeat_penalty: f32,
    /// Tokens of the penalty window (the last ones of prompt + generation); 0 = off.
    pub repeat_last_n: usize,
    /// Random generator key.
    pub seed: u64,
    /// Random stream within a seed (two requests with one seed and different `request`
    /// draw independently; the same `(seed, request)` draws the same).
    pub request: u64,
}

impl Default for SamplerParams {
    fn default() -> Self {
        SamplerParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
            request: 0,
        }
    }
}

impl SamplerParams {
    /// Greedy decoding (temperature 0, no penalty).
    pub fn greedy() -> SamplerParams {
        SamplerParams {
            temperature: 0.0,
            repeat_penalty: 1.0,
            ..SamplerParams::default()
        }
    }

    /// Checks every value's range.
    ///
    /// # Errors
    /// [`SamplerError`] naming the parameter and the value.
    pub fn validate(&self) -> Result<(), SamplerError> {
        let bad = |name: &'static str, value: f32, accepted: &'static str| {
            Err(SamplerError {
                name,
                value,
                accepted,
            })
        };
        if !self.temperature.is_finite()
            || (self.temperature > 0.0 && self.temperature < MIN_TEMPERATURE)
        {
            return bad(
                "temperature",
                self.temperature,
                "<= 0 for greedy, or a finite number >= 1e-6",
            );
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", self.top_p, "0 < top_p <= 1");
        }
        if !(self.min_p >= 0.0 && self.min_p < 1.0) {
            return bad("min_p", self.min_p, "0 <= min_p < 1");
        }
        let (lo, hi) = REPEAT_PENALTY_RANGE;
        if !(self.repeat_penalty >= lo && self.repeat_penalty <= hi) {
            return bad(
                "repeat_penalty",
                self.repeat_penalty,
                "1e-6 to 1e6 (1: off)",
            );
        }
        Ok(())
    }
}

/// A sampler parameter out of range.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[error("sampling parameter `{name}` = {}: accepted {accepted}", shown(*value))]
pub struct SamplerError {
    /// The parameter.
    pub name: &'static str,
    /// The value seen.
    pub value: f32,
    /// The accepted range.
    pub accepted: &'static str,
}

/// `v` as a person reads it: `0.8`, `1e-38` (not 38 zeros), `1e30`.
pub fn shown(v: f32) -> String {
    if v != 0.0 && v.is_finite() && !(1e-4..1e9).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Candidate {
    id: u32,
    logit: f32,
}

/// Sorts candidates by logit descending, lower id first on ties (a total order, so every
/// implementation agrees).
fn by_logit_desc(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// The sampler of one sequence: its penalty window and its scratch, allocated once for the
/// vocabulary. [`sample`](Self::sample) allocates nothing.
pub struct Sampler {
    n_vocab: usize,
    candidates: Vec<Candidate>,
    /// Ring buffer of the last tokens of the sequence (capacity fixed at creation).
    history: Vec<u32>,
    history_len: usize,
    history_next: usize,
    seen: Vec<bool>,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("n_vocab", &self.n_vocab)
            .field("window", &self.history.len())
            .finish()
    }
}

impl Sampler {
    /// A sampler for `n_vocab` tokens with a penalty window of up to `max_last_n` tokens.
    pub fn new(n_vocab: usize, max_last_n: usize) -> Sampler {
        Sampler {
            n_vocab,
            candidates: vec![Candidate::default(); n_vocab],
            history: vec![0; max_last_n],
            history_len: 0,
            history_next: 0,
            seen: vec![false; n_vocab],
        }
    }

    /// For a model's vocabulary.
    pub fn for_model(hp: &Hparams, max_last_n: usize) -> Sampler {
        Sampler::new(hp.n_vocab, max_last_n)
    }

    /// Forgets the sequence (a new request).
    pub fn reset(&mut self) {
        self.history_len = 0;
        self.history_next = 0;
    }

    /// Records a token of the sequence (prompt or generated) for the penalty window.
    pub fn accept(&mut self, token: u32) {
        let cap = self.history.len();
        if cap == 0 {
            return;
        }
        self.history[self.history_next] = token;
        self.history_next = (self.history_next + 1) % cap;
        self.history_len = (self.history_len + 1).min(cap);
    }

    /// The next token from `logits` (`n_vocab` values; penalised in place), for draw `step`
    /// of the request.
    ///
    /// # Panics
    /// When `logits` is not `n_vocab` long.
    pub fn sample(&mut self, logits: &mut [f32], p: &SamplerParams, step: u64) -> u32 {
        assert_eq!(logits.len(), self.n_vocab);
        self.penalise(logits, p);
        if p.temperature <= 0.0 {
            return argmax(logits);
        }
        for (i, (c, &l)) in self.candidates.iter_mut().zip(logits.iter()).enumerate() {
            *c = Candidate {
                id: i as u32,
                logit: l,
            };
        }
        let mut n = self.n_vocab;
        let mut sorted = false;
        if p.top_k > 0 && p.top_k < n {
            let k = p.top_k;
            self.candidates.select_nth_unstable_by(k - 1, by_logit_desc);
            self.candidates[..k].sort_unstable_by(by_logit_desc);
            n = k;
            sorted = true;
        }
        if p.top_p < 1.0 {
            n = self.top_p(n, sorted, p.top_p);
            sorted = true;
        }
        let cands = &mut self.candidates[..n];
        if p.min_p > 0.0 {
            let max = cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit));
            let min_logit = max + p.min_p.ln();
            let mut kept = 0;
            for i in 0..cands.len() {
                if cands[i].logit >= min_logit {
                    cands[kept] = cands[i];
                    kept += 1;
                }
            }
            n = kept.max(1);
        }
        let cands = &mut self.candidates[..n];
        if sorted {
            // The draw walks ascending ids (the order with no filter at all).
            cands.sort_unstable_by_key(|c| c.id);
        }
        let inv_t = 1.0 / p.temperature;
        let max = cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit)) * inv_t;
        let mut total = 0.0f32;
        for c in cands.iter_mut() {
            c.logit = (c.logit * inv_t - max).exp();
            total += c.logit;
        }
        let target = uniform(p.seed, p.request, step) * total;
        let mut acc = 0.0f32;
        for c in cands.iter() {
            acc += c.logit;
            if acc > target {
                return c.id;
            }
        }
        cands[cands.len() - 1].id
    }

    fn penalise(&mut self, logits: &mut [f32], p: &SamplerParams) {
        if p.repeat_penalty == 1.0 || p.repeat_last_n == 0 || self.history_len == 0 {
            return;
        }
        let cap = self.history.len();
        let n = p.repeat_last_n.min(self.history_len);
        for i in 0..n {
            let t = self.history[(self.history_next + cap - 1 - i) % cap] as usize;
            if t >= self.n_vocab || self.seen[t] {
                continue;
            }
            self.seen[t] = true;
            let l = &mut logits[t];
            if *l <= 0.0 {
                *l *= p.repeat_penalty;
            } else {
                *l /= p.repeat_penalty;
            }
        }
        for i in 0..n {
            let t = self.history[(self.history_next + cap - 1 - i) % cap] as usize;
            if t < self.n_vocab {
                self.seen[t] = false;
            }
        }
    }

    /// Keeps the most probable prefix of the first `n` candidates whose mass reaches
    /// `top_p`; sorts them (descending) first if needed, by growing partial selections so a
    /// full-vocabulary sort is rarely paid.
    fn top_p(&mut self, n: usize, sorted: bool, top_p: f32) -> usize {
        let cands = &mut self.candidates[..n];
        let max = cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit));
        let total: f32 = cands.iter().map(|c| (c.logit - max).exp()).sum();
        let target = top_p * total;
        let mut k = if sorted { n } else { 64.min(n) };
        loop {
            if !sorted {
                if k < n {
                    cands.select_nth_unstable_by(k - 1, by_logit_desc);
                }
                cands[..k].sort_unstable_by(by_logit_desc);
            }
            let mut acc = 0.0f32;
            for (i, c) in cands[..k].iter().enumerate() {
                acc += (c.logit - max).exp();
                if acc >= target {
                    return i + 1;
                }
            }
            if k == n {
                return n;
            }
            k = (k * 4).min(n);
        }
    }
}

/// Index of the largest value (the lowest index on ties; NaN never wins).
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in x.iter().enumerate() {
        if v > best_v {
            best_v = v;
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philox_matches_random123_known_answers() {
        // Random123 `tests/kat_vectors`, the three "philox4x32 10" lines: counter, key,
        // expected output.
        let kat: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
            (
                [0, 0, 0, 0],
                [0, 0],
                [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8],
            ),
            (
                [u32::MAX; 4],
                [u32::MAX; 2],
                [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
            ),
            (
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0],
                [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
            ),
        ];
        for (ctr, key, want) in kat {
            assert_eq!(philox4x32_10(ctr, key), want);
        }
    }

    #[test]
    fn uniform_draws_are_uniform_and_keyed() {
        let n = 100_000;
        let mut buckets = [0u32; 10];
        for step in 0..n {
            let u = uniform(42, 0, step);
            assert!((0.0..1.0).contains(&u));
            buckets[(u * 10.0) as usize] += 1;
        }
        for b in buckets {
            assert!((b as f64 - n as f64 / 10.0).abs() < 500.0, "{buckets:?}");
        }
        assert_eq!(uniform(42, 0, 7), uniform(42, 0, 7));
        assert_ne!(uniform(42, 0, 7), uniform(43, 0, 7));
        assert_ne!(uniform(42, 0, 7), uniform(42, 1, 7));
    }

    fn params(temperature: f32) -> SamplerParams {
        SamplerParams {
            temperature,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 0,
            seed: 1,
            request: 0,
        }
    }

    #[test]
    fn greedy_takes_the_largest_logit_and_penalty_changes_it() {
        let mut s = Sampler::new(5, 4);
        let logits = [1.0, 3.0, 2.9, -1.0, 0.0];
        assert_eq!(s.sample(&mut logits.clone(), &params(0.0), 0), 1);
        // Token 1 was just produced: a penalty of 1.1 lowers 3.0 to 2.727 < 2.9.
        s.accept(1);
        let mut p = params(0.0);
        p.repeat_penalty = 1.1;
        p.repeat_last_n = 4;
        let mut l = logits;
        assert_eq!(s.sample(&mut l, &p, 0), 2);
        assert!((l[1] - 3.0 / 1.1).abs() < 1e-6 && l[2] == 2.9);
        // Negative logits are multiplied; each token is penalised once however often seen.
        s.accept(3);
        s.accept(3);
        let mut l = logits;
        s.sample(&mut l, &p, 0);
        assert!((l[3] - -1.1).abs() < 1e-6, "{l:?}");
        // Outside the window: 4 tokens later, token 1 is no longer penalised.
        for _ in 0..4 {
            s.accept(0);
        }
        let mut l = logits;
        assert_eq!(s.sample(&mut l, &p, 0), 1);
    }

    #[test]
    fn draws_follow_the_softmax() {
        // p = softmax([0, ln 2, ln 3, -inf..]) = [1/6, 2/6, 3/6].
        let mut s = Sampler::new(4, 0);
        let logits = [0.0, 2f32.ln(), 3f32.ln(), -1e30];
        let mut counts = [0u32; 4];
        let n = 60_000;
        for step in 0..n {
            counts[s.sample(&mut logits.clone(), &params(1.0), step) as usize] += 1;
        }
        for (i, want) in [1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0, 0.0].iter().enumerate() {
            let got = counts[i] as f64 / n as f64;
            assert!((got - want).abs() < 0.01, "token {i}: {got} vs {want}");
        }
        // Temperature 0.5 squares the odds: [1, 4, 9] / 14.
        let mut counts = [0u32; 4];
        for step in 0..n {
            counts[s.sample(&mut logits.clone(), &params(0.5), step) as usize] += 1;
        }
        assert!(
            (counts[2] as f64 / n as f64 - 9.0 / 14.0).abs() < 0.01,
            "{counts:?}"
        );
    }

    #[test]
    fn filters_keep_what_llama_cpp_keeps() {
        // probabilities ~ [0.5, 0.25, 0.125, 0.0625, 0.0625] (logits ln p).
        let probs = [0.5f32, 0.25, 0.125, 0.0625, 0.0625];
        let logits: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
        let reachable = |p: SamplerParams| {
            let mut s = Sampler::new(5, 0);
            let mut seen = [false; 5];
            for step in 0..4000 {
                seen[s.sample(&mut logits.clone(), &p, step) as usize] = true;
            }
            seen
        };
        let mut p = params(1.0);
        p.top_k = 2;
        assert_eq!(reachable(p), [true, true, false, false, false]);
        let mut p = params(1.0);
        p.top_p = 0.8; // 0.5 + 0.25 = 0.75 < 0.8: the third is needed
        assert_eq!(reachable(p), [true, true, true, false, false]);
        let mut p = params(1.0);
        p.top_p = 0.74;
        assert_eq!(reachable(p), [true, true, false, false, false]);
        let mut p = params(1.0);
        p.min_p = 0.2; // >= 0.1: keeps 0.5, 0.25, 0.125
        assert_eq!(reachable(p), [true, true, true, false, false]);
        let mut p = params(1.0);
        p.top_k = 1;
        assert_eq!(reachable(p), [true, false, false, false, false]);
    }

    #[test]
    fn top_p_over_a_large_vocabulary_without_top_k() {
        let n = 50_000;
        // A few likely tokens among many unlikely ones, scattered ids.
        let mut logits = vec![-10.0f32; n];
        for (i, id) in [49_999usize, 7, 31_000, 123].iter().enumerate() {
            logits[*id] = 5.0 - i as f32;
        }
        let mut s = Sampler::new(n, 0);
        let mut p = params(1.0);
        p.top_p = 0.9;
        let mut seen = std::collections::BTreeSet::new();
        for step in 0..2000 {
            seen.insert(s.sample(&mut logits.clone(), &p, step));
        }
        assert!(
            seen.iter().all(|id| [49_999, 7, 31_000, 123].contains(id)),
            "{seen:?}"
        );
        assert!(seen.contains(&49_999) && seen.contains(&7));
    }

    #[test]
    fn same_seed_same_tokens() {
        let logits: Vec<f32> = (0..1000)
            .map(|i| ((i * 7919) % 1000) as f32 / 100.0)
            .collect();
        let run = |seed| {
            let mut s = Sampler::new(1000, 64);
            let p = SamplerParams {
                seed,
                ..SamplerParams::default()
            };
            (0..50)
                .map(|step| s.sample(&mut logits.clone(), &p, step))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
    }

    #[test]
    fn values_are_shown_as_read() {
        assert_eq!(shown(0.8), "0.8");
        assert_eq!(shown(0.0), "0");
        assert_eq!(shown(1e-38), "1e-38");
        assert_eq!(shown(-1e30), "-1e30");
        assert_eq!(shown(f32::NAN), "NaN");
    }

    #[test]
    fn parameters_are_checked() {
        let mut p = SamplerParams {
            top_p: 0.0,
            ..SamplerParams::default()
        };
        assert_eq!(
            p.validate().unwrap_err().to_string(),
            "sampling parameter `top_p` = 0: accepted 0 < top_p <= 1"
        );
        p = SamplerParams {
            min_p: 1.0,
            ..SamplerParams::default()
        };
        assert!(p.validate().is_err());
        p = SamplerParams {
            temperature: f32::NAN,
            ..SamplerParams::default()
        };
        assert!(p.validate().is_err());
        // A positive temperature so small that 1 / T overflows the scaled logits, and a
        // penalty that overflows a penalised logit, are refused; 0 and below stay greedy.
        for (t, ok) in [
            (1e-38, false),
            (1e-7, false),
            (MIN_TEMPERATURE, true),
            (0.0, true),
            (-1.0, true),
        ] {
            p = SamplerParams {
                temperature: t,
                ..SamplerParams::default()
            };
            assert_eq!(p.validate().is_ok(), ok, "temperature {t}");
        }
        for (r, ok) in [
            (1e-40, false),
            (0.0, false),
            (1e-6, true),
            (1e6, true),
            (1e7, false),
        ] {
            p = SamplerParams {
                repeat_penalty: r,
                ..SamplerParams::default()
            };
            assert_eq!(p.validate().is_ok(), ok, "repeat_penalty {r}");
        }
        assert!(
            SamplerParams::default().validate().is_ok()
                && SamplerParams::greedy().validate().is_ok()
        );
    }
}
