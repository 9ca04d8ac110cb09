//! The prefill graph (issue 26, see [`super::prefill`]): the chunk buffers placed at load,
//! the chunk launches, one CUDA graph captured at load and checked against an eager run on
//! poisoned buffers before the decoder is handed out.

use tether_runtime::cuda::{
    ArenaPlan, Context, DeviceArena, DevicePtr, DriverError, Function, Graph, KernelModule, Stream,
};

use super::decoder::GpuError;
use super::kernels::{
    self, AttnChunkParams, ChunkAdvanceParams, EmbedChunkParams, HeadNormChunkParams,
    MatMulChunkParams, PrepChunkParams, ProjChunkParams, RopeChunkParams, SampleParams,
};
use super::lower::{BLOCK_Q8_BYTES, BLOCK_Q8K_BYTES, STATE_BYTES, SampleConfig};
use super::prefill::{ChunkStep, MM_TOK, PrefillError, chunk_lengths, lower_chunk};
use super::weights::DeviceWeights;
use crate::forward::{Buf, Model};
use crate::quant::TensorType;
use crate::sample::SamplerParams;

/// What the prefill graph shares with the decode step: weights, cache, request state,
/// token sequence, sampler configuration and logits, all placed by the decoder.
pub(super) struct DecodeSide<'a> {
    /// The uploaded weights and RoPE table, f32 `[context, head_dim]` (see
    /// [`super::kernels::RopeParams::angles`]).
    pub weights: &'a DeviceWeights,
    /// [`kernels::ROPE_FUSED`] | [`kernels::ROPE_INTERLEAVED`] of the model's rule.
    pub rope_form: i32,
    /// The CPU engine's prompt tokens per forward chunk ([`super::GpuOptions::prompt_batch`]).
    pub prompt_batch: usize,
    /// The request state.
    pub state: DevicePtr,
    /// The token sequence (the prompt, then the chosen tokens).
    pub seq: DevicePtr,
    /// The sampler configuration.
    pub config: DevicePtr,
    /// The logits (`n_vocab` f32).
    pub logits: DevicePtr,
    /// Keys and values of each layer.
    pub cache: &'a [(DevicePtr, DevicePtr)],
    /// The decoder's work arena (poisoned by the load check).
    pub work: (DevicePtr, usize),
    /// Cache positions.
    pub context: usize,
}

#[derive(Clone, Copy, Debug)]
enum Params {
    Embed(EmbedChunkParams),
    Prep(PrepChunkParams),
    MatMul(MatMulChunkParams),
    HeadNorm(HeadNormChunkParams),
    Rope(RopeChunkParams),
    Attention(AttnChunkParams),
    Advance(ChunkAdvanceParams),
    Sample(SampleParams),
}

#[derive(Clone, Copy, Debug)]
struct Launch {
    f: Function,
    grid: (u32, u32, u32),
    block: u32,
    shared: u32,
    params: Params,
}

impl Launch {
    fn enqueue(&self, s: &Stream) -> Result<(), DriverError> {
        let b = (self.block, 1, 1);
        let (g, sh) = (self.grid, self.shared);
        // SAFETY: each params struct mirrors its kernel's (kernels.rs, size-checked); every
        // address inside points into the decoder's arenas or the prefill arena, which live
        // as long as the graph and the launch list.
        unsafe {
            match &self.params {
                Params::Embed(p) => s.launch_params(self.f, g, b, sh, p),
                Params::Prep(p) => s.launch_params(self.f, g, b, sh, p),
                Params::MatMul(p) => s.launch_params(self.f, g, b, sh, p),
                Params::HeadNorm(p) => s.launch_params(self.f, g, b, sh, p),
                Params::Rope(p) => s.launch_params(self.f, g, b, sh, p),
                Params::Attention(p) => s.launch_params(self.f, g, b, sh, p),
                Params::Advance(p) => s.launch_params(self.f, g, b, sh, p),
                Params::Sample(p) => s.launch_params(self.f, g, b, sh, p),
            }
        }
    }
}

