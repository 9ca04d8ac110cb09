//! The build recipe: PP-OCR det + rec (+ cls) ONNX files -> an `ocr` bundle
//! (`tether build --family ocr --det D.onnx --rec R.onnx [--cls C.onnx]`).
//!
//! Checks each network's I/O against its PP-OCR role, reads the character
//! dictionary from the rec model's ONNX metadata `character` (as the
//! reference's `OrtInferSession.get_character_list` does), prepares each
//! network once with the CPU engine to prove it runs and to learn the
//! recogniser's class count, and lays out the sections listed in
//! [`crate::config`]. The self-test ([`crate::selftest`]) expects the reference's answer
//! when the rec and cls networks are the pinned rapidocr-onnxruntime 1.4.4 ones, else the
//! CPU engine's at build time (`no_self_test` leaves it out).
//!
//! Each engine section records its tensors at the shapes the bundle runs
//! them at ([`run_tensors`]): batch 1, the fixed heights and widths of the
//! configuration, and `-1` ([`tether_bundle::DYNAMIC_DIM`]) where the size
//! is chosen per image at run time (the detector's height and width, the
//! recogniser's width bucket and its step count).
//!
//! The recogniser is stored as it runs: with its padding masked
//! (`tether_build::mask_width_padding`: every convolution, pool and attention
//! sees only the columns of the reference's width, through a new input
//! `valid_widths`), and with its output steps and valid widths for every input
//! width from its own shape inference (`ocr/rec_widths`). The self-test's
//! pinned digest is the original file's.

use tether_build::{OnnxInfo, inspect_onnx, mask_width_padding, output_dim_table};
use tether_bundle::{BundleWriter, DType, DYNAMIC_DIM, Layout, SectionKind, TensorDesc};
use tether_family::io::{declared, dims_of, prepared, select};
use tether_family::recipe::{in_memory, pinned_version, sha256_hex};
use tether_family::selftest::{self, Report, Role, SelfTest};
use tether_runtime::Backend as _;
use tether_runtime::IoSpec;
use tether_runtime::backend::{NetworkSource, PrepareOptions, SourceFormat};

use crate::config::{
    CLS_SECTION, CONFIG_SECTION, DET_SECTION, DICT_SECTION, MAX_REC_WIDTH, REC_SECTION,
    REC_WIDTHS_SECTION, RecWidths,
};
use crate::ctc::Dictionary;
use crate::network::{CLS, DET, REC, VALID_WIDTHS};
use crate::{Device, FAMILY, Ocr, OcrConfig, OcrError, OcrOptions};

/// The committed self-test and the digests of the networks it belongs to.
const SELFTEST_GOLDEN: &str = include_str!("../golden/selftest.txt");

/// The three networks' ONNX bytes.
#[derive(Clone, Copy, Debug)]
pub struct Networks<'a> {
    /// Text detection (DB), `[N, 3, H, W]` -> `[N, 1, H, W]`.
    pub det: &'a [u8],
    /// Text recognition (CTC), `[N, 3, 48, W]` -> `[N, W/8, C]`, with the
    /// metadata key `character`.
    pub rec: &'a [u8],
    /// Optional 180-degree classifier, `[N, 3, 48, 192]` -> `[N, 2]`.
    pub cls: Option<&'a [u8]>,
}

pub use tether_family::recipe::BuildCommon;

/// What to build.
#[derive(Clone, Debug, Default)]
pub struct BuildOptions {
    /// Name, model version and creation time of the bundle identity (the model version's
    /// default: the pinned models' name when the digests match, else `unspecified`).
    pub common: BuildCommon,
    /// Recognition width buckets (default [`crate::config::DEFAULT_REC_WIDTHS`]).
    pub rec_widths: Option<Vec<u32>>,
    /// Minimum text score (default 0.5).
    pub text_score: Option<f32>,
    /// Leave the self-test out even when the networks are the pinned ones.
    pub no_self_test: bool,
}

/// What the recipe decided, for the build log.
#[derive(Clone, Debug)]
pub struct BuildReport {
    /// The configuration written.
    pub config: OcrConfig,
    /// Dictionary entries (without the blank, with the space).
    pub dictionary_entries: usize,
    /// Declared I/O and metadata of det, rec and cls.
    pub det: OnnxInfo,
    /// See `det`.
    pub rec: OnnxInfo,
    /// See `det`.
    pub cls: Option<OnnxInfo>,
    /// Why the self-test is absent, or `None` when it was embedded.
    pub self_test_skipped: Option<String>,
    /// The self-test run on the CPU engine at build time, when it was embedded.
    pub selftest: Option<Report>,
    /// Sites of the recogniser where the padding is masked (convolutions and pools that
    /// look across columns, global pools, attentions); 0: not masked (a warning said why).
    pub rec_masked_sites: usize,
    /// The recogniser's output steps and valid widths per input width (`ocr/rec_widths`).
    pub rec_widths: RecWidths,
}

