//! A detection model with more than one output: the head is chosen by what identifies it
//! (the Ultralytics export's name `output0`, then its shape, then the values of a test run),
//! never by its position, and a model where that stays ambiguous is refused naming the
//! outputs. Models: `tests/field/{aux_first,unnamed,ambiguous}.onnx`, made from the field
//! case `dyn.onnx` by `tests/field/make_io_models.py` (see its docstring).

use std::path::PathBuf;

use tether_detect::recipe::{BuildOptions, build};
use tether_detect::{Detector, DetectorOptions, Device, ImageView, PixelFormat};

fn field(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/field")
        .join(name)
}

/// One detection: `(class, score, box)`.
type Detection = (u16, f32, [f32; 4]);

/// Build `model` at 640x640 and detect in `red_square.png`: `(head output index, boxes)`.
fn detect(model: &str) -> Result<(u8, Vec<Detection>), String> {
    let onnx = std::fs::read(field(model)).expect("model");
    let (writer, report) = build(
        &onnx,
        &BuildOptions {
            common: tether_detect::recipe::BuildCommon::named(model),
            input_size: Some((640, 640)),
            ..BuildOptions::default()
        },
        &mut |_| {},
    )
    .map_err(|e| e.to_string())?;
    let path = std::env::temp_dir().join(format!(
        "tether-outputs-{}-{model}.bundle",
        std::process::id()
    ));
    writer.write(&path).expect("write bundle");
    let mut det = Detector::open(
        &path,
        &DetectorOptions {
            device: Device::Cpu,
            ..DetectorOptions::default()
        },
    )
    .expect("open");
    let img = image::open(field("red_square.png"))
        .expect("image")
        .to_rgb8();
    let view =
        ImageView::new(img.as_raw(), img.width(), img.height(), PixelFormat::Rgb8).expect("view");
    let boxes = det
        .detect(&view)
        .expect("detect")
        .iter()
        .map(|d| {
            (
                d.class_id,
                d.score,
                [d.bbox.x1, d.bbox.y1, d.bbox.x2, d.bbox.y2],
            )
        })
        .collect();
    let _ = std::fs::remove_file(&path);
    Ok((report.config.head_output, boxes))
}

#[test]
fn the_head_is_chosen_by_name_then_values_never_by_position() {
    let (head, reference) = detect("dyn.onnx").expect("the one-output model");
    assert_eq!(head, 0);
    assert_eq!(reference.len(), 4, "four red cells: {reference:?}");
    assert!(reference.iter().all(|d| d.1 == 1.0), "{reference:?}");
    // An auxiliary output of the head's shape listed first: the head is `output0`.
    let (head, boxes) = detect("aux_first.onnx").expect("aux first");
    assert_eq!((head, &boxes), (1, &reference));
    // No `output0`: the output whose values are a head's (class scores in [0, 1]).
    let (head, boxes) = detect("unnamed.onnx").expect("unnamed");
    assert_eq!((head, &boxes), (1, &reference));
}

#[test]
fn two_outputs_that_could_each_be_the_head_are_refused_by_name() {
    let e = detect("ambiguous.onnx").expect_err("ambiguous");
    assert!(e.contains("`head_a`") && e.contains("`head_b`"), "{e}");
    assert!(
        e.contains("output0"),
        "the message says what would settle it: {e}"
    );
}
