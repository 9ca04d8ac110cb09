//! `tether doctor --self-test`: a one-command check that TensorRT works on
//! this device through tether's own layer.
//!
//! Steps, each printed with PASS / FAIL / SKIP and the reason:
//!
//! 1. **onnx**: generate a small ONNX model in memory (no download): input
//!    `x` f32 `[1, 3, 32, 32]`, `y = Relu(Conv3x3(x, W, B, pads 1)) + x`,
//!    weights, bias and input from integer formulas ([`weight`], [`bias`],
//!    [`input_value`]) chosen so that every product and partial sum is a
//!    multiple of 1/64 below 16 in magnitude: exact in f32 *and* f16, so the
//!    result does not depend on summation order;
//! 2. **cpu**: run it on the tract CPU engine and compare with a direct
//!    evaluation of the formula ([`reference_output`]); prints the output's
//!    checksum (the exact sum of all elements);
//! 3. **gpu**, **tensorrt**, **trtexec**: look for a CUDA device, the TensorRT
//!    library and `trtexec`;
//! 4. **build**: build a plan with `trtexec` (FP16 where allowed) and put it in an
//!    in-memory bundle next to the ONNX model; **eager**: open that bundle with the model
//!    API on CUDA device 0 (the TensorRT plan selected like any bundle's), run it through a
//!    device session without graphs, compare with the CPU output — tolerance `|gpu - cpu|
//!    <= tol * max(|cpu|, 1)` with `tol` = 1e-2 for an FP16 plan, 1e-4 for FP32;
//!    **graph**: the same session with its CUDA graph captured at load (the session checks
//!    the replay against the eager run on poisoned buffers before handing it out), run,
//!    compare with the eager output;
//! 5. a verdict line.
//!
//! Exit status: [`EXIT_USABLE`] (0) when every step ran and passed;
//! [`EXIT_FAILED`] (1) when a step failed; [`EXIT_CANNOT_CHECK`] (4) when
//! nothing failed but some steps could not run here (no GPU, no TensorRT, no
//! `trtexec`, or a build without the `tensorrt` feature).

use std::fmt;
use std::sync::Arc;

use anyhow::Result;
use serde_json::{Value, json};
use tether_build::selftest_model::{
    INPUT_NAME, OUTPUT_NAME, SHAPE, TOL_FP16, TOL_FP32, checksum, generate_onnx, input,
    reference_output,
};
use tether_build::trtexec::find_trtexec;
use tether_bundle::{
    Bundle, BundleWriter, CpuArch, DType, EngineKind, IdentityDesc, IoMode, Layout, SectionKind,
    TargetDesc, TensorDesc, Verify,
};
use tether_runtime::tensorrt::TensorRt;
use tether_runtime::{Device, ModelOptions, NetworkSession};
use tether_targets::probe::GpuDevice;

/// Exit status: every step ran and passed; TensorRT is usable here.
pub const EXIT_USABLE: u8 = 0;
/// Exit status: a step failed.
pub const EXIT_FAILED: u8 = 1;
/// Exit status: nothing failed, but TensorRT could not be checked here
/// (missing GPU, TensorRT library, `trtexec`, or the `cuda` feature).
pub const EXIT_CANNOT_CHECK: u8 = 4;

/// Outcome of one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Ran and passed.
    Pass,
    /// Ran and failed.
    Fail,
    /// Could not run here.
    Skip,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Skip => "SKIP",
        })
    }
}

/// One step's line.
#[derive(Clone, Debug)]
pub struct Step {
    /// Short name (`onnx`, `cpu`, `gpu`, `tensorrt`, `trtexec`, `build`, `eager`, `graph`).
    pub name: &'static str,
    /// Outcome.
    pub status: Status,
    /// What was seen, or why it failed or was skipped.
    pub detail: String,
}

/// The whole self-test result.
#[derive(Clone, Debug)]
pub struct Report {
    /// Steps in order.
    pub steps: Vec<Step>,
    /// Short reasons the TensorRT check could not run here (what is missing).
    pub missing: Vec<String>,
    /// The verdict line (without the `verdict:` prefix).
    pub verdict: String,
    /// Exit status ([`EXIT_USABLE`], [`EXIT_FAILED`], [`EXIT_CANNOT_CHECK`]).
    pub exit_code: u8,
    /// Checksum of the CPU output, when the CPU step ran.
    pub cpu_checksum: Option<f64>,
}

