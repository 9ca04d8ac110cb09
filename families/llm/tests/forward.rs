//! The forward pass against a naive f32 transformer written independently here (weights
//! dequantised, f32 activations, f32 cache, textbook attention), on small random models
//! with every architectural feature (GQA, q/k/v biases, q/k norm, tied and untied output),
//! and the engine's own invariants: chunking, thread count and instruction set do not
//! change a single bit of the logits; a prompt beyond the context is an error.

use tether_llm::forward::{
    ForwardError, Hparams, LayerParts, LogitsFor, Model, ModelParts, State, StateOptions,
};
use tether_llm::kernels::{Isa, Matrix};
use tether_llm::quant::{TensorType, dequantize_row, quantize_block_q8};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
}

/// Stores f32 rows as `ty` (a plain quantiser for the test; F32 stored as is).
fn store(ty: TensorType, x: &[f32]) -> Vec<u8> {
    match ty {
        TensorType::F32 => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        TensorType::Q8_0 => x
            .chunks_exact(32)
            .flat_map(|c| {
                let b = quantize_block_q8(c.try_into().expect("32"));
                let mut out = half::f16::from_f32(b.d).to_le_bytes().to_vec();
                out.extend(b.qs.iter().map(|&q| q as u8));
                out
            })
            .collect(),
        TensorType::Q4_1 => x
            .chunks_exact(32)
            .flat_map(|c| {
                let (lo, hi) = c
                    .iter()
                    .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
                let d = (hi - lo) / 15.0;
                let id = if d > 0.0 { 1.0 / d } else { 0.0 };
                let mut out = half::f16::from_f32(d).to_le_bytes().to_vec();
                out.extend(half::f16::from_f32(lo).to_le_bytes());
                for j in 0..16 {
                    let q0 = (((c[j] - lo) * id).round() as u8).min(15);
                    let q1 = (((c[j + 16] - lo) * id).round() as u8).min(15);
                    out.push(q0 | (q1 << 4));
                }
                out
            })
            .collect(),
        _ => unimplemented!("test quantiser for {ty:?}"),
    }
}

/// A random model: weights as stored bytes, plus their dequantised f32 values.
struct Tiny {
    hp: Hparams,
    ty: TensorType,
    /// (name, rows, cols, bytes)
    mats: Vec<(String, usize, usize, Vec<u8>)>,
    vecs: Vec<(String, Vec<f32>)>,
    tied: bool,
    bias: bool,
    qk_norm: bool,
}

