//! Rewrites of the lowered graph, each preserving what every output holds:
//!
//! 1. [`fuse_elementwise`]: a chain of element-wise steps becomes one step (one kernel) when
//!    the intermediate tensors are read by nothing else (e.g. convolution bias + SiLU);
//! 2. [`elide_copies`]: a copy disappears when its source buffer can live where the copy
//!    writes (a concatenation whose producers write straight into its slices, a network
//!    output written in place by its producer);
//! 3. [`write_through`]: a remaining copy into a strided destination is folded into the
//!    element-wise steps that produced its source (each writes its part of the strided view
//!    itself).
//!
//! [`optimise`] runs them in that order. Every pass keeps [`Graph::validate`] true. No pass
//! drops unused tensors: the memory plan gives no workspace to an activation buffer no step
//! touches (weights are all kept in the weight blob).

use std::collections::HashSet;

use crate::native::graph::{Graph, StepKind};
use crate::native::ir::program::{MAX_INPUTS, MAX_NODES};
use crate::native::ir::{BufferId, BufferKind, ElemType, Tensor, TensorId, map_view};
use crate::native::ops::{copy, elementwise::Elementwise};

/// Run every pass.
pub fn optimise(g: &mut Graph) {
    fuse_elementwise(g);
    elide_copies(g);
    write_through(g);
}

/// Steps that write any view of `b` (directly, not through placement).
fn writers_of(g: &Graph, b: BufferId) -> Vec<usize> {
    (0..g.steps.len())
        .filter(|&i| g.tensor(g.steps[i].writes()).buffer == b)
        .collect()
}

/// Steps that read tensor `t` (by id).
fn readers_of(g: &Graph, t: TensorId) -> Vec<usize> {
    (0..g.steps.len())
        .filter(|&i| g.steps[i].reads().contains(&t))
        .collect()
}

/// True when `t` is the only view of its buffer used by any step or network output, covers
/// the whole buffer packed, and the buffer is an unplaced activation.
fn sole_whole_view(g: &Graph, t: TensorId) -> bool {
    let tensor = g.tensor(t);
    let b = tensor.buffer;
    let buf = g.buffer(b);
    if buf.kind != BufferKind::Activation || buf.placed_in.is_some() {
        return false;
    }
    if !(tensor.offset == 0 && tensor.numel() == buf.len && tensor.is_packed()) {
        return false;
    }
    if g.outputs.iter().any(|o| g.tensor(o.tensor).buffer == b) {
        return false;
    }
    g.steps.iter().all(|s| {
        s.reads()
            .into_iter()
            .chain(std::iter::once(s.writes()))
            .all(|u| u == t || g.tensor(u).buffer != b)
    })
}

/// Merge element-wise producers into their element-wise consumer while the intermediate
/// tensor (fp32 or fp16: nothing is rounded differently by skipping its store) is read by that
/// consumer only and the merged step stays within the kernel's limits.
pub fn fuse_elementwise(g: &mut Graph) {
    loop {
        let mut merged = false;
        'search: for j in 0..g.steps.len() {
            let StepKind::Elementwise(Elementwise { inputs, .. }) = &g.steps[j].kind else {
                continue;
            };
            for (slot, &t) in inputs.iter().enumerate() {
                if !matches!(g.tensor(t).dtype, ElemType::F32 | ElemType::F16) {
                    continue;
                }
                if !sole_whole_view(g, t) {
                    continue;
                }
                let writers = writers_of(g, g.tensor(t).buffer);
                let &[i] = writers.as_slice() else { continue };
                if i >= j || readers_of(g, t) != vec![j] {
                    continue;
                }
                let StepKind::Elementwise(Elementwise {
                    inputs: p_inputs,
                    program: p_program,
                    ..
                }) = &g.steps[i].kind
                else {
                    continue;
                };
                let StepKind::Elementwise(Elementwise {
                    inputs: c_inputs,
                    output,
                    program: c_program,
                }) = &g.steps[j].kind
                else {
                    unreachable!("checked above")
                };
                let fused = c_program.inline(slot, p_program, c_inputs.len());
                let all: Vec<TensorId> = c_inputs.iter().chain(p_inputs.iter()).copied().collect();
                let (program, new_inputs) = fused.simplify(&all);
                if new_inputs.len() > MAX_INPUTS || program.nodes.len() > MAX_NODES {
                    continue;
                }
                let output = *output;
                let node = format!("{}+{}", g.steps[i].node, g.steps[j].node);
                g.steps[j].kind = StepKind::Elementwise(Elementwise {
                    inputs: new_inputs,
                    output,
                    program,
                });
                g.steps[j].node = node;
                g.steps.remove(i);
                merged = true;
                break 'search;
            }
        }
        if !merged {
            break;
        }
    }
}

