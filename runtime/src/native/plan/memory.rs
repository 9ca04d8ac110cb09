//! The memory plan: every activation buffer gets a fixed byte offset in the workspace, chosen
//! once at load from a liveness analysis; weights get offsets in one weight blob.
//!
//! Liveness is per *root* buffer (a buffer placed inside another by copy elision lives in its
//! host): a root is live from the first step that touches any of its views to the last one,
//! both inclusive, so a step never writes over a buffer it reads. Two buffers may share
//! memory only when every step touching one happens before every step touching the other
//! under the network's [`Schedule`] (its streams and events): with one stream, when their
//! lifetimes do not overlap; with several, steps of parallel branches never share memory
//! while both may run. Placement is greedy, largest
//! buffer first, each at the lowest aligned offset free of every live-overlapping buffer
//! already placed (the classic offset-assignment heuristic of TFLite's and ONNX Runtime's
//! arena planners).

use crate::native::graph::{Graph, StepKind};
use crate::native::ir::{BufferId, BufferKind, TensorId};
use crate::native::passes::fusion::{self, Fusion};
use crate::native::plan::schedule::Schedule;

/// Alignment of every buffer in the workspace and the weight blob, in bytes (cuDNN and
/// cuBLAS want 16; 256 is what `cuMemAlloc` gives and keeps every vector load aligned).
pub const BUFFER_ALIGN: usize = 256;

fn align_up(v: usize) -> usize {
    v.div_ceil(BUFFER_ALIGN) * BUFFER_ALIGN
}

/// Where every buffer lives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Byte offset of each root activation buffer in the workspace (`None` for other
    /// buffers, placed ones and activations no step touches).
    pub activation_offset: Vec<Option<usize>>,
    /// Byte offset of each weight buffer in the weight blob.
    pub weight_offset: Vec<Option<usize>>,
    /// Bytes of the workspace the activations need (a multiple of [`BUFFER_ALIGN`]).
    pub activation_bytes: usize,
    /// Bytes of the weight blob.
    pub weight_bytes: usize,
    /// First and last step touching each root buffer (inclusive), for the reference
    /// executor's poisoning of dead buffers.
    pub live: Vec<Option<(usize, usize)>>,
    /// Per root buffer: the steps touching it (a fused convolution counts for its fused
    /// step's output), ascending.
    pub access: Vec<Vec<usize>>,
    /// The streams and events the plan was made for (sharing memory needs happens-before
    /// under it).
    pub schedule: Schedule,
}

/// Where a byte of a tensor lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Region {
    /// The workspace.
    Workspace,
    /// The weight blob.
    Weights,
    /// Network input `i`.
    Input(usize),
    /// Network output `i`.
    Output(usize),
}

impl MemoryPlan {
    /// Lay out `graph`, with the output of every element-wise step a convolution could absorb
    /// ([`crate::native::passes::fusion::candidate`]) live from the convolution's step on, so that any of
    /// those fusions may be taken ([`MemoryPlan::for_fusions`] with all of them), scheduled on
    /// [`crate::native::plan::schedule::DEFAULT_STREAMS`] streams.
    ///
    /// # Errors
    /// A description when a buffer size overflows `usize`.
    pub fn new(graph: &Graph) -> Result<Self, String> {
        let candidates: Vec<usize> = (0..graph.steps.len())
            .filter(|&i| fusion::candidate(graph, i).is_some())
            .collect();
        Self::for_fusions(
            graph,
            &candidates,
            crate::native::plan::schedule::DEFAULT_STREAMS,
        )
    }