impl Report {
    /// JSON form (`tether doctor --self-test --json`).
    pub fn to_json(&self) -> Value {
        json!({
            "steps": self.steps.iter().map(|s| json!({
                "name": s.name,
                "status": s.status.to_string(),
                "detail": s.detail,
            })).collect::<Vec<_>>(),
            "missing": self.missing,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "cpu_checksum": self.cpu_checksum,
        })
    }

    /// Text form: one line per step and the verdict.
    ///
    /// # Errors
    /// A failed write to stdout.
    pub fn print(&self) -> anyhow::Result<()> {
        crate::outln!(
            "self-test     TensorRT through tether's layer (ONNX generated here, CPU reference)"
        )?;
        for s in &self.steps {
            crate::outln!("  [{}] {:<9} {}", s.status, s.name, s.detail)?;
        }
        crate::outln!("verdict: {}", self.verdict)?;
        Ok(())
    }
}

struct Steps(Vec<Step>);

impl Steps {
    fn push(&mut self, name: &'static str, status: Status, detail: impl Into<String>) {
        self.0.push(Step {
            name,
            status,
            detail: detail.into(),
        });
    }
}

/// Largest `|a - b| / max(|b|, 1)` and its index.
fn worst(a: &[f32], b: &[f32]) -> (f32, usize) {
    a.iter()
        .zip(b)
        .enumerate()
        .map(|(i, (&x, &y))| ((x - y).abs() / y.abs().max(1.0), i))
        .fold(
            (0.0, 0),
            |m, v| if v.0 > m.0 || v.0.is_nan() { v } else { m },
        )
}

fn tensors() -> Vec<TensorDesc> {
    [(INPUT_NAME, IoMode::Input), (OUTPUT_NAME, IoMode::Output)]
        .into_iter()
        .map(|(name, mode)| TensorDesc {
            name: name.into(),
            mode,
            dtype: DType::F32,
            layout: Layout::Nchw,
            dims: SHAPE.iter().map(|&d| d as i64).collect(),
        })
        .collect()
}

/// The generated model as an in-memory bundle (ONNX only; `tether build` would write the same).
fn bundle_writer(onnx: &[u8]) -> Result<BundleWriter> {
    let mut w = BundleWriter::new(IdentityDesc {
        name: "selftest".into(),
        family: "selftest".into(),
        model_version: "1".into(),
        tool_version: concat!("tether ", env!("CARGO_PKG_VERSION")).into(),
        created_unix_s: 0,
    });
    let t = w.add_target(TargetDesc {
        name: "portable".into(),
        arch: CpuArch::Any,
        sm: None,
        engine: EngineKind::TractCpu,
        tensorrt_version: 0,
        hardware_compat: 0,
        flags: 0,
    })?;
    let s = w.add_section(
        SectionKind::Onnx,
        "selftest/model/model.onnx",
        Some(t),
        onnx.to_vec(),
    )?;
    for t in tensors() {
        w.add_tensor(s, t)?;
    }
    Ok(w)
}

/// Run `bundle` once through the named-tensor API on `options`' device.
fn run_module(
    bundle: Arc<Bundle>,
    options: &ModelOptions,
    x: &[f32],
) -> Result<(Vec<f32>, NetworkSession)> {
    let model = tether_runtime::Model::from_bundle(bundle, options)?;
    let mut m = model.network_session("model")?;
    m.input_mut::<f32>(INPUT_NAME)?.copy_from_slice(x);
    m.run()?;
    let y = m.output::<f32>(OUTPUT_NAME)?.to_vec();
    Ok((y, m))
}

/// Runs the CPU step: tract on the generated model, through the named-tensor API.
fn run_cpu(onnx: &[u8], x: &[f32]) -> Result<Vec<f32>> {
    let bundle = Arc::new(Bundle::from_vec(
        bundle_writer(onnx)?.to_bytes()?,
        Verify::Eager,
    )?);
    let (y, m) = run_module(
        bundle,
        &ModelOptions {
            device: Device::Cpu,
            ..ModelOptions::default()
        },
        x,
    )?;
    let spec = &m.outputs()[0];
    anyhow::ensure!(
        spec.shape == SHAPE,
        "tract output `{}` has shape {:?}, expected {:?}",
        spec.name,
        spec.shape,
        SHAPE
    );
    Ok(y)
}

