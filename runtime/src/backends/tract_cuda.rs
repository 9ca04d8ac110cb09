//! The tract-cuda backend: ONNX run by tract's CUDA runtime (`tract-cuda` 0.23.9), the
//! portable GPU engine of last resort before the CPU.
//!
//! # Why it is not capture-safe (read from tract-cuda / tract-gpu 0.23.9)
//! * **Its own stream.** Every op enqueues on a *thread-local* stream that tract creates
//!   (`tract_cuda::context::CUDA_STREAM`, with its cuBLAS/cuDNN handles bound to it); it
//!   cannot be handed the session's stream.
//! * **It allocates every run.** `DeviceTurnHandler::before_plan_eval` builds a fresh
//!   `DeviceMemoryPool` per run; host inputs are uploaded into newly allocated device tensors;
//!   ops allocate host-side `TVec`s/`Arc`s.
//! * **It synchronises inside run.** The `DeviceSync(ToHost)` op at each output synchronises
//!   the context's stream, which is illegal during capture.
//! * **Device 0 only.** `TractCudaContext::new` opens `CudaContext::new(0)` whatever device
//!   the process wants; this backend therefore refuses any other ordinal with a typed error
//!   (selection then falls back) instead of silently running on the wrong GPU.
//! * **First use compiles.** Its kernel library is compiled with NVRTC on first use (about
//!   90 s on the H200 host), cached under `$XDG_CACHE_HOME/tract/...`.
//!
//! So the device session runs this executor eagerly between captured graphs, and says so.
//!
//! # What the executor does per run
//! Copy each input region into a device tensor tract owns (device to device, on the
//! session's stream), synchronise that stream (ordering it before tract's own), run tract
//! with those tensors as already-on-device inputs, and copy tract's output device tensors
//! into the output regions (device to device). Should tract return a host tensor, it is
//! copied host to device (and the session stream synchronised).

use std::sync::Arc;

use cudarc::driver::sys;
use tract_gpu::tensor::{DeviceTensor, LazyHostStorage};
use tract_onnx::prelude::*;

use crate::backend::{
    Backend, Bindings, CaptureSafety, DeviceExecutor, DevicePlan, EngineKind, Enqueue, IoSpec,
    NetworkSource, Placement, Plan, PlanMemory, PrepareError, PrepareOptions, RunError,
    SourceFormat, WorkspaceSpec, catch_prepare, catch_run,
};
use crate::cuda::{Context, DevicePtr, DeviceRegion, DriverError, Stream};

// Make sure the crate (and its `register_runtime!` inventory entry) is linked.
use tract_cuda as _;

const KIND: EngineKind = EngineKind::TractCuda;

fn backend(what: &'static str) -> RunError {
    RunError::Backend { engine: KIND, what }
}

fn drv(e: DriverError) -> RunError {
    log::error!("tract-cuda executor: {e}");
    RunError::Driver(e)
}

/// The tract-cuda backend on the model's device (which must be CUDA device 0).
#[derive(Debug, Clone)]
pub struct TractCuda {
    ctx: Context,
}

impl TractCuda {
    /// The backend for `ctx`'s device.
    pub fn new(ctx: Context) -> Self {
        TractCuda { ctx }
    }
}

