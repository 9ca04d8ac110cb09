//! Activation layout: NCHW everywhere by default; with [`ActivationLayout::Nhwc`], the
//! buffers that convolutions and poolings read and write are stored channels-last (NHWC),
//! the memory order tensor-core convolution kernels read directly.
//!
//! Why: cuDNN's fp16 tensor-core convolutions are NHWC kernels. Given NCHW tensors, cuDNN
//! either transposes around them or runs slower NCHW kernels; on the H200 YOLOv8n's fp16
//! convolutions took about 14 us each in NCHW against about 5 us channels-last in PyTorch
//! (`docs/evidence/native-h200.md`, fourth run). PyTorch's `channels_last` memory format and
//! TensorRT's HWC8/HWC16 formats are the same idea.
//!
//! # What the pass does
//! Views carry their own strides, so an NHWC buffer is still seen through logical
//! `[N, C, H, W]` shapes: only strides and offsets change, and every step that addresses its
//! operands through strides (element-wise, copies) runs unchanged.
//! 1. A *candidate* is a root activation buffer that a 2-D forward convolution or pooling
//!    reads or writes, or a matrix product through a 4-D view (a 1x1 convolution lowered to
//!    GEMM), neither a network input nor output (the session binds those NCHW). Its logical
//!    `[N, C, H, W]` comes from that operand.
//! 2. A candidate becomes NHWC when every view of it that a step uses (including views of
//!    buffers placed inside it by copy elision, which become views of the root) is used by an
//!    element-wise step, a copy, a matrix product (YOLO's 1x1 convolutions: cuBLAS takes
//!    either unit stride), a convolution or a pooling, and maps onto NHWC: each view
//!    dimension steps along one buffer dimension without carrying into the next (slices,
//!    strided slices, splits, broadcasts) or spans whole buffer dimensions that stay adjacent
//!    in NHWC (H and W merged, as in a `[N, C, H * W]` reshape); a matrix product's own
//!    `[batch, rows, cols]` strides must map the same way and keep a unit stride (else the
//!    buffer is not a convolution activation: attention scores, say). Anything else (a
//!    softmax, a resize, a transposed convolution, a flatten of C with H and W) keeps the
//!    buffer NCHW.
//! 3. A convolution or pooling touching an NHWC buffer runs channels-last
//!    ([`crate::native::ops::conv::Conv::channels_last`]): a slice of channels of an NHWC buffer (C2f's
//!    split halves and concatenation slots, SPPF's pooled slots) is read or written in place
//!    as a view with a pixel pitch ([`crate::native::ir::Tensor::nhwc_pitch`]; cuDNN is given its
//!    strides), an operand that is not NHWC at all (a network input, an NCHW buffer; with
//!    [`ActivationLayout::NhwcPacked`] a slice of channels too) goes through a fresh packed
//!    NHWC buffer and a strided copy, and the filter is reordered to OHWI (cuDNN's KRSC) at
//!    load, once per filter tensor, in place only when no other step reads it (a filter
//!    shared with an NCHW convolution is copied). A matrix product takes the new strides, through a packed copy
//!    only where an operand would have no unit stride.
//! 4. A matrix product that is exactly a 1x1 convolution over packed NHWC activations
//!    becomes that convolution again ([`pointwise_gemms_as_convolutions`]), so that cuDNN can
//!    fuse its bias and activation.
//! 5. An element-wise step whose output and inputs are contiguous along different dimensions
//!    (the network input cast into NHWC, the head's results written into NCHW slots) writes a
//!    buffer in its inputs' layout instead, and a tiled transposing copy converts it.
//!
//! The host reference executor reads every operand through its strides, so a plan laid out
//! NHWC computes exactly what the NCHW plan computes (`native_reference` checks both).

use std::collections::HashMap;

use crate::backend::Precision;
use crate::native::graph::{Graph, Step, StepKind};
use crate::native::ir::error::LowerError;
use crate::native::ir::{
    BufferId, BufferKind, Tensor, TensorId, map_view, nhwc_strides, packed_strides,
};
use crate::native::ops::conv::Conv;
use crate::native::ops::gemm::Gemm;
use crate::native::ops::gemm::blas_gemm;
use crate::native::ops::{copy, elementwise::Elementwise};

/// Memory order of the activations convolutions and poolings read and write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ActivationLayout {
    /// Row-major `[N, C, H, W]`, the ONNX order: no layout work at all.
    #[default]
    Nchw,
    /// Channels-last `[N, H, W, C]` where the pass can (see the module documentation);
    /// convolutions and poolings read and write slices of channels of an NHWC buffer in
    /// place, as views with a pixel pitch ([`crate::native::ir::Tensor::nhwc_pitch`]): a C2f block's
    /// split halves and concatenation slots, SPPF's pooled slots.
    Nhwc,
    /// [`ActivationLayout::Nhwc`] with every convolution and pooling operand packed: a slice
    /// of channels goes through a packed copy. The engine's fallback when cuDNN runs no
    /// algorithm on a pitched operand.
    NhwcPacked,
}