/// The element extent `[lo, hi)` of tensor `t` in its root buffer.
fn root_extent(g: &Graph, t: TensorId) -> Option<(BufferId, usize, usize)> {
    let tensor = g.tensor(t);
    // The extent counts the view's own offset; the root offset is its buffer's placement.
    let (lo, hi) = tensor.extent()?;
    let (root, off) = g.root(tensor.buffer);
    Some((root, off + lo, off + hi))
}

/// Remove copies whose source buffer can be placed where they write.
///
/// A buffer `X` (an unplaced activation) is placed at element `P` of root buffer `R` when a
/// copy from a view of `X` lands exactly on a view of `R` at `P + offset`; the placement is
/// taken only if every other step that writes into `R[P .. P + len(X)]` is such a copy of
/// the same data (those copies all disappear), `X` fits inside `R`, and `R` is an activation or
/// an output. Then producers of `X` write straight into `R` and the copies are gone.
pub fn elide_copies(g: &mut Graph) {
    loop {
        let mut done = false;
        for ci in 0..g.steps.len() {
            let StepKind::Copy(copy::Copy { src, dst }) = g.steps[ci].kind else {
                continue;
            };
            if let Some(remove) = try_place(g, src, dst) {
                let remove: HashSet<usize> = remove.into_iter().collect();
                let mut k = 0;
                g.steps.retain(|_| {
                    let keep = !remove.contains(&k);
                    k += 1;
                    keep
                });
                done = true;
                break;
            }
        }
        if !done {
            break;
        }
    }
}

fn try_place(g: &mut Graph, src: TensorId, dst: TensorId) -> Option<Vec<usize>> {
    let s = g.tensor(src).clone();
    let x = s.buffer;
    let xb = g.buffer(x).clone();
    if xb.kind != BufferKind::Activation || xb.placed_in.is_some() {
        return None;
    }
    let (root, droot_off) = g.tensor_root(dst);
    if root == x {
        return None;
    }
    let rb = g.buffer(root);
    if !matches!(rb.kind, BufferKind::Activation | BufferKind::Output(_)) || rb.dtype != xb.dtype {
        return None;
    }
    // The copy maps X's element `s.offset` to R's element `droot_off`.
    let p = droot_off as isize - s.offset as isize;
    if p < 0 || p as usize + xb.len > rb.len {
        return None;
    }
    let p = p as usize;
    // X must not (transitively) host R.
    if g.root(root).0 == x {
        return None;
    }
    // Copies from views of X onto matching views of R (the ones that disappear).
    let mut elided = Vec::new();
    for (i, step) in g.steps.iter().enumerate() {
        if let StepKind::Copy(copy::Copy { src: s2, dst: d2 }) = step.kind {
            let (st, dt) = (g.tensor(s2), g.tensor(d2));
            if st.buffer != x || g.tensor_root(d2).0 != root {
                continue;
            }
            let (_, d2_off) = g.tensor_root(d2);
            let same = st.shape == dt.shape
                && p + st.offset == d2_off
                && st
                    .shape
                    .iter()
                    .zip(st.strides.iter().zip(&dt.strides))
                    .all(|(&d, (a, b))| d == 1 || a == b);
            if same {
                elided.push(i);
            }
        }
    }
    if elided.is_empty() {
        return None;
    }
    // Every other write into R[p, p + len) must be one of those copies.
    let (lo, hi) = (p, p + xb.len);
    for (i, step) in g.steps.iter().enumerate() {
        if elided.contains(&i) {
            continue;
        }
        let w = step.writes();
        if g.tensor(w).buffer == x {
            continue;
        }
        if let Some((r, a, b)) = root_extent(g, w)
            && r == root
            && a < hi
            && lo < b
        {
            return None;
        }
    }
    // X's own writers must stay inside X (they do: views stay inside their buffer), and a
    // network output must be written completely: if R is an output, the remaining copies
    // plus X must still cover it, which holds because only the elided copies' targets are
    // now covered by X (same elements).
    g.buffers[x.0].placed_in = Some((root, p));
    Some(elided)
}

