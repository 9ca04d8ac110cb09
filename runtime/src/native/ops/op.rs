//! What every operator provides, and what the stages give it to work with.
//!
//! An operator is one step kind of the IR: its data (the tensors it reads and writes, its
//! parameters) and everything the stages need to know about it, in one file of
//! [`crate::native::ops`]. [`Op`] is the contract; the registry (`ops/mod.rs`) lists every
//! operator once and dispatches to them, so a new operator that leaves out part of the
//! contract does not compile.

use std::sync::Arc;

use tract_onnx::prelude::{OutletId, TypedNode};
use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::native::ir::error::LowerError;
use crate::native::ir::{BufferId, BufferKind, ElemType, Tensor, TensorId, Views};

/// One operator of the engine (a step kind of the IR).
pub trait Op: Clone + std::fmt::Debug + PartialEq {
    /// Short name of the step kind (plan dumps, step profiles).
    const NAME: &'static str;

    /// Tensors the step reads.
    fn reads(&self) -> Vec<TensorId>;

    /// The tensor the step writes.
    fn writes(&self) -> TensorId;

    /// Every operand of the step, for the passes that rewrite operands: `f(operand,
    /// written)`, `written` true for the tensor the step writes.
    fn operands_mut(&mut self, f: &mut dyn FnMut(&mut TensorId, bool));

    /// The step's own invariants over the graph's tensors (operand shapes, element types,
    /// layouts), beyond what every step obeys.
    ///
    /// # Errors
    /// A description of the violation (a bug in the front end or a pass).
    fn check(&self, g: &dyn Views) -> Result<(), String>;

    /// The library the step runs through, if any (cuDNN and cuBLAS steps get scratch,
    /// handles and descriptors from the executor).
    const USES: Uses;

    /// The kernels of `runtime/kernels/native.cu` this operator launches, each with its host
    /// emulation (empty for a library step).
    const KERNELS: &'static [Kernel];

    /// Run the step on the host reference executor's memory: plain loops, the formulas of
    /// the kernels (or of the library's documented semantics).
    ///
    /// # Errors
    /// A description when the step's data is out of range (an index past its axis).
    fn reference(&self, mem: &mut dyn HostMemory) -> Result<(), String>;

    /// What the step enqueues with its tensors at `addr` (device addresses on the GPU, host
    /// addresses in the emulator): one kernel with its parameters, a block copy, or a library
    /// call. `node` names the step in errors.
    ///
    /// # Errors
    /// [`ParamError`] when the step does not fit the kernels' 32-bit index space or rank.
    fn call(
        &self,
        g: &dyn Views,
        node: &str,
        addr: &dyn Fn(TensorId) -> u64,
    ) -> Result<Call, ParamError>;
}

/// The library a step runs through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Uses {
    /// Kernels of `native.cu` only.
    Kernels,
    /// A cuDNN convolution (forward or transposed): cuDNN descriptors, an algorithm measured
    /// at load, scratch on its stream.
    CudnnConvolution,
    /// A cuDNN pooling: descriptors, no scratch.
    CudnnPooling,
    /// cuBLAS: a workspace on its stream.
    Cublas,
}

/// The check of a step run by cuDNN, cuBLAS or a kernel over one floating-point type
/// (convolutions, poolings, matrix products, softmax, reductions): every operand of one float
/// element type.
///
/// # Errors
/// A description naming the step kind `what`.
pub fn one_float_type(
    g: &dyn Views,
    what: &str,
    reads: &[TensorId],
    write: TensorId,
) -> Result<(), String> {
    let mut types = reads.iter().chain(std::iter::once(&write));
    let first = g.tensor(*types.next().expect("a step reads")).dtype;
    if !first.is_float() || types.any(|&t| g.tensor(t).dtype != first) {
        return Err(format!("{what} over mixed or non-float types"));
    }
    Ok(())
}

