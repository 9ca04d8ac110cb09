//! The detection family as the `tether` CLI sees it (feature `cli`): build arguments and
//! recipe, the `inspect` description, `run`/`bench` on image files, text and JSON output,
//! annotated images.

use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use clap::{Arg, ArgMatches, value_parser};
use image::RgbImage;
use serde_json::{Value, json};
use tether_bundle::Bundle;
pub use tether_family::annotate::MAX_ANNOTATED_SIDE;
use tether_family::annotate::{Annotation, Colour};
use tether_family::args::{f32_in, int_in, number_arg, path_arg, required_path, value};
use tether_family::decode::{DecodedImage, ImageInput, Orientation};
use tether_family::family::{
    BuildCommon, Built, Description, Environment, Family, Input, InputSource, Outcome, PlanSource,
    Report, RunOptions, Runner, SelfTest, UsageError, file_stem,
};
use tether_family::selftest::Role;

use crate::config::{CONFIG_SECTION, LABELS_SECTION};
use crate::recipe::{self, BuildOptions};
use crate::{DetectConfig, Detection, Detector, DetectorOptions, FAMILY, NETWORK};

/// The detection family.
pub struct Detect;

/// The registry entry.
pub static DETECT: Detect = Detect;

/// Parse `N` (square) or `WxH`.
fn parse_size(s: &str) -> Result<(u32, u32), String> {
    let parse = |t: &str| t.trim().parse::<u32>().map_err(|e| format!("`{t}`: {e}"));
    match s.split_once(['x', 'X']) {
        Some((w, h)) => Ok((parse(w)?, parse(h)?)),
        None => {
            let n = parse(s)?;
            Ok((n, n))
        }
    }
}

fn threshold_args() -> [Arg; 2] {
    [
        number_arg(
            "score-threshold",
            "S",
            value_parser!(f32),
            "Detection score threshold in [0, 1] (strictly greater is kept)",
        ),
        number_arg(
            "iou-threshold",
            "T",
            value_parser!(f32),
            "Class-wise NMS IoU threshold in [0, 1]",
        ),
    ]
}

