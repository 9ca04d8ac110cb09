//! Which steps may run at the same time: a stream for every step, and the events that order
//! steps on different streams. Pure logic over the IR, so the host tests prove it (and the
//! emulator runs the steps in other orders the schedule allows) without a GPU.
//!
//! Small networks leave most of a large GPU idle: YOLOv8n at 320 is about 90 kernels of a few
//! microseconds each, one after the other. Its detection head, though, is six independent
//! chains of convolutions (box and class branches at three scales), and the first scale's
//! chains need nothing from the rest of the neck. Run on separate streams inside the captured
//! graph, they become parallel branches of the graph, which the GPU runs concurrently (the
//! multi-stream execution TensorRT calls auxiliary streams, and what a hand-written
//! `torch.cuda.Stream` fork/join does in PyTorch).
//!
//! # Dependencies
//! Step `j` depends on an earlier step `i` when both touch the same root buffer, at least one
//! writes, and their views may share an element. Two views provably share none when their
//! element ranges are disjoint, or when, for some period `p`, every element of each lies in
//! a residue interval modulo `p` and the two intervals are disjoint (slices of channels of
//! one channels-last buffer: the inputs of a concatenation, written in place). A convolution
//! that may absorb its element-wise successor ([`crate::native::passes::fusion`]) is given that step's
//! accesses too (bias, residual, output), as the fused plan makes them.
//!
//! # Streams
//! Steps are assigned in program order: a step continues the stream whose last step it
//! depends on; else it takes a stream whose work all happens before it, or an unused one;
//! else (every stream busy with unrelated work) the stream of its latest dependency. At most
//! `max_streams` streams (stream 0 is the session's own). A dependency on another stream is
//! an event recorded after the producer and waited for before the consumer, unless it
//! already happens before it. Every side stream waits, before its first step, on a fork
//! event recorded on stream 0 at the start of the run, and stream 0 waits at the end for the
//! last step of every side stream (a captured graph must join every stream it forked).
//!
//! # Memory
//! Sharing memory between two buffers needs every access to one to happen before every
//! access to the other ([`Schedule::before`]); with one stream that is program order, which is
//! what [`crate::native::plan::memory`] assumed before streams.

use crate::native::graph::Graph;
use crate::native::ir::{Tensor, TensorId};

/// Default most streams a network runs on (`NativeOptions::streams`). YOLOv8's head has
/// six independent chains beside the neck; on the H200 (tenth run of
/// `docs/evidence/native-h200.md`) 8 streams beat 4, which beat 1, in every precision. A
/// stream costs a slice of cuDNN scratch when it runs convolutions, and one of cuBLAS
/// workspace when it runs matrix products ([`crate::native::exec::launch::Layout`]).
pub const DEFAULT_STREAMS: usize = 8;

/// Most streams a schedule may use (stream indices are stored in `u8`, and the executor's
/// layout has a slice per stream up to this).
pub const MAX_STREAMS: usize = 16;

/// One access of a step to a buffer.
#[derive(Clone, Copy, Debug)]
struct Access {
    root: usize,
    /// Element offset of the view's buffer inside the root.
    base: usize,
    t: TensorId,
    write: bool,
}

/// The streams and events of a network's steps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    /// Streams used (1: every step on the session's stream, no event).
    pub streams: usize,
    /// Stream of each step (0: the session's stream).
    pub stream: Vec<u8>,
    /// Per step: true when it is the first step of a side stream (it waits on the fork
    /// event first).
    pub starts: Vec<bool>,
    /// Per step: the steps on other streams whose events it waits for before it runs.
    pub waits: Vec<Vec<u32>>,
    /// Per step: the index of the event recorded after it, when a step on another stream
    /// (or the final join) waits for it.
    pub event: Vec<Option<u32>>,
    /// Events recorded (the fork event aside).
    pub events: usize,
    /// Steps whose events stream 0 waits for after the last step (one per side stream).
    pub joins: Vec<u32>,
    /// Per step: the earlier steps it depends on (data, not scheduling).
    pub deps: Vec<Vec<u32>>,
    /// Per step: bit set of the steps that happen before it under the streams and events.
    before: Vec<Vec<u64>>,
}

fn words(n: usize) -> usize {
    n.div_ceil(64)
}

fn has(set: &[u64], i: usize) -> bool {
    set[i / 64] >> (i % 64) & 1 == 1
}

fn put(set: &mut [u64], i: usize) {
    set[i / 64] |= 1 << (i % 64);
}

fn union(into: &mut [u64], from: &[u64]) {
    for (a, b) in into.iter_mut().zip(from) {
        *a |= b;
    }
}

