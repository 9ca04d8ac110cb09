//! The semantic API: text in, 384-d L2-normalised embedding out.

use std::path::Path;
use std::sync::Arc;

use tether_bundle::{Bundle, IoMode};
use tether_family::model::{check_family, open_bundle};
use tether_family::selftest::{Report, SelfTest};
use tether_runtime::{Device, EngineKind, Model, ModelOptions, ShapePolicy, ShapeSessions};

use crate::config::{CONFIG_SECTION, ONNX_SECTION, TOKENIZER_SECTION};
use crate::net::{Bucket, NETWORK};
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
    /// Where to run (default: the first CUDA GPU when one answers, else the CPU).
    pub device: Device,
    /// Model options beyond the device (engines to exclude, precision, session
    /// options); the input shapes are set by [`Embedder::open`].
    pub model: ModelOptions,
    /// When buckets are prepared.
    pub prepare: Prepare,
    /// Check every section CRC at open instead of on first use.
    pub verify_eagerly: bool,
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
/// The network runs through the runtime's model API on the engine chosen for
/// [`EmbedderOptions::device`], one plan and session per bucket, prepared
/// once (`net.rs`). Token ids are written straight into the session's input
/// regions and pooled straight from its output region; per call only the
/// tokenizer and the tract CPU engine allocate. Each prepared bucket holds
/// the weights dequantised to f32 (about 90 MB for all-MiniLM-L6-v2).
pub struct Embedder {
    model: Model,
    tokenizer: WordPiece,
    config: EmbedConfig,
    seq_buckets: heapless::Vec<usize, { crate::config::MAX_BUCKETS }>,
    batch_buckets: heapless::Vec<usize, 2>,
    /// Prepared buckets, keyed `[batch, sequence]` (the runtime's sessions keyed by shape
    /// under the (batch, sequence) bucket policy).
    buckets: ShapeSessions<Bucket, 2>,
    /// Token ids of the current group, `max_seq` per row.
    tokens: Vec<i64>,
    lens: Vec<usize>,
    /// The bucket of the last run.
    last: Option<[usize; 2]>,
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

impl Embedder {
    /// Open an `embed` bundle with default options.
    ///
    /// # Errors
    /// See [`Embedder::open`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self, EmbedError> {
        Self::open(path, &EmbedderOptions::default())
    }

    /// Open an `embed` bundle (memory-mapped) on [`EmbedderOptions::device`].
    ///
    /// # Errors
    /// [`EmbedError::Model`] (an unreadable bundle, one of another family),
    /// [`EmbedError::Config`], [`EmbedError::Tokenizer`],
    /// [`EmbedError::Model`]
    /// (no engine for the network on this device, device unavailable,
    /// preparation failed), [`EmbedError::Network`] (not a BERT encoder).
    pub fn open(path: impl AsRef<Path>, options: &EmbedderOptions) -> Result<Self, EmbedError> {
        Self::from_bundle(open_bundle(path, options.verify_eagerly)?, options)
    }