/// cuDNN is told exactly one layout per convolution or pooling: packed NCHW (KCRS filter),
/// or with `channels_last` NHWC activations, packed or with a pixel pitch, and a packed KRSC
/// filter. Checks `activations` and `filter` fit it.
///
/// # Errors
/// The first operand that does not.
pub fn cudnn_layout(
    g: &dyn Views,
    activations: &[TensorId],
    filter: Option<TensorId>,
    channels_last: bool,
) -> Result<(), String> {
    let operands = activations
        .iter()
        .map(|&t| (t, true))
        .chain(filter.map(|t| (t, false)));
    let fits = |(t, activation): (TensorId, bool)| {
        let t = g.tensor(t);
        match (channels_last, activation) {
            (true, true) => t.nhwc_pitch().is_some(),
            (true, false) => t.is_packed_nhwc(),
            (false, _) => t.is_packed(),
        }
    };
    if let Some((t, _)) = operands.into_iter().find(|&o| !fits(o)) {
        let t = g.tensor(t);
        return Err(format!(
            "{} operand `{}` {:?} has strides {:?}",
            if channels_last {
                "channels-last"
            } else {
                "NCHW"
            },
            t.name,
            t.shape,
            t.strides
        ));
    }
    Ok(())
}

/// True for the element types of indices (`i32`, `i64`).
pub fn is_index(dt: ElemType) -> bool {
    matches!(dt, ElemType::I32 | ElemType::I64)
}

/// The IR element type of a tract datum type.
pub fn elem_type(dt: tract_onnx::prelude::DatumType) -> Option<ElemType> {
    use tract_onnx::prelude::DatumType;
    Some(match dt {
        DatumType::F32 => ElemType::F32,
        DatumType::F16 => ElemType::F16,
        DatumType::I32 => ElemType::I32,
        DatumType::I64 => ElemType::I64,
        DatumType::U8 => ElemType::U8,
        DatumType::I8 => ElemType::I8,
        DatumType::Bool => ElemType::Bool,
        _ => return None,
    })
}

/// What an operator's lowering works with: the network being lowered (its tract model, the
/// graph built so far) as the front end ([`crate::native::front`]) holds it. An operator's
/// `lower` function is generic over it, with the step type `Step` convertible from every
/// operator it pushes.
pub trait Lower: Views {
    /// The graph's step kind (the registry's [`crate::native::ops::StepKind`]).
    type Step;

    /// The tensor of `outlet`; a constant becomes a weight buffer the first time it is asked
    /// for.
    ///
    /// # Errors
    /// [`LowerError`] when the outlet is not lowered yet or its constant has a type the
    /// engine does not hold.
    fn outlet(&mut self, outlet: OutletId) -> Result<TensorId, LowerError>;

    /// The constant value of `outlet`: tract's fact, or a value folded at load.
    fn konst(&self, outlet: OutletId) -> Option<Arc<tract_onnx::prelude::Tensor>>;

    /// The value of `outlet` when it is a one-element f32 or f16 constant.
    fn scalar_const(&self, outlet: OutletId) -> Option<f32>;

    /// Shape and element type of output `slot` of `node`.
    ///
    /// # Errors
    /// [`LowerError::Unsupported`] for a symbolic shape or a type the engine does not hold.
    fn output_fact(
        &self,
        node: &TypedNode,
        slot: usize,
    ) -> Result<(Vec<usize>, ElemType), LowerError>;

    /// A fresh packed activation for output `slot` of `node`, mapped as that outlet.
    ///
    /// # Errors
    /// As [`Lower::output_fact`].
    fn new_output(&mut self, node: &TypedNode, slot: usize) -> Result<TensorId, LowerError>;

    /// Map output `slot` of `node` onto tensor `t`.
    fn set_output(&mut self, node: &TypedNode, slot: usize, t: TensorId);

    /// Append a step named after `node`.
    fn push(&mut self, node: &TypedNode, step: Self::Step);

