//! The TensorRT backend: a bundle's TensorRT plan on the device, through tether's TensorRT
//! layer ([`crate::tensorrt`], loaded at run time).
//!
//! - **Plan** ([`TensorRtPlan`]): the compatibility gate, then the plan deserialized once
//!   straight from the bundle's mapped section (`ICudaEngine`, shared by every executor),
//!   its I/O tensors resolved for the session's input shapes.
//! - **Executor** ([`TensorRtExecutor`]): one `IExecutionContext` (`kUSER_MANAGED`) per
//!   session; [`DeviceExecutor::bind`] gives it its workspace (`setDeviceMemoryV2`, a region
//!   of the session arena) and every I/O address (`setTensorAddress`), and may do so again
//!   before capture; [`DeviceExecutor::enqueue`] is one `enqueueV3` (the capture variant
//!   refuses known blockers without calling TensorRT).

use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use crate::backend::{
    Backend, Bindings, CaptureSafety, DeviceExecutor, DevicePlan, EngineKind, Enqueue, IoSpec,
    NetworkSource, Placement, Plan, PlanMemory, PrepareError, PrepareOptions, RunError,
    SourceFormat, WorkspaceSpec,
};
use crate::cuda::{Context, DeviceRegion, Stream};
use crate::tensor::{DType, IoMode, TensorSpec};
use crate::tensorrt::{
    CaptureBlocker, DataType, DeserializeOptions, DeviceMemory, Engine, ExecutionContext,
    LoadError, Runtime, TensorBinding, TensorIoMode, TensorLocation, TensorRt, UnboundContext,
};
use tether_targets::{GpuFacts, Sm};

const KIND: EngineKind = EngineKind::TensorRt;

/// The TensorRT library of this process, loaded once (`TETHER_TENSORRT_LIB`, then the
/// standard locations).
///
/// # Errors
/// Why it could not be loaded (every path tried).
pub fn library() -> Result<&'static TensorRt, &'static LoadError> {
    static LIB: OnceLock<Result<TensorRt, LoadError>> = OnceLock::new();
    LIB.get_or_init(|| {
        let r = TensorRt::load(None);
        if let Err(e) = &r {
            log::debug!("TensorRT: {e}");
        }
        r
    })
    .as_ref()
}

/// A TensorRT runtime (`IRuntime`) for one backend: it lives as long as the plans it
/// deserialized (they hold it), and no longer.
fn runtime() -> Result<Runtime, String> {
    let lib = library().map_err(|e| e.to_string())?;
    lib.create_runtime().map_err(|e| e.to_string())
}

/// The TensorRT backend on one device.
#[derive(Clone)]
pub struct TensorRtBackend {
    ctx: Context,
    runtime: Runtime,
}

impl std::fmt::Debug for TensorRtBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorRtBackend")
            .field("device", &self.ctx.properties().name)
            .finish()
    }
}

impl TensorRtBackend {
    /// The backend on `ctx`'s device. `host_code_required` is what selection decided for
    /// the plan (a version-compatible plan that embeds its lean runtime); the gate decides
    /// it again from the same rules at deserialization.
    ///
    /// # Errors
    /// [`PrepareError::Backend`] when the library cannot be loaded or the runtime created.
    pub fn new(ctx: Context, host_code_required: bool) -> Result<Self, PrepareError> {
        let _ = host_code_required;
        let runtime = runtime().map_err(|message| PrepareError::Backend {
            engine: KIND,
            network: String::new(),
            message,
        })?;
        Ok(TensorRtBackend { ctx, runtime })
    }
}

fn dtype_of(t: DataType) -> Option<DType> {
    Some(match t {
        DataType::Float => DType::F32,
        DataType::Half => DType::F16,
        DataType::Bf16 => DType::BF16,
        DataType::Int8 => DType::I8,
        DataType::Uint8 => DType::U8,
        DataType::Int32 => DType::I32,
        DataType::Int64 => DType::I64,
        DataType::Bool => DType::Bool,
        _ => return None,
    })
}

fn blocker_reason(b: CaptureBlocker) -> &'static str {
    match b {
        CaptureBlocker::DataDependentOutputShape => {
            "TensorRT: an output has a data-dependent shape (enqueueV3 allocates)"
        }
        CaptureBlocker::WeightStreaming => "TensorRT: the plan streams weights from host memory",
        CaptureBlocker::HostIoTensor => {
            "TensorRT: an I/O tensor lives in host memory (read at enqueue time)"
        }
    }
}