impl Family for Detect {
    fn name(&self) -> &'static str {
        FAMILY
    }

    fn about(&self) -> &'static str {
        "YOLOv8 object detection (Ultralytics export): image in, boxes out"
    }

    fn inputs_help(&self) -> &'static str {
        "PNG or JPEG images"
    }

    fn hint(&self, error: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
        use crate::DetectError as D;
        Some(match error.downcast_ref::<D>()? {
            D::WrongFamily { .. } => "check the bundle's family with `tether inspect`",
            D::Labels(_) | D::Network(_) => {
                "`tether build` takes an Ultralytics YOLOv8 detection export (input [1,3,H,W] f32, output [1,4+C,N] f32, metadata `names`); a bundle refused when loaded was altered or written by another tool: build it again from its ONNX file"
            }
            D::Config { .. } => "see `tether build --family detect --help` for the accepted ranges",
            _ => return None,
        })
    }

    fn annotates(&self) -> bool {
        true
    }

    fn build_args(&self) -> Vec<Arg> {
        let mut v = vec![
            path_arg(
                "onnx",
                "MODEL.onnx",
                "The ONNX model (Ultralytics YOLOv8 detection export)",
            )
            .required(true),
            Arg::new("input-size")
                .long("input-size")
                .value_name("N|WxH")
                .value_parser(parse_size)
                .help("Network input size for dynamic-size models (default: the model's `imgsz`, else 640); multiples of 32, at most 8192 a side and 1,048,576 anchors (about 5600x5600)"),
            number_arg(
                "max-detections",
                "K",
                value_parser!(i64),
                "Maximum detections per image, 1..=300 (default 300)",
            ),
        ];
        v.extend(threshold_args());
        v
    }

    fn build(
        &self,
        args: &ArgMatches,
        common: &BuildCommon,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Built> {
        // Every option range first (usage errors, exit 2), before any work.
        check_thresholds(args)?;
        let max_detections =
            int_in(args, "max-detections", 1, crate::MAX_DETECTIONS as i64)?.map(|k| k as u32);
        if let Some(&(w, h)) = args.get_one::<(u32, u32)>("input-size") {
            check_input_size(w, h)?;
        }
        let path = required_path(args, "onnx")?;
        let onnx = tether_bundle::files::read_regular(&path)?;
        let options = BuildOptions {
            common: common.clone().or_name(file_stem(&path, "model")),
            input_size: args.get_one::<(u32, u32)>("input-size").copied(),
            score_threshold: args.get_one::<f32>("score-threshold").copied(),
            iou_threshold: args.get_one::<f32>("iou-threshold").copied(),
            max_detections,
        };
        let (writer, report) = recipe::build(&onnx, &options, progress)
            .with_context(|| format!("building from {}", path.display()))?;
        let c = &report.config;
        if report.labels.is_empty() {
            bail!("no class names were written");
        }
        let tensors = recipe::run_tensors(
            &report.onnx,
            c.input_width,
            c.input_height,
            c.num_classes,
            c.num_anchors,
            usize::from(c.head_output),
        );
        let dynamic_inputs = report
            .onnx
            .inputs
            .iter()
            .filter(|t| t.dims.iter().any(|&d| d < 0))
            .map(|t| t.name.clone())
            .collect();
        Ok(Built {
            writer,
            networks: vec![PlanSource {
                network: NETWORK.into(),
                onnx: path.clone(),
                tensors,
                dynamic_inputs,
            }],
            summary: vec![
                format!(
                    "family detect: {} classes, input {}x{}{}, {} anchors, score > {}, IoU > {}, max {}",
                    c.num_classes,
                    c.input_width,
                    c.input_height,
                    if report.input_is_dynamic {
                        " (chosen for a dynamic-size model)"
                    } else {
                        ""
                    },
                    c.num_anchors,
                    c.score_threshold,
                    c.iou_threshold,
                    c.max_detections
                ),
                format!("classes: {}", report.labels.join(", ")),
                format!("self-test: embedded (detect/selftest): {}", report.selftest),
            ],
        })
    }

    fn run_args(&self) -> Vec<Arg> {
        let mut v = threshold_args().to_vec();
        v.push(Orientation::argument(
            "Use the stored pixels of a JPEG, ignoring its EXIF orientation tag",
        ));
        v
    }

    fn bundle_values(&self, bundle: &Bundle) -> Result<Vec<(&'static str, String)>> {
        let c = DetectConfig::from_section(bundle.section_data(CONFIG_SECTION)?)?;
        Ok(vec![
            ("score-threshold", c.score_threshold.to_string()),
            ("iou-threshold", c.iou_threshold.to_string()),
        ])
    }

    fn describe(&self, bundle: &Arc<Bundle>) -> Result<Description> {
        let config =
            DetectConfig::from_section(bundle.section_bytes(&bundle.section(CONFIG_SECTION)?)?)?;
        let labels =
            crate::labels::decode_labels(bundle.section_bytes(&bundle.section(LABELS_SECTION)?)?)?;
        let c = &config;
        let lines = vec![
            (
                "input".into(),
                format!(
                    "{}x{} RGB, letterbox (pad {}), (v - mean) / std with mean {:?}, std {:?}",
                    c.input_width, c.input_height, c.pad_value, c.mean, c.std
                ),
            ),
            (
                "output".into(),
                format!(
                    "[1, 4 + {}, {}] (YOLOv8 head)",
                    c.num_classes, c.num_anchors
                ),
            ),
            (
                "thresholds".into(),
                format!(
                    "score > {}, NMS IoU > {}, at most {} detections",
                    c.score_threshold, c.iou_threshold, c.max_detections
                ),
            ),
            (
                "classes".into(),
                format!("{}: {}", labels.len(), labels.join(", ")),
            ),
        ];
        let json = json!({
            "input_width": c.input_width,
            "input_height": c.input_height,
            "num_classes": c.num_classes,
            "num_anchors": c.num_anchors,
            "score_threshold": c.score_threshold,
            "iou_threshold": c.iou_threshold,
            "max_detections": c.max_detections,
            "mean": c.mean,
            "std": c.std,
            "pad_value": c.pad_value,
            "class_names": labels,
        });
        let d = Description { lines, json };
        Ok(d.with_self_test(bundle, FAMILY, |t| {
            let (w, h, format) = crate::selftest::input(t).map_or((0, 0, "?"), |v| {
                (v.width(), v.height(), v.format().as_str())
            });
            let n = t
                .u32s(Role::Expected, crate::selftest::CLASS_IDS)
                .map_or(0, <[u32]>::len);
            let threshold = crate::selftest::score_threshold(t).ok().flatten();
            (
                format!(
                    "{w}x{h} {format} image, expects {n} detection{}{}; expected values from {}",
                    if n == 1 { "" } else { "s" },
                    threshold.map_or(String::new(), |v| format!(" at score threshold {v}")),
                    t.source
                ),
                json!({ "width": w, "height": h, "pixel_format": format, "detections": n, "score_threshold": threshold }),
            )
        }))
    }

    fn open(
        &self,
        bundle: Arc<Bundle>,
        args: &ArgMatches,
        options: &RunOptions,
    ) -> Result<Box<dyn Runner>> {
        check_thresholds(args)?;
        let device: tether_runtime::Device = options.device()?;
        let model = options.model_options();
        let det = Detector::from_bundle(
            bundle,
            &DetectorOptions {
                device,
                verify_eagerly: options.verify_eagerly,
                model,
                score_threshold: value(args, "score-threshold"),
                iou_threshold: value(args, "iou-threshold"),
                ..DetectorOptions::default()
            },
        )?;
        let orientation = Orientation::of_args(args);
        Ok(Box::new(DetectRunner { det, orientation }))
    }

    fn run_self_test(
        &self,
        bundle: Arc<Bundle>,
        options: &RunOptions,
        test: &SelfTest,
    ) -> Result<Report> {
        let mut det = Detector::from_bundle(
            bundle,
            &DetectorOptions {
                device: options.device()?,
                verify_eagerly: options.verify_eagerly,
                model: options.model_options(),
                ..DetectorOptions::default()
            },
        )?;
        Ok(det.run_self_test(test)?)
    }
}