impl ActivationLayout {
    /// The default for `precision`: NHWC where convolutions run on tensor cores (fp16, TF32),
    /// NCHW in fp32 with TF32 off (FMA kernels): on the H200, YOLOv8n at 320 ran its network
    /// (`tether bench` `model` p50) in 0.558 ms NHWC against 0.709 NCHW in fp16, 0.609 against
    /// 0.772 in TF32, but 1.408 against 1.238 in fp32 (`docs/evidence/native-h200.md`, fifth
    /// run, calls 1 and 2).
    pub fn for_precision(precision: Precision) -> ActivationLayout {
        match precision {
            Precision::Fp16 | Precision::Tf32 => ActivationLayout::Nhwc,
            Precision::Fp32 => ActivationLayout::Nchw,
        }
    }

    /// Parse `nchw`, `nhwc` or `nhwc-packed` (the `TETHER_NATIVE_LAYOUT` override).
    pub fn parse(s: &str) -> Option<ActivationLayout> {
        match s {
            "nchw" => Some(ActivationLayout::Nchw),
            "nhwc" => Some(ActivationLayout::Nhwc),
            "nhwc-packed" => Some(ActivationLayout::NhwcPacked),
            _ => None,
        }
    }
}

/// Apply `layout` to an optimised graph whose precision is final.
///
/// # Errors
/// [`LowerError::Model`] on an internal inconsistency (the rewritten graph is validated).
pub fn apply(g: &mut Graph, layout: ActivationLayout) -> Result<(), LowerError> {
    match layout {
        ActivationLayout::Nchw => Ok(()),
        ActivationLayout::Nhwc | ActivationLayout::NhwcPacked => {
            channels_last(g, layout == ActivationLayout::Nhwc);
            split_transposing_elementwise(g);
            pointwise_gemms_as_convolutions(g);
            g.validate().map_err(|e| {
                LowerError::Model(format!("internal: channels-last layout is invalid: {e}"))
            })
        }
    }
}

/// A matrix product that is a 1x1 convolution over packed NHWC activations becomes that
/// convolution again, channels-last: tract's declutter turns every 1x1 convolution into a
/// matrix product (`lower::declutter`), which cuBLAS runs as fast as cuDNN runs the
/// convolution, but only a convolution can take its bias and activation into one cuDNN
/// kernel (`crate::native::passes::fusion`; on the H200 YOLOv8n's 25 pointwise products each had a 2-3 us
/// `bias_act` launch after them, `docs/evidence/native-h200.md`, seventh run).
///
/// Exactly `c[1, K, H, W] = sum_C b[K, C] * a[1, C, H, W]`: `a` and `c` packed NHWC
/// activations (rows `m = H * W` of stride `C` / `K`, unit stride along `k = C` / `n = K`), `b`
/// a row-major `[K, C]` weight (unit stride along `k`, stride `C` along `n`), one batch. The
/// weight's `[K, C]` bytes are its OHWI filter `[K, 1, 1, C]` as they are: no reorder.
pub fn pointwise_gemms_as_convolutions(g: &mut Graph) {
    for i in 0..g.steps.len() {
        let StepKind::Gemm(m) = &g.steps[i].kind else {
            continue;
        };
        let (a, b, c) = (g.tensor(m.a), g.tensor(m.b), g.tensor(m.c));
        let (Ok([1, ch, h, w]), Ok([1, k, hc, wc])) = (
            <[usize; 4]>::try_from(a.shape.as_slice()),
            <[usize; 4]>::try_from(c.shape.as_slice()),
        ) else {
            continue;
        };
        let activation = |t: TensorId| g.buffer(g.tensor_root(t).0).kind == BufferKind::Activation;
        let fits = (hc, wc) == (h, w)
            && b.shape == [k, ch]
            && b.strides == [ch as isize, 1]
            && matches!(g.buffer(b.buffer).kind, BufferKind::Weight(_))
            && a.is_packed_nhwc()
            && c.is_packed_nhwc()
            && activation(m.a)
            && activation(m.c)
            && a.dtype == c.dtype
            && b.dtype == c.dtype
            && a.dtype.is_float()
            && (m.batch, m.m, m.n, m.k) == (1, h * w, k, ch)
            && m.sa[1..] == [ch as isize, 1]
            && m.sb[1..] == [1, ch as isize]
            && m.sc[1..] == [k as isize, 1];
        if !fits {
            continue;
        }
        let (x, y) = (m.a, m.c);
        let filter = Tensor {
            name: format!("{}.filter", b.name),
            buffer: b.buffer,
            dtype: b.dtype,
            shape: vec![k, ch, 1, 1],
            offset: b.offset,
            strides: nhwc_strides(&[k, ch, 1, 1]).to_vec(),
        };
        let w = g.add_view(filter);
        g.steps[i].kind = StepKind::Conv(Conv {
            x,
            w,
            y,
            pads: vec![0, 0],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            group: 1,
            channels_last: true,
        });
    }
}

