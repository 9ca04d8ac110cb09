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

use tether_build::{OnnxInfo, inspect_onnx};
use tether_bundle::BundleWriter;
use tether_family::recipe::{in_memory, pinned_version, sha256_hex};
use tether_runtime::Device;

use tether_family::selftest::{self, Report};

use crate::vad::bundle_with_identity;
use crate::{FAMILY, Vad, VadConfig, VadError, VadOptions};

/// SHA-256 of `silero_vad/data/silero_vad_op18_ifless.onnx` in the
/// `silero-vad==6.2.3` wheel (also in `tests/assets.sha256`).
pub const PINNED_MODEL_SHA256: &str =
    "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28";

pub use tether_family::recipe::BuildCommon;

/// What to build.
#[derive(Clone, Debug, Default)]
pub struct BuildOptions {
    /// Name, model version and creation time of the bundle identity (the model version's
    /// default: "silero-vad 6.2.3 (silero_vad_op18_ifless.onnx)" for the pinned file, else
    /// "unspecified").
    pub common: BuildCommon,
    /// Segment parameters (default: the package's).
    pub config: Option<VadConfig>,
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
    pub selftest: Report,
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
/// [`VadError::ReferenceMismatch`] when the pinned network does not reproduce the
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
    let model_sha256 = sha256_hex(onnx);
    let pinned_model = model_sha256 == PINNED_MODEL_SHA256;

    let mut writer = bundle_with_identity(
        onnx,
        &config,
        options.common.identity(
            FAMILY,
            concat!("tether-vad ", env!("CARGO_PKG_VERSION")),
            || {
                pinned_version(
                    pinned_model,
                    "silero-vad 6.2.3 (silero_vad_op18_ifless.onnx)",
                )
            },
        ),
    )?;

    progress("preparing the network on the CPU engine and running the self-test");
    let mut vad = Vad::from_bundle(
        in_memory(&writer)?,
        &VadOptions {
            device: Device::Cpu,
            ..VadOptions::default()
        },
    )?;
    if !pinned_model {
        log::warn!(
            "model SHA-256 {model_sha256} is not silero-vad 6.2.3's; the self-test expects this build host's CPU results"
        );
    }
    let (payload, selftest) = selftest::for_recipe(
        pinned_model,
        crate::selftest::reference()?,
        &mut vad,
        Vad::run_self_test,
        |vad, reference| {
            let pcm = crate::selftest::input(&reference)?.to_vec();
            let expected = vad.chunk_probabilities(&pcm)?;
            Ok(crate::selftest::payload(
                pcm,
                expected,
                reference.tolerance(crate::selftest::MAX_ABS_DIFF)?,
                selftest::host_source(&format!(
                    "model SHA-256 {model_sha256}, not the pinned silero-vad 6.2.3 file"
                )),
            ))
        },
        |report| VadError::ReferenceMismatch(Box::new(report)),
    )?;
    drop(vad);

    progress("writing the bundle");
    payload.add_to(&mut writer, FAMILY)?;
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