/// `--input-size W x H`: each side a multiple of 32 (YOLOv8's largest stride) from 32 to
/// [`crate::config::MAX_INPUT_SIDE`], and the anchors of its three strides (8, 16, 32) at most
/// [`crate::config::MAX_ANCHORS`]: checked before the model is read, so a huge size costs
/// nothing (a usage error otherwise).
fn check_input_size(w: u32, h: u32) -> Result<(), UsageError> {
    let max = crate::config::MAX_INPUT_SIDE;
    for (side, v) in [("width", w), ("height", h)] {
        if v == 0 || v % 32 != 0 || v > max {
            return Err(UsageError(format!(
                "--input-size {w}x{h}: the {side} {v} is not one of the accepted 32 to {max} in steps of 32"
            )));
        }
    }
    let anchors: u64 = [8u64, 16, 32]
        .iter()
        .map(|s| (u64::from(w) / s) * (u64::from(h) / s))
        .sum();
    if anchors > u64::from(crate::config::MAX_ANCHORS) {
        return Err(UsageError(format!(
            "--input-size {w}x{h}: {anchors} anchors, more than the {} a detect bundle holds (4096x4096 has 344,064)",
            crate::config::MAX_ANCHORS
        )));
    }
    Ok(())
}

/// `--score-threshold` and `--iou-threshold` in [0, 1] (a usage error otherwise).
fn check_thresholds(args: &ArgMatches) -> Result<(), UsageError> {
    for name in ["score-threshold", "iou-threshold"] {
        f32_in(args, name, 0.0, 1.0)?;
    }
    Ok(())
}