    /// Prepare from an opened bundle. The tokenizer and the configuration are copied out at
    /// load; the model keeps the bundle for buckets prepared later (and the self-test, read
    /// only when run).
    ///
    /// # Errors
    /// As [`Embedder::open`].
    pub fn from_bundle(bundle: Arc<Bundle>, options: &EmbedderOptions) -> Result<Self, EmbedError> {
        check_family(&bundle, FAMILY)?;
        let id = bundle.identity();
        let name = id.name.to_string();
        let config = EmbedConfig::from_section(bundle.section_data(CONFIG_SECTION)?)?;
        config.validate()?;
        let max_seq = config.max_seq_len as usize;
        let max_batch = config.max_batch as usize;
        let tokenizer = WordPiece::from_json(bundle.section_data(TOKENIZER_SECTION)?, max_seq)?;
        // The build checked the tokenizer against the network's embedding table and
        // recorded its rows; a bundle whose tokenizer was replaced since is refused here,
        // not by the engine on the first out-of-range id.
        if let Some(rows) = crate::config::vocab_rows(bundle.section_data(CONFIG_SECTION)?)
            && let Some((id, token)) = tokenizer.max_id()
            && id >= rows
        {
            return Err(EmbedError::Vocabulary {
                id,
                token,
                rows: u64::from(rows),
                table: "input_ids's embedding table (rows recorded at build)".into(),
            });
        }
        // The encoder's inputs, as the recipe recorded them (each `[batch, seq]`).
        let section = bundle.section(ONNX_SECTION)?;
        let inputs = bundle
            .tensors(section.index)
            .filter(|t| t.mode == IoMode::Input)
            .count();
        if inputs == 0 {
            return Err(EmbedError::Network(format!(
                "the bundle records no input tensor for `{ONNX_SECTION}` (rebuild it with `tether build --family embed`)"
            )));
        }
        let seq_buckets = config.seq_buckets();
        let batch_buckets = config.batch_buckets();
        let mut model_options = options.model.clone();
        model_options.device = options.device;
        model_options.input_shapes = vec![(NETWORK.into(), vec![vec![1, seq_buckets[0]]; inputs])];
        let model = Model::from_bundle(bundle, &model_options)?;
        let buckets = ShapeSessions::new(
            &model,
            NETWORK,
            ShapePolicy::Buckets([batch_buckets.to_vec(), seq_buckets.to_vec()]),
            move |&[batch, seq]| vec![vec![batch, seq]; inputs],
        );
        let mut e = Self {
            model,
            tokenizer,
            config,
            seq_buckets,
            batch_buckets,
            buckets,
            tokens: vec![0; max_batch * max_seq],
            lens: vec![0; max_batch],
            last: None,
        };
        // The plan prepared at open is bucket (batch 1, smallest sequence).
        e.bucket([1, e.seq_buckets[0]])?;
        if options.prepare == Prepare::All {
            for key in e.buckets.policy().buckets() {
                e.bucket(key)?;
            }
        }
        log::info!(
            "embedder `{name}`: {EMBEDDING_DIM}-d, max {} tokens, sequence buckets {:?}, batch buckets {:?}, {} engine",
            config.max_seq_len,
            e.seq_buckets,
            e.batch_buckets,
            e.engine()
        );
        Ok(e)
    }

    /// Prepare from ONNX bytes and `tokenizer.json` bytes, without a bundle
    /// file: an in-memory bundle ([`crate::recipe::bundle_of`]) opened with
    /// default options and `prepare`.
    ///
    /// # Errors
    /// [`EmbedError::Config`], [`EmbedError::Tokenizer`],
    /// [`EmbedError::Network`], [`EmbedError::Model`].
    #[cfg(feature = "build")]
    pub fn from_parts(
        onnx: Vec<u8>,
        tokenizer_json: &[u8],
        config: EmbedConfig,
        prepare: Prepare,
    ) -> Result<Self, EmbedError> {
        Self::from_parts_with(
            &onnx,
            tokenizer_json,
            config,
            &EmbedderOptions {
                prepare,
                ..EmbedderOptions::default()
            },
        )
    }

    /// [`Embedder::from_parts`] with options (device, engines, preparation).
    ///
    /// # Errors
    /// As [`Embedder::from_parts`].
    #[cfg(feature = "build")]
    pub fn from_parts_with(
        onnx: &[u8],
        tokenizer_json: &[u8],
        config: EmbedConfig,
        options: &EmbedderOptions,
    ) -> Result<Self, EmbedError> {
        config.validate()?;
        // The tokenizer first: a bad one is named before the network is read.
        WordPiece::from_json(tokenizer_json, config.max_seq_len as usize)?;
        let writer = crate::recipe::bundle_of(
            onnx,
            tokenizer_json,
            &config,
            tether_bundle::IdentityDesc {
                name: "embed".into(),
                family: FAMILY.into(),
                model_version: "unspecified".into(),
                tool_version: concat!("tether-embed ", env!("CARGO_PKG_VERSION")).into(),
                created_unix_s: 0,
            },
        )?;
        let bundle = Bundle::from_vec(writer.to_bytes()?, tether_bundle::Verify::Eager)?;
        Self::from_bundle(Arc::new(bundle), options)
    }