impl Backend for TensorRtBackend {
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
        if source.format != SourceFormat::TensorRtPlan {
            return Err(fail(format!(
                "{:?} payloads are not TensorRT plans",
                source.format
            )));
        }
        // A plan is built offline: a value cannot be substituted for one of its inputs.
        if let Some(f) = options.fixed_inputs.first() {
            return Err(PrepareError::Io {
                network: network.to_string(),
                tensor: f.name.clone(),
                detail: format!(
                    "cannot fix input {f}: a TensorRT plan takes every input at run time"
                ),
            });
        }
        let offer = source
            .target
            .ok_or_else(|| fail("the plan has no target record".into()))?;
        let record = offer.plan_record();
        let props = self.ctx.properties();
        let (major, minor) = props.compute_capability;
        let gpu = GpuFacts {
            sm: Sm::new(
                u8::try_from(major).unwrap_or(u8::MAX),
                u8::try_from(minor).unwrap_or(u8::MAX),
            ),
            integrated: props.integrated,
        };
        self.ctx.bind().map_err(|e| fail(e.to_string()))?;
        let engine = self
            .runtime
            .deserialize(source.bytes, &record, gpu, &DeserializeOptions::default())
            .map_err(|e| fail(e.to_string()))?;
        // Input shapes by the engine's input order.
        let input_names: Vec<String> = engine
            .io_tensors()
            .iter()
            .filter(|t| t.mode == TensorIoMode::Input)
            .map(|t| t.name().to_string())
            .collect();
        if !options.input_shapes.is_empty() && options.input_shapes.len() != input_names.len() {
            return Err(PrepareError::Io {
                network: network.to_string(),
                tensor: "(inputs)".into(),
                detail: format!(
                    "the plan has {} inputs but {} input shapes were given",
                    input_names.len(),
                    options.input_shapes.len()
                ),
            });
        }
        let shapes: Vec<(String, Vec<i64>)> = input_names
            .iter()
            .zip(&options.input_shapes)
            .map(|(n, s)| (n.clone(), s.iter().map(|&d| d as i64).collect()))
            .collect();
        let probe = create_context(&engine, &shapes).map_err(|e| fail(e.to_string()))?;
        let mut io = IoSpec::default();
        for t in engine.io_tensors() {
            let name = t.name().to_string();
            if t.location != TensorLocation::Device {
                return Err(PrepareError::Io {
                    network: network.to_string(),
                    tensor: name,
                    detail: "lives in host memory (shape tensor); tether binds device tensors only"
                        .into(),
                });
            }
            let dtype = dtype_of(t.data_type).ok_or_else(|| PrepareError::Io {
                network: network.to_string(),
                tensor: name.clone(),
                detail: format!("TensorRT type {:?} has no tether equivalent", t.data_type),
            })?;
            let dims = probe.tensor_shape(&name).unwrap_or(&[]).to_vec();
            let shape = dims
                .iter()
                .map(|&d| usize::try_from(d).ok())
                .collect::<Option<Vec<usize>>>()
                .ok_or_else(|| PrepareError::Io {
                    network: network.to_string(),
                    tensor: name.clone(),
                    detail: format!("shape {dims:?} is not concrete for the input shapes set"),
                })?;
            let (mode, list) = match t.mode {
                TensorIoMode::Input => (IoMode::Input, &mut io.inputs),
                TensorIoMode::Output => (IoMode::Output, &mut io.outputs),
            };
            list.push(TensorSpec {
                name,
                mode,
                dtype,
                shape,
            });
        }
        let capture = match probe.capture_blockers().iter().next() {
            None => CaptureSafety::Safe,
            Some(b) => CaptureSafety::Unsafe(blocker_reason(b)),
        };
        let workspace = usize::try_from(probe.device_memory_size()).unwrap_or(usize::MAX);
        drop(probe);
        log::info!(
            "TensorRT plan for `{network}` on {} (sm_{}): workspace {workspace} B (in the session arena)",
            self.ctx.properties().name,
            self.ctx.properties().sm()
        );
        Ok(Plan::Device(Arc::new(TensorRtPlan {
            network: network.to_string(),
            engine,
            shapes,
            io,
            workspace,
            capture,
            ordinal: self.ctx.properties().ordinal,
        })))
    }
}

fn create_context(
    engine: &Engine,
    shapes: &[(String, Vec<i64>)],
) -> Result<UnboundContext, crate::tensorrt::TrtError> {
    let refs: Vec<(&str, &[i64])> = shapes
        .iter()
        .map(|(n, s)| (n.as_str(), s.as_slice()))
        .collect();
    engine.create_execution_context(&refs)
}

/// A deserialized TensorRT plan (`ICudaEngine`) with its input shapes fixed.
pub struct TensorRtPlan {
    network: String,
    engine: Engine,
    shapes: Vec<(String, Vec<i64>)>,
    io: IoSpec,
    workspace: usize,
    capture: CaptureSafety,
    ordinal: usize,
}