/// Fold a copy into the element-wise steps that produced its source: each writes its part of
/// the copy's destination view directly (a strided slice of a concatenation, say).
///
/// The source buffer `X` must be an unplaced activation that the copy reads whole and packed,
/// that nothing else reads (through any view, buffers placed inside it included) and that is
/// no network output; every step writing into it must be element-wise, come before the copy,
/// and write a view that maps onto the destination ([`map_view`]: YOLOv8's head writes the
/// box and class channels of each scale into one buffer, which the output concatenation then
/// copies into a strided slot). Nothing from the first writer to the copy may touch the
/// destination's memory except those writes, and no writer may read it.
pub fn write_through(g: &mut Graph) {
    loop {
        let mut done = false;
        for ci in 0..g.steps.len() {
            let StepKind::Copy(copy::Copy { src, dst }) = g.steps[ci].kind else {
                continue;
            };
            let x = g.tensor(src).buffer;
            let xb = g.buffer(x);
            let s = g.tensor(src);
            let whole = s.offset == 0 && s.numel() == xb.len && s.is_packed();
            if xb.kind != BufferKind::Activation
                || xb.placed_in.is_some()
                || !whole
                || g.outputs.iter().any(|o| g.tensor_root(o.tensor).0 == x)
            {
                continue;
            }
            let in_x = |t: TensorId| g.tensor_root(t).0 == x;
            let readers: Vec<usize> = (0..g.steps.len())
                .filter(|&k| g.steps[k].reads().into_iter().any(in_x))
                .collect();
            if readers != vec![ci] {
                continue;
            }
            let writers: Vec<usize> = (0..g.steps.len())
                .filter(|&k| in_x(g.steps[k].writes()))
                .collect();
            if writers.is_empty()
                || writers
                    .iter()
                    .any(|&k| k >= ci || !matches!(g.steps[k].kind, StepKind::Elementwise(_)))
            {
                continue;
            }
            // Each writer's output seen in the destination.
            let d = g.tensor(dst).clone();
            let src_shape = s.shape.clone();
            let mut targets = Vec::with_capacity(writers.len());
            for &k in &writers {
                let out = g.tensor(g.steps[k].writes());
                let (_, off) = g.tensor_root(g.steps[k].writes());
                let mapped = map_view(&out.shape, &out.strides, off, &src_shape, &d.strides)
                    .and_then(|(strides, shift)| {
                        let offset = usize::try_from(d.offset as isize + shift).ok()?;
                        Some(Tensor {
                            name: format!("{}.in.{}", out.name, d.name),
                            buffer: d.buffer,
                            dtype: d.dtype,
                            shape: out.shape.clone(),
                            offset,
                            strides,
                        })
                    });
                let Some(view) = mapped else { break };
                targets.push((k, view));
            }
            if targets.len() != writers.len() {
                continue;
            }
            // Nothing between the first producer and the copy may touch the destination's
            // memory (the producers' own writes aside), nor may a producer read it.
            let Some((root, lo, hi)) = root_extent(g, dst) else {
                continue;
            };
            let overlaps = |t: TensorId| {
                root_extent(g, t).is_some_and(|(r, a, b)| r == root && a < hi && lo < b)
            };
            let touched = (writers[0]..ci).any(|k| {
                let st = &g.steps[k];
                st.reads().into_iter().any(overlaps)
                    || (!writers.contains(&k) && overlaps(st.writes()))
            });
            if touched {
                continue;
            }
            for (k, view) in targets {
                let t = g.add_view(view);
                if let StepKind::Elementwise(Elementwise { output, .. }) = &mut g.steps[k].kind {
                    *output = t;
                }
            }
            g.steps.remove(ci);
            done = true;
            break;
        }
        if !done {
            break;
        }
    }
}

