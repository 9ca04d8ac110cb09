//! `tract-cuda` as a device-placed [`crate::Engine`]: the portable GPU engine for bundles that carry no
//! TensorRT plan for this device.
//!
//! # Why it is not capture-safe (read from tract-cuda / tract-gpu 0.23.9)
//! * **Its own stream.** Every op enqueues on a *thread-local* stream that tract creates
//!   (`tract_cuda::context::CUDA_STREAM`, one per thread, with its cuBLAS/cuDNN handles bound
//!   to it); there is no way to hand it the session's stream, so a capture on our stream never
//!   sees its kernels, and capturing its stream from outside would need global capture mode.
//! * **It allocates every run.** `DeviceTurnHandler::before_plan_eval` builds a fresh
//!   `DeviceMemoryPool` (one device allocation sized by the memory schema) per run and drops it
//!   after; host inputs are uploaded into newly allocated device tensors (`into_device`); ops
//!   allocate host-side `TVec`s/`Arc`s. A graph would bake in addresses that are freed after
//!   the capture.
//! * **It synchronises inside run.** The `DeviceSync(ToHost)` op at each output calls
//!   `LazyHostStorage::new`, which synchronises the context's stream (`get_context()?.synchronize()`),
//!   which is illegal during capture.
//! * Precision: cuDNN runs fp32 convolutions on TF32 tensor cores by default on Ampere and
//!   newer. Measured on the H200 against tract's CPU engine: detection scores within 9.2e-5
//!   (320n.onnx) and 1.24e-4 (DocLayNet) with TF32, within 2.4e-7 with
//!   `NVIDIA_TF32_OVERRIDE=0` in the environment (set it before the process starts: it is read
//!   when cuDNN/cuBLAS initialise).
//! * NVRTC: on first use it compiles its kernel library (about 96 s on the H200 host), cached
//!   under `$XDG_CACHE_HOME/tract/<version>/cuda/<api>/cubins/sm_XX/nvrtc-X.Y/` (falls back to
//!   `$HOME/.cache`); point `XDG_CACHE_HOME` at a persistent directory to pay it once per
//!   device and toolkit.
//!
//! What a fix would take (upstream): a `run_on_stream(stream, inputs: &[DeviceTensor],
//! outputs: &mut [DeviceTensor])` entry point that (1) enqueues on a caller-provided stream
//! (the cuBLAS/cuDNN handles re-bound with `cublasSetStream`/`cudnnSetStream`), (2) uses a
//! memory pool allocated once per state instead of per turn (the schema is already static for
//! concrete shapes), (3) writes outputs into caller-provided device tensors without the
//! `ToHost` sync, and (4) keeps host bookkeeping out of the launch path. With (1)-(3) the
//! sequence of launches is fixed for a fixed shape and could be captured.
//!
//! # What this engine does instead
//! At `enqueue`: copy the session's input region into a device tensor that tract owns (one
//! device-to-device copy on our stream), synchronise our stream, run tract with that tensor
//! wrapped as an already-on-device input (tract's `ToDevice` passes it through: no host round
//! trip), and copy tract's output device tensor into the session's output region on our
//! stream (device to device). Should tract ever hand back a host tensor instead, it falls back
//! to a host-to-device copy. The session runs this eagerly between its captured pre- and
//! post-processing graphs.

use std::path::Path;
use std::sync::Arc;

use cudarc::driver::sys;
use tract_gpu::tensor::{DeviceTensor, LazyHostStorage};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::format_err;

use crate::engine::{
    CaptureSafety, Engine, EngineKind, IoMode, Placement, RunError, StreamHandle, TensorSpec,
};
use tether_bundle::DType;

use super::error::{DriverError, check};
use super::memory::DevicePtr;

// Make sure the crate (and its `register_runtime!` inventory entry) is linked.
use tract_cuda as _;

const KIND: EngineKind = EngineKind::TractCuda;

fn backend(what: &'static str) -> RunError {
    RunError::Backend { engine: KIND, what }
}

fn drv(e: DriverError) -> RunError {
    log::error!("tract-cuda engine: {e}");
    backend(e.call)
}

