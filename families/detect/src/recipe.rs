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

use tether_build::{OnnxInfo, inspect_onnx};
use tether_family::io::{Candidate, Role, SelectError, select, select_with};
use tether_bundle::{
    BundleWriter, CpuArch, DType, EngineKind, IdentityDesc, SectionKind, TargetDesc,
};
use tether_runtime::Backend as _;
use tether_runtime::backend::{NetworkSource, PrepareOptions, SourceFormat};

use crate::config::{CONFIG_SECTION, LABELS_SECTION, ONNX_SECTION};
use crate::labels::{encode_labels, parse_ultralytics_names};
use crate::{DetectConfig, DetectError, FAMILY};

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

/// What to build.
#[derive(Clone, Debug, Default)]
pub struct BuildOptions {
    /// Bundle name (default: the caller's choice, usually the file stem).
    pub name: String,
    /// Model version string recorded in the identity (default: the ONNX
    /// metadata `version`/`date` when present).
    pub model_version: Option<String>,
    /// Network input `(width, height)` for a dynamic-size model; must match
    /// the model for a static one.
    pub input_size: Option<(u32, u32)>,
    /// Score threshold (default 0.25).
    pub score_threshold: Option<f32>,
    /// NMS IoU threshold (default 0.7).
    pub iou_threshold: Option<f32>,
    /// Maximum detections (default 300).
    pub max_detections: Option<u32>,
    /// Creation time, seconds since the Unix epoch.
    pub created_unix_s: u64,
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
}

fn dim(d: i64) -> Option<u32> {
    u32::try_from(d).ok().filter(|&v| v > 0)
}

/// Build a `detect` bundle writer from ONNX bytes.
///
/// `progress` receives a short message before each long step.
///
/// # Errors
/// [`DetectError::Network`] for a network that is not a YOLOv8 detector or
/// fails to prepare; [`DetectError::Labels`] for missing or malformed class
/// names; [`DetectError::Config`] for out-of-range options;
/// [`DetectError::Bundle`] from the writer.
pub fn build(
    onnx: &[u8],
    options: &BuildOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<(BundleWriter, BuildReport), DetectError> {
    progress("reading the ONNX graph");
    let info = inspect_onnx(onnx).map_err(|e| DetectError::Network(e.to_string()))?;
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
    let declared_fits = move |d: &[i64]| d.len() == 3 && d[0] <= 1 && (d[1] < 0 || d[1] == rows);
    let declared: Vec<Candidate<'_>> = info
        .outputs
        .iter()
        .map(|t| Candidate {
            name: &t.name,
            dims: &t.dims,
        })
        .collect();
    let expected = format!("[1, 4 + {num_classes}, anchors] for {num_classes} classes");
    let head_role = Role {
        what: "the detection head",
        kind: "output",
        names: HEAD_NAMES,
        expected: &expected,
        fits: &declared_fits,
    };
    // Several candidates by the declared shapes are settled below, once their sizes are
    // known; the error then names them.
    let declared_head = select(&head_role, &declared);
    if let Err(e @ (SelectError::Missing { .. } | SelectError::NamedMismatch { .. })) =
        &declared_head
    {
        return Err(DetectError::Network(e.to_string()));
    }
    let declared = (dim(input.dims[3]), dim(input.dims[2]));
    let input_is_dynamic = declared.0.is_none() || declared.1.is_none();
    let (w, h) = match (declared, options.input_size) {
        ((Some(w), Some(h)), None) => (w, h),
        ((Some(w), Some(h)), Some(req)) if req == (w, h) => (w, h),
        ((Some(w), Some(h)), Some((rw, rh))) => {
            return Err(DetectError::Config {
                field: "input_size",
                value: format!("{rw}x{rh}, but the model's input is fixed at {w}x{h}"),
            });
        }
        (_, Some(req)) => req,
        (_, None) => match metadata_imgsz(&info) {
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
    progress("preparing the network on the CPU engine");
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
    // The same rule on the prepared shapes; a tie between outputs of the head's shape is
    // settled by a test run: the head's class rows are scores in [0, 1] and its box rows are
    // finite.
    let shapes: Vec<Vec<i64>> = plan
        .io()
        .outputs
        .iter()
        .map(|t| t.shape.iter().map(|&d| d as i64).collect())
        .collect();
    let prepared: Vec<Candidate<'_>> = plan
        .io()
        .outputs
        .iter()
        .zip(&shapes)
        .map(|(t, d)| Candidate {
            name: &t.name,
            dims: d,
        })
        .collect();
    let prepared_fits = move |d: &[i64]| d.len() == 3 && d[0] == 1 && d[1] == rows && d[2] > 0;
    let prepared_role = Role {
        fits: &prepared_fits,
        ..head_role
    };
    let mut values: Option<Vec<Vec<f32>>> = None;
    let head = select_with(&prepared_role, &prepared, |k| {
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
    let head_output = u8::try_from(head).map_err(|_| {
        DetectError::Network(format!(
            "the detection head is output {head} of {}; tether reads a head among the first 256 outputs",
            plan.io().outputs.len()
        ))
    })?;
    if head != 0 {
        log::info!(
            "the detection head is output {head} `{}` (not the first output)",
            out.name
        );
    }
    drop(plan);

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

    let model_version = options
        .model_version
        .clone()
        .or_else(|| {
            let v = info.metadata("version");
            let d = info.metadata("date");
            match (v, d) {
                (Some(v), Some(d)) => Some(format!("ultralytics {v}, exported {d}")),
                (Some(v), None) => Some(format!("ultralytics {v}")),
                (None, Some(d)) => Some(format!("exported {d}")),
                (None, None) => None,
            }
        })
        .unwrap_or_else(|| "unspecified".into());
    progress("writing the bundle");
    let mut writer = BundleWriter::new(IdentityDesc {
        name: options.name.clone(),
        family: FAMILY.into(),
        model_version,
        tool_version: concat!("tether-detect ", env!("CARGO_PKG_VERSION")).into(),
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
    writer.add_section(
        SectionKind::FamilyConfig,
        CONFIG_SECTION,
        None,
        zerocopy::IntoBytes::as_bytes(&config.to_record()).to_vec(),
    )?;
    Ok((
        writer,
        BuildReport {
            config,
            labels,
            onnx: info,
            input_is_dynamic,
        },
    ))
}

/// Names the Ultralytics export gives the detection head (`model.export(format="onnx")`:
/// `output_names=["output0"]`, and `output1` the segmentation prototypes).
pub const HEAD_NAMES: &[&str] = &["output0"];

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
    v[..4 * n].iter().all(|x| x.is_finite())
        && v[4 * n..].iter().all(|x| (0.0..=1.0).contains(x))
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