    /// A new view of `of`'s buffer.
    fn view(
        &mut self,
        of: TensorId,
        name: String,
        shape: Vec<usize>,
        offset: usize,
        strides: Vec<isize>,
    ) -> TensorId;

    /// A packed version of `t`: `t` itself when its view is packed, else a copy (made once)
    /// named after `node`.
    fn packed(&mut self, t: TensorId, node: &str) -> TensorId;

    /// `t` broadcast to `shape` (same rank; dimensions of 1 get stride 0).
    ///
    /// # Errors
    /// [`LowerError::Unsupported`] when the shapes do not broadcast.
    fn broadcast_to(
        &mut self,
        t: TensorId,
        shape: &[usize],
        node: &TypedNode,
    ) -> Result<TensorId, LowerError>;

    /// Input `slot` of `node`, refused unless it is f32 or f16.
    ///
    /// # Errors
    /// [`LowerError::Unsupported`] naming the input's type.
    fn float_input(&mut self, node: &TypedNode, slot: usize) -> Result<TensorId, LowerError>;

    /// Add a buffer.
    fn add_buffer(
        &mut self,
        name: String,
        dtype: ElemType,
        len: usize,
        kind: BufferKind,
    ) -> BufferId;

    /// Add a packed tensor over a new buffer of its size.
    fn add_packed(
        &mut self,
        name: impl Into<String>,
        dtype: ElemType,
        shape: &[usize],
        kind: BufferKind,
    ) -> TensorId;

    /// Add a view.
    fn add_view(&mut self, t: Tensor) -> TensorId;
}

/// The refusal of `node`: an operator or attribute the engine does not lower.
pub fn unsupported(node: &TypedNode, detail: impl Into<String>) -> LowerError {
    LowerError::Unsupported {
        node: node.name.clone(),
        op: node.op.name().to_string(),
        detail: detail.into(),
    }
}

/// Rank of the kernels' index space (after collapsing, [`collapse`]).
pub const KERNEL_RANK: usize = 8;

/// Most bytes of one kernel's parameter struct ([`ParamBlock`]; the largest is
/// `ew_program`'s, 752).
pub const PARAM_BYTES: usize = 768;

/// A kernel's parameter struct as bytes: every kernel of `native.cu` takes one `#[repr(C)]`
/// struct by value, mirrored field for field in the CUDA source (sizes asserted on both
/// sides). Aligned for any field type the structs hold.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
pub struct ParamBlock {
    bytes: [u8; PARAM_BYTES],
    len: usize,
}

impl ParamBlock {
    /// The bytes of parameter struct `p`.
    pub fn of<T: IntoBytes + Immutable>(p: &T) -> ParamBlock {
        const { assert!(std::mem::size_of::<T>() <= PARAM_BYTES) };
        let b = p.as_bytes();
        let mut bytes = [0u8; PARAM_BYTES];
        bytes[..b.len()].copy_from_slice(b);
        ParamBlock {
            bytes,
            len: b.len(),
        }
    }

    /// The parameter struct back, when it is a `T` (its size).
    pub fn get<T: FromBytes>(&self) -> Option<T> {
        T::read_from_bytes(&self.bytes[..self.len]).ok()
    }

    /// The struct's bytes (what the launch passes by value).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Address of the struct, for `cuLaunchKernel`'s parameter array.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.bytes.as_mut_ptr()
    }
}

impl std::fmt::Debug for ParamBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ParamBlock({} bytes)", self.len)
    }
}

/// One launch of a kernel of `native.cu`.
#[derive(Clone, Copy, Debug)]
pub struct KernelCall {
    /// The kernel's name in the module (one of the operators' [`Op::KERNELS`]).
    pub kernel: &'static str,
    /// Blocks.
    pub grid: [u32; 3],
    /// Threads per block.
    pub block: [u32; 3],
    /// Its one parameter struct.
    pub params: ParamBlock,
}

