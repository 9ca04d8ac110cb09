//! Host emulation of the GPU executor: the launch list the executor enqueues
//! ([`crate::native::exec::launch::build`], with host addresses standing in for device addresses) run by a
//! line-for-line host transcription of each kernel of `runtime/kernels/native.cu`, and by
//! plain loops for the cuDNN and cuBLAS calls (convolution from the IR step, BLAS from the
//! exact column-major arguments the executor passes).
//!
//! This is what proves, without a GPU, the GPU-only half of the engine: workspace layout,
//! address resolution, dimension collapsing, kernel parameter structs (strides, element
//! types, program encoding), the copy/memcpy decision and the BLAS argument mapping. Only
//! the CUDA code itself and the libraries' own arithmetic remain for the GPU run.

use crate::native::Compiled;
use crate::native::exec::kernels::{
    BiasActParams, CopyParams, EwParams, GatherParams, ReduceParams, ResizeParams, SoftmaxParams,
    TransposeParams,
};
use crate::native::exec::launch::{self, Bases, ConvChoice, Launch, Layout};
use crate::native::exec::reference::{conv_compute, deconv_compute, for_each_offset, pool_compute};
use crate::native::graph::StepKind;
use crate::native::ir::program::{EwOp, apply, load_f32, store_f32};
use crate::native::ir::{ElemType, Tensor};
use crate::native::ops::deconv::Deconv;
use crate::native::ops::gemm::BlasGemm;

/// 8-byte aligned host memory.
struct Mem(Vec<u64>);

impl Mem {
    fn new(bytes: usize, fill: u8) -> Mem {
        Mem(vec![
            u64::from_ne_bytes([fill; 8]);
            bytes.div_ceil(8).max(1)
        ])
    }
    fn addr(&self) -> u64 {
        self.0.as_ptr() as u64
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: the u64 storage viewed as bytes, same lifetime.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr() as *const u8, self.0.len() * 8) }
    }
}

/// Every region of the emulated device, to check that each access stays inside one.
struct Regions(Vec<(u64, u64)>);

impl Regions {
    fn check(&self, addr: u64, len: usize) -> Result<(), String> {
        let end = addr + len as u64;
        if self.0.iter().any(|&(a, b)| addr >= a && end <= b) {
            Ok(())
        } else {
            Err(format!("access {addr:#x}..{end:#x} outside every region"))
        }
    }
}

fn load(r: &Regions, base: u64, index: i64, dtype: u32) -> Result<f32, String> {
    let dt = ElemType::from_code(dtype).ok_or_else(|| format!("dtype code {dtype}"))?;
    let es = dt.size();
    let at = (base as i64 + index * es as i64) as u64;
    r.check(at, es)?;
    // SAFETY: checked inside a live region.
    let b = unsafe { std::slice::from_raw_parts(at as *const u8, es) };
    Ok(load_f32(dt, b))
}

fn store(r: &Regions, base: u64, index: i64, dtype: u32, v: f32) -> Result<(), String> {
    let dt = ElemType::from_code(dtype).ok_or_else(|| format!("dtype code {dtype}"))?;
    let es = dt.size();
    let at = (base as i64 + index * es as i64) as u64;
    r.check(at, es)?;
    // SAFETY: checked inside a live region; no other reference to it is alive.
    let b = unsafe { std::slice::from_raw_parts_mut(at as *mut u8, es) };
    store_f32(v, dt, b);
    Ok(())
}

