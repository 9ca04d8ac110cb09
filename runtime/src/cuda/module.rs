//! Loading kernel images (cubin / fatbin embedded ahead of time, NVRTC as opt-in fallback).
//!
//! A family embeds one image per (CUDA major, SM) it was built for. The driver refuses a
//! cubin built by a newer *major* toolkit than its own (a CUDA 13 cubin on JetPack 6's CUDA 12
//! driver), and refuses SASS for another SM; so [`KernelModule::load`] orders the images by what the
//! driver can take (same major first, then older majors; exact SM or a fatbin) and tries each,
//! recording every refusal. Only when none loads, and only when the caller allowed it, is the
//! source compiled with NVRTC (feature `nvrtc`) for the device's exact SM.

use std::ffi::{CString, c_void};

use cudarc::driver::sys;

use super::device::Context;
use super::error::{CudaError, DriverError, check};

/// One embedded kernel image.
#[derive(Debug, Clone, Copy)]
pub struct KernelImage {
    /// Name for logs, e.g. "detect.cu13.fatbin".
    pub name: &'static str,
    /// CUDA major version of the toolkit that built it (12, 13).
    pub cuda_major: u32,
    /// The SM it holds SASS for (`Some(87)`), or `None` for a fatbin (several SMs, maybe PTX).
    pub sm: Option<u32>,
    /// The image bytes (ELF cubin or fatbin), 8-byte aligned is not required by the driver.
    pub bytes: &'static [u8],
}

/// Where kernels may come from.
#[derive(Debug, Clone, Copy)]
pub struct ModuleSource {
    /// Embedded images.
    pub images: &'static [KernelImage],
    /// CUDA C source for the NVRTC fallback (used only with `allow_nvrtc`).
    pub source: Option<&'static str>,
    /// Opt in to compiling `source` with NVRTC when no image loads (feature `nvrtc`).
    pub allow_nvrtc: bool,
}

/// A loaded module.
pub struct KernelModule {
    raw: sys::CUmodule,
    /// Which image (or "nvrtc:sm_XX") was loaded.
    pub image: String,
    ctx: Context,
}

// SAFETY: module handles are usable from any thread with the context bound.
unsafe impl Send for KernelModule {}
// SAFETY: immutable after load.
unsafe impl Sync for KernelModule {}

/// A kernel of a loaded [`KernelModule`]. Valid while the module lives.
#[derive(Debug, Clone, Copy)]
pub struct Function(sys::CUfunction);

// SAFETY: function handles are immutable driver objects.
unsafe impl Send for Function {}
// SAFETY: as above.
unsafe impl Sync for Function {}

impl Function {
    /// The raw handle.
    pub fn raw(self) -> sys::CUfunction {
        self.0
    }

    /// Static shared memory of the kernel, bytes (`CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`).
    ///
    /// # Errors
    /// The driver's error.
    pub fn static_shared_bytes(self) -> Result<u32, DriverError> {
        let mut v = 0;
        // SAFETY: writes one int; the function handle is valid while its module lives.
        unsafe {
            check(
                "cuFuncGetAttribute",
                sys::cuFuncGetAttribute(
                    &mut v,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                    self.0,
                ),
            )
        }?;
        Ok(u32::try_from(v).unwrap_or(0))
    }

    /// Let launches of the kernel ask for up to `bytes` of dynamic shared memory (beyond the
    /// 48 KiB every kernel may take; at most the device's opt-in limit less the static
    /// shared memory) and, with `non_portable_cluster`, thread block clusters of more than 8
    /// blocks (16 on compute capability 9.0). Set once at load, before any launch.
    ///
    /// # Errors
    /// The driver's error (e.g. `CUDA_ERROR_INVALID_VALUE` for more than the device allows).
    pub fn set_launch_limits(
        self,
        bytes: u32,
        non_portable_cluster: bool,
    ) -> Result<(), DriverError> {
        let bytes = i32::try_from(bytes).unwrap_or(i32::MAX);
        // SAFETY: sets attributes of a valid function handle.
        unsafe {
            check(
                "cuFuncSetAttribute",
                sys::cuFuncSetAttribute(
                    self.0,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    bytes,
                ),
            )?;
            if non_portable_cluster {
                check(
                    "cuFuncSetAttribute",
                    sys::cuFuncSetAttribute(
                        self.0,
                        sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                        1,
                    ),
                )?;
            }
        }
        Ok(())
    }

    /// How many clusters of `cluster` blocks of `block` threads with `shared_bytes` of
    /// dynamic shared memory the device can run at once (`cuOccupancyMaxActiveClusters`): 0
    /// when not even one fits (a launch would fail).
    ///
    /// # Errors
    /// The driver's error (e.g. a cluster size the kernel does not allow).
    pub fn max_active_clusters(
        self,
        cluster: u32,
        block: u32,
        shared_bytes: u32,
    ) -> Result<u32, DriverError> {
        // SAFETY: an all-zero attribute is a valid bit pattern (plain integers and a union of
        // plain data); the id and the value set below select the member read.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr.value.clusterDim.x = cluster;
        attr.value.clusterDim.y = 1;
        attr.value.clusterDim.z = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: cluster,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: shared_bytes,
            hStream: std::ptr::null_mut(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        let mut n = 0;
        // SAFETY: `config` and `attr` outlive the call, which writes one int.
        unsafe {
            check(
                "cuOccupancyMaxActiveClusters",
                sys::cuOccupancyMaxActiveClusters(&mut n, self.0, &config),
            )
        }?;
        Ok(u32::try_from(n).unwrap_or(0))
    }
}

/// Order in which images should be tried on a device with compute capability `sm` and a
/// driver of CUDA major `driver_major` (pure logic, tested without a GPU): images from a newer
/// major than the driver are dropped; then newest usable major first; within a major, an exact
/// SM match before a fatbin, other SMs dropped.
pub fn image_order(images: &[KernelImage], sm: u32, driver_major: u32) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..images.len())
        .filter(|&i| images[i].cuda_major <= driver_major)
        .filter(|&i| images[i].sm.is_none_or(|s| s == sm))
        .collect();
    idx.sort_by_key(|&i| {
        (
            std::cmp::Reverse(images[i].cuda_major),
            images[i].sm.is_none(),
        )
    });
    idx
}

