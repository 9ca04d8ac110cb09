//! [`TensorRtEngine`]: a TensorRT plan on the crate's [`crate::Engine`] trait
//! (feature `cuda`), the device engine the GPU sessions and
//! `tether doctor --self-test` run.
//!
//! Life cycle, following the trait's:
//!
//! 1. [`TensorRtEngine::load`] runs the compatibility gate, deserializes the
//!    plan, creates a `kUSER_MANAGED` execution context with the input shapes,
//!    and allocates the context's workspace (`device_memory_size` bytes) **once**
//!    as one [`DeviceArena`] of the CUDA layer;
//! 2. [`crate::Engine::bind_device`] records each I/O address; when the last
//!    one is known the context is bound (`setDeviceMemoryV2` + every
//!    `setTensorAddress`), once. [`TensorRtEngine::bind_own_io`] does the same
//!    with an I/O arena the engine allocates itself (tools and tests);
//! 3. [`crate::Engine::run`] is one `enqueueV3`: no allocation, no
//!    synchronisation.
//!
//! [`crate::Engine::capture_safety`] comes from the context's
//! [`super::CaptureBlockers`]; an engine that cannot be captured runs eagerly
//! and the load log says why.
//!
//! The `unsafe` here is limited to calling the TensorRT layer's three API
//! contracts ([`super::UnboundContext::bind`], [`super::ExecutionContext::enqueue`],
//! [`super::ExecutionContext::enqueue_for_capture`]) and the CUDA layer's
//! copies, each with the invariant that makes it sound.

use std::ffi::c_void;
use std::fmt;

use crate::cuda::{ArenaPlan, Context, CudaError, DeviceArena, DevicePtr, DriverError, Stream};
use crate::engine::{
    CaptureSafety, DType, Engine as EngineTrait, EngineKind, IoMode, Placement, RunError,
    StreamHandle, TensorSpec,
};

use super::abi::{DataType, TensorIoMode};
use super::engine::{
    CaptureBlocker, DeserializeOptions, DeviceMemory, ExecutionContext, Runtime, TensorBinding,
    UnboundContext,
};
use super::error::{CaptureError, TrtError};
use tether_targets::compat::PlanRecord;
use tether_targets::{GpuFacts, Sm};

/// Why a [`TensorRtEngine`] could not be prepared or used outside the
/// per-frame path.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The TensorRT layer refused (gate, deserialization, context, binding).
    #[error("TensorRT: {0}")]
    TensorRt(#[from] TrtError),
    /// A CUDA call failed (workspace or I/O allocation, copy, synchronise).
    #[error("CUDA: {0}")]
    Cuda(#[from] CudaError),
    /// A CUDA driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(#[from] DriverError),
    /// An I/O tensor's element type has no tether equivalent.
    #[error("I/O tensor `{name}` has TensorRT type {data_type:?}, which tether does not bind")]
    UnsupportedType {
        /// Tensor name.
        name: String,
        /// TensorRT's type.
        data_type: DataType,
    },
    /// An I/O tensor's shape is not concrete after setting the input shapes.
    #[error(
        "I/O tensor `{name}` has shape {shape:?} after the input shapes were set; tether needs concrete shapes"
    )]
    DynamicShape {
        /// Tensor name.
        name: String,
        /// The resolved shape (`-1` = data dependent).
        shape: Vec<i64>,
    },
    /// An I/O tensor is located in host memory (shape tensor); this engine
    /// binds device tensors only.
    #[error("I/O tensor `{name}` lives in host memory; TensorRtEngine binds device tensors only")]
    HostTensor {
        /// Tensor name.
        name: String,
    },
    /// A host buffer does not match the tensor's size.
    #[error(
        "{mode:?} tensor {index} (`{name}`) holds {expected} bytes but the host buffer has {given}"
    )]
    HostBufferSize {
        /// Input or output.
        mode: IoMode,
        /// Index among the tensors of that mode.
        index: usize,
        /// Tensor name.
        name: String,
        /// Tensor size in bytes.
        expected: usize,
        /// Host buffer size in bytes.
        given: usize,
    },
    /// An I/O index outside the tensor list.
    #[error("{mode:?} tensor index {index} out of range: the engine has {count}")]
    NoSuchTensor {
        /// Input or output.
        mode: IoMode,
        /// The index asked for.
        index: usize,
        /// How many tensors of that mode exist.
        count: usize,
    },
    /// The operation needs the engine's own I/O arena ([`TensorRtEngine::bind_own_io`]).
    #[error("host copies need the engine's own I/O buffers (call bind_own_io first)")]
    NoOwnIo,
    /// The context is already bound (binding happens once).
    #[error("the TensorRT execution context is already bound; bindings are made once, at load")]
    AlreadyBound,
    /// A run was asked for before every I/O tensor had an address.
    #[error(
        "the TensorRT execution context is not bound yet: {missing} I/O tensor(s) have no address"
    )]
    NotBound {
        /// How many tensors lack an address.
        missing: usize,
    },
    /// `enqueueV3` failed; TensorRT's messages follow.
    #[error("enqueueV3 failed: {messages}")]
    Enqueue {
        /// TensorRT's recorded errors, joined.
        messages: String,
    },
    /// The engine cannot be recorded into a CUDA graph.
    #[error("{0}")]
    Capture(#[from] CaptureError),
}