/// Logical `[N, C, H, W]` of a buffer of `len` elements seen by the 4-D operand `t` of a
/// convolution or pooling: `t` spans whole rows and planes (`H`, `W` its own), `N` its own,
/// `C` what remains (a slice of channels of the buffer is fine).
fn buffer_dims(t: &Tensor, len: usize) -> Option<[usize; 4]> {
    let [n, _, h, w] = <[usize; 4]>::try_from(t.shape.as_slice()).ok()?;
    let spatial_packed = (w == 1 || t.strides[3] == 1)
        && (h == 1 || t.strides[2] == w as isize)
        && (t.shape[1] == 1 || t.strides[1] == (h * w) as isize);
    let plane = h.checked_mul(w)?.checked_mul(n)?;
    if !spatial_packed || plane == 0 || !len.is_multiple_of(plane) {
        return None;
    }
    let c = len / plane;
    (n == 1 || t.strides[0] == (c * h * w) as isize).then_some([n, c, h, w])
}

/// The NHWC strides and offset of a view (`shape`, `strides`, `offset`, offset in elements
/// of the root) of an NCHW buffer of logical dims `d`, or `None` when the view does not map
/// (see the module documentation and [`map_view`]). Dimensions of size 1 get stride 0.
fn remap(
    shape: &[usize],
    strides: &[isize],
    offset: usize,
    d: [usize; 4],
) -> Option<(Vec<isize>, usize)> {
    let (strides, offset) = map_view(shape, strides, offset, &d, &nhwc_strides(&d))?;
    Some((strides, usize::try_from(offset).ok()?))
}

/// Reorder an OIHW filter's bytes (`es` bytes per element) to OHWI.
fn oihw_to_ohwi(bytes: &[u8], shape: [usize; 4], es: usize) -> Vec<u8> {
    let [o, c, h, w] = shape;
    let mut out = vec![0u8; bytes.len()];
    for oi in 0..o {
        for ci in 0..c {
            for hi in 0..h {
                for wi in 0..w {
                    let from = ((oi * c + ci) * h + hi) * w + wi;
                    let to = ((oi * h + hi) * w + wi) * c + ci;
                    out[to * es..(to + 1) * es].copy_from_slice(&bytes[from * es..(from + 1) * es]);
                }
            }
        }
    }
    out
}

/// The 4-D operands (`x`, `y`) of a 2-D convolution or pooling step.
fn spatial_operands(s: &Step) -> Option<[TensorId; 2]> {
    match &s.kind {
        StepKind::Conv(c) => Some([c.x, c.y]),
        StepKind::Pool(p) => Some([p.x, p.y]),
        StepKind::Elementwise(_)
        | StepKind::Copy(_)
        | StepKind::Deconv(_)
        | StepKind::Gemm(_)
        | StepKind::Softmax(_)
        | StepKind::Reduce(_)
        | StepKind::Gather(_)
        | StepKind::Resize(_)
        | StepKind::UpdateRows(_) => None,
    }
}

