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
//! 4. **build**: build a plan with `trtexec` (FP16 where allowed);
//!    **eager**: load it with [`TensorRtEngine`] on a CUDA context and stream,
//!    run once, compare with the CPU output — tolerance `|gpu - cpu| <= tol *
//!    max(|cpu|, 1)` with `tol` = 1e-2 for an FP16 plan, 1e-4 for FP32;
//!    **graph**: capture one enqueue into a CUDA graph, clear the output,
//!    replay, compare with the eager output (same tolerance; bit-identity is
//!    reported);
//! 5. a verdict line.
//!
//! Exit status: [`EXIT_USABLE`] (0) when every step ran and passed;
//! [`EXIT_FAILED`] (1) when a step failed; [`EXIT_CANNOT_CHECK`] (4) when
//! nothing failed but some steps could not run here (no GPU, no TensorRT, no
//! `trtexec`, or a build without the `cuda` feature).

use std::fmt;

use anyhow::{Context as _, Result};
use prost::Message;
use serde_json::{Value, json};
use tether_runtime::Engine as _;
use tether_runtime::cpu::TractCpuEngine;
use tether_runtime::tensorrt::TensorRt;
use tether_runtime::tensorrt::trtexec::find_trtexec;
use tract_onnx::pb;

/// Exit status: every step ran and passed; TensorRT is usable here.
pub const EXIT_USABLE: u8 = 0;
/// Exit status: a step failed.
pub const EXIT_FAILED: u8 = 1;
/// Exit status: nothing failed, but TensorRT could not be checked here
/// (missing GPU, TensorRT library, `trtexec`, or the `cuda` feature).
pub const EXIT_CANNOT_CHECK: u8 = 4;

/// Input (and output) shape of the generated model.
pub const SHAPE: [usize; 4] = [1, 3, 32, 32];
/// Channels of the generated model (in = out).
const C: usize = SHAPE[1];
const H: usize = SHAPE[2];
const W: usize = SHAPE[3];
/// Name of the model's input.
pub const INPUT_NAME: &str = "x";
/// Name of the model's output.
pub const OUTPUT_NAME: &str = "y";
/// Relative tolerance against the CPU for an FP16 plan.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub const TOL_FP16: f32 = 1e-2;
/// Relative tolerance against the CPU for an FP32 plan.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub const TOL_FP32: f32 = 1e-4;

/// Input element `x[0, c, h, w]`: `((7c + 3h + 5w) mod 17) / 8 - 1`.
pub fn input_value(c: usize, h: usize, w: usize) -> f32 {
    ((c * 7 + h * 3 + w * 5) % 17) as f32 / 8.0 - 1.0
}

/// Convolution weight `W[o, i, kh, kw]`: `((5o + 3i + 2kh + kw) mod 7) / 8 - 3/8`.
pub fn weight(o: usize, i: usize, kh: usize, kw: usize) -> f32 {
    ((o * 5 + i * 3 + kh * 2 + kw) % 7) as f32 / 8.0 - 0.375
}

/// Convolution bias `B[o]`: `(o - 1) / 4`.
pub fn bias(o: usize) -> f32 {
    (o as f32 - 1.0) / 4.0
}

/// The whole input tensor, NCHW.
pub fn input() -> Vec<f32> {
    let mut v = Vec::with_capacity(C * H * W);
    for c in 0..C {
        for h in 0..H {
            for w in 0..W {
                v.push(input_value(c, h, w));
            }
        }
    }
    v
}

/// `Relu(Conv3x3(x) + B) + x` evaluated directly (zero padding 1, stride 1).
pub fn reference_output(x: &[f32]) -> Vec<f32> {
    let at = |c: usize, h: isize, w: isize| -> f32 {
        if h < 0 || w < 0 || h >= H as isize || w >= W as isize {
            0.0
        } else {
            x[(c * H + h as usize) * W + w as usize]
        }
    };
    let mut y = Vec::with_capacity(C * H * W);
    for o in 0..C {
        for h in 0..H {
            for w in 0..W {
                let mut s = bias(o);
                for i in 0..C {
                    for kh in 0..3 {
                        for kw in 0..3 {
                            s += weight(o, i, kh, kw)
                                * at(
                                    i,
                                    h as isize + kh as isize - 1,
                                    w as isize + kw as isize - 1,
                                );
                        }
                    }
                }
                y.push(s.max(0.0) + x[(o * H + h) * W + w]);
            }
        }
    }
    y
}