fn dim(d: i64) -> Option<usize> {
    usize::try_from(d).ok().filter(|&v| v > 0)
}

/// One image input `[batch, 3, h, w]` f32; returns its declared `(h, w)`.
fn image_input(
    network: &'static str,
    info: &OnnxInfo,
) -> Result<(Option<usize>, Option<usize>), OcrError> {
    let [input] = info.inputs.as_slice() else {
        return Err(OcrError::Network {
            network,
            reason: format!("expected one image input, found {}", info.inputs.len()),
        });
    };
    if input.dims.len() != 4 || input.dims[1] != 3 || input.dtype != DType::F32 {
        return Err(OcrError::Network {
            network,
            reason: format!(
                "input `{}` is {} {:?}; expected f32 [batch, 3, height, width]",
                input.name, input.dtype, input.dims
            ),
        });
    }
    Ok((dim(input.dims[2]), dim(input.dims[3])))
}

fn inspect(network: &'static str, onnx: &[u8]) -> Result<OnnxInfo, OcrError> {
    inspect_onnx(onnx).map_err(|e| OcrError::Network {
        network,
        reason: e.to_string(),
    })
}

/// Prepare `onnx` on the tract CPU engine for input `[1, 3, h, w]` (and
/// `valid_widths` at its declared shape when it has one) and return its I/O at
/// that shape (the plan is dropped).
fn prepare_on_cpu(
    network: &'static str,
    onnx: &[u8],
    h: usize,
    w: usize,
) -> Result<IoSpec, OcrError> {
    let shape = vec![1, 3, h, w];
    let info = inspect(network, onnx)?;
    let shapes: Vec<Vec<usize>> = info
        .inputs
        .iter()
        .map(|t| {
            if t.name == VALID_WIDTHS {
                t.dims.iter().map(|&d| d.max(1) as usize).collect()
            } else {
                shape.clone()
            }
        })
        .collect();
    let plan = tether_runtime::backends::tract_cpu::TractCpu
        .prepare(
            &NetworkSource {
                network,
                format: SourceFormat::Onnx,
                bytes: onnx,
                target: None,
            },
            &PrepareOptions {
                input_shapes: shapes,
                ..PrepareOptions::default()
            },
        )
        .map_err(|e| OcrError::Network {
            network,
            reason: format!("cannot prepare for input {shape:?}: {e}"),
        })?;
    Ok(plan.io().clone())
}

/// The shape of the output that plays `network`'s role (`crate::network::output`)
/// in a prepared network; empty when none (or several) does.
fn output_shape<'a>(network: &str, io: &'a IoSpec) -> &'a [usize] {
    let dims = dims_of(&io.outputs);
    let c = prepared(&io.outputs, &dims);
    select(&crate::network::output(network), &c).map_or(&[], |i| io.outputs[i].shape.as_slice())
}

/// The declared output of `info` that plays `network`'s role.
///
/// # Errors
/// [`OcrError::Network`] naming the outputs when none or several could.
fn role_output(network: &'static str, info: &OnnxInfo) -> Result<usize, OcrError> {
    let c = declared(
        info.outputs
            .iter()
            .map(|t| (t.name.as_str(), t.dims.as_slice())),
    );
    select(&crate::network::output(network), &c).map_err(|e| OcrError::Network {
        network,
        reason: e.to_string(),
    })
}