/// Strides that view the elements of (`shape`, `strides`) in the same row-major order under
/// `new_shape` without moving them, or `None` when that needs a copy (numpy's no-copy
/// reshape rule: each run of merged or split dimensions must be contiguous in memory).
pub fn reshape_strides(
    shape: &[usize],
    strides: &[isize],
    new_shape: &[usize],
) -> Option<Vec<isize>> {
    if shape.iter().product::<usize>() != new_shape.iter().product::<usize>() {
        return None;
    }
    // Drop dimensions of 1 from the old view; they constrain nothing.
    let old: Vec<(usize, isize)> = shape
        .iter()
        .zip(strides)
        .filter(|(d, _)| **d != 1)
        .map(|(&d, &s)| (d, s))
        .collect();
    let mut out = vec![0isize; new_shape.len()];
    let (mut oi, mut ni) = (0usize, 0usize);
    while ni < new_shape.len() {
        if new_shape[ni] == 1 {
            out[ni] = 0;
            ni += 1;
            continue;
        }
        if oi >= old.len() {
            return None;
        }
        // Grow a group of old dims and a group of new dims until their sizes match.
        let (mut op, mut np) = (old[oi].0, new_shape[ni]);
        let (o0, n0) = (oi, ni);
        while op != np {
            if op < np {
                oi += 1;
                op *= old.get(oi)?.0;
            } else {
                ni += 1;
                while ni < new_shape.len() && new_shape[ni] == 1 {
                    ni += 1;
                }
                np *= *new_shape.get(ni)?;
            }
        }
        // The old group must be contiguous.
        for k in o0..oi {
            if old[k].1 != old[k + 1].1 * old[k + 1].0 as isize {
                return None;
            }
        }
        // Strides of the new group, innermost = the old group's innermost stride.
        let mut acc = old[oi].1;
        for k in (n0..=ni).rev() {
            if new_shape[k] == 1 {
                out[k] = 0;
                continue;
            }
            out[k] = acc;
            acc *= new_shape[k] as isize;
        }
        oi += 1;
        ni += 1;
    }
    if oi != old.len() {
        return None;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::graph::Step;
    use crate::native::ir::packed_strides;

    #[test]
    fn reshape_strides_split_and_merge_contiguous_runs() {
        // A [64, 16384] slice of a [64, 21504] buffer viewed as [64, 128, 128].
        assert_eq!(
            reshape_strides(&[1, 64, 16384], &[0, 21504, 1], &[1, 64, 128, 128]),
            Some(vec![0, 21504, 128, 1])
        );
        // Merging the two strided rows is impossible.
        assert_eq!(reshape_strides(&[2, 3], &[5, 1], &[6]), None);
        // Packed merges.
        assert_eq!(
            reshape_strides(&[2, 3, 4], &[12, 4, 1], &[6, 4]),
            Some(vec![4, 1])
        );
        // Transposed view cannot be re-split differently.
        assert_eq!(reshape_strides(&[3, 2], &[1, 3], &[6]), None);
    }
    use crate::native::ir::program::{EwOp, Program};

    fn ew(inputs: Vec<TensorId>, output: TensorId, program: Program) -> Step {
        Step {
            node: "n".into(),
            kind: StepKind::Elementwise(Elementwise {
                inputs,
                output,
                program,
            }),
        }
    }

    #[test]
    fn bias_then_silu_fuse_into_one_step() {
        let mut g = Graph::default();
        let x = g.add_packed("x", ElemType::F32, &[1, 2, 3], BufferKind::Input(0));
        let b = g.add_packed(
            "b",
            ElemType::F32,
            &[1, 2, 3],
            BufferKind::Weight(vec![0; 24]),
        );
        let y = g.add_packed("y", ElemType::F32, &[1, 2, 3], BufferKind::Activation);
        let z = g.add_packed("z", ElemType::F32, &[1, 2, 3], BufferKind::Output(0));
        g.steps.push(ew(vec![x, b], y, Program::binary(EwOp::Add)));
        g.steps
            .push(ew(vec![y], z, Program::unary(EwOp::Silu, 0.0)));
        fuse_elementwise(&mut g);
        g.validate().unwrap();
        assert_eq!(g.steps.len(), 1);
        let StepKind::Elementwise(Elementwise {
            inputs, program, ..
        }) = &g.steps[0].kind
        else {
            panic!()
        };
        assert_eq!(inputs, &vec![x, b]);
        let v: f32 = 1.5 + 0.25;
        assert_eq!(program.eval(&[1.5, 0.25]), v * (1.0 / (1.0 + (-v).exp())));
    }

    #[test]
    fn concat_of_two_producers_disappears() {
        // y = concat(a, b) along axis 1 of [1, 2+3, 4]; a and b produced by element-wise steps.
        let mut g = Graph::default();
        let x = g.add_packed("x", ElemType::F32, &[1, 5, 4], BufferKind::Input(0));
        let a = g.add_packed("a", ElemType::F32, &[1, 2, 4], BufferKind::Activation);
        let b = g.add_packed("b", ElemType::F32, &[1, 3, 4], BufferKind::Activation);
        let y = g.add_packed("y", ElemType::F32, &[1, 5, 4], BufferKind::Output(0));
        let xa = g.add_view(Tensor {
            name: "xa".into(),
            shape: vec![1, 2, 4],
            ..g.tensor(x).clone()
        });
        let xb = g.add_view(Tensor {
            name: "xb".into(),
            shape: vec![1, 3, 4],
            offset: 8,
            ..g.tensor(x).clone()
        });
        g.steps
            .push(ew(vec![xa], a, Program::unary(EwOp::Neg, 0.0)));
        g.steps
            .push(ew(vec![xb], b, Program::unary(EwOp::Exp, 0.0)));
        for (t, off, d) in [(a, 0, 2), (b, 8, 3)] {
            let slot = g.add_view(Tensor {
                name: "slot".into(),
                buffer: g.tensor(y).buffer,
                dtype: ElemType::F32,
                shape: vec![1, d, 4],
                offset: off,
                strides: packed_strides(&[1, 5, 4]),
            });
            g.steps.push(Step {
                node: "cat".into(),
                kind: StepKind::Copy(copy::Copy { src: t, dst: slot }),
            });
        }
        optimise(&mut g);
        g.validate().unwrap();
        assert_eq!(g.steps.len(), 2, "{}", g.describe());
        let yb = g.tensor(y).buffer;
        assert_eq!(g.root(g.tensor(a).buffer), (yb, 0));
        assert_eq!(g.root(g.tensor(b).buffer), (yb, 8));
    }

    /// What [`strided_slot_graph`] adds between the producers and the copy.
    #[derive(Clone, Copy, PartialEq)]
    enum Hazard {
        None,
        /// A step between the producers and the copy reads the destination slot.
        ReaderBetween,
        /// The second producer also reads the destination slot.
        WriterReadsDst,
    }

    /// YOLOv8's head in small: two element-wise producers fill the channels of `x`
    /// `[1, 2 + 3, 2, 2]`, which a reshape `[1, 5, 4]` copies into a strided slot of the output
    /// `y` `[1, 5, 6]` (columns 1..5); columns 0 and 5 are written before the producers and
    /// after the copy (the pass tells views apart by their element ranges, which interleave).
    fn strided_slot_graph(hazard: Hazard) -> Graph {
        let mut g = Graph::default();
        let i = g.add_packed("i", ElemType::F32, &[1, 5, 2, 2], BufferKind::Input(0));
        let x = g.add_packed("x", ElemType::F32, &[1, 5, 2, 2], BufferKind::Activation);
        let y = g.add_packed("y", ElemType::F32, &[1, 5, 6], BufferKind::Output(0));
        let scratch = g.add_packed("s", ElemType::F32, &[1, 5, 4], BufferKind::Activation);
        g.inputs.push(crate::native::graph::Io {
            name: "i".into(),
            tensor: i,
        });
        g.outputs.push(crate::native::graph::Io {
            name: "y".into(),
            tensor: y,
        });
        let part = |g: &mut Graph, t: TensorId, c0: usize, n: usize| {
            g.add_view(Tensor {
                name: format!("{}.{c0}", g.tensor(t).name),
                shape: vec![1, n, 2, 2],
                offset: c0 * 4,
                ..g.tensor(t).clone()
            })
        };
        let (i0, i1) = (part(&mut g, i, 0, 2), part(&mut g, i, 2, 3));
        let (x0, x1) = (part(&mut g, x, 0, 2), part(&mut g, x, 2, 3));
        let xr = g.add_view(Tensor {
            name: "x.reshape".into(),
            shape: vec![1, 5, 4],
            strides: packed_strides(&[1, 5, 4]),
            ..g.tensor(x).clone()
        });
        let slot = g.add_view(Tensor {
            name: "y.slot".into(),
            shape: vec![1, 5, 4],
            offset: 1,
            ..g.tensor(y).clone()
        });
        // The slot's first 3 channels seen as the second producer's operand.
        let slot1 = g.add_view(Tensor {
            name: "y.slot.1".into(),
            shape: vec![1, 3, 2, 2],
            strides: vec![30, 6, 2, 1],
            offset: 1,
            ..g.tensor(y).clone()
        });
        let edge = |g: &mut Graph, col: usize| {
            g.add_view(Tensor {
                name: format!("y.col{col}"),
                shape: vec![1, 5, 1],
                offset: col,
                ..g.tensor(y).clone()
            })
        };
        let i_col = g.add_view(Tensor {
            name: "i.col".into(),
            shape: vec![1, 5, 1],
            strides: vec![20, 4, 1],
            ..g.tensor(i).clone()
        });
        let (c0, c5) = (edge(&mut g, 0), edge(&mut g, 5));
        g.steps
            .push(ew(vec![i_col], c0, Program::unary(EwOp::Neg, 0.0)));
        g.steps
            .push(ew(vec![i0], x0, Program::unary(EwOp::Neg, 0.0)));
        if hazard == Hazard::WriterReadsDst {
            g.steps
                .push(ew(vec![i1, slot1], x1, Program::binary(EwOp::Add)));
        } else {
            g.steps
                .push(ew(vec![i1], x1, Program::unary(EwOp::Exp, 0.0)));
        }
        if hazard == Hazard::ReaderBetween {
            g.steps
                .push(ew(vec![slot], scratch, Program::unary(EwOp::Neg, 0.0)));
        }
        g.steps.push(Step {
            node: "cat".into(),
            kind: StepKind::Copy(copy::Copy { src: xr, dst: slot }),
        });
        g.steps
            .push(ew(vec![i_col], c5, Program::unary(EwOp::Exp, 0.0)));
        g
    }

    fn run_reference(g: &Graph) -> Vec<Vec<u8>> {
        let memory = crate::native::plan::memory::MemoryPlan::new(g).unwrap();
        let input: Vec<u8> = (0..20)
            .flat_map(|k| (k as f32 * 0.25 - 2.0).to_ne_bytes())
            .collect();
        crate::native::exec::reference::run(g, &memory, &[&input]).unwrap()
    }

    fn copies(g: &Graph) -> usize {
        g.steps
            .iter()
            .filter(|s| matches!(s.kind, StepKind::Copy(_)))
            .count()
    }

    /// Both producers write their parts of the strided slot directly and the copy is gone;
    /// the host reference gives the same output as before the pass.
    #[test]
    fn two_producers_write_through_into_a_strided_slot() {
        let want = run_reference(&strided_slot_graph(Hazard::None));
        let mut g = strided_slot_graph(Hazard::None);
        write_through(&mut g);
        g.validate().unwrap();
        assert_eq!(copies(&g), 0, "{}", g.describe());
        let y = g.outputs[0].tensor;
        for s in &g.steps[1..3] {
            let out = g.tensor(s.writes());
            assert_eq!(out.buffer, g.tensor(y).buffer);
            assert_eq!(out.strides, vec![0, 6, 2, 1]);
        }
        assert_eq!(run_reference(&g), want);
    }

    /// A step that reads the destination between the producers and the copy, or a producer
    /// that reads it, would see the producers' values instead of what was there: the copy
    /// stays.
    #[test]
    fn write_through_keeps_the_copy_when_the_destination_is_read_before_it() {
        for hazard in [Hazard::ReaderBetween, Hazard::WriterReadsDst] {
            let mut g = strided_slot_graph(hazard);
            write_through(&mut g);
            g.validate().unwrap();
            assert_eq!(copies(&g), 1, "{}", g.describe());
        }
    }

    /// Element ranges in the root count a view's own offset and its buffer's placement.
    #[test]
    fn root_extent_counts_view_offset_and_placement() {
        let mut g = Graph::default();
        let r = g.add_packed("r", ElemType::F32, &[32], BufferKind::Activation);
        let x = g.add_packed("x", ElemType::F32, &[8], BufferKind::Activation);
        let rb = g.tensor(r).buffer;
        let xb = g.tensor(x).buffer;
        g.buffers[xb.0].placed_in = Some((rb, 10));
        let v = g.add_view(Tensor {
            name: "x.tail".into(),
            shape: vec![3],
            offset: 5,
            ..g.tensor(x).clone()
        });
        assert_eq!(root_extent(&g, v), Some((rb, 15, 18)));
        assert_eq!(root_extent(&g, x), Some((rb, 10, 18)));
    }
}