/// The captured prefill of one chunk size.
pub(super) struct PrefillGraph {
    // Declared before the arena it launches on: dropped first.
    graph: Graph,
    launches: Vec<Launch>,
    arena: DeviceArena,
    chunk: usize,
    check: String,
}

fn i32_of(v: usize) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

fn u32_of(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl PrefillGraph {
    /// Places the chunk buffers, lowers the program to the chunk kernels, runs a prompt of
    /// `chunk + 3` tokens (at most the context) eagerly on poisoned buffers, captures the
    /// chunk as one graph and checks that replaying it reproduces the eager run bit for bit
    /// (logits and request state).
    pub(super) fn new(
        stream: &Stream,
        module: &KernelModule,
        model: &Model<'_>,
        side: &DecodeSide<'_>,
        chunk: usize,
    ) -> Result<PrefillGraph, GpuError> {
        let hp = model.hparams();
        let steps = lower_chunk(model.program(), &|id| model.matrix(id).ty)?;
        let ctx = stream.context().clone();
        let work = ChunkWork::place(&ctx, model, chunk)?;
        let binding = ChunkBinding {
            model,
            side,
            kernels: ChunkKernels::of(module)?,
            work: &work,
            chunk,
        };
        let launches = steps
            .iter()
            .map(|s| binding.launch(s))
            .collect::<Result<Vec<_>, _>>()?;
        let (graph, check) =
            check_and_capture(stream, side, &work.arena, &launches, chunk, hp.n_vocab)?;
        Ok(PrefillGraph {
            graph,
            launches,
            arena: work.arena,
            chunk,
            check,
        })
    }

    /// Replays the graph once per chunk of a `len`-token prompt (the request state and the
    /// prompt already on the device, position 0): `ceil(len / chunk)` launches, as many as
    /// [`chunk_lengths`] has chunks, and no allocation.
    pub(super) fn run(&self, stream: &Stream, len: usize) -> Result<(), GpuError> {
        for _ in 0..len.div_ceil(self.chunk) {
            self.graph.launch(stream)?;
        }
        Ok(())
    }

    /// Fills the chunk buffers with 0xFF bytes (enqueued on `stream`).
    ///
    /// # Safety
    /// No kernel reading the chunk buffers may run concurrently on another stream.
    pub(super) unsafe fn poison(&self, stream: &Stream) -> Result<(), DriverError> {
        // SAFETY: the whole arena; the caller's contract.
        unsafe { stream.memset_u8(self.arena.base(), 0xFF, self.arena.plan().total_bytes()) }
    }

    /// Tokens per chunk.
    pub(super) fn chunk(&self) -> usize {
        self.chunk
    }

    /// Launches of one chunk (graph nodes).
    pub(super) fn launches(&self) -> usize {
        self.launches.len()
    }

    /// Bytes of the chunk buffers.
    pub(super) fn bytes(&self) -> usize {
        self.arena.plan().total_bytes()
    }

    /// What the load-time check found.
    pub(super) fn check_summary(&self) -> &str {
        &self.check
    }
}

/// The load check of the prefill graph: a prompt of `chunk + 3` tokens (at most the context)
/// run eagerly on poisoned buffers (the decoder's work arena and `arena`), the chunk captured
/// as one graph, the prompt replayed through it on poisoned buffers, and the logits and
/// request state of both compared bit for bit. Returns the graph and a summary line.
///
/// # Errors
/// [`GpuError::NonFinite`], [`GpuError::ReplayMismatch`] (also when the state's position
/// is not the prompt's length), CUDA (capture included).
fn check_and_capture(
    stream: &Stream,
    side: &DecodeSide<'_>,
    arena: &DeviceArena,
    launches: &[Launch],
    chunk: usize,
    n_vocab: usize,
) -> Result<(Graph, String), GpuError> {
    // Eager run on poisoned buffers, capture, replay on poisoned buffers, compare.
    let len = (chunk + 3).min(side.context);
    let prompt: Vec<u32> = (0..len as u32)
        .map(|i| (i * 7919 + 3) % n_vocab as u32)
        .collect();
    let greedy = SampleConfig::new(&SamplerParams::greedy(), n_vocab)
        .map_err(|e| GpuError::Sampling { what: e.what })?
        .to_bytes();
    let replays = chunk_lengths(len, chunk)?.len();
    let run_check = |graph: Option<&Graph>| -> Result<(Vec<f32>, [u8; 16]), GpuError> {
        // SAFETY: both whole arenas; NaN bit patterns everywhere.
        unsafe {
            stream.memset_u8(side.work.0, 0xFF, side.work.1)?;
            stream.memset_u8(arena.base(), 0xFF, arena.plan().total_bytes())?;
        }
        let mut st = [0u8; 16];
        st[8..12].copy_from_slice(&(len as u32).to_le_bytes());
        // SAFETY: the sequence region holds context + 1 >= len ids, the state 16 bytes,
        // the configuration 64; the sources live until the synchronisation below.
        unsafe {
            stream.memcpy_htod(side.seq, prompt.as_ptr() as *const u8, len * 4)?;
            stream.memcpy_htod(side.state, st.as_ptr(), STATE_BYTES)?;
            stream.memcpy_htod(side.config, greedy.as_ptr(), greedy.len())?;
        }
        for _ in 0..replays {
            match graph {
                Some(g) => g.launch(stream)?,
                None => {
                    for l in launches {
                        l.enqueue(stream)?;
                    }
                }
            }
        }
        let mut out = vec![0f32; n_vocab];
        let mut st_out = [0u8; 16];
        // SAFETY: n_vocab f32 of the logits, 16 bytes of state; synchronised below.
        unsafe {
            stream.memcpy_dtoh(out.as_mut_ptr() as *mut u8, side.logits, n_vocab * 4)?;
            stream.memcpy_dtoh(st_out.as_mut_ptr(), side.state, STATE_BYTES)?;
        }
        stream.synchronize()?;
        Ok((out, st_out))
    };
    let (eager, eager_state) = run_check(None)?;
    let bad: Vec<usize> = (0..eager.len())
        .filter(|&i| !eager[i].is_finite())
        .collect();
    if let Some(&first) = bad.first() {
        return Err(GpuError::NonFinite {
            count: bad.len(),
            n_vocab,
            first,
        });
    }
    let graph = Graph::capture(stream, |s| -> Result<(), DriverError> {
        for l in launches {
            l.enqueue(s)?;
        }
        Ok(())
    })?;
    let (replay, replay_state) = run_check(Some(&graph))?;
    let word = |b: &[u8; 16], i: usize| {
        u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
    };
    if replay_state != eager_state || word(&eager_state, 1) != len as u32 {
        return Err(GpuError::ReplayMismatch(format!(
            "prefill graph: state (token, pos, prompt_len, bad_token) after a {len}-token prompt: eager {:?}, graph {:?}",
            (0..4).map(|i| word(&eager_state, i)).collect::<Vec<_>>(),
            (0..4).map(|i| word(&replay_state, i)).collect::<Vec<_>>()
        )));
    }
    if let Some(i) = (0..eager.len()).find(|&i| eager[i].to_bits() != replay[i].to_bits()) {
        return Err(GpuError::ReplayMismatch(format!(
            "prefill graph: logit {i}: eager {}, graph {}",
            eager[i], replay[i]
        )));
    }
    let check = format!(
        "prefill graph of {} nodes ({chunk}-token chunks) replayed a {len}-token prompt bit-identical to the eager run on poisoned buffers (token {})",
        graph.nodes(),
        word(&eager_state, 0)
    );
    Ok((graph, check))
}

/// The chunk kernels.
#[derive(Clone, Copy)]
struct ChunkKernels {
    embed: Function,
    prep: Function,
    matmul: Function,
    head_norm: Function,
    rope: Function,
    attention: Function,
    advance: Function,
    sample: Function,
}

impl ChunkKernels {
    fn of(module: &KernelModule) -> Result<Self, GpuError> {
        let f = |n: &str| module.function(n);
        Ok(ChunkKernels {
            embed: f("embed_chunk")?,
            prep: f("prep_chunk")?,
            matmul: f("matmul_chunk")?,
            head_norm: f("head_norm_chunk")?,
            rope: f("rope_chunk")?,
            attention: f("attention_chunk")?,
            advance: f("chunk_advance")?,
            sample: f("sample_advance")?,
        })
    }
}

/// The chunk buffers: `[chunk, width]` rows of every activation but the logits, and the
/// 8-bit blocks of `chunk` rows of the widest input.
struct ChunkWork {
    arena: DeviceArena,
    /// Each [`Buf`] at its index (the logits: an empty region).
    bufs: Vec<DevicePtr>,
    q8: DevicePtr,
    q8k: DevicePtr,
    /// Q8 blocks per row.
    q8_stride: usize,
    /// Q8_K blocks per row.
    q8k_stride: usize,
}

impl ChunkWork {
    /// Places the chunk buffers of `model` for `chunk` tokens.
    ///
    /// # Errors
    /// CUDA (out of memory), the arena's layout errors.
    fn place(ctx: &Context, model: &Model<'_>, chunk: usize) -> Result<ChunkWork, GpuError> {
        let hp = model.hparams();
        let widest = hp.n_embd.max(hp.q_dim()).max(hp.n_ff);
        let (q8_stride, q8k_stride) = (widest.div_ceil(32), widest.div_ceil(256));
        let mut plan = ArenaPlan::new();
        let mut buf_r = Vec::new();
        for b in Buf::ALL {
            let w = if b == Buf::Logits { 0 } else { hp.width(b) };
            buf_r.push(plan.add(format!("chunk {b:?}"), chunk * w * 4)?);
        }
        let q8_r = plan.add("chunk q8", chunk * q8_stride * BLOCK_Q8_BYTES)?;
        let q8k_r = plan.add("chunk q8k", chunk * q8k_stride * BLOCK_Q8K_BYTES)?;
        let arena = DeviceArena::new(ctx, plan)?;
        Ok(ChunkWork {
            bufs: buf_r.iter().map(|&r| arena.ptr(r)).collect(),
            q8: arena.ptr(q8_r),
            q8k: arena.ptr(q8k_r),
            q8_stride,
            q8k_stride,
            arena,
        })
    }
}

/// What the chunk's launches are bound to: the model's shapes, the decode side, the chunk
/// buffers and the kernels.
struct ChunkBinding<'m, 'a> {
    model: &'a Model<'m>,
    side: &'a DecodeSide<'a>,
    kernels: ChunkKernels,
    work: &'a ChunkWork,
    chunk: usize,
}

impl ChunkBinding<'_, '_> {
    /// The launch of chunk step `s`.
    ///
    /// # Errors
    /// [`PrefillError::PrepWidth`]: a `Prep` whose input and output widths differ.
    fn launch(&self, s: &ChunkStep) -> Result<Launch, GpuError> {
        let (model, side, hp) = (self.model, self.side, self.model.hparams());
        let k = &self.kernels;
        let (f_embed, f_prep, f_mm, f_hn, f_rope) =
            (k.embed, k.prep, k.matmul, k.head_norm, k.rope);
        let (f_attn, f_adv, f_sample) = (k.attention, k.advance, k.sample);
        let chunk = self.chunk;
        let c = i32_of(chunk);
        let state = side.state;
        let bp = |b: Buf| self.work.bufs[b.index()];
        let (q8, q8k) = (self.work.q8, self.work.q8k);
        let (q8_stride, q8k_stride) = (self.work.q8_stride, self.work.q8k_stride);
        Ok(match *s {
            ChunkStep::Embed { table } => {
                let m = model.matrix(table);
                Launch {
                    f: f_embed,
                    grid: (u32_of(chunk), 1, 1),
                    block: 256,
                    shared: 0,
                    params: Params::Embed(EmbedChunkParams {
                        table: side.weights.mat_ptr(table),
                        prompt: side.seq,
                        state,
                        out: bp(Buf::Residual),
                        ty: m.ty.ggml_id() as i32,
                        cols: i32_of(m.cols),
                        row_bytes: i32_of(m.row_bytes()),
                        n_vocab: i32_of(m.rows),
                        chunk: c,
                        pad: 0,
                    }),
                }
            }
            ChunkStep::Prep {
                input,
                swiglu,
                norm,
                out,
                q8: want8,
                q8k: want8k,
                last,
            } => {
                if hp.width(input) != hp.width(out) {
                    return Err(PrefillError::PrepWidth {
                        input,
                        input_width: hp.width(input),
                        out,
                        out_width: hp.width(out),
                    }
                    .into());
                }
                Launch {
                    f: f_prep,
                    grid: (if last { 1 } else { u32_of(chunk) }, 1, 1),
                    block: kernels::PREP_THREADS,
                    shared: 0,
                    params: Params::Prep(PrepChunkParams {
                        input: bp(input),
                        in2: if swiglu { bp(Buf::Up) } else { DevicePtr(0) },
                        weight: norm.map_or(DevicePtr(0), |v| side.weights.vec_ptr(v)),
                        out: bp(out),
                        q8: if want8 { q8 } else { DevicePtr(0) },
                        q8k: if want8k { q8k } else { DevicePtr(0) },
                        state,
                        n: i32_of(hp.width(input)),
                        eps: hp.norm_eps,
                        swiglu: i32::from(swiglu),
                        stride: i32_of(hp.width(input)),
                        q8_stride: i32_of(q8_stride),
                        q8k_stride: i32_of(q8k_stride),
                        chunk: c,
                        last: i32::from(last),
                    }),
                }
            }
            ChunkStep::MatMul { input, projs, last } => {
                let mut p = MatMulChunkParams {
                    x: bp(input),
                    q8,
                    q8k,
                    state,
                    cols: i32_of(hp.width(input)),
                    x_stride: i32_of(hp.width(input)),
                    q8_stride: i32_of(q8_stride),
                    q8k_stride: i32_of(q8k_stride),
                    chunk: c,
                    last: i32::from(last),
                    tok_per_warp: i32_of(MM_TOK),
                    ..MatMulChunkParams::default()
                };
                let mut total = 0usize;
                let mut blocks32 = true;
                for (k, pr) in projs.iter().flatten().enumerate() {
                    let m = model.matrix(pr.weight);
                    let (out, out_stride) = if pr.out == Buf::Logits {
                        (side.logits, 0)
                    } else {
                        (bp(pr.out), hp.width(pr.out))
                    };
                    p.p[k] = ProjChunkParams {
                        w: side.weights.mat_ptr(pr.weight),
                        bias: pr.bias.map_or(DevicePtr(0), |v| side.weights.vec_ptr(v)),
                        out,
                        ty: m.ty.ggml_id() as i32,
                        rows: i32_of(m.rows),
                        row_bytes: i32_of(m.row_bytes()),
                        accumulate: i32::from(pr.accumulate),
                        out_stride: i32_of(out_stride),
                        pad: 0,
                    };
                    p.nproj = k as i32 + 1;
                    total += m.rows;
                    blocks32 &=
                        matches!(m.ty, TensorType::Q8_0 | TensorType::Q4_0 | TensorType::Q4_1);
                }
                p.rows_total = i32_of(total);
                let group_rows = if blocks32 { kernels::MM_R } else { 1 };
                p.group_rows = group_rows as i32;
                let tiles = if last { 1 } else { chunk.div_ceil(MM_TOK) };
                Launch {
                    f: f_mm,
                    grid: (
                        u32_of(total.div_ceil((kernels::MM_WARPS * 4 * group_rows) as usize)),
                        u32_of(tiles),
                        1,
                    ),
                    block: kernels::MM_WARPS * 32,
                    shared: 0,
                    params: Params::MatMul(p),
                }
            }
            ChunkStep::HeadNorm { buf, heads, weight } => Launch {
                f: f_hn,
                grid: (u32_of(heads.div_ceil(4)), u32_of(chunk), 1),
                block: 128,
                shared: 0,
                params: Params::HeadNorm(HeadNormChunkParams {
                    x: bp(buf),
                    weight: side.weights.vec_ptr(weight),
                    state,
                    heads: i32_of(heads),
                    head_dim: i32_of(hp.head_dim),
                    eps: hp.norm_eps,
                    stride: i32_of(hp.width(buf)),
                    chunk: c,
                    pad: 0,
                }),
            },
            ChunkStep::Rope { buf, heads, store } => {
                let (kc, vc) = store.map_or((DevicePtr(0), DevicePtr(0)), |l| side.cache[l]);
                Launch {
                    f: f_rope,
                    grid: (
                        u32_of((heads * hp.head_dim / 2).div_ceil(128)),
                        u32_of(chunk),
                        1,
                    ),
                    block: 128,
                    shared: 0,
                    params: Params::Rope(RopeChunkParams {
                        x: bp(buf),
                        angles: side.weights.angles_ptr(),
                        state,
                        kcache: kc,
                        vcache: vc,
                        v: bp(Buf::V),
                        heads: i32_of(heads),
                        head_dim: i32_of(hp.head_dim),
                        kv_dim: i32_of(hp.kv_dim()),
                        x_stride: i32_of(hp.width(buf)),
                        v_stride: i32_of(hp.width(Buf::V)),
                        chunk: c,
                        form: side.rope_form,
                        pad: 0,
                    }),
                }
            }
            ChunkStep::Attention { layer } => Launch {
                f: f_attn,
                grid: (u32_of(hp.n_head), u32_of(chunk), 1),
                block: kernels::ATTN_WARPS * 32,
                shared: 0,
                params: Params::Attention(AttnChunkParams {
                    q: bp(Buf::Q),
                    kcache: side.cache[layer].0,
                    vcache: side.cache[layer].1,
                    out: bp(Buf::Attn),
                    state,
                    n_head: i32_of(hp.n_head),
                    n_kv: i32_of(hp.n_head_kv),
                    head_dim: i32_of(hp.head_dim),
                    kv_dim: i32_of(hp.kv_dim()),
                    scale: 1.0 / (hp.head_dim as f32).sqrt(),
                    batch: i32_of(side.prompt_batch.max(1)),
                    q_stride: i32_of(hp.width(Buf::Q)),
                    chunk: c,
                    interleaved: i32::from(side.rope_form & kernels::ROPE_INTERLEAVED != 0),
                    pad: 0,
                }),
            },
            ChunkStep::Advance => Launch {
                f: f_adv,
                grid: (1, 1, 1),
                block: 32,
                shared: 0,
                params: Params::Advance(ChunkAdvanceParams {
                    state,
                    chunk: c,
                    pad: 0,
                }),
            },
            ChunkStep::Sample => Launch {
                f: f_sample,
                grid: (1, 1, 1),
                block: kernels::SAMPLE_THREADS,
                shared: 0,
                params: Params::Sample(SampleParams {
                    logits: side.logits,
                    seq: side.seq,
                    state,
                    config: side.config,
                    n: i32_of(hp.n_vocab),
                    seq_cap: i32_of(side.context + 1),
                }),
            },
        })
    }
}
