//! The generator: a model opened once, then `generate(prompt or chat messages, params)`
//! streaming tokens and text pieces, with a finish reason and timings.
//!
//! ```no_run
//! use tether_llm::generate::{GenerateParams, Generator, GeneratorOptions, Prompt};
//! use tether_llm::ChatMessage;
//!
//! let mut g = Generator::open("SmolLM2-135M-Instruct.Q4_1.gguf", &GeneratorOptions::default())?;
//! let chat = [ChatMessage::new("user", "Where is Paris?")];
//! let mut run = g.generate(Prompt::Chat(&chat), &GenerateParams::default())?;
//! while let Some(piece) = run.next_piece()? {
//!     print!("{}", piece.text);
//! }
//! let done = run.finish();
//! println!("\n{:?}, {:.1} tok/s", done.finish_reason, done.timings.generation_tokens_per_s());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Allocation.** Opening allocates everything a request needs for the context (KV cache,
//! activations, sampler scratch, detokeniser and stop-string buffers); a request allocates
//! its prompt's token ids, its rendered chat text and per-request buffers sized by
//! `max_tokens` once at its start; each generated token then allocates nothing
//! (`tests/alloc.rs` counts).
//!
//! **Stop strings** are matched on the detokenised text, across token boundaries: text that
//! could still be the start of a stop string is held back until the next token decides
//! (what llama.cpp's server does), and the stop string itself is never emitted.
//!
//! **Cancelling**: [`Generator::cancel_handle`] gives an `Arc<AtomicBool>`-backed handle any
//! thread can set; the request in progress ends before its next token with
//! [`FinishReason::Cancelled`] and the text generated so far. A new request clears it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::checkpoint::{Checkpoint, GenerationDefaults};
use crate::config::LlmConfig;
use crate::error::LlmError;
use crate::forward::{
    ForwardError, Hparams, LlamaCppRope, LogitsFor, Model, ModelParts, RopeRule, State,
    StateOptions,
};
use crate::kernels::Isa;
use crate::sample::{MAX_PENALTY_WINDOW, Sampler, SamplerError, SamplerParams};
use crate::template::{ChatMessage, ChatTemplate};
use crate::tensor::Weights;
use crate::tokenizer::{StreamDecoder, Tokenizer};

/// Options of [`Generator::open`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GeneratorOptions {
    /// KV cache positions; `None`: the model's training context. At most that.
    pub context: Option<usize>,
    /// Threads of the forward pass; `None`: the CPUs this process may use.
    pub threads: Option<usize>,
    /// Tokens per prompt chunk (llama.cpp's `n_ubatch`, 512 by default).
    pub max_batch: usize,
    /// Instruction set of the kernels; `None`: the fastest this CPU has ([`Isa::detect`]).
    pub isa: Option<Isa>,
}

impl Default for GeneratorOptions {
    fn default() -> Self {
        GeneratorOptions {
            context: None,
            threads: None,
            max_batch: 512,
            isa: None,
        }
    }
}

/// What to generate from.
#[derive(Clone, Copy, Debug)]
pub enum Prompt<'a> {
    /// Raw text, tokenised as is (BOS added when the tokenizer asks for it; special tokens
    /// written in the text are parsed, as `llama-cli` does).
    Text(&'a str),
    /// Chat messages rendered by the checkpoint's template, the assistant turn opened.
    Chat(&'a [ChatMessage]),
    /// Token ids, used as they are.
    Tokens(&'a [u32]),
}

/// Parameters of one request.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateParams {
    /// The sampler chain ([`crate::sample`]).
    pub sampler: SamplerParams,
    /// Most tokens to generate (`usize::MAX`: no limit but the context's).
    pub max_tokens: usize,
    /// Texts that end generation when they appear in the output (not emitted).
    pub stop: Vec<String>,
    /// Keep generating past end-of-generation tokens (benchmarks).
    pub ignore_eos: bool,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            sampler: SamplerParams::default(),
            max_tokens: 256,
            stop: Vec::new(),
            ignore_eos: false,
        }
    }
}

impl GenerateParams {
    /// Greedy decoding of at most `max_tokens` tokens.
    pub fn greedy(max_tokens: usize) -> GenerateParams {
        GenerateParams {
            sampler: SamplerParams::greedy(),
            max_tokens,
            ..GenerateParams::default()
        }
    }

