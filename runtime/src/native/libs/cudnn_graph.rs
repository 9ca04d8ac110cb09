//! cuDNN's graph (backend) API for one forward convolution: an operation graph, the engine
//! configurations cuDNN's heuristics rank for it (`CUDNN_HEUR_MODE_A`), execution plans, and
//! variant packs binding the addresses. [`ConvGraph::new_fused`] builds the same convolution
//! with its bias, activation and residual fused into its graph (runtime fusion: the engine
//! measures it against the convolution plus its `bias_act` kernel, `super::fusion`). cuDNN 9 reaches its newer kernels (Hopper and later
//! implicit-GEMM engines) only through this API; the legacy `cudnnConvolutionForward`
//! algorithms are a fixed subset. On the H200 the legacy API's best fp32 algorithm for a
//! 64-channel 3x3 convolution at 20x20 took 44 us in the captured graph
//! (`docs/evidence/native-h200.md`), about 0.7 TFLOP/s.
//!
//! Attribute names, types and the descriptor life cycle (create, set, finalize, destroy) are
//! cuDNN's backend API (`cudnn_graph.h`, "Backend Descriptor Types" in the cuDNN API
//! reference). Tensors are packed NCHW with KCRS filters, or packed NHWC with KRSC filters
//! (channels-last plans, `super::layout`), as the engine lays out every convolution operand;
//! groups follow from the filter's input-channel count, as the backend API defines them.
//!
//! The algorithm choice is made once per plan (the engine measures the candidates on the real
//! layout and keeps the fastest, legacy algorithms included); each executor rebuilds the
//! chosen configuration on its own handle by its rank in the same heuristics query, because
//! an operation graph and its execution plans belong to the handle they were built with.

use std::ffi::c_void;

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendAttributeType_t as T;
use sys::cudnnBackendDescriptorType_t as D;

use super::cudnn::{CudnnError, Handle, check};
use super::plan_cache::PlanCache;

/// One backend descriptor, destroyed on drop.
pub struct Desc(sys::cudnnBackendDescriptor_t);

// SAFETY: a plain host object; used by one executor (or the plan's load) at a time.
unsafe impl Send for Desc {}
// SAFETY: immutable after finalisation; cuDNN's execute only reads it.
unsafe impl Sync for Desc {}

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created by cudnnBackendCreateDescriptor, destroyed once.
        unsafe { sys::cudnnBackendDestroyDescriptor(self.0) };
    }
}

impl Desc {
    fn new(kind: D) -> Result<Self, CudnnError> {
        let mut d: sys::cudnnBackendDescriptor_t = std::ptr::null_mut();
        // SAFETY: writes one descriptor, destroyed in Drop.
        check("cudnnBackendCreateDescriptor", unsafe {
            sys::cudnnBackendCreateDescriptor(kind, &mut d)
        })?;
        Ok(Desc(d))
    }

    /// # Safety
    /// `values` points at `count` elements of the type `ty` names.
    unsafe fn set_raw(
        &self,
        name: A,
        ty: T,
        count: usize,
        values: *const c_void,
    ) -> Result<(), CudnnError> {
        // SAFETY: the caller's contract; cuDNN copies the values before returning.
        check("cudnnBackendSetAttribute", unsafe {
            sys::cudnnBackendSetAttribute(self.0, name, ty, count as i64, values)
        })
    }

    fn set_i64s(&self, name: A, v: &[i64]) -> Result<(), CudnnError> {
        // SAFETY: v.len() i64 values.
        unsafe { self.set_raw(name, T::CUDNN_TYPE_INT64, v.len(), v.as_ptr().cast()) }
    }

    fn set_descs(&self, name: A, v: &[&Desc]) -> Result<(), CudnnError> {
        let raw: Vec<sys::cudnnBackendDescriptor_t> = v.iter().map(|d| d.0).collect();
        // SAFETY: raw.len() descriptor handles, alive for the call.
        unsafe {
            self.set_raw(
                name,
                T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                raw.len(),
                raw.as_ptr().cast(),
            )
        }
    }

    fn set_data_type(&self, name: A, dt: sys::cudnnDataType_t) -> Result<(), CudnnError> {
        // SAFETY: one cudnnDataType_t.
        unsafe {
            self.set_raw(
                name,
                T::CUDNN_TYPE_DATA_TYPE,
                1,
                (&dt as *const sys::cudnnDataType_t).cast(),
            )
        }
    }

    fn set_handle(&self, name: A, h: &Handle) -> Result<(), CudnnError> {
        let raw = h.raw();
        // SAFETY: one handle.
        unsafe {
            self.set_raw(
                name,
                T::CUDNN_TYPE_HANDLE,
                1,
                (&raw as *const sys::cudnnHandle_t).cast(),
            )
        }
    }

    fn finalize(&self) -> Result<(), CudnnError> {
        // SAFETY: live descriptor.
        check("cudnnBackendFinalize", unsafe {
            sys::cudnnBackendFinalize(self.0)
        })
    }