/// Sum of all elements, in f64 (exact for this model's values).
pub fn checksum(y: &[f32]) -> f64 {
    y.iter().map(|&v| f64::from(v)).sum()
}

fn float_tensor(name: &str, dims: &[usize], data: Vec<f32>) -> pb::TensorProto {
    pb::TensorProto {
        name: name.into(),
        dims: dims.iter().map(|&d| d as i64).collect(),
        data_type: pb::tensor_proto::DataType::Float as i32,
        float_data: data,
        ..Default::default()
    }
}

fn value_info(name: &str, dims: &[usize]) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::{Dimension, dimension};
    pb::ValueInfoProto {
        name: name.into(),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: pb::tensor_proto::DataType::Float as i32,
                shape: Some(pb::TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            value: Some(dimension::Value::DimValue(d as i64)),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn ints(name: &str, v: &[i64]) -> pb::AttributeProto {
    pb::AttributeProto {
        name: name.into(),
        r#type: pb::attribute_proto::AttributeType::Ints as i32,
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn node(
    op: &str,
    inputs: &[&str],
    output: &str,
    attribute: Vec<pb::AttributeProto>,
) -> pb::NodeProto {
    pb::NodeProto {
        name: format!("{op}_{output}"),
        op_type: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        attribute,
        ..Default::default()
    }
}

/// The self-test model as ONNX protobuf bytes (IR 8, opset 13):
/// `y = Add(Relu(Conv(x, W, B, kernel 3x3, pads 1)), x)`.
pub fn generate_onnx() -> Vec<u8> {
    let mut wdata = Vec::with_capacity(C * C * 9);
    for o in 0..C {
        for i in 0..C {
            for kh in 0..3 {
                for kw in 0..3 {
                    wdata.push(weight(o, i, kh, kw));
                }
            }
        }
    }
    let graph = pb::GraphProto {
        name: "tether_selftest".into(),
        node: vec![
            node(
                "Conv",
                &[INPUT_NAME, "W", "B"],
                "conv",
                vec![ints("kernel_shape", &[3, 3]), ints("pads", &[1, 1, 1, 1])],
            ),
            node("Relu", &["conv"], "relu", vec![]),
            node("Add", &["relu", INPUT_NAME], OUTPUT_NAME, vec![]),
        ],
        initializer: vec![
            float_tensor("W", &[C, C, 3, 3], wdata),
            float_tensor("B", &[C], (0..C).map(bias).collect()),
        ],
        input: vec![value_info(INPUT_NAME, &SHAPE)],
        output: vec![value_info(OUTPUT_NAME, &SHAPE)],
        ..Default::default()
    };
    pb::ModelProto {
        ir_version: 8,
        opset_import: vec![pb::OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        producer_name: "tether doctor --self-test".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

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
    pub fn print(&self) {
        println!(
            "self-test     TensorRT through tether's layer (ONNX generated here, CPU reference)"
        );
        for s in &self.steps {
            println!("  [{}] {:<9} {}", s.status, s.name, s.detail);
        }
        println!("verdict: {}", self.verdict);
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

fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|f| f.to_le_bytes()).collect()
}

fn from_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Runs the CPU step: tract on the generated model.
fn run_cpu(onnx: &[u8], x: &[f32]) -> Result<Vec<f32>> {
    let mut engine =
        TractCpuEngine::load(onnx, &[SHAPE.to_vec()]).context("tract could not load the model")?;
    let input = engine.input_host_mut(0)?;
    let bytes = to_bytes(x);
    anyhow::ensure!(
        input.len() == bytes.len(),
        "tract input holds {} bytes, expected {}",
        input.len(),
        bytes.len()
    );
    input.copy_from_slice(&bytes);
    engine.run(tether_runtime::StreamHandle::HOST)?;
    let spec = &engine.outputs()[0];
    anyhow::ensure!(
        spec.shape == SHAPE,
        "tract output `{}` has shape {:?}, expected {:?}",
        spec.name,
        spec.shape,
        SHAPE
    );
    Ok(from_bytes(engine.output_host(0)?))
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
    let expected = reference_output(&x);
    let cpu = match run_cpu(&onnx, &x) {
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
    };

    // 3. What this machine has.
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

    // 4. Build, eager, graph.
    #[cfg(feature = "cuda")]
    {
        let ready = gpu.is_some() && trtexec.is_ok();
        match (ready, &trt, &cpu) {
            (true, Ok(lib), Some(cpu)) => device::run(&mut steps, lib, &onnx, &x, cpu),
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
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (&gpu, &trt, &trtexec, &cpu);
        let why = "this tether was built without the `cuda` feature";
        for name in ["build", "eager", "graph"] {
            steps.push(name, Status::Skip, why);
        }
        missing.push("tether built without the `cuda` feature".into());
    }

    let steps = steps.0;
    let failed: Vec<&Step> = steps.iter().filter(|s| s.status == Status::Fail).collect();
    let skipped = steps.iter().any(|s| s.status == Status::Skip);
    let (verdict, exit_code) = if let Some(f) = failed.first() {
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
            missing.clone()
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
    };
    Report {
        steps,
        missing,
        verdict,
        exit_code,
        cpu_checksum: cpu.as_deref().map(checksum),
    }
}

#[cfg(feature = "cuda")]
mod device {
    //! The GPU half: build with trtexec, run eagerly and as a CUDA graph.

    use super::{Status, Steps, TOL_FP16, TOL_FP32, from_bytes, to_bytes, worst};
    use anyhow::{Context as _, Result};
    use tether_runtime::cuda::{Context, Graph, Stream, SyncPolicy};
    use tether_runtime::tensorrt::{
        BuiltPlan, TensorRt, TensorRtEngine, TrtexecOptions, build_plan_with_trtexec,
    };
    use tether_runtime::{CaptureSafety, Engine as _};

    struct TempDir(std::path::PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub(super) fn run(steps: &mut Steps, lib: &TensorRt, onnx: &[u8], x: &[f32], cpu: &[f32]) {
        let dir =
            TempDir(std::env::temp_dir().join(format!("tether-selftest-{}", std::process::id())));
        let built = match build(&dir.0, onnx) {
            Ok(b) => {
                steps.push(
                    "build",
                    Status::Pass,
                    format!(
                        "trtexec built a {}-byte plan (TensorRT {}, sm {:?}, fp16 {})",
                        b.plan_bytes,
                        b.target.version(),
                        b.target.sm,
                        b.fp16_applied
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
        let (mut engine, stream, eager) = match eager(lib, &built, x) {
            Ok(v) => v,
            Err(e) => {
                steps.push("eager", Status::Fail, format!("{e:#}"));
                steps.push("graph", Status::Skip, "the eager run failed");
                return;
            }
        };
        let (err, at) = worst(&eager, cpu);
        let detail = format!(
            "TensorRtEngine (workspace {} bytes): max rel. diff from the CPU {err:e} at {at} (tolerance {tol:e}, {})",
            engine.workspace_bytes(),
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
        if let CaptureSafety::Unsafe(why) = engine.capture_safety() {
            steps.push(
                "graph",
                Status::Skip,
                format!("engine not capturable, runs eagerly: {why}"),
            );
            return;
        }
        match graph(&mut engine, &stream) {
            Ok((replay, nodes)) => {
                let (err, at) = worst(&replay, &eager);
                let identical = replay
                    .iter()
                    .zip(&eager)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                let detail = format!(
                    "CUDA graph of {nodes} node(s) replayed: {} (max rel. diff {err:e} at {at}, tolerance {tol:e})",
                    if identical {
                        "bit-identical to eager"
                    } else {
                        "differs from eager"
                    }
                );
                let status = if err <= tol {
                    Status::Pass
                } else {
                    Status::Fail
                };
                steps.push("graph", status, detail);
            }
            Err(e) => steps.push("graph", Status::Fail, format!("{e:#}")),
        }
    }

    fn build(dir: &std::path::Path, onnx: &[u8]) -> Result<BuiltPlan> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let model = dir.join("selftest.onnx");
        std::fs::write(&model, onnx).with_context(|| format!("writing {}", model.display()))?;
        let mut options = TrtexecOptions::new(&model, dir.join("selftest.plan"));
        options.workspace_mib = 256;
        Ok(build_plan_with_trtexec(&options)?)
    }

    fn eager(
        lib: &TensorRt,
        built: &BuiltPlan,
        x: &[f32],
    ) -> Result<(TensorRtEngine, Stream, Vec<f32>)> {
        let plan = std::fs::read(&built.plan_path)
            .with_context(|| format!("reading {}", built.plan_path.display()))?;
        let ctx = Context::new(0, SyncPolicy::default())?;
        let stream = Stream::new(&ctx, SyncPolicy::default())?;
        let runtime = lib.create_runtime()?;
        let mut engine = TensorRtEngine::load(&runtime, &plan, &built.target.record(), &ctx, &[])?;
        anyhow::ensure!(
            engine.inputs().len() == 1 && engine.outputs().len() == 1,
            "the plan has {} input(s) and {} output(s), expected 1 and 1",
            engine.inputs().len(),
            engine.outputs().len()
        );
        anyhow::ensure!(
            engine.inputs()[0].dtype == tether_runtime::engine::DType::F32
                && engine.outputs()[0].dtype == tether_runtime::engine::DType::F32,
            "the plan's I/O are {} and {}, expected f32",
            engine.inputs()[0],
            engine.outputs()[0]
        );
        engine.bind_own_io()?;
        engine.write_input(0, &to_bytes(x), &stream)?;
        engine.clear_output(0, &stream)?;
        engine.enqueue(&stream)?;
        stream.synchronize()?;
        let mut out = vec![0u8; x.len() * 4];
        engine.read_output(0, &mut out, &stream)?;
        Ok((engine, stream, from_bytes(&out)))
    }

    fn graph(engine: &mut TensorRtEngine, stream: &Stream) -> Result<(Vec<f32>, usize)> {
        let g = Graph::capture(stream, |s| engine.enqueue_for_capture(s))?;
        let len = engine.outputs()[0].byte_len().unwrap_or(0);
        engine.clear_output(0, stream)?;
        g.launch(stream)?;
        stream.synchronize()?;
        let mut out = vec![0u8; len];
        engine.read_output(0, &mut out, stream)?;
        Ok((from_bytes(&out), g.nodes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_onnx_parses_with_the_declared_shapes() {
        let onnx = generate_onnx();
        let info = tether_runtime::cpu::inspect_onnx(&onnx).expect("tract parses the model");
        assert_eq!(info.inputs.len(), 1);
        assert_eq!(info.outputs.len(), 1);
        assert_eq!(info.inputs[0].name, INPUT_NAME);
        assert_eq!(info.outputs[0].name, OUTPUT_NAME);
        assert_eq!(info.inputs[0].dims, vec![1, 3, 32, 32]);
        assert_eq!(info.outputs[0].dims, vec![1, 3, 32, 32]);
        let engine = TractCpuEngine::load(&onnx, &[SHAPE.to_vec()]).expect("tract plans it");
        assert_eq!(engine.outputs()[0].shape, SHAPE.to_vec());
    }

    #[test]
    fn formulas_give_the_values_worked_out_by_hand() {
        // x[0,0,0,0] = 0/8 - 1; x[0,1,2,3] = ((7+6+15) mod 17)/8 - 1 = 11/8 - 1.
        assert_eq!(input_value(0, 0, 0), -1.0);
        assert_eq!(input_value(1, 2, 3), 0.375);
        // W[0,0,0,0] = 0/8 - 3/8; W[1,2,1,1] = ((5+6+2+1) mod 7)/8 - 3/8 = -3/8.
        assert_eq!(weight(0, 0, 0, 0), -0.375);
        assert_eq!(weight(1, 2, 1, 1), -0.375);
        assert_eq!(bias(0), -0.25);
        assert_eq!(bias(2), 0.25);
    }

    /// `y[0, o, 0, 0]` from the formulas alone: at the top-left corner only
    /// the kernel taps kh, kw in {1, 2} see the image (the rest is padding).
    fn corner_by_hand(o: usize) -> f32 {
        let mut s = bias(o);
        for i in 0..3 {
            for kh in 1..3 {
                for kw in 1..3 {
                    s += weight(o, i, kh, kw) * input_value(i, kh - 1, kw - 1);
                }
            }
        }
        s.max(0.0) + input_value(o, 0, 0)
    }

    #[test]
    fn tract_output_matches_values_computed_by_hand() {
        let onnx = generate_onnx();
        let y = run_cpu(&onnx, &input()).expect("tract runs the model");
        assert_eq!(y.len(), 3 * 32 * 32);
        // Channel 0: the conv sum at the corner is -1.171875, Relu clips it to
        // 0, plus x[0,0,0,0] = -1: -1.
        assert_eq!(corner_by_hand(0), -1.0);
        assert_eq!(y[0], -1.0);
        // Channel 1: the conv sum is 0.203125, Relu keeps it, plus
        // x[0,1,0,0] = 7/8 - 1 = -0.125: 0.078125.
        assert_eq!(corner_by_hand(1), 0.078125);
        assert_eq!(y[32 * 32], 0.078125);
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
