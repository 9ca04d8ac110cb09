//! Errors of the TensorRT layer.

use std::fmt;
use std::path::PathBuf;

use tether_targets::TrtVersion;
use tether_targets::libs::{Outcome, SearchReport};

use super::compat::CompatError;

/// Loading the TensorRT library failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// No place of the search list held a usable library. The message is one
    /// line (how many places, and the first library that was there but not
    /// usable); `search` has every place tried, for `tether doctor`.
    #[error("{}", not_found(.search))]
    NotFound {
        /// Every place tried, with what happened there.
        search: SearchReport,
    },
}

impl LoadError {
    /// The search report.
    pub fn search(&self) -> &SearchReport {
        match self {
            LoadError::NotFound { search } => search,
        }
    }
}

/// `no usable TensorRT library (libnvinfer.so.11, ...): searched 14 places;
/// /x/libnvinfer.so.10: TensorRT 10.0.1: tether needs 10.1 or later; set
/// TETHER_TENSORRT_LIB ...`.
fn not_found(search: &SearchReport) -> String {
    let mut s = format!(
        "no usable TensorRT library ({}) found: {}",
        search.files.join(", "),
        search.searched()
    );
    let broken = search.tried.iter().find_map(|t| match &t.outcome {
        Outcome::Failed { file, reason } | Outcome::Rejected { file, reason } => {
            Some((file, reason))
        }
        _ => None,
    });
    if let Some((file, reason)) = broken {
        s.push_str(&format!("; {file}: {reason}"));
    }
    s.push_str(&format!(
        "; set {} to the library file or its folder (`tether doctor -v` lists every place)",
        super::library::ENV_LIBRARY
    ));
    s
}

/// Why TensorRT refused something, with TensorRT's own messages.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TrtMessages(pub Vec<String>);

impl fmt::Display for TrtMessages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("TensorRT reported no message");
        }
        for (i, m) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" | ")?;
            }
            write!(f, "TensorRT: {m}")?;
        }
        Ok(())
    }
}

