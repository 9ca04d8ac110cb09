//! The runtime's one error type for everything that is not the per-run path.
//!
//! Load time ([`crate::Model::open`], [`crate::Session::new`]) returns [`Error`], whose
//! variants are typed and name the thing and the values seen. The per-run path returns the
//! small `Copy` [`RunError`] (wrapped as [`Error::Run`] where the two meet), so a failing
//! frame never reaches the allocator.

use tether_bundle::BundleError;

pub use crate::backend::{PrepareError, RunError};
use crate::session::SpecError;
use crate::tensor::{IoMode, ViewError};

/// A runtime error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bundle could not be opened or read.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// No engine of the bundle can run on this device; names both sides.
    #[error("bundle `{bundle}`, network `{network}`: {refusal}")]
    Refused {
        /// Bundle name.
        bundle: String,
        /// Network name.
        network: String,
        /// What the bundle offers, what the device is, and why each offer cannot run.
        refusal: Box<tether_targets::Refusal>,
    },
    /// Every engine selection admitted failed to prepare the network.
    #[error("bundle `{bundle}`, network `{network}`: no engine could prepare it: {tried}")]
    NoEnginePrepared {
        /// Bundle name.
        bundle: String,
        /// Network name.
        network: String,
        /// Each engine tried and why it failed, `; `-separated.
        tried: String,
        /// The first bundle error an engine met reading its section (a CRC mismatch, a
        /// truncated section): the file is at fault, not the engines.
        damaged: Option<Box<BundleError>>,
    },
    /// The bundle has no network of that name.
    #[error("bundle `{bundle}` has no network `{network}`; it has: {available}")]
    NoSuchNetwork {
        /// Bundle name.
        bundle: String,
        /// The name asked for.
        network: String,
        /// The networks it has, comma-separated.
        available: String,
    },
    /// A network input has a dynamic dimension and no shape was given.
    #[error(
        "network `{network}`: input `{input}` has dynamic dimensions {dims:?}; give a concrete shape"
    )]
    DynamicInput {
        /// Network name.
        network: String,
        /// Input name.
        input: String,
        /// Declared dimensions (-1 = dynamic).
        dims: Vec<i64>,
    },
    /// A tensor name the network does not have.
    #[error("network `{network}` has no {mode} tensor `{name}`; it has: {available}")]
    NoSuchTensor {
        /// Network.
        network: String,
        /// Input or output.
        mode: IoMode,
        /// The name asked for.
        name: String,
        /// The names it has, comma-separated.
        available: String,
    },
    /// The requested device cannot be used (the reason names what was looked for).
    #[error("CUDA device {ordinal} cannot be used: {reason}")]
    DeviceUnavailable {
        /// The ordinal asked for.
        ordinal: usize,
        /// Why (driver not found, no device, ordinal out of range), one line.
        reason: String,
    },
    /// The device was asked for but this build has no engine that runs there.
    #[error("{what} was requested, but this build has no engine for it (compiled in: {compiled})")]
    NotCompiledIn {
        /// What was requested.
        what: String,
        /// The backends this build has.
        compiled: String,
    },
    /// A network could not be prepared.
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// A session spec is inconsistent.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A typed view of a tensor does not fit.
    #[error(transparent)]
    View(#[from] ViewError),
    /// A run failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The CUDA device layer failed at load.
    #[cfg(feature = "cuda")]
    #[error(transparent)]
    Cuda(#[from] crate::cuda::CudaError),
}

#[cfg(feature = "cuda")]
impl From<crate::cuda::DriverError> for Error {
    fn from(e: crate::cuda::DriverError) -> Self {
        Error::Cuda(e.into())
    }
}