    /// Lay out `graph` for the fusions of convolution steps `convs` (the engine's, once it
    /// has measured which win): each absorbed step's output is live from its convolution's
    /// step on, so writing it one step early overwrites nothing; other buffers may share
    /// memory as without fusion (the extension costs memory: YOLOv8n 320 fp16 1.64 -> 2.25 MB
    /// of activations with all 63 fusions). The steps are scheduled on at most `streams`
    /// streams ([`Schedule::new`]).
    ///
    /// # Errors
    /// A description when a buffer size overflows `usize`.
    pub fn for_fusions(graph: &Graph, convs: &[usize], streams: usize) -> Result<Self, String> {
        let nb = graph.buffers.len();
        let schedule = Schedule::new(graph, convs, streams);
        // Per root: the steps touching it; its lifetime is the first to the last of them.
        let mut access: Vec<Vec<usize>> = vec![Vec::new(); nb];
        let mut touch = |root: usize, i: usize| {
            if !access[root].contains(&i) {
                access[root].push(i);
            }
        };
        for (i, step) in graph.steps.iter().enumerate() {
            for t in step
                .reads()
                .into_iter()
                .chain(std::iter::once(step.writes()))
            {
                touch(graph.root(graph.tensor(t).buffer).0.0, i);
            }
        }
        // An element-wise step that a convolution may absorb (cuDNN runtime fusion) is then
        // written at the convolution's step: its output is live from there, so that it never
        // shares memory with the convolution's input (`crate::native::passes::fusion`).
        for &i in convs {
            if let Some(f) = fusion::candidate(graph, i) {
                touch(graph.root(graph.tensor(f.out).buffer).0.0, i);
            }
        }
        for a in &mut access {
            a.sort_unstable();
        }
        let live: Vec<Option<(usize, usize)>> = access
            .iter()
            .map(|a| Some((*a.first()?, *a.last()?)))
            .collect();
        let apart = |a: usize, b: usize| time_apart(&schedule, &live, &access, a, b);
        let bytes_of = |b: BufferId| -> Result<usize, String> {
            let buf = graph.buffer(b);
            buf.len
                .checked_mul(buf.dtype.size())
                .ok_or_else(|| format!("buffer `{}`: {} elements overflow", buf.name, buf.len))
        };

        // Activations: greedy offset assignment over lifetimes.
        let mut order: Vec<usize> = (0..nb)
            .filter(|&b| {
                let buf = &graph.buffers[b];
                buf.kind == BufferKind::Activation && buf.placed_in.is_none() && live[b].is_some()
            })
            .collect();
        let mut sizes = vec![0usize; nb];
        for &b in &order {
            sizes[b] = align_up(bytes_of(BufferId(b))?.max(1));
        }
        order.sort_by_key(|&b| (std::cmp::Reverse(sizes[b]), b));
        let mut activation_offset = vec![None; nb];
        let mut placed: Vec<(usize, usize, usize)> = Vec::new(); // (offset, end, buffer)
        let mut end = 0usize;
        for &b in &order {
            let mut conflicts: Vec<(usize, usize)> = placed
                .iter()
                .filter(|&&(_, _, o)| !apart(b, o))
                .map(|&(off, end, _)| (off, end))
                .collect();
            conflicts.sort_unstable();
            let mut at = 0usize;
            for (off, cend) in conflicts {
                if at + sizes[b] <= off {
                    break;
                }
                at = at.max(cend);
            }
            let stop = at
                .checked_add(sizes[b])
                .ok_or_else(|| format!("workspace offset {at} + {} overflows", sizes[b]))?;
            placed.push((at, stop, b));
            activation_offset[b] = Some(at);
            end = end.max(stop);
        }

        // Weights: packed one after the other.
        let mut weight_offset = vec![None; nb];
        let mut weight_bytes = 0usize;
        for (b, buf) in graph.buffers.iter().enumerate() {
            if let BufferKind::Weight(_) = buf.kind {
                weight_offset[b] = Some(weight_bytes);
                weight_bytes = weight_bytes
                    .checked_add(align_up(bytes_of(BufferId(b))?.max(1)))
                    .ok_or("weight blob size overflows")?;
            }
        }
        Ok(MemoryPlan {
            activation_offset,
            weight_offset,
            activation_bytes: end,
            weight_bytes,
            live,
            access,
            schedule,
        })
    }

    /// The fusion of convolution step `i` of `graph` under this plan, when it has one: a
    /// [`crate::native::passes::fusion::candidate`] whose output, written at step `i`,
    /// overlaps neither the convolution's input (which may die at `i`) nor what the fused
    /// epilogue reads (cuDNN promises nothing for an epilogue reading the bytes it writes).
    /// The plan keeps every candidate's output live from step `i` on, so this holds unless
    /// the plan was made otherwise; checked, not assumed.
    pub fn fusion(&self, graph: &Graph, i: usize) -> Option<Fusion> {
        let f = fusion::candidate(graph, i)?;
        let StepKind::Conv(cv) = &graph.steps[i].kind else {
            return None;
        };
        let read = [Some(cv.x), Some(f.bias), f.residual];
        if read
            .into_iter()
            .flatten()
            .any(|t| self.overlap(graph, f.out, t))
        {
            return None;
        }
        Some(f)
    }