impl KernelCall {
    /// A grid-stride launch of `kernel` over `grid` blocks of 256 threads.
    pub fn linear<T: IntoBytes + Immutable>(kernel: &'static str, grid: u32, p: &T) -> Self {
        KernelCall {
            kernel,
            grid: [grid, 1, 1],
            block: [256, 1, 1],
            params: ParamBlock::of(p),
        }
    }
}

/// A kernel of `native.cu` and its host emulation: a line-for-line transcription of the CUDA
/// code over [`DeviceMemory`] (what proves parameters and addressing without a GPU).
#[derive(Clone, Copy)]
pub struct Kernel {
    /// The kernel's name in the module.
    pub name: &'static str,
    /// Run one launch of it on emulated device memory.
    pub emulate: fn(&KernelCall, &dyn DeviceMemory) -> Result<(), String>,
}

/// The BLAS arguments of a matrix product: one column-major `cublasGemmStridedBatchedEx`
/// (made by [`crate::native::ops::gemm::blas_gemm`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlasGemm {
    /// The IR's `b` is BLAS's first operand (`C' = c^T`).
    pub swapped: bool,
    /// `op(A')` is the transpose.
    pub trans_a: bool,
    /// `op(B')` is the transpose.
    pub trans_b: bool,
    /// Rows of `C'`.
    pub m: i32,
    /// Columns of `C'`.
    pub n: i32,
    /// Contracted length.
    pub k: i32,
    /// Leading dimension of `A'`.
    pub lda: i32,
    /// Leading dimension of `B'`.
    pub ldb: i32,
    /// Leading dimension of `C'`.
    pub ldc: i32,
    /// Batch strides (elements) of `A'`, `B'`, `C'`.
    pub stride_a: i64,
    /// See `stride_a`.
    pub stride_b: i64,
    /// See `stride_a`.
    pub stride_c: i64,
    /// Batch count.
    pub batch: i32,
}

/// A library call a step makes, with its operands' addresses (the executor adds what it
/// chose at load: descriptors, algorithm, scratch).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Library {
    /// cuDNN forward convolution of `x` with `w` into `y`.
    Convolution {
        /// Input.
        x: u64,
        /// Filter.
        w: u64,
        /// Output.
        y: u64,
    },
    /// cuDNN backward data (a transposed convolution) of `x` with forward filter `w` into `y`.
    TransposedConvolution {
        /// Input (cuDNN's `dy`).
        x: u64,
        /// Forward filter.
        w: u64,
        /// Output (cuDNN's `dx`).
        y: u64,
    },
    /// cuDNN pooling of `x` into `y`.
    Pooling {
        /// Input.
        x: u64,
        /// Output.
        y: u64,
    },
    /// cuBLAS strided-batched matrix product.
    Gemm {
        /// The BLAS arguments.
        p: BlasGemm,
        /// Storage type of all three operands.
        dtype: ElemType,
        /// BLAS's first operand (the IR's `b` when `p.swapped`).
        a: u64,
        /// BLAS's second operand.
        b: u64,
        /// Result.
        c: u64,
    },
}

/// What one step enqueues.
#[allow(
    clippy::large_enum_variant,
    reason = "built once per step at bind and moved into the launch list; a kernel's parameter block is the common case, boxing it would allocate per step"
)]
#[derive(Clone, Copy, Debug)]
pub enum Call {
    /// One kernel of `native.cu`.
    Kernel(KernelCall),
    /// `cuMemcpyDtoDAsync`: `bytes` from `src` to `dst`.
    Memcpy {
        /// Destination.
        dst: u64,
        /// Source.
        src: u64,
        /// Bytes.
        bytes: usize,
    },
    /// A cuDNN or cuBLAS call.
    Library(Library),
}

/// Why a step cannot be expressed as kernel parameters (load time only).
#[derive(Debug, thiserror::Error)]
#[error("step `{step}`: {detail}")]
pub struct ParamError {
    /// The step's node.
    pub step: String,
    /// What does not fit (index ranges, rank, program size).
    pub detail: String,
}

