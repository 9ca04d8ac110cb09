//! The lowered network: steps (one [`StepKind`] each, an operator of
//! [`crate::native::ops`]) in execution order over the tensors of [`crate::native::ir`].
//!
//! A [`Graph`] is built by the front end ([`crate::native::front`]), rewritten by the passes
//! ([`crate::native::passes`]), scheduled and laid out by the plan stage
//! ([`crate::native::plan`]) and run by the executors ([`crate::native::exec`]).

use crate::native::ir::{
    Buffer, BufferId, BufferKind, ElemType, MAX_RANK, Tensor, TensorId, Views, packed_strides,
};
pub use crate::native::ops::StepKind;

/// One step, named after the network node it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The node's name (several steps may share one).
    pub node: String,
    /// What it does.
    pub kind: StepKind,
}

impl Step {
    /// Tensors the step reads.
    pub fn reads(&self) -> Vec<TensorId> {
        self.kind.reads()
    }

    /// The tensor the step writes.
    pub fn writes(&self) -> TensorId {
        self.kind.writes()
    }

    /// Short name of the step kind, for plan dumps.
    pub fn kind_name(&self) -> &'static str {
        self.kind.name()
    }
}

/// A network input or output as the engine binds it.
#[derive(Clone, Debug, PartialEq)]
pub struct Io {
    /// The ONNX name.
    pub name: String,
    /// The tensor (a packed view of an [`BufferKind::Input`] / [`BufferKind::Output`] buffer).
    pub tensor: TensorId,
}

/// A lowered network.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    /// Every tensor (view).
    pub tensors: Vec<Tensor>,
    /// Every buffer.
    pub buffers: Vec<Buffer>,
    /// Steps in execution order.
    pub steps: Vec<Step>,
    /// Network inputs, in the network's order.
    pub inputs: Vec<Io>,
    /// Network outputs, in the network's order.
    pub outputs: Vec<Io>,
}

impl Graph {
    /// A tensor.
    pub fn tensor(&self, t: TensorId) -> &Tensor {
        &self.tensors[t.0]
    }

    /// A buffer.
    pub fn buffer(&self, b: BufferId) -> &Buffer {
        &self.buffers[b.0]
    }

    /// Add a buffer.
    pub fn add_buffer(
        &mut self,
        name: impl Into<String>,
        dtype: ElemType,
        len: usize,
        kind: BufferKind,
    ) -> BufferId {
        self.buffers.push(Buffer {
            name: name.into(),
            dtype,
            len,
            kind,
            placed_in: None,
        });
        BufferId(self.buffers.len() - 1)
    }

    /// Add a packed tensor over a new buffer of its size.
    pub fn add_packed(
        &mut self,
        name: impl Into<String>,
        dtype: ElemType,
        shape: &[usize],
        kind: BufferKind,
    ) -> TensorId {
        let name = name.into();
        let len = shape.iter().product();
        let buffer = self.add_buffer(name.clone(), dtype, len, kind);
        self.add_view(Tensor {
            name,
            buffer,
            dtype,
            shape: shape.to_vec(),
            offset: 0,
            strides: packed_strides(shape),
        })
    }

    /// Add a view.
    pub fn add_view(&mut self, t: Tensor) -> TensorId {
        self.tensors.push(t);
        TensorId(self.tensors.len() - 1)
    }

    /// The buffer a buffer finally lives in and the element offset there (following
    /// placements).
    pub fn root(&self, b: BufferId) -> (BufferId, usize) {
        Views::root(self, b)
    }

    /// A tensor's root buffer and its offset there (elements).
    pub fn tensor_root(&self, t: TensorId) -> (BufferId, usize) {
        Views::tensor_root(self, t)
    }

    /// Every tensor that views buffer `b` (directly, not through placement).
    pub fn views_of(&self, b: BufferId) -> Vec<TensorId> {
        (0..self.tensors.len())
            .filter(|&i| self.tensors[i].buffer == b)
            .map(TensorId)
            .collect()
    }

    /// Check the graph's invariants: every view stays inside its buffer, has its buffer's
    /// element type and a stride per dimension; steps read and write tensors that exist;
    /// element-wise inputs have the output's shape; no step writes an input or a weight.
    ///
    /// # Errors
    /// A description of the first violation (a bug in the front end or a pass).
    pub fn validate(&self) -> Result<(), String> {
        for (i, t) in self.tensors.iter().enumerate() {
            let b = self
                .buffers
                .get(t.buffer.0)
                .ok_or_else(|| format!("tensor {i} `{}`: no buffer {}", t.name, t.buffer.0))?;
            if t.dtype != b.dtype {
                return Err(format!(
                    "tensor {i} `{}` is {} but its buffer `{}` is {}",
                    t.name, t.dtype, b.name, b.dtype
                ));
            }
            if t.shape.len() != t.strides.len() || t.shape.len() > MAX_RANK {
                return Err(format!(
                    "tensor {i} `{}`: shape {:?} strides {:?}",
                    t.name, t.shape, t.strides
                ));
            }
            if let Some((lo, hi)) = t.extent()
                && (hi > b.len || (lo as isize) < 0)
            {
                return Err(format!(
                    "tensor {i} `{}` spans elements {lo}..{hi} of buffer `{}` ({} elements)",
                    t.name, b.name, b.len
                ));
            }
        }
        for (i, b) in self.buffers.iter().enumerate() {
            if let Some((into, at)) = b.placed_in {
                let host = &self.buffers[into.0];
                if host.dtype != b.dtype || at + b.len > host.len {
                    return Err(format!(
                        "buffer {i} `{}` ({} x {}) placed at {at} of `{}` ({} x {})",
                        b.name, b.len, b.dtype, host.name, host.len, host.dtype
                    ));
                }
            }
        }
        for (si, s) in self.steps.iter().enumerate() {
            for t in s.reads().into_iter().chain(std::iter::once(s.writes())) {
                if t.0 >= self.tensors.len() {
                    return Err(format!("step {si} ({}) uses tensor {}", s.node, t.0));
                }
            }
            let w = self.tensor(s.writes());
            let (root, _) = self.root(w.buffer);
            if matches!(
                self.buffers[root.0].kind,
                BufferKind::Input(_) | BufferKind::Weight(_)
            ) {
                return Err(format!(
                    "step {si} ({}) writes `{}`, an input or weight",
                    s.node, w.name
                ));
            }
            s.kind
                .check(self)
                .map_err(|e| format!("step {si} ({}): {e}", s.node))?;
        }
        Ok(())
    }

    /// A one-line-per-step description (for `-vv` load logs and test failures).
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for (i, step) in self.steps.iter().enumerate() {
            let w = self.tensor(step.writes());
            let reads: Vec<String> = step
                .reads()
                .iter()
                .map(|&t| {
                    let t = self.tensor(t);
                    format!("{}{:?}", t.name, t.shape)
                })
                .collect();
            s.push_str(&format!(
                "{i:4} {:<11} {} <- [{}]  ({})\n",
                step.kind_name(),
                format_args!("{}{:?}", w.name, w.shape),
                reads.join(", "),
                step.node
            ));
        }
        s
    }
}

impl Views for Graph {
    fn tensor(&self, t: TensorId) -> &Tensor {
        &self.tensors[t.0]
    }

    fn buffer(&self, b: BufferId) -> &Buffer {
        &self.buffers[b.0]
    }
}
