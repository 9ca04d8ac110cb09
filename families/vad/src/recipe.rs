//! The build recipe: a Silero VAD ONNX network -> a `vad` bundle.
//!
//! Checks that the network has one of Silero's two interfaces ([`Form`]): the streaming
//! form (`input` f32 `[batch, samples]`, `sr` i64 scalar, `state` f32 `[2, batch, 128]` ->
//! `output` f32 `[batch, 1]`, `stateN`) or the sequence form (`input` f32 `[T, 576]`, `h`,
//! `c` f32 `[1, 1, 128]` -> `speech_probs` f32 `[T]`, `hn`, `cn`), opens the
//! bundle in memory on the CPU engine (model API, one 576-sample window per run),
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
//! silero-vad 6.2.3 (SHA-256 [`PINNED_MODEL_SHA256`]), and faster-whisper's own for its
//! `silero_vad_v6.onnx` ([`PINNED_SEQUENCE_MODEL_SHA256`]); the build fails if the
//! CPU engine does not reproduce them. For any other file no reference
//! exists, so the expected values are the CPU engine's at build time (the
//! payload's source says so), and the self-test then checks that the
//! deployed device agrees with the build host.

use tether_build::{OnnxInfo, inspect_onnx};
use tether_bundle::{BundleWriter, TensorDesc};
use tether_family::recipe::{in_memory, pinned_version, sha256_hex};
use tether_runtime::Device;

use tether_family::selftest::{self, Report};

use crate::net::Form;
use crate::vad::bundle_with_identity;
use crate::{FAMILY, Vad, VadConfig, VadError, VadOptions};

/// SHA-256 of `silero_vad/data/silero_vad_op18_ifless.onnx` in the
/// `silero-vad==6.2.3` wheel (also in `tests/assets.sha256`).
pub const PINNED_MODEL_SHA256: &str =
    "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28";

/// SHA-256 of `faster_whisper/assets/silero_vad_v6.onnx` in the `faster-whisper==1.2.1`
/// wheel: Silero's sequence form ([`Form::Sequence`]), pinned with faster-whisper's own
/// probabilities as its self-test (`golden/selftest_sequence.json`).
pub const PINNED_SEQUENCE_MODEL_SHA256: &str =
    "4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2";

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
    /// Whether the file is a pinned network (silero-vad 6.2.3's streaming form, or
    /// faster-whisper 1.2.1's sequence form).
    pub pinned_model: bool,
    /// Which of Silero's interfaces the network has.
    pub form: Form,
    /// The self-test run on the CPU engine at build time.
    pub selftest: Report,
}

/// Check that the network has one of Silero's two interfaces ([`Form`]), by name, dtype and
/// rank; returns which.
fn check_io(info: &OnnxInfo) -> Result<Form, VadError> {
    use tether_bundle::DType;
    let names = |list: &[TensorDesc]| {
        list.iter()
            .map(|t| format!("`{}`", t.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let form = Form::of_inputs(info.inputs.iter().map(|t| t.name.as_str())).ok_or_else(|| {
        VadError::Network(format!(
            "inputs {}: neither Silero's {} nor its {}",
            names(&info.inputs),
            Form::Streaming.describe(),
            Form::Sequence.describe()
        ))
    })?;
    let mut want_in = vec![("input", DType::F32, 2)];
    let mut want_out = vec![(form.output(), DType::F32, 0)];
    if form == Form::Streaming {
        want_in.push(("sr", DType::I64, 0));
    }
    for (sin, sout) in form.states() {
        want_in.push((sin, DType::F32, 3));
        want_out.push((sout, DType::F32, 3));
    }
    for (list, want, what) in [
        (&info.inputs, &want_in[..], "input"),
        (&info.outputs, &want_out[..], "output"),
    ] {
        for (name, dtype, rank) in want {
            let t = list.iter().find(|t| t.name == *name).ok_or_else(|| {
                VadError::Network(format!(
                    "{}: no {what} `{name}` (found {})",
                    form.describe(),
                    names(list)
                ))
            })?;
            // The probability's rank differs between exports ([1, 1], [T]): not checked.
            let rank_ok = *name == form.output() || t.dims.len() == *rank;
            if t.dtype != *dtype || !rank_ok {
                return Err(VadError::Network(format!(
                    "{what} `{name}` is {} {:?}; expected {dtype} of rank {rank}",
                    t.dtype, t.dims
                )));
            }
        }
    }
    Ok(form)
}

/// Build a `vad` bundle writer from ONNX bytes.
///
/// `progress` receives a short message before each long step.
///
/// # Errors
/// [`VadError::Network`] for a network with neither of Silero's interfaces ([`Form`]) or
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
    let form = check_io(&info)?;
    let config = options.config.unwrap_or_default();
    config.validate()?;
    let model_sha256 = sha256_hex(onnx);
    // The pinned files and their references: the package's streaming network, and the
    // sequence network faster-whisper ships.
    let pinned = match model_sha256.as_str() {
        PINNED_MODEL_SHA256 => Some((
            "silero-vad 6.2.3 (silero_vad_op18_ifless.onnx)",
            crate::selftest::reference()?,
        )),
        PINNED_SEQUENCE_MODEL_SHA256 => Some((
            "faster-whisper 1.2.1 (silero_vad_v6.onnx, Silero's sequence form)",
            crate::selftest::sequence_reference()?,
        )),
        _ => None,
    };
    let pinned_model = pinned.is_some();

    let mut writer = bundle_with_identity(
        onnx,
        form,
        &config,
        options.common.identity(
            FAMILY,
            concat!("tether-vad ", env!("CARGO_PKG_VERSION")),
            || pinned_version(pinned_model, pinned.as_ref().map_or("", |p| p.0)),
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
            "model SHA-256 {model_sha256} ({}) is neither silero-vad 6.2.3's nor faster-whisper 1.2.1's; the self-test expects this build host's CPU results",
            form.describe()
        );
    }
    let (payload, selftest) = selftest::for_recipe(
        pinned_model,
        match pinned {
            Some((_, reference)) => reference,
            None => crate::selftest::reference()?,
        },
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
            form,
            selftest,
        },
    ))
}