/// `bias_act`, transcribed: `y = act(x [+ b[c]]) [+ r]` over `[outer, C, inner]` views; with
/// flag 4, four consecutive elements per thread through aligned vector accesses.
fn bias_act(r: &Regions, p: &BiasActParams) -> Result<(), String> {
    let at = |o: u32, c: u32, j: u32, cs: u32, os: u32| {
        i64::from(o) * i64::from(os) + i64::from(c) * i64::from(cs) + i64::from(j)
    };
    let one = |a: f32, c: u32| -> Result<f32, String> {
        let mut a = a;
        if p.flags & 1 != 0 {
            a += load(r, p.b, i64::from(c), p.b_dtype)?;
        }
        Ok(match p.act {
            1 => apply(EwOp::Silu, a, 0.0, 0.0, 0.0),
            2 => apply(EwOp::Sigmoid, a, 0.0, 0.0, 0.0),
            _ => a,
        })
    };
    if p.flags & 4 != 0 {
        // A vector access faults on the GPU unless aligned to its size.
        let aligned = |base: u64, index: i64, dtype: u32| {
            let es = if dtype == 1 { 2 } else { 4 };
            let a = base as i64 + index * es;
            if a % (4 * es) == 0 {
                Ok(())
            } else {
                Err(format!("misaligned 4-element access at {a:#x}"))
            }
        };
        for q in 0..p.n / 4 {
            let i = q * 4;
            let (j, t) = (i % p.inner, i / p.inner);
            let (c, o) = (t % p.channels, t / p.channels);
            let xi = at(o, c, j, p.x_cs, p.x_os);
            aligned(p.x, xi, p.x_dtype)?;
            let mut a = [0f32; 4];
            for (k, v) in a.iter_mut().enumerate() {
                let x = load(r, p.x, xi + k as i64, p.x_dtype)?;
                *v = one(x, if p.inner == 1 { c + k as u32 } else { c })?;
            }
            if p.flags & 2 != 0 {
                let ri = at(o, c, j, p.r_cs, p.r_os);
                aligned(p.r, ri, p.r_dtype)?;
                for (k, v) in a.iter_mut().enumerate() {
                    *v += load(r, p.r, ri + k as i64, p.r_dtype)?;
                }
            }
            let yi = at(o, c, j, p.y_cs, p.y_os);
            aligned(p.y, yi, p.y_dtype)?;
            for (k, &v) in a.iter().enumerate() {
                store(r, p.y, yi + k as i64, p.y_dtype, v)?;
            }
        }
        return Ok(());
    }
    for i in 0..p.n {
        let (j, t) = (i % p.inner, i / p.inner);
        let (c, o) = (t % p.channels, t / p.channels);
        let mut a = one(load(r, p.x, at(o, c, j, p.x_cs, p.x_os), p.x_dtype)?, c)?;
        if p.flags & 2 != 0 {
            // r + a as the kernel writes it (fp32 addition commutes: the same value).
            a += load(r, p.r, at(o, c, j, p.r_cs, p.r_os), p.r_dtype)?;
        }
        store(r, p.y, at(o, c, j, p.y_cs, p.y_os), p.y_dtype, a)?;
    }
    Ok(())
}

fn ew(r: &Regions, p: &EwParams) -> Result<(), String> {
    for i in 0..p.n {
        let mut off_out = i as i64;
        let mut off_in = [i as i64; 8];
        if p.packed == 0 {
            off_out = 0;
            off_in = [0; 8];
            let mut rem = i;
            for d in (0..p.rank as usize).rev() {
                let dim = p.shape[d];
                let q = rem / dim;
                let c = (rem - q * dim) as i64;
                rem = q;
                off_out += c * p.out.strides[d] as i64;
                for (o, input) in off_in.iter_mut().zip(&p.inputs[..p.n_inputs as usize]) {
                    *o += c * input.strides[d] as i64;
                }
            }
        }
        let mut regs = [0f32; 32];
        for j in 0..p.n_nodes as usize {
            let nd = p.nodes[j];
            regs[j] = match nd.op {
                0 => {
                    let a = nd.a as usize;
                    load(r, p.inputs[a].ptr, off_in[a], p.inputs[a].dtype)?
                }
                254 => nd.imm,
                code => {
                    let op = EwOp::from_code(code).ok_or_else(|| format!("op code {code}"))?;
                    apply(
                        op,
                        regs[nd.a as usize],
                        regs[nd.b as usize],
                        regs[nd.c as usize],
                        nd.imm,
                    )
                }
            };
        }
        store(
            r,
            p.out.ptr,
            off_out,
            p.out.dtype,
            regs[p.n_nodes as usize - 1],
        )?;
    }
    Ok(())
}