/// Steps 1-3 of the module documentation; `pitched`: a convolution or pooling reads and
/// writes NHWC views with a pixel pitch in place (else through packed copies).
fn channels_last(g: &mut Graph, pitched: bool) {
    // Every tensor a step uses, with whether every such use tolerates NHWC strides.
    let mut used: HashMap<TensorId, bool> = HashMap::new();
    for s in &g.steps {
        let spatial = spatial_operands(s);
        let four_d = spatial.is_some_and(|ops| ops.iter().all(|&t| g.tensor(t).shape.len() == 4));
        for t in s.reads().into_iter().chain(std::iter::once(s.writes())) {
            let ok = match &s.kind {
                StepKind::Elementwise(_) | StepKind::Copy(_) | StepKind::Gemm(_) => true,
                StepKind::Conv(_) | StepKind::Pool(_) => {
                    four_d && spatial.is_some_and(|ops| ops.contains(&t))
                }
                // Packed NCHW operands only (transposed convolutions, kernels that walk
                // a logical axis).
                StepKind::Deconv(_)
                | StepKind::Softmax(_)
                | StepKind::Reduce(_)
                | StepKind::Gather(_)
                | StepKind::Resize(_)
                | StepKind::UpdateRows(_) => false,
            };
            let e = used.entry(t).or_insert(true);
            *e &= ok;
        }
    }
    // Candidates and their logical dims: the buffers of convolutions, poolings, and of the
    // 4-D operands of matrix products (1x1 convolutions lowered to GEMM: leaving those NCHW
    // would put a transposition into the element-wise step on either side).
    let mut dims: HashMap<BufferId, Option<[usize; 4]>> = HashMap::new();
    for s in &g.steps {
        let ops: Vec<TensorId> = match &s.kind {
            StepKind::Conv(_) | StepKind::Pool(_) => spatial_operands(s)
                .expect("a convolution or pooling")
                .to_vec(),
            StepKind::Gemm(m) => [m.a, m.b, m.c]
                .into_iter()
                .filter(|&t| g.tensor(t).shape.len() == 4)
                .collect(),
            StepKind::Elementwise(_)
            | StepKind::Copy(_)
            | StepKind::Deconv(_)
            | StepKind::Softmax(_)
            | StepKind::Reduce(_)
            | StepKind::Gather(_)
            | StepKind::Resize(_)
            | StepKind::UpdateRows(_) => continue,
        };
        for t in ops {
            let (root, off) = g.tensor_root(t);
            let buf = g.buffer(root);
            if buf.kind != BufferKind::Activation || !buf.dtype.is_float() {
                continue;
            }
            let mut view = g.tensor(t).clone();
            view.offset = off;
            let d = buffer_dims(&view, buf.len);
            let e = dims.entry(root).or_insert(d);
            if *e != d {
                *e = None;
            }
        }
    }
    // Which candidates map, with every used view's new strides and offset.
    let mut views_by_root: HashMap<BufferId, Vec<TensorId>> = HashMap::new();
    for &t in used.keys() {
        views_by_root.entry(g.tensor_root(t).0).or_default().push(t);
    }
    // A matrix product addresses its operands through its own `[batch, rows, cols]` strides
    // from the tensor's element 0: those must map too (step, operand slot 0/1/2 for a/b/c).
    let mut gemm_views: HashMap<BufferId, Vec<(usize, usize)>> = HashMap::new();
    for (i, s) in g.steps.iter().enumerate() {
        if let StepKind::Gemm(m) = &s.kind {
            for (slot, t) in [m.a, m.b, m.c].into_iter().enumerate() {
                gemm_views
                    .entry(g.tensor_root(t).0)
                    .or_default()
                    .push((i, slot));
            }
        }
    }
    let mut gemm_strides: HashMap<(usize, usize), [isize; 3]> = HashMap::new();
    let mut flipped: HashMap<BufferId, Vec<(TensorId, Vec<isize>, usize)>> = HashMap::new();
    'roots: for (&root, d) in &dims {
        let Some(d) = *d else { continue };
        let mut gemm_rewrites = Vec::new();
        for &(i, slot) in gemm_views.get(&root).map_or(&[][..], |v| v.as_slice()) {
            let StepKind::Gemm(m) = &g.steps[i].kind else {
                unreachable!("collected from a matrix product")
            };
            let (t, shape, strides) = gemm_operand(m, slot);
            let (_, off) = g.tensor_root(t);
            let Some((ns, _)) = remap(&shape, &strides, off, d) else {
                continue 'roots;
            };
            // A product that the new strides would push through packing copies (no unit
            // stride left, as attention scores `[1, heads, S, S]` would have) keeps the buffer
            // NCHW: the pass is for convolution activations.
            let mut fits = m.clone();
            *[&mut fits.sa, &mut fits.sb, &mut fits.sc][slot] = [ns[0], ns[1], ns[2]];
            if blas_gemm(&fits).is_none() {
                continue 'roots;
            }
            gemm_rewrites.push(((i, slot), [ns[0], ns[1], ns[2]]));
        }
        let mut rewrites = Vec::new();
        for &t in views_by_root.get(&root).map_or(&[][..], |v| v.as_slice()) {
            if !used[&t] {
                continue 'roots;
            }
            let (_, off) = g.tensor_root(t);
            let view = g.tensor(t);
            let Some((strides, offset)) = remap(&view.shape, &view.strides, off, d) else {
                continue 'roots;
            };
            rewrites.push((t, strides, offset));
        }
        gemm_strides.extend(gemm_rewrites);
        flipped.insert(root, rewrites);
    }
    if flipped.is_empty() {
        return;
    }
    let nhwc_roots: Vec<BufferId> = flipped.keys().copied().collect();
    for (root, rewrites) in flipped {
        for (t, strides, offset) in rewrites {
            let view = &mut g.tensors[t.0];
            view.buffer = root;
            view.strides = strides;
            view.offset = offset;
        }
    }
    log::debug!(
        "channels-last layout: {} of the convolution and pooling buffers",
        nhwc_roots.len()
    );

    // Convolutions and poolings touching an NHWC buffer run channels-last.
    let runs_nhwc = |g: &Graph, s: &Step| {
        spatial_operands(s).is_some_and(|ops| {
            ops.iter().all(|&t| g.tensor(t).shape.len() == 4)
                && ops
                    .iter()
                    .any(|&t| nhwc_roots.contains(&g.tensor_root(t).0))
        })
    };
    // Filters: each weight tensor is reordered once; in place only when every step using its
    // buffer is a channels-last convolution reading that same tensor, else into a copy (a
    // weight shared with an NCHW convolution or read by anything else keeps its OIHW bytes).
    let mut in_place: HashMap<BufferId, bool> = HashMap::new();
    for s in &g.steps {
        let cl_filter = match &s.kind {
            StepKind::Conv(c) => runs_nhwc(g, s).then_some(c.w),
            StepKind::Elementwise(_)
            | StepKind::Copy(_)
            | StepKind::Deconv(_)
            | StepKind::Pool(_)
            | StepKind::Gemm(_)
            | StepKind::Softmax(_)
            | StepKind::Reduce(_)
            | StepKind::Gather(_)
            | StepKind::Resize(_)
            | StepKind::UpdateRows(_) => None,
        };
        for t in s.reads().into_iter().chain(std::iter::once(s.writes())) {
            let b = g.tensor(t).buffer;
            if matches!(g.buffer(b).kind, BufferKind::Weight(_)) {
                let e = in_place.entry(b).or_insert(true);
                *e &= cl_filter == Some(t);
            }
        }
    }
    let mut filters: HashMap<TensorId, TensorId> = HashMap::new();
    // Matrix products over an NHWC buffer address their operands through the new strides.
    let steps = std::mem::take(&mut g.steps);
    let mut out = Vec::with_capacity(steps.len());
    for (i, mut s) in steps.into_iter().enumerate() {
        if let StepKind::Gemm(m) = &mut s.kind {
            for slot in 0..3 {
                if let Some(&strides) = gemm_strides.get(&(i, slot)) {
                    *[&mut m.sa, &mut m.sb, &mut m.sc][slot] = strides;
                }
            }
            fit_gemm(g, &mut out, s);
            continue;
        }
        let Some([x, y]) = spatial_operands(&s) else {
            out.push(s);
            continue;
        };
        if !runs_nhwc(g, &s) {
            out.push(s);
            continue;
        }
        let node = s.node.clone();
        let fresh = |g: &mut Graph, t: TensorId, what: &str| -> TensorId {
            let v = g.tensor(t).clone();
            let shape: [usize; 4] = v.shape.clone().try_into().expect("4-D");
            let b = g.add_buffer(
                format!("{node}.{what}.nhwc"),
                v.dtype,
                v.numel(),
                BufferKind::Activation,
            );
            g.add_view(Tensor {
                name: format!("{}.nhwc", v.name),
                buffer: b,
                dtype: v.dtype,
                shape: v.shape.clone(),
                offset: 0,
                strides: nhwc_strides(&shape).to_vec(),
            })
        };
        let direct = |t: &Tensor| {
            if pitched {
                t.nhwc_pitch().is_some()
            } else {
                t.is_packed_nhwc()
            }
        };
        let (mut nx, mut ny) = (x, y);
        if !direct(g.tensor(x)) {
            nx = fresh(g, x, "x");
            out.push(Step {
                node: format!("{}.to_nhwc", s.node),
                kind: StepKind::Copy(copy::Copy { src: x, dst: nx }),
            });
        }
        if !direct(g.tensor(y)) {
            ny = fresh(g, y, "y");
        }
        match &mut s.kind {
            StepKind::Conv(c) => {
                c.x = nx;
                c.y = ny;
                let w = c.w;
                let in_place = in_place.get(&g.tensor(w).buffer).copied().unwrap_or(false);
                c.w = *filters
                    .entry(w)
                    .or_insert_with(|| ohwi_filter(g, w, in_place));
                c.channels_last = true;
            }
            StepKind::Pool(p) => {
                p.x = nx;
                p.y = ny;
                p.channels_last = true;
            }
            StepKind::Elementwise(_)
            | StepKind::Copy(_)
            | StepKind::Deconv(_)
            | StepKind::Gemm(_)
            | StepKind::Softmax(_)
            | StepKind::Reduce(_)
            | StepKind::Gather(_)
            | StepKind::Resize(_)
            | StepKind::UpdateRows(_) => unreachable!("spatial_operands matched"),
        }
        let node = s.node.clone();
        out.push(s);
        if ny != y {
            out.push(Step {
                node: format!("{node}.from_nhwc"),
                kind: StepKind::Copy(copy::Copy { src: ny, dst: y }),
            });
        }
    }
    g.steps = out;
}

