//! The detection family as the `tether` CLI sees it (feature `cli`): build arguments and
//! recipe, the `inspect` description, `run`/`bench` on image files, text and JSON output,
//! annotated images.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use clap::{Arg, ArgMatches, value_parser};
use embedded_graphics::mono_font::{MonoFont, MonoTextStyle, ascii::FONT_6X10, ascii::FONT_10X20};
use embedded_graphics::pixelcolor::Rgb888;
use embedded_graphics::prelude::*;
use embedded_graphics::primitives::{
    PrimitiveStyle, PrimitiveStyleBuilder, Rectangle, StrokeAlignment,
};
use embedded_graphics::text::{Baseline, Text};
use image::RgbImage;
use serde_json::{Value, json};
use tether_bundle::Bundle;
use tether_family::decode::{DecodedImage, ImageInput, Orientation};
use tether_family::family::{
    BuildCommon, Built, Description, Environment, Execution, Family, Input, InputSource, Outcome,
    PlanSource, RunOptions, Runner, UsageError,
};

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
        Arg::new("score-threshold")
            .long("score-threshold")
            .value_name("S")
            .allow_negative_numbers(true)
            .value_parser(value_parser!(f32))
            .help("Detection score threshold in [0, 1] (strictly greater is kept)"),
        Arg::new("iou-threshold")
            .long("iou-threshold")
            .value_name("T")
            .allow_negative_numbers(true)
            .value_parser(value_parser!(f32))
            .help("Class-wise NMS IoU threshold in [0, 1]"),
    ]
}