/// The source and destination offsets (elements) of linear index `rem` over `shape`, the
/// innermost dimension last: the decomposition `strided_copy` and `tiled_transpose` make.
fn src_dst_offsets(rem: u32, shape: &[u32], src: &[i32], dst: &[i32]) -> (i64, i64) {
    let (mut s, mut d, mut rem) = (0i64, 0i64, rem);
    for k in (0..shape.len()).rev() {
        let dim = shape[k];
        let q = rem / dim;
        let c = (rem - q * dim) as i64;
        rem = q;
        s += c * src[k] as i64;
        d += c * dst[k] as i64;
    }
    (s, d)
}

/// The threads `(x, y)` of a 32 x 8 `tiled_transpose` block and the tile rows each visits
/// (`y`, `y + 8`, ...): `f(x, row)`.
fn tile_threads(mut f: impl FnMut(u32, u32) -> Result<(), String>) -> Result<(), String> {
    for ty in 0..8u32 {
        for tx in 0..32u32 {
            for j in (ty..32).step_by(8) {
                f(tx, j)?;
            }
        }
    }
    Ok(())
}

fn copy(r: &Regions, p: &CopyParams) -> Result<(), String> {
    let es = p.elem_bytes as usize;
    let rank = p.rank as usize;
    for i in 0..p.n {
        let (s, d) = src_dst_offsets(
            i,
            &p.shape[..rank],
            &p.src_strides[..rank],
            &p.dst_strides[..rank],
        );
        let (sa, da) = (
            (p.src as i64 + s * es as i64) as u64,
            (p.dst as i64 + d * es as i64) as u64,
        );
        r.check(sa, es)?;
        r.check(da, es)?;
        // SAFETY: both checked inside live regions; elements never overlap (distinct tensors).
        unsafe { std::ptr::copy(sa as *const u8, da as *mut u8, es) };
    }
    Ok(())
}

/// `tiled_transpose`, block by block: each 32 x 32 tile loaded along `a` into the tile, then
/// stored along `b`, for every plane of the other dimensions.
fn transpose(r: &Regions, p: &TransposeParams, grid: [u32; 3]) -> Result<(), String> {
    let es = p.elem_bytes as usize;
    let mut tile = vec![0u8; 32 * 33 * es];
    for bz in 0..grid[2] {
        for by in 0..grid[1] {
            for bx in 0..grid[0] {
                let (a0, b0) = (by * 32, bx * 32);
                let mut o = bz;
                while o < p.outer {
                    let rank = p.rank as usize;
                    let (so, d0) = src_dst_offsets(
                        o,
                        &p.shape[..rank],
                        &p.src_strides[..rank],
                        &p.dst_strides[..rank],
                    );
                    tile_threads(|tx, j| {
                        let (a, b) = (a0 + tx, b0 + j);
                        if a < p.rows && b < p.cols {
                            let at = so + a as i64 + b as i64 * p.src_b_stride as i64;
                            let addr = (p.src as i64 + at * es as i64) as u64;
                            r.check(addr, es)?;
                            let t = (j as usize * 33 + tx as usize) * es;
                            // SAFETY: checked inside a live region.
                            unsafe {
                                std::ptr::copy(addr as *const u8, tile[t..t + es].as_mut_ptr(), es)
                            };
                        }
                        Ok(())
                    })?;
                    tile_threads(|tx, j| {
                        let (b, a) = (b0 + tx, a0 + j);
                        if a < p.rows && b < p.cols {
                            let at = d0 + b as i64 + a as i64 * p.dst_a_stride as i64;
                            let addr = (p.dst as i64 + at * es as i64) as u64;
                            r.check(addr, es)?;
                            let t = (tx as usize * 33 + j as usize) * es;
                            // SAFETY: checked inside a live region.
                            unsafe {
                                std::ptr::copy(tile[t..t + es].as_ptr(), addr as *mut u8, es)
                            };
                        }
                        Ok(())
                    })?;
                    o += grid[2];
                }
            }
        }
    }
    Ok(())
}