impl Tiny {
    fn new(ty: TensorType, tied: bool, bias: bool, qk_norm: bool, seed: u64) -> Tiny {
        let mut rng = Rng(seed);
        let (e, heads, kv_heads, hd, ff, vocab, layers) = (64, 4, 2, 16, 96, 80, 2);
        let inv: Vec<f32> = (0..hd / 2)
            .map(|i| 10000f32.powf(-(2.0 * i as f32) / hd as f32))
            .collect();
        let hp = Hparams {
            n_layer: layers,
            n_embd: e,
            n_head: heads,
            n_head_kv: kv_heads,
            head_dim: hd,
            n_ff: ff,
            n_vocab: vocab,
            norm_eps: 1e-5,
            rope_inv_freq: inv,
        };
        let mut mats = Vec::new();
        let mut vecs = Vec::new();
        let mut mat = |name: String, rows: usize, cols: usize, rng: &mut Rng| {
            let w = rng.vec(rows * cols, 1.0 / (cols as f32).sqrt() * 1.7);
            mats.push((name, rows, cols, store(ty, &w)));
        };
        mat("token_embd".into(), vocab, e, &mut rng);
        if !tied {
            mat("output".into(), vocab, e, &mut rng);
        }
        let (q, kv) = (heads * hd, kv_heads * hd);
        for l in 0..layers {
            mat(format!("{l}.wq"), q, e, &mut rng);
            mat(format!("{l}.wk"), kv, e, &mut rng);
            mat(format!("{l}.wv"), kv, e, &mut rng);
            mat(format!("{l}.wo"), e, q, &mut rng);
            mat(format!("{l}.gate"), ff, e, &mut rng);
            mat(format!("{l}.up"), ff, e, &mut rng);
            mat(format!("{l}.down"), e, ff, &mut rng);
        }
        let mut vec = |name: String, n: usize, base: f32, spread: f32, rng: &mut Rng| {
            vecs.push((
                name,
                rng.vec(n, spread).into_iter().map(|v| v + base).collect(),
            ));
        };
        vec("output_norm".into(), e, 1.0, 0.2, &mut rng);
        for l in 0..layers {
            vec(format!("{l}.attn_norm"), e, 1.0, 0.2, &mut rng);
            vec(format!("{l}.ffn_norm"), e, 1.0, 0.2, &mut rng);
            if bias {
                vec(format!("{l}.bq"), q, 0.0, 0.3, &mut rng);
                vec(format!("{l}.bk"), kv, 0.0, 0.3, &mut rng);
                vec(format!("{l}.bv"), kv, 0.0, 0.3, &mut rng);
            }
            if qk_norm {
                vec(format!("{l}.qn"), hd, 1.0, 0.3, &mut rng);
                vec(format!("{l}.kn"), hd, 1.0, 0.3, &mut rng);
            }
        }
        Tiny {
            hp,
            ty,
            mats,
            vecs,
            tied,
            bias,
            qk_norm,
        }
    }