/// Residue interval `[lo, hi)` modulo `p` holding every element of `t` (at element `base`
/// of its root), when no dimension's stride steps it out of one non-wrapping interval.
fn residues(t: &Tensor, base: usize, p: usize) -> Option<(usize, usize)> {
    let mut span = 0usize;
    for (&n, &s) in t.shape.iter().zip(&t.strides) {
        if n == 1 {
            continue;
        }
        let s = usize::try_from(s).ok().filter(|&s| s > 0)?;
        if s % p != 0 {
            span = span.checked_add((n - 1).checked_mul(s)?)?;
        }
    }
    let r = (base + t.offset) % p;
    (r + span < p).then_some((r, r + span + 1))
}

/// Whether two views of one root provably share no element (see the module's rules).
fn disjoint(a: &Tensor, a_base: usize, b: &Tensor, b_base: usize) -> bool {
    let (Some((alo, ahi)), Some((blo, bhi))) = (a.extent(), b.extent()) else {
        return true; // an empty view touches nothing
    };
    if a_base + ahi <= b_base + blo || b_base + bhi <= a_base + alo {
        return true;
    }
    let periods = a
        .shape
        .iter()
        .zip(&a.strides)
        .chain(b.shape.iter().zip(&b.strides))
        .filter(|&(&n, &s)| n > 1 && s > 1)
        .map(|(_, &s)| s as usize);
    for p in periods {
        if let (Some((x0, x1)), Some((y0, y1))) = (residues(a, a_base, p), residues(b, b_base, p))
            && (x1 <= y0 || y1 <= x0)
        {
            return true;
        }
    }
    false
}

fn accesses(g: &Graph, i: usize, fused: bool) -> Vec<Access> {
    let step = &g.steps[i];
    let mut tensors: Vec<(TensorId, bool)> = step.reads().into_iter().map(|t| (t, false)).collect();
    tensors.push((step.writes(), true));
    if fused && let Some(f) = crate::native::passes::fusion::candidate(g, i) {
        tensors.push((f.bias, false));
        if let Some(r) = f.residual {
            tensors.push((r, false));
        }
        tensors.push((f.out, true));
    }
    tensors
        .into_iter()
        .map(|(t, write)| {
            let (root, base) = g.root(g.tensor(t).buffer);
            Access {
                root: root.0,
                base,
                t,
                write,
            }
        })
        .collect()
}

impl Schedule {
    /// Schedule `g` on at most `max_streams` streams (clamped to 1..=[`MAX_STREAMS`]), with
    /// the convolution steps `fused` possibly running their element-wise successor.
    pub fn new(g: &Graph, fused: &[usize], max_streams: usize) -> Schedule {
        let max_streams = max_streams.clamp(1, MAX_STREAMS);
        let n = g.steps.len();
        let w = words(n);
        let deps = Self::dependencies(g, fused);
        let mut s = Schedule {
            streams: 1,
            stream: vec![0; n],
            starts: vec![false; n],
            waits: vec![Vec::new(); n],
            event: vec![None; n],
            events: 0,
            joins: Vec::new(),
            deps,
            before: vec![vec![0; w]; n],
        };
        // Per stream: its last step.
        let mut last: Vec<Option<usize>> = vec![None; max_streams];
        let mut record = vec![false; n];
        for j in 0..n {
            // Everything j's dependencies need, for choosing a stream.
            let mut need = vec![0u64; w];
            for &d in &s.deps[j] {
                put(&mut need, d as usize);
                union(&mut need, &s.before[d as usize]);
            }
            let free = |st: usize| last[st].is_none_or(|l| has(&need, l));
            let st = s.deps[j]
                .iter()
                .rev()
                .map(|&d| d as usize)
                .find(|&d| last[s.stream[d] as usize] == Some(d))
                .map(|d| s.stream[d] as usize)
                .or_else(|| (0..max_streams).find(|&st| last[st].is_some() && free(st)))
                .or_else(|| (0..max_streams).find(|&st| last[st].is_none()))
                .unwrap_or_else(|| {
                    s.deps[j]
                        .last()
                        .map_or(0, |&d| s.stream[d as usize] as usize)
                });
            s.stream[j] = st as u8;
            s.streams = s.streams.max(st + 1);
            let mut before = vec![0u64; w];
            match last[st] {
                Some(l) => {
                    put(&mut before, l);
                    union(&mut before, &s.before[l]);
                }
                None => s.starts[j] = st != 0,
            }
            for &d in &s.deps[j] {
                let d = d as usize;
                if has(&before, d) {
                    continue;
                }
                s.waits[j].push(d as u32);
                record[d] = true;
                put(&mut before, d);
                union(&mut before, &s.before[d]);
            }
            s.before[j] = before;
            last[st] = Some(j);
        }
        // The join: stream 0 waits for every side stream's last step not already before its
        // own last step.
        let end = last[0];
        for l in last.iter().skip(1).flatten() {
            if end.is_none_or(|e| !has(&s.before[e], *l)) {
                s.joins.push(*l as u32);
                record[*l] = true;
            }
        }
        for (j, r) in record.into_iter().enumerate() {
            if r {
                s.event[j] = Some(s.events as u32);
                s.events += 1;
            }
        }
        s
    }