/// `v` as a kernel's 32-bit count, or a [`ParamError`] naming `what` of step `step`.
///
/// # Errors
/// [`ParamError`] when `v` exceeds `u32`.
pub fn to_u32(v: usize, what: &str, step: &str) -> Result<u32, ParamError> {
    u32::try_from(v).map_err(|_| ParamError {
        step: step.into(),
        detail: format!("{what} {v} exceeds the kernels' 32-bit index range"),
    })
}

/// A stride as the kernels' 32-bit one.
///
/// # Errors
/// [`ParamError`] when `v` exceeds `i32`.
pub fn to_i32(v: isize, step: &str) -> Result<i32, ParamError> {
    i32::try_from(v).map_err(|_| ParamError {
        step: step.into(),
        detail: format!("stride {v} exceeds the kernels' 32-bit range"),
    })
}

/// Grid size for a grid-stride kernel over `n` elements with 256-thread blocks.
pub fn grid_for(n: u32) -> u32 {
    n.div_ceil(256).clamp(1, 65_535)
}

/// The element type code the kernels use (`enum dtype` of `native.cu`).
pub fn dtype_code(dt: ElemType) -> u32 {
    dt as u32
}

/// Collapse an index space: drop dimensions of size 1, order the rest by the first
/// operand's strides (largest first, so that consecutive threads write consecutive elements
/// of the first operand, the one written: an NHWC output is walked channels-innermost
/// whatever the logical `[N, C, H, W]` order; a kernel over this space computes each element
/// independently, so the order is free), and merge adjacent dimensions that every operand
/// walks contiguously (`stride[i] == stride[i + 1] * shape[i + 1]`). Returns the collapsed
/// shape (at least one dimension) and each operand's strides.
pub fn collapse(shape: &[usize], operands: &[&[isize]]) -> (Vec<usize>, Vec<Vec<isize>>) {
    let mut keep: Vec<usize> = (0..shape.len()).filter(|&i| shape[i] != 1).collect();
    if let Some(first) = operands.first() {
        // Stable: equal strides (broadcast or aliasing) keep the logical order.
        keep.sort_by_key(|&i| std::cmp::Reverse(first[i].unsigned_abs()));
    }
    let mut dims: Vec<usize> = Vec::new();
    let mut strides: Vec<Vec<isize>> = vec![Vec::new(); operands.len()];
    for &i in &keep {
        let merge = !dims.is_empty()
            && operands.iter().enumerate().all(|(k, s)| {
                let prev = *strides[k].last().expect("non-empty");
                prev == s[i] * shape[i] as isize
            });
        if merge {
            let last = dims.len() - 1;
            dims[last] *= shape[i];
            for (k, s) in operands.iter().enumerate() {
                let l = strides[k].len() - 1;
                strides[k][l] = s[i];
            }
        } else {
            dims.push(shape[i]);
            for (k, s) in operands.iter().enumerate() {
                strides[k].push(s[i]);
            }
        }
    }
    if dims.is_empty() {
        dims.push(1);
        for s in &mut strides {
            s.push(0);
        }
    }
    (dims, strides)
}

/// Host memory of the reference executor as an operator's host reference sees it: every
/// tensor read and written through its view (shape, offset, strides) in the buffers laid out
/// by the memory plan.
pub trait HostMemory {
    /// The graph's tensors.
    fn views(&self) -> &dyn Views;

    /// The elements of `t` in row-major order of its shape, as fp32.
    fn read(&self, t: TensorId) -> Vec<f32>;

    /// Store `values` (row-major order of `t`'s shape) into `t`, converted to its type.
    fn write(&mut self, t: TensorId, values: &[f32]);

    /// The raw elements of `t` in row-major order of its shape.
    fn read_raw(&self, t: TensorId) -> Vec<u8>;

    /// Store raw elements (row-major order of `t`'s shape) into `t`.
    fn write_raw(&mut self, t: TensorId, bytes: &[u8]);

