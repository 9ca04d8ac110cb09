//! The host reference executor of the IR: plain loops per step, over host memory laid out
//! exactly as the GPU executor lays out device memory (the same [`MemoryPlan`] offsets, the
//! same views, the same placements).
//!
//! It exists to prove, without a GPU, that lowering, shapes, strides, aliasing and the
//! memory plan are right: the tests run real networks through it and compare with the tract
//! CPU engine. To catch planner bugs it poisons memory: the workspace and the outputs start
//! as all-ones bytes (a NaN in every float type), and every activation buffer is poisoned
//! again right after its last use, so a step that reads memory another buffer owns (or a
//! buffer after its lifetime) produces NaN instead of a plausible stale value.
//!
//! Not fast: convolution is a direct loop (a few seconds for YOLOv8n at 640).

use crate::native::graph::Graph;
use crate::native::ir::program::{load_f32, store_f32};
use crate::native::ir::{BufferKind, TensorId, Views, for_each_offset};
use crate::native::ops::op::HostMemory;
use crate::native::plan::memory::{MemoryPlan, Region};

/// Host memory for one run.
struct Memory<'a> {
    workspace: Vec<u8>,
    weights: Vec<u8>,
    inputs: &'a [&'a [u8]],
    outputs: Vec<Vec<u8>>,
}

impl Memory<'_> {
    fn bytes(&self, r: Region) -> &[u8] {
        match r {
            Region::Workspace => &self.workspace,
            Region::Weights => &self.weights,
            Region::Input(i) => self.inputs[i],
            Region::Output(i) => &self.outputs[i],
        }
    }
    fn bytes_mut(&mut self, r: Region) -> &mut [u8] {
        match r {
            Region::Workspace => &mut self.workspace,
            Region::Output(i) => &mut self.outputs[i],
            Region::Weights | Region::Input(_) => {
                panic!("the reference executor never writes inputs or weights")
            }
        }
    }
}

struct Exec<'g, 'm> {
    graph: &'g Graph,
    plan: &'g MemoryPlan,
    mem: Memory<'m>,
}

impl HostMemory for Exec<'_, '_> {
    fn views(&self) -> &dyn Views {
        self.graph
    }

    fn read(&self, t: TensorId) -> Vec<f32> {
        let tensor = self.graph.tensor(t);
        let (r, base) = self.plan.locate(self.graph, t);
        let bytes = self.mem.bytes(r);
        let es = tensor.dtype.size();
        let mut out = vec![0f32; tensor.numel()];
        for_each_offset(&tensor.shape, &tensor.strides, |i, off| {
            let at = (base as isize + off * es as isize) as usize;
            out[i] = load_f32(tensor.dtype, &bytes[at..at + es]);
        });
        out
    }

    fn write(&mut self, t: TensorId, values: &[f32]) {
        let tensor = self.graph.tensor(t).clone();
        let (r, base) = self.plan.locate(self.graph, t);
        let es = tensor.dtype.size();
        let bytes = self.mem.bytes_mut(r);
        for_each_offset(&tensor.shape, &tensor.strides, |i, off| {
            let at = (base as isize + off * es as isize) as usize;
            store_f32(values[i], tensor.dtype, &mut bytes[at..at + es]);
        });
    }

    fn read_raw(&self, t: TensorId) -> Vec<u8> {
        let s = self.graph.tensor(t);
        let es = s.dtype.size();
        let (sr, sbase) = self.plan.locate(self.graph, t);
        let mut raw = vec![0u8; s.numel() * es];
        let bytes = self.mem.bytes(sr);
        for_each_offset(&s.shape, &s.strides, |i, off| {
            let at = (sbase as isize + off * es as isize) as usize;
            raw[i * es..(i + 1) * es].copy_from_slice(&bytes[at..at + es]);
        });
        raw
    }

    fn write_raw(&mut self, t: TensorId, raw: &[u8]) {
        let d = self.graph.tensor(t).clone();
        let es = d.dtype.size();
        let (dr, dbase) = self.plan.locate(self.graph, t);
        let bytes = self.mem.bytes_mut(dr);
        for_each_offset(&d.shape, &d.strides, |i, off| {
            let at = (dbase as isize + off * es as isize) as usize;
            bytes[at..at + es].copy_from_slice(&raw[i * es..(i + 1) * es]);
        });
    }

    fn load(&self, t: TensorId, offset: isize) -> f32 {
        let (r, base) = self.plan.locate(self.graph, t);
        let dt = self.graph.tensor(t).dtype;
        let at = (base as isize + offset * dt.size() as isize) as usize;
        load_f32(dt, &self.mem.bytes(r)[at..at + dt.size()])
    }

    fn store(&mut self, t: TensorId, offset: isize, v: f32) {
        let (r, base) = self.plan.locate(self.graph, t);
        let dt = self.graph.tensor(t).dtype;
        let es = dt.size() as isize;
        let at = (base as isize + offset * es) as usize;
        store_f32(v, dt, &mut self.mem.bytes_mut(r)[at..at + es as usize]);
    }
}

impl Exec<'_, '_> {
    fn poison_dead(&mut self, step: usize) {
        for (b, live) in self.plan.live.iter().enumerate() {
            let Some((_, last)) = *live else { continue };
            if last != step {
                continue;
            }
            let buf = &self.graph.buffers[b];
            if let (BufferKind::Activation, Some(off)) = (&buf.kind, self.plan.activation_offset[b])
            {
                let n = buf.len * buf.dtype.size();
                self.mem.workspace[off..off + n].fill(0xff);
            }
        }
    }
}

/// Run `graph` laid out by `plan` on host memory. `inputs[i]` holds input `i` (packed,
/// native endianness); returns every output, packed.
///
/// # Errors
/// A description when an input has the wrong size.
pub fn run(graph: &Graph, plan: &MemoryPlan, inputs: &[&[u8]]) -> Result<Vec<Vec<u8>>, String> {
    if inputs.len() != graph.inputs.len() {
        return Err(format!(
            "{} inputs given, the network has {}",
            inputs.len(),
            graph.inputs.len()
        ));
    }
    for (i, io) in graph.inputs.iter().enumerate() {
        let t = graph.tensor(io.tensor);
        let want = t.numel() * t.dtype.size();
        if inputs[i].len() != want {
            return Err(format!(
                "input `{}` holds {} bytes, needs {want}",
                io.name,
                inputs[i].len()
            ));
        }
    }
    let outputs = graph
        .outputs
        .iter()
        .map(|io| {
            let (root, _) = graph.root(graph.tensor(io.tensor).buffer);
            let b = graph.buffer(root);
            vec![0xffu8; b.len * b.dtype.size()]
        })
        .collect();
    let mut ex = Exec {
        graph,
        plan,
        mem: Memory {
            workspace: vec![0xff; plan.activation_bytes],
            weights: plan.weight_blob(graph),
            inputs,
            outputs,
        },
    };
    for (i, step) in graph.steps.iter().enumerate() {
        step.kind.reference(&mut ex)?;
        ex.poison_dead(i);
    }
    Ok(ex.mem.outputs)
}
