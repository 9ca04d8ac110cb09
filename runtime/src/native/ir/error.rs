//! Why a network could not be prepared by the front end and the passes.

/// Why a network could not be lowered.
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    /// An operator or attribute the engine does not lower.
    #[error("node `{node}` ({op}): {detail}")]
    Unsupported {
        /// The node's name.
        node: String,
        /// The operator.
        op: String,
        /// What is not supported.
        detail: String,
    },
    /// tract could not parse, type or simplify the network at the requested shapes.
    #[error("{0}")]
    Model(String),
    /// A tensor of the network over the size limit, or with a negative dimension, refused
    /// before tract materialised it (`backends/onnx_front.rs`, `into_typed_bounded`).
    #[error(transparent)]
    TooLarge(#[from] Box<crate::backend::TensorTooLarge>),
}