enum State {
    /// Waiting for addresses; `Option` so `bind` can take it by value.
    Unbound(Option<UnboundContext>),
    /// Bound and runnable.
    Bound(ExecutionContext),
}

/// A TensorRT plan ready to run on a CUDA device, implementing
/// [`crate::Engine`] with [`Placement::Device`].
///
/// Drop order: the execution context goes before the workspace and I/O
/// memory it uses.
pub struct TensorRtEngine {
    state: State,
    /// Addresses recorded by `bind_device`, inputs then outputs.
    addresses: Vec<Option<u64>>,
    inputs: Vec<TensorSpec>,
    outputs: Vec<TensorSpec>,
    capture: CaptureSafety,
    runtime: Runtime,
    workspace: DeviceArena,
    own_io: Option<DeviceArena>,
    ctx: Context,
}

impl fmt::Debug for TensorRtEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorRtEngine")
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .field("capture", &self.capture)
            .field("workspace_bytes", &self.workspace.plan().total_bytes())
            .field(
                "bound",
                &matches!(self.state, State::Bound(_)) as &dyn fmt::Debug,
            )
            .finish_non_exhaustive()
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

impl TensorRtEngine {
    /// Deserializes `plan` (after the compatibility gate, with its target
    /// `record` against the loaded library and `ctx`'s GPU), creates an execution
    /// context with `input_shapes` (name, extents; only dynamic inputs need
    /// one) and allocates its workspace once on `ctx`'s device.
    ///
    /// # Errors
    /// [`SessionError::TensorRt`] (gate, deserialization, context creation,
    /// shapes), [`SessionError::UnsupportedType`], [`SessionError::DynamicShape`],
    /// [`SessionError::HostTensor`], [`SessionError::Driver`] (workspace allocation).
    pub fn load(
        runtime: &Runtime,
        plan: &[u8],
        record: &PlanRecord,
        ctx: &Context,
        input_shapes: &[(&str, &[i64])],
    ) -> Result<Self, SessionError> {
        let props = ctx.properties();
        let (major, minor) = props.compute_capability;
        let gpu = GpuFacts {
            sm: Sm::new(
                u8::try_from(major).unwrap_or(u8::MAX),
                u8::try_from(minor).unwrap_or(u8::MAX),
            ),
            integrated: props.integrated,
        };
        ctx.bind()?;
        let engine = runtime.deserialize(plan, record, gpu, &DeserializeOptions::default())?;
        let unbound = engine.create_execution_context(input_shapes)?;
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        for t in engine.io_tensors() {
            let name = t.name().to_string();
            if t.location != super::abi::TensorLocation::Device {
                return Err(SessionError::HostTensor { name });
            }
            let dtype = dtype_of(t.data_type).ok_or_else(|| SessionError::UnsupportedType {
                name: name.clone(),
                data_type: t.data_type,
            })?;
            let shape_i = unbound.tensor_shape(&name).unwrap_or(&[]).to_vec();
            let shape: Option<Vec<usize>> =
                shape_i.iter().map(|&d| usize::try_from(d).ok()).collect();
            let shape = shape.ok_or_else(|| SessionError::DynamicShape {
                name: name.clone(),
                shape: shape_i.clone(),
            })?;
            let (mode, list) = match t.mode {
                TensorIoMode::Input => (IoMode::Input, &mut inputs),
                TensorIoMode::Output => (IoMode::Output, &mut outputs),
            };
            list.push(TensorSpec {
                name,
                mode,
                dtype,
                shape,
            });
        }
        let capture = match unbound.capture_blockers().iter().next() {
            None => CaptureSafety::Safe,
            Some(b) => {
                log::info!(
                    "TensorRT engine `{}` will run eagerly, not in a CUDA graph: {b}",
                    engine.name()
                );
                CaptureSafety::Unsafe(blocker_reason(b))
            }
        };
        let workspace_bytes = usize::try_from(unbound.device_memory_size()).unwrap_or(usize::MAX);
        let mut arena = ArenaPlan::new();
        arena.add("tensorrt workspace", workspace_bytes)?;
        let workspace = DeviceArena::new(ctx, arena)?;
        log::info!(
            "TensorRT engine `{}` on {} (sm_{}): workspace {} bytes allocated once; inputs [{}], outputs [{}]",
            engine.name(),
            ctx.properties().name,
            ctx.properties().sm(),
            workspace_bytes,
            list(&inputs),
            list(&outputs),
        );
        let count = inputs.len() + outputs.len();
        Ok(Self {
            state: State::Unbound(Some(unbound)),
            addresses: vec![None; count],
            inputs,
            outputs,
            capture,
            runtime: runtime.clone(),
            workspace,
            own_io: None,
            ctx: ctx.clone(),
        })
    }

