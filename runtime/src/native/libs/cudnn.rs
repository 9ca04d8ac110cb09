//! cuDNN, thinly: a handle and the descriptors of one convolution or pooling, each freed on
//! drop, and the calls the engine makes (legacy API: `cudnnConvolutionForward`,
//! `cudnnPoolingForward`, algorithm search with `cudnnFindConvolutionForwardAlgorithmEx`).
//!
//! Every call goes through `cudarc::cudnn::sys` after [`crate::native::libs::load::cudnn`] has loaded and
//! checked the library (cuDNN 9). Errors are [`CudnnError`]: the call and cuDNN's status
//! code, `Copy`, so a failing enqueue does not allocate.

use std::ffi::c_void;

use cudarc::cudnn::sys;

use crate::native::ir::ElemType;

/// A cuDNN call that did not return `CUDNN_STATUS_SUCCESS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudnnError {
    /// The entry point.
    pub call: &'static str,
    /// The status code (`cudnnStatus_t`).
    pub status: u32,
    /// cuDNN's name for it (`cudnnGetErrorString`, a static string of the library).
    pub name: &'static str,
}

impl std::fmt::Display for CudnnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {} ({})", self.call, self.name, self.status)?;
        if self.name.contains("SUBLIBRARY_VERSION_MISMATCH") {
            // cuDNN 9 loads libcudnn_{graph,ops,cnn,...}.so.9 by soname at first use: they came
            // from another installation than libcudnn itself (see `libs` for which was chosen).
            write!(
                f,
                "; two cuDNN installations are mixed (the main library and its sub-libraries \
                 differ in version): make LD_LIBRARY_PATH name the directory of the one \
                 `tether doctor` reports, or neither"
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for CudnnError {}

#[inline]
pub(super) fn check(call: &'static str, s: sys::cudnnStatus_t) -> Result<(), CudnnError> {
    if s == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        Ok(())
    } else {
        // SAFETY: cudnnGetErrorString returns a pointer to a static NUL-terminated string
        // owned by the library (loaded for the life of the process); no allocation.
        let name = unsafe {
            let p = sys::cudnnGetErrorString(s);
            if p.is_null() {
                "unknown cuDNN status"
            } else {
                std::ffi::CStr::from_ptr(p)
                    .to_str()
                    .unwrap_or("unknown cuDNN status")
            }
        };
        Err(CudnnError {
            call,
            status: s as u32,
            name,
        })
    }
}

/// cuDNN's data type for an element type.
pub fn data_type(dt: ElemType) -> Option<sys::cudnnDataType_t> {
    match dt {
        ElemType::F32 => Some(sys::cudnnDataType_t::CUDNN_DATA_FLOAT),
        ElemType::F16 => Some(sys::cudnnDataType_t::CUDNN_DATA_HALF),
        _ => None,
    }
}

/// A cuDNN handle (one per executor: a handle must not be used by two threads at once).
pub struct Handle(sys::cudnnHandle_t);

// SAFETY: the handle is only used through &mut self by its executor, from whichever thread
// owns the executor (cuDNN allows a handle on any thread, one thread at a time).
unsafe impl Send for Handle {}

impl Handle {
    /// Create a handle on the current context.
    ///
    /// # Errors
    /// [`CudnnError`].
    pub fn new() -> Result<Self, CudnnError> {
        let mut h: sys::cudnnHandle_t = std::ptr::null_mut();
        // SAFETY: the caller made the plan's context current; writes one handle.
        check("cudnnCreate", unsafe { sys::cudnnCreate(&mut h) })?;
        Ok(Handle(h))
    }

    /// The raw handle.
    pub fn raw(&self) -> sys::cudnnHandle_t {
        self.0
    }

    /// Enqueue this handle's work on `stream`.
    ///
    /// # Errors
    /// [`CudnnError`].
    #[inline]
    pub fn set_stream(&self, stream: cudarc::driver::sys::CUstream) -> Result<(), CudnnError> {
        // SAFETY: live handle and stream of the same context; CUstream and cudaStream_t are
        // the same object.
        check("cudnnSetStream", unsafe {
            sys::cudnnSetStream(self.0, stream as sys::cudaStream_t)
        })
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: created in new, destroyed once.
        unsafe { sys::cudnnDestroy(self.0) };
    }
}

/// A 4-D tensor descriptor: packed NCHW or NHWC, or explicit strides.
pub struct TensorDesc(sys::cudnnTensorDescriptor_t);

// SAFETY: plain host object, immutable after creation.
unsafe impl Send for TensorDesc {}
// SAFETY: as above.
unsafe impl Sync for TensorDesc {}

impl TensorDesc {
    /// `[n, c, h, w]` packed NCHW, or packed NHWC when `channels_last` (dimensions are given
    /// in NCHW order either way: `cudnnSetTensor4dDescriptor`'s format argument says the
    /// memory order).
    ///
    /// # Errors
    /// [`CudnnError`].
    pub fn new(
        dt: sys::cudnnDataType_t,
        dims: [i32; 4],
        channels_last: bool,
    ) -> Result<Self, CudnnError> {
        let this = Self::create()?;
        // SAFETY: live descriptor.
        check("cudnnSetTensor4dDescriptor", unsafe {
            sys::cudnnSetTensor4dDescriptor(
                this.0,
                format(channels_last),
                dt,
                dims[0],
                dims[1],
                dims[2],
                dims[3],
            )
        })?;
        Ok(this)
    }

    /// `[n, c, h, w]` (NCHW order) with explicit element `strides` per dimension
    /// (`cudnnSetTensor4dDescriptorEx`; cuDNN reads the memory order off the strides): a
    /// channels-last view with a pixel pitch, `[h * w * p, 1, w * p, p]`.
    ///
    /// # Errors
    /// [`CudnnError`], also for a stride that does not fit an `i32`.
    pub fn strided(
        dt: sys::cudnnDataType_t,
        dims: [i32; 4],
        strides: [i64; 4],
    ) -> Result<Self, CudnnError> {
        let s = strides.map(|v| i32::try_from(v).ok());
        let [Some(s0), Some(s1), Some(s2), Some(s3)] = s else {
            return Err(CudnnError {
                call: "cudnnSetTensor4dDescriptorEx",
                status: 0,
                name: "a stride does not fit an i32",
            });
        };
        let this = Self::create()?;
        // SAFETY: live descriptor.
        check("cudnnSetTensor4dDescriptorEx", unsafe {
            sys::cudnnSetTensor4dDescriptorEx(
                this.0, dt, dims[0], dims[1], dims[2], dims[3], s0, s1, s2, s3,
            )
        })?;
        Ok(this)
    }

    /// A fresh descriptor, destroyed on drop.
    fn create() -> Result<Self, CudnnError> {
        let mut d: sys::cudnnTensorDescriptor_t = std::ptr::null_mut();
        // SAFETY: writes one descriptor, destroyed in Drop.
        check("cudnnCreateTensorDescriptor", unsafe {
            sys::cudnnCreateTensorDescriptor(&mut d)
        })?;
        Ok(TensorDesc(d))
    }

    /// The raw descriptor.
    pub fn raw(&self) -> sys::cudnnTensorDescriptor_t {
        self.0
    }
}

impl Drop for TensorDesc {
    fn drop(&mut self) {
        // SAFETY: created in new, destroyed once.
        unsafe { sys::cudnnDestroyTensorDescriptor(self.0) };
    }
}

/// `CUDNN_TENSOR_NHWC` when `channels_last`, else `CUDNN_TENSOR_NCHW`.
fn format(channels_last: bool) -> sys::cudnnTensorFormat_t {
    if channels_last {
        sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC
    } else {
        sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW
    }
}

/// A packed KCRS (OIHW) or KRSC (OHWI) filter descriptor.
pub struct FilterDesc(sys::cudnnFilterDescriptor_t);

// SAFETY: plain host object, immutable after creation.
unsafe impl Send for FilterDesc {}
// SAFETY: as above.
unsafe impl Sync for FilterDesc {}

impl FilterDesc {
    /// `[k, c, r, s]` packed KCRS, or packed KRSC when `channels_last` (cuDNN's
    /// `CUDNN_TENSOR_NHWC` filter format).
    ///
    /// # Errors
    /// [`CudnnError`].
    pub fn new(
        dt: sys::cudnnDataType_t,
        dims: [i32; 4],
        channels_last: bool,
    ) -> Result<Self, CudnnError> {
        let mut d: sys::cudnnFilterDescriptor_t = std::ptr::null_mut();
        // SAFETY: writes one descriptor, destroyed in Drop.
        check("cudnnCreateFilterDescriptor", unsafe {
            sys::cudnnCreateFilterDescriptor(&mut d)
        })?;
        let this = FilterDesc(d);
        // SAFETY: live descriptor.
        check("cudnnSetFilter4dDescriptor", unsafe {
            sys::cudnnSetFilter4dDescriptor(
                d,
                dt,
                format(channels_last),
                dims[0],
                dims[1],
                dims[2],
                dims[3],
            )
        })?;
        Ok(this)
    }

    /// The raw descriptor.
    pub fn raw(&self) -> sys::cudnnFilterDescriptor_t {
        self.0
    }
}

impl Drop for FilterDesc {
    fn drop(&mut self) {
        // SAFETY: created in new, destroyed once.
        unsafe { sys::cudnnDestroyFilterDescriptor(self.0) };
    }
}

/// A 2-D cross-correlation descriptor.
pub struct ConvDesc(sys::cudnnConvolutionDescriptor_t);

// SAFETY: plain host object, immutable after creation.
unsafe impl Send for ConvDesc {}
// SAFETY: as above.
unsafe impl Sync for ConvDesc {}

/// Arithmetic of a convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvMath {
    /// fp32 FMA kernels only (no TF32 tensor cores).
    Fp32,
    /// fp32 storage, TF32 tensor cores allowed.
    Tf32,
    /// fp16 storage, fp32 accumulation, tensor cores.
    Fp16,
}

