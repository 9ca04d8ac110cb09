//! Device-placed engines provided by the CUDA layer, on the crate's [`Engine`] trait.
//!
//! A GPU session binds an engine's input and output to regions of its arena
//! ([`Engine::bind_device`]) and calls [`Engine::run`] with its stream. When the engine is
//! [`CaptureSafety::Safe`] the session captures pre → engine → post as one graph; otherwise it
//! captures pre and post separately and runs the engine eagerly between them, saying why in
//! the load log.

use cudarc::driver::sys;

use crate::engine::{
    CaptureSafety, Engine, EngineKind, IoMode, Placement, RunError, StreamHandle, TensorSpec,
};

use super::error::check;
use super::memory::DevicePtr;

/// A capture-safe stand-in engine that "infers" by copying a recorded network output
/// (uploaded once at load) into its bound output: one device-to-device copy node.
///
/// For tests and benchmarks of everything around the network on hosts that have no
/// capture-safe engine for the model (the H200 host has no TensorRT): it exercises exactly the
/// session path a TensorRT engine takes (bind, enqueue on the session stream, capture,
/// replay), with a known output. `kind()` is [`EngineKind::CudaNative`] (a device engine of
/// tether's own; the vocabulary has no "none" engine).
pub struct ReplayEngine {
    recorded: DevicePtr,
    inputs: Vec<TensorSpec>,
    outputs: Vec<TensorSpec>,
    output: Option<DevicePtr>,
    output_bytes: usize,
}

impl ReplayEngine {
    /// `recorded` holds `output.byte_len()` bytes in device memory that outlives the engine.
    pub fn new(recorded: DevicePtr, input: TensorSpec, output: TensorSpec) -> Self {
        let output_bytes = output.byte_len().unwrap_or(0);
        ReplayEngine {
            recorded,
            inputs: vec![input],
            outputs: vec![output],
            output: None,
            output_bytes,
        }
    }
}

impl Engine for ReplayEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::CudaNative
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
        CaptureSafety::Safe
    }
    unsafe fn bind_device(
        &mut self,
        mode: IoMode,
        index: usize,
        address: u64,
        bytes: usize,
    ) -> Result<(), RunError> {
        if index != 0 {
            let count = 1;
            return Err(RunError::NoSuchTensor { mode, index, count });
        }
        if mode == IoMode::Output {
            if bytes < self.output_bytes {
                return Err(RunError::BadHostBuffer { len: bytes });
            }
            self.output = Some(DevicePtr(address));
        }
        Ok(())
    }
    fn run(&mut self, stream: StreamHandle) -> Result<(), RunError> {
        let out = self.output.ok_or(RunError::Backend {
            engine: EngineKind::CudaNative,
            what: "run before bind",
        })?;
        // SAFETY: both regions hold output_bytes bytes (constructor and bind_device contracts);
        // the stream handle belongs to the current context.
        let res = unsafe {
            sys::cuMemcpyDtoDAsync_v2(
                out.0,
                self.recorded.0,
                self.output_bytes,
                stream.0 as sys::CUstream,
            )
        };
        check("cuMemcpyDtoDAsync", res).map_err(|e| {
            log::error!("replay engine: {e}");
            RunError::Backend {
                engine: EngineKind::CudaNative,
                what: "cuMemcpyDtoDAsync",
            }
        })
    }
}
