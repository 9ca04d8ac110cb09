//! The build recipe: a YOLOv8 ONNX file and its metadata -> a `detect` bundle.
//!
//! Checks that the network has one image input `[B, 3, H, W]` (f32, batch 1 or dynamic)
//! and a YOLOv8 head output `[B, 4 + C, N]` (f32), reads the class names from the
//! Ultralytics metadata key `names`, fixes the input size (the model's own when static;
//! else the requested one; else the model's training size from the Ultralytics metadata
//! key `imgsz`; else 640), prepares the network once with the CPU engine to learn `N` and
//! prove it runs, and lays out the bundle (format 1.1 names):
//!
//! | section | kind | content |
//! |---|---|---|
//! | `detect/model/model.onnx` | `Onnx` (target `portable`) | the ONNX file, byte for byte |
//! | `detect/labels` | `Labels` | class names, one per line |
//! | `detect/config` | `FamilyConfig` | [`crate::config::DetectConfigRecord`] |
//! | `detect/selftest` | `Reference` | [`crate::selftest`]: the page image and its detections |
//!
//! The self-test's expected detections are the onnxruntime reference pipeline's (committed
//! golden) when the model is the pinned YOLOv8n-DocLayNet at the golden's input size and
//! thresholds; the build fails if the CPU engine does not reproduce them. For any other model
//! or settings they are the CPU engine's at build time (the section's source says so), and the
//! self-test then checks that the deployed device agrees with the build host.

use tether_build::{OnnxInfo, inspect_onnx};
use tether_bundle::{BundleWriter, DType, SectionKind};
use tether_family::io::{Role, SelectError, select, select_with};
use tether_family::recipe::{add_portable_target, in_memory, sha256_hex};
use tether_family::selftest::{self, Report};
use tether_family::vision::{ImageView, PixelFormat};
use tether_runtime::Backend as _;
use tether_runtime::backend::{NetworkSource, PrepareOptions, SourceFormat};

use crate::config::{CONFIG_SECTION, LABELS_SECTION, ONNX_SECTION};
use crate::labels::{encode_labels, parse_ultralytics_names};
use crate::selftest::reference;
use crate::{DetectConfig, DetectError, Detector, DetectorOptions, Device, FAMILY};

/// Input side used for a model with a dynamic input size when neither the options nor the
/// model's `imgsz` metadata give one: Ultralytics' default `imgsz`
/// (ultralytics/cfg/default.yaml).
pub const DEFAULT_DYNAMIC_SIDE: u32 = 640;

/// The training size an Ultralytics export records in its metadata key `imgsz`
/// (`[320, 320]` as `[h, w]`, or one number), as `(width, height)`.
pub fn metadata_imgsz(info: &OnnxInfo) -> Option<(u32, u32)> {
    let text = info.metadata("imgsz")?;
    let nums: Vec<u32> = text
        .trim_matches(|c| c == '[' || c == ']' || c == '(' || c == ')')
        .split(',')
        .filter_map(|t| t.trim().parse().ok())
        .collect();
    match nums.as_slice() {
        [n] => Some((*n, *n)),
        [h, w] => Some((*w, *h)),
        _ => None,
    }
}
/// YOLOv8's largest stride; input sides must be multiples of it.
pub const STRIDE: u32 = 32;

pub use tether_family::recipe::BuildCommon;

/// What to build.
#[derive(Clone, Debug, Default)]
pub struct BuildOptions {
    /// Name, model version and creation time of the bundle identity (the model version's
    /// default: the ONNX metadata `version`/`date` when present, else `unspecified`).
    pub common: BuildCommon,
    /// Network input `(width, height)` for a dynamic-size model; must match
    /// the model for a static one.
    pub input_size: Option<(u32, u32)>,
    /// Score threshold (default 0.25).
    pub score_threshold: Option<f32>,
    /// NMS IoU threshold (default 0.7).
    pub iou_threshold: Option<f32>,
    /// Maximum detections (default 300).
    pub max_detections: Option<u32>,
}

/// What the recipe decided, for the build log.
#[derive(Clone, Debug)]
pub struct BuildReport {
    /// The configuration written.
    pub config: DetectConfig,
    /// Class names written.
    pub labels: Vec<String>,
    /// The ONNX file's declared I/O and metadata.
    pub onnx: OnnxInfo,
    /// Whether the input size came from the model (static) or the options.
    pub input_is_dynamic: bool,
    /// The self-test run on the CPU engine at build time.
    pub selftest: Report,
}