impl ConvDesc {
    /// Padding, stride and dilation per spatial axis (`[h, w]`), `group` groups.
    ///
    /// # Errors
    /// [`CudnnError`].
    pub fn new(
        pads: [i32; 2],
        strides: [i32; 2],
        dilations: [i32; 2],
        group: i32,
        math: ConvMath,
    ) -> Result<Self, CudnnError> {
        let mut d: sys::cudnnConvolutionDescriptor_t = std::ptr::null_mut();
        // SAFETY: writes one descriptor, destroyed in Drop.
        check("cudnnCreateConvolutionDescriptor", unsafe {
            sys::cudnnCreateConvolutionDescriptor(&mut d)
        })?;
        let this = ConvDesc(d);
        // Accumulation in fp32 in every mode (fp16 storage included: "pseudo-half").
        // SAFETY: live descriptor.
        check("cudnnSetConvolution2dDescriptor", unsafe {
            sys::cudnnSetConvolution2dDescriptor(
                d,
                pads[0],
                pads[1],
                strides[0],
                strides[1],
                dilations[0],
                dilations[1],
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
            )
        })?;
        // SAFETY: live descriptor.
        check("cudnnSetConvolutionGroupCount", unsafe {
            sys::cudnnSetConvolutionGroupCount(d, group)
        })?;
        let mt = match math {
            // FMA_MATH: "restricted to only kernels that use FMA instructions" (no TF32).
            ConvMath::Fp32 => sys::cudnnMathType_t::CUDNN_FMA_MATH,
            ConvMath::Tf32 => sys::cudnnMathType_t::CUDNN_DEFAULT_MATH,
            ConvMath::Fp16 => sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH,
        };
        // SAFETY: live descriptor.
        check("cudnnSetConvolutionMathType", unsafe {
            sys::cudnnSetConvolutionMathType(d, mt)
        })?;
        Ok(this)
    }

