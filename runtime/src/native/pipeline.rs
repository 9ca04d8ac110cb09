//! The pipeline up to the plan (no GPU, no library): lower with the front end, rewrite,
//! apply precision and layout, schedule and lay out memory, once, front to back. What it
//! returns ([`Compiled`]) is what the executors (host reference, emulator, GPU) are built
//! from.

use crate::backend::Precision;
use crate::native::ir::error::LowerError;
use crate::native::passes::layout::ActivationLayout;
use crate::native::{front, graph, passes, plan};

/// A network lowered, optimised and laid out: what a plan is built from.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The IR.
    pub graph: graph::Graph,
    /// Offsets of every buffer.
    pub memory: plan::memory::MemoryPlan,
}

/// Lower `onnx` at `input_shapes` into the IR, optimise it, apply `precision` and its default
/// activation layout ([`ActivationLayout::for_precision`]) and lay it out.
///
/// # Errors
/// [`LowerError::Unsupported`] naming the first node the engine does not lower;
/// [`LowerError::Model`] when tract cannot parse or type the model, or an internal check
/// fails.
pub fn compile(
    onnx: &[u8],
    input_shapes: &[Vec<usize>],
    precision: Precision,
) -> Result<Compiled, LowerError> {
    compile_fixed(
        onnx,
        input_shapes,
        &[],
        precision,
        ActivationLayout::for_precision(precision),
        crate::backend::DEFAULT_MAX_TENSOR_BYTES,
    )
}

/// [`compile`] with the `fixed` inputs made constants of the graph first
/// ([`crate::backend::PrepareOptions::fixed_inputs`]; `input_shapes` leaves them out), the
/// activations laid out as `layout` and every tensor bounded by `max_tensor_bytes`
/// ([`crate::backend::PrepareOptions::max_tensor_bytes`]).
///
/// # Errors
/// As [`compile`].
pub fn compile_fixed(
    onnx: &[u8],
    input_shapes: &[Vec<usize>],
    fixed: &[crate::backend::FixedInput],
    precision: Precision,
    layout: ActivationLayout,
    max_tensor_bytes: u64,
) -> Result<Compiled, LowerError> {
    let model = front::load_model_fixed(onnx, input_shapes, fixed, max_tensor_bytes)?;
    let mut graph = front::lower(&model)?;
    drop(model);
    passes::rewrite::optimise(&mut graph);
    passes::precision::apply(&mut graph, precision)?;
    passes::layout::apply(&mut graph, layout)?;
    graph
        .validate()
        .map_err(|e| LowerError::Model(format!("internal: optimised graph is invalid: {e}")))?;
    let memory = plan::memory::MemoryPlan::new(&graph).map_err(LowerError::Model)?;
    memory
        .check(&graph)
        .map_err(|e| LowerError::Model(format!("internal: memory plan: {e}")))?;
    Ok(Compiled { graph, memory })
}