fn softmax(r: &Regions, p: &SoftmaxParams) -> Result<(), String> {
    for o in 0..p.outer as i64 {
        for i in 0..p.inner as i64 {
            let base = o * p.n as i64 * p.inner as i64 + i;
            let at = |k: u32| base + k as i64 * p.inner as i64;
            let mut m = f32::NEG_INFINITY;
            for k in 0..p.n {
                m = m.max(load(r, p.x, at(k), p.dtype)?);
            }
            let mut s = 0f32;
            for k in 0..p.n {
                s += (load(r, p.x, at(k), p.dtype)? - m).exp();
            }
            let ls = s.ln();
            for k in 0..p.n {
                let v = load(r, p.x, at(k), p.dtype)? - m;
                store(
                    r,
                    p.y,
                    at(k),
                    p.dtype,
                    if p.log != 0 { v - ls } else { v.exp() / s },
                )?;
            }
        }
    }
    Ok(())
}

fn reduce(r: &Regions, p: &ReduceParams) -> Result<(), String> {
    for o in 0..p.outer as i64 {
        for i in 0..p.inner as i64 {
            let base = o * p.n as i64 * p.inner as i64 + i;
            let mut acc = match p.kind {
                2 => f32::NEG_INFINITY,
                3 => f32::INFINITY,
                4 => 1.0,
                _ => 0.0,
            };
            for k in 0..p.n as i64 {
                let v = load(r, p.x, base + k * p.inner as i64, p.dtype)?;
                acc = match p.kind {
                    2 => acc.max(v),
                    3 => acc.min(v),
                    4 => acc * v,
                    1 => acc + v * v,
                    _ => acc + v,
                };
            }
            let v = if p.kind == 1 { acc / p.n as f32 } else { acc };
            store(r, p.y, o * p.inner as i64 + i, p.dtype, v)?;
        }
    }
    Ok(())
}

fn gather(r: &Regions, p: &GatherParams) -> Result<(), String> {
    let es = p.elem_bytes as usize;
    let total = p.outer * p.count * p.inner;
    for t in 0..total {
        let i = t % p.inner;
        let k = (t / p.inner) % p.count;
        let o = t / (p.inner * p.count);
        let ia = p.indices + k as u64 * p.index_bytes as u64;
        r.check(ia, p.index_bytes as usize)?;
        // SAFETY: checked inside a live region.
        let mut ix = unsafe {
            if p.index_bytes == 8 {
                std::ptr::read_unaligned(ia as *const i64)
            } else {
                std::ptr::read_unaligned(ia as *const i32) as i64
            }
        };
        if ix < 0 {
            ix += p.n as i64;
        }
        ix = ix.clamp(0, p.n as i64 - 1);
        let src = p.data
            + (((o as i64 * p.n as i64 + ix) * p.inner as i64 + i as i64) as u64) * es as u64;
        let dst = p.y + t as u64 * es as u64;
        r.check(src, es)?;
        r.check(dst, es)?;
        // SAFETY: both checked.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, es) };
    }
    Ok(())
}

fn resize(r: &Regions, p: &ResizeParams) -> Result<(), String> {
    let i32_at = |base: u64, i: u32| -> Result<i64, String> {
        let a = base + i as u64 * 4;
        r.check(a, 4)?;
        // SAFETY: checked inside a live region.
        Ok(unsafe { std::ptr::read_unaligned(a as *const i32) } as i64)
    };
    let f32_at = |base: u64, i: u32| load(r, base, i as i64, ElemType::F32 as u32);
    let total = p.outer * p.h_out * p.w_out;
    for t in 0..total {
        let col = t % p.w_out;
        let row = (t / p.w_out) % p.h_out;
        let o = t / (p.w_out * p.h_out);
        let plane = o as i64 * p.h_in as i64 * p.w_in as i64;
        let mut acc = 0f32;
        for b in 0..p.win_w {
            let wb = f32_at(p.wx, col * p.win_w + b)?;
            if wb == 0.0 {
                continue;
            }
            let c = i32_at(p.ix, col * p.win_w + b)?;
            let mut s = 0f32;
            for a in 0..p.win_h {
                let wa = f32_at(p.wy, row * p.win_h + a)?;
                if wa == 0.0 {
                    continue;
                }
                let rr = i32_at(p.iy, row * p.win_h + a)?;
                s += wa * load(r, p.x, plane + rr * p.w_in as i64 + c, p.x_dtype)?;
            }
            acc += wb * s;
        }
        store(r, p.y, t as i64, p.y_dtype, acc)?;
    }
    Ok(())
}