    /// The raw descriptor.
    pub fn raw(&self) -> sys::cudnnConvolutionDescriptor_t {
        self.0
    }

    /// The output `[n, c, h, w]` cuDNN computes for these descriptors.
    ///
    /// # Errors
    /// [`CudnnError`].
    pub fn output_dims(&self, x: &TensorDesc, w: &FilterDesc) -> Result<[i32; 4], CudnnError> {
        let mut o = [0i32; 4];
        let [a, b, c, d] = &mut o;
        // SAFETY: live descriptors; writes four ints.
        check("cudnnGetConvolution2dForwardOutputDim", unsafe {
            sys::cudnnGetConvolution2dForwardOutputDim(self.0, x.raw(), w.raw(), a, b, c, d)
        })?;
        Ok(o)
    }
}

impl Drop for ConvDesc {
    fn drop(&mut self) {
        // SAFETY: created in new, destroyed once.
        unsafe { sys::cudnnDestroyConvolutionDescriptor(self.0) };
    }
}

/// `cudnnConvolutionFwdAlgoPerf_t` with plain integer fields (same layout), so that an
/// algorithm or status value this build does not know is read as a number, not as an
/// invalid Rust enum.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct RawAlgoPerf {
    algo: u32,
    status: u32,
    time: f32,
    memory: usize,
    determinism: u32,
    math_type: u32,
    reserved: [i32; 3],
}

