//! cuBLAS, thinly: a handle (freed on drop) bound to the session's stream and to a workspace
//! inside the session arena, and the one call the engine makes
//! (`cublasGemmStridedBatchedEx`, see [`crate::native::ops::gemm`] for the mapping).
//!
//! Capture rules, from the cuBLAS documentation: `cublasSetStream` resets the workspace to
//! cuBLAS's own pool, so the workspace is set again after every stream change; with a user
//! workspace set, cuBLAS allocates nothing while enqueuing and can be captured.

use std::ffi::c_void;

use cudarc::cublas::sys;

use crate::native::ir::ElemType;
use crate::native::ops::gemm::BlasGemm;

/// A cuBLAS call that did not return `CUBLAS_STATUS_SUCCESS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CublasError {
    /// The entry point.
    pub call: &'static str,
    /// The status code (`cublasStatus_t`).
    pub status: u32,
    /// cuBLAS's name for it (`cublasGetStatusName`, a static string of the library).
    pub name: &'static str,
}

impl std::fmt::Display for CublasError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {} ({})", self.call, self.name, self.status)
    }
}

impl std::error::Error for CublasError {}

#[inline]
fn check(call: &'static str, s: sys::cublasStatus_t) -> Result<(), CublasError> {
    if s == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        // SAFETY: cublasGetStatusName returns a pointer to a static NUL-terminated string
        // owned by the library (loaded for the life of the process); no allocation.
        let name = unsafe {
            let p = sys::cublasGetStatusName(s);
            if p.is_null() {
                "unknown cuBLAS status"
            } else {
                std::ffi::CStr::from_ptr(p)
                    .to_str()
                    .unwrap_or("unknown cuBLAS status")
            }
        };
        Err(CublasError {
            call,
            status: s as u32,
            name,
        })
    }
}

/// Arithmetic of the matrix products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmMath {
    /// fp32 (`CUBLAS_COMPUTE_32F`, default math mode: no TF32).
    Fp32,
    /// fp32 storage, TF32 tensor cores (`CUBLAS_COMPUTE_32F_FAST_TF32`).
    Tf32,
    /// fp16 storage, fp32 accumulation (`CUBLAS_COMPUTE_32F`).
    Fp16,
}

/// A cuBLAS handle (one per executor).
pub struct Handle(sys::cublasHandle_t);

// SAFETY: used through &mut self by its executor only, one thread at a time.
unsafe impl Send for Handle {}

impl Handle {
    /// Create a handle on the current context, default math mode.
    ///
    /// # Errors
    /// [`CublasError`].
    pub fn new() -> Result<Self, CublasError> {
        let mut h: sys::cublasHandle_t = std::ptr::null_mut();
        // SAFETY: the caller made the plan's context current; writes one handle.
        check("cublasCreate", unsafe { sys::cublasCreate_v2(&mut h) })?;
        let this = Handle(h);
        // SAFETY: live handle.
        check("cublasSetMathMode", unsafe {
            sys::cublasSetMathMode(h, sys::cublasMath_t::CUBLAS_DEFAULT_MATH)
        })?;
        Ok(this)
    }

    /// Enqueue on `stream`, with `workspace` (device memory of `bytes` bytes, 256-aligned) as
    /// cuBLAS's only scratch.
    ///
    /// # Errors
    /// [`CublasError`].
    #[inline]
    pub fn bind(
        &self,
        stream: cudarc::driver::sys::CUstream,
        workspace: u64,
        bytes: usize,
    ) -> Result<(), CublasError> {
        // SAFETY: live handle and stream of the same context.
        check("cublasSetStream", unsafe {
            sys::cublasSetStream_v2(self.0, stream as sys::cudaStream_t)
        })?;
        // SAFETY: the workspace is a region of the session arena reserved for this executor.
        check("cublasSetWorkspace", unsafe {
            sys::cublasSetWorkspace_v2(self.0, workspace as *mut c_void, bytes)
        })
    }

    /// Enqueue one strided-batched GEMM: `C' = op(A') op(B')` over `dtype` storage.
    ///
    /// # Safety
    /// `a`, `b`, `c` address device buffers covering every element the call reads or writes;
    /// they stay valid until the work completes (every replay, when captured).
    ///
    /// # Errors
    /// [`CublasError`].
    #[inline]
    pub unsafe fn gemm(
        &self,
        p: &BlasGemm,
        dtype: ElemType,
        math: GemmMath,
        a: u64,
        b: u64,
        c: u64,
    ) -> Result<(), CublasError> {
        let dt = match dtype {
            ElemType::F16 => sys::cudaDataType_t::CUDA_R_16F,
            _ => sys::cudaDataType_t::CUDA_R_32F,
        };
        let compute = match math {
            GemmMath::Tf32 => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
            GemmMath::Fp32 | GemmMath::Fp16 => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        };
        let op = |t: bool| {
            if t {
                sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        // With a 32F compute type alpha and beta are fp32.
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the caller's contract; alpha and beta are read before the call returns.
        check("cublasGemmStridedBatchedEx", unsafe {
            sys::cublasGemmStridedBatchedEx(
                self.0,
                op(p.trans_a),
                op(p.trans_b),
                p.m,
                p.n,
                p.k,
                &alpha as *const f32 as *const c_void,
                a as *const c_void,
                dt,
                p.lda,
                p.stride_a,
                b as *const c_void,
                dt,
                p.ldb,
                p.stride_b,
                &beta as *const f32 as *const c_void,
                c as *mut c_void,
                dt,
                p.ldc,
                p.stride_c,
                p.batch,
                compute,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        })
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: created in new, destroyed once.
        unsafe { sys::cublasDestroy_v2(self.0) };
    }
}