/// Runs every step this machine allows and returns the report. `tensorrt_lib`:
/// the TensorRT library (a file or its folder) to use instead of the search
/// (`tether doctor --tensorrt-lib`).
pub fn run(tensorrt_lib: Option<&std::path::Path>) -> Report {
    let mut steps = Steps(Vec::new());
    let mut missing: Vec<String> = Vec::new();

    // 1. The model.
    let onnx = generate_onnx();
    steps.push(
        "onnx",
        Status::Pass,
        format!(
            "generated {} bytes: x f32{SHAPE:?} -> Conv3x3(3->3, pads 1) + Relu + Add(x) -> y",
            onnx.len()
        ),
    );
    // 2. The CPU reference.
    let x = input();
    let cpu = cpu_step(&mut steps, &onnx, &x);
    // 3. What this machine has; 4. build, eager, graph where it can.
    let found = probe_steps(&mut steps, &mut missing, tensorrt_lib);
    device_steps(&mut steps, &found, &onnx, &x, cpu.as_deref());
    #[cfg(not(feature = "tensorrt"))]
    missing.push("tether built without the `tensorrt` feature".into());

    let steps = steps.0;
    let (verdict, exit_code) = verdict(&steps, &missing);
    Report {
        steps,
        missing,
        verdict,
        exit_code,
        cpu_checksum: cpu.as_deref().map(checksum),
    }
}

/// Step 2: the model on the tract CPU engine against the formula; the output when it
/// matches.
fn cpu_step(steps: &mut Steps, onnx: &[u8], x: &[f32]) -> Option<Vec<f32>> {
    let expected = reference_output(x);
    match run_cpu(onnx, x) {
        Ok(y) => {
            let (err, at) = worst(&y, &expected);
            let sum = checksum(&y);
            let detail = format!(
                "tract CPU: y f32{SHAPE:?}, checksum {sum:.6}, y[0]={} y[last]={}, max rel. diff from the formula {err:e} at {at}",
                y[0],
                y[y.len() - 1]
            );
            if err <= 1e-6 {
                steps.push("cpu", Status::Pass, detail);
                Some(y)
            } else {
                steps.push("cpu", Status::Fail, detail);
                None
            }
        }
        Err(e) => {
            steps.push("cpu", Status::Fail, format!("{e:#}"));
            None
        }
    }
}

/// What step 3 found: the first CUDA device, the TensorRT library, `trtexec`.
struct Found {
    gpu: Option<GpuDevice>,
    trt: Result<TensorRt, tether_runtime::tensorrt::LoadError>,
    trtexec: Result<std::path::PathBuf, tether_build::trtexec::TrtexecError>,
}

/// Step 3: what this machine has (a CUDA GPU, the TensorRT library, `trtexec`), each a step;
/// what is missing is noted.
fn probe_steps(
    steps: &mut Steps,
    missing: &mut Vec<String>,
    tensorrt_lib: Option<&std::path::Path>,
) -> Found {
    let probe = tether_targets::probe::probe();
    let gpu = probe.cuda.devices.first().cloned();
    match &gpu {
        Some(d) => steps.push(
            "gpu",
            Status::Pass,
            format!("CUDA device {}: {} (sm {})", d.ordinal, d.name, d.sm),
        ),
        None => {
            let why = match (&probe.cuda.error, &probe.cuda.library) {
                (Some(e), _) => e.clone(),
                (None, None) => format!(
                    "the CUDA driver (libcuda.so.1) was not found (searched {} places; `tether doctor -v` lists them)",
                    probe.cuda.search.places
                ),
                (None, Some(lib)) => format!("the CUDA driver ({lib}) reports no device"),
            };
            steps.push("gpu", Status::Skip, format!("no CUDA GPU: {why}"));
            missing.push("no CUDA GPU".into());
        }
    }
    let trt = TensorRt::load(tensorrt_lib);
    match &trt {
        Ok(lib) => steps.push(
            "tensorrt",
            Status::Pass,
            format!(
                "TensorRT {} {} ({})",
                lib.version(),
                lib.flavor(),
                lib.path().display()
            ),
        ),
        Err(e) => {
            steps.push(
                "tensorrt",
                Status::Skip,
                format!(
                    "no TensorRT library: searched {} places (`tether doctor -v` lists them)",
                    e.search().places
                ),
            );
            missing.push("no TensorRT library".into());
        }
    }
    let trtexec = find_trtexec(None);
    match &trtexec {
        Ok(p) => steps.push("trtexec", Status::Pass, p.display().to_string()),
        Err(e) => {
            steps.push("trtexec", Status::Skip, format!("no trtexec: {e}"));
            missing.push("no trtexec (a TensorRT builder)".into());
        }
    }
    Found { gpu, trt, trtexec }
}

