//! Checksums prove integrity, not sanity: a network altered *inside* a bundle whose checksums
//! are all valid (written again by the bundle writer) must give a typed error or an answer,
//! never a panic, from `Detector` open (tract's parse and preparation) or from a frame.
//!
//! Each case mutates the ONNX payload of a valid bundle (built by the detect recipe from the
//! field case `dyn.onnx`, a YOLOv8-shaped detector) with a few deterministic random edits
//! (byte flips, boundary values, a truncation now and then), writes a new bundle with every
//! other section and tensor record copied, then opens it on the CPU and runs one frame.
//! `TETHER_ONNX_MUTATIONS` cases (default 2,000; recorded longer runs in
//! `docs/evidence/soak.md`), seed `TETHER_ONNX_SEED` (default 1); with `TETHER_ONNX_DUMP=DIR`
//! each case's network is written to `DIR/last.onnx` before it runs; with
//! `TETHER_ONNX_VERBOSE=1` every refusal is printed with its case number and error.

use std::sync::Arc;

use tether_bundle::{Bundle, SectionKind, Verify};
use tether_detect::{Detector, DetectorOptions, Device, ImageView, PixelFormat};
use tether_testkit::with_section_payload;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, onnx: &[u8]) -> Vec<u8> {
    let mut m = onnx.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(m.len());
        match rng.below(8) {
            0..=3 => m[at] ^= 1 << rng.below(8),
            4 => m[at] = [0x00, 0x01, 0x7f, 0x80, 0xff][rng.below(5)],
            5 => m[at] = m[at].wrapping_add(1),
            6 => m[at] = m[at].wrapping_sub(1),
            _ => {
                if rng.below(8) == 0 {
                    m.truncate(at.max(1));
                }
            }
        }
    }
    m
}

/// A valid bundle built by the detect recipe from the field case `dyn.onnx` at 64x64.
fn base_bundle(name: &str) -> Bundle {
    let onnx = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/field/dyn.onnx"),
    )
    .unwrap();
    let (w, _) = tether_detect::recipe::build(
        &onnx,
        &tether_detect::recipe::BuildOptions {
            common: tether_detect::recipe::BuildCommon::named(name),
            input_size: Some((64, 64)),
            ..Default::default()
        },
        &mut |_| {},
    )
    .unwrap();
    Bundle::from_vec(w.to_bytes().unwrap(), Verify::Eager).unwrap()
}

#[test]
fn mutated_networks_in_valid_bundles_never_panic() {
    let base = base_bundle("mutation");
    let network = base
        .sections()
        .find(|s| s.kind == SectionKind::Onnx)
        .expect("an ONNX section");
    let original = base.section_bytes(&network).unwrap().to_vec();

    let side = 64u32;
    let px = vec![128u8; (side * side * 3) as usize];
    let view = ImageView::new(&px, side, side, PixelFormat::Rgb8).unwrap();
    let cases = env("TETHER_ONNX_MUTATIONS", 2000);
    let mut rng = Rng(env("TETHER_ONNX_SEED", 1).max(1));
    let (mut refused_open, mut refused_run, mut ran) = (0u64, 0u64, 0u64);
    let dump = std::env::var_os("TETHER_ONNX_DUMP");
    let verbose = std::env::var_os("TETHER_ONNX_VERBOSE").is_some();
    for case in 0..cases {
        let payload = mutate(&mut rng, &original);
        if let Some(dir) = &dump {
            // The case about to run, kept where a crash (not a panic) would leave it.
            std::fs::write(std::path::Path::new(dir).join("last.onnx"), &payload).unwrap();
            std::fs::write(
                std::path::Path::new(dir).join("last.case"),
                case.to_string(),
            )
            .unwrap();
        }
        let bytes = with_section_payload(&base, network.index, &payload);
        // Every checksum is valid: the bundle opens; only the network inside is altered.
        let bundle = Arc::new(Bundle::from_vec(bytes, Verify::Eager).unwrap());
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(
                || match Detector::from_bundle(
                    bundle,
                    &DetectorOptions {
                        device: Device::Cpu,
                        ..DetectorOptions::default()
                    },
                ) {
                    Err(e) => {
                        if verbose {
                            eprintln!("case {case}: refused at open: {e}");
                        }
                        0
                    }
                    Ok(mut d) => match d.detect(&view) {
                        Err(e) => {
                            if verbose {
                                eprintln!("case {case}: refused at run: {e}");
                            }
                            1
                        }
                        Ok(_) => 2,
                    },
                },
            ));
        match result {
            Ok(0) => refused_open += 1,
            Ok(1) => refused_run += 1,
            Ok(_) => ran += 1,
            Err(_) => panic!("case {case}: a mutated network panicked through Detector"),
        }
    }
    println!(
        "{cases} mutated networks: {refused_open} refused at open, {refused_run} refused at run, {ran} ran"
    );
    assert_eq!(refused_open + refused_run + ran, cases);
}

/// A configuration that disagrees with its network (a bundle whose checksums are valid, its
/// config record rewritten with another anchor count) is refused when the detector opens,
/// naming the shapes seen and expected, not at its first frame.
#[test]
fn a_configuration_that_disagrees_with_its_network_is_refused_at_open() {
    let base = base_bundle("mismatch");
    let section = base.section(tether_detect::config::CONFIG_SECTION).unwrap();
    let mut config =
        tether_detect::DetectConfig::from_section(base.section_bytes(&section).unwrap()).unwrap();
    let anchors = config.num_anchors;
    config.num_anchors = anchors + 1;
    let record = config.to_record();
    let mut payload = base.section_bytes(&section).unwrap().to_vec();
    let r = zerocopy::IntoBytes::as_bytes(&record);
    payload[..r.len()].copy_from_slice(r);
    let bytes = with_section_payload(&base, section.index, &payload);
    let bundle = Arc::new(Bundle::from_vec(bytes, Verify::Eager).unwrap());
    let options = DetectorOptions {
        device: Device::Cpu,
        ..DetectorOptions::default()
    };
    match Detector::from_bundle(bundle, &options) {
        Err(e @ tether_detect::DetectError::Network(_)) => {
            let m = e.to_string();
            assert!(m.contains(&format!("{anchors}]")), "{m}");
            assert!(
                m.contains(&format!("{} anchors at 64x64", anchors + 1)),
                "{m}"
            );
            assert!(!m.contains("Some("), "{m}");
        }
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("opened a detector whose configuration disagrees with its network"),
    }
}
