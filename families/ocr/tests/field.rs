//! The field inputs of issue 28 and more of their kinds, against rapidocr-onnxruntime's own
//! answers (`golden/field.json`, `golden/reference.py --field tests/field`): a line-final
//! character the recogniser emits in its last step (`ocr_last_char_v4.png`), lines whose
//! padding to a width bucket joined words (`ocr_bucket_space_v4.png`, the synthetic lines of
//! `tests/field/ocr_lines/`, page.png and text.png turned by 180 degrees), a line wider than
//! the widest bucket (`ocr_long_line_squeezed.png`), and text drawn only in the alpha
//! channel of a gray + alpha PNG (`ocr_gray_alpha_transparent.png`). Images are decoded by
//! the shared decoder the CLI uses (alpha kept; the family applies rapidocr's rule).
//! Every line: the same text as the reference, its box matched with IoU >= 0.9.

mod common;

use std::path::PathBuf;

use serde_json::Value;
use tether_family::decode::{Orientation, decode_file};
use tether_ocr::compare::compare;
use tether_ocr::{Ocr, OcrOptions};

fn field_golden() -> Value {
    serde_json::from_str(include_str!("../golden/field.json")).expect("golden JSON")
}

fn path_of(name: &str) -> PathBuf {
    match name.strip_suffix("@180") {
        Some(asset) => common::asset(asset),
        None => tether_testkit::repo_root().join("tests/field").join(name),
    }
}

#[test]
fn field_inputs_read_as_rapidocr_reads_them() {
    let g = field_golden();
    let images = g["images"].as_object().expect("images");
    assert!(images.len() >= 13, "{}", images.len());
    let bundle = common::bundle();
    let mut ocr = Ocr::from_bundle(
        bundle,
        &OcrOptions {
            device: tether_ocr::Device::Cpu,
            ..OcrOptions::default()
        },
    )
    .expect("open");
    let mut failures = Vec::new();
    for (name, want) in images {
        let mut img = decode_file(&path_of(name), Orientation::Ignore).expect("decode");
        if want["turns"].as_u64() == Some(2) {
            let ch = img.format.channels();
            let px: Vec<&[u8]> = img.data.chunks_exact(ch).rev().collect();
            img.data = px.concat();
        }
        let view: tether_ocr::ImageView<'_> = img.view();
        let result = ocr.detect_text(&view).expect("ocr");
        let ours: Vec<([[f32; 2]; 4], String)> = result
            .lines()
            .map(|l| (l.polygon, l.text.to_string()))
            .collect();
        let reference: Vec<([[f32; 2]; 4], String)> = want["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| {
                (
                    common::quad(&r["box"]),
                    r["text"].as_str().expect("text").into(),
                )
            })
            .collect();
        let stats = ocr.stats();
        let r: Vec<_> = reference.iter().map(|(p, t)| (*p, t.as_str())).collect();
        let o: Vec<_> = ours.iter().map(|(p, t)| (*p, t.as_str())).collect();
        let c = compare(&r, &o);
        eprintln!("{name}: {} lines, {} edits, {stats:?}", ours.len(), c.edits);
        for p in &c.pairs {
            if p.edits > 0 {
                eprintln!(
                    "  {:?} vs ours {:?}",
                    reference[p.reference].1, ours[p.ours].1
                );
            }
        }
        if c.edits > 0 || !c.missing.is_empty() || !c.extra.is_empty() {
            failures.push(name.clone());
        }
        assert_eq!(stats.squeezed, 0, "{name}: no line is squeezed");
    }
    assert!(
        failures.is_empty(),
        "not as rapidocr reads them: {failures:?}"
    );
}
