//! Which convolutions can take their bias, activation and residual into cuDNN's operation
//! graph (runtime fusion, [`crate::native::libs::cudnn_graph::ConvGraph::new_fused`]): pure logic over the
//! lowered graph ([`candidate`], an IR fact); the condition on the memory plan is
//! [`crate::native::plan::memory::MemoryPlan::fusion`], the cuDNN epilogue
//! `crate::native::exec::engine::epilogue_of`. The host tests prove them without a GPU.
//!
//! A convolution step `i` fuses with step `i + 1` when that step is the `bias_act` kernel's
//! `act(y + b) [+ r]` ([`crate::native::ops::elementwise::bias_act_params`]) over the convolution's output `y`
//! with a per-channel bias (in the storage type or fp32), act none or SiLU, the residual and
//! the output in the convolution's storage type;
//! when nothing else reads or aliases `y` (it is then never stored); and when writing the
//! element-wise step's output one step early is safe under the memory plan: its bytes overlap
//! none of the convolution's input, which the plan may have placed there because that input
//! dies at step `i` (the memory plan keeps such outputs live from step `i` on, so that this
//! holds). The fused step writes the element-wise step's output directly; the
//! element-wise step then enqueues nothing. Whether a fusion is used is measured at load
//! (`engine`): the fused plan must beat the convolution plus its `bias_act` launch.

use crate::native::graph::{Graph, StepKind};
use crate::native::ir::{ElemType, TensorId};
use crate::native::ops::elementwise;
use crate::native::ops::elementwise::Elementwise;

/// A convolution step and the element-wise step it absorbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fusion {
    /// The element-wise step (the convolution's step + 1), which enqueues nothing when fused.
    pub ew: usize,
    /// The per-channel bias (a view broadcast over the output's shape; its values contiguous).
    pub bias: TensorId,
    /// The residual added after the activation, when there is one.
    pub residual: Option<TensorId>,
    /// What the fused step writes: the element-wise step's output.
    pub out: TensorId,
    /// SiLU (else no activation).
    pub silu: bool,
}