impl KernelModule {
    /// Load the best image for this context's device (see [`image_order`]).
    ///
    /// # Errors
    /// [`CudaError::NoKernelImage`] listing every image tried and the driver's answer.
    pub fn load(ctx: &Context, src: ModuleSource) -> Result<Self, CudaError> {
        ctx.bind()?;
        let p = ctx.properties();
        let (sm, major) = (p.sm(), p.driver_major());
        let mut tried = Vec::new();
        for &i in &image_order(src.images, sm, major) {
            let img = &src.images[i];
            // The driver wants the image in memory it can read past the ELF end safely;
            // an owned, 8-byte aligned copy avoids any alignment assumption on &'static [u8].
            let mut buf: Vec<u64> = vec![0; img.bytes.len().div_ceil(8) + 1];
            // SAFETY: buf holds at least bytes.len() bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    img.bytes.as_ptr(),
                    buf.as_mut_ptr() as *mut u8,
                    img.bytes.len(),
                )
            };
            let mut raw: sys::CUmodule = std::ptr::null_mut();
            // SAFETY: buf is a complete cubin/fatbin image; the driver copies what it needs.
            let res = unsafe { sys::cuModuleLoadData(&mut raw, buf.as_ptr() as *const c_void) };
            match check("cuModuleLoadData", res) {
                Ok(()) => {
                    log::info!(
                        "kernels: loaded {} for sm_{sm} (driver CUDA {major})",
                        img.name
                    );
                    return Ok(KernelModule {
                        raw,
                        image: img.name.to_string(),
                        ctx: ctx.clone(),
                    });
                }
                Err(e) => tried.push(format!("{}: {}", img.name, e.name())),
            }
        }
        for img in src.images {
            if !tried.iter().any(|t| t.starts_with(img.name)) {
                tried.push(format!(
                    "{}: skipped (CUDA {} image, sm {:?})",
                    img.name, img.cuda_major, img.sm
                ));
            }
        }
        if src.allow_nvrtc {
            match Self::nvrtc(ctx, src.source) {
                Ok(m) => return Ok(m),
                Err(e) => tried.push(format!("nvrtc: {e}")),
            }
        } else {
            tried.push("nvrtc: not allowed (opt in with allow_nvrtc)".into());
        }
        Err(CudaError::NoKernelImage {
            device: p.name.clone(),
            sm,
            driver_major: major,
            driver_minor: p.driver_minor(),
            tried: tried.join("; "),
        })
    }

    #[cfg(feature = "nvrtc")]
    fn nvrtc(ctx: &Context, source: Option<&'static str>) -> Result<Self, String> {
        let src = source.ok_or("no source embedded")?;
        // SAFETY: probing only dlopens candidate sonames.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err("libnvrtc not found by the dynamic loader".into());
        }
        let sm = ctx.properties().sm();
        let opts = cudarc::nvrtc::CompileOptions {
            fmad: Some(false),
            options: vec![
                format!("--gpu-architecture=compute_{sm}"),
                "--std=c++17".into(),
            ],
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(src, opts).map_err(|e| e.to_string())?;
        let text = CString::new(ptx.to_src()).map_err(|e| e.to_string())?;
        let mut raw: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: NUL-terminated PTX text; the driver JIT-compiles it for the current device.
        unsafe {
            check(
                "cuModuleLoadData",
                sys::cuModuleLoadData(&mut raw, text.as_ptr() as *const c_void),
            )
        }
        .map_err(|e| e.to_string())?;
        log::warn!(
            "kernels: no embedded image matched; compiled from source with NVRTC for sm_{sm}"
        );
        Ok(KernelModule {
            raw,
            image: format!("nvrtc:sm_{sm}"),
            ctx: ctx.clone(),
        })
    }

    #[cfg(not(feature = "nvrtc"))]
    fn nvrtc(_ctx: &Context, _source: Option<&'static str>) -> Result<Self, String> {
        Err("this build has no NVRTC support (feature `nvrtc`)".into())
    }

    /// Look up a kernel by its `extern "C"` name.
    ///
    /// # Errors
    /// [`CudaError::MissingKernel`]; [`CudaError::Invalid`] for a name with a NUL byte.
    pub fn function(&self, name: &str) -> Result<Function, CudaError> {
        self.ctx.bind()?;
        let c = CString::new(name).map_err(|e| {
            CudaError::Invalid(format!("kernel name `{}`: {e}", name.escape_debug()))
        })?;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: module loaded in this context; c is NUL-terminated.
        unsafe {
            check(
                "cuModuleGetFunction",
                sys::cuModuleGetFunction(&mut f, self.raw, c.as_ptr()),
            )
        }
        .map_err(|source| CudaError::MissingKernel {
            name: name.to_string(),
            image: self.image.clone(),
            source,
        })?;
        Ok(Function(f))
    }
}

impl Drop for KernelModule {
    fn drop(&mut self) {
        let _ = self.ctx.bind();
        // SAFETY: loaded in load/nvrtc, unloaded once; graphs using it are dropped first by
        // their owners (sessions order their fields accordingly).
        unsafe { sys::cuModuleUnload(self.raw) };
    }
}