const _: () = assert!(
    std::mem::size_of::<RawAlgoPerf>() == std::mem::size_of::<sys::cudnnConvolutionFwdAlgoPerf_t>()
);

/// A chosen forward algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvAlgo {
    /// `cudnnConvolutionFwdAlgo_t` value (0..=7).
    pub algo: u32,
    /// Workspace it needs, bytes.
    pub workspace: usize,
    /// Measured time, microseconds (for the load log).
    pub time_us: u32,
}

/// Measure every forward algorithm on real buffers and pick the fastest that succeeds within
/// `workspace_limit` bytes (`cudnnFindConvolutionForwardAlgorithmEx`; cuDNN sorts by time).
///
/// # Safety
/// `x`, `w`, `y` are device buffers matching the descriptors, `scratch` holds
/// `workspace_limit` bytes; the handle's stream is idle or synchronised by the caller.
///
/// # Errors
/// [`CudnnError`]; `status` 0 with call `no algorithm` when none succeeded.
#[allow(clippy::too_many_arguments)]
pub unsafe fn find_algo(
    handle: &Handle,
    xd: &TensorDesc,
    x: u64,
    wd: &FilterDesc,
    w: u64,
    cd: &ConvDesc,
    yd: &TensorDesc,
    y: u64,
    scratch: u64,
    workspace_limit: usize,
) -> Result<ConvAlgo, CudnnError> {
    let mut perf = [RawAlgoPerf::default(); 8];
    let mut returned = 0i32;
    // SAFETY: the caller's contract; perf has room for the 8 forward algorithms and has the
    // layout of cudnnConvolutionFwdAlgoPerf_t (checked above).
    check("cudnnFindConvolutionForwardAlgorithmEx", unsafe {
        sys::cudnnFindConvolutionForwardAlgorithmEx(
            handle.raw(),
            xd.raw(),
            x as *const c_void,
            wd.raw(),
            w as *const c_void,
            cd.raw(),
            yd.raw(),
            y as *mut c_void,
            perf.len() as i32,
            &mut returned,
            perf.as_mut_ptr() as *mut sys::cudnnConvolutionFwdAlgoPerf_t,
            scratch as *mut c_void,
            workspace_limit,
        )
    })?;
    perf[..returned.clamp(0, 8) as usize]
        .iter()
        .find(|p| p.status == 0 && p.memory <= workspace_limit && p.algo < 8)
        .map(|p| ConvAlgo {
            algo: p.algo,
            workspace: p.memory,
            time_us: (p.time * 1000.0) as u32,
        })
        .ok_or(CudnnError {
            call: "cudnnFindConvolutionForwardAlgorithmEx",
            status: 0,
            name: "no algorithm succeeded within the workspace limit",
        })
}