impl Backend for TractCuda {
    fn kind(&self) -> EngineKind {
        KIND
    }
    fn placement(&self) -> Placement {
        Placement::Device
    }
    fn prepare(
        &self,
        source: &NetworkSource<'_>,
        options: &PrepareOptions,
    ) -> Result<Plan, PrepareError> {
        let network = source.network;
        let fail = |message: String| PrepareError::Backend {
            engine: KIND,
            network: network.to_string(),
            message,
        };
        if source.format != SourceFormat::Onnx {
            return Err(fail(format!("{:?} payloads are not ONNX", source.format)));
        }
        let ordinal = self.ctx.properties().ordinal;
        if ordinal != 0 {
            return Err(fail(format!(
                "tract-cuda 0.23.9 always runs on CUDA device 0, and device {ordinal} was asked for"
            )));
        }
        catch_prepare(KIND, network, || {
            let mut model =
                super::tract_cpu::parse_onnx(network, source.bytes, &options.fixed_inputs)?;
            let inputs = super::tract_cpu::fix_inputs(network, &mut model, &options.input_shapes)?;
            let typed = super::onnx_front::into_typed_bounded(model, options.tensor_limit())
                .and_then(|mut m| {
                    super::onnx_front::fold_constants(&mut m)?;
                    super::onnx_front::scans_reset_every_run(&mut m);
                    let names = super::onnx_front::output_labels(&m)?;
                    let mut m = m.into_decluttered()?;
                    super::onnx_front::relabel_outputs(&mut m, &names)?;
                    Ok(m)
                })
                .map_err(|e| match super::onnx_front::too_large(&e) {
                    Some(tensor) => PrepareError::TooLarge {
                        engine: KIND,
                        network: network.to_string(),
                        tensor,
                    },
                    None => fail(format!("{e:#}")),
                })?;
            let outputs = super::tract_cpu::typed_outputs(network, &typed)?;
            let rt = tract_onnx::tract_core::runtime::runtime_for_name("cuda")
                .map_err(|e| fail(format!("{e:#}")))?
                .ok_or_else(|| fail("tract runtime `cuda` is not registered".into()))?;
            log::info!(
                "tract-cuda: preparing `{network}` (the first use on a machine compiles tract's kernel library with NVRTC: about 90 s; cached under $XDG_CACHE_HOME/tract)"
            );
            let t0 = std::time::Instant::now();
            let runnable: Arc<dyn tract_onnx::tract_core::runtime::Runnable> = rt
                .prepare(typed)
                .map_err(|e| fail(format!("{e:#}")))?
                .into();
            log::info!(
                "tract-cuda: `{network}` prepared in {:.1} s",
                t0.elapsed().as_secs_f64()
            );
            Ok(Plan::Device(Arc::new(TractCudaPlan {
                network: network.to_string(),
                runnable,
                io: IoSpec { inputs, outputs },
            })))
        })
    }
}

/// A network prepared by tract-cuda for fixed input shapes.
pub struct TractCudaPlan {
    network: String,
    runnable: Arc<dyn tract_onnx::tract_core::runtime::Runnable>,
    io: IoSpec,
}

impl DevicePlan for TractCudaPlan {
    fn kind(&self) -> EngineKind {
        KIND
    }
    fn io(&self) -> &IoSpec {
        &self.io
    }
    fn ordinal(&self) -> usize {
        0
    }
    fn workspace(&self) -> WorkspaceSpec {
        WorkspaceSpec {
            bytes: 0,
            align: crate::cuda::DEFAULT_ALIGN,
        }
    }
    fn memory(&self) -> PlanMemory {
        PlanMemory::default()
    }
    fn capture_safety(&self) -> CaptureSafety {
        CaptureSafety::Unsafe(
            "tract-cuda runs on its own thread-local stream, allocates a device memory pool and \
             input tensors every run, and synchronises inside run (DeviceSync ToHost)",
        )
    }
    fn executor(&self, _ctx: &Context) -> Result<Box<dyn DeviceExecutor>, PrepareError> {
        catch_prepare(KIND, &self.network, || {
            let fail = |e: TractError| PrepareError::Backend {
                engine: KIND,
                network: self.network.clone(),
                message: format!("{e:#}"),
            };
            let state = self.runnable.spawn().map_err(fail)?;
            let mut inputs = Vec::new();
            for t in &self.io.inputs {
                let dt = match t.dtype {
                    crate::tensor::DType::F32 => DatumType::F32,
                    crate::tensor::DType::F16 => DatumType::F16,
                    crate::tensor::DType::I64 => DatumType::I64,
                    crate::tensor::DType::I32 => DatumType::I32,
                    crate::tensor::DType::U8 => DatumType::U8,
                    other => {
                        return Err(PrepareError::Io {
                            network: self.network.clone(),
                            tensor: t.name.clone(),
                            detail: format!("tract-cuda input of type {other} is not supported"),
                        });
                    }
                };
                let dev = DeviceTensor::uninitialized_dt(dt, &t.shape).map_err(fail)?;
                let ptr = DevicePtr(dev.device_buffer_ptr() as u64 + dev.buffer_offset::<u64>());
                inputs.push((dev, ptr, t.byte_len().unwrap_or(0)));
            }
            let outputs = self
                .io
                .outputs
                .iter()
                .map(|t| t.byte_len().unwrap_or(0))
                .collect();
            Ok(Box::new(TractCudaExecutor {
                state,
                inputs,
                outputs,
                bound_in: Vec::new(),
                bound_out: Vec::new(),
                last: tvec![],
                host_bounce: Vec::new(),
            }) as Box<dyn DeviceExecutor>)
        })
    }
}

/// Per-run state of a [`TractCudaPlan`].
pub struct TractCudaExecutor {
    state: Box<dyn tract_onnx::tract_core::runtime::State>,
    /// Device tensors tract owns, their addresses and byte sizes.
    inputs: Vec<(DeviceTensor, DevicePtr, usize)>,
    /// Output byte sizes.
    outputs: Vec<usize>,
    bound_in: Vec<DeviceRegion>,
    bound_out: Vec<DeviceRegion>,
    last: TVec<TValue>,
    host_bounce: Vec<u8>,
}