    /// [`MemoryPlan::fusion`] for every step (`None` for steps that are no fusable
    /// convolution).
    pub fn fusions(&self, graph: &Graph) -> Vec<Option<Fusion>> {
        (0..graph.steps.len())
            .map(|i| self.fusion(graph, i))
            .collect()
    }

    /// Byte range `[start, end)` of a view's elements in its region (negative strides
    /// included); `None` for an empty view.
    fn extent(&self, graph: &Graph, t: TensorId) -> Option<(Region, usize, usize)> {
        let tensor = graph.tensor(t);
        let (region, base) = self.locate_buffer(graph, tensor.buffer);
        let (first, end) = tensor.extent()?;
        let es = tensor.dtype.size();
        Some((region, base + first * es, base + end * es))
    }

    /// Whether views `a` and `b` of `graph` share a byte under this plan.
    pub fn overlap(&self, graph: &Graph, a: TensorId, b: TensorId) -> bool {
        match (self.extent(graph, a), self.extent(graph, b)) {
            (Some((ra, sa, ea)), Some((rb, sb, eb))) => ra == rb && sa < eb && sb < ea,
            _ => false,
        }
    }

    /// The region and byte offset of element 0 of buffer `b` (following placements).
    pub fn locate_buffer(&self, graph: &Graph, b: BufferId) -> (Region, usize) {
        let (root, elem) = graph.root(b);
        let buf = graph.buffer(root);
        let bytes = elem * buf.dtype.size();
        match buf.kind {
            BufferKind::Activation => (
                Region::Workspace,
                self.activation_offset[root.0].unwrap_or(0) + bytes,
            ),
            BufferKind::Weight(_) => (
                Region::Weights,
                self.weight_offset[root.0].unwrap_or(0) + bytes,
            ),
            BufferKind::Input(i) => (Region::Input(i), bytes),
            BufferKind::Output(i) => (Region::Output(i), bytes),
        }
    }

    /// The region and byte offset of element `[0, 0, ...]` of tensor `t`.
    pub fn locate(&self, graph: &Graph, t: crate::native::ir::TensorId) -> (Region, usize) {
        let tensor = graph.tensor(t);
        let (r, off) = self.locate_buffer(graph, tensor.buffer);
        (r, off + tensor.offset * tensor.dtype.size())
    }

    /// Copy every weight into one blob laid out as planned.
    pub fn weight_blob(&self, graph: &Graph) -> Vec<u8> {
        let mut blob = vec![0u8; self.weight_bytes];
        for (b, buf) in graph.buffers.iter().enumerate() {
            if let (BufferKind::Weight(data), Some(off)) = (&buf.kind, self.weight_offset[b]) {
                blob[off..off + data.len()].copy_from_slice(data);
            }
        }
        blob
    }