fn gemm(r: &Regions, p: &BlasGemm, dtype: ElemType, a: u64, b: u64, c: u64) -> Result<(), String> {
    let dt = dtype as u32;
    for bt in 0..p.batch as i64 {
        let (ao, bo, co) = (bt * p.stride_a, bt * p.stride_b, bt * p.stride_c);
        for row in 0..p.m as i64 {
            for col in 0..p.n as i64 {
                let mut acc = 0f32;
                for l in 0..p.k as i64 {
                    let ia = if p.trans_a {
                        ao + l + row * p.lda as i64
                    } else {
                        ao + row + l * p.lda as i64
                    };
                    let ib = if p.trans_b {
                        bo + col + l * p.ldb as i64
                    } else {
                        bo + l + col * p.ldb as i64
                    };
                    acc += load(r, a, ia, dt)? * load(r, b, ib, dt)?;
                }
                store(r, c, co + row + col * p.ldc as i64, dt, acc)?;
            }
        }
    }
    Ok(())
}

/// The elements of view `t` at `base` (its element 0) in logical row-major order, through
/// the view's strides (what cuDNN reads through its descriptors: packed NCHW or NHWC).
fn read_view(r: &Regions, base: u64, t: &Tensor) -> Result<Vec<f32>, String> {
    let mut out = Vec::with_capacity(t.numel());
    let mut res = Ok(());
    for_each_offset(&t.shape, &t.strides, |_, off| {
        if res.is_ok() {
            match load(r, base, off as i64, t.dtype as u32) {
                Ok(v) => out.push(v),
                Err(e) => res = Err(e),
            }
        }
    });
    res.map(|_| out)
}

/// Store `values` (logical row-major order) into view `t` at `base`.
fn store_view(r: &Regions, base: u64, t: &Tensor, values: &[f32]) -> Result<(), String> {
    let mut res = Ok(());
    for_each_offset(&t.shape, &t.strides, |i, off| {
        if res.is_ok() {
            res = store(r, base, off as i64, t.dtype as u32, values[i]);
        }
    });
    res
}

/// Run `c`'s launch list on host memory laid out like the device workspace (poisoned with
/// all-ones bytes, as the reference executor does). `inputs[i]` holds input `i`; returns
/// every output.
///
/// # Errors
/// A description of the first launch that fails (an access outside every region included).
pub fn run(c: &Compiled, inputs: &[&[u8]]) -> Result<Vec<Vec<u8>>, String> {
    run_with(c, inputs, false)
}

/// [`run`], with every fusion [`crate::native::passes::fusion::find_all`] finds taken (`fuse`) as a GPU
/// executor with fused graph-API plans for all of them takes it: the convolution computes
/// `act(conv + b) [+ r]` into the element-wise step's output and that step does nothing.
///
/// # Errors
/// As [`run`].
pub fn run_with(c: &Compiled, inputs: &[&[u8]], fuse: bool) -> Result<Vec<Vec<u8>>, String> {
    run_in_order(c, inputs, fuse, None)
}