struct DetectRunner {
    det: Detector,
    orientation: Orientation,
}

impl Runner for DetectRunner {
    fn engines(&self) -> Vec<(String, String)> {
        self.det
            .model()
            .networks()
            .iter()
            .map(|n| (n.name().to_string(), n.engine().id().to_string()))
            .collect()
    }

    fn load(&self, source: InputSource<'_>) -> Result<Box<dyn Input>> {
        ImageInput::from_source(source, self.orientation, FAMILY)
    }

    fn run(&mut self, input: &dyn Input) -> Result<()> {
        let img = ImageInput::of(input, FAMILY)?;
        self.det
            .detect(&img.image.view())
            .with_context(|| format!("detecting in {}", img.label))?;
        Ok(())
    }

    fn run_staged(&mut self) -> Option<Result<()>> {
        Some(
            self.det
                .detect_staged()
                .map(|_| ())
                .context("detecting in the staged frame"),
        )
    }

    fn launch_floor(&mut self) -> Option<Result<()>> {
        #[cfg(feature = "cuda")]
        if let Some(d) = self.det.session_mut().and_then(|s| s.device_mut()) {
            return Some(
                d.launch_graphs_and_wait()
                    .context("launching the captured graph"),
            );
        }
        Some(Err(anyhow::anyhow!(
            "a bare graph launch needs a GPU session with captured graphs"
        )))
    }

    fn outcome(&self, input: &dyn Input, annotate: bool) -> Result<Outcome> {
        let img = ImageInput::of(input, FAMILY)?;
        let dets = self.det.detections();
        let stats = self.det.post_stats();
        let name = |id: u16| self.det.class_name(id).unwrap_or("?");
        let lines = dets
            .iter()
            .map(|d| {
                format!(
                    "{:<16} {:.3}  [{:7.1}, {:7.1}, {:7.1}, {:7.1}]",
                    name(d.class_id),
                    d.score,
                    d.bbox.x1,
                    d.bbox.y1,
                    d.bbox.x2,
                    d.bbox.y2
                )
            })
            .collect();
        let list: Vec<Value> = dets
            .iter()
            .map(|d| {
                json!({
                    "class_id": d.class_id,
                    "class_name": name(d.class_id),
                    "score": d.score,
                    "box": [d.bbox.x1, d.bbox.y1, d.bbox.x2, d.bbox.y2],
                })
            })
            .collect();
        let mut summary = img.summary(&format!(
            "{} detection{}",
            dets.len(),
            if dets.len() == 1 { "" } else { "s" }
        ));
        if stats.nonfinite > 0 {
            summary.push_str(&format!(
                "; {} anchors had non-finite network outputs and were dropped",
                stats.nonfinite
            ));
        }
        let mut json = json!({
            "candidate_count": stats.candidates,
            "nonfinite_anchor_count": stats.nonfinite,
            "detections": list,
        });
        img.add_to_json(&mut json);
        Ok(Outcome {
            summary,
            lines,
            json,
            annotated: annotate.then(|| draw(&img.image, dets, self.det.labels())),
        })
    }

    fn stage_times(&self) -> Vec<(String, f64)> {
        let t = self.det.stage_times();
        let mut v = vec![("stage-in".to_string(), t.stage_in.as_secs_f64() * 1e3)];
        v.extend(self.det.step_times().iter().cloned());
        v.push(("collect".to_string(), t.collect.as_secs_f64() * 1e3));
        v
    }

