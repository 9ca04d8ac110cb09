//! Open options: a C struct that may grow (`struct_size` says how much of it the caller
//! knows), mapped onto the runtime's `ModelOptions` as the CLI maps its `RunOptions`.

use tether_runtime::vocab::{MappedIo, Precision, SyncPolicy};
use tether_runtime::{Device, ModelOptions};

use crate::error::{Failure, Result, non_null};

/// Where a model runs (`tether_options::device`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum tether_device {
    /// The first CUDA GPU when this build has a GPU backend and a driver reports a device,
    /// else the CPU.
    TETHER_DEVICE_AUTO = 0,
    /// The CPU (tract).
    TETHER_DEVICE_CPU = 1,
    /// CUDA device `tether_options::device_index`; opening fails when it cannot be used.
    TETHER_DEVICE_CUDA = 2,
}

/// Arithmetic precision of the GPU engines that have a choice (`tether_options::precision`;
/// the CPU engine always computes in fp32).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum tether_precision {
    /// IEEE fp32.
    TETHER_PRECISION_FP32 = 0,
    /// TF32 tensor-core arithmetic where the engine has it.
    TETHER_PRECISION_TF32 = 1,
    /// fp16 activations and weights where the engine has it.
    TETHER_PRECISION_FP16 = 2,
}

/// How the host waits for the GPU at the end of a run (`tether_options::sync`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum tether_sync {
    /// Busy-wait (lowest latency, one core busy while the GPU works).
    TETHER_SYNC_SPIN = 0,
    /// Busy-wait yielding the core between polls.
    TETHER_SYNC_YIELD = 1,
    /// Block on the driver (no core used; wake-up latency added).
    TETHER_SYNC_BLOCKING = 2,
}

/// Where a GPU session's host staging lives (`tether_options::staging`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum tether_staging {
    /// Mapped (zero-copy) on an integrated GPU such as Jetson, copied on a discrete GPU.
    TETHER_STAGING_AUTO = 0,
    /// Mapped host memory the GPU reads and writes in place.
    TETHER_STAGING_MAPPED = 1,
    /// Pinned host buffers copied to and from device memory.
    TETHER_STAGING_COPY = 2,
    /// Inputs copied, outputs mapped.
    TETHER_STAGING_MAPPED_OUTPUTS = 3,
}

/// Options of [`crate::tether_model_open`]. Fill with [`tether_options_init`] (defaults,
/// and `struct_size` set to this header's `sizeof(tether_options)`), then change fields.
///
/// ABI evolution: later versions only append fields. The library reads the first
/// `struct_size` bytes and takes defaults for fields beyond them, so a program compiled
/// against an older header keeps working with a newer library; a `struct_size` larger than
/// the library's own (a newer header with an older library) is `TETHER_ERR_INVALID_ARGUMENT`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tether_options {
    /// `sizeof(tether_options)` as the caller compiled it (set by `tether_options_init`).
    /// At least the size of the fields up to and including `staging` (version 1).
    pub struct_size: u32,
    /// A `tether_device` value.
    pub device: u32,
    /// The CUDA device ordinal when `device` is `TETHER_DEVICE_CUDA` (0 is the first).
    pub device_index: u32,
    /// A `tether_precision` value.
    pub precision: u32,
    /// Threads of the CPU engine: 0 or 1 runs on the calling thread (the default); N > 1
    /// uses a pool of N threads, N at most 1024 (`TETHER_ERR_INVALID_ARGUMENT` above) and
    /// lowered to the cores this process may run on (logged). Ignored by the GPU engines.
    pub threads: u32,
    /// A `tether_sync` value (GPU only).
    pub sync: u32,
    /// A `tether_staging` value (GPU only).
    pub staging: u32,
    /// Nonzero: check every section's CRC at open instead of on first use.
    pub verify_eagerly: u32,
    /// Nonzero (the default): capture CUDA graphs on a GPU; zero launches every step
    /// eagerly.
    pub graphs: u32,
}

/// The size of version 1 of [`tether_options`].
const OPTIONS_V1_SIZE: usize = std::mem::size_of::<tether_options>();

impl Default for tether_options {
    fn default() -> Self {
        tether_options {
            struct_size: OPTIONS_V1_SIZE as u32,
            device: tether_device::TETHER_DEVICE_AUTO as u32,
            device_index: 0,
            precision: tether_precision::TETHER_PRECISION_FP32 as u32,
            threads: 0,
            sync: tether_sync::TETHER_SYNC_SPIN as u32,
            staging: tether_staging::TETHER_STAGING_AUTO as u32,
            verify_eagerly: 0,
            graphs: 1,
        }
    }
}

/// Fill `options` with the defaults (automatic device, fp32, the calling thread, spin
/// wait, automatic staging, lazy verification, graphs on) and `struct_size`.
///
/// Returns `TETHER_ERR_INVALID_ARGUMENT` when `options` is null.
///
/// # Safety
/// `options` is null or points to a writable `tether_options`. Nothing is kept.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_options_init(options: *mut tether_options) -> crate::tether_status {
    crate::error::guard(|| {
        non_null(options, "options")?;
        // SAFETY: non-null and writable per the contract.
        unsafe { options.write(tether_options::default()) };
        Ok(())
    })
}