/// A network's I/O at the shapes an `ocr` bundle runs it at: inputs
/// `[1, 3, input_h, input_w]` (the first output, when `output` is given,
/// with those dims; other outputs as declared), `None` for a dimension
/// chosen at run time (recorded as [`DYNAMIC_DIM`]).
///
/// For the networks of `config`: det `x [1, 3, -1, -1] -> [1, 1, -1, -1]`,
/// rec `x [1, 3, rec_height, -1]` (and `valid_widths [K]` when the build
/// masked its padding) `-> [1, -1, rec_classes]`, cls
/// `x [1, 3, cls_height, cls_width] -> [1, 2]`.
pub fn run_tensors(network: &str, info: &OnnxInfo, config: &OcrConfig) -> Vec<TensorDesc> {
    let d = |v: Option<u32>| v.map_or(DYNAMIC_DIM, i64::from);
    let (input, output): ([Option<u32>; 2], Vec<Option<u32>>) = match network {
        DET => ([None, None], vec![Some(1), Some(1), None, None]),
        REC => (
            [Some(config.rec_height), None],
            vec![Some(1), None, Some(config.rec_classes)],
        ),
        _ => (
            [Some(config.cls_height), Some(config.cls_width)],
            vec![Some(1), Some(2)],
        ),
    };
    let mut v = Vec::new();
    for t in &info.inputs {
        let mut t = t.clone();
        // `valid_widths` stays `[K]` as declared.
        if t.name != VALID_WIDTHS {
            t.dims = vec![1, 3, d(input[0]), d(input[1])];
            t.layout = Layout::Nchw;
        }
        v.push(t);
    }
    let role = role_output(
        match network {
            DET => DET,
            REC => REC,
            _ => CLS,
        },
        info,
    )
    .unwrap_or(0);
    for (i, t) in info.outputs.iter().enumerate() {
        let mut t = t.clone();
        if i == role {
            t.dims = output.iter().map(|&x| d(x)).collect();
        }
        v.push(t);
    }
    v
}

