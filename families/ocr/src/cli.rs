//! The OCR family as the `tether` CLI sees it (feature `cli`): build
//! arguments and recipe, the `inspect` description, `run`/`bench` on image
//! files, text and JSON output, annotated images, and the bundle's self-test
//! for `tether verify --self-test`.
//!
//! Images are decoded with [`tether_family::decode::decode_file`] (size
//! checked before decoding, EXIF orientation applied unless
//! `--ignore-orientation`) and handed to [`Ocr::detect_text`] as they are.
//! Transparency follows the reference: the shared decoder keeps the alpha
//! channel and the family applies `LoadImage`'s `cvt_two_to_three` (gray +
//! alpha) and `cvt_four_to_three` (RGBA). One way the CLI's input differs from
//! `rapidocr-onnxruntime` reading the same file: the reference (PIL
//! `Image.open`, no `exif_transpose`) ignores the EXIF orientation, so
//! `--ignore-orientation` reproduces it exactly.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use clap::{Arg, ArgMatches, value_parser};
use image::RgbImage;
use serde_json::{Value, json};
use tether_bundle::Bundle;
pub use tether_family::annotate::MAX_ANNOTATED_SIDE;
use tether_family::annotate::{Annotation, Colour};
use tether_family::args::{
    f32_in, flag, flag_arg, number_arg, path_arg, read_file, required_path, value,
};
use tether_family::decode::{DecodedImage, ImageInput, Orientation};
use tether_family::family::{
    BuildCommon, Built, Description, Environment, Family, Input, InputSource, Outcome, PlanSource,
    Report, RunOptions, Runner, SelfTest, UsageError, file_stem,
};
use tether_family::selftest::Role;

use crate::config::{CONFIG_SECTION, DICT_SECTION};
use crate::ctc::Dictionary;
use crate::network::{CLS, DET, REC};
use crate::recipe::{self, BuildOptions, Networks};
use crate::selftest;
use crate::{FAMILY, Ocr, OcrConfig, OcrOptions, TextLine};

/// The OCR family.
pub struct OcrFamily;

/// The registry entry.
pub static OCR: OcrFamily = OcrFamily;

/// Parse `320,352,...` (ascending recognition bucket widths in pixels).
fn parse_widths(s: &str) -> Result<Vec<u32>, String> {
    s.split(',')
        .map(|t| {
            t.trim()
                .parse::<u32>()
                .map_err(|e| format!("`{}`: {e}", t.trim()))
        })
        .collect()
}

fn text_score_arg() -> Arg {
    number_arg(
        "text-score",
        "S",
        value_parser!(f32),
        "Minimum recognition score of a line kept, in [0, 1] (default 0.5)",
    )
}

/// The shapes a TensorRT plan of `network` would be built for: the I/O the
/// bundle records, its run-time (`-1`) dimensions fixed to the shape the
/// runtime opens the network at (a square image's detector input, the
/// narrowest recognition bucket).
fn plan_tensors(
    network: &str,
    info: &tether_build::OnnxInfo,
    config: &OcrConfig,
) -> Vec<tether_bundle::TensorDesc> {
    let side = i64::from((config.det_limit_side_len / 32).max(1) * 32);
    let w0 = i64::from(config.rec_widths[0]);
    let mut v = recipe::run_tensors(network, info, config);
    for t in &mut v {
        let fixed: Vec<i64> = match (network, t.mode, t.dims.as_slice()) {
            (DET, tether_bundle::IoMode::Input, [1, 3, _, _]) => vec![1, 3, side, side],
            (DET, tether_bundle::IoMode::Output, [1, 1, _, _]) => vec![1, 1, side, side],
            (REC, tether_bundle::IoMode::Input, [1, 3, h, _]) => vec![1, 3, *h, w0],
            (REC, tether_bundle::IoMode::Output, [1, _, c]) => vec![1, w0 / 8, *c],
            _ => continue,
        };
        t.dims = fixed;
    }
    v
}

