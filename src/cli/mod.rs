//! The `tether` subcommands.

pub mod annotate;
pub mod build;
pub mod doctor;
pub mod inspect;
pub mod run;
pub mod selftest;
pub mod text;

use tether_bundle::BundleError;
use tether_detect::DetectError;

/// Print an error as one line, then a hint when one helps. Control
/// characters in the message (a name quoted from a file, a newline from a
/// tool's output) are escaped.
pub fn report(e: &anyhow::Error) {
    eprintln!("error: {}", text::escape_control(&format!("{e:#}")));
    if let Some(h) = hint(e) {
        eprintln!("hint: {h}");
    }
}

fn bundle_hint(b: &BundleError) -> &'static str {
    match b {
        BundleError::Io { .. } | BundleError::File(_) => {
            "check the path; bundles are written by `tether build`"
        }
        BundleError::ChangedWhileOpen { .. } => {
            "the file was overwritten while tether read it; install a new bundle by renaming it over the old one (`mv`, or `tether build -o`), not with `cp`"
        }
        _ => {
            "the file is not a valid tether bundle (truncated or corrupted copy?); rebuild it with `tether build` and check it with `tether verify`"
        }
    }
}

fn hint(e: &anyhow::Error) -> Option<&'static str> {
    for cause in e.chain() {
        if let Some(b) = cause.downcast_ref::<BundleError>() {
            return Some(bundle_hint(b));
        }
        if let Some(d) = cause.downcast_ref::<DetectError>() {
            return Some(match d {
                DetectError::Bundle(b) => bundle_hint(b),
                DetectError::WrongFamily { .. } => {
                    "this command runs `detect` bundles; check `tether inspect`"
                }
                DetectError::Labels(_) | DetectError::Network(_) => {
                    "the ONNX file must be an Ultralytics YOLOv8 detection export (input [B,3,H,W], output [B,4+C,N], metadata `names`)"
                }
                DetectError::Config { .. } => "see `tether build --help` for the accepted ranges",
                DetectError::Device(_) => {
                    "`-vv` lists every place libcuda was looked for; `tether doctor` shows what this machine has; `--device cpu` runs anywhere"
                }
                DetectError::Image { .. } => "inputs must be readable PNG or JPEG images",
                _ => return None,
            });
        }
        if cause.downcast_ref::<image::ImageError>().is_some() {
            return Some("inputs must be readable PNG or JPEG images");
        }
    }
    None
}
