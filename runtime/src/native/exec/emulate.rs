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

use crate::native::exec::launch::{self, Bases, ConvChoice, Launch, Layout};
use crate::native::graph::StepKind;
use crate::native::ir::program::{EwOp, apply, load_f32, store_f32};
use crate::native::ir::{ElemType, Tensor, for_each_offset};
use crate::native::ops;
use crate::native::ops::conv::conv_compute;
use crate::native::ops::deconv::{Deconv, deconv_compute};
use crate::native::ops::op::{BlasGemm, DeviceMemory, Uses};
use crate::native::ops::pool::pool_compute;
use crate::native::pipeline::Compiled;

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

impl DeviceMemory for Regions {
    fn load(&self, base: u64, index: i64, dtype: u32) -> Result<f32, String> {
        let dt = ElemType::from_code(dtype).ok_or_else(|| format!("dtype code {dtype}"))?;
        let es = dt.size();
        let at = (base as i64 + index * es as i64) as u64;
        self.check(at, es)?;
        // SAFETY: checked inside a live region.
        let b = unsafe { std::slice::from_raw_parts(at as *const u8, es) };
        Ok(load_f32(dt, b))
    }

    fn store(&self, base: u64, index: i64, dtype: u32, v: f32) -> Result<(), String> {
        let dt = ElemType::from_code(dtype).ok_or_else(|| format!("dtype code {dtype}"))?;
        let es = dt.size();
        let at = (base as i64 + index * es as i64) as u64;
        self.check(at, es)?;
        // SAFETY: checked inside a live region; no other reference to it is alive.
        let b = unsafe { std::slice::from_raw_parts_mut(at as *mut u8, es) };
        store_f32(v, dt, b);
        Ok(())
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), String> {
        self.check(addr, out.len())?;
        // SAFETY: checked inside a live region; `out` is host memory of its own.
        unsafe { std::ptr::copy(addr as *const u8, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    fn write(&self, addr: u64, bytes: &[u8]) -> Result<(), String> {
        self.check(addr, bytes.len())?;
        // SAFETY: checked inside a live region; `bytes` is host memory of its own.
        unsafe { std::ptr::copy(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
        Ok(())
    }
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
                    acc += r.load(a, ia, dt)? * r.load(b, ib, dt)?;
                }
                r.store(c, co + row + col * p.ldc as i64, dt, acc)?;
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
            match r.load(base, off as i64, t.dtype as u32) {
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
            res = r.store(base, off as i64, t.dtype as u32, values[i]);
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

/// [`run`], with every fusion [`crate::native::plan::memory::MemoryPlan::fusions`] finds taken (`fuse`) as a GPU
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
    let uses_gemm = g.steps.iter().any(|s| s.kind.uses() == Uses::Cublas);
    // Scratch sizes as on a GPU that chose algorithms needing some scratch.
    let (cudnn, cublas) =
        launch::stream_scratch(c, |_| 1 << 12, if uses_gemm { 1 << 12 } else { 0 });
    let layout = Layout::new(c.memory.activation_bytes, &cudnn, &cublas);
    let convs: Vec<Option<ConvChoice>> = g
        .steps
        .iter()
        .map(|s| {
            (s.kind.uses() == Uses::CudnnConvolution).then_some(ConvChoice {
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
        c.memory.fusions(&c.graph)
    } else {
        vec![None; g.steps.len()]
    };
    let mut launches = Vec::new();
    launch::build(c, &convs, &fusions, &layout, &bases, &mut launches)?;
    for &i in order {
        let l = &launches[i];
        let name = &g.steps[i].node;
        let res = match l {
            Launch::Kernel { kernel, call } => ops::kernel(*kernel)
                .ok_or_else(|| format!("no kernel {kernel} in the registry"))
                .and_then(|k| (k.emulate)(call, &regions)),
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
        };
        res.map_err(|e| format!("launch {i} ({name}): {e}"))?;
    }
    Ok(outs
        .iter()
        .zip(&out_bytes)
        .map(|(m, &n)| m.bytes()[..n].to_vec())
        .collect())
}