/// A model prepared by tract-cuda for a fixed input shape, placed on the device.
pub struct TractCudaEngine {
    state: Box<dyn tract_onnx::tract_core::runtime::State>,
    input_dev: DeviceTensor,
    input_ptr: DevicePtr,
    inputs: Vec<TensorSpec>,
    outputs: Vec<TensorSpec>,
    bound_in: Option<DevicePtr>,
    bound_out: Option<DevicePtr>,
    last_outputs: TVec<TValue>,
    host_bounce: Vec<f32>,
    device_outputs: bool,
}

// SAFETY: tract states are Send; the device tensor is an Arc'd buffer handle.
unsafe impl Send for TractCudaEngine {}

impl TractCudaEngine {
    /// Load an ONNX model with input `[1, 3, h, w]` f32 and prepare it on CUDA device 0
    /// (tract-cuda always uses device 0). Blocks for the NVRTC kernel compile on first use.
    ///
    /// # Errors
    /// Any tract error (model, CUDA runtime dependencies missing, NVRTC failure).
    pub fn load_onnx(path: &Path, h: usize, w: usize) -> TractResult<Self> {
        let model = tract_onnx::onnx()
            .with_ignore_value_info(true)
            .model_for_path(path)?;
        Self::prepare(model, h, w)
    }

    /// As [`TractCudaEngine::load_onnx`], from the ONNX bytes (e.g. a bundle section).
    ///
    /// # Errors
    /// Any tract error.
    pub fn load_onnx_bytes(onnx: &[u8], h: usize, w: usize) -> TractResult<Self> {
        let model = tract_onnx::onnx()
            .with_ignore_value_info(true)
            .model_for_read(&mut std::io::Cursor::new(onnx))?;
        Self::prepare(model, h, w)
    }

