//! The host reference executor of the IR: plain loops per step, over host memory laid out
//! exactly as the GPU executor lays out device memory (the same [`MemoryPlan`] offsets, the
//! same views, the same placements).
//!
//! It exists to prove, without a GPU, that lowering, shapes, strides, aliasing and the
//! memory plan are right: the tests run real networks through it and compare with the tract
//! CPU engine. To catch planner bugs it poisons memory: the workspace and the outputs start
//! as all-ones bytes (a NaN in every float type), and every activation buffer is poisoned
//! again right after its last use, so a step that reads memory another buffer owns (or a
//! buffer after its lifetime) produces NaN instead of a plausible stale value.
//!
//! Not fast: convolution is a direct loop (a few seconds for YOLOv8n at 640).

use crate::native::graph::{Graph, StepKind};
use crate::native::ir::program::{load_f32, store_f32};
use crate::native::ir::{BufferKind, ElemType, TensorId};
use crate::native::ops::conv::Conv;
use crate::native::ops::gather::Gather;
use crate::native::ops::gemm::Gemm;
use crate::native::ops::pool::{Pool, PoolKind};
use crate::native::ops::reduce::{Reduce, ReduceKind};
use crate::native::ops::softmax::Softmax;
use crate::native::ops::{copy, deconv::Deconv, elementwise::Elementwise};
use crate::native::plan::memory::{MemoryPlan, Region};

/// Host memory for one run.
struct Memory<'a> {
    workspace: Vec<u8>,
    weights: Vec<u8>,
    inputs: &'a [&'a [u8]],
    outputs: Vec<Vec<u8>>,
}

impl Memory<'_> {
    fn bytes(&self, r: Region) -> &[u8] {
        match r {
            Region::Workspace => &self.workspace,
            Region::Weights => &self.weights,
            Region::Input(i) => self.inputs[i],
            Region::Output(i) => &self.outputs[i],
        }
    }
    fn bytes_mut(&mut self, r: Region) -> &mut [u8] {
        match r {
            Region::Workspace => &mut self.workspace,
            Region::Output(i) => &mut self.outputs[i],
            Region::Weights | Region::Input(_) => {
                panic!("the reference executor never writes inputs or weights")
            }
        }
    }
}

/// Visit every element of a view in row-major order of its shape: `f(linear index, element
/// offset from the tensor's element 0)`.
pub(crate) fn for_each_offset(shape: &[usize], strides: &[isize], mut f: impl FnMut(usize, isize)) {
    let n: usize = shape.iter().product();
    if n == 0 {
        return;
    }
    let rank = shape.len();
    let mut idx = vec![0usize; rank];
    let mut off = 0isize;
    for lin in 0..n {
        f(lin, off);
        for d in (0..rank).rev() {
            idx[d] += 1;
            off += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            off -= strides[d] * shape[d] as isize;
            idx[d] = 0;
        }
    }
}

struct Exec<'g, 'm> {
    graph: &'g Graph,
    plan: &'g MemoryPlan,
    mem: Memory<'m>,
}

impl Exec<'_, '_> {
    fn read(&self, t: TensorId) -> Vec<f32> {
        let tensor = self.graph.tensor(t);
        let (r, base) = self.plan.locate(self.graph, t);
        let bytes = self.mem.bytes(r);
        let es = tensor.dtype.size();
        let mut out = vec![0f32; tensor.numel()];
        for_each_offset(&tensor.shape, &tensor.strides, |i, off| {
            let at = (base as isize + off * es as isize) as usize;
            out[i] = load_f32(tensor.dtype, &bytes[at..at + es]);
        });
        out
    }

    fn write(&mut self, t: TensorId, values: &[f32]) {
        let tensor = self.graph.tensor(t).clone();
        let (r, base) = self.plan.locate(self.graph, t);
        let es = tensor.dtype.size();
        let bytes = self.mem.bytes_mut(r);
        for_each_offset(&tensor.shape, &tensor.strides, |i, off| {
            let at = (base as isize + off * es as isize) as usize;
            store_f32(values[i], tensor.dtype, &mut bytes[at..at + es]);
        });
    }