    /// The element `offset` elements from `t`'s element 0, as fp32.
    fn load(&self, t: TensorId, offset: isize) -> f32;

    /// Store `v` at `offset` elements from `t`'s element 0.
    fn store(&mut self, t: TensorId, offset: isize, v: f32);
}

/// Emulated device memory: every access checked to lie inside one region (an access
/// outside is an error, as it would be a fault or a corruption on the GPU).
pub trait DeviceMemory {
    /// The element `index` elements from `base`, of kernel type code `dtype`, as fp32.
    ///
    /// # Errors
    /// An access outside every region, an unknown type code.
    fn load(&self, base: u64, index: i64, dtype: u32) -> Result<f32, String>;

    /// Store `v` as the element `index` elements from `base`, of type code `dtype`.
    ///
    /// # Errors
    /// As [`DeviceMemory::load`].
    fn store(&self, base: u64, index: i64, dtype: u32, v: f32) -> Result<(), String>;

    /// Read `out.len()` bytes at `addr`.
    ///
    /// # Errors
    /// An access outside every region.
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), String>;

    /// Write `bytes` at `addr`.
    ///
    /// # Errors
    /// An access outside every region.
    fn write(&self, addr: u64, bytes: &[u8]) -> Result<(), String>;
}

/// The parameter struct of `call` as a `T` (its size), for the kernel's emulation.
///
/// # Errors
/// A description when the launch carries another struct.
pub fn params<T: FromBytes>(call: &KernelCall) -> Result<T, String> {
    call.params.get().ok_or_else(|| {
        format!(
            "kernel `{}`: {} bytes of parameters, not a {}",
            call.kernel,
            call.params.bytes().len(),
            std::any::type_name::<T>()
        )
    })
}

/// `v` as a 32-bit launch dimension of step `node`.
///
/// # Errors
/// [`ParamError`] when `v` exceeds `u32`.
pub fn count(v: usize, node: &str) -> Result<u32, ParamError> {
    u32::try_from(v).map_err(|_| ParamError {
        step: node.into(),
        detail: format!("{v} too large"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collapse_merges_contiguous_runs_and_drops_unit_dims() {
        // Bias add over [1, 16, 80, 80]: output packed, bias [1, 16, 1, 1] broadcast.
        let (shape, s) = collapse(&[1, 16, 80, 80], &[&[102_400, 6400, 80, 1], &[0, 1, 0, 0]]);
        assert_eq!(shape, vec![16, 6400]);
        assert_eq!(s, vec![vec![6400, 1], vec![1, 0]]);
        // Fully packed operands collapse to one dimension.
        let (shape, s) = collapse(&[2, 3, 4], &[&[12, 4, 1], &[12, 4, 1]]);
        assert_eq!(shape, vec![24]);
        assert_eq!(s, vec![vec![1], vec![1]]);
        // A scalar.
        let (shape, _) = collapse(&[1, 1], &[&[1, 1]]);
        assert_eq!(shape, vec![1]);
        // NHWC output and input over logical [1, 16, 8, 8]: walked channels-innermost, one
        // packed run; the per-channel bias becomes the innermost, repeating dimension.
        let nhwc: &[isize] = &[1024, 1, 128, 16];
        let (shape, s) = collapse(&[1, 16, 8, 8], &[nhwc, nhwc, &[0, 1, 0, 0]]);
        assert_eq!(shape, vec![64, 16]);
        assert_eq!(s, vec![vec![16, 1], vec![16, 1], vec![0, 1]]);
        // NHWC into NCHW (the head's conversion): the NCHW destination is walked in order.
        let (shape, s) = collapse(&[1, 16, 8, 8], &[&[1024, 64, 8, 1], nhwc]);
        assert_eq!(shape, vec![16, 64]);
        assert_eq!(s, vec![vec![64, 1], vec![1, 16]]);
    }
}