    /// Defaults with the checkpoint's recommended sampling (`generation_config.json`)
    /// applied over llama.cpp's.
    pub fn with_defaults(d: &GenerationDefaults) -> GenerateParams {
        let mut p = GenerateParams::default();
        if let Some(t) = d.temperature {
            p.sampler.temperature = t;
        }
        if d.do_sample == Some(false) {
            p.sampler.temperature = 0.0;
        }
        if let Some(k) = d.top_k {
            p.sampler.top_k = k as usize;
        }
        if let Some(v) = d.top_p {
            p.sampler.top_p = v;
        }
        if let Some(v) = d.min_p {
            p.sampler.min_p = v;
        }
        if let Some(v) = d.repetition_penalty {
            p.sampler.repeat_penalty = v;
        }
        if let Some(n) = d.max_new_tokens {
            p.max_tokens = n as usize;
        }
        p
    }
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens` generated, or the context is full.
    Length,
    /// Cancelled through a [`CancelHandle`].
    Cancelled,
}

impl FinishReason {
    /// `stop`, `length` or `cancelled` (the names OpenAI-style APIs use).
    pub const fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// Timings of one request (wall clock, milliseconds).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timings {
    /// Prompt tokens processed (all of the prompt's, unless the request was cancelled
    /// between its chunks).
    pub prompt_tokens: usize,
    /// Prompt processing (all chunks of the prompt's forward pass).
    pub prompt_ms: f64,
    /// From the request's start (after tokenising) to the first generated token.
    pub time_to_first_token_ms: f64,
    /// Tokens generated (sampled), the end-of-generation token included.
    pub generated_tokens: usize,
    /// From the first generated token to the last.
    pub generation_ms: f64,
    /// Time between consecutive generated tokens (`generated_tokens - 1` values): one
    /// forward pass, the sampler and the detokeniser each.
    pub inter_token_ms: Vec<f64>,
    /// On the GPU: host time between consecutive decode steps, summed (milliseconds): from
    /// one step's token in hand to the next step's call, i.e. everything the host does per
    /// token beyond the graph launch, the wait and the 4-byte read (sampler bookkeeping,
    /// detokenising, stop strings, and the caller's own handling of the piece). With the
    /// next step launched ahead this time overlaps the GPU's. 0 on the CPU.
    pub host_between_steps_ms: f64,
    /// The intervals summed in [`host_between_steps_ms`](Self::host_between_steps_ms).
    pub host_between_steps: usize,
}

impl Timings {
    /// Prompt tokens per second.
    pub fn prompt_tokens_per_s(&self) -> f64 {
        self.prompt_tokens as f64 / (self.prompt_ms / 1e3).max(1e-12)
    }

    /// Mean host time between decode steps on the GPU, in microseconds
    /// ([`host_between_steps_ms`](Self::host_between_steps_ms)); `None` on the CPU.
    pub fn host_us_per_token(&self) -> Option<f64> {
        (self.host_between_steps > 0)
            .then(|| self.host_between_steps_ms * 1e3 / self.host_between_steps as f64)
    }

    /// Generated tokens per second, from the inter-token intervals (the first token is the
    /// prompt's).
    pub fn generation_tokens_per_s(&self) -> f64 {
        let n = self.inter_token_ms.len();
        if n == 0 {
            return 0.0;
        }
        n as f64 / (self.inter_token_ms.iter().sum::<f64>() / 1e3).max(1e-12)
    }
}

/// A request's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Finished {
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Prompt token ids.
    pub prompt_tokens: Vec<u32>,
    /// Generated token ids (the end-of-generation token, if any, last).
    pub tokens: Vec<u32>,
    /// The seed the sampler used.
    pub seed: u64,
    /// Timings.
    pub timings: Timings,
}

/// One step of the stream: the token sampled and the text it completed (possibly empty:
/// part of a UTF-8 character, a control token, or text held back as a possible stop
/// string). The final piece of a request may carry held-back text and no new token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece<'a> {
    /// The token, or `None` for the final flush of held-back text.
    pub token: Option<u32>,
    /// Text to show now.
    pub text: &'a str,
}

/// Errors of the generator.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The checkpoint could not be read (front end).
    #[error(transparent)]
    Checkpoint(#[from] LlmError),
    /// The forward pass refused the input (a prompt longer than the context, ...).
    #[error(transparent)]
    Forward(#[from] ForwardError),
    /// A sampling parameter is out of range.
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    /// Chat messages for a checkpoint without a chat template.
    #[error("the model has no chat template: give a raw prompt instead")]
    NoChatTemplate,
    /// The prompt has no tokens.
    #[error("the prompt is empty (no tokens)")]
    EmptyPrompt,
    /// A context of 0, or beyond the model's training context.
    #[error("context of {asked} tokens: accepted 1 to {max} (the model's training context)")]
    Context {
        /// Asked for.
        asked: usize,
        /// The model's training context.
        max: usize,
    },
    /// The GPU decoder refused the model or the request, or the device failed.
    #[cfg(feature = "cuda")]
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    /// The forward pass gave NaN logits (CPU engine; checked before each draw): the model's
    /// weights or hyper-parameters are broken, and any token drawn would be arbitrary.
    #[error(
        "the model's logits at position {position} hold {nan} NaN of {n}: its weights or hyper-parameters are broken"
    )]
    NanLogits {
        /// Position (0-based) of the token the logits are for.
        position: usize,
        /// NaN values among them.
        nan: usize,
        /// Logits (the vocabulary).
        n: usize,
    },
    /// The thread pool could not start.
    #[error("starting {threads} forward-pass threads: {source}")]
    Threads {
        /// Threads asked for.
        threads: usize,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Cancels the request in progress on a [`Generator`] from any thread.
#[derive(Clone, Debug)]
pub struct CancelHandle(Arc<AtomicBool>);

impl CancelHandle {
    /// Asks the request in progress to stop before its next token.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether a cancel is pending: asked for and not yet cleared by the start of the next
    /// request ([`Generator::generate`] clears it first of all).
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// A model opened for generation (see the [module docs](crate::generate)).
pub struct Generator {
    // Declared first: dropped before `weights`, which it borrows.
    model: Model<'static>,
    state: State,
    sampler: Sampler,
    tokenizer: Tokenizer,
    template: Option<ChatTemplate>,
    config: LlmConfig,
    defaults: GenerationDefaults,
    cancel: Arc<AtomicBool>,
    /// The GPU decoder, when [`Generator::use_gpu`] attached one: requests then run on it.
    #[cfg(feature = "cuda")]
    gpu: Option<Box<crate::gpu::GpuDecoder>>,
    /// The memory map / bundle the model's matrices point into. Never mutated or moved out
    /// while `model` lives.
    weights: Box<Weights>,
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("model", &self.model)
            .field("state", &self.state)
            .finish()
    }
}

/// Whether the file starts with the bundle magic (unreadable files are left to the GGUF
/// reader, whose error names them).
fn is_bundle(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == tether_bundle::MAGIC
}

impl Generator {
    /// Opens an `llm` bundle (weights memory-mapped from their sections, zero-copy, each
    /// section's CRC checked the first time the load reads it), a GGUF file (memory-mapped;
    /// zero-copy but for the un-permuted Q/K of `llama` files) or a Hugging Face directory.
    /// A bundle is recognised by its magic bytes, a directory by being one.
    ///
    /// # Errors
    /// [`GenerateError::Checkpoint`] for anything the front end or the bundle reader
    /// refuses; as [`from_checkpoint`](Self::from_checkpoint).
    pub fn open(
        path: impl AsRef<Path>,
        options: &GeneratorOptions,
    ) -> Result<Generator, GenerateError> {
        let path = path.as_ref();
        let ckpt = if path.is_dir() {
            Checkpoint::from_hf_dir(path)?
        } else if is_bundle(path) {
            let bundle = tether_bundle::Bundle::open(path, tether_bundle::Verify::Lazy)
                .map_err(LlmError::from)?;
            Checkpoint::from_bundle(Arc::new(bundle))?
        } else {
            Checkpoint::from_gguf(path)?
        };
        Self::from_checkpoint(ckpt, options)
    }

    /// A generator over a checkpoint: checks it, builds the program, allocates the state.
    ///
    /// # Errors
    /// [`GenerateError::Checkpoint`] (tensor shapes, vocabulary, template),
    /// [`GenerateError::Forward`], [`GenerateError::Context`], [`GenerateError::Threads`].
    pub fn from_checkpoint(
        ckpt: Checkpoint,
        options: &GeneratorOptions,
    ) -> Result<Generator, GenerateError> {
        ckpt.check()?;
        let Checkpoint {
            config,
            weights,
            tokenizer,
            chat_template,
            generation,
            ..
        } = ckpt;
        let max = config.n_ctx_train as usize;
        let context = options.context.unwrap_or(max);
        if context == 0 || context > max {
            return Err(GenerateError::Context {
                asked: context,
                max,
            });
        }
        let template = match &chat_template {
            Some(src) => {
                let piece = |id: Option<u32>| {
                    id.and_then(|i| tokenizer.piece(i))
                        .map(|p| String::from_utf8_lossy(p).into_owned())
                        .unwrap_or_default()
                };
                Some(ChatTemplate::new(
                    src,
                    &piece(config.special.bos),
                    &piece(config.special.eos),
                )?)
            }
            None => None,
        };
        let weights = Box::new(weights);
        // SAFETY: the tensors borrow the memory map / buffers owned by `*weights`, a heap
        // allocation whose contents never move or change; `weights` is stored in the same
        // `Generator`, declared after `model`, so it outlives every use of these borrows,
        // and no `&mut` to it is ever created.
        let weights_ref: &'static Weights = unsafe { &*(&*weights as *const Weights) };
        let tensors = weights_ref.model(&config)?;
        let rope_freqs = tensors.rope_freqs.as_ref().and_then(|t| t.as_f32());
        let hp = Hparams::from_config(&config, rope_freqs)?;
        let parts = ModelParts::from_tensors(&tensors)?;
        let model = Model::new(hp, parts, options.isa.unwrap_or_else(Isa::detect))?.with_rope(
            RopeRule::LlamaCpp(LlamaCppRope::from_config(&config, rope_freqs)),
        )?;
        let threads = options
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let state = State::new(
            &model,
            StateOptions {
                context,
                max_batch: options.max_batch.max(1),
                logit_rows: 1,
                threads,
            },
        )
        .map_err(|source| GenerateError::Threads { threads, source })?;
        let sampler = Sampler::for_model(model.hparams(), MAX_PENALTY_WINDOW);
        Ok(Generator {
            model,
            state,
            sampler,
            tokenizer,
            template,
            config,
            defaults: generation,
            cancel: Arc::new(AtomicBool::new(false)),
            #[cfg(feature = "cuda")]
            gpu: None,
            weights,
        })
    }

    /// Moves generation to CUDA device `ordinal`: uploads the weights, places the cache
    /// (this generator's context) and captures the decode step as one graph, checked against
    /// an eager run before it is used (see [`crate::gpu`]). Later requests run on the GPU,
    /// greedy or sampled on the device.
    ///
    /// # Errors
    /// [`GenerateError::Gpu`].
    #[cfg(feature = "cuda")]
    pub fn use_gpu(
        &mut self,
        ordinal: usize,
        sync: tether_runtime::cuda::SyncPolicy,
    ) -> Result<(), GenerateError> {
        self.use_gpu_chunked(ordinal, sync, crate::gpu::PREFILL_CHUNK)
    }

    /// [`use_gpu`](Self::use_gpu) with `prefill_chunk` prompt tokens per replay of the
    /// prefill graph (0: none, the prompt runs through the decode graph token by token).
    ///
    /// # Errors
    /// [`GenerateError::Gpu`].
    #[cfg(feature = "cuda")]
    pub fn use_gpu_chunked(
        &mut self,
        ordinal: usize,
        sync: tether_runtime::cuda::SyncPolicy,
        prefill_chunk: usize,
    ) -> Result<(), GenerateError> {
        let d = crate::gpu::GpuDecoder::new(
            &self.model,
            self.gpu_options(ordinal, sync, prefill_chunk),
        )?;
        self.gpu = Some(Box::new(d));
        Ok(())
    }

    /// [`use_gpu`](Self::use_gpu) on the device of `other`'s GPU decoder, reading the weights
    /// `other` uploaded instead of uploading them again: two generators of one model (two
    /// requests served at once, each with its own cache, state and graphs) hold one copy of
    /// the weights. `other` must have been opened from the same model (its weights' CRC-32 is
    /// compared); the upload lives until the last generator using it is dropped.
    ///
    /// # Errors
    /// [`GenerateError::Gpu`]: `other` has no GPU decoder ([`GpuError::SharedWeights`]),
    /// another model, a longer context than `other`'s; as [`use_gpu`](Self::use_gpu).
    ///
    /// [`GpuError::SharedWeights`]: crate::gpu::GpuError::SharedWeights
    #[cfg(feature = "cuda")]
    pub fn use_gpu_sharing(
        &mut self,
        other: &Generator,
        sync: tether_runtime::cuda::SyncPolicy,
    ) -> Result<(), GenerateError> {
        let Some(o) = other.gpu() else {
            return Err(crate::gpu::GpuError::SharedWeights {
                reason: "the other generator has no GPU decoder (use_gpu first)".into(),
            }
            .into());
        };
        let options = self.gpu_options(
            o.device_weights().ordinal(),
            sync,
            crate::gpu::PREFILL_CHUNK,
        );
        let d = crate::gpu::GpuDecoder::new_sharing(&self.model, options, o)?;
        self.gpu = Some(Box::new(d));
        Ok(())
    }

    /// The GPU options of this generator (its context and prompt batch).
    #[cfg(feature = "cuda")]
    fn gpu_options(
        &self,
        ordinal: usize,
        sync: tether_runtime::cuda::SyncPolicy,
        prefill_chunk: usize,
    ) -> crate::gpu::GpuOptions {
        crate::gpu::GpuOptions {
            ordinal,
            context: self.state.cache().shape().context,
            sync,
            fused: true,
            prefill_chunk,
            dependent_launch: true,
            // One cluster launch per layer below a position, the fused step from there (the
            // same values; `crate::gpu::layer_kernel_below` reads the environment's choice).
            layer_kernel_below: crate::gpu::layer_kernel_below(),
            grid_layers: crate::gpu::grid_layers(),
            layer_tail: crate::gpu::layer_tail(),
            prompt_batch: self.state.max_batch(),
        }
    }

    /// The GPU decoder, when one is attached.
    #[cfg(feature = "cuda")]
    pub fn gpu(&self) -> Option<&crate::gpu::GpuDecoder> {
        self.gpu.as_deref()
    }

    /// The GPU decoder, mutable (benchmarks).
    #[cfg(feature = "cuda")]
    pub fn gpu_mut(&mut self) -> Option<&mut crate::gpu::GpuDecoder> {
        self.gpu.as_deref_mut()
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The checkpoint's sampling defaults.
    pub fn generation_defaults(&self) -> &GenerationDefaults {
        &self.defaults
    }

    /// The model (program, weights, instruction set).
    pub fn model(&self) -> &Model<'_> {
        &self.model
    }

    /// The sequence state (KV cache, buffers, threads).
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The model and the sequence state together, for benchmarks and teacher-forced
    /// evaluation (the state's cache is the generator's: a later request resets it).
    pub fn model_and_state(&mut self) -> (&Model<'_>, &mut State) {
        (&self.model, &mut self.state)
    }

    /// Number of tensors behind the model.
    pub fn tensor_count(&self) -> usize {
        self.weights.len()
    }

    /// A handle that cancels the request in progress from another thread.
    pub fn cancel_handle(&self) -> CancelHandle {
        CancelHandle(Arc::clone(&self.cancel))
    }

    /// The token ids of a prompt (chat messages rendered by the template).
    ///
    /// # Errors
    /// [`GenerateError::NoChatTemplate`], template and tokenizer errors.
    pub fn tokenize(&self, prompt: Prompt<'_>) -> Result<Vec<u32>, GenerateError> {
        match prompt {
            Prompt::Tokens(t) => Ok(t.to_vec()),
            Prompt::Text(s) => Ok(self.tokenizer.encode(s, true, true)?),
            Prompt::Chat(messages) => {
                let template = self
                    .template
                    .as_ref()
                    .ok_or(GenerateError::NoChatTemplate)?;
                let text = template.render(messages, true)?;
                let mut ids = self.tokenizer.encode(&text, true, true)?;
                // A template that writes the BOS token itself and a tokenizer that adds one:
                // keep one (field.md 9).
                if let Some(bos) = self.config.special.bos
                    && ids.len() >= 2
                    && ids[0] == bos
                    && ids[1] == bos
                {
                    ids.remove(0);
                }
                Ok(ids)
            }
        }
    }

    /// Starts a request: resets the cancel flag (first: a cancel from then on, tokenising
    /// included, stops this request), tokenises the prompt, resets the cache and the
    /// sampler. The prompt runs on the first [`Generation::next_piece`].
    ///
    /// # Errors
    /// [`GenerateError::EmptyPrompt`]; [`GenerateError::Forward`] with
    /// [`ForwardError::ContextFull`] when the prompt does not fit the context (never
    /// truncated), or [`ForwardError::TokenOutOfRange`]; sampler parameter and tokenizer
    /// errors.
    pub fn generate(
        &mut self,
        prompt: Prompt<'_>,
        params: &GenerateParams,
    ) -> Result<Generation<'_>, GenerateError> {
        // Cleared first, so that a cancel while the prompt is tokenised and its template
        // rendered (seconds for a long prompt) stops this request, not a later one.
        self.cancel.store(false, Ordering::Release);
        params.sampler.validate()?;
        #[cfg(feature = "cuda")]
        if self.gpu.is_some() {
            crate::gpu::check_sampling(&params.sampler, self.model.hparams().n_vocab)?;
        }
        let prompt_tokens = self.tokenize(prompt)?;
        if prompt_tokens.is_empty() {
            return Err(GenerateError::EmptyPrompt);
        }
        let n_vocab = self.model.hparams().n_vocab;
        if let Some((index, &token)) = prompt_tokens
            .iter()
            .enumerate()
            .find(|&(_, &t)| t as usize >= n_vocab)
        {
            return Err(ForwardError::TokenOutOfRange {
                token,
                index,
                n_vocab,
            }
            .into());
        }
        self.state.cache_mut().reset();
        self.state
            .cache()
            .check_room(prompt_tokens.len())
            .map_err(ForwardError::from)?;
        self.sampler.reset();
        for &t in &prompt_tokens {
            self.sampler.accept(t);
        }
        self.weights.ensure_unchanged()?;
        let max_stop = params.stop.iter().map(|s| s.len()).max().unwrap_or(0);
        let piece_cap = 4 * (self.tokenizer.max_piece_len() + 4) + max_stop;
        let eog = if params.ignore_eos {
            Vec::new()
        } else {
            self.config.special.eog.clone()
        };
        let decoder = self.tokenizer.stream(false);
        // Room for the most tokens this request can make: a `max_tokens` beyond the context
        // (up to `usize::MAX`, "no limit") ends when the context is full.
        let room = self
            .state
            .cache()
            .context()
            .saturating_sub(prompt_tokens.len());
        let cap = params.max_tokens.min(room + 1) + 1;
        Ok(Generation {
            model: &self.model,
            weights: &self.weights,
            state: &mut self.state,
            sampler: &mut self.sampler,
            decoder,
            cancel: &self.cancel,
            #[cfg(feature = "cuda")]
            gpu: self.gpu.as_deref_mut(),
            params: params.clone(),
            eog,
            held: String::with_capacity(piece_cap),
            out: String::with_capacity(piece_cap),
            started: Instant::now(),
            last_token_at: None,
            step_done_at: None,
            pending: None,
            done: None,
            finished: Finished {
                finish_reason: FinishReason::Length,
                prompt_tokens,
                tokens: Vec::with_capacity(cap),
                seed: params.sampler.seed,
                timings: Timings {
                    inter_token_ms: Vec::with_capacity(cap),
                    ..Timings::default()
                },
            },
        })
    }

    /// Runs a request to the end and returns the text and the outcome.
    ///
    /// # Errors
    /// As [`generate`](Self::generate) and [`Generation::next_piece`].
    pub fn generate_text(
        &mut self,
        prompt: Prompt<'_>,
        params: &GenerateParams,
    ) -> Result<(String, Finished), GenerateError> {
        let mut run = self.generate(prompt, params)?;
        let mut text = String::new();
        while let Some(p) = run.next_piece()? {
            text.push_str(p.text);
        }
        Ok((text, run.finish()))
    }
}

/// Tokens between two checks that the bundle file did not change on disk during a request
/// (each check one `fstat`; also after the prompt and when the request ends, unless cancelled).
pub const CHANGE_CHECK_EVERY: usize = 32;

/// A request in progress: call [`next_piece`](Self::next_piece) until it returns `None`,
/// then [`finish`](Self::finish).
pub struct Generation<'g> {
    model: &'g Model<'static>,
    /// The storage `model` reads, checked for a file changed on disk at the request's start,
    /// after the prompt, every [`CHANGE_CHECK_EVERY`] tokens and at its end.
    weights: &'g Weights,
    state: &'g mut State,
    sampler: &'g mut Sampler,
    decoder: StreamDecoder<'g>,
    cancel: &'g AtomicBool,
    #[cfg(feature = "cuda")]
    gpu: Option<&'g mut crate::gpu::GpuDecoder>,
    params: GenerateParams,
    eog: Vec<u32>,
    /// Text not yet emitted because it may begin a stop string.
    held: String,
    /// The text of the piece being returned.
    out: String,
    started: Instant,
    last_token_at: Option<Instant>,
    /// When the last GPU decode step's token came back (host time between steps).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    step_done_at: Option<Instant>,
    /// The last sampled token, to be run through the model before the next draw.
    pending: Option<u32>,
    done: Option<FinishReason>,
    finished: Finished,
}

impl std::fmt::Debug for Generation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generation")
            .field("tokens", &self.finished.tokens.len())
            .field("done", &self.done)
            .finish()
    }
}

impl Generation<'_> {
    /// The prompt through the CPU forward pass in the chunks the forward pass itself cuts
    /// ([`State::max_batch`](crate::forward::State::max_batch) tokens, llama.cpp's `n_ubatch`:
    /// the same arithmetic as one call), the cancel flag read between the engine's steps
    /// ([`Model::forward_cancellable`]) so that a long prompt stops within a layer. Returns
    /// the prompt tokens processed: fewer than the prompt's when cancelled (the chunks
    /// completed before the flag was seen).
    fn prefill(&mut self, prompt: &[u32]) -> Result<usize, GenerateError> {
        self.state
            .cache()
            .check_room(prompt.len())
            .map_err(ForwardError::from)?;
        Ok(self
            .model
            .forward_cancellable(self.state, prompt, LogitsFor::Last, self.cancel)?)
    }

    /// The next piece, or `None` when the request has ended (then call
    /// [`finish`](Self::finish)). Allocates nothing.
    ///
    /// # Errors
    /// [`GenerateError::Forward`] when the model refuses a token (cannot happen for tokens
    /// it sampled; kept for robustness).
    pub fn next_piece(&mut self) -> Result<Option<Piece<'_>>, GenerateError> {
        if self.done.is_some() {
            // One final flush of held text, then nothing.
            if self.held.is_empty() {
                return Ok(None);
            }
            self.out.clear();
            self.out.push_str(&self.held);
            self.held.clear();
            return Ok(Some(Piece {
                token: None,
                text: &self.out,
            }));
        }
        // On the GPU the decode step chooses the token on the device (the same chain and
        // draw step as the CPU sampler below).
        #[allow(unused_mut)]
        let mut chosen: Option<u32> = None;
        #[allow(unused_mut)]
        let mut gpu_full = false;
        #[cfg(feature = "cuda")]
        if let Some(gpu) = self.gpu.as_deref_mut() {
            if self.finished.tokens.is_empty() && self.pending.is_none() {
                let t0 = Instant::now();
                chosen = Some(gpu.prefill(&self.finished.prompt_tokens, &self.params.sampler)?);
                self.finished.timings.prompt_tokens = self.finished.prompt_tokens.len();
                self.finished.timings.prompt_ms = t0.elapsed().as_secs_f64() * 1e3;
                // The second token's step runs while the host handles the first.
                if self.params.max_tokens > 1 {
                    gpu.launch_ahead()?;
                }
            } else if self.pending.is_some() {
                if gpu.position() >= gpu.context() {
                    gpu_full = true;
                } else {
                    self.pending = None;
                    // Launch the step after this one unless this token is the last asked
                    // for: it runs while the host detokenises and streams this token.
                    let more = self.finished.tokens.len() + 1 < self.params.max_tokens;
                    let called = Instant::now();
                    if let Some(done) = self.step_done_at {
                        let t = &mut self.finished.timings;
                        t.host_between_steps_ms += (called - done).as_secs_f64() * 1e3;
                        t.host_between_steps += 1;
                    }
                    chosen = Some(gpu.step_ahead(more)?);
                    self.step_done_at = Some(Instant::now());
                }
            }
        }
        if gpu_full {
            return self.end(FinishReason::Length);
        }
        if chosen.is_some() {
            // The GPU ran the step.
        } else if self.finished.tokens.is_empty() && self.pending.is_none() {
            let t0 = Instant::now();
            let prompt = std::mem::take(&mut self.finished.prompt_tokens);
            let r = self.prefill(&prompt);
            self.finished.prompt_tokens = prompt;
            let processed = r?;
            // A request cancelled during its prompt counts the tokens it processed, so that
            // its rate is the rate they ran at.
            self.finished.timings.prompt_tokens = processed;
            self.finished.timings.prompt_ms = t0.elapsed().as_secs_f64() * 1e3;
            if processed < self.finished.prompt_tokens.len() {
                return self.end(FinishReason::Cancelled);
            }
        } else if let Some(token) = self.pending.take() {
            if self.state.cache().check_room(1).is_err() {
                return self.end(FinishReason::Length);
            }
            self.model.forward(self.state, &[token], LogitsFor::Last)?;
        }
        if self.cancel.load(Ordering::Acquire) {
            return self.end(FinishReason::Cancelled);
        }
        // A bundle rewritten under the memory map (e.g. `cp` over it) gives the model other
        // weights: refuse the request instead of streaming what they compute.
        if self
            .finished
            .tokens
            .len()
            .is_multiple_of(CHANGE_CHECK_EVERY)
        {
            self.weights.ensure_unchanged()?;
        }
        let step = self.finished.tokens.len() as u64;
        let token = match chosen {
            Some(t) => t,
            None => {
                // NaN logits (a broken model) would give an arbitrary token, often an
                // end-of-generation id: an empty answer reported as a normal stop.
                let logits = self.state.logits_mut();
                if logits.iter().any(|v| v.is_nan()) {
                    return Err(GenerateError::NanLogits {
                        position: self.finished.prompt_tokens.len() + self.finished.tokens.len(),
                        nan: logits.iter().filter(|v| v.is_nan()).count(),
                        n: logits.len(),
                    });
                }
                self.sampler.sample(logits, &self.params.sampler, step)
            }
        };
        self.sampler.accept(token);
        self.finished.tokens.push(token);
        let now = Instant::now();
        match self.last_token_at {
            None => {
                self.finished.timings.time_to_first_token_ms =
                    (now - self.started).as_secs_f64() * 1e3
            }
            Some(prev) => self
                .finished
                .timings
                .inter_token_ms
                .push((now - prev).as_secs_f64() * 1e3),
        }
        self.last_token_at = Some(now);
        self.finished.timings.generated_tokens = self.finished.tokens.len();
        if self.eog.contains(&token) {
            return self.end_with(Some(token), FinishReason::Stop);
        }
        let piece = self.decoder.push(token);
        self.held.push_str(piece);
        self.out.clear();
        // A stop string inside the held text: emit what precedes it, end.
        if let Some(at) = self
            .params
            .stop
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            self.mark_done(FinishReason::Stop)?;
            self.out.push_str(&self.held[..at]);
            self.held.clear();
            return Ok(Some(Piece {
                token: Some(token),
                text: &self.out,
            }));
        }
        // Keep back the longest tail that could start a stop string.
        let keep = partial_stop_len(&self.held, &self.params.stop);
        let emit = self.held.len() - keep;
        self.out.push_str(&self.held[..emit]);
        self.held.drain(..emit);
        if self.finished.tokens.len() >= self.params.max_tokens {
            self.mark_done(FinishReason::Length)?;
            self.flush_into_out();
        } else {
            self.pending = Some(token);
        }
        Ok(Some(Piece {
            token: Some(token),
            text: &self.out,
        }))
    }

    /// Ends with `reason`; the returned piece flushes held text (if any).
    fn end(&mut self, reason: FinishReason) -> Result<Option<Piece<'_>>, GenerateError> {
        self.end_with(None, reason)
    }

    fn end_with(
        &mut self,
        token: Option<u32>,
        reason: FinishReason,
    ) -> Result<Option<Piece<'_>>, GenerateError> {
        self.mark_done(reason)?;
        self.out.clear();
        self.flush_into_out();
        if token.is_none() && self.out.is_empty() {
            return Ok(None);
        }
        Ok(Some(Piece {
            token,
            text: &self.out,
        }))
    }

    /// Marks the request ended with `reason`. One that ran to its end (not cancelled) first
    /// checks that the bundle file is still the one the whole request read: a rewrite after
    /// the last periodic check would otherwise end it as if nothing happened.
    fn mark_done(&mut self, reason: FinishReason) -> Result<(), GenerateError> {
        if reason != FinishReason::Cancelled {
            self.weights.ensure_unchanged()?;
        }
        self.done = Some(reason);
        Ok(())
    }

    /// Moves held text and the detokeniser's incomplete tail into `out`.
    fn flush_into_out(&mut self) {
        self.out.push_str(&self.held);
        self.held.clear();
        self.out.push_str(self.decoder.finish());
    }

    /// Whether the request has ended.
    pub fn is_done(&self) -> bool {
        self.done.is_some()
    }

    /// The outcome (finish reason, tokens, timings). A request abandoned before its end
    /// reports [`FinishReason::Cancelled`].
    pub fn finish(mut self) -> Finished {
        self.finished.finish_reason = self.done.unwrap_or(FinishReason::Cancelled);
        // `+ 0.0`: Rust's float sum of nothing is -0.0 (a one-token request would report
        // a generation time of "-0.000").
        self.finished.timings.generation_ms =
            self.finished.timings.inter_token_ms.iter().sum::<f64>() + 0.0;
        self.finished
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of some stop string
/// (that text must wait for the next token), on character boundaries.
fn partial_stop_len(text: &str, stops: &[String]) -> usize {
    let mut best = 0;
    for s in stops {
        let max = s.len().saturating_sub(1).min(text.len());
        for len in (best + 1..=max).rev() {
            let start = text.len() - len;
            if text.is_char_boundary(start) && s.as_bytes().starts_with(&text.as_bytes()[start..]) {
                best = len;
                break;
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_stops() {
        let stops = vec!["</answer>".to_owned(), "\n\n".to_owned()];
        assert_eq!(partial_stop_len("Paris</ans", &stops), 5);
        assert_eq!(partial_stop_len("Paris\n", &stops), 1);
        assert_eq!(partial_stop_len("Paris", &stops), 0);
        assert_eq!(partial_stop_len("", &stops), 0);
        assert_eq!(partial_stop_len("é<", &["<é>".to_owned()]), 1);
    }
}