    /// Read up to `capacity` elements of attribute `name` (type `ty`) into `out`; returns how
    /// many cuDNN wrote (at most `capacity`).
    ///
    /// # Safety
    /// `out` has room for `capacity` elements of the type `ty` names.
    unsafe fn get_raw(
        &self,
        name: A,
        ty: T,
        capacity: usize,
        out: *mut c_void,
    ) -> Result<usize, CudnnError> {
        let mut count = 0i64;
        // SAFETY: the caller's contract.
        check("cudnnBackendGetAttribute", unsafe {
            sys::cudnnBackendGetAttribute(self.0, name, ty, capacity as i64, &mut count, out)
        })?;
        Ok(usize::try_from(count).unwrap_or(0).min(capacity))
    }

    /// How many elements attribute `name` (type `ty`) holds (cuDNN's count-only query: no
    /// array, zero requested).
    fn count(&self, name: A, ty: T) -> Result<usize, CudnnError> {
        let mut count = 0i64;
        // SAFETY: zero elements requested, so cuDNN writes only the count.
        check("cudnnBackendGetAttribute", unsafe {
            sys::cudnnBackendGetAttribute(self.0, name, ty, 0, &mut count, std::ptr::null_mut())
        })?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// Read up to `out.len()` descriptors of attribute `name` into `out` (created by the
    /// caller with the right type); returns how many cuDNN filled.
    fn get_descs(&self, name: A, out: &[Desc]) -> Result<usize, CudnnError> {
        let mut raw: Vec<sys::cudnnBackendDescriptor_t> = out.iter().map(|d| d.0).collect();
        // SAFETY: raw holds out.len() live descriptors cuDNN fills in place.
        unsafe {
            self.get_raw(
                name,
                T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                raw.len(),
                raw.as_mut_ptr().cast(),
            )
        }
    }
}

/// Unique ids of the three operands in the graph and the variant pack.
const UID_X: i64 = b'x' as i64;
const UID_W: i64 = b'w' as i64;
const UID_Y: i64 = b'y' as i64;
/// The bias of a fused epilogue, and its virtual (fp32, never stored) intermediates: the
/// convolution, the sum with the bias, the activation (before a residual is added).
const UID_B: i64 = b'b' as i64;
const UID_CONV: i64 = b'c' as i64;
const UID_SUM: i64 = b's' as i64;
const UID_ACT: i64 = b'a' as i64;
/// The residual of a fused epilogue.
const UID_R: i64 = b'r' as i64;

/// The activation of a fused epilogue: cuDNN's pointwise modes, computed in fp32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FusedAct {
    /// None (bias only).
    Identity,
    /// SiLU, `x * sigmoid(x)` (`CUDNN_POINTWISE_SWISH_FWD`, beta 1).
    Silu,
}

/// An epilogue fused into the convolution's operation graph (cuDNN runtime fusion):
/// `y = act(conv(x, w) + b) [+ r]` with `b` the per-output-channel bias `[1, k, 1, 1]` in the
/// storage type or fp32 (its values contiguous), computed in fp32 between the operations (virtual
/// tensors, never stored) and stored once. `y` and the residual `r` may be strided views (a
/// slot of a channel concatenation); their strides are element strides per NCHW-ordered
/// dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FusedEpilogue {
    /// The activation.
    pub act: FusedAct,
    /// Strides of `y`; `None`: packed in the geometry's layout.
    pub y_strides: Option<[i64; 4]>,
    /// Strides of a residual `r` of `y`'s dimensions added after the activation; `None`: no
    /// residual.
    pub residual: Option<[i64; 4]>,
    /// Byte alignment of `b` and `r` (1, 2, 4, 8 or 16).
    pub align: [i64; 2],
    /// `b` in fp32 (else in the storage type): the engine keeps biases in fp32 under fp16
    /// storage (`super::precision`).
    pub bias_f32: bool,
}

impl FusedEpilogue {
    /// `act(conv + b)` into a packed `y`, `b` 16-byte aligned.
    pub fn bias_act(act: FusedAct) -> Self {
        FusedEpilogue {
            act,
            y_strides: None,
            residual: None,
            align: [16, 16],
            bias_f32: false,
        }
    }
}

/// Eligible engine configurations kept of each heuristics mode (the first are the likeliest
/// fastest).
pub const MAX_CANDIDATES: usize = 8;

/// Most configurations read of one heuristics mode before the eligible ones are picked.
const MAX_HEURISTIC_RESULTS: usize = 64;

/// Which of cuDNN's heuristics are asked for engine configurations to measure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Search {
    /// `CUDNN_HEUR_MODE_A` only: cuDNN's ranked choice (fast to query).
    #[default]
    Heuristics,
    /// Modes A, then B (the slower, more accurate model), then `FALLBACK` (engines that
    /// support the graph without a ranking): up to 3 x [`MAX_CANDIDATES`] measured, like a
    /// framework's exhaustive "benchmark" mode; load takes longer.
    Wide,
}

impl Search {
    fn modes(self) -> &'static [sys::cudnnBackendHeurMode_t] {
        use sys::cudnnBackendHeurMode_t as M;
        match self {
            Search::Heuristics => &[M::CUDNN_HEUR_MODE_A],
            Search::Wide => &[
                M::CUDNN_HEUR_MODE_A,
                M::CUDNN_HEUR_MODE_B,
                M::CUDNN_HEUR_MODE_FALLBACK,
            ],
        }
    }
}