impl DevicePlan for TensorRtPlan {
    fn kind(&self) -> EngineKind {
        KIND
    }
    fn io(&self) -> &IoSpec {
        &self.io
    }
    fn ordinal(&self) -> usize {
        self.ordinal
    }
    fn workspace(&self) -> WorkspaceSpec {
        WorkspaceSpec {
            bytes: self.workspace,
            align: crate::cuda::DEFAULT_ALIGN,
        }
    }
    fn memory(&self) -> PlanMemory {
        PlanMemory {
            weights_bytes: 0,
            activation_bytes: self.workspace,
        }
    }
    fn capture_safety(&self) -> CaptureSafety {
        self.capture
    }
    fn executor(&self, ctx: &Context) -> Result<Box<dyn DeviceExecutor>, PrepareError> {
        ctx.bind().map_err(|e| PrepareError::Backend {
            engine: KIND,
            network: self.network.clone(),
            message: e.to_string(),
        })?;
        let unbound =
            create_context(&self.engine, &self.shapes).map_err(|e| PrepareError::Backend {
                engine: KIND,
                network: self.network.clone(),
                message: e.to_string(),
            })?;
        let names = self
            .io
            .inputs
            .iter()
            .chain(&self.io.outputs)
            .map(|t| (t.name.clone(), t.byte_len().unwrap_or(0)))
            .collect();
        Ok(Box::new(TensorRtExecutor {
            state: State::Unbound(Some(unbound)),
            names,
            n_in: self.io.inputs.len(),
            workspace: self.workspace,
        }))
    }
}

enum State {
    Unbound(Option<UnboundContext>),
    Bound(ExecutionContext),
}

/// One execution context of a [`TensorRtPlan`], bound to session regions.
pub struct TensorRtExecutor {
    state: State,
    /// I/O names (inputs, then outputs) and byte sizes.
    names: Vec<(String, usize)>,
    n_in: usize,
    workspace: usize,
}

impl DeviceExecutor for TensorRtExecutor {
    unsafe fn bind(&mut self, b: &Bindings<'_>) -> Result<(), RunError> {
        let n_out = self.names.len() - self.n_in;
        for (what, regions, expected) in [
            ("inputs", b.inputs, self.n_in),
            ("outputs", b.outputs, n_out),
        ] {
            if regions.len() != expected {
                return Err(RunError::BufferCount {
                    what,
                    expected,
                    actual: regions.len(),
                });
            }
        }
        let all: Vec<DeviceRegion> = b.inputs.iter().chain(b.outputs).copied().collect();
        for (i, ((_, need), r)) in self.names.iter().zip(&all).enumerate() {
            if r.bytes < *need {
                return Err(RunError::BufferSize {
                    what: "tensor",
                    index: i,
                    expected: *need,
                    actual: r.bytes,
                });
            }
        }
        if b.workspace.bytes < self.workspace {
            return Err(RunError::BufferSize {
                what: "workspace",
                index: 0,
                expected: self.workspace,
                actual: b.workspace.bytes,
            });
        }
        let bindings: Vec<TensorBinding<'_>> = self
            .names
            .iter()
            .zip(&all)
            .map(|((name, _), r)| TensorBinding {
                name,
                address: r.ptr.0,
            })
            .collect();
        let memory = DeviceMemory {
            address: b.workspace.ptr.0,
            size: b.workspace.bytes as u64,
        };
        let failed = |e: crate::tensorrt::TrtError| {
            log::error!("TensorRT binding failed: {e}");
            RunError::Backend {
                engine: KIND,
                what: "setTensorAddress/setDeviceMemoryV2",
            }
        };
        match &mut self.state {
            State::Unbound(slot) => {
                let unbound = slot.take().ok_or(RunError::NotBound { engine: KIND })?;
                // SAFETY: the caller's contract (regions of the session arena, sized above).
                let ctx = unsafe { unbound.bind(memory, &bindings) }.map_err(failed)?;
                self.state = State::Bound(ctx);
            }
            State::Bound(ctx) => {
                // SAFETY: as above.
                unsafe { ctx.rebind(memory, &bindings) }.map_err(failed)?;
            }
        }
        Ok(())
    }

    fn enqueue(&mut self, stream: &Stream, mode: Enqueue) -> Result<(), RunError> {
        let State::Bound(ctx) = &mut self.state else {
            return Err(RunError::NotBound { engine: KIND });
        };
        let raw = stream.raw() as *mut c_void;
        match mode {
            // SAFETY: the stream belongs to the context the engine was deserialized on (the
            // session's), and the bound memory lives in the session's arena.
            Enqueue::Eager => unsafe { ctx.enqueue(raw) }.map_err(|_| RunError::Backend {
                engine: KIND,
                what: "enqueueV3",
            }),
            // SAFETY: as above; the stream is capturing (the session's capture).
            Enqueue::Capturing => unsafe { ctx.enqueue_for_capture(raw) }
                .map_err(|_| RunError::NotCapturable { engine: KIND }),
        }
    }
}
