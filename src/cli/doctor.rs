//! `tether doctor`: what this machine is and which engines it can run.
//!
//! Works with no GPU, no CUDA and no TensorRT: each missing piece is reported
//! with every place that was looked at. Reads no `nvidia-smi` or NVML (Jetson
//! has neither).

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use serde_json::{Value, json};
use tether_runtime::tensorrt::TensorRt;

/// Arguments of `tether doctor`.
#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Also check TensorRT end to end: generate a small ONNX model, run it on
    /// the CPU, build a plan with trtexec, run it through tether's TensorRT
    /// engine eagerly and as a CUDA graph, compare. Exit 0 usable, 1 a step
    /// failed, 4 could not check here (the SKIP lines say what is missing).
    #[arg(long)]
    self_test: bool,
}

/// Run `tether doctor`.
pub fn run(a: &DoctorArgs) -> Result<ExitCode> {
    let report = tether_targets::probe::probe();
    let trt = TensorRt::load(None);
    let self_test = a.self_test.then(super::selftest::run);
    if a.json {
        let tensorrt: Value = match &trt {
            Ok(lib) => json!({
                "found": true,
                "version": lib.version().to_string(),
                "flavor": lib.flavor().to_string(),
                "path": lib.path().display().to_string(),
            }),
            Err(e) => json!({ "found": false, "error": e.to_string() }),
        };
        let mut doc = json!({
            "tether": env!("CARGO_PKG_VERSION"),
            "probe": serde_json::to_value(&report)?,
            "tensorrt": tensorrt,
        });
        if let Some(t) = &self_test {
            doc["self_test"] = t.to_json();
        }
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("tether        {}", env!("CARGO_PKG_VERSION"));
        print!("{report}");
        match &trt {
            Ok(lib) => println!(
                "TensorRT      {} {} ({})",
                lib.version(),
                lib.flavor(),
                lib.path().display()
            ),
            Err(e) => println!("TensorRT      not found: {e}"),
        }
        let engines = if report.cuda.devices.is_empty() {
            "tract CPU"
        } else if trt.is_ok() {
            "TensorRT plans for this device, tract-cuda, tract CPU"
        } else {
            "tract-cuda, tract CPU"
        };
        println!("engines       {engines}");
        if let Some(t) = &self_test {
            t.print();
        }
    }
    Ok(self_test.map_or(ExitCode::SUCCESS, |t| ExitCode::from(t.exit_code)))
}
