//! The operators: one file per step kind of the IR, holding everything about it: its data,
//! its invariants, and (in the files themselves) its lowering from tract, its storage and
//! layout rules, its launch parameters, its host reference and its emulation. [`op::Op`] is
//! the contract every operator implements.
//!
//! # The registry
//! `operators!` below lists every operator once: `module::Type`. From that list come the
//! module declarations, [`StepKind`] (one variant per operator, named after its type) and the
//! dispatch every stage uses. Adding an operator is its file plus one line here
//! (`runtime/src/native/README.md`, "Adding an operator").

pub mod op;

use tract_onnx::prelude::TypedNode;

use crate::native::ir::error::LowerError;
use crate::native::ir::{TensorId, Views};
use op::{Call, HostMemory, Kernel, Lower, Op, ParamError, Uses};

/// Declares the operator modules and [`StepKind`] with its dispatch.
macro_rules! operators {
    ($($module:ident :: $op:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// What a step does: one variant per operator of the registry.
        #[derive(Clone, Debug, PartialEq)]
        pub enum StepKind {
            $(
                #[doc = concat!("[`", stringify!($module), "::", stringify!($op), "`].")]
                $op($module::$op),
            )*
        }

        $(
            impl From<$module::$op> for StepKind {
                fn from(op: $module::$op) -> StepKind {
                    StepKind::$op(op)
                }
            }
        )*

        /// Lower `node` with the first operator whose lowering takes it (each takes the tract
        /// operators it realises); `None` when none does.
        pub fn lower<L: Lower<Step = StepKind>>(
            l: &mut L,
            node: &TypedNode,
        ) -> Option<Result<(), LowerError>> {
            $(
                if let Some(lowered) = $module::lower(l, node) {
                    return Some(lowered);
                }
            )*
            None
        }

        impl StepKind {
            /// Short name of the step kind ([`Op::NAME`]).
            pub fn name(&self) -> &'static str {
                match self {
                    $(StepKind::$op(_) => <$module::$op as Op>::NAME,)*
                }
            }

            /// Tensors the step reads ([`Op::reads`]).
            pub fn reads(&self) -> Vec<TensorId> {
                match self {
                    $(StepKind::$op(op) => op.reads(),)*
                }
            }

            /// The tensor the step writes ([`Op::writes`]).
            pub fn writes(&self) -> TensorId {
                match self {
                    $(StepKind::$op(op) => op.writes(),)*
                }
            }

            /// Every operand, mutably ([`Op::operands_mut`]).
            pub fn operands_mut(&mut self, f: &mut dyn FnMut(&mut TensorId, bool)) {
                match self {
                    $(StepKind::$op(op) => op.operands_mut(f),)*
                }
            }

            /// The step's own invariants ([`Op::check`]).
            ///
            /// # Errors
            /// A description of the violation.
            pub fn check(&self, g: &dyn Views) -> Result<(), String> {
                match self {
                    $(StepKind::$op(op) => op.check(g),)*
                }
            }

            /// The library the step runs through ([`Op::USES`]).
            pub fn uses(&self) -> Uses {
                match self {
                    $(StepKind::$op(_) => <$module::$op as Op>::USES,)*
                }
            }

            /// Run the step on the host reference executor's memory ([`Op::reference`]).
            ///
            /// # Errors
            /// A description when the step's data is out of range.
            pub fn reference(&self, mem: &mut dyn HostMemory) -> Result<(), String> {
                match self {
                    $(StepKind::$op(op) => op.reference(mem),)*
                }
            }

            /// What the step enqueues with its tensors at `addr` ([`Op::call`]).
            ///
            /// # Errors
            /// [`ParamError`] when it does not fit the kernels' index space.
            pub fn call(
                &self,
                g: &dyn Views,
                node: &str,
                addr: &dyn Fn(TensorId) -> u64,
            ) -> Result<Call, ParamError> {
                match self {
                    $(StepKind::$op(op) => op.call(g, node, addr),)*
                }
            }
        }

        /// Every operator's kernels, in registry order.
        static KERNEL_LISTS: &[&[Kernel]] = &[$(<$module::$op as Op>::KERNELS,)*];
    };
}

/// Every kernel of `runtime/kernels/native.cu` the operators launch, in registry order: the
/// executor's kernel table and the emulator are indexed the same way ([`kernel_index`]).
pub fn kernels() -> impl Iterator<Item = &'static Kernel> {
    KERNEL_LISTS.iter().flat_map(|k| k.iter())
}

/// The position of kernel `name` in [`kernels`].
pub fn kernel_index(name: &str) -> Option<usize> {
    kernels().position(|k| k.name == name)
}

/// The kernel at position `i` of [`kernels`].
pub fn kernel(i: usize) -> Option<&'static Kernel> {
    kernels().nth(i)
}

operators! {
    elementwise::Elementwise,
    copy::Copy,
    conv::Conv,
    deconv::Deconv,
    pool::Pool,
    gemm::Gemm,
    softmax::Softmax,
    reduce::Reduce,
    gather::Gather,
    resize::Resize,
    update::UpdateRows,
}