    fn copy(&mut self, src: TensorId, dst: TensorId) {
        let (s, d) = (
            self.graph.tensor(src).clone(),
            self.graph.tensor(dst).clone(),
        );
        let es = s.dtype.size();
        let (sr, sbase) = self.plan.locate(self.graph, src);
        let mut raw = vec![0u8; s.numel() * es];
        {
            let bytes = self.mem.bytes(sr);
            for_each_offset(&s.shape, &s.strides, |i, off| {
                let at = (sbase as isize + off * es as isize) as usize;
                raw[i * es..(i + 1) * es].copy_from_slice(&bytes[at..at + es]);
            });
        }
        let (dr, dbase) = self.plan.locate(self.graph, dst);
        let bytes = self.mem.bytes_mut(dr);
        for_each_offset(&d.shape, &d.strides, |i, off| {
            let at = (dbase as isize + off * es as isize) as usize;
            bytes[at..at + es].copy_from_slice(&raw[i * es..(i + 1) * es]);
        });
    }

    fn poison_dead(&mut self, step: usize) {
        for (b, live) in self.plan.live.iter().enumerate() {
            let Some((_, last)) = *live else { continue };
            if last != step {
                continue;
            }
            let buf = &self.graph.buffers[b];
            if let (BufferKind::Activation, Some(off)) = (&buf.kind, self.plan.activation_offset[b])
            {
                let n = buf.len * buf.dtype.size();
                self.mem.workspace[off..off + n].fill(0xff);
            }
        }
    }
}

/// Run `graph` laid out by `plan` on host memory. `inputs[i]` holds input `i` (packed,
/// native endianness); returns every output, packed.
///
/// # Errors
/// A description when an input has the wrong size.
pub fn run(graph: &Graph, plan: &MemoryPlan, inputs: &[&[u8]]) -> Result<Vec<Vec<u8>>, String> {
    if inputs.len() != graph.inputs.len() {
        return Err(format!(
            "{} inputs given, the network has {}",
            inputs.len(),
            graph.inputs.len()
        ));
    }
    for (i, io) in graph.inputs.iter().enumerate() {
        let t = graph.tensor(io.tensor);
        let want = t.numel() * t.dtype.size();
        if inputs[i].len() != want {
            return Err(format!(
                "input `{}` holds {} bytes, needs {want}",
                io.name,
                inputs[i].len()
            ));
        }
    }
    let outputs = graph
        .outputs
        .iter()
        .map(|io| {
            let (root, _) = graph.root(graph.tensor(io.tensor).buffer);
            let b = graph.buffer(root);
            vec![0xffu8; b.len * b.dtype.size()]
        })
        .collect();
    let mut ex = Exec {
        graph,
        plan,
        mem: Memory {
            workspace: vec![0xff; plan.activation_bytes],
            weights: plan.weight_blob(graph),
            inputs,
            outputs,
        },
    };
    for (i, step) in graph.steps.iter().enumerate() {
        match &step.kind {
            StepKind::Elementwise(Elementwise {
                inputs,
                output,
                program,
            }) => {
                let vals: Vec<Vec<f32>> = inputs.iter().map(|&t| ex.read(t)).collect();
                let n = graph.tensor(*output).numel();
                let mut out = vec![0f32; n];
                let mut args = vec![0f32; vals.len()];
                for (e, o) in out.iter_mut().enumerate() {
                    for (a, v) in args.iter_mut().zip(&vals) {
                        *a = v[e];
                    }
                    *o = program.eval(&args);
                }
                ex.write(*output, &out);
            }
            StepKind::Copy(copy::Copy { src, dst }) => ex.copy(*src, *dst),
            StepKind::Conv(c) => {
                let y = conv(&ex, c);
                ex.write(c.y, &y);
            }
            StepKind::Deconv(Deconv(c)) => {
                let (xt, wt, yt) = (graph.tensor(c.x), graph.tensor(c.w), graph.tensor(c.y));
                let y = deconv_compute(
                    &ex.read(c.x),
                    &ex.read(c.w),
                    &xt.shape,
                    &wt.shape,
                    &yt.shape,
                    c,
                );
                ex.write(c.y, &y);
            }
            StepKind::Pool(p) => {
                let y = pool(&ex, p);
                ex.write(p.y, &y);
            }
            StepKind::Gemm(g) => gemm(&mut ex, g),
            StepKind::Softmax(s) => {
                let y = softmax(&ex, s);
                ex.write(s.y, &y);
            }
            StepKind::Reduce(r) => {
                let y = reduce(&ex, r);
                ex.write(r.y, &y);
            }
            StepKind::Gather(g) => gather(&mut ex, g)?,
            StepKind::Resize(r) => {
                let tables = |t: TensorId| ex.read(t);
                let (iy, wy, ix, wx) = (tables(r.iy), tables(r.wy), tables(r.ix), tables(r.wx));
                let y = resize_compute(&ex.read(r.x), r, &iy, &wy, &ix, &wx);
                ex.write(r.y, &y);
            }
        }
        ex.poison_dead(i);
    }
    Ok(ex.mem.outputs)
}