/// One forward convolution: packed NCHW `x` and `y` and KCRS `w`, or with `channels_last`
/// NHWC `x` and `y` (each with its pixel pitch, `pitch`) and packed KRSC `w` (dimensions in
/// NCHW order either way; groups follow from `x[1] / w[1]`), symmetric or asymmetric padding
/// (`pre`, `post`), the byte alignment of each operand's address (at most 16), fp32
/// accumulation, fp32 or fp16 storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvGeometry {
    /// Input `[n, c, h, w]`.
    pub x: [i64; 4],
    /// Filter `[k, c / groups, r, s]`.
    pub w: [i64; 4],
    /// Output `[n, k, p, q]`.
    pub y: [i64; 4],
    /// Padding before, per spatial axis.
    pub pre: [i64; 2],
    /// Padding after, per spatial axis.
    pub post: [i64; 2],
    /// Strides.
    pub strides: [i64; 2],
    /// Dilations.
    pub dilations: [i64; 2],
    /// Byte alignment of `x`, `w`, `y` (1, 2, 4, 8 or 16).
    pub align: [i64; 3],
    /// fp16 storage (else fp32).
    pub half: bool,
    /// Channels-last memory order (NHWC, KRSC).
    pub channels_last: bool,
    /// Channels-last: elements between neighbouring pixels of `x` and of `y` (their channel
    /// counts when packed; a slice of channels of a wider buffer has the buffer's,
    /// `super::ir::Tensor::nhwc_pitch`). Ignored in NCHW.
    pub pitch: [i64; 2],
}

impl ConvGeometry {
    /// The same convolution storing its output at an address of byte alignment `align` (a
    /// fused graph's `y` is the element-wise step's output, not the convolution's).
    pub fn with_output_alignment(self, align: i64) -> Self {
        ConvGeometry {
            align: [self.align[0], self.align[1], align],
            ..self
        }
    }
}

/// The byte alignment cuDNN is told for an address (its lowest set bit, capped at 16).
pub fn alignment(addr: u64) -> i64 {
    1i64 << addr.trailing_zeros().min(4)
}

/// Packed strides of NCHW-ordered `d`: row-major, or channels-last (`[H*W*C, 1, W*C, C]`).
fn packed(d: [i64; 4], channels_last: bool) -> [i64; 4] {
    if channels_last {
        pitched(d, d[1])
    } else {
        [d[1] * d[2] * d[3], d[2] * d[3], d[3], 1]
    }
}

/// Channels-last strides of NCHW-ordered `d` with `p` elements between neighbouring pixels:
/// `[H*W*p, 1, W*p, p]` (packed when `p = C`).
pub fn pitched(d: [i64; 4], p: i64) -> [i64; 4] {
    [d[2] * d[3] * p, 1, d[3] * p, p]
}

/// Strides of the convolution's `x` (`which = 0`) or `y` (1) in `g`'s layout.
fn activation_strides(g: &ConvGeometry, which: usize) -> [i64; 4] {
    let d = if which == 0 { g.x } else { g.y };
    if g.channels_last {
        pitched(d, g.pitch[which])
    } else {
        packed(d, false)
    }
}

fn tensor(
    uid: i64,
    dims: [i64; 4],
    align: i64,
    dt: sys::cudnnDataType_t,
    channels_last: bool,
) -> Result<Desc, CudnnError> {
    tensor_desc(uid, dims, packed(dims, channels_last), align, dt, false)
}