/// The `cudnnConvolutionFwdAlgo_t` of a chosen algorithm number (0..=7).
pub fn fwd_algo(algo: u32) -> sys::cudnnConvolutionFwdAlgo_t {
    use sys::cudnnConvolutionFwdAlgo_t::*;
    match algo {
        0 => CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
        1 => CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
        2 => CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
        3 => CUDNN_CONVOLUTION_FWD_ALGO_DIRECT,
        4 => CUDNN_CONVOLUTION_FWD_ALGO_FFT,
        5 => CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
        6 => CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
        _ => CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
    }
}

/// Enqueue `y = conv(x, w)` on the handle's stream.
///
/// # Safety
/// Buffers match the descriptors and stay valid until the work completes (every replay, when
/// captured); `ws` holds `ws_bytes`.
///
/// # Errors
/// [`CudnnError`].
#[allow(clippy::too_many_arguments)]
#[inline]
pub unsafe fn conv_forward(
    handle: &Handle,
    xd: &TensorDesc,
    x: u64,
    wd: &FilterDesc,
    w: u64,
    cd: &ConvDesc,
    algo: sys::cudnnConvolutionFwdAlgo_t,
    ws: u64,
    ws_bytes: usize,
    yd: &TensorDesc,
    y: u64,
) -> Result<(), CudnnError> {
    // Scaling factors are fp32 for fp32 and fp16 data (cuDNN's rule).
    let (alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: the caller's contract; alpha and beta outlive the call (cuDNN reads them on the
    // host before returning).
    check("cudnnConvolutionForward", unsafe {
        sys::cudnnConvolutionForward(
            handle.raw(),
            &alpha as *const f32 as *const c_void,
            xd.raw(),
            x as *const c_void,
            wd.raw(),
            w as *const c_void,
            cd.raw(),
            algo,
            ws as *mut c_void,
            ws_bytes,
            &beta as *const f32 as *const c_void,
            yd.raw(),
            y as *mut c_void,
        )
    })
}

/// A 2-D pooling descriptor.
pub struct PoolDesc(sys::cudnnPoolingDescriptor_t);

// SAFETY: plain host object, immutable after creation.
unsafe impl Send for PoolDesc {}
// SAFETY: as above.
unsafe impl Sync for PoolDesc {}

impl PoolDesc {
    /// Window, symmetric padding and stride per spatial axis (`[h, w]`).
    ///
    /// # Errors
    /// [`CudnnError`].
    pub fn new(
        mode: sys::cudnnPoolingMode_t,
        window: [i32; 2],
        pads: [i32; 2],
        strides: [i32; 2],
    ) -> Result<Self, CudnnError> {
        let mut d: sys::cudnnPoolingDescriptor_t = std::ptr::null_mut();
        // SAFETY: writes one descriptor, destroyed in Drop.
        check("cudnnCreatePoolingDescriptor", unsafe {
            sys::cudnnCreatePoolingDescriptor(&mut d)
        })?;
        let this = PoolDesc(d);
        // SAFETY: live descriptor.
        check("cudnnSetPooling2dDescriptor", unsafe {
            sys::cudnnSetPooling2dDescriptor(
                d,
                mode,
                sys::cudnnNanPropagation_t::CUDNN_NOT_PROPAGATE_NAN,
                window[0],
                window[1],
                pads[0],
                pads[1],
                strides[0],
                strides[1],
            )
        })?;
        Ok(this)
    }

    /// Enqueue `y = pool(x)`.
    ///
    /// # Safety
    /// As [`conv_forward`].
    ///
    /// # Errors
    /// [`CudnnError`].
    #[inline]
    pub unsafe fn forward(
        &self,
        handle: &Handle,
        xd: &TensorDesc,
        x: u64,
        yd: &TensorDesc,
        y: u64,
    ) -> Result<(), CudnnError> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the caller's contract.
        check("cudnnPoolingForward", unsafe {
            sys::cudnnPoolingForward(
                handle.raw(),
                self.0,
                &alpha as *const f32 as *const c_void,
                xd.raw(),
                x as *const c_void,
                &beta as *const f32 as *const c_void,
                yd.raw(),
                y as *mut c_void,
            )
        })
    }
}

