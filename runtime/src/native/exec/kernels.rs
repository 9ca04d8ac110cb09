//! The engine's kernel library (`runtime/kernels/native.cu`): the embedded images and the
//! kernels looked up once per plan, in the order of the operators' registry
//! ([`crate::native::ops::kernels`]). Each kernel's parameter struct and its launch live with
//! the operator that launches it.

use crate::cuda::{CudaError, Function, KernelImage, KernelModule};

/// The embedded kernel images (rebuilt by `runtime/kernels/build-kernels.sh`, digests in
/// `runtime/kernels/bin/SHA256SUMS`, architectures checked by `list-archs.sh` in CI).
pub static KERNEL_IMAGES: &[KernelImage] = &[
    KernelImage {
        name: "native.cu13.fatbin",
        cuda_major: 13,
        sm: None,
        bytes: include_bytes!("../../../kernels/bin/native.cu13.fatbin"),
    },
    KernelImage {
        name: "native.cu12.sm_87.cubin",
        cuda_major: 12,
        sm: Some(87),
        bytes: include_bytes!("../../../kernels/bin/native.cu12.sm_87.cubin"),
    },
    KernelImage {
        name: "native.cu12.sm_90.cubin",
        cuda_major: 12,
        sm: Some(90),
        bytes: include_bytes!("../../../kernels/bin/native.cu12.sm_90.cubin"),
    },
    KernelImage {
        name: "native.cu12.sm_100.cubin",
        cuda_major: 12,
        sm: Some(100),
        bytes: include_bytes!("../../../kernels/bin/native.cu12.sm_100.cubin"),
    },
];

/// The kernels' CUDA C source (for the opt-in NVRTC fallback).
pub const KERNEL_SOURCE: &str = include_str!("../../../kernels/native.cu");

/// The kernels of every operator, looked up once per plan, in registry order
/// ([`crate::native::ops::kernel_index`]).
#[derive(Clone, Debug)]
pub struct Kernels {
    functions: Vec<Function>,
}

impl Kernels {
    /// Look every operator's kernel up in `module`.
    ///
    /// # Errors
    /// [`CudaError::MissingKernel`].
    pub fn new(module: &KernelModule) -> Result<Self, CudaError> {
        let functions = crate::native::ops::kernels()
            .map(|k| module.function(k.name))
            .collect::<Result<_, _>>()?;
        Ok(Kernels { functions })
    }

    /// The kernel at position `i` of the registry ([`crate::native::ops::kernel_index`]).
    pub fn get(&self, i: usize) -> Option<Function> {
        self.functions.get(i).copied()
    }
}