/// Step 4: build a plan, run it eagerly and from a captured graph, when the machine has
/// everything that needs (else the three steps are skipped, saying what is missing).
fn device_steps(steps: &mut Steps, found: &Found, onnx: &[u8], x: &[f32], cpu: Option<&[f32]>) {
    let Found { gpu, trt, trtexec } = found;
    #[cfg(feature = "tensorrt")]
    {
        let ready = gpu.is_some() && trtexec.is_ok();
        match (ready, trt, cpu) {
            (true, Ok(_), Some(cpu)) => device::run(steps, onnx, x, cpu),
            _ => {
                let mut needs = Vec::new();
                if gpu.is_none() {
                    needs.push("a CUDA GPU");
                }
                if trt.is_err() {
                    needs.push("the TensorRT library");
                }
                if trtexec.is_err() {
                    needs.push("trtexec");
                }
                if cpu.is_none() {
                    needs.push("a CPU reference");
                }
                let why = format!("needs {}", needs.join(", "));
                if gpu.is_none() || trtexec.is_err() {
                    steps.push("build", Status::Skip, why.clone());
                } else {
                    steps.push("build", Status::Skip, format!("not attempted: {why}"));
                }
                steps.push("eager", Status::Skip, why.clone());
                steps.push("graph", Status::Skip, why);
            }
        }
    }
    #[cfg(not(feature = "tensorrt"))]
    {
        let _ = (gpu, trt, trtexec, onnx, x, cpu);
        let why = "this tether was built without the `tensorrt` feature";
        for name in ["build", "eager", "graph"] {
            steps.push(name, Status::Skip, why);
        }
    }
}

/// The verdict line and exit status: failed when a step failed, cannot-check when steps
/// were skipped (saying what is missing), usable otherwise.
fn verdict(steps: &[Step], missing: &[String]) -> (String, u8) {
    let failed: Vec<&Step> = steps.iter().filter(|s| s.status == Status::Fail).collect();
    let skipped = steps.iter().any(|s| s.status == Status::Skip);
    if let Some(f) = failed.first() {
        (
            format!(
                "FAILED: {} step(s) failed, first `{}`: {}",
                failed.len(),
                f.name,
                f.detail
            ),
            EXIT_FAILED,
        )
    } else if skipped {
        let reasons = if missing.is_empty() {
            steps
                .iter()
                .filter(|s| s.status == Status::Skip)
                .map(|s| format!("{}: {}", s.name, s.detail))
                .collect::<Vec<_>>()
        } else {
            missing.to_vec()
        };
        (
            format!(
                "cannot check TensorRT here: {} (the generated model ran on the CPU)",
                reasons.join("; ")
            ),
            EXIT_CANNOT_CHECK,
        )
    } else {
        (
            "TensorRT works on this device: a plan built here runs through tether's layer, eager and CUDA-graph replay match the CPU".to_string(),
            EXIT_USABLE,
        )
    }
}

#[cfg(feature = "tensorrt")]
mod device {
    //! The GPU half: build with trtexec, then the model API on the GPU, eager and captured.

    use std::sync::Arc;

    use anyhow::{Context as _, Result};
    use tether_build::trtexec::{BuiltPlan, TrtexecOptions, build_plan_with_trtexec};
    use tether_bundle::{Bundle, Verify};
    use tether_runtime::session::{ExecMode, SessionOptions};
    use tether_runtime::{Device, EngineKind, ModelOptions};

    use super::{Status, Steps, TOL_FP16, TOL_FP32, bundle_writer, run_module, tensors, worst};