/// Build an `ocr` bundle writer: check each network against its role and read the
/// dictionary, make the configuration, prepare each network once on the CPU engine, write
/// the sections, then run and add the self-test.
///
/// `progress` receives a short message before each long step.
///
/// # Errors
/// [`OcrError::Network`] for a network whose I/O does not fit its role or
/// that fails to prepare; [`OcrError::Dictionary`] for a missing or
/// inconsistent `character` metadata; [`OcrError::Config`] for out-of-range
/// options; [`OcrError::ReferenceMismatch`] when the pinned networks do not reproduce the
/// reference's answer on the CPU engine; [`OcrError::Bundle`] from the writer.
pub fn build(
    nets: Networks<'_>,
    options: &BuildOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<(BundleWriter, BuildReport), OcrError> {
    progress("reading the ONNX graphs");
    let det = inspect("det", nets.det)?;
    let rec = inspect("rec", nets.rec)?;
    let cls = nets.cls.map(|b| inspect("cls", b)).transpose()?;
    image_input("det", &det)?;
    let character = rec.metadata("character").ok_or_else(|| {
        OcrError::Dictionary("the rec model's ONNX metadata has no `character` entry".into())
    })?;
    let dict = Dictionary::from_metadata(character)?;
    let config = config_of(options, &rec, cls.as_ref(), dict.len() + 1)?;
    // The output that plays each network's role: by the rule every family applies
    // (`tether_family::io`), never by position.
    role_output(DET, &det)?;
    let rec_output = role_output(REC, &rec)?;
    if let Some(info) = &cls {
        role_output(CLS, info)?;
    }
    let masked = mask_recogniser(nets.rec, rec_output, &config, progress)?;
    let rec_bytes: &[u8] = masked.onnx.as_deref().unwrap_or(nets.rec);
    let rec_run = inspect("rec", rec_bytes)?;
    prepare_each(nets, rec_bytes, &masked.widths, &config, progress)?;

    // The golden self-test belongs to the pinned weights.
    let (reference, rec_sha, cls_sha) = crate::selftest::from_golden(SELFTEST_GOLDEN)?;
    let pinned =
        sha256_hex(nets.rec) == rec_sha && nets.cls.is_some_and(|c| sha256_hex(c) == cls_sha);

    progress("writing the bundle");
    let mut writer = BundleWriter::new(options.common.identity(
        FAMILY,
        concat!("tether-ocr ", env!("CARGO_PKG_VERSION")),
        || {
            pinned_version(
                pinned,
                "PP-OCRv4 det/rec + ppocr mobile v2.0 cls (rapidocr-onnxruntime 1.4.4)",
            )
        },
    ));
    let target = tether_family::recipe::add_portable_target(&mut writer)?;
    let mut add_net =
        |network: &str, section: &str, bytes: &[u8], info: &OnnxInfo| -> Result<(), OcrError> {
            let s = writer.add_section(SectionKind::Onnx, section, Some(target), bytes.to_vec())?;
            for t in run_tensors(network, info, &config) {
                writer.add_tensor(s, t)?;
            }
            Ok(())
        };
    add_net(DET, DET_SECTION, nets.det, &det)?;
    add_net(REC, REC_SECTION, rec_bytes, &rec_run)?;
    if let (Some(bytes), Some(info)) = (nets.cls, &cls) {
        add_net(CLS, CLS_SECTION, bytes, info)?;
    }
    writer.add_section(SectionKind::Labels, DICT_SECTION, None, dict.to_section()?)?;
    writer.add_section(
        SectionKind::FamilyConfig,
        REC_WIDTHS_SECTION,
        None,
        masked.widths.to_section(),
    )?;
    tether_family::recipe::add_config(&mut writer, CONFIG_SECTION, &config.to_record()?)?;
    let (selftest, self_test_skipped) = if options.no_self_test {
        (None, Some("left out on request".to_string()))
    } else {
        progress("running the self-test on the CPU engine");
        (
            Some(add_self_test(&mut writer, reference, pinned, &config)?),
            None,
        )
    };
    Ok((
        writer,
        BuildReport {
            config,
            dictionary_entries: dict.len(),
            det,
            rec,
            cls,
            self_test_skipped,
            selftest,
            rec_masked_sites: masked.sites,
            rec_widths: masked.widths,
        },
    ))
}

/// The configuration: rapidocr's, with the recogniser's and classifier's input sizes of the
/// networks where they declare them, the class count, the classifier on when there is one,
/// and the options' width buckets and text score.
///
/// # Errors
/// [`OcrError::Network`] for an image input of the wrong form; [`OcrError::Config`].
fn config_of(
    options: &BuildOptions,
    rec: &OnnxInfo,
    cls: Option<&OnnxInfo>,
    classes: usize,
) -> Result<OcrConfig, OcrError> {
    let mut config = OcrConfig::rapidocr(classes as u32);
    if let (Some(h), _) = image_input("rec", rec)? {
        config.rec_height = h as u32;
    }
    if let Some(info) = cls {
        let (h, w) = image_input("cls", info)?;
        if let Some(h) = h {
            config.cls_height = h as u32;
        }
        if let Some(w) = w {
            config.cls_width = w as u32;
        }
    }
    config.use_cls = cls.is_some();
    if let Some(w) = &options.rec_widths {
        config.rec_widths.clone_from(w);
    }
    if let Some(v) = options.text_score {
        config.text_score = v;
    }
    config.validate()?;
    Ok(config)
}

/// Prepare each network once on the CPU engine, proving it runs and has its role's output:
/// the detector a `[1, 1, H, W]` probability map, the recogniser `[1, T, classes]`, the
/// classifier `[1, 2]`. The recogniser is `rec_bytes` (its padding masked), whose step
/// count at the first bucket must be the one `rec_widths` recorded.
///
/// # Errors
/// [`OcrError::Network`] naming the network and the shape seen.
fn prepare_each(
    nets: Networks<'_>,
    rec_bytes: &[u8],
    rec_widths: &RecWidths,
    config: &OcrConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<(), OcrError> {
    let classes = config.rec_classes as usize;
    progress("preparing the detector on the CPU engine");
    let io = prepare_on_cpu(DET, nets.det, 64, 64)?;
    if output_shape(DET, &io) != [1, 1, 64, 64] {
        return Err(OcrError::Network {
            network: "det",
            reason: format!(
                "at input 64x64 the output is {:?}; expected [1, 1, 64, 64] (a probability map)",
                output_shape(DET, &io)
            ),
        });
    }
    progress("preparing the recogniser on the CPU engine");
    let w0 = config.rec_widths[0] as usize;
    let io = prepare_on_cpu(REC, rec_bytes, config.rec_height as usize, w0)?;
    let steps_w0 = output_shape(REC, &io).get(1).copied();
    if steps_w0 != rec_widths.steps_at(w0 as u32) {
        return Err(OcrError::Network {
            network: "rec",
            reason: format!(
                "at input width {w0} the prepared network emits {steps_w0:?} steps, its shape inference says {:?}",
                rec_widths.steps_at(w0 as u32)
            ),
        });
    }
    match output_shape(REC, &io) {
        [1, t, c] if *c == classes && *t > 0 => {}
        s => {
            return Err(OcrError::Network {
                network: "rec",
                reason: format!(
                    "at input width {w0} the output is {s:?}; expected [1, T, {classes}] ({} dictionary entries + blank + space)",
                    classes - 2
                ),
            });
        }
    }
    if let Some(onnx) = nets.cls {
        progress("preparing the classifier on the CPU engine");
        let io = prepare_on_cpu(
            CLS,
            onnx,
            config.cls_height as usize,
            config.cls_width as usize,
        )?;
        if output_shape(CLS, &io) != [1, 2] {
            return Err(OcrError::Network {
                network: "cls",
                reason: format!("output is {:?}; expected [1, 2]", output_shape(CLS, &io)),
            });
        }
    }
    Ok(())
}

/// The recogniser as the bundle runs it ([`mask_recogniser`]).
struct MaskedRecogniser {
    /// The masked network, `None` when it could not be masked (a warning said why).
    onnx: Option<Vec<u8>>,
    /// Sites masked.
    sites: usize,
    /// Output steps and valid widths per input width.
    widths: RecWidths,
}

/// The recogniser as the bundle runs it: padded to a width bucket, with the padding made
/// invisible (SVTR mixes the whole sequence and its convolutions and pools see past a line's
/// end, so padding would change the text): every site that looks across columns sees only
/// the columns of the reference's width, through a new input `valid_widths`. The output
/// steps and the valid widths for every input width come from the network's own shape
/// inference.
///
/// # Errors
/// [`OcrError::Network`] when the shape inference fails or a table holds values outside
/// `1..=65535`.
fn mask_recogniser(
    rec: &[u8],
    rec_output: usize,
    config: &OcrConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<MaskedRecogniser, OcrError> {
    progress("masking the recogniser's padding; reading its widths per input width");
    let input = [Some(1), Some(3), Some(config.rec_height as usize), None];
    let widths = i64::from(config.rec_min_width)..=i64::from(MAX_REC_WIDTH);
    let steps = output_dim_table(rec, &input, rec_output, 1, widths.clone()).map_err(|e| {
        OcrError::Network {
            network: "rec",
            reason: format!("the output steps per input width: {e}"),
        }
    })?;
    let masked = match mask_width_padding(rec, &input, widths, VALID_WIDTHS) {
        Ok(m) => m,
        Err(e) => {
            log::warn!(
                "the recogniser's padding cannot be masked ({e}); lines padded to a width bucket may read differently from rapidocr"
            );
            None
        }
    };
    let to_u16 = |t: &[i64]| -> Result<Vec<u16>, OcrError> {
        t.iter()
            .map(|&v| u16::try_from(v).ok().filter(|&v| v > 0))
            .collect::<Option<Vec<u16>>>()
            .ok_or_else(|| OcrError::Network {
                network: "rec",
                reason: "a width table holds values outside 1..=65535".into(),
            })
    };
    let widths = RecWidths {
        first: config.rec_min_width,
        steps: to_u16(&steps)?,
        valid: masked.as_ref().map_or(Ok(Vec::new()), |m| {
            m.tables.iter().map(|t| to_u16(t)).collect()
        })?,
    };
    Ok(MaskedRecogniser {
        sites: masked.as_ref().map_or(0, |m| m.sites),
        onnx: masked.map(|m| m.onnx),
        widths,
    })
}

/// Run the self-test's line through the bundle `writer` holds, on the CPU engine, and add
/// the self-test ([`crate::selftest`]): the reference's answer when the networks are the
/// pinned ones and the configuration has the reference's width bucket (the CPU engine must
/// reproduce it), else the answer found here at the smallest bucket that holds the line.
///
/// # Errors
/// [`OcrError::ReferenceMismatch`]; as [`crate::Ocr::from_bundle`] and
/// [`crate::selftest::run_test`].
fn add_self_test(
    writer: &mut BundleWriter,
    reference: SelfTest,
    pinned: bool,
    config: &OcrConfig,
) -> Result<Report, OcrError> {
    let width = reference.u32_scalar(Role::Input, crate::selftest::REC_WIDTH)?;
    let golden = pinned && config.rec_widths.contains(&width);
    let bucket = config
        .rec_widths
        .iter()
        .copied()
        .find(|&w| w >= width)
        .unwrap_or(config.rec_widths[config.rec_widths.len() - 1]);
    let mut ocr = Ocr::from_bundle(
        in_memory(writer)?,
        &OcrOptions {
            device: Device::Cpu,
            ..OcrOptions::default()
        },
    )?;
    let why = if pinned {
        format!("the configuration lacks the reference's width bucket {width}")
    } else {
        "not the pinned rapidocr-onnxruntime 1.4.4 rec/cls networks".to_string()
    };
    let (payload, report) = selftest::for_recipe(
        golden,
        reference,
        &mut ocr,
        crate::selftest::run_test,
        |ocr, reference| {
            crate::selftest::from_host(ocr, &reference, bucket, selftest::host_source(&why))
        },
        |report| OcrError::ReferenceMismatch(Box::new(report)),
    )?;
    payload.add_to(writer, FAMILY)?;
    Ok(report)
}