impl Family for OcrFamily {
    fn name(&self) -> &'static str {
        FAMILY
    }

    fn about(&self) -> &'static str {
        "PP-OCR text detection and recognition (rapidocr-onnxruntime pipeline): image in, text lines out"
    }

    fn inputs_help(&self) -> &'static str {
        "PNG or JPEG images"
    }

    fn annotates(&self) -> bool {
        true
    }

    fn build_args(&self) -> Vec<Arg> {
        vec![
            path_arg(
                "det",
                "D.onnx",
                "The text detection network (PP-OCR DB, e.g. ch_PP-OCRv4_det_infer.onnx)",
            )
            .required(true),
            path_arg(
                "rec",
                "R.onnx",
                "The text recognition network (PP-OCR CTC with the `character` metadata, e.g. ch_PP-OCRv4_rec_infer.onnx)",
            )
            .required(true),
            path_arg(
                "cls",
                "C.onnx",
                "The optional 180-degree line classifier (e.g. ch_ppocr_mobile_v2.0_cls_infer.onnx)",
            ),
            Arg::new("rec-widths")
                .long("rec-widths")
                .value_name("W,W,...")
                .value_parser(parse_widths)
                .help("Recognition width buckets in pixels, ascending multiples of 8 from 320 (default: 23 buckets 320..=3008)"),
            text_score_arg(),
            flag_arg(
                "no-self-test",
                "Leave the self-test out even when the networks are the pinned ones",
            ),
        ]
    }

    fn build(
        &self,
        args: &ArgMatches,
        common: &BuildCommon,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Built> {
        let text_score = f32_in(args, "text-score", 0.0, 1.0)?;
        let det_path = required_path(args, "det")?;
        let rec_path = required_path(args, "rec")?;
        let cls_path = value::<PathBuf>(args, "cls");
        let det = read_file(&det_path)?;
        let rec = read_file(&rec_path)?;
        let cls = cls_path.as_deref().map(read_file).transpose()?;
        let options = BuildOptions {
            common: common.clone().or_name(file_stem(&rec_path, "ocr")),
            rec_widths: args.get_one::<Vec<u32>>("rec-widths").cloned(),
            text_score,
            no_self_test: args.get_flag("no-self-test"),
        };
        let (writer, report) = recipe::build(
            Networks {
                det: &det,
                rec: &rec,
                cls: cls.as_deref(),
            },
            &options,
            progress,
        )
        .map_err(|e| match e {
            // Out-of-range option values are usage errors (exit 2).
            crate::OcrError::Config {
                field: field @ ("rec_widths" | "text_score"),
                value,
            } => anyhow::Error::new(UsageError(format!(
                "--{}: invalid value {value}",
                field.replace('_', "-")
            ))),
            other => anyhow::Error::new(other),
        })
        .context("building the ocr bundle")?;
        let c = &report.config;
        let dynamic = |info: &tether_build::OnnxInfo| -> Vec<String> {
            info.inputs
                .iter()
                .filter(|t| t.dims.iter().any(|&d| d < 0))
                .map(|t| t.name.clone())
                .collect()
        };
        let mut networks = vec![
            PlanSource {
                network: DET.into(),
                onnx: det_path.clone(),
                tensors: plan_tensors(DET, &report.det, c),
                dynamic_inputs: dynamic(&report.det),
            },
            PlanSource {
                network: REC.into(),
                onnx: rec_path.clone(),
                tensors: plan_tensors(REC, &report.rec, c),
                dynamic_inputs: dynamic(&report.rec),
            },
        ];
        if let (Some(p), Some(info)) = (&cls_path, &report.cls) {
            networks.push(PlanSource {
                network: CLS.into(),
                onnx: p.clone(),
                tensors: plan_tensors(CLS, info, c),
                dynamic_inputs: dynamic(info),
            });
        }
        let mut summary = vec![
            format!("family ocr: {}", c.summary()),
            format!(
                "dictionary: {} entries (+ CTC blank), from the rec model's `character` metadata",
                report.dictionary_entries
            ),
            format!("width buckets: {:?}", c.rec_widths),
        ];
        summary.push(match (&report.selftest, &report.self_test_skipped) {
            (Some(r), _) => format!("self-test: embedded (ocr/selftest): {r}"),
            (None, why) => format!("self-test: not embedded: {}", why.as_deref().unwrap_or("?")),
        });
        Ok(Built {
            writer,
            networks,
            summary,
        })
    }

    fn run_args(&self) -> Vec<Arg> {
        vec![
            text_score_arg(),
            flag_arg(
                "no-cls",
                "Skip the 180-degree line classifier even when the bundle has one",
            ),
            Orientation::argument(
                "Use the stored pixels of a JPEG, ignoring its EXIF orientation tag (as rapidocr-onnxruntime does)",
            ),
        ]
    }

    fn bundle_values(&self, bundle: &Bundle) -> Result<Vec<(&'static str, String)>> {
        let c = OcrConfig::from_section(bundle.section_data(CONFIG_SECTION)?)?;
        Ok(vec![("text-score", c.text_score.to_string())])
    }

    fn describe(&self, bundle: &Arc<Bundle>) -> Result<Description> {
        let c = OcrConfig::from_section(bundle.section_data(CONFIG_SECTION)?)?;
        let dict = Dictionary::from_section(bundle.section_data(DICT_SECTION)?)?;
        let has_cls = bundle.sections().any(|s| {
            matches!(
                s.kind,
                tether_bundle::SectionKind::Onnx | tether_bundle::SectionKind::TensorRtPlan
            ) && tether_bundle::network_of(s.name) == CLS
        });
        let lines = config_lines(&c, dict.len(), has_cls);
        let json = config_json(&c, dict.len(), has_cls);
        let d = Description { lines, json };
        Ok(d.with_self_test(bundle, FAMILY, |t| {
            let (w, h) = crate::selftest::line(t).map_or((0, 0), |(_, w, h)| (w, h));
            let text = t.text(Role::Expected, selftest::TEXT).unwrap_or("?");
            let score = t
                .f32_scalar(Role::Expected, selftest::SCORE)
                .unwrap_or(f32::NAN);
            let tolerance = t.tolerance(selftest::MAX_SCORE_DIFF).unwrap_or(f32::NAN);
            (
                format!("{w}x{h} line, expects {text:?} (score {score}, tolerance {tolerance})"),
                json!({
                    "width": w,
                    "height": h,
                    "text": text,
                    "score": score,
                    "tolerance": tolerance,
                }),
            )
        }))
    }

    fn open(
        &self,
        bundle: Arc<Bundle>,
        args: &ArgMatches,
        options: &RunOptions,
    ) -> Result<Box<dyn Runner>> {
        let text_score = f32_in(args, "text-score", 0.0, 1.0)?;
        let mut ocr_options = ocr_options(options)?;
        ocr_options.text_score = text_score;
        if flag(args, "no-cls") {
            ocr_options.use_cls = Some(false);
        }
        let ocr = Ocr::from_bundle(bundle, &ocr_options)?;
        let orientation = Orientation::of_args(args);
        Ok(Box::new(OcrRunner { ocr, orientation }))
    }

    fn run_self_test(
        &self,
        bundle: Arc<Bundle>,
        options: &RunOptions,
        test: &SelfTest,
    ) -> Result<Report> {
        let mut ocr = Ocr::from_bundle(bundle, &ocr_options(options)?)?;
        Ok(crate::selftest::run_test(&mut ocr, test)?)
    }
}