/// Operand `slot` (0: `a`, 1: `b`, 2: `c`) of a matrix product as the product addresses it:
/// the tensor, and the `[batch, rows, cols]` shape and strides from its element 0.
fn gemm_operand(m: &Gemm, slot: usize) -> (TensorId, [usize; 3], [isize; 3]) {
    match slot {
        0 => (m.a, [m.batch, m.m, m.k], m.sa),
        1 => (m.b, [m.batch, m.k, m.n], m.sb),
        _ => (m.c, [m.batch, m.m, m.n], m.sc),
    }
}

/// Push matrix product `s` onto `out`, first making it fit one BLAS call
/// ([`blas_gemm`]): operands whose new strides have no unit stride go through a packed
/// `[batch, rows, cols]` copy (the result through a packed buffer copied back), the
/// fewest first, as the front end does.
fn fit_gemm(g: &mut Graph, out: &mut Vec<Step>, mut s: Step) {
    let StepKind::Gemm(m) = &s.kind else {
        unreachable!("a matrix product")
    };
    if blas_gemm(m).is_some() {
        out.push(s);
        return;
    }
    let fits = |m: &Gemm, pack: [bool; 3]| {
        let mut t = m.clone();
        for (slot, &p) in pack.iter().enumerate() {
            if p {
                let (_, shape, _) = gemm_operand(m, slot);
                let packed = packed_strides(&shape);
                *[&mut t.sa, &mut t.sb, &mut t.sc][slot] = [packed[0], packed[1], packed[2]];
            }
        }
        blas_gemm(&t).is_some()
    };
    let mut choices: Vec<[bool; 3]> = (1..8u8)
        .map(|b| [b & 1 != 0, b & 2 != 0, b & 4 != 0])
        .collect();
    choices.sort_by_key(|c| c.iter().filter(|&&p| p).count());
    let pack = choices
        .into_iter()
        .find(|&c| fits(m, c))
        .expect("packed operands always fit one BLAS call");
    let mut after = None;
    for (slot, &p) in pack.iter().enumerate() {
        if !p {
            continue;
        }
        let StepKind::Gemm(m) = &s.kind else {
            unreachable!("a matrix product")
        };
        let (t, shape, strides) = gemm_operand(m, slot);
        let v = g.tensor(t).clone();
        let view = g.add_view(Tensor {
            name: format!("{}.gemm_order", v.name),
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            ..v.clone()
        });
        let packed = g.add_packed(
            format!("{}.gemm_packed", v.name),
            v.dtype,
            &shape,
            BufferKind::Activation,
        );
        let ps = packed_strides(&shape);
        let StepKind::Gemm(m) = &mut s.kind else {
            unreachable!("a matrix product")
        };
        let ps = [ps[0], ps[1], ps[2]];
        match slot {
            0 => (m.a, m.sa) = (packed, ps),
            1 => (m.b, m.sb) = (packed, ps),
            _ => (m.c, m.sc) = (packed, ps),
        }
        let node = format!("{}.gemm_pack", s.node);
        if slot == 2 {
            after = Some(Step {
                node,
                kind: StepKind::Copy(copy::Copy {
                    src: packed,
                    dst: view,
                }),
            });
        } else {
            out.push(Step {
                node,
                kind: StepKind::Copy(copy::Copy {
                    src: view,
                    dst: packed,
                }),
            });
        }
    }
    out.push(s);
    out.extend(after);
}