/// A tensor descriptor; `is_virtual`: an intermediate of a fused graph, never in memory.
fn tensor_desc(
    uid: i64,
    dims: [i64; 4],
    strides: [i64; 4],
    align: i64,
    dt: sys::cudnnDataType_t,
    is_virtual: bool,
) -> Result<Desc, CudnnError> {
    let t = Desc::new(D::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
    t.set_data_type(A::CUDNN_ATTR_TENSOR_DATA_TYPE, dt)?;
    t.set_i64s(A::CUDNN_ATTR_TENSOR_DIMENSIONS, &dims)?;
    t.set_i64s(A::CUDNN_ATTR_TENSOR_STRIDES, &strides)?;
    t.set_i64s(A::CUDNN_ATTR_TENSOR_UNIQUE_ID, &[uid])?;
    t.set_i64s(A::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &[align])?;
    if is_virtual {
        // SAFETY: one C bool.
        unsafe {
            t.set_raw(
                A::CUDNN_ATTR_TENSOR_IS_VIRTUAL,
                T::CUDNN_TYPE_BOOLEAN,
                1,
                (&true as *const bool).cast(),
            )
        }?;
    }
    t.finalize()?;
    Ok(t)
}

/// A pointwise operation `y = mode(x[, b])` in fp32.
fn pointwise(
    mode: sys::cudnnPointwiseMode_t,
    x: &Desc,
    b: Option<&Desc>,
    y: &Desc,
) -> Result<(Desc, Desc), CudnnError> {
    let pw = Desc::new(D::CUDNN_BACKEND_POINTWISE_DESCRIPTOR)?;
    // SAFETY: one cudnnPointwiseMode_t.
    unsafe {
        pw.set_raw(
            A::CUDNN_ATTR_POINTWISE_MODE,
            T::CUDNN_TYPE_POINTWISE_MODE,
            1,
            (&mode as *const sys::cudnnPointwiseMode_t).cast(),
        )
    }?;
    pw.set_data_type(
        A::CUDNN_ATTR_POINTWISE_MATH_PREC,
        sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
    )?;
    pw.finalize()?;
    let op = Desc::new(D::CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR)?;
    op.set_descs(A::CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, &[&pw])?;
    op.set_descs(A::CUDNN_ATTR_OPERATION_POINTWISE_XDESC, &[x])?;
    if let Some(b) = b {
        op.set_descs(A::CUDNN_ATTR_OPERATION_POINTWISE_BDESC, &[b])?;
    }
    op.set_descs(A::CUDNN_ATTR_OPERATION_POINTWISE_YDESC, &[y])?;
    op.finalize()?;
    Ok((op, pw))
}

/// The operation graph of one convolution on a handle, and the engine configurations the
/// heuristics ranked for it, best first.
pub struct ConvGraph {
    // Fields drop in declaration order: what refers to another descriptor goes first.
    cfgs: Vec<Desc>,
    /// Everything the graph was built from, as text: with a configuration's rank and engine,
    /// the key of its plan in a [`PlanCache`].
    key: String,
    // The operation graph the configurations refer to, then what it refers to: kept alive
    // with them (dropped in this order).
    _parts: Vec<Desc>,
}

// SAFETY: host objects, used by one thread at a time through the owner.
unsafe impl Send for ConvGraph {}

impl ConvGraph {
    /// Build and finalise the graph on `handle` and query the heuristics `search` names: of
    /// each mode's ranked configurations, the first [`MAX_CANDIDATES`] that are eligible
    /// (with `tensor_cores` false, none whose numerical notes say tensor cores or
    /// down-converted inputs: strict fp32). The same query gives the same list, so an index
    /// stays valid on another handle.
    ///
    /// # Errors
    /// [`CudnnError`]: cuDNN refused a descriptor (an unsupported geometry) or has no engine.
    pub fn new(
        handle: &Handle,
        g: &ConvGeometry,
        search: Search,
        tensor_cores: bool,
    ) -> Result<Self, CudnnError> {
        Self::build(handle, g, search, tensor_cores, None)
    }

    /// As [`ConvGraph::new`] for the convolution with `epilogue` fused into its graph
    /// (operands x, w, b, y: [`ConvPlan::variant_pack_fused`]). Whether cuDNN has an engine
    /// for it depends on its version, the GPU and the layout (runtime fusion engines want
    /// channels-last fp16 and compile their kernel with NVRTC when the plan is finalised).
    ///
    /// # Errors
    /// As [`ConvGraph::new`].
    pub fn new_fused(
        handle: &Handle,
        g: &ConvGeometry,
        search: Search,
        tensor_cores: bool,
        epilogue: FusedEpilogue,
    ) -> Result<Self, CudnnError> {
        Self::build(handle, g, search, tensor_cores, Some(epilogue))
    }

    fn build(
        handle: &Handle,
        g: &ConvGeometry,
        search: Search,
        tensor_cores: bool,
        epilogue: Option<FusedEpilogue>,
    ) -> Result<Self, CudnnError> {
        let dt = if g.half {
            sys::cudnnDataType_t::CUDNN_DATA_HALF
        } else {
            sys::cudnnDataType_t::CUDNN_DATA_FLOAT
        };
        let f32t = sys::cudnnDataType_t::CUDNN_DATA_FLOAT;
        let cl = g.channels_last;
        let x = tensor_desc(UID_X, g.x, activation_strides(g, 0), g.align[0], dt, false)?;
        let w = tensor(UID_W, g.w, g.align[1], dt, cl)?;
        let y_strides = epilogue
            .and_then(|e| e.y_strides)
            .unwrap_or(activation_strides(g, 1));
        let y = tensor_desc(UID_Y, g.y, y_strides, g.align[2], dt, false)?;
        // With an epilogue the convolution writes a virtual fp32 tensor the pointwise
        // operations read; the last of them writes y.
        let virt = |uid| tensor_desc(uid, g.y, packed(g.y, cl), 16, f32t, true);
        let conv_out = match epilogue {
            Some(_) => Some(virt(UID_CONV)?),
            None => None,
        };
        let conv = Desc::new(D::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)?;
        conv.set_data_type(
            A::CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
            sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
        )?;
        let mode = sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION;
        // SAFETY: one cudnnConvolutionMode_t.
        unsafe {
            conv.set_raw(
                A::CUDNN_ATTR_CONVOLUTION_CONV_MODE,
                T::CUDNN_TYPE_CONVOLUTION_MODE,
                1,
                (&mode as *const sys::cudnnConvolutionMode_t).cast(),
            )
        }?;
        conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &[2])?;
        conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_DILATIONS, &g.dilations)?;
        conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, &g.strides)?;
        conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, &g.pre)?;
        conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, &g.post)?;
        conv.finalize()?;
        let op = Desc::new(D::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR)?;
        op.set_descs(A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, &[&x])?;
        op.set_descs(A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, &[&w])?;
        op.set_descs(
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
            &[conv_out.as_ref().unwrap_or(&y)],
        )?;
        op.set_descs(
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
            &[&conv],
        )?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: one f32 each (fp32 compute: cuDNN takes float scaling factors).
        unsafe {
            op.set_raw(
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                T::CUDNN_TYPE_FLOAT,
                1,
                (&alpha as *const f32).cast(),
            )?;
            op.set_raw(
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                T::CUDNN_TYPE_FLOAT,
                1,
                (&beta as *const f32).cast(),
            )?;
        }
        op.finalize()?;
        // The epilogue's operations and what they refer to (kept alive with the graph).
        let mut fused: Vec<Desc> = Vec::new();
        let mut ops: Vec<Desc> = Vec::new();
        if let (Some(e), Some(c)) = (epilogue, conv_out.as_ref()) {
            use sys::cudnnPointwiseMode_t as M;
            // The chain conv -> + b -> [act] -> [+ r]: every link virtual but the last.
            let bias_dt = if e.bias_f32 { f32t } else { dt };
            let bias = tensor(UID_B, [1, g.y[1], 1, 1], e.align[0], bias_dt, cl)?;
            let with_act = e.act == FusedAct::Silu;
            let links = 1 + usize::from(with_act) + usize::from(e.residual.is_some());
            let mut prev: Option<Desc> = None;
            let mut link = 0usize;
            let mut step = |mode: M, b: Option<&Desc>, prev: &mut Option<Desc>| {
                link += 1;
                let out = if link == links {
                    None
                } else {
                    Some(virt([UID_SUM, UID_ACT][link - 1])?)
                };
                let (op, pw) = pointwise(
                    mode,
                    prev.as_ref().unwrap_or(c),
                    b,
                    out.as_ref().unwrap_or(&y),
                )?;
                ops.push(op);
                fused.push(pw);
                if let Some(old) = std::mem::replace(prev, out) {
                    fused.push(old);
                }
                Ok::<_, CudnnError>(())
            };
            step(M::CUDNN_POINTWISE_ADD, Some(&bias), &mut prev)?;
            if with_act {
                step(M::CUDNN_POINTWISE_SWISH_FWD, None, &mut prev)?;
            }
            let residual = match e.residual {
                Some(strides) => Some(tensor_desc(UID_R, g.y, strides, e.align[1], dt, false)?),
                None => None,
            };
            if let Some(r) = &residual {
                step(M::CUDNN_POINTWISE_ADD, Some(r), &mut prev)?;
            }
            fused.push(bias);
            fused.extend(residual);
            fused.extend(prev);
        }
        let graph = Desc::new(D::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
        graph.set_handle(A::CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle)?;
        let all: Vec<&Desc> = std::iter::once(&op).chain(ops.iter()).collect();
        graph.set_descs(A::CUDNN_ATTR_OPERATIONGRAPH_OPS, &all)?;
        graph.finalize()?;
        let mut parts = vec![graph];
        let mut cfgs = Vec::new();
        for &mode in search.modes() {
            let heur = Desc::new(D::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
            heur.set_descs(A::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[&parts[0]])?;
            // SAFETY: one cudnnBackendHeurMode_t.
            unsafe {
                heur.set_raw(
                    A::CUDNN_ATTR_ENGINEHEUR_MODE,
                    T::CUDNN_TYPE_HEUR_MODE,
                    1,
                    (&mode as *const sys::cudnnBackendHeurMode_t).cast(),
                )
            }?;
            if heur.finalize().is_err() {
                // A mode this cuDNN or this graph does not support: the others still count.
                continue;
            }
            // Every configuration this mode ranks, then the first eligible ones: in fp32 the
            // tensor-core engines rank first, and the FMA engines come after them.
            let total = heur
                .count(
                    A::CUDNN_ATTR_ENGINEHEUR_RESULTS,
                    T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                )
                .unwrap_or(MAX_CANDIDATES)
                .clamp(MAX_CANDIDATES, MAX_HEURISTIC_RESULTS);
            let mut got = (0..total)
                .map(|_| Desc::new(D::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))
                .collect::<Result<Vec<_>, _>>()?;
            let n = heur
                .get_descs(A::CUDNN_ATTR_ENGINEHEUR_RESULTS, &got)
                .unwrap_or(0);
            got.truncate(n);
            cfgs.extend(
                got.into_iter()
                    .filter(|c| tensor_cores || !uses_tensor_cores(c).unwrap_or(true))
                    .take(MAX_CANDIDATES),
            );
            parts.push(heur);
        }
        parts.extend(ops);
        parts.extend(fused);
        parts.extend([op, conv, x, w, y]);
        parts.extend(conv_out);
        Ok(ConvGraph {
            cfgs,
            key: graph_key(g, epilogue, search, tensor_cores),
            _parts: parts,
        })
    }

    /// Eligible engine configurations the heuristics returned (at most [`MAX_CANDIDATES`]
    /// per mode).
    pub fn candidates(&self) -> usize {
        self.cfgs.len()
    }

    /// Whether candidate `i` uses tensor cores or converts its inputs down.
    ///
    /// # Errors
    /// [`CudnnError`].
    pub fn uses_tensor_cores(&self, i: usize) -> Result<bool, CudnnError> {
        uses_tensor_cores(&self.cfgs[i])
    }

    /// The execution plan of candidate `i` on `handle` (the graph's handle). With a `cache`,
    /// a plan serialised there for the same graph, rank and engine is deserialised instead of
    /// finalised (no kernel compiled); one cuDNN refuses is dropped from the cache and built
    /// afresh; a freshly finalised plan cuDNN serialises is added to it.
    ///
    /// # Errors
    /// [`CudnnError`]: the configuration does not finalise for this geometry.
    pub fn plan(
        &self,
        handle: &Handle,
        i: usize,
        cache: Option<&PlanCache>,
    ) -> Result<ConvPlan, CudnnError> {
        // The configuration's engine: part of the key, and checked on what is deserialised.
        let engine = cache.and_then(|_| engine_index(&self.cfgs[i]).ok());
        let key = engine.map(|e| self.cache_key(i, e));
        if let (Some(c), Some(k)) = (cache, &key)
            && let Some(text) = c.get(k)
        {
            match ConvPlan::deserialize(handle, &text) {
                Ok(mut plan) => {
                    let got = plan.engine_index().ok();
                    if got == engine {
                        c.record_hit(k);
                        plan.cache_key = key;
                        return Ok(plan);
                    }
                    log::debug!(
                        "cuDNN plan cache: {k}: deserialised engine {got:?}, not {engine:?}: built afresh"
                    );
                }
                Err(e) => {
                    log::debug!("cuDNN plan cache: {k}: not deserialised ({e}): built afresh");
                }
            }
            c.remove(k);
        }
        let mut plan = self.finalize(handle, i)?;
        if let (Some(c), Some(k)) = (cache, key) {
            // Engines cuDNN does not serialise refuse here (it documents serialisation for
            // runtime-compiled engines; in practice it serialises more).
            if let Ok(text) = plan.serialize()
                && c.insert(k.clone(), text)
            {
                plan.cache_key = Some(k);
            }
        }
        Ok(plan)
    }
}