    /// Workspace size in bytes (what the context asked for).
    pub fn workspace_bytes(&self) -> usize {
        self.workspace.plan().total_bytes()
    }

    /// Whether every I/O tensor has an address and the context is bound.
    pub fn is_bound(&self) -> bool {
        matches!(self.state, State::Bound(_))
    }

    /// Allocates one device arena for every I/O tensor (once) and binds the
    /// context to it. For tools and tests that copy through the host with
    /// [`Self::write_input`] / [`Self::read_output`]; a GPU session binds
    /// regions of its own arena with [`crate::Engine::bind_device`] instead.
    ///
    /// # Errors
    /// [`SessionError::AlreadyBound`], [`SessionError::Cuda`] /
    /// [`SessionError::Driver`] (allocation), [`SessionError::TensorRt`] (binding).
    pub fn bind_own_io(&mut self) -> Result<(), SessionError> {
        if self.is_bound() || self.own_io.is_some() {
            return Err(SessionError::AlreadyBound);
        }
        let mut plan = ArenaPlan::new();
        let mut ids = Vec::with_capacity(self.addresses.len());
        for t in self.inputs.iter().chain(&self.outputs) {
            ids.push(plan.add("tensorrt io", t.byte_len().unwrap_or(0).max(1))?);
        }
        let arena = DeviceArena::new(&self.ctx, plan)?;
        for (slot, id) in self.addresses.iter_mut().zip(&ids) {
            *slot = Some(arena.ptr(*id).0);
        }
        self.own_io = Some(arena);
        self.bind_now()
    }

    /// Binds the context once every address is known.
    fn bind_now(&mut self) -> Result<(), SessionError> {
        let State::Unbound(slot) = &mut self.state else {
            return Err(SessionError::AlreadyBound);
        };
        let missing = self.addresses.iter().filter(|a| a.is_none()).count();
        if missing > 0 {
            return Err(SessionError::NotBound { missing });
        }
        let Some(unbound) = slot.take() else {
            return Err(SessionError::AlreadyBound);
        };
        let bindings: Vec<TensorBinding<'_>> = self
            .inputs
            .iter()
            .chain(&self.outputs)
            .zip(&self.addresses)
            .map(|(t, a)| TensorBinding {
                name: &t.name,
                address: a.unwrap_or(0),
            })
            .collect();
        let memory = DeviceMemory {
            address: self.workspace.base().0,
            size: self.workspace.plan().total_bytes() as u64,
        };
        self.ctx.bind()?;
        // SAFETY: `memory` is this engine's own workspace arena, allocated on the
        // engine's context with at least `device_memory_size` bytes, and dropped
        // after the context (field order). Every I/O address came either from
        // the engine's own I/O arena (same lifetime argument) or from
        // `bind_device`, whose caller promised an allocation of at least the
        // tensor's size that outlives the engine; sizes were checked there.
        let bound = unsafe { unbound.bind(memory, &bindings) }?;
        self.state = State::Bound(bound);
        Ok(())
    }