    fn m(&self, name: &str) -> Matrix<'_> {
        let (_, rows, cols, data) = self.mats.iter().find(|m| m.0 == name).expect(name);
        Matrix {
            ty: self.ty,
            rows: *rows,
            cols: *cols,
            data,
        }
    }

    fn v(&self, name: &str) -> Vec<f32> {
        self.vecs
            .iter()
            .find(|v| v.0 == name)
            .expect(name)
            .1
            .clone()
    }

    fn parts(&self) -> ModelParts<'_> {
        ModelParts {
            token_embd: self.m("token_embd"),
            output: (!self.tied).then(|| self.m("output")),
            output_norm: self.v("output_norm"),
            layers: (0..self.hp.n_layer)
                .map(|l| LayerParts {
                    attn_norm: self.v(&format!("{l}.attn_norm")),
                    wq: self.m(&format!("{l}.wq")),
                    wk: self.m(&format!("{l}.wk")),
                    wv: self.m(&format!("{l}.wv")),
                    bq: self.bias.then(|| self.v(&format!("{l}.bq"))),
                    bk: self.bias.then(|| self.v(&format!("{l}.bk"))),
                    bv: self.bias.then(|| self.v(&format!("{l}.bv"))),
                    q_norm: self.qk_norm.then(|| self.v(&format!("{l}.qn"))),
                    k_norm: self.qk_norm.then(|| self.v(&format!("{l}.kn"))),
                    wo: self.m(&format!("{l}.wo")),
                    ffn_norm: self.v(&format!("{l}.ffn_norm")),
                    w_gate: self.m(&format!("{l}.gate")),
                    w_up: self.m(&format!("{l}.up")),
                    w_down: self.m(&format!("{l}.down")),
                })
                .collect(),
        }
    }

    fn deq(&self, name: &str) -> Vec<f32> {
        let m = self.m(name);
        let mut out = vec![0.0; m.rows * m.cols];
        for r in 0..m.rows {
            dequantize_row(m.ty, m.row(r), &mut out[r * m.cols..(r + 1) * m.cols]).expect("row");
        }
        out
    }

    /// The textbook forward pass over a whole sequence: logits of every position.
    fn reference(&self, tokens: &[u32]) -> Vec<Vec<f32>> {
        let hp = &self.hp;
        let (e, hd, nh, nkv) = (hp.n_embd, hp.head_dim, hp.n_head, hp.n_head_kv);
        let matvec = |w: &[f32], x: &[f32], rows: usize| -> Vec<f32> {
            (0..rows)
                .map(|r| {
                    w[r * x.len()..(r + 1) * x.len()]
                        .iter()
                        .zip(x)
                        .map(|(a, b)| a * b)
                        .sum()
                })
                .collect()
        };
        let norm = |x: &[f32], w: &[f32]| -> Vec<f32> {
            let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
            let s = 1.0 / (ms + hp.norm_eps).sqrt();
            x.iter().zip(w).map(|(a, b)| a * s * b).collect()
        };
        let rope = |x: &mut [f32], pos: usize| {
            let half = hd / 2;
            for i in 0..half {
                let (s, c) = (pos as f32 * hp.rope_inv_freq[i]).sin_cos();
                let (a, b) = (x[i], x[i + half]);
                x[i] = a * c - b * s;
                x[i + half] = b * c + a * s;
            }
        };
        let embd = self.deq("token_embd");
        let mut xs: Vec<Vec<f32>> = tokens
            .iter()
            .map(|&t| embd[t as usize * e..(t as usize + 1) * e].to_vec())
            .collect();
        for l in 0..hp.n_layer {
            let name = |s: &str| format!("{l}.{s}");
            let (wq, wk, wv, wo) = (
                self.deq(&name("wq")),
                self.deq(&name("wk")),
                self.deq(&name("wv")),
                self.deq(&name("wo")),
            );
            let (wg, wu, wd) = (
                self.deq(&name("gate")),
                self.deq(&name("up")),
                self.deq(&name("down")),
            );
            let mut ks = Vec::new();
            let mut vs = Vec::new();
            let mut qs = Vec::new();
            for (pos, x) in xs.iter().enumerate() {
                let h = norm(x, &self.v(&name("attn_norm")));
                let mut q = matvec(&wq, &h, nh * hd);
                let mut k = matvec(&wk, &h, nkv * hd);
                let mut v = matvec(&wv, &h, nkv * hd);
                if self.bias {
                    q.iter_mut()
                        .zip(self.v(&name("bq")))
                        .for_each(|(a, b)| *a += b);
                    k.iter_mut()
                        .zip(self.v(&name("bk")))
                        .for_each(|(a, b)| *a += b);
                    v.iter_mut()
                        .zip(self.v(&name("bv")))
                        .for_each(|(a, b)| *a += b);
                }
                for head in q.chunks_exact_mut(hd) {
                    if self.qk_norm {
                        let n = norm(head, &self.v(&name("qn")));
                        head.copy_from_slice(&n);
                    }
                    rope(head, pos);
                }
                for head in k.chunks_exact_mut(hd) {
                    if self.qk_norm {
                        let n = norm(head, &self.v(&name("kn")));
                        head.copy_from_slice(&n);
                    }
                    rope(head, pos);
                }
                qs.push(q);
                ks.push(k);
                vs.push(v);
            }
            for (pos, x) in xs.iter_mut().enumerate() {
                let mut attn = vec![0.0f32; nh * hd];
                for h in 0..nh {
                    let g = h / (nh / nkv);
                    let q = &qs[pos][h * hd..(h + 1) * hd];
                    let scores: Vec<f32> = (0..=pos)
                        .map(|j| {
                            q.iter()
                                .zip(&ks[j][g * hd..(g + 1) * hd])
                                .map(|(a, b)| a * b)
                                .sum::<f32>()
                                / (hd as f32).sqrt()
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f32::MIN, f32::max);
                    let ex: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
                    let sum: f32 = ex.iter().sum();
                    for (j, p) in ex.iter().enumerate() {
                        for d in 0..hd {
                            attn[h * hd + d] += p / sum * vs[j][g * hd + d];
                        }
                    }
                }
                let o = matvec(&wo, &attn, e);
                x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
                let h = norm(x, &self.v(&name("ffn_norm")));
                let g = matvec(&wg, &h, hp.n_ff);
                let u = matvec(&wu, &h, hp.n_ff);
                let act: Vec<f32> = g
                    .iter()
                    .zip(&u)
                    .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                    .collect();
                let d = matvec(&wd, &act, e);
                x.iter_mut().zip(&d).for_each(|(a, b)| *a += b);
            }
        }
        let head = if self.tied { embd } else { self.deq("output") };
        xs.iter()
            .map(|x| matvec(&head, &norm(x, &self.v("output_norm")), hp.n_vocab))
            .collect()
    }
}