    fn prepare(model: InferenceModel, h: usize, w: usize) -> TractResult<Self> {
        let model = model
            .with_input_fact(0, f32::fact([1, 3, h, w]).into())?
            .into_typed()?
            .into_decluttered()?;
        let in_name = model.node(model.input_outlets()?[0].node).name.clone();
        let out_name = model.node(model.output_outlets()?[0].node).name.clone();
        let out_fact = model.output_fact(0)?.clone();
        let output_shape: Vec<usize> = out_fact
            .shape
            .as_concrete()
            .ok_or_else(|| format_err!("output shape {:?} is not concrete", out_fact.shape))?
            .to_vec();
        let rt = tract_onnx::tract_core::runtime::runtime_for_name("cuda")?
            .ok_or_else(|| format_err!("tract runtime `cuda` is not registered"))?;
        let t0 = std::time::Instant::now();
        let runnable: Arc<dyn tract_onnx::tract_core::runtime::Runnable> =
            rt.prepare(model)?.into();
        log::info!(
            "tract-cuda: model prepared in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        let state = runnable.spawn()?;
        let input_dev = DeviceTensor::uninitialized_dt(DatumType::F32, &[1, 3, h, w])?;
        let input_ptr =
            DevicePtr(input_dev.device_buffer_ptr() as u64 + input_dev.buffer_offset::<u64>());
        let n_out = output_shape.iter().product::<usize>();
        Ok(TractCudaEngine {
            state,
            input_dev,
            input_ptr,
            inputs: vec![TensorSpec {
                name: in_name,
                mode: IoMode::Input,
                dtype: DType::F32,
                shape: vec![1, 3, h, w],
            }],
            outputs: vec![TensorSpec {
                name: out_name,
                mode: IoMode::Output,
                dtype: DType::F32,
                shape: output_shape,
            }],
            bound_in: None,
            bound_out: None,
            last_outputs: tvec![],
            host_bounce: vec![0.0; n_out],
            device_outputs: true,
        })
    }

    /// True while tract hands its outputs back as device tensors (copied device to device);
    /// false after it returned a host tensor (then copied host to device).
    pub fn device_outputs(&self) -> bool {
        self.device_outputs
    }
}

impl Engine for TractCudaEngine {
    fn kind(&self) -> EngineKind {
        KIND
    }
    fn inputs(&self) -> &[TensorSpec] {
        &self.inputs
    }
    fn outputs(&self) -> &[TensorSpec] {
        &self.outputs
    }
    fn placement(&self) -> Placement {
        Placement::Device
    }
    fn capture_safety(&self) -> CaptureSafety {
        CaptureSafety::Unsafe(
            "tract-cuda runs on its own thread-local stream, allocates a device memory pool and \
             input tensors every run, and synchronises inside run (DeviceSync ToHost)",
        )
    }
    unsafe fn bind_device(
        &mut self,
        mode: IoMode,
        index: usize,
        address: u64,
        bytes: usize,
    ) -> Result<(), RunError> {
        let specs = if mode == IoMode::Input {
            &self.inputs
        } else {
            &self.outputs
        };
        let Some(spec) = specs.get(index) else {
            return Err(RunError::NoSuchTensor {
                mode,
                index,
                count: specs.len(),
            });
        };
        if bytes < spec.byte_len().unwrap_or(usize::MAX) {
            return Err(RunError::BadHostBuffer { len: bytes });
        }
        match mode {
            IoMode::Input => self.bound_in = Some(DevicePtr(address)),
            _ => self.bound_out = Some(DevicePtr(address)),
        }
        Ok(())
    }
    fn run(&mut self, stream: StreamHandle) -> Result<(), RunError> {
        let (Some(inp), Some(out)) = (self.bound_in, self.bound_out) else {
            return Err(backend("run before bind_device"));
        };
        let s = stream.0 as sys::CUstream;
        let in_bytes = self.inputs[0].byte_len().unwrap_or(0);
        let out_bytes = self.outputs[0].byte_len().unwrap_or(0);
        // SAFETY: both ranges hold in_bytes bytes (bind_device check / tract tensor shape).
        unsafe {
            check(
                "cuMemcpyDtoDAsync",
                sys::cuMemcpyDtoDAsync_v2(self.input_ptr.0, inp.0, in_bytes, s),
            )
        }
        .map_err(drv)?;
        // Orders the session's pre-processing and this copy before tract's own stream, and
        // retires the previous frame's output copy before that output tensor is dropped.
        // SAFETY: valid stream of the current context.
        unsafe { check("cuStreamSynchronize", sys::cuStreamSynchronize(s)) }.map_err(drv)?;
        let input = LazyHostStorage::new(self.input_dev.clone())
            .map_err(|e| {
                log::error!("tract-cuda: wrapping the input device tensor: {e:#}");
                backend("input wrap")
            })?
            .into_tensor();
        let outputs = self.state.run(tvec![input.into_tvalue()]).map_err(|e| {
            log::error!("tract-cuda run failed: {e:#}");
            backend("run")
        })?;
        let dev_src = outputs[0]
            .storage_as::<LazyHostStorage>()
            .and_then(|l| l.device())
            .map(|d| DevicePtr(d.device_buffer_ptr() as u64 + d.buffer_offset::<u64>()));
        if let Some(src) = dev_src {
            // SAFETY: tract's output tensor holds out_bytes bytes and stays alive in
            // last_outputs until the next run synchronises the stream.
            unsafe {
                check(
                    "cuMemcpyDtoDAsync",
                    sys::cuMemcpyDtoDAsync_v2(out.0, src.0, out_bytes, s),
                )
            }
            .map_err(drv)?;
        } else {
            if self.device_outputs {
                log::warn!("tract-cuda returned a host output tensor: copying host to device");
                self.device_outputs = false;
            }
            let view = outputs[0]
                .try_as_plain_ram()
                .and_then(|v| v.as_slice::<f32>().map(|s| s.to_vec()));
            let view = view.map_err(|_| backend("output is not plain f32"))?;
            self.host_bounce.copy_from_slice(&view);
            // SAFETY: host_bounce outlives the copy: we synchronise right after.
            unsafe {
                check(
                    "cuMemcpyHtoDAsync",
                    sys::cuMemcpyHtoDAsync_v2(
                        out.0,
                        self.host_bounce.as_ptr() as *const _,
                        out_bytes,
                        s,
                    ),
                )
            }
            .map_err(drv)?;
            // SAFETY: valid stream.
            unsafe { check("cuStreamSynchronize", sys::cuStreamSynchronize(s)) }.map_err(drv)?;
        }
        self.last_outputs = outputs;
        Ok(())
    }
}