    /// The data dependencies of every step on earlier ones (see the module's rules).
    fn dependencies(g: &Graph, fused: &[usize]) -> Vec<Vec<u32>> {
        let n = g.steps.len();
        // Per root buffer: the accesses seen so far, with their step.
        let mut seen: Vec<Vec<(usize, Access)>> = vec![Vec::new(); g.buffers.len()];
        let mut deps = Vec::with_capacity(n);
        for j in 0..n {
            let acc = accesses(g, j, fused.contains(&j));
            let mut dj: Vec<u32> = Vec::new();
            for a in &acc {
                for &(i, b) in &seen[a.root] {
                    if i == j || !(a.write || b.write) || dj.contains(&(i as u32)) {
                        continue;
                    }
                    if !disjoint(g.tensor(a.t), a.base, g.tensor(b.t), b.base) {
                        dj.push(i as u32);
                    }
                }
            }
            for a in acc {
                seen[a.root].push((j, a));
            }
            dj.sort_unstable();
            deps.push(dj);
        }
        deps
    }

    /// Whether step `i` happens before step `j` under the streams and events (every step
    /// before `j` in program order does, with one stream).
    pub fn before(&self, i: usize, j: usize) -> bool {
        self.before.get(j).is_some_and(|b| i < j && has(b, i))
    }

    /// Check the schedule independently of how it was built: happens-before recomputed from
    /// the streams, the fork and the waits alone (and equal to what [`Schedule::before`]
    /// answers, which the memory plan relies on); every dependency happening before its
    /// consumer; exactly the first step of each side stream waiting on the fork; every wait
    /// and join naming an earlier step on another stream with its own event; event indices
    /// distinct and below `events`; every side stream's work joined into stream 0.
    ///
    /// # Errors
    /// The first violation.
    pub fn check(&self) -> Result<(), String> {
        let n = self.stream.len();
        let w = words(n);
        if [
            self.starts.len(),
            self.waits.len(),
            self.event.len(),
            self.before.len(),
        ]
        .iter()
        .any(|&l| l != n)
        {
            return Err("schedule vectors of different lengths".into());
        }
        let mut seen = vec![false; self.events];
        for e in self.event.iter().flatten() {
            let e = *e as usize;
            if e >= self.events || std::mem::replace(&mut seen[e], true) {
                return Err(format!("event {e} out of range or recorded by two steps"));
            }
        }
        let mut last: Vec<Option<usize>> = vec![None; MAX_STREAMS];
        let mut hb: Vec<Vec<u64>> = Vec::with_capacity(n);
        for j in 0..n {
            let st = usize::from(self.stream[j]);
            if st >= self.streams.min(MAX_STREAMS) {
                return Err(format!("step {j} on stream {st} of {}", self.streams));
            }
            let first_on_side = st != 0 && last[st].is_none();
            if self.starts[j] != first_on_side {
                return Err(format!(
                    "step {j}: fork wait {} expected {first_on_side}",
                    self.starts[j]
                ));
            }
            let mut b = vec![0u64; w];
            if let Some(l) = last[st] {
                put(&mut b, l);
                union(&mut b, &hb[l]);
            }
            for &d in &self.waits[j] {
                let d = d as usize;
                if d >= j || usize::from(self.stream[d]) == st || self.event[d].is_none() {
                    return Err(format!("step {j} waits for step {d} without an event"));
                }
                put(&mut b, d);
                let from = hb[d].clone();
                union(&mut b, &from);
            }
            for &d in &self.deps[j] {
                if !has(&b, d as usize) {
                    return Err(format!(
                        "step {j} may run before step {d}, which it depends on"
                    ));
                }
            }
            if b != self.before[j] {
                return Err(format!(
                    "step {j}: happens-before differs from the recorded one"
                ));
            }
            hb.push(b);
            last[st] = Some(j);
        }
        for &k in &self.joins {
            let k = k as usize;
            if k >= n || self.stream[k] == 0 || self.event[k].is_none() {
                return Err(format!(
                    "join on step {k} without an event on a side stream"
                ));
            }
        }
        let end = last[0];
        for (st, l) in last.iter().enumerate().skip(1) {
            let Some(l) = *l else { continue };
            let joined = end.is_some_and(|e| has(&hb[e], l))
                || self
                    .joins
                    .iter()
                    .any(|&k| k as usize == l || has(&hb[k as usize], l));
            if !joined {
                return Err(format!("stream {st} never joins stream 0"));
            }
        }
        Ok(())
    }