/// Direct convolution over packed NCHW (1-D or 2-D), fp32 accumulation in input-channel
/// order.
fn conv(ex: &Exec<'_, '_>, c: &Conv) -> Vec<f32> {
    let g = ex.graph;
    let (xt, wt, yt) = (g.tensor(c.x), g.tensor(c.w), g.tensor(c.y));
    let x = ex.read(c.x);
    let w = ex.read(c.w);
    conv_compute(&x, &w, &xt.shape, &wt.shape, &yt.shape, c)
}

/// Resampling with the tables of `r` (indices read as f32, exact for any realistic size):
/// rows first, then columns, zero-weight taps skipped, as tract resamples.
pub fn resize_compute(
    x: &[f32],
    r: &crate::native::ops::resize::Resize,
    iy: &[f32],
    wy: &[f32],
    ix: &[f32],
    wx: &[f32],
) -> Vec<f32> {
    let mut y = vec![0f32; r.outer * r.h_out * r.w_out];
    for o in 0..r.outer {
        for row in 0..r.h_out {
            for col in 0..r.w_out {
                let mut acc = 0f32;
                for b in 0..r.win_w {
                    let wb = wx[col * r.win_w + b];
                    if wb == 0.0 {
                        continue;
                    }
                    let c = ix[col * r.win_w + b] as usize;
                    let mut t = 0f32;
                    for a in 0..r.win_h {
                        let wa = wy[row * r.win_h + a];
                        if wa == 0.0 {
                            continue;
                        }
                        let rr = iy[row * r.win_h + a] as usize;
                        t += wa * x[(o * r.h_in + rr) * r.w_in + c];
                    }
                    acc += wb * t;
                }
                y[(o * r.h_out + row) * r.w_out + col] = acc;
            }
        }
    }
    y
}