    struct TempDir(std::path::PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn options(graphs: bool) -> ModelOptions {
        ModelOptions {
            device: Device::Cuda(0),
            // The plan, and nothing else: the check is about TensorRT.
            exclude: vec![
                EngineKind::CudaNative,
                EngineKind::TractCuda,
                EngineKind::TractCpu,
            ],
            session: SessionOptions {
                graphs,
                ..SessionOptions::default()
            },
            ..ModelOptions::default()
        }
    }

    pub(super) fn run(steps: &mut Steps, onnx: &[u8], x: &[f32], cpu: &[f32]) {
        let dir =
            TempDir(std::env::temp_dir().join(format!("tether-selftest-{}", std::process::id())));
        let (built, bundle) = match build(&dir.0, onnx) {
            Ok(b) => {
                steps.push(
                    "build",
                    Status::Pass,
                    format!(
                        "trtexec built a {}-byte plan (TensorRT {}, sm {:?}, fp16 {})",
                        b.0.plan_bytes,
                        b.0.target.version(),
                        b.0.target.sm,
                        b.0.fp16_applied
                    ),
                );
                b
            }
            Err(e) => {
                steps.push("build", Status::Fail, format!("{e:#}"));
                steps.push("eager", Status::Skip, "no plan (the build failed)");
                steps.push("graph", Status::Skip, "no plan (the build failed)");
                return;
            }
        };
        let tol = if built.fp16_applied {
            TOL_FP16
        } else {
            TOL_FP32
        };
        let eager = match run_module(Arc::clone(&bundle), &options(false), x) {
            Ok((y, m)) if m.engine() == EngineKind::TensorRt => y,
            Ok((_, m)) => {
                steps.push(
                    "eager",
                    Status::Fail,
                    format!("the model chose {} instead of the plan", m.engine()),
                );
                steps.push("graph", Status::Skip, "the eager run failed");
                return;
            }
            Err(e) => {
                steps.push("eager", Status::Fail, format!("{e:#}"));
                steps.push("graph", Status::Skip, "the eager run failed");
                return;
            }
        };
        let (err, at) = worst(&eager, cpu);
        let detail = format!(
            "TensorRT plan through the model API (device session, no graph): max rel. diff from the CPU {err:e} at {at} (tolerance {tol:e}, {})",
            if built.fp16_applied {
                "fp16 plan"
            } else {
                "fp32 plan"
            }
        );
        if err > tol {
            steps.push("eager", Status::Fail, detail);
            steps.push("graph", Status::Skip, "the eager run did not match the CPU");
            return;
        }
        steps.push("eager", Status::Pass, detail);
        match run_module(bundle, &options(true), x) {
            Ok((replay, m)) => {
                let (mode, note) = m
                    .session()
                    .device()
                    .map(|d| {
                        let (mode, note) = d.exec_mode();
                        (mode, note.to_string())
                    })
                    .unwrap_or((ExecMode::Eager, "no device session".into()));
                let (err, at) = worst(&replay, &eager);
                let identical = replay
                    .iter()
                    .zip(&eager)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                let detail = format!(
                    "{mode:?}: {note}; run {} (max rel. diff {err:e} at {at}, tolerance {tol:e})",
                    if identical {
                        "bit-identical to eager"
                    } else {
                        "differs from eager"
                    }
                );
                let status = if err <= tol && mode == ExecMode::WholeGraph {
                    Status::Pass
                } else {
                    Status::Fail
                };
                steps.push("graph", status, detail);
            }
            Err(e) => steps.push("graph", Status::Fail, format!("{e:#}")),
        }
    }

    fn build(dir: &std::path::Path, onnx: &[u8]) -> Result<(BuiltPlan, Arc<Bundle>)> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let model = dir.join("selftest.onnx");
        std::fs::write(&model, onnx).with_context(|| format!("writing {}", model.display()))?;
        let mut options = TrtexecOptions::new(&model, dir.join("selftest.plan"));
        options.workspace_mib = 256;
        let built = build_plan_with_trtexec(&options)?;
        let plan = std::fs::read(&built.plan_path)
            .with_context(|| format!("reading {}", built.plan_path.display()))?;
        let mut w = bundle_writer(onnx)?;
        tether_build::plan::add_plan(&mut w, "selftest", "model", &built, plan, &tensors())?;
        let bundle = Arc::new(Bundle::from_vec(w.to_bytes()?, Verify::Eager)?);
        Ok((built, bundle))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_api_on_the_cpu_matches_the_formula() {
        let y = run_cpu(&generate_onnx(), &input()).expect("tract runs the model");
        assert_eq!(y, reference_output(&input()));
        // The exact sum of all 3072 outputs (also checked by tests/cli_selftest.rs).
        assert_eq!(checksum(&y), 1630.109375);
    }

    #[test]
    fn report_without_gpu_says_what_is_missing() {
        let r = run(None);
        assert_eq!(r.steps[0].status, Status::Pass);
        assert_eq!(r.steps[1].status, Status::Pass, "{:?}", r.steps[1]);
        assert!(r.exit_code == EXIT_CANNOT_CHECK || r.exit_code == EXIT_USABLE);
        if r.exit_code == EXIT_CANNOT_CHECK {
            assert!(r.verdict.starts_with("cannot check TensorRT here: "));
            assert!(!r.missing.is_empty());
        }
    }
}
