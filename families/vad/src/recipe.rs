//! The build recipe: the Silero VAD streaming ONNX network -> a `vad` bundle.
//!
//! Checks that the network has Silero's streaming I/O (`input` f32
//! `[batch, samples]`, `sr` i64 scalar, `state` f32 `[2, batch, 128]` ->
//! `output` f32 `[batch, 1]`, `stateN` f32 `[2, batch, 128]`), opens the
//! bundle in memory on the CPU engine (model API, `sr` fixed, `[1, 576]`),
//! runs the self-test, and lays out the bundle (tensors recorded at the
//! shapes the family runs):
//!
//! | section | kind | content |
//! |---|---|---|
//! | `vad/silero/model.onnx` | `Onnx` (target `portable`) | the ONNX file, byte for byte |
//! | `vad/config` | `FamilyConfig` | [`crate::config::VadConfigRecord`] |
//! | `vad/selftest` | `Reference` | [`crate::selftest`] payload |
//!
//! The self-test's expected probabilities are the package's own (committed
//! golden) when the ONNX file is the pinned `silero_vad_op18_ifless.onnx` of
//! silero-vad 6.2.3 (SHA-256 [`PINNED_MODEL_SHA256`]); the build fails if the
//! CPU engine does not reproduce them. For any other file no reference
//! exists, so the expected values are the CPU engine's at build time (the
//! payload's source says so), and the self-test then checks that the
//! deployed device agrees with the build host.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use tether_build::{OnnxInfo, inspect_onnx};
use tether_bundle::{Bundle, BundleWriter, IdentityDesc, SectionKind, Verify};
use tether_runtime::Device;

use crate::config::SELFTEST_SECTION;
use crate::selftest::{SelfTest, SelfTestReport};
use crate::vad::bundle_with_identity;
use crate::{CHUNK_SAMPLES, FAMILY, Vad, VadConfig, VadError, VadOptions};

/// SHA-256 of `silero_vad/data/silero_vad_op18_ifless.onnx` in the
/// `silero-vad==6.2.3` wheel (also in `tests/assets.sha256`).
pub const PINNED_MODEL_SHA256: &str =
    "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28";

/// What to build.
#[derive(Clone, Debug, Default)]
pub struct BuildOptions {
    /// Bundle name.
    pub name: String,
    /// Model version recorded in the identity (default: "silero-vad 6.2.3
    /// (silero_vad_op18_ifless.onnx)" for the pinned file, else "unspecified").
    pub model_version: Option<String>,
    /// Segment parameters (default: the package's).
    pub config: Option<VadConfig>,
    /// Creation time, seconds since the Unix epoch.
    pub created_unix_s: u64,
}

/// What the recipe decided, for the build log.
#[derive(Clone, Debug)]
pub struct BuildReport {
    /// The configuration written.
    pub config: VadConfig,
    /// The ONNX file's declared I/O and metadata.
    pub onnx: OnnxInfo,
    /// SHA-256 of the ONNX file, lower-case hex.
    pub model_sha256: String,
    /// Whether the file is the pinned silero-vad 6.2.3 network.
    pub pinned_model: bool,
    /// The self-test run on the CPU engine at build time.
    pub selftest: SelfTestReport,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn check_io(info: &OnnxInfo) -> Result<(), VadError> {
    use tether_bundle::DType;
    let want_in = [
        ("input", DType::F32, 2),
        ("sr", DType::I64, 0),
        ("state", DType::F32, 3),
    ];
    let want_out = [("output", DType::F32, 2), ("stateN", DType::F32, 3)];
    for (list, want, what) in [
        (&info.inputs, &want_in[..], "input"),
        (&info.outputs, &want_out[..], "output"),
    ] {
        for (name, dtype, rank) in want {
            let t = list.iter().find(|t| t.name == *name).ok_or_else(|| {
                VadError::Network(format!(
                    "no {what} `{name}` (found {})",
                    list.iter()
                        .map(|t| format!("`{}`", t.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            if t.dtype != *dtype || t.dims.len() != *rank {
                return Err(VadError::Network(format!(
                    "{what} `{name}` is {} {:?}; expected {dtype} of rank {rank}",
                    t.dtype, t.dims
                )));
            }
        }
    }
    Ok(())
}

/// Build a `vad` bundle writer from ONNX bytes.
///
/// `progress` receives a short message before each long step.
///
/// # Errors
/// [`VadError::Network`] for a network without Silero's streaming I/O or
/// that fails to prepare; [`VadError::Config`] for out-of-range options;
/// [`VadError::SelfTest`] when the pinned network does not reproduce the
/// package's probabilities on the CPU engine; [`VadError::Bundle`] from the
/// writer.
pub fn build(
    onnx: &[u8],
    options: &BuildOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<(BundleWriter, BuildReport), VadError> {
    progress("reading the ONNX graph");
    let info = inspect_onnx(onnx).map_err(|e| VadError::Network(e.to_string()))?;
    check_io(&info)?;
    let config = options.config.unwrap_or_default();
    config.validate()?;
    let model_sha256 = hex(&Sha256::digest(onnx));
    let pinned_model = model_sha256 == PINNED_MODEL_SHA256;

    let model_version = options.model_version.clone().unwrap_or_else(|| {
        if pinned_model {
            "silero-vad 6.2.3 (silero_vad_op18_ifless.onnx)".into()
        } else {
            "unspecified".into()
        }
    });
    let mut writer = bundle_with_identity(
        onnx,
        &config,
        IdentityDesc {
            name: options.name.clone(),
            family: FAMILY.into(),
            model_version,
            tool_version: concat!("tether-vad ", env!("CARGO_PKG_VERSION")).into(),
            created_unix_s: options.created_unix_s,
        },
    )?;

    progress("preparing the network on the CPU engine and running the self-test");
    let bundle = Bundle::from_vec(writer.to_bytes()?, Verify::Eager)?;
    let mut vad = Vad::from_bundle(
        Arc::new(bundle),
        &VadOptions {
            device: Device::Cpu,
            ..VadOptions::default()
        },
    )?;
    let reference = SelfTest::reference()?;
    let (payload, selftest) = if pinned_model {
        let report = vad.run_self_test(&reference)?;
        if !report.passed {
            return Err(VadError::SelfTest(format!(
                "the CPU engine does not reproduce the reference: {report}"
            )));
        }
        (reference, report)
    } else {
        log::warn!(
            "model SHA-256 {model_sha256} is not silero-vad 6.2.3's; the self-test expects this build host's CPU results"
        );
        let mut expected = Vec::with_capacity(reference.chunks());
        vad.reset()?;
        for chunk in reference.pcm.chunks_exact(CHUNK_SAMPLES) {
            expected.push(vad.push_chunk(chunk)?.probability);
        }
        vad.reset()?;
        let payload = SelfTest {
            pcm: reference.pcm,
            expected,
            tolerance: reference.tolerance,
            source: format!(
                "the tract CPU engine at build time (model SHA-256 {model_sha256}, not the pinned silero-vad 6.2.3 file)"
            ),
        };
        let report = vad.run_self_test(&payload)?;
        (payload, report)
    };
    drop(vad);

    progress("writing the bundle");
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
            onnx: info,
            model_sha256,
            pinned_model,
            selftest,
        },
    ))
}