    fn spec(&self, mode: IoMode, index: usize) -> Result<(usize, &TensorSpec), SessionError> {
        let (list, base) = match mode {
            IoMode::Input => (&self.inputs, 0),
            _ => (&self.outputs, self.inputs.len()),
        };
        list.get(index)
            .map(|t| (base + index, t))
            .ok_or(SessionError::NoSuchTensor {
                mode,
                index,
                count: list.len(),
            })
    }

    fn own_address(
        &self,
        mode: IoMode,
        index: usize,
        len: usize,
    ) -> Result<DevicePtr, SessionError> {
        if self.own_io.is_none() {
            return Err(SessionError::NoOwnIo);
        }
        let (slot, t) = self.spec(mode, index)?;
        let expected = t.byte_len().unwrap_or(0);
        if len != expected {
            return Err(SessionError::HostBufferSize {
                mode,
                index,
                name: t.name.clone(),
                expected,
                given: len,
            });
        }
        self.addresses[slot]
            .map(DevicePtr)
            .ok_or(SessionError::NotBound { missing: 1 })
    }

    /// Copies `data` into the engine's own buffer of input `index` on
    /// `stream` and waits for the copy (tools and tests; not the hot path).
    ///
    /// # Errors
    /// [`SessionError::NoOwnIo`], [`SessionError::NoSuchTensor`],
    /// [`SessionError::HostBufferSize`], [`SessionError::Driver`].
    pub fn write_input(
        &mut self,
        index: usize,
        data: &[u8],
        stream: &Stream,
    ) -> Result<(), SessionError> {
        let dst = self.own_address(IoMode::Input, index, data.len())?;
        stream.bind()?;
        // SAFETY: `dst` is a region of the engine's own I/O arena of exactly
        // `data.len()` bytes (checked against the tensor size); `data` stays
        // borrowed until the synchronise below returns.
        unsafe { stream.memcpy_htod(dst, data.as_ptr(), data.len()) }?;
        stream.synchronize()?;
        Ok(())
    }

    /// Fills the engine's own buffer of output `index` with zero bytes on
    /// `stream` and waits (lets a caller prove a later run wrote it).
    ///
    /// # Errors
    /// As [`Self::read_output`].
    pub fn clear_output(&mut self, index: usize, stream: &Stream) -> Result<(), SessionError> {
        let len = self.spec(IoMode::Output, index)?.1.byte_len().unwrap_or(0);
        let zeros = vec![0u8; len];
        let dst = self.own_address(IoMode::Output, index, len)?;
        stream.bind()?;
        // SAFETY: as in `write_input`: a region of exactly `len` bytes of the
        // engine's own arena; `zeros` lives until the synchronise returns.
        unsafe { stream.memcpy_htod(dst, zeros.as_ptr(), len) }?;
        stream.synchronize()?;
        Ok(())
    }

    /// Copies the engine's own buffer of output `index` into `out` on
    /// `stream` and waits for the copy (tools and tests; not the hot path).
    ///
    /// # Errors
    /// [`SessionError::NoOwnIo`], [`SessionError::NoSuchTensor`],
    /// [`SessionError::HostBufferSize`], [`SessionError::Driver`] (including
    /// an asynchronous error of the run).
    pub fn read_output(
        &self,
        index: usize,
        out: &mut [u8],
        stream: &Stream,
    ) -> Result<(), SessionError> {
        let src = self.own_address(IoMode::Output, index, out.len())?;
        stream.bind()?;
        // SAFETY: `src` is a region of the engine's own I/O arena of exactly
        // `out.len()` bytes; `out` stays mutably borrowed until the
        // synchronise below returns.
        unsafe { stream.memcpy_dtoh(out.as_mut_ptr(), src, out.len()) }?;
        stream.synchronize()?;
        Ok(())
    }