/// The dimension along which view `t` is contiguous (stride 1, size > 1), if any.
fn unit_dim(t: &Tensor) -> Option<usize> {
    (0..t.shape.len()).find(|&d| t.shape[d] > 1 && t.strides[d] == 1)
}

/// An element-wise step whose output and non-broadcast inputs are contiguous along different
/// dimensions (the network input cast into an NHWC buffer, the head's NHWC results written
/// into NCHW slots) reads or writes across a stride: every warp touches as many memory
/// segments as it has threads. Such a step writes a fresh buffer laid out like its inputs
/// instead (the element-wise kernel then walks both contiguously), and a copy converts it
/// (`tiled_transpose`: coalesced on both sides through a shared-memory tile).
fn split_transposing_elementwise(g: &mut Graph) {
    let steps = std::mem::take(&mut g.steps);
    let mut out = Vec::with_capacity(steps.len());
    for mut s in steps {
        let StepKind::Elementwise(Elementwise { inputs, output, .. }) = &mut s.kind else {
            out.push(s);
            continue;
        };
        let o = g.tensor(*output).clone();
        let dense: Vec<&Tensor> = inputs
            .iter()
            .map(|&t| g.tensor(t))
            .filter(|t| (0..t.shape.len()).all(|d| t.shape[d] == 1 || t.strides[d] != 0))
            .collect();
        let Some(first) = dense.first() else {
            out.push(s);
            continue;
        };
        let (ud, uo) = (unit_dim(first), unit_dim(&o));
        let agree = dense.iter().all(|t| unit_dim(t) == ud);
        if ud.is_none() || uo.is_none() || ud == uo || !agree {
            out.push(s);
            continue;
        }
        // Packed strides in the first input's memory order (its dimensions by decreasing
        // stride).
        let mut order: Vec<usize> = (0..o.shape.len()).collect();
        order.sort_by_key(|&d| std::cmp::Reverse(first.strides[d].unsigned_abs()));
        let mut strides = vec![0isize; o.shape.len()];
        let mut acc = 1isize;
        for &d in order.iter().rev() {
            strides[d] = acc;
            acc *= o.shape[d].max(1) as isize;
        }
        let b = g.add_buffer(
            format!("{}.in_input_layout", o.name),
            o.dtype,
            o.numel(),
            BufferKind::Activation,
        );
        let tmp = g.add_view(Tensor {
            name: format!("{}.in_input_layout", o.name),
            buffer: b,
            dtype: o.dtype,
            shape: o.shape.clone(),
            offset: 0,
            strides,
        });
        let dst = std::mem::replace(output, tmp);
        let node = format!("{}.transpose", s.node);
        out.push(s);
        out.push(Step {
            node,
            kind: StepKind::Copy(copy::Copy { src: tmp, dst }),
        });
    }
    g.steps = out;
}

