//! The semantic API: text in, 384-d L2-normalised embedding out.

use std::path::Path;
use std::sync::Arc;

use tether_bundle::{Bundle, DType, Verify};
use zerocopy::IntoBytes;

use crate::config::{CONFIG_SECTION, ONNX_SECTION, SELFTEST_SECTION, TOKENIZER_SECTION};
use crate::net::{Network, fold_int8_dequantization};
use crate::selftest::{SelfTest, SelfTestReport};
use crate::tokenize::WordPiece;
use crate::{EMBEDDING_DIM, EmbedConfig, EmbedError, Embedding, FAMILY, mean_pool_normalize};

/// When the (batch, sequence) networks are prepared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Prepare {
    /// Each bucket on its first use (once; reused afterwards). A prepared
    /// bucket holds its own copy of the weights in the CPU engine, so
    /// preparing only what a workload uses keeps memory down.
    #[default]
    Lazy,
    /// Every bucket at open (predictable first-call latency, most memory).
    All,
}

/// Options of [`Embedder::open`].
#[derive(Clone, Debug, Default)]
pub struct EmbedderOptions {
    /// When buckets are prepared.
    pub prepare: Prepare,
    /// Check every section CRC at open instead of on first use.
    pub verify_eagerly: bool,
}

/// Where the ONNX bytes come from when a bucket is prepared.
enum Source {
    Bytes(Vec<u8>),
    Bundle(Arc<Bundle>),
}

impl Source {
    fn onnx(&self) -> Result<&[u8], EmbedError> {
        match self {
            Source::Bytes(b) => Ok(b),
            Source::Bundle(b) => Ok(b.section_data(ONNX_SECTION)?),
        }
    }
}

/// Positions of the network's inputs, found by name.
#[derive(Clone, Copy, Debug)]
struct Io {
    inputs: usize,
    input_ids: usize,
    attention_mask: usize,
    token_type_ids: Option<usize>,
}

/// all-MiniLM-L6-v2 sentence embeddings.
///
/// A batch of texts is tokenised (padding off, truncation to the maximum
/// sequence length), padded on the right to the smallest sequence bucket
/// that holds its longest text (`[PAD]` ids, attention mask 0, token types
/// 0), run through the network prepared for that (batch, sequence) bucket,
/// and each row is mean-pooled over its real tokens and L2-normalised
/// ([`crate::pool`]). Batches of one use the batch-1 networks; larger
/// batches run in groups of the maximum batch, a short group padded with
/// copies of its first row (their outputs are ignored).
///
/// Input and output buffers are allocated at open for the largest bucket and
/// reused; per call only the tokenizer and the CPU engine allocate. Each
/// prepared bucket holds the weights dequantised to f32 (about 90 MB for
/// all-MiniLM-L6-v2; see `net.rs`).
pub struct Embedder {
    source: Source,
    tokenizer: WordPiece,
    config: EmbedConfig,
    io: Io,
    seq_buckets: heapless::Vec<usize, { crate::config::MAX_BUCKETS }>,
    batch_buckets: heapless::Vec<usize, 2>,
    /// Prepared networks, `[batch bucket][sequence bucket]` flattened.
    nets: Vec<Option<Network>>,
    tokens: Vec<i64>,
    lens: Vec<usize>,
    ids: Vec<i64>,
    mask: Vec<i64>,
    types: Vec<i64>,
    hidden: Vec<f32>,
    selftest: Option<SelfTest>,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("tokenizer", &self.tokenizer)
            .field("config", &self.config)
            .field("seq_buckets", &self.seq_buckets)
            .field("batch_buckets", &self.batch_buckets)
            .field("prepared", &self.prepared())
            .finish_non_exhaustive()
    }
}