/// The conditions of a fusion that depend on the graph alone (not on the memory plan): the
/// memory plan ([`crate::native::plan::memory`]) keeps the output of every candidate live from the
/// convolution's step on, and [`crate::native::plan::memory::MemoryPlan::fusion`] checks the rest.
pub fn candidate(g: &Graph, i: usize) -> Option<Fusion> {
    let StepKind::Conv(cv) = &g.steps.get(i)?.kind else {
        return None;
    };
    let j = i + 1;
    let StepKind::Elementwise(Elementwise {
        inputs,
        output,
        program,
    }) = &g.steps.get(j)?.kind
    else {
        return None;
    };
    let y = g.tensor(cv.y);
    if y.shape.len() != 4 || !matches!(y.dtype, ElemType::F32 | ElemType::F16) {
        return None;
    }
    // Read the operands back from the parameters: every tensor addressed by its id.
    let id_addr = |t: TensorId| (t.0 as u64 + 1) << 8;
    let id_of = |a: u64| TensorId((a >> 8) as usize - 1);
    let p = elementwise::bias_act_params(g, inputs, *output, program, &id_addr)?;
    if p.x != id_addr(cv.y) || p.flags & 1 == 0 || p.act > 1 {
        return None;
    }
    let bias = id_of(p.b);
    let residual = (p.flags & 2 != 0).then(|| id_of(p.r));
    let out = *output;
    let same = |t: TensorId| g.tensor(t).dtype == y.dtype && g.tensor(t).shape == y.shape;
    // A residual of the output's shape in memory (no broadcast axis: cuDNN is given its
    // strides as they are).
    let spread = |t: TensorId| {
        let t = g.tensor(t);
        t.shape
            .iter()
            .zip(&t.strides)
            .all(|(&n, &s)| n == 1 || s != 0)
    };
    if residual.is_some_and(|r| !spread(r)) {
        return None;
    }
    // The bias in the storage type or fp32 (fp16 storage keeps biases in fp32).
    let bias_ok = g.tensor(bias).shape == y.shape
        && matches!(g.tensor(bias).dtype, ElemType::F32) | (g.tensor(bias).dtype == y.dtype);
    if !bias_ok || !same(out) || residual.is_some_and(|r| !same(r)) {
        return None;
    }
    // `y` is read by step j alone (as its x), written by step i alone, and no output.
    let root = |t: TensorId| g.root(g.tensor(t).buffer).0;
    let y_root = root(cv.y);
    if g.outputs.iter().any(|o| root(o.tensor) == y_root)
        || g.inputs.iter().any(|o| root(o.tensor) == y_root)
        || [Some(bias), residual]
            .into_iter()
            .flatten()
            .any(|t| root(t) == y_root)
        || root(out) == y_root
    {
        return None;
    }
    for (k, step) in g.steps.iter().enumerate() {
        let touches = step
            .reads()
            .into_iter()
            .chain(std::iter::once(step.writes()))
            .any(|t| root(t) == y_root);
        if touches && k != i && k != j {
            return None;
        }
    }
    Some(Fusion {
        ew: j,
        bias,
        residual,
        out,
        silu: p.act == 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::libs::cudnn_graph::FusedAct;
    use crate::native::pipeline::Compiled;

    fn find(c: &Compiled, i: usize) -> Option<Fusion> {
        c.memory.fusion(&c.graph, i)
    }

    fn find_in(g: &Graph, memory: &MemoryPlan, i: usize) -> Option<Fusion> {
        memory.fusion(g, i)
    }

    fn find_all(c: &Compiled) -> Vec<Option<Fusion>> {
        c.memory.fusions(&c.graph)
    }

    fn overlap(g: &Graph, memory: &MemoryPlan, a: TensorId, b: TensorId) -> bool {
        memory.overlap(g, a, b)
    }
    use crate::native::graph::{Io, Step};
    use crate::native::ir::program::{EwOp, Expr, Program};
    use crate::native::ir::{BufferKind, Tensor};
    use crate::native::ops::conv::Conv;
    use crate::native::ops::copy;
    use crate::native::plan::memory::MemoryPlan;

    /// `input -> copy a -> conv y -> silu(y + b) o [+ r] -> copy out`: `a` dies at the
    /// convolution and `o` is born at the next step, so a plan that ignored the fusion could
    /// place them in the same bytes.
    fn network(extra_reader: bool, residual: bool) -> (Graph, TensorId, TensorId, TensorId) {
        network_with(extra_reader, residual, EwOp::Silu)
    }

    fn network_with(
        extra_reader: bool,
        residual: bool,
        act: EwOp,
    ) -> (Graph, TensorId, TensorId, TensorId) {
        let shape = [1usize, 8, 4, 4];
        let f = ElemType::F32;
        let mut g = Graph::default();
        let input = g.add_packed("in", f, &shape, BufferKind::Input(0));
        let a = g.add_packed("a", f, &shape, BufferKind::Activation);
        let w = g.add_packed("w", f, &[8, 8, 1, 1], BufferKind::Weight(vec![0; 256]));
        let y = g.add_packed("y", f, &shape, BufferKind::Activation);
        let o = g.add_packed("o", f, &shape, BufferKind::Activation);
        let out = g.add_packed("out", f, &shape, BufferKind::Output(0));
        let bias_buf = g.add_buffer("b", f, 8, BufferKind::Weight(vec![0; 32]));
        let b = g.add_view(Tensor {
            name: "b".into(),
            buffer: bias_buf,
            dtype: f,
            shape: shape.to_vec(),
            offset: 0,
            strides: vec![0, 1, 0, 0],
        });
        g.inputs.push(Io {
            name: "in".into(),
            tensor: input,
        });
        g.outputs.push(Io {
            name: "out".into(),
            tensor: out,
        });
        let op = |op, a, b| Expr::Op {
            op,
            args: [a, b, 0],
            imm: 0.0,
        };
        let mut nodes = vec![
            Expr::Input(0),
            Expr::Input(1),
            op(EwOp::Add, 0, 1),
            op(act, 2, 0),
        ];
        let mut inputs = vec![y, b];
        if residual {
            nodes.extend([Expr::Input(2), op(EwOp::Add, 3, 4)]);
            inputs.push(a);
        }
        let step = |kind| Step {
            node: "n".into(),
            kind,
        };
        g.steps
            .push(step(StepKind::Copy(copy::Copy { src: input, dst: a })));
        g.steps.push(step(StepKind::Conv(Conv {
            x: a,
            w,
            y,
            pads: vec![0, 0],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            group: 1,
            channels_last: false,
        })));
        g.steps.push(step(StepKind::Elementwise(Elementwise {
            inputs,
            output: o,
            program: Program { nodes },
        })));
        g.steps
            .push(step(StepKind::Copy(copy::Copy { src: o, dst: out })));
        if extra_reader {
            let z = g.add_packed("z", f, &shape, BufferKind::Activation);
            g.steps
                .push(step(StepKind::Copy(copy::Copy { src: y, dst: z })));
        }
        (g, a, b, o)
    }

    fn compiled(g: Graph) -> Compiled {
        let memory = MemoryPlan::new(&g).unwrap();
        memory.check(&g).unwrap();
        Compiled { graph: g, memory }
    }

    #[test]
    fn a_convolution_absorbs_its_bias_and_silu() {
        let (g, a, b, o) = network(false, false);
        let c = compiled(g);
        let f = find(&c, 1).expect("conv + bias + SiLU fuses");
        assert_eq!(
            (f.ew, f.bias, f.out, f.residual, f.silu),
            (2, b, o, None, true)
        );
        assert_eq!(find_all(&c), vec![None, Some(f), None, None]);
        // The plan keeps `o` live from the convolution on: not in `a`'s bytes.
        assert!(!overlap(&c.graph, &c.memory, o, a), "o overlaps a");
        let e = crate::native::exec::engine::epilogue_of(&f, &c.graph, 0x1000, None);
        assert_eq!(
            (e.act, e.residual, e.bias_f32),
            (FusedAct::Silu, None, true)
        );
        // Packed NCHW [1, 8, 4, 4]; the batch axis of size 1 gets the extent.
        assert_eq!(e.y_strides, Some([128, 16, 4, 1]));
    }

    #[test]
    fn a_residual_is_absorbed_too() {
        let (g, a, _, _) = network(false, true);
        let c = compiled(g);
        let f = find(&c, 1).expect("conv + bias + SiLU + residual fuses");
        assert_eq!(f.residual, Some(a));
    }

    #[test]
    fn no_fusion_when_the_convolution_output_has_another_reader() {
        let (g, ..) = network(true, false);
        let c = compiled(g);
        assert_eq!(candidate(&c.graph, 1), None);
        assert_eq!(find(&c, 1), None);
    }

    /// A memory plan that places the element-wise output in the convolution input's bytes
    /// (legal without fusion: their lifetimes do not overlap) refuses the fusion.
    #[test]
    fn no_fusion_when_the_output_would_overwrite_the_input() {
        let (g, a, _, o) = network(false, false);
        let mut c = compiled(g);
        let (ba, bo) = (c.graph.tensor(a).buffer.0, c.graph.tensor(o).buffer.0);
        c.memory.activation_offset[bo] = c.memory.activation_offset[ba];
        assert!(candidate(&c.graph, 1).is_some());
        assert_eq!(find(&c, 1), None);
    }

    /// Sigmoid is a `bias_act` activation but not one the fused graph computes: no fusion.
    #[test]
    fn no_fusion_of_another_activation() {
        let (g, ..) = network_with(false, false, EwOp::Sigmoid);
        assert_eq!(candidate(&g, 1), None);
    }

    /// The residual broadcast along the spatial axes (one value per channel, as a second
    /// bias would be) is not given to cuDNN as a strided tensor: no fusion. Channels-last,
    /// where the `bias_act` kernel itself takes such a residual (one run of stride 0).
    #[test]
    fn no_fusion_with_a_broadcast_residual() {
        let (mut g, a, b, o) = network(false, true);
        let y = match &mut g.steps[1].kind {
            StepKind::Conv(c) => {
                c.channels_last = true;
                c.y
            }
            _ => unreachable!(),
        };
        for t in [a, y, o] {
            g.tensors[t.0].strides = crate::native::ir::nhwc_strides(&[1, 8, 4, 4]).to_vec();
        }
        assert!(
            candidate(&g, 1).is_some(),
            "channels-last conv + bias + SiLU + r"
        );
        let StepKind::Elementwise(Elementwise { inputs, .. }) = &mut g.steps[2].kind else {
            unreachable!()
        };
        inputs[2] = b;
        let StepKind::Elementwise(Elementwise {
            inputs, program, ..
        }) = &g.steps[2].kind
        else {
            unreachable!()
        };
        let p = elementwise::bias_act_params(&g, inputs, o, program, &|_| 0x100)
            .expect("the kernel takes a broadcast residual");
        assert_eq!(p.flags & 3, 3);
        assert_eq!(candidate(&g, 1), None);
    }

    /// A plan that puts the output in the residual's bytes (an in-place epilogue) refuses the
    /// fusion: cuDNN promises nothing for an epilogue that reads what it writes.
    #[test]
    fn no_fusion_when_the_output_would_overwrite_the_residual() {
        let (mut g, a, _, o) = network(false, true);
        // The residual: a fresh activation written before the convolution.
        let r = g.add_packed("r", ElemType::F32, &[1, 8, 4, 4], BufferKind::Activation);
        g.steps.insert(
            1,
            Step {
                node: "r".into(),
                kind: StepKind::Copy(copy::Copy { src: a, dst: r }),
            },
        );
        let StepKind::Elementwise(Elementwise { inputs, .. }) = &mut g.steps[3].kind else {
            unreachable!()
        };
        inputs[2] = r;
        let mut c = compiled(g);
        let f = find(&c, 2).expect("fuses with its own residual buffer");
        assert_eq!(f.residual, Some(r));
        let (br, bo) = (c.graph.tensor(r).buffer.0, c.graph.tensor(o).buffer.0);
        c.memory.activation_offset[bo] = c.memory.activation_offset[br];
        assert!(candidate(&c.graph, 2).is_some());
        assert_eq!(find(&c, 2), None);
    }

    /// Only the fusions a plan is made for keep their outputs live early: without them the
    /// planner may put the output in the convolution input's bytes, and `find_in` then
    /// refuses the fusion.
    #[test]
    fn the_plan_for_no_fusion_refuses_them() {
        let (g, a, _, o) = network(false, false);
        let with = MemoryPlan::for_fusions(&g, &[1], 4).unwrap();
        let without = MemoryPlan::for_fusions(&g, &[], 4).unwrap();
        with.check(&g).unwrap();
        without.check(&g).unwrap();
        assert!(find_in(&g, &with, 1).is_some());
        assert!(
            overlap(&g, &without, a, o),
            "the planner reuses a's bytes for o"
        );
        assert_eq!(find_in(&g, &without, 1), None);
        assert!(without.activation_bytes < with.activation_bytes);
    }
}