fn options(context: usize, max_batch: usize, logit_rows: usize, threads: usize) -> StateOptions {
    StateOptions {
        context,
        max_batch,
        logit_rows,
        threads,
    }
}

fn all_logits(model: &Model<'_>, tokens: &[u32], max_batch: usize, threads: usize) -> Vec<f32> {
    let mut state =
        State::new(model, options(64, max_batch, tokens.len(), threads)).expect("state");
    model
        .forward(&mut state, tokens, LogitsFor::All)
        .expect("forward");
    state.logits().to_vec()
}

const TOKENS: [u32; 19] = [
    3, 17, 42, 5, 79, 0, 11, 11, 23, 64, 8, 33, 2, 71, 50, 19, 44, 6, 12,
];

#[test]
fn logits_match_a_naive_f32_transformer() {
    // (weight type, tied, q/k/v bias, q/k norm): Llama-like, Qwen2-like, Qwen3-like.
    let cases = [
        (TensorType::F32, true, false, false, 0.003),
        (TensorType::F32, false, true, false, 0.003),
        (TensorType::F32, true, false, true, 0.003),
        (TensorType::Q8_0, false, true, true, 0.05),
        (TensorType::Q4_1, true, false, false, 0.05),
    ];
    for (i, &(ty, tied, bias, qk_norm, tol)) in cases.iter().enumerate() {
        let tiny = Tiny::new(ty, tied, bias, qk_norm, 100 + i as u64);
        let model = Model::new(tiny.hp.clone(), tiny.parts(), Isa::detect()).expect("model");
        let got = all_logits(&model, &TOKENS, 8, 2);
        let want = tiny.reference(&TOKENS);
        let v = tiny.hp.n_vocab;
        let mut worst = 0.0f32;
        let mut top1 = 0;
        for (t, w) in want.iter().enumerate() {
            let g = &got[t * v..(t + 1) * v];
            let spread = w.iter().map(|x| x.abs()).fold(0.0f32, f32::max);
            for (a, b) in g.iter().zip(w) {
                worst = worst.max((a - b).abs() / spread);
            }
            let argmax = |x: &[f32]| {
                (0..x.len())
                    .max_by(|&a, &b| x[a].total_cmp(&x[b]))
                    .expect("non-empty")
            };
            top1 += usize::from(argmax(g) == argmax(w));
        }
        eprintln!(
            "{ty:?} tied {tied} bias {bias} qk_norm {qk_norm}: max |diff| / max|logit| {worst:.2e}, top-1 {top1}/{}",
            want.len()
        );
        // f32 weights: only the f16 cache differs (about 1e-3 relative); quantised weights
        // add the 8-bit activation rounding of every product.
        assert!(worst <= tol, "case {i}: {worst}");
        assert!(
            top1 + 1 >= want.len(),
            "case {i}: top-1 {top1}/{}",
            want.len()
        );
    }
}