    /// The model underneath (device, network, why its engine was chosen).
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The sessions prepared so far, one per `[batch, sequence]` bucket, in the order made.
    pub fn sessions(&self) -> impl Iterator<Item = &tether_runtime::session::Session> + '_ {
        self.buckets.values().map(Bucket::session)
    }

    /// The engine running the encoder (chosen for the device at open).
    pub fn engine(&self) -> EngineKind {
        self.model
            .network(NETWORK)
            .map_or(EngineKind::TractCpu, |n| n.engine())
    }

    /// Milliseconds per step of the last run's bucket session (host wall
    /// time, or GPU time with step timing); empty before the first run.
    pub fn step_times(&self) -> &[(String, f64)] {
        self.last
            .and_then(|key| self.buckets.held(key))
            .map_or(&[], |b| b.step_times())
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

    /// `(batch, sequence)` shapes prepared so far (each once).
    pub fn prepared(&self) -> Vec<(usize, usize)> {
        self.buckets.keys().map(|[b, s]| (b, s)).collect()
    }

    /// The bucket of `[batch, sequence]`, prepared on first use (on the
    /// engine chosen at open; the plan from open for its own bucket) and kept.
    fn bucket(&mut self, shape: [usize; 2]) -> Result<&mut Bucket, EmbedError> {
        let model = &self.model;
        self.buckets.get(model, shape, |plan, [batch, seq]| {
            make_bucket(model, plan, batch, seq)
        })
    }

    /// Where `text` is cut when it is longer than the maximum sequence length
    /// (`None` when it fits); see [`crate::tokenize::Truncated`].
    ///
    /// # Errors
    /// [`EmbedError::Tokenizer`].
    pub fn truncation(&self, text: &str) -> Result<Option<crate::tokenize::Truncated>, EmbedError> {
        self.tokenizer.truncation(text)
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
        // The smallest (batch, sequence) bucket holding the group: batch 1 for
        // one text, else the maximum batch; the longest text's tokens, else the
        // maximum sequence.
        let key = self.buckets.policy().fit([n, longest]);
        let [batch, seq] = key;
        self.last = Some(key);
        let pad = i64::from(self.tokenizer.pad_id());
        // Disjoint fields: the bucket mutably, the token rows shared.
        let (tokens, lens) = (&self.tokens, &self.lens);
        let model = &self.model;
        let bucket = self.buckets.get(model, key, |plan, [batch, seq]| {
            make_bucket(model, plan, batch, seq)
        })?;
        // Rows past the texts repeat row 0 (valid input, output ignored).
        let row_len = |r: usize| lens[if r < n { r } else { 0 }].min(seq);
        bucket.fill(
            |ids| {
                for r in 0..batch {
                    let src = if r < n { r } else { 0 };
                    let len = row_len(r);
                    let row = &mut ids[r * seq..(r + 1) * seq];
                    row[..len].copy_from_slice(&tokens[src * max_seq..src * max_seq + len]);
                    row[len..].fill(pad);
                }
            },
            |mask| {
                for r in 0..batch {
                    let len = row_len(r);
                    let row = &mut mask[r * seq..(r + 1) * seq];
                    row[..len].fill(1);
                    row[len..].fill(0);
                }
            },
            |types| types.fill(0),
        )?;
        let hidden = bucket.run()?;
        let row = seq * EMBEDDING_DIM;
        for (r, o) in out.iter_mut().enumerate().take(n) {
            mean_pool_normalize(&hidden[r * row..(r + 1) * row], lens[r].min(seq), o);
        }
        Ok(())
    }

    /// The self-test the bundle this was opened from carries, if any (read from the
    /// bundle when asked: a bundle whose self-test this build cannot read still opens).
    ///
    /// # Errors
    /// [`EmbedError::SelfTest`] for an unreadable section.
    pub fn bundled_self_test(&self) -> Result<Option<SelfTest>, EmbedError> {
        Ok(SelfTest::of_bundle(self.model.bundle(), FAMILY)?)
    }

    /// Embed the test's text and compare with the expected embedding.
    ///
    /// # Errors
    /// [`EmbedError::SelfTest`] for a test without the family's entries; as
    /// [`Embedder::embed`].
    pub fn run_self_test(&mut self, test: &SelfTest) -> Result<Report, EmbedError> {
        let got = self.embed(crate::selftest::input(test)?)?;
        crate::selftest::compare(test, &got, &self.engine().to_string())
    }

    /// Run the bundle's own self-test (what `tether verify --self-test` runs on the
    /// device).
    ///
    /// # Errors
    /// [`EmbedError::SelfTest`] when the bundle has none or it is unreadable; as
    /// [`Embedder::run_self_test`].
    pub fn self_test(&mut self) -> Result<Report, EmbedError> {
        let test = SelfTest::required(self.model.bundle(), FAMILY)?;
        self.run_self_test(&test)
    }
}

/// The session of one (batch, sequence) bucket around its plan (or the
/// preparation's error).
fn make_bucket(
    model: &Model,
    plan: Result<tether_runtime::Plan, tether_runtime::Error>,
    batch: usize,
    seq: usize,
) -> Result<Bucket, EmbedError> {
    let bucket = Bucket::new(model, plan?, batch, seq)?;
    log::debug!(
        "embed: session for batch {batch}, sequence {seq} on {}",
        bucket.engine()
    );
    Ok(bucket)
}