/// Direct convolution of packed `x` (`xs`) with packed `w` (`ws`) into packed `ys`.
pub fn conv_compute(
    x: &[f32],
    w: &[f32],
    xs: &[usize],
    ws: &[usize],
    ys: &[usize],
    c: &Conv,
) -> Vec<f32> {
    let (xt_shape, wt_shape, yt_shape) = (xs, ws, ys);
    let spatial = xt_shape.len() - 2;
    // View 1-D as 2-D with H = 1.
    let dims = |s: &[usize]| -> (usize, usize, usize, usize) {
        if spatial == 1 {
            (s[0], s[1], 1, s[2])
        } else {
            (s[0], s[1], s[2], s[3])
        }
    };
    let (n, ci, h, wd) = dims(xt_shape);
    let (_, co, oh, ow) = dims(yt_shape);
    let (kh, kw) = if spatial == 1 {
        (1, wt_shape[2])
    } else {
        (wt_shape[2], wt_shape[3])
    };
    let two = |v: &[usize], one: usize| -> (usize, usize) {
        if spatial == 1 {
            (one, v[0])
        } else {
            (v[0], v[1])
        }
    };
    let (ph, pw) = two(&c.pads, 0);
    let (sh, sw) = two(&c.strides, 1);
    let (dh, dw) = two(&c.dilations, 1);
    let cig = ci / c.group;
    let cog = co / c.group;
    let mut y = vec![0f32; n * co * oh * ow];
    for b in 0..n {
        for o in 0..co {
            let grp = o / cog;
            let acc = &mut y[(b * co + o) * oh * ow..(b * co + o + 1) * oh * ow];
            for i in 0..cig {
                let ic = grp * cig + i;
                let xp = &x[(b * ci + ic) * h * wd..(b * ci + ic + 1) * h * wd];
                for r in 0..kh {
                    for s in 0..kw {
                        let wv = w[((o * cig + i) * kh + r) * kw + s];
                        for yy in 0..oh {
                            let iy = (yy * sh + r * dh) as isize - ph as isize;
                            if iy < 0 || iy >= h as isize {
                                continue;
                            }
                            let row = &xp[iy as usize * wd..(iy as usize + 1) * wd];
                            let out = &mut acc[yy * ow..(yy + 1) * ow];
                            for (xx, o) in out.iter_mut().enumerate() {
                                let ix = (xx * sw + s * dw) as isize - pw as isize;
                                if ix >= 0 && ix < wd as isize {
                                    *o += wv * row[ix as usize];
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    y
}

/// Transposed convolution (ONNX `ConvTranspose`) of packed `x` `[N, Ci, H, W]` with the
/// forward filter `w` `[Ci, Co / g, kH, kW]` into packed `y` `[N, Co, oH, oW]`:
/// `y[n, g*Cog + o, iy*s + r*d - p, ...] += x[n, g*Cig + i, iy, ...] * w[g*Cig + i, o, r, ...]`.
pub fn deconv_compute(
    x: &[f32],
    w: &[f32],
    xs: &[usize],
    ws: &[usize],
    ys: &[usize],
    c: &Conv,
) -> Vec<f32> {
    let spatial = xs.len() - 2;
    let dims = |s: &[usize]| -> (usize, usize, usize, usize) {
        if spatial == 1 {
            (s[0], s[1], 1, s[2])
        } else {
            (s[0], s[1], s[2], s[3])
        }
    };
    let (n, ci, h, wd) = dims(xs);
    let (_, co, oh, ow) = dims(ys);
    let (kh, kw) = if spatial == 1 {
        (1, ws[2])
    } else {
        (ws[2], ws[3])
    };
    let two = |v: &[usize], one: usize| -> (usize, usize) {
        if spatial == 1 {
            (one, v[0])
        } else {
            (v[0], v[1])
        }
    };
    let (ph, pw) = two(&c.pads, 0);
    let (sh, sw) = two(&c.strides, 1);
    let (dh, dw) = two(&c.dilations, 1);
    let (cig, cog) = (ci / c.group, co / c.group);
    let mut y = vec![0f32; n * co * oh * ow];
    for b in 0..n {
        for ic in 0..ci {
            let grp = ic / cig;
            for o in 0..cog {
                let oc = grp * cog + o;
                for r in 0..kh {
                    for s in 0..kw {
                        let wv = w[((ic * cog + o) * kh + r) * kw + s];
                        for iy in 0..h {
                            let oy = (iy * sh + r * dh) as isize - ph as isize;
                            if oy < 0 || oy >= oh as isize {
                                continue;
                            }
                            for ix in 0..wd {
                                let ox = (ix * sw + s * dw) as isize - pw as isize;
                                if ox < 0 || ox >= ow as isize {
                                    continue;
                                }
                                y[((b * co + oc) * oh + oy as usize) * ow + ox as usize] +=
                                    wv * x[((b * ci + ic) * h + iy) * wd + ix];
                            }
                        }
                    }
                }
            }
        }
    }
    y
}

fn pool(ex: &Exec<'_, '_>, p: &Pool) -> Vec<f32> {
    let g = ex.graph;
    let (xt, yt) = (g.tensor(p.x), g.tensor(p.y));
    let x = ex.read(p.x);
    pool_compute(&x, &xt.shape, &yt.shape, p)
}

/// Pooling of packed `x` (`xs`) into packed `ys`.
pub fn pool_compute(x: &[f32], xs: &[usize], ys: &[usize], p: &Pool) -> Vec<f32> {
    let spatial = xs.len() - 2;
    let get = |s: &[usize]| -> (usize, usize, usize) {
        if spatial == 1 {
            (s[0] * s[1], 1, s[2])
        } else {
            (s[0] * s[1], s[2], s[3])
        }
    };
    let (planes, h, w) = get(xs);
    let (_, oh, ow) = get(ys);
    let two = |v: &[usize], one: usize| -> (usize, usize) {
        if spatial == 1 {
            (one, v[0])
        } else {
            (v[0], v[1])
        }
    };
    let (kh, kw) = two(&p.kernel, 1);
    let (ph, pw) = two(&p.pads, 0);
    let (sh, sw) = two(&p.strides, 1);
    let mut y = vec![0f32; planes * oh * ow];
    for pl in 0..planes {
        for yy in 0..oh {
            for xx in 0..ow {
                let mut acc = if p.kind == PoolKind::Max {
                    f32::NEG_INFINITY
                } else {
                    0.0
                };
                let mut count = 0usize;
                for r in 0..kh {
                    let iy = (yy * sh + r) as isize - ph as isize;
                    for s in 0..kw {
                        let ix = (xx * sw + s) as isize - pw as isize;
                        if iy < 0 || iy >= h as isize || ix < 0 || ix >= w as isize {
                            continue;
                        }
                        let v = x[pl * h * w + iy as usize * w + ix as usize];
                        count += 1;
                        if p.kind == PoolKind::Max {
                            acc = acc.max(v);
                        } else {
                            acc += v;
                        }
                    }
                }
                y[(pl * oh + yy) * ow + xx] = match p.kind {
                    PoolKind::Max => acc,
                    PoolKind::AvgIncludePad => acc / (kh * kw) as f32,
                    PoolKind::AvgExcludePad => acc / count.max(1) as f32,
                };
            }
        }
    }
    y
}

/// Batched matrix product through the operands' own strides (fp32 accumulation in `k`
/// order), written through `c`'s strides.
fn gemm(ex: &mut Exec<'_, '_>, g: &Gemm) {
    let load = |ex: &Exec<'_, '_>, t: TensorId, off: isize| -> f32 {
        let (r, base) = ex.plan.locate(ex.graph, t);
        let dt = ex.graph.tensor(t).dtype;
        let at = (base as isize + off * dt.size() as isize) as usize;
        load_f32(dt, &ex.mem.bytes(r)[at..at + dt.size()])
    };
    let mut c = vec![0f32; g.batch * g.m * g.n];
    for bt in 0..g.batch {
        for i in 0..g.m {
            for j in 0..g.n {
                let mut acc = 0f32;
                for k in 0..g.k {
                    let ia = bt as isize * g.sa[0] + i as isize * g.sa[1] + k as isize * g.sa[2];
                    let ib = bt as isize * g.sb[0] + k as isize * g.sb[1] + j as isize * g.sb[2];
                    acc += load(ex, g.a, ia) * load(ex, g.b, ib);
                }
                c[(bt * g.m + i) * g.n + j] = acc;
            }
        }
    }
    let (r, base) = ex.plan.locate(ex.graph, g.c);
    let dt = ex.graph.tensor(g.c).dtype;
    let es = dt.size() as isize;
    let bytes = ex.mem.bytes_mut(r);
    for bt in 0..g.batch {
        for i in 0..g.m {
            for j in 0..g.n {
                let off = bt as isize * g.sc[0] + i as isize * g.sc[1] + j as isize * g.sc[2];
                let at = (base as isize + off * es) as usize;
                store_f32(
                    c[(bt * g.m + i) * g.n + j],
                    dt,
                    &mut bytes[at..at + es as usize],
                );
            }
        }
    }
}

fn softmax(ex: &Exec<'_, '_>, s: &Softmax) -> Vec<f32> {
    let x = ex.read(s.x);
    let mut y = vec![0f32; x.len()];
    for o in 0..s.outer {
        for i in 0..s.inner {
            let at = |k: usize| (o * s.n + k) * s.inner + i;
            let mut max = f32::NEG_INFINITY;
            for k in 0..s.n {
                max = max.max(x[at(k)]);
            }
            let mut sum = 0f32;
            for k in 0..s.n {
                sum += (x[at(k)] - max).exp();
            }
            for k in 0..s.n {
                y[at(k)] = if s.log {
                    x[at(k)] - max - sum.ln()
                } else {
                    (x[at(k)] - max).exp() / sum
                };
            }
        }
    }
    y
}

fn reduce(ex: &Exec<'_, '_>, r: &Reduce) -> Vec<f32> {
    let x = ex.read(r.x);
    let mut y = vec![0f32; r.outer * r.inner];
    for o in 0..r.outer {
        for i in 0..r.inner {
            let vals = (0..r.n).map(|k| x[(o * r.n + k) * r.inner + i]);
            y[o * r.inner + i] = match r.kind {
                ReduceKind::Sum => vals.sum(),
                ReduceKind::MeanOfSquares => vals.map(|v| v * v).sum::<f32>() / r.n as f32,
                ReduceKind::Max => vals.fold(f32::NEG_INFINITY, f32::max),
                ReduceKind::Min => vals.fold(f32::INFINITY, f32::min),
                ReduceKind::Prod => vals.product(),
            };
        }
    }
    y
}

fn gather(ex: &mut Exec<'_, '_>, g: &Gather) -> Result<(), String> {
    let data = ex.graph.tensor(g.data).clone();
    let idx_t = ex.graph.tensor(g.indices).clone();
    let es = data.dtype.size();
    let (ir, ibase) = ex.plan.locate(ex.graph, g.indices);
    let idx: Vec<i64> = {
        let bytes = ex.mem.bytes(ir);
        (0..g.count)
            .map(|k| match idx_t.dtype {
                ElemType::I64 => i64::from_ne_bytes(
                    bytes[ibase + 8 * k..ibase + 8 * k + 8]
                        .try_into()
                        .expect("8 bytes"),
                ),
                _ => i32::from_ne_bytes(
                    bytes[ibase + 4 * k..ibase + 4 * k + 4]
                        .try_into()
                        .expect("4 bytes"),
                ) as i64,
            })
            .collect()
    };
    let (dr, dbase) = ex.plan.locate(ex.graph, g.data);
    let mut out = vec![0u8; g.outer * g.count * g.inner * es];
    {
        let bytes = ex.mem.bytes(dr);
        for o in 0..g.outer {
            for (k, &ix) in idx.iter().enumerate() {
                let ix = if ix < 0 { ix + g.n as i64 } else { ix };
                if ix < 0 || ix >= g.n as i64 {
                    return Err(format!(
                        "gather index {ix} out of range 0..{} (the kernel clamps)",
                        g.n
                    ));
                }
                let src = dbase + ((o * g.n + ix as usize) * g.inner) * es;
                let dst = ((o * g.count + k) * g.inner) * es;
                out[dst..dst + g.inner * es].copy_from_slice(&bytes[src..src + g.inner * es]);
            }
        }
    }
    let (yr, ybase) = ex.plan.locate(ex.graph, g.y);
    ex.mem.bytes_mut(yr)[ybase..ybase + out.len()].copy_from_slice(&out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_walk_a_transposed_view() {
        let mut seen = Vec::new();
        for_each_offset(&[2, 3], &[1, 2], |i, off| seen.push((i, off)));
        assert_eq!(seen, vec![(0, 0), (1, 2), (2, 4), (3, 1), (4, 3), (5, 5)]);
    }
}