/// The configuration of an OCR bundle as `inspect` prints it (`dict_len` dictionary
/// entries; `has_cls`: the bundle has a classifier network).
fn config_lines(c: &OcrConfig, dict_len: usize, has_cls: bool) -> Vec<(String, String)> {
    let mut networks = vec![
        format!(
            "det (DB text detection, input [1, 3, H, W], short side -> {} px)",
            c.det_limit_side_len
        ),
        format!(
            "rec (CTC recognition, input [1, 3, {}, W], {} classes)",
            c.rec_height, c.rec_classes
        ),
    ];
    if has_cls {
        networks.push(format!(
            "cls (180-degree classifier, input [1, 3, {}, {}]{})",
            c.cls_height,
            c.cls_width,
            if c.use_cls { "" } else { ", off by default" }
        ));
    }
    vec![
        ("networks".into(), networks.join("; ")),
        (
            "dictionary".into(),
            format!("{} entries (+ CTC blank; the last is the space)", dict_len),
        ),
        (
            "image".into(),
            format!(
                "long side <= {} and short side >= {} px (rescaled otherwise); padded when <= {} px tall or wider than {} x its height",
                c.max_side_len, c.min_side_len, c.min_height, c.width_height_ratio
            ),
        ),
        (
            "detector".into(),
            format!(
                "limit {} {} px (multiples of 32), mean {:?}, std {:?}, thresh {}, box thresh {}, unclip {}, min size {}, <= {} boxes, dilation {}, score {}",
                if c.det_limit_max {
                    "long side"
                } else {
                    "short side"
                },
                c.det_limit_side_len,
                c.det_mean,
                c.det_std,
                c.det_thresh,
                c.det_box_thresh,
                c.det_unclip_ratio,
                c.det_min_size,
                c.det_max_candidates,
                if c.det_dilation { "on" } else { "off" },
                if c.det_score_slow { "slow" } else { "fast" }
            ),
        ),
        (
            "classifier".into(),
            if c.use_cls {
                format!(
                    "{}x{}, a line labelled '180' with score > {} is turned",
                    c.cls_width, c.cls_height, c.cls_thresh
                )
            } else {
                "off".into()
            },
        ),
        (
            "recogniser".into(),
            format!(
                "height {}, lines grouped by {} for padding, min width {} px, text score >= {}",
                c.rec_height, c.rec_batch, c.rec_min_width, c.text_score
            ),
        ),
        (
            "buckets".into(),
            format!(
                "{} recogniser widths (px): {}",
                c.rec_widths.len(),
                c.rec_widths
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    ]
}

/// The same as JSON (`family_config` of `inspect --json`).
fn config_json(c: &OcrConfig, dict_len: usize, has_cls: bool) -> serde_json::Value {
    json!({
        "networks": {
            "det": true,
            "rec": true,
            "cls": has_cls,
        },
        "dictionary_entries": dict_len,
        "rec_classes": c.rec_classes,
        "use_cls": c.use_cls,
        "max_side_len": c.max_side_len,
        "min_side_len": c.min_side_len,
        "min_height": c.min_height,
        "width_height_ratio": c.width_height_ratio,
        "text_score": c.text_score,
        "det_limit_side_len": c.det_limit_side_len,
        "det_limit_type": if c.det_limit_max { "max" } else { "min" },
        "det_mean": c.det_mean,
        "det_std": c.det_std,
        "det_thresh": c.det_thresh,
        "det_box_thresh": c.det_box_thresh,
        "det_max_candidates": c.det_max_candidates,
        "det_unclip_ratio": c.det_unclip_ratio,
        "det_min_size": c.det_min_size,
        "det_use_dilation": c.det_dilation,
        "det_score_mode": if c.det_score_slow { "slow" } else { "fast" },
        "cls_image_shape": [3, c.cls_height, c.cls_width],
        "cls_thresh": c.cls_thresh,
        "rec_image_shape": [3, c.rec_height, c.rec_min_width],
        "rec_batch_num": c.rec_batch,
        "rec_widths": c.rec_widths,
    })
}

/// The [`OcrOptions`] of the common run options (device, verification).
fn ocr_options(options: &RunOptions) -> Result<OcrOptions> {
    let device: tether_runtime::Device = options.device()?;
    Ok(OcrOptions {
        device,
        verify_eagerly: options.verify_eagerly,
        model: options.model_options(),
        ..OcrOptions::default()
    })
}

struct OcrRunner {
    ocr: Ocr,
    orientation: Orientation,
}

impl Runner for OcrRunner {
    fn environment(&self) -> tether_family::family::Environment {
        // One session per network and input shape (graphs on a GPU): the device, the engines
        // and why; stage times are host clocks.
        Environment::of_model_sessions(self.ocr.model(), self.ocr.sessions())
    }

    fn engines(&self) -> Vec<(String, String)> {
        self.ocr
            .engines()
            .map(|(n, e)| (n.to_string(), e.id().to_string()))
            .collect()
    }

    fn load(&self, source: InputSource<'_>) -> Result<Box<dyn Input>> {
        ImageInput::from_source(source, self.orientation, FAMILY)
    }

    fn run(&mut self, input: &dyn Input) -> Result<()> {
        let img = ImageInput::of(input, FAMILY)?;
        self.ocr
            .detect_text(&img.image.view())
            .with_context(|| format!("reading text in {}", img.label))?;
        Ok(())
    }

    fn outcome(&self, input: &dyn Input, annotate: bool) -> Result<Outcome> {
        let img = ImageInput::of(input, FAMILY)?;
        let result = self.ocr.result();
        let stats = self.ocr.stats();
        let lines = result
            .lines()
            .map(|l| {
                let p = l.polygon;
                format!(
                    "{:?}  {:.3}  [{:.0},{:.0} {:.0},{:.0} {:.0},{:.0} {:.0},{:.0}]{}",
                    l.text,
                    l.score,
                    p[0][0],
                    p[0][1],
                    p[1][0],
                    p[1][1],
                    p[2][0],
                    p[2][1],
                    p[3][0],
                    p[3][1],
                    if l.rotated { "  (turned 180)" } else { "" }
                )
            })
            .collect();
        let list: Vec<Value> = result
            .lines()
            .map(|l| {
                json!({
                    "text": l.text,
                    "score": l.score,
                    "box_score": l.box_score,
                    "rotated": l.rotated,
                    "polygon": l.polygon,
                })
            })
            .collect();
        let mut summary = img.summary(&format!(
            "{} text line{}",
            result.len(),
            if result.len() == 1 { "" } else { "s" }
        ));
        if stats.squeezed > 0 {
            summary.push_str(&format!(
                "; warning: {} line(s) wider than the widest recogniser width ({} px) were squeezed into it and may read differently from rapidocr",
                stats.squeezed,
                crate::config::MAX_REC_WIDTH
            ));
        }
        let mut json = json!({
            "det_input_width": stats.det_input.0,
            "det_input_height": stats.det_input.1,
            "box_count": stats.boxes,
            "rotated_count": stats.rotated,
            "widened_count": stats.widened,
            "squeezed_count": stats.squeezed,
            "lines": list,
        });
        img.add_to_json(&mut json);
        Ok(Outcome {
            summary,
            lines,
            json,
            annotated: annotate.then(|| draw(&img.image, result.lines())),
        })
    }

    fn stage_times(&self) -> Vec<(String, f64)> {
        let t = self.ocr.stage_times();
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        vec![
            ("preprocess".into(), ms(t.preprocess)),
            ("det".into(), ms(t.det)),
            ("db".into(), ms(t.postprocess)),
            ("crop".into(), ms(t.crop)),
            ("cls".into(), ms(t.cls)),
            ("rec".into(), ms(t.rec)),
        ]
    }
}

/// Outline and label colour.
const COLOUR: Colour = Colour::new(0x00, 0xC8, 0x53);

/// Draw every line (its polygon, and "text score" above its first corner) on an RGB copy
/// of `image` ([`Annotation`]: at most [`MAX_ANNOTATED_SIDE`] pixels a side). Line width
/// grows with the image (1/500 of the long side, at least 1 px).
pub fn draw<'a>(image: &DecodedImage, lines: impl Iterator<Item = TextLine<'a>>) -> RgbImage {
    let mut a = Annotation::new(image);
    let stroke = a.stroke(500, 1);
    for l in lines {
        let corners = l.polygon.map(|p| p.map(f64::from));
        a.outline_polygon(&corners, COLOUR, stroke);
        let first = a.point(corners[0][0], corners[0][1]);
        a.label(first, &format!("{} {:.2}", l.text, l.score), COLOUR);
    }
    a.into_image()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_family::vision::PixelFormat;

    fn black(w: u32, h: u32) -> DecodedImage {
        DecodedImage::new(vec![0; (w * h * 3) as usize], w, h, PixelFormat::Rgb8).unwrap()
    }

    fn line(polygon: [[f32; 2]; 4]) -> TextLine<'static> {
        TextLine {
            polygon,
            text: "文字 ok",
            score: 0.97,
            box_score: 0.9,
            rotated: false,
        }
    }

    #[test]
    fn draws_the_polygon_outline_and_label() {
        let quad = [
            [100.0, 100.0],
            [300.0, 100.0],
            [300.0, 140.0],
            [100.0, 140.0],
        ];
        let out = draw(&black(500, 500), std::iter::once(line(quad)));
        assert_eq!(out.dimensions(), (500, 500), "no silent upscaling");
        let c = [0x00, 0xC8, 0x53];
        assert_eq!(out.get_pixel(200, 140).0, c, "bottom edge");
        assert_eq!(out.get_pixel(300, 120).0, c, "right edge");
        assert_eq!(out.get_pixel(200, 120).0, [0, 0, 0], "inside untouched");
        // The label box sits above the first corner.
        assert_eq!(out.get_pixel(101, 100 - 5).0, c);
    }

    #[test]
    fn large_images_are_annotated_at_a_bounded_size() {
        let quad = [
            [4096.0, 1024.0],
            [6144.0, 1024.0],
            [6144.0, 1536.0],
            [4096.0, 1536.0],
        ];
        let out = draw(&black(8192, 2048), std::iter::once(line(quad)));
        assert_eq!(out.dimensions(), (4096, 1024));
        let c = [0x00, 0xC8, 0x53];
        // Drawn at half scale: the bottom edge at y = 768.
        assert_eq!(out.get_pixel(2500, 768).0, c);
        assert_eq!(out.get_pixel(2500, 700).0, [0, 0, 0]);
    }

    #[test]
    fn bucket_widths_parse_and_bad_ones_are_named() {
        assert_eq!(parse_widths("320, 352,384"), Ok(vec![320, 352, 384]));
        let e = parse_widths("320,x").unwrap_err();
        assert!(e.contains("`x`"), "{e}");
    }
}