/// [`run_with`], the launches in `order` (every step once) instead of program order: an
/// order the plan's schedule allows ([`crate::native::plan::schedule::Schedule::order`]) must give the
/// same bytes, which proves that its streams, events and memory plan never let a step see
/// another's unfinished work or reuse memory a step that may still run needs.
///
/// # Errors
/// As [`run`]; a description when `order` is not a permutation of the steps.
pub fn run_in_order(
    c: &Compiled,
    inputs: &[&[u8]],
    fuse: bool,
    order: Option<&[usize]>,
) -> Result<Vec<Vec<u8>>, String> {
    let g = &c.graph;
    let program: Vec<usize> = (0..g.steps.len()).collect();
    let order = order.unwrap_or(&program);
    let mut seen = vec![false; g.steps.len()];
    for &i in order {
        if i >= seen.len() || std::mem::replace(&mut seen[i], true) {
            return Err(format!("order names step {i} twice or out of range"));
        }
    }
    if seen.iter().any(|s| !s) {
        return Err("order misses a step".into());
    }
    let uses_gemm = g.steps.iter().any(|s| matches!(s.kind, StepKind::Gemm(_)));
    // Scratch sizes as on a GPU that chose algorithms needing some scratch.
    let (cudnn, cublas) =
        launch::stream_scratch(c, |_| 1 << 12, if uses_gemm { 1 << 12 } else { 0 });
    let layout = Layout::new(c.memory.activation_bytes, &cudnn, &cublas);
    let convs: Vec<Option<ConvChoice>> = g
        .steps
        .iter()
        .map(|s| {
            matches!(s.kind, StepKind::Conv(_) | StepKind::Deconv(_)).then_some(ConvChoice {
                algo: 1,
                legacy: true,
                workspace: 1 << 12,
                find_us: 0,
                graph: None,
                graph_workspace: 0,
                fused: None,
                fused_workspace: 0,
            })
        })
        .collect();
    let ws = Mem::new(layout.workspace_bytes, 0xff);
    let weights_blob = c.memory.weight_blob(g);
    let weights = Mem::new(weights_blob.len(), 0);
    // SAFETY: fresh storage at least as long as the blob.
    unsafe {
        std::ptr::copy_nonoverlapping(
            weights_blob.as_ptr(),
            weights.addr() as *mut u8,
            weights_blob.len(),
        )
    };
    let ins: Vec<Mem> = inputs
        .iter()
        .map(|b| {
            let m = Mem::new(b.len(), 0);
            // SAFETY: fresh storage of the input's length.
            unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), m.addr() as *mut u8, b.len()) };
            m
        })
        .collect();
    let out_bytes: Vec<usize> = g
        .outputs
        .iter()
        .map(|io| {
            let t = g.tensor(io.tensor);
            t.numel() * t.dtype.size()
        })
        .collect();
    let outs: Vec<Mem> = out_bytes.iter().map(|&n| Mem::new(n, 0xff)).collect();
    let mut regions = vec![
        (ws.addr(), ws.addr() + layout.workspace_bytes as u64),
        (weights.addr(), weights.addr() + weights_blob.len() as u64),
    ];
    for (m, b) in ins.iter().zip(inputs) {
        regions.push((m.addr(), m.addr() + b.len() as u64));
    }
    for (m, &n) in outs.iter().zip(&out_bytes) {
        regions.push((m.addr(), m.addr() + n as u64));
    }
    let regions = Regions(regions);
    let in_addrs: Vec<u64> = ins.iter().map(Mem::addr).collect();
    let out_addrs: Vec<u64> = outs.iter().map(Mem::addr).collect();
    let bases = Bases {
        workspace: ws.addr(),
        weights: weights.addr(),
        inputs: &in_addrs,
        outputs: &out_addrs,
    };
    let fusions = if fuse {
        crate::native::passes::fusion::find_all(c)
    } else {
        vec![None; g.steps.len()]
    };
    let mut launches = Vec::new();
    launch::build(c, &convs, &fusions, &layout, &bases, &mut launches)?;
    for &i in order {
        let l = &launches[i];
        let name = &g.steps[i].node;
        let res = match l {
            Launch::Ew { params, .. } => ew(&regions, params),
            Launch::BiasAct { params, .. } => bias_act(&regions, params),
            Launch::Copy { params, .. } => copy(&regions, params),
            Launch::Transpose { params, grid } => transpose(&regions, params, *grid),
            Launch::Memcpy { dst, src, bytes } => regions
                .check(*src, *bytes)
                .and_then(|_| regions.check(*dst, *bytes))
                .map(|_| {
                    // SAFETY: both checked inside live regions.
                    unsafe { std::ptr::copy(*src as *const u8, *dst as *mut u8, *bytes) }
                }),
            Launch::Conv {
                step,
                x,
                w,
                y,
                epilogue,
                ws,
                ws_bytes,
                ..
            } => {
                let StepKind::Conv(cv) = &g.steps[*step].kind else {
                    return Err(format!("{name}: launch is not a convolution"));
                };
                let (xt, wt, yt) = (g.tensor(cv.x), g.tensor(cv.w), g.tensor(cv.y));
                regions.check(*ws, *ws_bytes)?;
                let xv = read_view(&regions, *x, xt)?;
                let wv = read_view(&regions, *w, wt)?;
                let mut yv = conv_compute(&xv, &wv, &xt.shape, &wt.shape, &yt.shape, cv);
                match epilogue {
                    None => store_view(&regions, *y, yt, &yv),
                    // cuDNN's fused graph: fp32 between the operations, one store.
                    Some(e) => (|| {
                        let f = e.fusion;
                        let bv = read_view(&regions, e.b, g.tensor(f.bias))?;
                        let rv = match (f.residual, e.r) {
                            (Some(t), Some(a)) => Some(read_view(&regions, a, g.tensor(t))?),
                            _ => None,
                        };
                        for (k, v) in yv.iter_mut().enumerate() {
                            *v += bv[k];
                            if f.silu {
                                *v = apply(EwOp::Silu, *v, 0.0, 0.0, 0.0);
                            }
                            if let Some(rv) = &rv {
                                *v += rv[k];
                            }
                        }
                        store_view(&regions, *y, g.tensor(f.out), &yv)
                    })(),
                }
            }
            Launch::Fused { into } => match launches.get(*into) {
                Some(Launch::Conv {
                    epilogue: Some(e), ..
                }) if e.fusion.ew == i => Ok(()),
                _ => Err(format!(
                    "{name}: fused into step {into}, which does not fuse it"
                )),
            },
            Launch::Deconv {
                step,
                x,
                w,
                y,
                ws,
                ws_bytes,
                ..
            } => {
                let StepKind::Deconv(Deconv(cv)) = &g.steps[*step].kind else {
                    return Err(format!("{name}: launch is not a transposed convolution"));
                };
                let (xt, wt, yt) = (g.tensor(cv.x), g.tensor(cv.w), g.tensor(cv.y));
                regions.check(*ws, *ws_bytes)?;
                let xv = read_view(&regions, *x, xt)?;
                let wv = read_view(&regions, *w, wt)?;
                let yv = deconv_compute(&xv, &wv, &xt.shape, &wt.shape, &yt.shape, cv);
                store_view(&regions, *y, yt, &yv)
            }
            Launch::Pool { step, x, y } => {
                let StepKind::Pool(pl) = &g.steps[*step].kind else {
                    return Err(format!("{name}: launch is not a pooling"));
                };
                let (xt, yt) = (g.tensor(pl.x), g.tensor(pl.y));
                let xv = read_view(&regions, *x, xt)?;
                let yv = pool_compute(&xv, &xt.shape, &yt.shape, pl);
                store_view(&regions, *y, yt, &yv)
            }
            Launch::Gemm { p, dtype, a, b, c } => gemm(&regions, p, *dtype, *a, *b, *c),
            Launch::Softmax { params, .. } => softmax(&regions, params),
            Launch::Reduce { params, .. } => reduce(&regions, params),
            Launch::Gather { params, .. } => gather(&regions, params),
            Launch::Resize { params, .. } => resize(&regions, params),
        };
        res.map_err(|e| format!("launch {i} ({name}): {e}"))?;
    }
    Ok(outs
        .iter()
        .zip(&out_bytes)
        .map(|(m, &n)| m.bytes()[..n].to_vec())
        .collect())
}