/// An OHWI view of the convolution filter `w` (a packed OIHW view of a weight buffer): the
/// buffer's bytes reordered in place when `in_place` (every user of the buffer is a
/// channels-last convolution reading `w`; the caller reorders each tensor once) and `w` covers
/// the whole buffer, else a reordered copy in a buffer of its own.
fn ohwi_filter(g: &mut Graph, w: TensorId, in_place: bool) -> TensorId {
    let t = g.tensor(w).clone();
    let Ok(shape) = <[usize; 4]>::try_from(t.shape.as_slice()) else {
        return w;
    };
    let buf = g.buffer(t.buffer).clone();
    let BufferKind::Weight(bytes) = &buf.kind else {
        return w;
    };
    let es = t.dtype.size();
    let n = t.numel();
    let start = t.offset * es;
    let reordered = oihw_to_ohwi(&bytes[start..start + n * es], shape, es);
    let strides = nhwc_strides(&shape).to_vec();
    if !in_place || t.offset != 0 || n != buf.len {
        let b = g.add_buffer(
            format!("{}.ohwi", buf.name),
            t.dtype,
            n,
            BufferKind::Weight(reordered),
        );
        return g.add_view(Tensor {
            name: format!("{}.ohwi", t.name),
            buffer: b,
            dtype: t.dtype,
            shape: t.shape,
            offset: 0,
            strides,
        });
    }
    g.buffers[t.buffer.0].kind = BufferKind::Weight(reordered);
    g.tensors[w.0].strides = strides;
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_of_an_nchw_buffer_map_onto_nhwc() {
        let d = [1, 6, 4, 5];
        // The whole buffer.
        assert_eq!(
            remap(&[1, 6, 4, 5], &[120, 20, 5, 1], 0, d),
            Some((vec![0, 1, 30, 6], 0))
        );
        // Channels 2..5: offset 2 planes in NCHW, 2 elements in NHWC.
        assert_eq!(
            remap(&[1, 3, 4, 5], &[120, 20, 5, 1], 40, d),
            Some((vec![0, 1, 30, 6], 2))
        );
        // `[N, C, H * W]`: H and W merge in NHWC too.
        assert_eq!(
            remap(&[1, 6, 20], &[120, 20, 1], 0, d),
            Some((vec![0, 1, 6], 0))
        );
        // Nearest 2x upsampling source `[N, C, H, 2, W, 2]` (stride-0 repeats) and a split of
        // H into (2, 2).
        assert_eq!(
            remap(&[1, 6, 4, 2, 5, 2], &[120, 20, 5, 0, 1, 0], 0, d),
            Some((vec![0, 1, 30, 0, 6, 0], 0))
        );
        assert_eq!(
            remap(&[1, 6, 2, 2, 5], &[120, 20, 10, 5, 1], 0, d),
            Some((vec![0, 1, 60, 30, 6], 0))
        );
        // Every other row (a strided slice), from row 1.
        assert_eq!(
            remap(&[1, 6, 2, 5], &[120, 20, 10, 1], 5, d),
            Some((vec![0, 1, 60, 6], 30))
        );
        // C merged with H and W (a flatten) is not adjacent in NHWC.
        assert_eq!(remap(&[1, 120], &[120, 1], 0, d), None);
        // A row that runs past the plane's end carries: no mapping.
        assert_eq!(remap(&[1, 6, 2, 5], &[120, 20, 5, 1], 15, d), None);
        // Transposed H and W still map (each dimension steps along one buffer dimension).
        assert_eq!(
            remap(&[1, 6, 5, 4], &[120, 20, 1, 5], 0, d),
            Some((vec![0, 1, 6, 30], 0))
        );
    }

    #[test]
    fn remapped_views_address_the_same_elements() {
        // Every element of every view above lands where the NHWC copy of the buffer holds it.
        let d = [2, 3, 4, 5];
        let p = packed_strides(&d);
        let q = nhwc_strides(&d);
        let nhwc_of = |lin: usize| {
            let mut c = [0usize; 4];
            let mut r = lin;
            for j in 0..4 {
                c[j] = r / p[j] as usize;
                r %= p[j] as usize;
            }
            (0..4).map(|j| c[j] * q[j] as usize).sum::<usize>()
        };
        let cases: [(&[usize], &[isize], usize); 4] = [
            (&[2, 3, 4, 5], &[60, 20, 5, 1], 0),
            (&[2, 2, 20], &[60, 20, 1], 20),
            (&[2, 3, 2, 5], &[60, 20, 10, 1], 5),
            (&[3, 2, 4, 5], &[20, 60, 5, 1], 0),
        ];
        for (shape, strides, offset) in cases {
            let (ns, no) = remap(shape, strides, offset, d).expect("maps");
            let rank = shape.len();
            let n: usize = shape.iter().product();
            for lin in 0..n {
                let (mut r, mut old, mut new) = (lin, offset as isize, no as isize);
                for k in (0..rank).rev() {
                    let i = (r % shape[k]) as isize;
                    r /= shape[k];
                    old += i * strides[k];
                    new += i * ns[k];
                }
                assert_eq!(
                    new as usize,
                    nhwc_of(old as usize),
                    "{shape:?} element {lin}"
                );
            }
        }
    }

    /// One filter read by a convolution that goes channels-last and by one that stays NCHW
    /// (network input in, network output out): the channels-last one gets a reordered copy,
    /// the NCHW one keeps the OIHW bytes, and both compute what the NCHW plan computes.
    #[test]
    fn a_filter_shared_with_an_nchw_convolution_is_copied_not_reordered() {
        use crate::native::exec::reference;
        use crate::native::ir::ElemType;
        use crate::native::ir::program::Program;
        use crate::native::ops::conv::Conv;
        use crate::native::plan::memory::MemoryPlan;
        let f32s = |n: usize, seed: u32| -> Vec<u8> {
            (0..n as u32)
                .flat_map(|i| {
                    let v = ((i.wrapping_mul(2_654_435_761) ^ seed) >> 20) as f32 / 4096.0 - 0.5;
                    v.to_ne_bytes()
                })
                .collect()
        };
        let shape = [1usize, 4, 6, 6];
        let mut g = Graph::default();
        let x = g.add_packed("x", ElemType::F32, &shape, BufferKind::Input(0));
        let a = g.add_packed("a", ElemType::F32, &shape, BufferKind::Activation);
        let b = g.add_packed("b", ElemType::F32, &shape, BufferKind::Activation);
        let w = g.add_packed(
            "w",
            ElemType::F32,
            &[4, 4, 3, 3],
            BufferKind::Weight(f32s(144, 7)),
        );
        let out0 = g.add_packed("out0", ElemType::F32, &shape, BufferKind::Output(0));
        let out1 = g.add_packed("out1", ElemType::F32, &shape, BufferKind::Output(1));
        let conv = |x, y| Conv {
            x,
            w,
            y,
            pads: vec![1, 1],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            group: 1,
            channels_last: false,
        };
        let step = |node: &str, kind| Step {
            node: node.into(),
            kind,
        };
        g.steps = vec![
            step(
                "relu",
                StepKind::Elementwise(Elementwise {
                    inputs: vec![x],
                    output: a,
                    program: Program::unary(crate::native::ir::program::EwOp::LeakyRelu, 0.1),
                }),
            ),
            step("conv_nhwc", StepKind::Conv(conv(a, b))),
            step("out", StepKind::Copy(copy::Copy { src: b, dst: out0 })),
            step("conv_nchw", StepKind::Conv(conv(x, out1))),
        ];
        for (i, name) in [(0, "x"), (1, "out0"), (2, "out1")] {
            let io = crate::native::graph::Io {
                name: name.into(),
                tensor: [x, out0, out1][i],
            };
            if i == 0 {
                g.inputs.push(io);
            } else {
                g.outputs.push(io);
            }
        }
        g.validate().unwrap();
        let input = f32s(144, 3);
        let run = |g: &Graph| {
            let plan = MemoryPlan::new(g).unwrap();
            reference::run(g, &plan, &[&input]).unwrap()
        };
        let want = run(&g);
        let mut nhwc = g.clone();
        apply(&mut nhwc, ActivationLayout::Nhwc).unwrap();
        let convs: Vec<&Conv> = nhwc
            .steps
            .iter()
            .filter_map(|s| match &s.kind {
                StepKind::Conv(c) => Some(c),
                _ => None,
            })
            .collect();
        assert_eq!(
            convs.iter().map(|c| c.channels_last).collect::<Vec<_>>(),
            [true, false]
        );
        assert_ne!(convs[0].w, w, "the channels-last convolution reads a copy");
        assert_eq!(convs[1].w, w);
        assert_eq!(
            nhwc.buffer(nhwc.tensor(w).buffer),
            g.buffer(g.tensor(w).buffer)
        );
        assert_eq!(run(&nhwc), want);
    }

    #[test]
    fn filters_reorder_to_ohwi() {
        // [O=2, C=3, kH=1, kW=2], one byte per element: value = OIHW index.
        let bytes: Vec<u8> = (0..12).collect();
        let r = oihw_to_ohwi(&bytes, [2, 3, 1, 2], 1);
        // OHWI[o][0][w][c] = OIHW[o][c][0][w].
        assert_eq!(r, vec![0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11]);
    }
}