fn dim(d: i64) -> Option<u32> {
    u32::try_from(d).ok().filter(|&v| v > 0)
}

/// Build a `detect` bundle writer from ONNX bytes: check the network's I/O and class names,
/// choose the input size, prepare the network on the CPU engine to learn its anchors, write
/// the sections, then run and add the self-test.
///
/// `progress` receives a short message before each long step.
///
/// # Errors
/// [`DetectError::Network`] for a network that is not a YOLOv8 detector or
/// fails to prepare; [`DetectError::Labels`] for missing or malformed class
/// names; [`DetectError::Config`] for out-of-range options;
/// [`DetectError::ReferenceMismatch`] when the pinned model does not reproduce the
/// reference's detections on the CPU engine; [`DetectError::Bundle`] from the writer.
pub fn build(
    onnx: &[u8],
    options: &BuildOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<(BundleWriter, BuildReport), DetectError> {
    progress("reading the ONNX graph");
    let info = inspect_onnx(onnx).map_err(|e| DetectError::Network(e.to_string()))?;
    let labels = check_io(&info)?;
    let num_classes = labels.len() as u32;
    let ((w, h), input_is_dynamic) = input_size(&info, options.input_size)?;
    progress("preparing the network on the CPU engine");
    let (num_anchors, head) = count_anchors(onnx, w, h, num_classes)?;
    let head_output = u8::try_from(head).map_err(|_| {
        DetectError::Network(format!(
            "the detection head is output {head}; tether reads a head among the first 256 outputs"
        ))
    })?;

    let mut config = DetectConfig::ultralytics(w, h, num_classes, num_anchors);
    config.head_output = head_output;
    if let Some(v) = options.score_threshold {
        config.score_threshold = v;
    }
    if let Some(v) = options.iou_threshold {
        config.iou_threshold = v;
    }
    if let Some(v) = options.max_detections {
        config.max_detections = v;
    }
    config.validate()?;

    progress("writing the bundle");
    let mut writer = BundleWriter::new(options.common.identity(
        FAMILY,
        concat!("tether-detect ", env!("CARGO_PKG_VERSION")),
        || default_model_version(&info),
    ));
    let target = add_portable_target(&mut writer)?;
    let model = writer.add_section(SectionKind::Onnx, ONNX_SECTION, Some(target), onnx.to_vec())?;
    // The tensors at the shapes the bundle runs at (the manifest records the concrete
    // input size, not the model's dynamic declaration).
    for t in run_tensors(&info, w, h, num_classes, num_anchors, head) {
        writer.add_tensor(model, t)?;
    }
    writer.add_section(
        SectionKind::Labels,
        LABELS_SECTION,
        None,
        encode_labels(&labels)?,
    )?;
    tether_family::recipe::add_config(&mut writer, CONFIG_SECTION, &config.to_record())?;
    progress("running the self-test on the CPU engine");
    let selftest = add_self_test(&mut writer, onnx, &config)?;
    Ok((
        writer,
        BuildReport {
            config,
            labels,
            onnx: info,
            input_is_dynamic,
            selftest,
        },
    ))
}

/// Check that `info` is a YOLOv8 detection export: one f32 image input `[1 or dynamic, 3,
/// H, W]`, f32 outputs, one of them the head `[batch, 4 + C, N]` ([`head_role`]), and the class names of the
/// Ultralytics metadata key `names` (C of them). Returns the class names.
///
/// # Errors
/// [`DetectError::Network`] naming the tensor and what it is; [`DetectError::Labels`].
fn check_io(info: &OnnxInfo) -> Result<Vec<String>, DetectError> {
    let [input] = info.inputs.as_slice() else {
        return Err(DetectError::Network(format!(
            "expected one image input, found {}",
            info.inputs.len()
        )));
    };
    if input.dims.len() != 4 || input.dims[1] != 3 || input.dtype != DType::F32 {
        return Err(DetectError::Network(format!(
            "input `{}` is {} {:?}; expected f32 [batch, 3, height, width]",
            input.name, input.dtype, input.dims
        )));
    }
    if input.dims[0] > 1 {
        return Err(DetectError::Network(format!(
            "input `{}` has a static batch of {} ({:?}); tether runs one image per inference: export the model with batch 1 or a dynamic batch",
            input.name, input.dims[0], input.dims
        )));
    }
    if info.outputs.is_empty() {
        return Err(DetectError::Network("the model has no output".into()));
    }
    for t in info.outputs.iter() {
        if t.dtype != DType::F32 {
            return Err(DetectError::Network(format!(
                "output `{}` is {} {:?}; the detection head must be f32 (export without half precision, or with an f32 output)",
                t.name, t.dtype, t.dims
            )));
        }
    }
    let names_text = info.metadata("names").ok_or_else(|| {
        DetectError::Labels("the ONNX metadata has no `names` entry (Ultralytics export)".into())
    })?;
    let labels = parse_ultralytics_names(names_text)?;
    let num_classes = u32::try_from(labels.len())
        .map_err(|_| DetectError::Labels(format!("{} classes", labels.len())))?;
    // The head among the declared outputs: by name, then by shape (a tie is settled after
    // preparation, by the values of a test run).
    let rows = i64::from(4 + num_classes);
    let fits = move |d: &[i64]| d.len() == 3 && d[0] <= 1 && (d[1] < 0 || d[1] == rows);
    let declared = tether_family::io::declared(
        info.outputs
            .iter()
            .map(|t| (t.name.as_str(), t.dims.as_slice())),
    );
    let expected = format!("[1, 4 + {num_classes}, anchors] for {num_classes} classes");
    if let Err(e @ (SelectError::Missing { .. } | SelectError::NamedMismatch { .. })) =
        select(&head_role(&expected, &fits), &declared)
    {
        return Err(DetectError::Network(e.to_string()));
    }
    Ok(labels)
}

/// The network input size `(width, height)` and whether the model's is dynamic: the model's
/// own when static (a `requested` size must equal it); else `requested`; else the training
/// size of the metadata key `imgsz`; else [`DEFAULT_DYNAMIC_SIDE`]. Each side a positive
/// multiple of [`STRIDE`].
///
/// # Errors
/// [`DetectError::Config`] naming the size.
fn input_size(
    info: &OnnxInfo,
    requested: Option<(u32, u32)>,
) -> Result<((u32, u32), bool), DetectError> {
    let input = &info.inputs[0];
    let declared = (dim(input.dims[3]), dim(input.dims[2]));
    let input_is_dynamic = declared.0.is_none() || declared.1.is_none();
    let (w, h) = match (declared, requested) {
        ((Some(w), Some(h)), None) => (w, h),
        ((Some(w), Some(h)), Some(req)) if req == (w, h) => (w, h),
        ((Some(w), Some(h)), Some((rw, rh))) => {
            return Err(DetectError::Config {
                field: "input_size",
                value: format!("{rw}x{rh}, but the model's input is fixed at {w}x{h}"),
            });
        }
        (_, Some(req)) => req,
        (_, None) => match metadata_imgsz(info) {
            Some(size) => {
                log::info!(
                    "input `{}` has a dynamic size; using the model's training size {}x{} (metadata `imgsz`)",
                    input.name,
                    size.0,
                    size.1
                );
                size
            }
            None => {
                log::warn!(
                    "input `{}` has a dynamic size and no `imgsz` metadata; using {DEFAULT_DYNAMIC_SIDE}x{DEFAULT_DYNAMIC_SIDE} (pass an input size to choose)",
                    input.name
                );
                (DEFAULT_DYNAMIC_SIDE, DEFAULT_DYNAMIC_SIDE)
            }
        },
    };
    if w % STRIDE != 0 || h % STRIDE != 0 || w == 0 || h == 0 {
        return Err(DetectError::Config {
            field: "input_size",
            value: format!("{w}x{h} (each side must be a positive multiple of {STRIDE})"),
        });
    }
    Ok(((w, h), input_is_dynamic))
}

/// Prepare the network once with the CPU engine at `w x h`, proving it runs, and return its
/// anchor count `N` (the head's `[1, 4 + C, N]`) and the head's output index: by name, then by
/// the prepared shape; a tie between outputs of the head's shape is settled by a test run (the
/// head's class rows are scores in [0, 1], its box rows finite), else refused naming them.
///
/// # Errors
/// [`DetectError::Runtime`] when it does not prepare; [`DetectError::Network`] for an output
/// of another shape or type.
fn count_anchors(
    onnx: &[u8],
    w: u32,
    h: u32,
    num_classes: u32,
) -> Result<(u32, usize), DetectError> {
    let plan = tether_runtime::backends::tract_cpu::TractCpu
        .prepare(
            &NetworkSource {
                network: crate::NETWORK,
                format: SourceFormat::Onnx,
                bytes: onnx,
                target: None,
            },
            &PrepareOptions {
                input_shapes: vec![vec![1, 3, h as usize, w as usize]],
                ..PrepareOptions::default()
            },
        )
        .map_err(|e| DetectError::Runtime(e.into()))?;
    let rows = i64::from(4 + num_classes);
    let shapes = tether_family::io::dims_of(&plan.io().outputs);
    let prepared = tether_family::io::prepared(&plan.io().outputs, &shapes);
    let fits = move |d: &[i64]| d.len() == 3 && d[0] == 1 && d[1] == rows && d[2] > 0;
    let expected = format!("[1, {rows}, anchors]");
    let mut values: Option<Vec<Vec<f32>>> = None;
    let head = select_with(&head_role(&expected, &fits), &prepared, |k| {
        let outs = values.get_or_insert_with(|| test_run(&plan, w, h).unwrap_or_default());
        outs.get(k)
            .is_some_and(|v| looks_like_head(v, num_classes as usize))
    })
    .map_err(|e| DetectError::Network(format!("at input {w}x{h}: {e}")))?;
    let out = &plan.io().outputs[head];
    let num_anchors = u32::try_from(out.shape[2])
        .map_err(|_| DetectError::Network(format!("{} anchors", out.shape[2])))?;
    if out.dtype != DType::F32 {
        return Err(DetectError::Network(format!(
            "output `{}` is {} after preparation; the detection head must be f32",
            out.name, out.dtype
        )));
    }
    if head != 0 {
        log::info!(
            "the detection head is output {head} `{}` (not the first output)",
            out.name
        );
    }
    Ok((num_anchors, head))
}

/// Names the Ultralytics export gives the detection head (`model.export(format="onnx")`:
/// `output_names=["output0"]`, and `output1` the segmentation prototypes).
pub const HEAD_NAMES: &[&str] = &["output0"];

/// The detection head's role ([`tether_family::io`]) with the shape `fits` accepts.
fn head_role<'a>(expected: &'a str, fits: &'a dyn Fn(&[i64]) -> bool) -> Role<'a> {
    Role {
        what: "the detection head",
        kind: "output",
        names: HEAD_NAMES,
        expected,
        fits,
    }
}

/// Run the prepared plan once on a mid-grey image (the letterbox's pad colour, 114 / 255)
/// and return every output's values; `None` when the plan does not run on the host.
fn test_run(plan: &tether_runtime::Plan, w: u32, h: u32) -> Option<Vec<Vec<f32>>> {
    let tether_runtime::Plan::Host(p) = plan else {
        return None;
    };
    let mut exec = p.executor().ok()?;
    let input: Vec<u8> = std::iter::repeat_n(114.0f32 / 255.0, 3 * (w as usize) * (h as usize))
        .flat_map(f32::to_ne_bytes)
        .collect();
    let mut outs: Vec<Vec<u8>> = plan
        .io()
        .outputs
        .iter()
        .map(|t| vec![0u8; t.byte_len().unwrap_or(0)])
        .collect();
    let mut views: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
    exec.run(&[&input], &mut views).ok()?;
    Some(
        outs.iter()
            .map(|b| {
                b.chunks_exact(4)
                    .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                    .collect()
            })
            .collect(),
    )
}

/// The values of a `[1, 4 + C, N]` output look like a YOLOv8 head: box rows finite, class
/// rows scores in `[0, 1]` (sigmoid outputs).
fn looks_like_head(v: &[f32], num_classes: usize) -> bool {
    let n = v.len() / (4 + num_classes).max(1);
    if n == 0 || v.len() != n * (4 + num_classes) {
        return false;
    }
    v[..4 * n].iter().all(|x| x.is_finite()) && v[4 * n..].iter().all(|x| (0.0..=1.0).contains(x))
}

/// The model version an Ultralytics export records (metadata `version` and `date`), or
/// `unspecified`.
fn default_model_version(info: &OnnxInfo) -> String {
    match (info.metadata("version"), info.metadata("date")) {
        (Some(v), Some(d)) => format!("ultralytics {v}, exported {d}"),
        (Some(v), None) => format!("ultralytics {v}"),
        (None, Some(d)) => format!("exported {d}"),
        (None, None) => "unspecified".into(),
    }
}

/// The score threshold the recipe looks for a self-test's detections at when the bundle's
/// keeps none on the reference image ([`crate::selftest::threshold_for`]).
const LOWERED_FLOOR: f32 = 1e-3;

/// Run the self-test's reference image through the bundle `writer` holds, on the CPU
/// engine, and add the self-test ([`crate::selftest`]): the onnxruntime golden's detections
/// when the model and `config` are the golden's (which the CPU engine must reproduce), else
/// the detections found here (at a lowered threshold when the bundle's keeps none).
fn add_self_test(
    writer: &mut BundleWriter,
    onnx: &[u8],
    config: &DetectConfig,
) -> Result<Report, DetectError> {
    let model_sha256 = sha256_hex(onnx);
    let golden = reference::golden_for(&model_sha256, config)?;
    let page = reference::page()?;
    let image = ImageView::new(
        page.as_raw(),
        page.width(),
        page.height(),
        PixelFormat::Gray8,
    )?;
    let photo = reference::photo()?;
    let photo_view = ImageView::new(
        photo.as_raw(),
        photo.width(),
        photo.height(),
        PixelFormat::Rgb8,
    )?;
    let mut detector = Detector::from_bundle(
        in_memory(writer)?,
        &DetectorOptions {
            device: Device::Cpu,
            ..DetectorOptions::default()
        },
    )?;
    if golden.is_none() {
        log::info!(
            "model SHA-256 {model_sha256} at {}x{} is not the golden's pinned YOLOv8n-DocLayNet at 1024x1024 with the default thresholds; the self-test expects this build host's CPU detections",
            config.input_width,
            config.input_height
        );
    }
    let pinned = golden.is_some();
    let (expected, source) = golden.unwrap_or_default();
    let (payload, report) = selftest::for_recipe(
        pinned,
        crate::selftest::payload(&image, &expected, source, None),
        &mut detector,
        Detector::run_self_test,
        |detector, _| {
            // The page, else the photo, at the bundle's threshold; else the first of them
            // where a lower threshold keeps the model's best detections with a margin: a
            // device is then checked on classes, scores and boxes, not on a count of 0 (a
            // model of another domain than document layout keeps nothing on the page).
            let images = [image, photo_view];
            let source = selftest::host_source(&format!("model SHA-256 {model_sha256}"));
            for img in &images {
                let found = detector.detect(img)?.to_vec();
                if !found.is_empty() {
                    return Ok(crate::selftest::payload(img, &found, source, None));
                }
            }
            for img in &images {
                let candidates = detector.detect_at_threshold(img, LOWERED_FLOOR)?;
                if let Some(t) = crate::selftest::threshold_for(&candidates, LOWERED_FLOOR) {
                    let found: Vec<_> = candidates.into_iter().filter(|d| d.score > t).collect();
                    return Ok(crate::selftest::payload(img, &found, source, Some(t)));
                }
            }
            Ok(crate::selftest::payload(&image, &[], source, None))
        },
        |report| DetectError::ReferenceMismatch(Box::new(report)),
    )?;
    payload.add_to(writer, FAMILY)?;
    Ok(report)
}

/// The network's I/O at the shapes a bundle of this configuration runs at: input
/// `[1, 3, h, w]`, the head (output `head`) `[1, 4 + C, N]`, further outputs as declared.
pub fn run_tensors(
    info: &OnnxInfo,
    w: u32,
    h: u32,
    num_classes: u32,
    num_anchors: u32,
    head: usize,
) -> Vec<tether_bundle::TensorDesc> {
    let mut v = Vec::new();
    for t in &info.inputs {
        let mut t = t.clone();
        t.dims = vec![1, 3, i64::from(h), i64::from(w)];
        t.layout = tether_bundle::Layout::Nchw;
        v.push(t);
    }
    for (i, t) in info.outputs.iter().enumerate() {
        let mut t = t.clone();
        if i == head {
            t.dims = vec![1, 4 + i64::from(num_classes), i64::from(num_anchors)];
        }
        v.push(t);
    }
    v
}