    /// Enqueues one inference on `stream`, reporting TensorRT's messages on
    /// failure (allocates only on failure). Same as [`crate::Engine::run`]
    /// with a typed error.
    ///
    /// # Errors
    /// [`SessionError::NotBound`], [`SessionError::Enqueue`].
    pub fn enqueue(&mut self, stream: &Stream) -> Result<(), SessionError> {
        let missing = self.addresses.iter().filter(|a| a.is_none()).count();
        let State::Bound(ec) = &mut self.state else {
            return Err(SessionError::NotBound { missing });
        };
        // SAFETY: `stream` is a live stream (borrowed for the call) of the
        // context the engine was deserialized on (`load` binds that context;
        // callers pass a stream of it); the workspace and I/O memory are alive
        // (field order, `bind_device` contract).
        let r = unsafe { ec.enqueue(stream.raw() as *mut c_void) };
        r.map_err(|_| SessionError::Enqueue {
            messages: self.messages(),
        })
    }

    /// Enqueues while `stream` is capturing into a CUDA graph (the graph
    /// layer's hook). Run [`Self::enqueue`] once and synchronise first.
    ///
    /// # Errors
    /// [`SessionError::NotBound`]; [`SessionError::Capture`] when a
    /// [`CaptureBlocker`] applies or TensorRT refused under capture: discard
    /// the capture and run eagerly.
    pub fn enqueue_for_capture(&mut self, stream: &Stream) -> Result<(), SessionError> {
        let missing = self.addresses.iter().filter(|a| a.is_none()).count();
        let State::Bound(ec) = &mut self.state else {
            return Err(SessionError::NotBound { missing });
        };
        // SAFETY: as in `enqueue`; `stream` is a non-default stream (the CUDA
        // layer creates only non-blocking streams) that the caller put in
        // capture mode.
        let r = unsafe { ec.enqueue_for_capture(stream.raw() as *mut c_void) };
        Ok(r?)
    }

    /// TensorRT's recorded errors, joined (allocates; failure paths only).
    fn messages(&self) -> String {
        let m = self.runtime.recorded_errors();
        if m.is_empty() {
            "TensorRT recorded no message".into()
        } else {
            m.iter()
                .map(|e| format!("{e:?}"))
                .collect::<Vec<_>>()
                .join("; ")
        }
    }
}

fn list(ts: &[TensorSpec]) -> String {
    ts.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl EngineTrait for TensorRtEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::TensorRt
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
        self.capture
    }

    /// Records the address; binds the context (once) when the last I/O
    /// tensor has one. A second binding after that is refused.
    unsafe fn bind_device(
        &mut self,
        mode: IoMode,
        index: usize,
        address: u64,
        bytes: usize,
    ) -> Result<(), RunError> {
        if self.is_bound() {
            log::error!("TensorRT engine: {}", SessionError::AlreadyBound);
            return Err(RunError::Unsupported {
                engine: EngineKind::TensorRt,
                what: "rebinding a bound execution context",
            });
        }
        let (slot, t) = self.spec(mode, index).map_err(|_| RunError::NoSuchTensor {
            mode,
            index,
            count: match mode {
                IoMode::Input => self.inputs.len(),
                _ => self.outputs.len(),
            },
        })?;
        let needed = t.byte_len().unwrap_or(usize::MAX);
        if bytes < needed {
            log::error!(
                "TensorRT engine: {mode:?} tensor `{}` needs {needed} bytes, the binding at {address:#x} has {bytes}",
                t.name
            );
            return Err(RunError::BadHostBuffer { len: bytes });
        }
        self.addresses[slot] = Some(address);
        if self.addresses.iter().all(Option::is_some) {
            self.bind_now().map_err(|e| {
                log::error!("TensorRT engine: binding failed: {e}");
                RunError::Backend {
                    engine: EngineKind::TensorRt,
                    what: "bind (setDeviceMemoryV2 / setTensorAddress)",
                }
            })?;
        }
        Ok(())
    }

    fn run(&mut self, stream: StreamHandle) -> Result<(), RunError> {
        let State::Bound(ec) = &mut self.state else {
            return Err(RunError::Backend {
                engine: EngineKind::TensorRt,
                what: "run before every I/O tensor was bound",
            });
        };
        // SAFETY: the trait's contract: `stream` is a stream of the current
        // context, which for a device engine is the one it was loaded on; the
        // workspace and I/O memory are alive (field order, `bind_device`
        // contract). One virtual call, no allocation.
        match unsafe { ec.enqueue(stream.0) } {
            Ok(()) => Ok(()),
            Err(_) => {
                log::error!("TensorRT enqueueV3 failed: {}", self.messages());
                Err(RunError::Backend {
                    engine: EngineKind::TensorRt,
                    what: "enqueueV3",
                })
            }
        }
    }
}