fn find_io(onnx: &[u8]) -> Result<Io, EmbedError> {
    let info =
        tether_runtime::cpu::inspect_onnx(onnx).map_err(|e| EmbedError::Network(e.to_string()))?;
    let mut io = Io {
        inputs: info.inputs.len(),
        input_ids: usize::MAX,
        attention_mask: usize::MAX,
        token_type_ids: None,
    };
    for (i, t) in info.inputs.iter().enumerate() {
        if t.dtype != DType::I64 || t.dims.len() != 2 {
            return Err(EmbedError::Network(format!(
                "input `{}` is {} {:?}; expected i64 [batch, sequence]",
                t.name, t.dtype, t.dims
            )));
        }
        match t.name.as_str() {
            "input_ids" => io.input_ids = i,
            "attention_mask" => io.attention_mask = i,
            "token_type_ids" => io.token_type_ids = Some(i),
            other => {
                return Err(EmbedError::Network(format!(
                    "unexpected input `{other}` (expected input_ids, attention_mask, token_type_ids)"
                )));
            }
        }
    }
    if io.input_ids == usize::MAX || io.attention_mask == usize::MAX {
        return Err(EmbedError::Network(format!(
            "inputs [{}] lack input_ids or attention_mask",
            info.inputs
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    match info.outputs.first() {
        Some(o) if o.dtype == DType::F32 && o.dims.len() == 3 => {}
        Some(o) => {
            return Err(EmbedError::Network(format!(
                "output `{}` is {} {:?}; expected f32 [batch, sequence, {EMBEDDING_DIM}] token embeddings",
                o.name, o.dtype, o.dims
            )));
        }
        None => return Err(EmbedError::Network("the network has no output".into())),
    }
    Ok(io)
}

impl Embedder {
    /// Open an `embed` bundle with default options.
    ///
    /// # Errors
    /// See [`Embedder::open`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self, EmbedError> {
        Self::open(path, &EmbedderOptions::default())
    }

    /// Open an `embed` bundle (memory-mapped).
    ///
    /// # Errors
    /// [`EmbedError::Bundle`], [`EmbedError::WrongFamily`],
    /// [`EmbedError::Config`], [`EmbedError::Tokenizer`],
    /// [`EmbedError::SelfTest`] (malformed payload), [`EmbedError::Network`].
    pub fn open(path: impl AsRef<Path>, options: &EmbedderOptions) -> Result<Self, EmbedError> {
        let verify = if options.verify_eagerly {
            Verify::Eager
        } else {
            Verify::Lazy
        };
        Self::from_bundle(Arc::new(Bundle::open(path, verify)?), options)
    }

    /// Prepare from an opened bundle (kept for lazily prepared buckets).
    ///
    /// # Errors
    /// As [`Embedder::open`].
    pub fn from_bundle(bundle: Arc<Bundle>, options: &EmbedderOptions) -> Result<Self, EmbedError> {
        let id = bundle.identity();
        if id.family != FAMILY {
            return Err(EmbedError::WrongFamily {
                bundle: id.name.to_string(),
                family: id.family.to_string(),
            });
        }
        let name = id.name.to_string();
        let config = EmbedConfig::from_section(bundle.section_data(CONFIG_SECTION)?)?;
        let tokenizer = bundle.section_data(TOKENIZER_SECTION)?.to_vec();
        let selftest = if bundle.section(SELFTEST_SECTION).is_ok() {
            Some(SelfTest::from_section(
                bundle.section_data(SELFTEST_SECTION)?,
            )?)
        } else {
            None
        };
        let mut e = Self::with_source(Source::Bundle(bundle), &tokenizer, config, options.prepare)?;
        e.selftest = selftest;
        log::info!(
            "embedder `{name}`: {}-d, max {} tokens, sequence buckets {:?}, batch buckets {:?}, tract CPU engine",
            EMBEDDING_DIM,
            config.max_seq_len,
            e.seq_buckets,
            e.batch_buckets
        );
        Ok(e)
    }

    /// Prepare from ONNX bytes and `tokenizer.json` bytes, without a bundle.
    ///
    /// # Errors
    /// [`EmbedError::Config`], [`EmbedError::Tokenizer`], [`EmbedError::Network`].
    pub fn from_parts(
        onnx: Vec<u8>,
        tokenizer_json: &[u8],
        config: EmbedConfig,
        prepare: Prepare,
    ) -> Result<Self, EmbedError> {
        Self::with_source(Source::Bytes(onnx), tokenizer_json, config, prepare)
    }

    fn with_source(
        source: Source,
        tokenizer_json: &[u8],
        config: EmbedConfig,
        prepare: Prepare,
    ) -> Result<Self, EmbedError> {
        config.validate()?;
        let io = find_io(source.onnx()?)?;
        let max_seq = config.max_seq_len as usize;
        let max_batch = config.max_batch as usize;
        let tokenizer = WordPiece::from_json(tokenizer_json, max_seq)?;
        let seq_buckets = config.seq_buckets();
        let batch_buckets = config.batch_buckets();
        let mut nets = Vec::new();
        nets.resize_with(seq_buckets.len() * batch_buckets.len(), || None);
        let mut e = Self {
            source,
            tokenizer,
            config,
            io,
            seq_buckets,
            batch_buckets,
            nets,
            tokens: vec![0; max_batch * max_seq],
            lens: vec![0; max_batch],
            ids: vec![0; max_batch * max_seq],
            mask: vec![0; max_batch * max_seq],
            types: vec![0; max_batch * max_seq],
            hidden: vec![0.0; max_batch * max_seq * EMBEDDING_DIM],
            selftest: None,
        };
        match prepare {
            Prepare::Lazy => {
                // Prepare the smallest bucket now: proves the network runs.
                e.network(0, 0)?;
            }
            Prepare::All => {
                for b in 0..e.batch_buckets.len() {
                    for s in 0..e.seq_buckets.len() {
                        e.network(b, s)?;
                    }
                }
            }
        }
        Ok(e)
    }

    /// The configuration in use.
    pub fn config(&self) -> &EmbedConfig {
        &self.config
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &WordPiece {
        &self.tokenizer
    }

    /// Sequence-length buckets, in tokens.
    pub fn seq_buckets(&self) -> &[usize] {
        &self.seq_buckets
    }

    /// Batch buckets.
    pub fn batch_buckets(&self) -> &[usize] {
        &self.batch_buckets
    }

    /// `(batch, sequence)` shapes prepared so far.
    pub fn prepared(&self) -> Vec<(usize, usize)> {
        let n = self.seq_buckets.len();
        self.nets
            .iter()
            .enumerate()
            .filter(|(_, net)| net.is_some())
            .map(|(i, _)| (self.batch_buckets[i / n], self.seq_buckets[i % n]))
            .collect()
    }

    /// The network of bucket `(b, s)`, prepared on first use.
    fn network(&mut self, b: usize, s: usize) -> Result<&mut Network, EmbedError> {
        let slot = b * self.seq_buckets.len() + s;
        if self.nets[slot].is_none() {
            let (batch, seq) = (self.batch_buckets[b], self.seq_buckets[s]);
            let shapes = vec![vec![batch, seq]; self.io.inputs];
            // Dequantise int8 weights once here rather than in every run
            // (net.rs); the folded bytes are dropped once tract holds the plan.
            let (onnx, folded) = fold_int8_dequantization(self.source.onnx()?)?;
            let net = Network::load(&onnx, &shapes)?;
            drop(onnx);
            log::debug!("embed: {folded} int8 weight tensors dequantised at load");
            let want = [batch, seq, EMBEDDING_DIM];
            match net.outputs().first() {
                Some(o) if o.dtype == DType::F32 && o.shape == want => {}
                o => {
                    return Err(EmbedError::Network(format!(
                        "at [{batch}, {seq}] the first output is {}, expected f32{want:?}",
                        o.map_or_else(|| "missing".to_string(), |o| o.to_string())
                    )));
                }
            }
            log::debug!("embed: prepared the network for batch {batch}, sequence {seq}");
            self.nets[slot] = Some(net);
        }
        self.nets[slot]
            .as_mut()
            .ok_or_else(|| EmbedError::Network("bucket preparation lost".into()))
    }

    /// Token ids of `text` as the network sees them (special tokens included,
    /// truncated to the maximum sequence length).
    ///
    /// # Errors
    /// [`EmbedError::Tokenizer`].
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        self.tokenizer.encode(text)
    }

    /// Embed one text.
    ///
    /// # Errors
    /// [`EmbedError::Tokenizer`], [`EmbedError::Network`] (a bucket failed to
    /// prepare), [`EmbedError::Run`] / [`EmbedError::Output`] from the engine.
    pub fn embed(&mut self, text: &str) -> Result<Embedding, EmbedError> {
        let mut out = [[0f32; EMBEDDING_DIM]];
        self.embed_batch(&[text], &mut out)?;
        Ok(out[0])
    }

    /// Embed `texts` into `out` (same length), in groups of the maximum batch.
    ///
    /// # Errors
    /// [`EmbedError::BatchSize`] when the lengths differ; otherwise as
    /// [`Embedder::embed`].
    pub fn embed_batch<S: AsRef<str>>(
        &mut self,
        texts: &[S],
        out: &mut [Embedding],
    ) -> Result<(), EmbedError> {
        if texts.len() != out.len() {
            return Err(EmbedError::BatchSize {
                texts: texts.len(),
                slots: out.len(),
            });
        }
        let max_batch = self.config.max_batch as usize;
        for (group, slots) in texts.chunks(max_batch).zip(out.chunks_mut(max_batch)) {
            self.run_group(group, slots)?;
        }
        Ok(())
    }

    fn run_group<S: AsRef<str>>(
        &mut self,
        texts: &[S],
        out: &mut [Embedding],
    ) -> Result<(), EmbedError> {
        let max_seq = self.config.max_seq_len as usize;
        let n = texts.len();
        let mut longest = 0;
        for (r, text) in texts.iter().enumerate() {
            let row = &mut self.tokens[r * max_seq..(r + 1) * max_seq];
            self.lens[r] = self.tokenizer.encode_into(text.as_ref(), row)?;
            longest = longest.max(self.lens[r]);
        }
        let b = if n == 1 {
            0
        } else {
            self.batch_buckets.len() - 1
        };
        let s = self
            .seq_buckets
            .iter()
            .position(|&len| len >= longest)
            .unwrap_or(self.seq_buckets.len() - 1);
        let (batch, seq) = (self.batch_buckets[b], self.seq_buckets[s]);
        let pad = i64::from(self.tokenizer.pad_id());
        for r in 0..batch {
            // Rows past the texts repeat row 0 (valid input, output ignored).
            let src = if r < n { r } else { 0 };
            let len = self.lens[src].min(seq);
            let tokens = &self.tokens[src * max_seq..src * max_seq + len];
            let ids = &mut self.ids[r * seq..(r + 1) * seq];
            ids[..len].copy_from_slice(tokens);
            ids[len..].fill(pad);
            let mask = &mut self.mask[r * seq..(r + 1) * seq];
            mask[..len].fill(1);
            mask[len..].fill(0);
            self.types[r * seq..(r + 1) * seq].fill(0);
        }
        let slot = b * self.seq_buckets.len() + s;
        if self.nets[slot].is_none() {
            self.network(b, s)?;
        }
        let cells = batch * seq;
        let io = self.io;
        let mut inputs: [&[u8]; 3] = [&[]; 3];
        // Borrow the buffers apart from `self.nets` (disjoint fields).
        let (ids, mask, types, hidden) = (
            &self.ids[..cells],
            &self.mask[..cells],
            &self.types[..cells],
            &mut self.hidden[..cells * EMBEDDING_DIM],
        );
        inputs[io.input_ids] = ids.as_bytes();
        inputs[io.attention_mask] = mask.as_bytes();
        if let Some(t) = io.token_type_ids {
            inputs[t] = types.as_bytes();
        }
        let Some(net) = self.nets[slot].as_mut() else {
            return Err(EmbedError::Network("bucket preparation lost".into()));
        };
        let mut outputs: [&mut [u8]; 1] = [hidden.as_mut_bytes()];
        net.run(&inputs[..io.inputs], &mut outputs)?;
        let row = seq * EMBEDDING_DIM;
        for (r, o) in out.iter_mut().enumerate().take(n) {
            mean_pool_normalize(&self.hidden[r * row..(r + 1) * row], self.lens[r], o);
        }
        Ok(())
    }

    /// The self-test payload of the bundle this was opened from, if any.
    pub fn bundled_self_test(&self) -> Option<&SelfTest> {
        self.selftest.as_ref()
    }

    /// Embed `test.text` and compare with the expected embedding.
    ///
    /// # Errors
    /// As [`Embedder::embed`].
    pub fn run_self_test(&mut self, test: &SelfTest) -> Result<SelfTestReport, EmbedError> {
        let got = self.embed(&test.text)?;
        Ok(test.compare(&got))
    }

    /// Run the bundle's own self-test payload (what `tether verify
    /// --self-test` runs on the device).
    ///
    /// # Errors
    /// [`EmbedError::SelfTest`] when the bundle has no payload; as
    /// [`Embedder::embed`].
    pub fn self_test(&mut self) -> Result<SelfTestReport, EmbedError> {
        let test = self.selftest.take().ok_or_else(|| {
            EmbedError::SelfTest(format!("the bundle has no `{SELFTEST_SECTION}` section"))
        })?;
        let r = self.run_self_test(&test);
        self.selftest = Some(test);
        r
    }
}