#[test]
fn chunking_threads_and_instruction_sets_change_no_bit() {
    let tiny = Tiny::new(TensorType::Q4_1, false, true, true, 7);
    let want = all_logits(
        &Model::new(tiny.hp.clone(), tiny.parts(), Isa::Scalar).expect("model"),
        &TOKENS,
        19,
        1,
    );
    for isa in Isa::available() {
        let model = Model::new(tiny.hp.clone(), tiny.parts(), isa).expect("model");
        for (batch, threads) in [(19, 1), (1, 1), (4, 2), (5, 3), (19, 2)] {
            let got = all_logits(&model, &TOKENS, batch, threads);
            if isa == Isa::Scalar {
                assert_eq!(got, want, "{isa:?} batch {batch} threads {threads}");
            } else {
                // Another instruction set sums blocks in another order: f32 rounding only.
                let worst = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                assert!(
                    worst < 1e-3,
                    "{isa:?} batch {batch} threads {threads}: {worst}"
                );
                let first = all_logits(&model, &TOKENS, 19, 1);
                assert_eq!(
                    got, first,
                    "{isa:?}: batch {batch} threads {threads} differs from one chunk, one thread"
                );
            }
        }
    }
}

#[test]
fn generation_token_by_token_equals_the_prompt_pass() {
    let tiny = Tiny::new(TensorType::Q8_0, true, false, false, 9);
    let model = Model::new(tiny.hp.clone(), tiny.parts(), Isa::detect()).expect("model");
    let all = all_logits(&model, &TOKENS, 8, 2);
    let mut state = State::new(&model, options(64, 8, 1, 2)).expect("state");
    let v = tiny.hp.n_vocab;
    model
        .forward(&mut state, &TOKENS[..10], LogitsFor::Last)
        .expect("prompt");
    assert_eq!(state.logits(), &all[9 * v..10 * v]);
    for (i, &t) in TOKENS[10..].iter().enumerate() {
        model
            .forward(&mut state, &[t], LogitsFor::Last)
            .expect("step");
        assert_eq!(state.logits(), &all[(10 + i) * v..(11 + i) * v], "step {i}");
    }
    assert_eq!(state.cache().len(), TOKENS.len());
    // Reset: the same prompt again gives the same logits.
    state.cache_mut().reset();
    model
        .forward(&mut state, &TOKENS[..10], LogitsFor::Last)
        .expect("prompt");
    assert_eq!(state.logits(), &all[9 * v..10 * v]);
}

#[test]
fn bad_input_is_a_typed_error_and_runs_nothing() {
    let tiny = Tiny::new(TensorType::F32, true, false, false, 1);
    let model = Model::new(tiny.hp.clone(), tiny.parts(), Isa::detect()).expect("model");
    let mut state = State::new(&model, options(16, 4, 4, 1)).expect("state");
    let e = model
        .forward(&mut state, &[1; 17], LogitsFor::Last)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "17 tokens do not fit the context of 16 tokens"
    );
    assert_eq!(state.cache().len(), 0);
    model
        .forward(&mut state, &[1; 10], LogitsFor::Last)
        .expect("fits");
    let e = model
        .forward(&mut state, &[1; 7], LogitsFor::Last)
        .unwrap_err();
    assert!(
        matches!(e, ForwardError::ContextFull(c) if c.needed == 17 && c.used == 10),
        "{e}"
    );
    assert_eq!(state.cache().len(), 10);
    let e = model
        .forward(&mut state, &[1, 80], LogitsFor::Last)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "token id 80 at index 1 is beyond the vocabulary of 80"
    );
    assert_eq!(
        model.forward(&mut state, &[], LogitsFor::Last).unwrap_err(),
        ForwardError::Empty
    );
    let e = model
        .forward(&mut state, &[1; 5], LogitsFor::All)
        .unwrap_err();
    assert_eq!(e, ForwardError::TooManyLogits { tokens: 5, rows: 4 });
    // A weight of the wrong shape is refused at load, by name.
    let mut parts = tiny.parts();
    parts.layers[1].ffn_norm.pop();
    let e = Model::new(tiny.hp.clone(), parts, Isa::detect()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "weight `blk.1.ffn_norm`: 63 values, expected 64"
    );
    let mut parts = tiny.parts();
    parts.layers[0].wk.rows = 16;
    let e = Model::new(tiny.hp.clone(), parts, Isa::detect()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("weight `blk.0.attn_k`: [16, 64] (rows, cols), expected [32, 64]"),
        "{e}"
    );
}