    fn environment(&self) -> Environment {
        let model = self.det.model();
        // Until the first frame prepares a session, how a GPU run executes is not known.
        #[allow(unused_mut)]
        let mut env = Environment::of_model_sessions(model, self.det.session());
        #[cfg(feature = "cuda")]
        if let Some(d) = self.det.session().and_then(|s| s.device()) {
            let b = d.memory_budget();
            env.staging = Some(if b.mapped == 0 {
                tether_family::family::MappedIo::Never
            } else if b.mapped == b.pinned {
                tether_family::family::MappedIo::Always
            } else {
                tether_family::family::MappedIo::Outputs
            });
            if model.session_options().step_timing {
                env.gpu_timed = d.step_names().map(str::to_string).collect();
            }
        }
        env
    }
}

/// A distinct colour per class (the Ultralytics palette's first entries, cycled;
/// ultralytics/utils/plotting.py `Colors`).
fn colour(class_id: u16) -> Colour {
    const PALETTE: [u32; 10] = [
        0xFF3838, 0xFF9D97, 0xFF701F, 0xFFB21D, 0xCFD231, 0x48F90A, 0x92CC17, 0x3DDB86, 0x1A9334,
        0x00D4BB,
    ];
    let c = PALETTE[usize::from(class_id) % PALETTE.len()];
    Colour::new((c >> 16) as u8, (c >> 8) as u8, c as u8)
}

/// Draw every detection (box in its class colour, "name score" label above it) on an RGB
/// copy of `image` ([`Annotation`]: at most [`MAX_ANNOTATED_SIDE`] pixels a side). Line
/// width grows with the image (1/400 of the long side, at least 2 px).
pub fn draw(image: &DecodedImage, dets: &[Detection], labels: &[String]) -> RgbImage {
    let mut a = Annotation::new(image);
    let stroke = a.stroke(400, 2);
    for d in dets {
        let c = colour(d.class_id);
        let b = &d.bbox;
        a.outline_box([b.x1, b.y1, b.x2, b.y2].map(f64::from), c, stroke);
        let name = labels
            .get(usize::from(d.class_id))
            .map_or("?", String::as_str);
        let corner = a.point(f64::from(b.x1), f64::from(b.y1));
        a.label(corner, &format!("{name} {:.2}", d.score), c);
    }
    a.into_image()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BoundingBox;
    use tether_family::vision::PixelFormat;

    fn black(w: u32, h: u32) -> DecodedImage {
        DecodedImage::new(vec![0; (w * h * 3) as usize], w, h, PixelFormat::Rgb8).unwrap()
    }

    fn det(x1: f32, y1: f32, x2: f32, y2: f32) -> Detection {
        Detection {
            class_id: 0,
            score: 0.9,
            bbox: BoundingBox { x1, y1, x2, y2 },
        }
    }

    #[test]
    fn draws_the_box_outline_in_the_class_colour() {
        let out = draw(
            &black(500, 500),
            &[det(100.0, 100.0, 200.0, 200.0)],
            &["person".into()],
        );
        assert_eq!(out.dimensions(), (500, 500), "no silent upscaling");
        assert_eq!(out.get_pixel(150, 100).0, [0xFF, 0x38, 0x38]);
        assert_eq!(
            out.get_pixel(150, 150).0,
            [0, 0, 0],
            "box interior untouched"
        );
    }

    #[test]
    fn large_images_are_annotated_at_a_bounded_size_with_thicker_lines() {
        let out = draw(
            &black(8192, 2048),
            &[det(4096.0, 1024.0, 6144.0, 2000.0)],
            &["x".into()],
        );
        assert_eq!(out.dimensions(), (4096, 1024));
        // The box is drawn at half scale, with a stroke of 4096 / 400 = 10 px.
        assert_eq!(out.get_pixel(2500, 512).0, [0xFF, 0x38, 0x38]);
        assert_eq!(out.get_pixel(2500, 512 + 9).0, [0xFF, 0x38, 0x38]);
        assert_eq!(out.get_pixel(2500, 512 + 20).0, [0, 0, 0]);
    }
}