impl Family for Detect {
    fn name(&self) -> &'static str {
        FAMILY
    }

    fn about(&self) -> &'static str {
        "YOLOv8 object detection (Ultralytics export): image in, boxes out"
    }

    fn annotates(&self) -> bool {
        true
    }

    fn build_args(&self) -> Vec<Arg> {
        let mut v = vec![
            Arg::new("onnx")
                .long("onnx")
                .value_name("MODEL.onnx")
                .required(true)
                .value_parser(value_parser!(PathBuf))
                .help("The ONNX model (Ultralytics YOLOv8 detection export)"),
            Arg::new("input-size")
                .long("input-size")
                .value_name("N|WxH")
                .value_parser(parse_size)
                .help("Network input size for dynamic-size models (default: the model's `imgsz`, else 640); multiples of 32, at most 8192 a side and 1,048,576 anchors (about 5600x5600)"),
            Arg::new("max-detections")
                .long("max-detections")
                .value_name("K")
                .allow_negative_numbers(true)
                .value_parser(value_parser!(i64))
                .help("Maximum detections per image, 1..=300 (default 300)"),
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
        let max_detections = match args.get_one::<i64>("max-detections") {
            Some(&k) if (1..=crate::MAX_DETECTIONS as i64).contains(&k) => Some(k as u32),
            Some(&k) => {
                return Err(UsageError(format!(
                    "--max-detections {k}: must be between 1 and {}",
                    crate::MAX_DETECTIONS
                ))
                .into());
            }
            None => None,
        };
        if let Some(&(w, h)) = args.get_one::<(u32, u32)>("input-size") {
            check_input_size(w, h)?;
        }
        let path: &PathBuf = args.get_one("onnx").context("--onnx is required")?;
        let onnx = tether_bundle::files::read_regular(path)?;
        let name = common.name.clone().unwrap_or_else(|| {
            path.file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("model")
                .to_string()
        });
        let options = BuildOptions {
            name,
            model_version: common.model_version.clone(),
            input_size: args.get_one::<(u32, u32)>("input-size").copied(),
            score_threshold: args.get_one::<f32>("score-threshold").copied(),
            iou_threshold: args.get_one::<f32>("iou-threshold").copied(),
            max_detections,
            created_unix_s: common.created_unix_s,
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
            ],
        })
    }

    fn run_args(&self) -> Vec<Arg> {
        let mut v = threshold_args().to_vec();
        v.push(
            Arg::new("ignore-orientation")
                .long("ignore-orientation")
                .action(clap::ArgAction::SetTrue)
                .help("Use the stored pixels of a JPEG, ignoring its EXIF orientation tag"),
        );
        v
    }

    fn describe(&self, bundle: &Bundle) -> Result<Description> {
        let config =
            DetectConfig::from_section(bundle.section_bytes(&bundle.section(CONFIG_SECTION)?)?)?;
        let labels =
            crate::labels::decode_labels(bundle.section_bytes(&bundle.section(LABELS_SECTION)?)?)?;
        let c = &config;
        Ok(Description {
            lines: vec![
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
            ],
            json: json!({
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
            }),
        })
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
                score_threshold: args
                    .try_get_one::<f32>("score-threshold")
                    .ok()
                    .flatten()
                    .copied(),
                iou_threshold: args
                    .try_get_one::<f32>("iou-threshold")
                    .ok()
                    .flatten()
                    .copied(),
                ..DetectorOptions::default()
            },
        )?;
        let orientation = if args
            .try_get_one::<bool>("ignore-orientation")
            .ok()
            .flatten()
            .copied()
            .unwrap_or(false)
        {
            Orientation::Ignore
        } else {
            Orientation::Apply
        };
        Ok(Box::new(DetectRunner { det, orientation }))
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
                "--input-size {w}x{h}: the {side} must be a multiple of 32 from 32 to {max}"
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
        let v = args.try_get_one::<f32>(name).ok().flatten().copied();
        tether_family::family::check_range(name, v, 0.0, 1.0)?;
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
        match source {
            InputSource::File(path) => Ok(Box::new(ImageInput::load(path, self.orientation)?)),
            InputSource::Text(_) => bail!("the detect family reads images, not text"),
        }
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
        let mut summary = format!(
            "{} detections ({}x{}",
            dets.len(),
            img.image.width,
            img.image.height
        );
        if img.image.orientation.is_some() {
            summary.push_str(", EXIF orientation applied");
        }
        summary.push(')');
        if stats.nonfinite > 0 {
            summary.push_str(&format!(
                "; {} anchors had non-finite network outputs and were dropped",
                stats.nonfinite
            ));
        }
        Ok(Outcome {
            summary,
            lines,
            json: json!({
                "image_width": img.image.width,
                "image_height": img.image.height,
                "orientation_applied": img.image.orientation,
                "candidates": stats.candidates,
                "nonfinite_anchors": stats.nonfinite,
                "detections": list,
            }),
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
        let mut env = Environment::of_model(model);
        #[cfg(feature = "cuda")]
        if let Some(d) = self.det.session().and_then(|s| s.device()) {
            use tether_runtime::session::ExecMode;
            let (mode, note) = d.exec_mode();
            env.execution = match mode {
                ExecMode::WholeGraph => Execution::Graph,
                ExecMode::SplitGraphs => Execution::SplitGraphs,
                ExecMode::Eager => Execution::Eager,
            };
            env.execution_note = note.to_string();
            let b = d.memory_budget();
            env.staging = Some(if b.mapped == 0 {
                tether_family::family::Staging::Copy
            } else if b.mapped == b.pinned {
                tether_family::family::Staging::Mapped
            } else {
                tether_family::family::Staging::MappedOutputs
            });
            if model.session_options().step_timing {
                env.gpu_timed = d.step_names().map(str::to_string).collect();
            }
        }
        env
    }
}

/// Largest side of an annotated image, in pixels: larger inputs are annotated on a
/// downscaled copy (memory stays bounded whatever the input size).
pub const MAX_ANNOTATED_SIDE: u32 = 4096;

/// `embedded-graphics` draw target over an `image` RGB buffer (clips at the edges).
struct Canvas<'a>(&'a mut RgbImage);

impl OriginDimensions for Canvas<'_> {
    fn size(&self) -> Size {
        Size::new(self.0.width(), self.0.height())
    }
}

impl DrawTarget for Canvas<'_> {
    type Color = Rgb888;
    type Error = std::convert::Infallible;

    fn draw_iter<I: IntoIterator<Item = Pixel<Rgb888>>>(
        &mut self,
        pixels: I,
    ) -> Result<(), Self::Error> {
        let (w, h) = (self.0.width() as i32, self.0.height() as i32);
        for Pixel(p, c) in pixels {
            if (0..w).contains(&p.x) && (0..h).contains(&p.y) {
                self.0
                    .put_pixel(p.x as u32, p.y as u32, image::Rgb([c.r(), c.g(), c.b()]));
            }
        }
        Ok(())
    }
}

