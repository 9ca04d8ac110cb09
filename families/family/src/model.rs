//! What opening a family's bundle and running its networks share in every family: opening
//! the file, checking that the bundle is the family's, and the errors of both
//! ([`ModelError`]), which each family's own error type carries as one variant.

use std::path::Path;
use std::sync::Arc;

use tether_bundle::{Bundle, BundleError, Verify};

/// The errors every family's semantic API shares: the bundle, the runtime, an engine call,
/// a tensor view and the family check. A family's error type holds it as
/// `#[error(transparent)] Model(#[from] ModelError)` (its message and `source()` are this
/// error's) and converts the underlying errors with [`model_error_conversions!`].
///
/// The variants the hot path returns (`Run`, `View`) carry only numbers.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The bundle could not be opened or read.
    #[error("{0}")]
    Bundle(#[from] BundleError),
    /// The runtime could not open the model, prepare a network or build its session (no
    /// usable engine on this device, device unavailable, preparation failed).
    #[error("{0}")]
    Runtime(#[from] tether_runtime::Error),
    /// An engine call failed.
    #[error(transparent)]
    Run(#[from] tether_runtime::RunError),
    /// A network tensor could not be viewed with its element type (an engine bug).
    #[error(transparent)]
    View(#[from] tether_runtime::tensor::ViewError),
    /// The bundle belongs to another family.
    #[error(
        "bundle `{bundle}` is a `{family}` bundle, not {} `{expected}` bundle",
        article(expected)
    )]
    WrongFamily {
        /// Bundle name.
        bundle: String,
        /// Its family.
        family: String,
        /// The family that opened it.
        expected: &'static str,
    },
}

/// `an` before a family name starting with a vowel letter (`an ocr bundle`), else `a`.
fn article(word: &str) -> &'static str {
    match word.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "an",
        _ => "a",
    }
}

/// Open the bundle file at `path` (memory-mapped), every section's CRC checked now when
/// `verify_eagerly`, else on first use.
///
/// # Errors
/// [`BundleError`]: the file cannot be opened, or is not a readable bundle.
pub fn open_bundle(
    path: impl AsRef<Path>,
    verify_eagerly: bool,
) -> Result<Arc<Bundle>, BundleError> {
    let verify = if verify_eagerly {
        Verify::Eager
    } else {
        Verify::Lazy
    };
    Ok(Arc::new(Bundle::open(path, verify)?))
}

/// Check that `bundle` is a bundle of `family` (its identity's family).
///
/// # Errors
/// [`ModelError::WrongFamily`] naming the bundle and its family.
pub fn check_family(bundle: &Bundle, family: &'static str) -> Result<(), ModelError> {
    let id = bundle.identity();
    if id.family == family {
        return Ok(());
    }
    Err(ModelError::WrongFamily {
        bundle: id.name.to_string(),
        family: id.family.to_string(),
        expected: family,
    })
}

/// A session of `plan` alone on `model`'s device, named `network`: one input region per
/// input and one output region per output (`<network>:<tensor>`, compared within
/// `output_check` when a device session checks its captured replay). Returns the session and
/// the regions, inputs then outputs, in the plan's order.
///
/// # Errors
/// [`tether_runtime::Error`]: a tensor without a fixed size, or the session cannot be built.
pub fn network_session(
    model: &tether_runtime::Model,
    network: &str,
    plan: tether_runtime::Plan,
    output_check: tether_runtime::session::Check,
) -> Result<NetworkRegions, tether_runtime::Error> {
    use tether_runtime::RegionKind;
    let mut spec = tether_runtime::PipelineSpec::new();
    let (inputs, outputs) = spec.network_with_regions(
        network,
        plan,
        RegionKind::Input,
        RegionKind::Output,
        output_check,
    )?;
    Ok(NetworkRegions {
        session: model.session(spec)?,
        inputs,
        outputs,
    })
}

/// A session of one network and its regions ([`network_session`]).
pub struct NetworkRegions {
    /// The session.
    pub session: tether_runtime::Session,
    /// One region per network input, in the plan's order.
    pub inputs: Vec<tether_runtime::RegionId>,
    /// One region per network output, in the plan's order.
    pub outputs: Vec<tether_runtime::RegionId>,
}

/// `From` the errors [`ModelError`] wraps (the bundle's, the runtime's, an engine call's, a
/// tensor view's) for a family error type `$error` with a `Model(ModelError)` variant, so
/// that `?` converts them as it converts a [`ModelError`].
#[macro_export]
macro_rules! model_error_conversions {
    ($error:ty) => {
        $crate::model_error_conversions!(@one $error, ::tether_bundle::BundleError);
        $crate::model_error_conversions!(@one $error, ::tether_runtime::Error);
        $crate::model_error_conversions!(@one $error, ::tether_runtime::RunError);
        $crate::model_error_conversions!(@one $error, ::tether_runtime::tensor::ViewError);
    };
    (@one $error:ty, $from:ty) => {
        impl ::core::convert::From<$from> for $error {
            fn from(e: $from) -> Self {
                Self::Model($crate::model::ModelError::from(e))
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::article;

    #[test]
    fn the_article_follows_the_family_name() {
        assert_eq!(article("ocr"), "an");
        assert_eq!(article("embed"), "an");
        assert_eq!(article("vad"), "a");
        assert_eq!(article("detect"), "a");
    }
}