    /// Check that no two root activation buffers overlap in memory unless every step
    /// touching one happens before every step touching the other (the planner's invariant,
    /// checked independently of how it was reached), and that the schedule holds
    /// ([`Schedule::check`]).
    ///
    /// # Errors
    /// The first pair that collides.
    pub fn check(&self, graph: &Graph) -> Result<(), String> {
        self.schedule.check()?;
        if self.schedule.stream.len() != graph.steps.len() {
            return Err(format!(
                "schedule of {} steps for a graph of {}",
                self.schedule.stream.len(),
                graph.steps.len()
            ));
        }
        let spans: Vec<(usize, usize, usize)> = (0..graph.buffers.len())
            .filter_map(|b| {
                let off = self.activation_offset[b]?;
                self.live[b]?;
                let bytes = graph.buffers[b].len * graph.buffers[b].dtype.size();
                Some((b, off, off + bytes))
            })
            .collect();
        for (i, a) in spans.iter().enumerate() {
            if a.2 > self.activation_bytes {
                return Err(format!("buffer {} ends past the workspace", a.0));
            }
            for b in &spans[i + 1..] {
                let time = !time_apart(&self.schedule, &self.live, &self.access, a.0, b.0);
                let space = a.1 < b.2 && b.1 < a.2;
                if time && space {
                    return Err(format!(
                        "buffers `{}` and `{}` overlap in time and memory",
                        graph.buffers[a.0].name, graph.buffers[b.0].name
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Whether root buffers `a` and `b` may share memory: their lifetimes do not overlap and
/// every step touching the earlier one happens before every step touching the later one.
fn time_apart(
    schedule: &Schedule,
    live: &[Option<(usize, usize)>],
    access: &[Vec<usize>],
    a: usize,
    b: usize,
) -> bool {
    let (Some((as_, ae)), Some((bs, be))) = (live[a], live[b]) else {
        return true;
    };
    let (first, second) = if ae < bs {
        (a, b)
    } else if be < as_ {
        (b, a)
    } else {
        return false;
    };
    access[second]
        .iter()
        .all(|&j| access[first].iter().all(|&i| schedule.before(i, j)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::graph::{Step, StepKind};
    use crate::native::ir::ElemType;
    use crate::native::ops::copy;

    #[test]
    fn buffers_with_disjoint_lifetimes_share_memory() {
        let mut g = Graph::default();
        let x = g.add_packed("x", ElemType::F32, &[64], BufferKind::Input(0));
        let a = g.add_packed("a", ElemType::F32, &[64], BufferKind::Activation);
        let b = g.add_packed("b", ElemType::F32, &[64], BufferKind::Activation);
        let c = g.add_packed("c", ElemType::F32, &[64], BufferKind::Activation);
        let y = g.add_packed("y", ElemType::F32, &[64], BufferKind::Output(0));
        for (src, dst) in [(x, a), (a, b), (b, c), (c, y)] {
            g.steps.push(Step {
                node: "n".into(),
                kind: StepKind::Copy(copy::Copy { src, dst }),
            });
        }
        let p = MemoryPlan::new(&g).unwrap();
        p.check(&g).unwrap();
        // a (steps 0-1) and c (steps 2-3) do not overlap in time: 2 slots of 256 bytes.
        assert_eq!(p.activation_bytes, 512);
        let off = |t: crate::native::ir::TensorId| p.activation_offset[g.tensor(t).buffer.0];
        assert_ne!(off(a), off(b));
        assert_ne!(off(b), off(c));
        assert_eq!(off(a), off(c));
    }

    #[test]
    fn buffers_of_parallel_branches_never_share_memory() {
        // x -> a -> b -> y0, x -> c -> d -> y1: a (steps 0-1) and c (steps 2-3) have disjoint
        // lifetimes, so one stream shares their memory; on two streams the branches may run
        // together, so they must not.
        let mut g = Graph::default();
        let x = g.add_packed("x", ElemType::F32, &[64], BufferKind::Input(0));
        let [a, b, c, d] = ["a", "b", "c", "d"]
            .map(|n| g.add_packed(n, ElemType::F32, &[64], BufferKind::Activation));
        let y0 = g.add_packed("y0", ElemType::F32, &[64], BufferKind::Output(0));
        let y1 = g.add_packed("y1", ElemType::F32, &[64], BufferKind::Output(1));
        for (src, dst) in [(x, a), (a, b), (x, c), (c, d), (b, y0), (d, y1)] {
            g.steps.push(Step {
                node: "n".into(),
                kind: StepKind::Copy(copy::Copy { src, dst }),
            });
        }
        let off = |p: &MemoryPlan, t: crate::native::ir::TensorId| {
            p.activation_offset[g.tensor(t).buffer.0].unwrap()
        };
        let one = MemoryPlan::for_fusions(&g, &[], 1).unwrap();
        one.check(&g).unwrap();
        assert_eq!(off(&one, a), off(&one, c));
        let two = MemoryPlan::for_fusions(&g, &[], 2).unwrap();
        two.check(&g).unwrap();
        assert_eq!(two.schedule.streams, 2);
        let spans: Vec<usize> = [a, b, c, d].iter().map(|&t| off(&two, t)).collect();
        for (i, s) in spans.iter().enumerate() {
            assert!(
                !spans[i + 1..].contains(s),
                "{spans:?}: branches share memory"
            );
        }
        // The one-stream plan fails the check under the two-stream schedule.
        let mixed = MemoryPlan {
            schedule: two.schedule.clone(),
            ..one
        };
        assert!(mixed.check(&g).unwrap_err().contains("overlap"));
    }
}
