//! The one place the OCR family runs networks.
//!
//! Today each network is a [`TractCpuEngine`] prepared for one concrete
//! input shape and kept: the detector per input size (a bounded cache, since
//! the size follows the image's), the recogniser per width bucket, the
//! classifier once. A prepared engine is never re-prepared while it is held.
//! Swapping this module for the runtime's device `Model` / `Session` (one
//! captured graph per network and shape) leaves the rest of the crate as is.
//!
//! The tract CPU engine allocates its intermediate tensors inside every run;
//! the host code around it does not (see `pipeline.rs`).

use tether_runtime::cpu::TractCpuEngine;
use tether_runtime::{Engine, StreamHandle};

use crate::OcrError;

/// A network prepared for one input shape `[1, 3, h, w]`.
pub(crate) struct Prepared {
    engine: TractCpuEngine,
    input_len: usize,
    output_shape: Vec<usize>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("input_len", &self.input_len)
            .field("output_shape", &self.output_shape)
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// Parse, type, optimise and plan `onnx` for input `[1, 3, h, w]`.
    ///
    /// # Errors
    /// [`OcrError::Network`] naming `network` and the shape.
    pub(crate) fn load(
        network: &'static str,
        onnx: &[u8],
        h: usize,
        w: usize,
    ) -> Result<Self, OcrError> {
        let shape = vec![1, 3, h, w];
        let engine = TractCpuEngine::load(onnx, std::slice::from_ref(&shape)).map_err(|e| {
            OcrError::Network {
                network,
                reason: format!("cannot prepare for input {shape:?}: {e}"),
            }
        })?;
        let Some(out) = engine.outputs().first() else {
            return Err(OcrError::Network {
                network,
                reason: "the model has no output".into(),
            });
        };
        let output_shape = out.shape.clone();
        log::debug!("{network}: prepared for input {shape:?}, output {output_shape:?}");
        Ok(Self {
            engine,
            input_len: 3 * h * w,
            output_shape,
        })
    }

    /// The output shape at this input shape.
    pub(crate) fn output_shape(&self) -> &[usize] {
        &self.output_shape
    }

    /// The input tensor, `3 * h * w` f32 values (CHW).
    ///
    /// # Errors
    /// [`OcrError::Run`] / [`OcrError::InputBuffer`] on an engine bug.
    pub(crate) fn input_mut(&mut self, network: &'static str) -> Result<&mut [f32], OcrError> {
        let bytes = self.engine.input_host_mut(0)?;
        let v = tether_runtime::host::f32_mut(bytes)?;
        if v.len() != self.input_len {
            return Err(OcrError::InputBuffer {
                network,
                expected: self.input_len,
                actual: v.len(),
            });
        }
        Ok(v)
    }

    /// Run and return output 0.
    ///
    /// # Errors
    /// [`OcrError::Run`] when the engine fails.
    pub(crate) fn run(&mut self) -> Result<&[f32], OcrError> {
        self.engine.run(StreamHandle::HOST)?;
        Ok(tether_runtime::host::f32_ref(self.engine.output_host(0)?)?)
    }
}

/// Engines keyed by input size, prepared on first use and kept; at most
/// `capacity` held (the least recently used one is dropped for a new size).
pub(crate) struct ShapeCache {
    network: &'static str,
    capacity: usize,
    entries: Vec<((usize, usize), Prepared, u64)>,
    clock: u64,
    prepared: usize,
}

impl ShapeCache {
    pub(crate) fn new(network: &'static str, capacity: usize) -> Self {
        Self {
            network,
            capacity: capacity.max(1),
            entries: Vec::with_capacity(capacity.max(1)),
            clock: 0,
            prepared: 0,
        }
    }

    /// The engine for input `h x w`, preparing it from `onnx` when not held.
    ///
    /// # Errors
    /// [`OcrError::Network`] when preparation fails.
    pub(crate) fn get(
        &mut self,
        onnx: &[u8],
        h: usize,
        w: usize,
    ) -> Result<&mut Prepared, OcrError> {
        self.clock += 1;
        let pos = match self.entries.iter().position(|e| e.0 == (h, w)) {
            Some(i) => i,
            None => {
                if self.entries.len() >= self.capacity {
                    let lru = self
                        .entries
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, e)| e.2)
                        .map_or(0, |(i, _)| i);
                    let old = self.entries.swap_remove(lru);
                    log::warn!(
                        "{}: dropping the engine for {}x{} to prepare {w}x{h} (cache of {}; raise it when input sizes alternate)",
                        self.network,
                        old.0.1,
                        old.0.0,
                        self.capacity
                    );
                }
                let p = Prepared::load(self.network, onnx, h, w)?;
                self.prepared += 1;
                self.entries.push(((h, w), p, self.clock));
                self.entries.len() - 1
            }
        };
        let e = &mut self.entries[pos];
        e.2 = self.clock;
        Ok(&mut e.1)
    }

    /// Engines prepared so far (a cache hit prepares nothing).
    pub(crate) fn prepared_count(&self) -> usize {
        self.prepared
    }

    /// Input sizes `(h, w)` held now.
    pub(crate) fn held(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.entries.iter().map(|e| e.0)
    }
}