// SAFETY: tract states are Send; device tensors are Arc'd buffer handles used from one thread
// at a time (the executor is not Sync and is moved, never shared).
unsafe impl Send for TractCudaExecutor {}

fn check_regions(
    what: &'static str,
    regions: &[DeviceRegion],
    sizes: impl ExactSizeIterator<Item = usize>,
) -> Result<(), RunError> {
    if regions.len() != sizes.len() {
        return Err(RunError::BufferCount {
            what,
            expected: sizes.len(),
            actual: regions.len(),
        });
    }
    for (i, (r, need)) in regions.iter().zip(sizes).enumerate() {
        if r.bytes < need {
            return Err(RunError::BufferSize {
                what,
                index: i,
                expected: need,
                actual: r.bytes,
            });
        }
    }
    Ok(())
}

impl DeviceExecutor for TractCudaExecutor {
    unsafe fn bind(&mut self, b: &Bindings<'_>) -> Result<(), RunError> {
        check_regions("inputs", b.inputs, self.inputs.iter().map(|i| i.2))?;
        check_regions("outputs", b.outputs, self.outputs.iter().copied())?;
        self.bound_in = b.inputs.to_vec();
        self.bound_out = b.outputs.to_vec();
        Ok(())
    }

    fn enqueue(&mut self, stream: &Stream, mode: Enqueue) -> Result<(), RunError> {
        if mode == Enqueue::Capturing {
            return Err(RunError::NotCapturable { engine: KIND });
        }
        if self.bound_in.len() != self.inputs.len() {
            return Err(RunError::NotBound { engine: KIND });
        }
        let s = stream.raw();
        for ((_, dst, bytes), src) in self.inputs.iter().zip(&self.bound_in) {
            // SAFETY: both ranges hold `bytes` bytes (bind checked the region; tract's tensor
            // has the input's shape).
            unsafe { stream.memcpy_dtod(*dst, src.ptr, *bytes) }.map_err(drv)?;
        }
        // Orders the session's earlier work and these copies before tract's own stream, and
        // retires the previous run's output copies before those tensors are dropped.
        // SAFETY: valid stream of the current context.
        unsafe { check("cuStreamSynchronize", sys::cuStreamSynchronize(s)) }.map_err(drv)?;
        let mut values = TVec::new();
        for (dev, _, _) in &self.inputs {
            let t = LazyHostStorage::new(dev.clone())
                .map_err(|e| {
                    log::error!("tract-cuda: wrapping an input device tensor: {e:#}");
                    backend("input wrap")
                })?
                .into_tensor();
            values.push(t.into_tvalue());
        }
        let state = &mut self.state;
        let outputs = catch_run(KIND, "run", || {
            state.run(values).map_err(|e| {
                log::error!("tract-cuda run failed: {e:#}");
                backend("run")
            })
        })?;
        let mut synced = false;
        for ((out, region), bytes) in outputs.iter().zip(&self.bound_out).zip(&self.outputs) {
            let dev_src = out
                .storage_as::<LazyHostStorage>()
                .and_then(|l| l.device())
                .map(|d| DevicePtr(d.device_buffer_ptr() as u64 + d.buffer_offset::<u64>()));
            if let Some(src) = dev_src {
                // SAFETY: tract's output tensor holds `bytes` bytes and stays alive in `last`
                // until the next run synchronises the stream.
                unsafe { stream.memcpy_dtod(region.ptr, src, *bytes) }.map_err(drv)?;
            } else {
                let view = out.try_as_plain_ram().map(|v| v.as_bytes().to_vec());
                let view = view.map_err(|_| backend("output is not plain memory"))?;
                self.host_bounce = view;
                // SAFETY: host_bounce outlives the copy: the stream is synchronised below.
                unsafe { stream.memcpy_htod(region.ptr, self.host_bounce.as_ptr(), *bytes) }
                    .map_err(drv)?;
                // SAFETY: valid stream.
                unsafe { check("cuStreamSynchronize", sys::cuStreamSynchronize(s)) }
                    .map_err(drv)?;
                synced = true;
            }
        }
        if synced {
            log::debug!("tract-cuda returned a host output tensor: copied host to device");
        }
        self.last = outputs;
        Ok(())
    }
}

fn check(call: &'static str, res: sys::CUresult) -> Result<(), DriverError> {
    if res == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(DriverError { call, code: res })
    }
}