/// A `threads` field (`field` names it in messages): `None` for 0 (the caller's default),
/// `TETHER_ERR_INVALID_ARGUMENT` above [`tether_runtime::MAX_CPU_THREADS`] (as `tether run
/// --threads`), and a count above the cores this process may run on lowered to them with a
/// warning through the `log` facade ([`tether_runtime::threads_beyond_cores`], as `tether
/// run --threads` does).
pub(crate) fn thread_count(field: &str, n: u32) -> Result<Option<usize>> {
    let max = tether_runtime::MAX_CPU_THREADS;
    if n as usize > max {
        return Err(Failure::invalid(format!(
            "{field} is {n}; accepted 0 to {max}"
        )));
    }
    if n == 0 {
        return Ok(None);
    }
    if let Some(cores) = tether_runtime::threads_beyond_cores(n as usize) {
        log::warn!(
            "{field} is {n}, more than the {cores} cores this process may run on: using {cores}"
        );
        return Ok(Some(cores));
    }
    Ok(Some(n as usize))
}

/// What the families' open calls need, read from a caller's options (null: defaults).
pub(crate) struct Opened {
    pub(crate) device: Device,
    pub(crate) verify_eagerly: bool,
    pub(crate) model: ModelOptions,
}

/// Read `*options` (null: defaults) and check every field.
///
/// # Safety
/// `options` is null or points to at least `struct_size` readable bytes (the first field
/// read first).
pub(crate) unsafe fn read(options: *const tether_options) -> Result<Opened> {
    let mut o = tether_options::default();
    if !options.is_null() {
        // SAFETY: the first field is a u32 every version has (caller contract).
        let size = unsafe { options.cast::<u32>().read_unaligned() } as usize;
        if size < OPTIONS_V1_SIZE {
            return Err(Failure::invalid(format!(
                "tether_options::struct_size is {size}; version 1 is {OPTIONS_V1_SIZE} bytes (call tether_options_init)"
            )));
        }
        if size > OPTIONS_V1_SIZE {
            // A newer header's struct: its extra fields would be ignored silently.
            return Err(Failure::invalid(format!(
                "tether_options::struct_size is {size}, larger than this library's {OPTIONS_V1_SIZE} bytes (a newer header than the library; link the library the header came from)"
            )));
        }
        // SAFETY: the caller's struct has at least OPTIONS_V1_SIZE (checked) readable bytes;
        // the fields this library knows are a prefix of it.
        o = unsafe { options.read_unaligned() };
    }
    let device = match o.device {
        0 => Device::Auto,
        1 => Device::Cpu,
        2 => Device::Cuda(o.device_index as usize),
        v => {
            return Err(Failure::invalid(format!(
                "tether_options::device is {v}; expected TETHER_DEVICE_AUTO (0), _CPU (1) or _CUDA (2)"
            )));
        }
    };
    let precision = match o.precision {
        0 => Precision::Fp32,
        1 => Precision::Tf32,
        2 => Precision::Fp16,
        v => {
            return Err(Failure::invalid(format!(
                "tether_options::precision is {v}; expected TETHER_PRECISION_FP32 (0), _TF32 (1) or _FP16 (2)"
            )));
        }
    };
    let sync = match o.sync {
        0 => SyncPolicy::Spin,
        1 => SyncPolicy::Yield,
        2 => SyncPolicy::Blocking,
        v => {
            return Err(Failure::invalid(format!(
                "tether_options::sync is {v}; expected TETHER_SYNC_SPIN (0), _YIELD (1) or _BLOCKING (2)"
            )));
        }
    };
    let staging = match o.staging {
        0 => MappedIo::Auto,
        1 => MappedIo::Always,
        2 => MappedIo::Never,
        3 => MappedIo::Outputs,
        v => {
            return Err(Failure::invalid(format!(
                "tether_options::staging is {v}; expected TETHER_STAGING_AUTO (0), _MAPPED (1), _COPY (2) or _MAPPED_OUTPUTS (3)"
            )));
        }
    };
    #[allow(unused_mut)]
    let mut model = ModelOptions {
        device,
        verify_eagerly: o.verify_eagerly != 0,
        cpu_threads: thread_count("tether_options::threads", o.threads)?.unwrap_or(1),
        precision,
        ..ModelOptions::default()
    };
    #[cfg(feature = "cuda")]
    {
        model.session.graphs = o.graphs != 0;
        model.session.mapped = staging;
        model.session.sync = sync;
    }
    #[cfg(not(feature = "cuda"))]
    let _ = (staging, sync);
    Ok(Opened {
        device,
        verify_eagerly: o.verify_eagerly != 0,
        model,
    })
}