/// An error of the TensorRT layer (outside the per-frame path).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrtError {
    /// The library could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The library's version has no interface table in tether.
    #[error(
        "TensorRT {version} at {path} is not supported: tether drives TensorRT 10.1 or later 10.x, and 11.x"
    )]
    UnsupportedVersion {
        /// Version the library reported.
        version: TrtVersion,
        /// Library path.
        path: PathBuf,
    },
    /// `createInferRuntime_INTERNAL` returned no usable object.
    #[error(
        "TensorRT {version} could not create a runtime (createInferRuntime_INTERNAL returned {returned:#x}): {messages}"
    )]
    RuntimeCreation {
        /// Library version.
        version: TrtVersion,
        /// The pointer value returned.
        returned: usize,
        /// What TensorRT logged.
        messages: TrtMessages,
    },
    /// The `getPImpl()` self-check after creating an object failed: the
    /// interface table does not match this library.
    #[error(
        "TensorRT ABI self-check failed for {object}: apiv getPImpl() returned {got:#x}, expected the object itself {expected:#x}; the interface table for TensorRT {version} does not match this library"
    )]
    AbiMismatch {
        /// Which object (`IRuntime`, `ICudaEngine`, `IExecutionContext`).
        object: &'static str,
        /// Pointer `getPImpl()` returned.
        got: usize,
        /// The public object's address.
        expected: usize,
        /// Library version.
        version: TrtVersion,
    },
    /// The compatibility gate refused the plan (nothing was deserialized).
    #[error(transparent)]
    Incompatible(#[from] CompatError),
    /// The plan needs host code and the caller did not allow it.
    #[error(
        "the plan embeds its lean runtime (host code), which needs setEngineHostCodeAllowed(true); allow it in DeserializeOptions only for trusted plans"
    )]
    HostCodeNotAllowed,
    /// `deserializeCudaEngine` returned null.
    #[error("TensorRT {version} rejected the plan ({plan_bytes} bytes): {messages}")]
    Deserialize {
        /// Library version.
        version: TrtVersion,
        /// Size of the plan given.
        plan_bytes: usize,
        /// TensorRT's own messages.
        messages: TrtMessages,
    },
    /// `createExecutionContext(kUSER_MANAGED)` returned null.
    #[error("TensorRT could not create an execution context for engine `{engine}`: {messages}")]
    ContextCreation {
        /// Engine name.
        engine: String,
        /// TensorRT's own messages.
        messages: TrtMessages,
    },
    /// A name given is not one of the engine's I/O tensors.
    #[error("`{name}` is not an I/O tensor of engine `{engine}` (its I/O tensors: {known})")]
    UnknownTensor {
        /// The name given.
        name: String,
        /// Engine name.
        engine: String,
        /// The engine's I/O tensor names, comma separated.
        known: String,
    },
    /// A shape was given for a tensor that is not an input.
    #[error("`{name}` is an output; only input shapes can be set")]
    NotAnInput {
        /// Tensor name.
        name: String,
    },
    /// `setInputShape` refused a shape.
    #[error("TensorRT refused input shape {shape:?} for `{name}`: {messages}")]
    InputShape {
        /// Tensor name.
        name: String,
        /// The shape given.
        shape: Vec<i64>,
        /// TensorRT's own messages.
        messages: TrtMessages,
    },
    /// A shape has more than 8 extents.
    #[error("shape {shape:?} for `{name}` has more than 8 dimensions")]
    TooManyDimensions {
        /// Tensor name.
        name: String,
        /// The shape given.
        shape: Vec<i64>,
    },
    /// Not every input shape was set (dynamic inputs remain).
    #[error("input shapes are not all specified: dynamic input `{name}` still has shape {shape:?}")]
    ShapesIncomplete {
        /// An input whose shape is still dynamic.
        name: String,
        /// Its current shape (-1 for unknown extents).
        shape: Vec<i64>,
    },
    /// The device memory given is smaller than the context needs.
    #[error(
        "execution context needs {needed} bytes of device memory, {given} were given at {address:#x}"
    )]
    DeviceMemoryTooSmall {
        /// Bytes needed (`updateDeviceMemorySizeForShapes`).
        needed: u64,
        /// Bytes given.
        given: u64,
        /// Device address given.
        address: u64,
    },
    /// An I/O tensor was not given an address.
    #[error("I/O tensor `{name}` was not bound to a device address")]
    Unbound {
        /// Tensor name.
        name: String,
    },
    /// `setTensorAddress` refused an address.
    #[error("TensorRT refused address {address:#x} for `{name}`: {messages}")]
    TensorAddress {
        /// Tensor name.
        name: String,
        /// The address given.
        address: u64,
        /// TensorRT's own messages.
        messages: TrtMessages,
    },
    /// A TensorRT-reported value tether does not know (a newer enum value).
    #[error("TensorRT reported unknown {what} {value} for `{name}`")]
    UnknownValue {
        /// Which property.
        what: &'static str,
        /// Tensor or engine name.
        name: String,
        /// The raw value.
        value: i64,
    },
}

/// A failed per-frame call: small and `Copy`, no allocation. The messages
/// TensorRT reported are kept by the runtime's error recorder
/// ([`super::Runtime::recorded_errors`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EnqueueError {
    /// `enqueueV3` returned false outside capture.
    #[error("enqueueV3 failed (see the TensorRT error recorder for the reason)")]
    Failed,
}

/// Outcome of [`super::ExecutionContext::enqueue_for_capture`] when it did not work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CaptureError {
    /// tether knows before calling that this engine cannot be captured.
    #[error("engine is not capturable: {0}")]
    KnownNotCapturable(super::CaptureBlocker),
    /// `enqueueV3` returned false while the stream was capturing: TensorRT
    /// refused to record into a CUDA graph. Discard the capture and run
    /// eagerly.
    #[error(
        "enqueueV3 returned false under stream capture: the engine is not capturable; discard the capture and run eagerly"
    )]
    NotCapturable,
}