/// A distinct colour per class (the Ultralytics palette's first entries, cycled;
/// ultralytics/utils/plotting.py `Colors`).
fn colour(class_id: u16) -> Rgb888 {
    const PALETTE: [u32; 10] = [
        0xFF3838, 0xFF9D97, 0xFF701F, 0xFFB21D, 0xCFD231, 0x48F90A, 0x92CC17, 0x3DDB86, 0x1A9334,
        0x00D4BB,
    ];
    let c = PALETTE[usize::from(class_id) % PALETTE.len()];
    Rgb888::new((c >> 16) as u8, (c >> 8) as u8, c as u8)
}

/// Draw every detection (box, "name score" label) on an RGB copy of `image`, at most
/// [`MAX_ANNOTATED_SIDE`] pixels a side. Line width and label size grow with the image
/// (about 1/400 of the long side, at least 2 px; the 10x20 font from 800 px up).
pub fn draw(image: &DecodedImage, dets: &[Detection], labels: &[String]) -> RgbImage {
    let long = image.width.max(image.height);
    let shrink = if long > MAX_ANNOTATED_SIDE {
        f64::from(MAX_ANNOTATED_SIDE) / f64::from(long)
    } else {
        1.0
    };
    let mut out = if shrink < 1.0 {
        let w = ((f64::from(image.width) * shrink).round() as u32).max(1);
        let h = ((f64::from(image.height) * shrink).round() as u32).max(1);
        // Decimate straight from the source (nearest): one output-sized buffer, no full-size
        // RGB copy of a huge input.
        let view = image.view();
        let ch = view.format().channels();
        let offs = view.format().rgb_offsets();
        let mut o = RgbImage::new(w, h);
        for (x, y, px) in o.enumerate_pixels_mut() {
            let sx = ((f64::from(x) + 0.5) / shrink) as usize;
            let sy = ((f64::from(y) + 0.5) / shrink) as usize;
            let i = sy.min(image.height as usize - 1) * view.stride()
                + sx.min(image.width as usize - 1) * ch;
            let d = view.data();
            *px = image::Rgb([d[i + offs[0]], d[i + offs[1]], d[i + offs[2]]]);
        }
        o
    } else {
        image.to_rgb8()
    };
    let k = shrink as f32;
    let out_long = out.width().max(out.height());
    let stroke = (out_long / 400).max(2);
    let font: &MonoFont<'_> = if out_long >= 800 {
        &FONT_10X20
    } else {
        &FONT_6X10
    };
    let (fw, fh) = (
        font.character_size.width + font.character_spacing,
        font.character_size.height,
    );
    let mut canvas = Canvas(&mut out);
    for d in dets {
        let c = colour(d.class_id);
        let (x1, y1) = (
            (d.bbox.x1 * k).round() as i32,
            (d.bbox.y1 * k).round() as i32,
        );
        let (x2, y2) = (
            (d.bbox.x2 * k).round() as i32,
            (d.bbox.y2 * k).round() as i32,
        );
        let size = Size::new((x2 - x1).max(1) as u32, (y2 - y1).max(1) as u32);
        let _ = Rectangle::new(Point::new(x1, y1), size)
            .into_styled(
                PrimitiveStyleBuilder::new()
                    .stroke_color(c)
                    .stroke_width(stroke)
                    .stroke_alignment(StrokeAlignment::Inside)
                    .build(),
            )
            .draw(&mut canvas);
        let name = labels
            .get(usize::from(d.class_id))
            .map_or("?", String::as_str);
        let text = format!("{name} {:.2}", d.score);
        let (tw, th) = (fw * text.len() as u32 + 4, fh + 2);
        let ty = if y1 >= th as i32 { y1 - th as i32 } else { y1 };
        let _ = Rectangle::new(Point::new(x1, ty), Size::new(tw, th))
            .into_styled(PrimitiveStyle::with_fill(c))
            .draw(&mut canvas);
        let _ = Text::with_baseline(
            &text,
            Point::new(x1 + 2, ty + 1),
            MonoTextStyle::new(font, Rgb888::BLACK),
            Baseline::Top,
        )
        .draw(&mut canvas);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BoundingBox;
    use tether_family::vision::PixelFormat;

    fn black(w: u32, h: u32) -> DecodedImage {
        DecodedImage {
            data: vec![0; (w * h * 3) as usize],
            width: w,
            height: h,
            format: PixelFormat::Rgb8,
            orientation: None,
        }
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