impl Drop for PoolDesc {
    fn drop(&mut self) {
        // SAFETY: created in new, destroyed once.
        unsafe { sys::cudnnDestroyPoolingDescriptor(self.0) };
    }
}

/// The `cudnnConvolutionBwdDataAlgo_t` of a chosen algorithm number (0..=5).
pub fn bwd_data_algo(algo: u32) -> sys::cudnnConvolutionBwdDataAlgo_t {
    use sys::cudnnConvolutionBwdDataAlgo_t::*;
    match algo {
        0 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
        1 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
        2 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT,
        3 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING,
        4 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD,
        _ => CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
    }
}

const _: () = assert!(
    std::mem::size_of::<RawAlgoPerf>()
        == std::mem::size_of::<sys::cudnnConvolutionBwdDataAlgoPerf_t>()
);

/// As [`find_algo`], for a transposed convolution computed as backward data: `x` is cuDNN's
/// `dy` (descriptor `xd`), `y` its `dx` (descriptor `yd`), `w` the forward filter
/// (`cudnnFindConvolutionBackwardDataAlgorithmEx`).
///
/// # Safety
/// As [`find_algo`].
///
/// # Errors
/// [`CudnnError`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn find_bwd_data_algo(
    handle: &Handle,
    wd: &FilterDesc,
    w: u64,
    xd: &TensorDesc,
    x: u64,
    cd: &ConvDesc,
    yd: &TensorDesc,
    y: u64,
    scratch: u64,
    workspace_limit: usize,
) -> Result<ConvAlgo, CudnnError> {
    let mut perf = [RawAlgoPerf::default(); 6];
    let mut returned = 0i32;
    // SAFETY: the caller's contract; perf has room for the 6 backward-data algorithms and
    // the layout of cudnnConvolutionBwdDataAlgoPerf_t (checked above).
    check("cudnnFindConvolutionBackwardDataAlgorithmEx", unsafe {
        sys::cudnnFindConvolutionBackwardDataAlgorithmEx(
            handle.raw(),
            wd.raw(),
            w as *const c_void,
            xd.raw(),
            x as *const c_void,
            cd.raw(),
            yd.raw(),
            y as *mut c_void,
            perf.len() as i32,
            &mut returned,
            perf.as_mut_ptr() as *mut sys::cudnnConvolutionBwdDataAlgoPerf_t,
            scratch as *mut c_void,
            workspace_limit,
        )
    })?;
    perf[..returned.clamp(0, 6) as usize]
        .iter()
        .find(|p| p.status == 0 && p.memory <= workspace_limit && p.algo < 6)
        .map(|p| ConvAlgo {
            algo: p.algo,
            workspace: p.memory,
            time_us: (p.time * 1000.0) as u32,
        })
        .ok_or(CudnnError {
            call: "cudnnFindConvolutionBackwardDataAlgorithmEx",
            status: 0,
            name: "no algorithm succeeded within the workspace limit",
        })
}

/// Enqueue `y = conv_transpose(x, w)` as `dx = backward_data(w, dy = x)`.
///
/// # Safety
/// As [`conv_forward`].
///
/// # Errors
/// [`CudnnError`].
#[allow(clippy::too_many_arguments)]
#[inline]
pub unsafe fn deconv_forward(
    handle: &Handle,
    wd: &FilterDesc,
    w: u64,
    xd: &TensorDesc,
    x: u64,
    cd: &ConvDesc,
    algo: sys::cudnnConvolutionBwdDataAlgo_t,
    ws: u64,
    ws_bytes: usize,
    yd: &TensorDesc,
    y: u64,
) -> Result<(), CudnnError> {
    let (alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: the caller's contract.
    check("cudnnConvolutionBackwardData", unsafe {
        sys::cudnnConvolutionBackwardData(
            handle.raw(),
            &alpha as *const f32 as *const c_void,
            wd.raw(),
            w as *const c_void,
            xd.raw(),
            x as *const c_void,
            cd.raw(),
            algo,
            ws as *mut c_void,
            ws_bytes,
            &beta as *const f32 as *const c_void,
            yd.raw(),
            y as *mut c_void,
        )
    })
}