impl ConvGraph {
    /// The plan-cache key of candidate `i`, whose engine is `engine`.
    fn cache_key(&self, i: usize, engine: i64) -> String {
        format!("{} rank={i} engine={engine}", self.key)
    }

    /// Candidate `i` finalised on `handle` (for a runtime-compiled engine: its kernel
    /// compiled).
    fn finalize(&self, handle: &Handle, i: usize) -> Result<ConvPlan, CudnnError> {
        let plan = Desc::new(D::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
        plan.set_handle(A::CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle)?;
        plan.set_descs(A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[&self.cfgs[i]])?;
        plan.finalize()?;
        ConvPlan::from_finalized(plan)
    }

    /// Put candidate `i`'s plan into `cache` without keeping it: finalised on `handle` (this
    /// graph's) and serialised, unless the cache holds it already. A later
    /// [`ConvGraph::plan`] of the same graph, rank and engine on another handle then
    /// deserialises it instead of compiling: the engine compiles a load's candidates on
    /// several threads this way, each with its own handle and graph, and measures them on
    /// one. A plan the cache holds already is claimed (kept from eviction for this load).
    /// Returns whether a plan was added.
    ///
    /// # Errors
    /// [`CudnnError`]: the configuration does not finalise, or cuDNN does not serialise it.
    pub fn compile_into(
        &self,
        handle: &Handle,
        i: usize,
        cache: &PlanCache,
    ) -> Result<bool, CudnnError> {
        let key = self.cache_key(i, engine_index(&self.cfgs[i])?);
        if cache.claim(&key) {
            return Ok(false);
        }
        let text = self.finalize(handle, i)?.serialize()?;
        Ok(cache.insert(key, text))
    }
}

/// What a [`ConvGraph`] is built from, as text: the geometry (shapes, paddings, strides,
/// dilations, operand alignments, storage type, layout), the epilogue (activation, output
/// and residual strides, alignments, bias type), the heuristics and whether tensor cores are
/// eligible. With a configuration's rank and engine it keys the plan in a [`PlanCache`].
pub fn graph_key(
    g: &ConvGeometry,
    epilogue: Option<FusedEpilogue>,
    search: Search,
    tensor_cores: bool,
) -> String {
    format!("{g:?} {epilogue:?} {search:?} tensor_cores={tensor_cores}")
}

/// The global index of an engine configuration's engine (`CUDNN_ATTR_ENGINE_GLOBAL_INDEX`).
fn engine_index(cfg: &Desc) -> Result<i64, CudnnError> {
    let engine = Desc::new(D::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?;
    cfg.get_descs(
        A::CUDNN_ATTR_ENGINECFG_ENGINE,
        std::slice::from_ref(&engine),
    )?;
    let mut index = -1i64;
    // SAFETY: one i64.
    unsafe {
        engine.get_raw(
            A::CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
            T::CUDNN_TYPE_INT64,
            1,
            (&mut index as *mut i64).cast(),
        )
    }?;
    Ok(index)
}

/// Whether an engine configuration uses tensor cores (TF32 for fp32 data) or converts its
/// inputs down: its engine's numerical notes.
fn uses_tensor_cores(cfg: &Desc) -> Result<bool, CudnnError> {
    let engine = Desc::new(D::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?;
    cfg.get_descs(
        A::CUDNN_ATTR_ENGINECFG_ENGINE,
        std::slice::from_ref(&engine),
    )?;
    // Read as plain integers: a note this build does not know must not become an invalid
    // Rust enum value.
    let mut notes = [u32::MAX; 16];
    // SAFETY: room for 16 enum values (4 bytes each).
    let count = unsafe {
        engine.get_raw(
            A::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
            T::CUDNN_TYPE_NUMERICAL_NOTE,
            notes.len(),
            notes.as_mut_ptr().cast(),
        )
    }?;
    let tc = sys::cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_TENSOR_CORE as u32;
    let down = sys::cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS as u32;
    Ok(notes[..count].iter().any(|&n| n == tc || n == down))
}

/// A finalised execution plan of one convolution.
pub struct ConvPlan {
    plan: Desc,
    /// Scratch bytes it needs.
    pub workspace: usize,
    /// Its key in the [`PlanCache`] it was deserialised from or added to.
    pub cache_key: Option<String>,
}

/// The addresses of one execution: x, w, y and the scratch.
pub struct VariantPack(Desc);

impl ConvPlan {
    fn from_finalized(plan: Desc) -> Result<Self, CudnnError> {
        let mut ws = 0i64;
        // SAFETY: one i64.
        unsafe {
            plan.get_raw(
                A::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                T::CUDNN_TYPE_INT64,
                1,
                (&mut ws as *mut i64).cast(),
            )
        }?;
        Ok(ConvPlan {
            plan,
            workspace: usize::try_from(ws).unwrap_or(usize::MAX),
            cache_key: None,
        })
    }

    /// The global index of the engine the plan runs.
    ///
    /// # Errors
    /// [`CudnnError`].
    pub fn engine_index(&self) -> Result<i64, CudnnError> {
        let cfg = Desc::new(D::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)?;
        self.plan.get_descs(
            A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
            std::slice::from_ref(&cfg),
        )?;
        engine_index(&cfg)
    }

    /// cuDNN's serialisation of the plan (`CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION`,
    /// text). cuDNN documents it for runtime-compiled engines (every fused plan); on the H200's
    /// cuDNN 9.14 most plain plans serialise too.
    ///
    /// # Errors
    /// [`CudnnError`]: cuDNN does not serialise this plan's engine.
    pub fn serialize(&self) -> Result<Vec<u8>, CudnnError> {
        let ty = T::CUDNN_TYPE_CHAR;
        let name = A::CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION;
        let n = self.plan.count(name, ty)?;
        let mut text = vec![0u8; n];
        // SAFETY: room for n chars.
        let got = unsafe { self.plan.get_raw(name, ty, n, text.as_mut_ptr().cast()) }?;
        // Kept exactly as cuDNN wrote it (a terminating NUL included, if it counts one):
        // deserialisation is handed the same bytes.
        text.truncate(got);
        if text.iter().all(|&b| b == 0) {
            return Err(CudnnError {
                call: "cudnnBackendGetAttribute(EXECUTION_PLAN_JSON_REPRESENTATION)",
                status: 0,
                name: "empty serialisation",
            });
        }
        Ok(text)
    }

    /// The plan `text` ([`ConvPlan::serialize`]) describes, on `handle` (of a GPU identical
    /// to the one it was built on: the caller's [`PlanCache`] identity).
    ///
    /// # Errors
    /// [`CudnnError`]: cuDNN refused the text.
    pub fn deserialize(handle: &Handle, text: &[u8]) -> Result<Self, CudnnError> {
        let plan = Desc::new(D::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
        // SAFETY: text.len() chars.
        unsafe {
            plan.set_raw(
                A::CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                T::CUDNN_TYPE_CHAR,
                text.len(),
                text.as_ptr().cast(),
            )
        }?;
        plan.set_handle(A::CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle)?;
        plan.finalize()?;
        Self::from_finalized(plan)
    }

    /// Bind addresses (device pointers of the operands and of `workspace` scratch bytes).
    ///
    /// # Errors
    /// [`CudnnError`].
    pub fn variant_pack(&self, x: u64, w: u64, y: u64, ws: u64) -> Result<VariantPack, CudnnError> {
        Self::pack(&[UID_X, UID_W, UID_Y], &[x, w, y], ws)
    }

    /// As [`ConvPlan::variant_pack`] for a plan of [`ConvGraph::new_fused`]: `b` is the
    /// bias, `[k]` values of the storage type or fp32 ([`FusedEpilogue::bias_f32`]); `r` the
    /// residual when the epilogue has one.
    ///
    /// # Errors
    /// [`CudnnError`].
    pub fn variant_pack_fused(
        &self,
        x: u64,
        w: u64,
        b: u64,
        r: Option<u64>,
        y: u64,
        ws: u64,
    ) -> Result<VariantPack, CudnnError> {
        match r {
            Some(r) => Self::pack(&[UID_X, UID_W, UID_B, UID_R, UID_Y], &[x, w, b, r, y], ws),
            None => Self::pack(&[UID_X, UID_W, UID_B, UID_Y], &[x, w, b, y], ws),
        }
    }

    fn pack(uids: &[i64], addrs: &[u64], ws: u64) -> Result<VariantPack, CudnnError> {
        let p = Desc::new(D::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
        p.set_i64s(A::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids)?;
        let ptrs: Vec<*mut c_void> = addrs.iter().map(|&a| a as *mut c_void).collect();
        let wsp = ws as *mut c_void;
        // SAFETY: ptrs.len() pointers (one per uid), then one.
        unsafe {
            p.set_raw(
                A::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                T::CUDNN_TYPE_VOID_PTR,
                ptrs.len(),
                ptrs.as_ptr().cast(),
            )?;
            p.set_raw(
                A::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                T::CUDNN_TYPE_VOID_PTR,
                1,
                (&wsp as *const *mut c_void).cast(),
            )?;
        }
        p.finalize()?;
        Ok(VariantPack(p))
    }

    /// Enqueue the convolution on the handle's stream.
    ///
    /// # Safety
    /// The pack's addresses are live device buffers of the geometry's sizes (the scratch of
    /// [`ConvPlan::workspace`] bytes) until the work completes (every replay, when captured);
    /// `handle` is the one the plan was built with.
    ///
    /// # Errors
    /// [`CudnnError`].
    #[inline]
    pub unsafe fn execute(&self, handle: &Handle, pack: &VariantPack) -> Result<(), CudnnError> {
        // SAFETY: the caller's contract.
        check("cudnnBackendExecute", unsafe {
            sys::cudnnBackendExecute(handle.raw(), self.plan.0, pack.0.0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3x3 fp16 channels-last convolution 16 -> 32 at 20x20, packed operands.
    fn geometry() -> ConvGeometry {
        ConvGeometry {
            x: [1, 16, 20, 20],
            w: [32, 16, 3, 3],
            y: [1, 32, 20, 20],
            pre: [1, 1],
            post: [1, 1],
            strides: [1, 1],
            dilations: [1, 1],
            align: [16, 16, 16],
            half: true,
            channels_last: true,
            pitch: [16, 32],
        }
    }

    /// Channels-last strides: packed is the pitch equal to the channels; a slice of channels
    /// of a 48-channel buffer steps 48 elements per pixel; NCHW ignores the pitch.
    #[test]
    fn pitched_strides() {
        let d = [1, 16, 4, 5];
        assert_eq!(packed(d, true), [320, 1, 80, 16]);
        assert_eq!(pitched(d, 48), [960, 1, 240, 48]);
        let mut g = ConvGeometry {
            x: d,
            w: [8, 16, 3, 3],
            y: [1, 8, 4, 5],
            pitch: [48, 8],
            ..geometry()
        };
        assert_eq!(activation_strides(&g, 0), [960, 1, 240, 48]);
        assert_eq!(activation_strides(&g, 1), [160, 1, 40, 8]);
        g.channels_last = false;
        assert_eq!(activation_strides(&g, 0), [320, 20, 5, 1]);
    }

    /// Every input of [`ConvGraph::build`] changes the plan-cache key: a plan is never
    /// deserialised for a graph it was not built from.
    #[test]
    fn every_graph_input_is_in_the_cache_key() {
        let g = geometry();
        let e = FusedEpilogue::bias_act(FusedAct::Silu);
        let mut geos = vec![g];
        let mut edit = |f: &dyn Fn(&mut ConvGeometry)| {
            let mut v = g;
            f(&mut v);
            geos.push(v);
        };
        edit(&|v| v.x[1] = 8);
        edit(&|v| v.w[1] = 8);
        edit(&|v| v.y[2] = 10);
        edit(&|v| v.pre[0] = 0);
        edit(&|v| v.post[1] = 0);
        edit(&|v| v.strides[0] = 2);
        edit(&|v| v.dilations[1] = 2);
        edit(&|v| v.align[0] = 8);
        edit(&|v| v.align[1] = 4);
        edit(&|v| v.align[2] = 2);
        edit(&|v| v.half = false);
        edit(&|v| v.channels_last = false);
        edit(&|v| v.pitch[0] = 48);
        edit(&|v| v.pitch[1] = 64);
        let epis = [
            None,
            Some(e),
            Some(FusedEpilogue::bias_act(FusedAct::Identity)),
            Some(FusedEpilogue {
                y_strides: Some([25600, 1, 1280, 64]),
                ..e
            }),
            Some(FusedEpilogue {
                residual: Some([12800, 1, 640, 32]),
                ..e
            }),
            Some(FusedEpilogue {
                align: [8, 16],
                ..e
            }),
            Some(FusedEpilogue {
                align: [16, 8],
                ..e
            }),
            Some(FusedEpilogue {
                bias_f32: !e.bias_f32,
                ..e
            }),
        ];
        let mut keys = std::collections::HashSet::new();
        let mut n = 0;
        for geo in &geos {
            for epi in epis {
                for search in [Search::Heuristics, Search::Wide] {
                    for tc in [false, true] {
                        keys.insert(graph_key(geo, epi, search, tc));
                        n += 1;
                    }
                }
            }
        }
        assert_eq!(keys.len(), n, "two different graphs share a key");
    }
}