    /// A run order the schedule allows other than program order: each stream's steps in
    /// order, a step only once everything it waits for ran, choosing among the ready
    /// streams with `pick` (given the candidate streams' next steps, it returns an index
    /// into them). The emulator runs the steps in such orders to prove that the streams and
    /// the memory plan together never let one step see another's unfinished work.
    pub fn order(&self, mut pick: impl FnMut(&[usize]) -> usize) -> Vec<usize> {
        let n = self.stream.len();
        let queues: Vec<Vec<usize>> = (0..self.streams)
            .map(|st| (0..n).filter(|&j| self.stream[j] as usize == st).collect())
            .collect();
        let mut next = vec![0usize; self.streams];
        let mut done = vec![false; n];
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let ready: Vec<usize> = (0..self.streams)
                .filter_map(|st| queues[st].get(next[st]).copied())
                .filter(|&j| self.waits[j].iter().all(|&d| done[d as usize]))
                .collect();
            if ready.is_empty() {
                break; // cannot happen for a schedule built by `new` (waits point backwards)
            }
            let j = ready[pick(&ready).min(ready.len() - 1)];
            done[j] = true;
            next[self.stream[j] as usize] += 1;
            out.push(j);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::graph::{Step, StepKind};
    use crate::native::ir::{BufferKind, ElemType};
    use crate::native::ops::copy;

    fn copy(g: &mut Graph, src: TensorId, dst: TensorId) {
        g.steps.push(Step {
            node: format!("c{}", g.steps.len()),
            kind: StepKind::Copy(copy::Copy { src, dst }),
        });
    }

    /// x -> a -> b, x -> c -> d, (b, d) -> y via two copies into halves of y.
    fn fork_join() -> (Graph, TensorId) {
        let mut g = Graph::default();
        let x = g.add_packed("x", ElemType::F32, &[64], BufferKind::Input(0));
        let [a, b, c, d] = ["a", "b", "c", "d"]
            .map(|n| g.add_packed(n, ElemType::F32, &[64], BufferKind::Activation));
        let y = g.add_packed("y", ElemType::F32, &[128], BufferKind::Output(0));
        let yt = g.tensor(y).clone();
        let half = |g: &mut Graph, k: usize| {
            g.add_view(Tensor {
                name: format!("y{k}"),
                shape: vec![64],
                offset: 64 * k,
                ..yt.clone()
            })
        };
        let (y0, y1) = (half(&mut g, 0), half(&mut g, 1));
        copy(&mut g, x, a); // 0
        copy(&mut g, a, b); // 1
        copy(&mut g, x, c); // 2
        copy(&mut g, c, d); // 3
        copy(&mut g, b, y0); // 4
        copy(&mut g, d, y1); // 5
        (g, y)
    }

    #[test]
    fn independent_chains_run_on_their_own_streams_and_join() {
        let (g, _) = fork_join();
        let s = Schedule::new(&g, &[], 4);
        s.check().unwrap();
        assert_eq!(s.deps[1], vec![0]);
        assert_eq!(
            s.deps[2],
            Vec::<u32>::new(),
            "two reads of x are no dependency"
        );
        assert_eq!(s.deps[5], vec![3], "disjoint halves of y are independent");
        assert_eq!(s.stream, vec![0, 0, 1, 1, 0, 1]);
        assert!(s.starts[2]);
        assert_eq!(s.joins, vec![5]);
        assert!(s.event[5].is_some());
        assert!(!s.before(2, 1) && !s.before(1, 2));
        // One stream: program order.
        let one = Schedule::new(&g, &[], 1);
        one.check().unwrap();
        assert_eq!(one.streams, 1);
        assert_eq!(one.events, 0);
        assert!((0..6).all(|j| (0..j).all(|i| one.before(i, j))));
    }

    #[test]
    fn a_join_waits_for_the_other_stream() {
        let (mut g, y) = fork_join();
        // Step 6: y -> z reads both halves.
        let z = g.add_packed("z", ElemType::F32, &[128], BufferKind::Activation);
        copy(&mut g, y, z);
        let s = Schedule::new(&g, &[], 4);
        s.check().unwrap();
        assert_eq!(s.deps[6], vec![4, 5]);
        assert_eq!(
            s.stream[6], 1,
            "continues the stream of its latest dependency"
        );
        assert_eq!(s.waits[6], vec![4]);
        assert!(s.event[4].is_some());
        assert_eq!(s.joins, vec![6]);
    }

    #[test]
    fn check_catches_a_schedule_that_lost_an_ordering() {
        let (mut g, y) = fork_join();
        let z = g.add_packed("z", ElemType::F32, &[128], BufferKind::Activation);
        copy(&mut g, y, z);
        let good = Schedule::new(&g, &[], 4);
        good.check().unwrap();
        // A wait dropped (and the recorded happens-before with it).
        let mut bad = good.clone();
        bad.waits[6].clear();
        bad.before[6] = vec![0; 1];
        put(&mut bad.before[6], 5);
        put(&mut bad.before[6], 3);
        put(&mut bad.before[6], 2);
        assert!(bad.check().unwrap_err().contains("depends on"));
        // Happens-before claimed but not enforced by any wait (what the memory plan trusts).
        let mut bad = good.clone();
        put(&mut bad.before[2], 1);
        assert!(bad.check().unwrap_err().contains("happens-before"));
        // A side stream that does not wait on the fork.
        let mut bad = good.clone();
        bad.starts[2] = false;
        assert!(bad.check().is_err());
        // No join.
        let mut bad = good;
        bad.joins.clear();
        assert!(bad.check().unwrap_err().contains("never joins"));
    }

    #[test]
    fn slices_of_channels_are_disjoint_but_overlapping_views_are_not() {
        // A packed NHWC buffer of 8 channels over 2 x 2 pixels; two views of 3 and 5
        // channels (pitch 8) are disjoint, two of 4 channels from 2 and 4 are not.
        let mut g = Graph::default();
        let r = g.add_packed("r", ElemType::F16, &[32], BufferKind::Activation);
        let view = |c0: usize, c: usize| Tensor {
            name: "v".into(),
            buffer: g.tensor(r).buffer,
            dtype: ElemType::F16,
            shape: vec![1, c, 2, 2],
            offset: c0,
            strides: vec![32, 1, 16, 8],
        };
        let (a, b) = (view(0, 3), view(3, 5));
        assert!(a.nhwc_pitch() == Some(8) && b.nhwc_pitch() == Some(8));
        assert!(disjoint(&a, 0, &b, 0));
        assert!(!disjoint(&view(2, 4), 0, &view(4, 4), 0));
        // The same slices of a buffer placed at element 16 of its root: still disjoint.
        assert!(disjoint(&a, 16, &b, 16));
        // Contiguous ranges.
        let lin = |off: usize, n: usize| Tensor {
            shape: vec![n],
            strides: vec![1],
            offset: off,
            ..view(0, 1)
        };
        assert!(disjoint(&lin(0, 8), 0, &lin(8, 8), 0));
        assert!(!disjoint(&lin(0, 9), 0, &lin(8, 8), 0));
    }

    #[test]
    fn streams_are_bounded_and_other_orders_respect_waits() {
        // Eight independent chains of two copies from x.
        let mut g = Graph::default();
        let x = g.add_packed("x", ElemType::F32, &[16], BufferKind::Input(0));
        for k in 0..8 {
            let a = g.add_packed(
                format!("a{k}"),
                ElemType::F32,
                &[16],
                BufferKind::Activation,
            );
            let y = g.add_packed(format!("y{k}"), ElemType::F32, &[16], BufferKind::Output(k));
            copy(&mut g, x, a);
            copy(&mut g, a, y);
        }
        for max in [1, 2, 3, 8, 100] {
            let s = Schedule::new(&g, &[], max);
            s.check().unwrap();
            assert_eq!(s.streams, max.min(8));
            for pick_last in [false, true] {
                let order = s.order(|r| if pick_last { r.len() - 1 } else { 0 });
                assert_eq!(order.len(), g.steps.len());
                let pos: Vec<usize> = {
                    let mut p = vec![0; order.len()];
                    for (k, &j) in order.iter().enumerate() {
                        p[j] = k;
                    }
                    p
                };
                for j in 0..g.steps.len() {
                    for &d in &s.deps[j] {
                        assert!(pos[d as usize] < pos[j]);
                    }
                }
            }
        }
    }
}
