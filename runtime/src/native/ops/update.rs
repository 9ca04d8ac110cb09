//! In-place row update at a position held in device memory (kernel `update_rows`): the
//! operator a KV cache needs. A decoder step appends its new keys and values to the cache at
//! the request's position; the position is read by the kernel from the request state's
//! cursor (`crate::session::state`), never baked into the launch, so one CUDA graph captured
//! at load writes the right rows at every position.
//!
//! Not produced from ONNX (tract has no in-place operator); a session or another lowering
//! builds it, with the cache as a region the session keeps from run to run.

use tract_onnx::prelude::*;

use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::native::ir::error::LowerError;
use crate::native::ir::{ElemType, TensorId, Views};
use crate::native::ops::op::{
    Call, DeviceMemory, HostMemory, Kernel, KernelCall, Lower, Op, ParamError, Uses, count,
    grid_for, params,
};

/// `dst[o, p + r, i] = src[o, r, i]` for `r < rows`, with `p = cursor[2 * slot]` read at run
/// time: packed `dst` `[outer, capacity, inner]` (the cache, updated in place: every other row
/// keeps its value), packed `src` `[outer, rows, inner]` of the same element type, and the
/// request state's packed `i32` cursor (`[position, length]` per slot,
/// `crate::session::state::Cursor`).
///
/// Rows that would land at or past `capacity` (or a negative position) are not written: the
/// session refuses such a run before launching it (`StateError::Full`), and the kernel never
/// writes outside `dst` whatever the cursor holds.
#[derive(Clone, Debug, PartialEq)]
pub struct UpdateRows {
    /// The cache (packed), read and written in place.
    pub dst: TensorId,
    /// The new rows (packed).
    pub src: TensorId,
    /// The cursor (packed `i32`, two words per slot).
    pub cursor: TensorId,
    /// The cursor's slot whose position is used.
    pub slot: usize,
    /// Product of the dimensions before the row axis.
    pub outer: usize,
    /// Rows of `dst`.
    pub capacity: usize,
    /// Rows of `src` (written per run).
    pub rows: usize,
    /// Product of the dimensions after the row axis.
    pub inner: usize,
}

impl UpdateRows {
    /// The elements written per run.
    fn total(&self) -> usize {
        self.outer * self.rows * self.inner
    }
}

impl Op for UpdateRows {
    const NAME: &'static str = "update_rows";

    /// The new rows and the cursor; the cache is the written tensor (its other rows are
    /// kept, not read).
    fn reads(&self) -> Vec<TensorId> {
        vec![self.src, self.cursor]
    }

    fn writes(&self) -> TensorId {
        self.dst
    }

    fn operands_mut(&mut self, f: &mut dyn FnMut(&mut TensorId, bool)) {
        f(&mut self.src, false);
        f(&mut self.cursor, false);
        f(&mut self.dst, true);
    }

    fn check(&self, g: &dyn Views) -> Result<(), String> {
        let (d, s, c) = (
            g.tensor(self.dst),
            g.tensor(self.src),
            g.tensor(self.cursor),
        );
        if d.dtype != s.dtype || c.dtype != ElemType::I32 {
            return Err(format!(
                "update_rows of {} rows into a {} cache with a {} cursor",
                s.dtype, d.dtype, c.dtype
            ));
        }
        if !d.is_packed() || !s.is_packed() || !c.is_packed() {
            return Err("update_rows over a strided view".into());
        }
        if d.numel() != self.outer * self.capacity * self.inner
            || s.numel() != self.total()
            || c.numel() < 2 * (self.slot + 1)
        {
            return Err(format!(
                "update_rows of {:?} into {:?} (outer {}, capacity {}, rows {}, inner {}) with \
                 cursor {:?} slot {}",
                s.shape,
                d.shape,
                self.outer,
                self.capacity,
                self.rows,
                self.inner,
                c.shape,
                self.slot
            ));
        }
        Ok(())
    }

    const USES: Uses = Uses::Kernels;

    const KERNELS: &'static [Kernel] = &[Kernel {
        name: "update_rows",
        emulate: emulate_update_rows,
    }];

    /// The rows copied as raw elements into the cache's current bytes; a position that would
    /// put a row outside the cache is an error here, where the kernel skips the row.
    fn reference(&self, mem: &mut dyn HostMemory) -> Result<(), String> {
        let es = mem.views().tensor(self.dst).dtype.size();
        let cursor = mem.read_raw(self.cursor);
        let at = 8 * self.slot;
        let p = i32::from_ne_bytes(cursor[at..at + 4].try_into().expect("4 bytes"));
        if p < 0 || p as usize + self.rows > self.capacity {
            return Err(format!(
                "update_rows at position {p} of {} rows: past the capacity of {} (the kernel \
                 skips those rows)",
                self.rows, self.capacity
            ));
        }
        let src = mem.read_raw(self.src);
        let mut dst = mem.read_raw(self.dst);
        let row = self.inner * es;
        for o in 0..self.outer {
            for r in 0..self.rows {
                let from = (o * self.rows + r) * row;
                let to = (o * self.capacity + p as usize + r) * row;
                dst[to..to + row].copy_from_slice(&src[from..from + row]);
            }
        }
        mem.write_raw(self.dst, &dst);
        Ok(())
    }

    fn call(
        &self,
        g: &dyn Views,
        node: &str,
        addr: &dyn Fn(TensorId) -> u64,
    ) -> Result<Call, ParamError> {
        let params = UpdateRowsParams {
            dst: addr(self.dst),
            src: addr(self.src),
            cursor: addr(self.cursor),
            outer: count(self.outer, node)?,
            capacity: count(self.capacity, node)?,
            rows: count(self.rows, node)?,
            inner: count(self.inner, node)?,
            elem_bytes: g.tensor(self.dst).dtype.size() as u32,
            slot: count(self.slot, node)?,
        };
        let grid = grid_for(count(self.total(), node)?);
        Ok(Call::Kernel(KernelCall::linear("update_rows", grid, &params)))
    }
}

/// Parameters of `update_rows` (`struct update_rows_params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, IntoBytes, FromBytes, Immutable)]
pub struct UpdateRowsParams {
    /// The cache.
    pub dst: u64,
    /// The new rows.
    pub src: u64,
    /// The cursor (`i32` words).
    pub cursor: u64,
    /// Rows before the row axis.
    pub outer: u32,
    /// Rows of the cache.
    pub capacity: u32,
    /// New rows.
    pub rows: u32,
    /// Elements after the row axis.
    pub inner: u32,
    /// Bytes per element.
    pub elem_bytes: u32,
    /// The cursor's slot.
    pub slot: u32,
}

const _: () = assert!(std::mem::size_of::<UpdateRowsParams>() == 48);

/// `update_rows`, transcribed: the position read from the cursor in memory at run time; a
/// row landing outside `[0, capacity)` is skipped.
fn emulate_update_rows(call: &KernelCall, r: &dyn DeviceMemory) -> Result<(), String> {
    let p = &params::<UpdateRowsParams>(call)?;
    let es = p.elem_bytes as usize;
    let mut w = [0u8; 4];
    r.read(p.cursor + 8 * u64::from(p.slot), &mut w)?;
    let pos = i64::from(i32::from_ne_bytes(w));
    let mut e = [0u8; 8];
    for t in 0..p.outer * p.rows * p.inner {
        let i = t % p.inner;
        let row = (t / p.inner) % p.rows;
        let o = t / (p.inner * p.rows);
        let at = pos + i64::from(row);
        if at < 0 || at >= i64::from(p.capacity) {
            continue;
        }
        let dst = (i64::from(o) * i64::from(p.capacity) + at) * i64::from(p.inner) + i64::from(i);
        r.read(p.src + u64::from(t) * es as u64, &mut e[..es])?;
        r.write(p.dst + dst as u64 * es as u64, &e[..es])?;
    }
    Ok(())
}

/// No ONNX operator lowers to an in-place update (see the module documentation).
pub fn lower<L: Lower>(_l: &mut L, _node: &TypedNode) -> Option<Result<(), LowerError>>
where
    L::Step: From<UpdateRows>,
{
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::graph::{Graph, Io, Step, StepKind};
    use crate::native::ir::BufferKind;
    use crate::native::pipeline::Compiled;
    use crate::native::plan::memory::MemoryPlan;

    const OUTER: usize = 2;
    const CAPACITY: usize = 8;
    const ROWS: usize = 3;
    const INNER: usize = 4;

    /// A cache `[2, 8, 4]` (network output 0), new rows `[2, 3, 4]` (input 0) and a cursor of
    /// two slots (input 1), one `update_rows` on slot 1.
    fn graph(dtype: ElemType) -> Graph {
        let mut g = Graph::default();
        let src = g.add_packed("k_new", dtype, &[OUTER, ROWS, INNER], BufferKind::Input(0));
        let cursor = g.add_packed("cursor", ElemType::I32, &[2, 2], BufferKind::Input(1));
        let dst = g.add_packed("k_cache", dtype, &[OUTER, CAPACITY, INNER], BufferKind::Output(0));
        g.inputs = vec![
            Io {
                name: "k_new".into(),
                tensor: src,
            },
            Io {
                name: "cursor".into(),
                tensor: cursor,
            },
        ];
        g.outputs = vec![Io {
            name: "k_cache".into(),
            tensor: dst,
        }];
        g.steps.push(Step {
            node: "append".into(),
            kind: StepKind::UpdateRows(UpdateRows {
                dst,
                src,
                cursor,
                slot: 1,
                outer: OUTER,
                capacity: CAPACITY,
                rows: ROWS,
                inner: INNER,
            }),
        });
        g.validate().expect("valid graph");
        g
    }

    fn cursor(position: i32) -> Vec<u8> {
        // Slot 0 holds a position that must not be used.
        [5, 6, position, position.wrapping_add(ROWS as i32)]
            .iter()
            .flat_map(|w: &i32| w.to_ne_bytes())
            .collect()
    }

    /// The cache as it must be after one run from the executors' poisoned (all-ones) output:
    /// rows `position..position + 3` of each outer index hold the new rows, every other byte
    /// is untouched. Written from the definition, element by element.
    fn expected(src: &[u8], es: usize, position: usize) -> Vec<u8> {
        let mut want = vec![0xffu8; OUTER * CAPACITY * INNER * es];
        for o in 0..OUTER {
            for r in 0..ROWS {
                if position + r >= CAPACITY {
                    continue;
                }
                for i in 0..INNER {
                    let s = ((o * ROWS + r) * INNER + i) * es;
                    let d = ((o * CAPACITY + position + r) * INNER + i) * es;
                    want[d..d + es].copy_from_slice(&src[s..s + es]);
                }
            }
        }
        want
    }

    /// The host reference and the kernel's emulation write exactly the rows at the position
    /// the cursor holds, at every position of the cache (one compiled graph, the position
    /// only in the cursor's bytes), in f32 and f16.
    #[test]
    fn rows_land_at_the_cursor_position_and_nothing_else_changes() {
        for dtype in [ElemType::F32, ElemType::F16] {
            let es = dtype.size();
            let g = graph(dtype);
            let memory = MemoryPlan::new(&g).expect("memory plan");
            let c = Compiled { graph: g, memory };
            let src: Vec<u8> = (0..OUTER * ROWS * INNER * es)
                .map(|i| (i * 7 + 1) as u8)
                .collect();
            for position in 0..=CAPACITY - ROWS {
                let cur = cursor(position as i32);
                let want = expected(&src, es, position);
                let host = crate::native::exec::reference::run(&c.graph, &c.memory, &[&src, &cur])
                    .expect("reference run");
                assert_eq!(host[0], want, "{dtype} reference at position {position}");
                let emulated =
                    crate::native::exec::emulate::run(&c, &[&src, &cur]).expect("emulated run");
                assert_eq!(emulated[0], want, "{dtype} kernel at position {position}");
            }
        }
    }

    /// A cursor that would put rows past the cache: the kernel writes the rows that fit and
    /// nothing outside the cache (negative too); the reference refuses with the position.
    #[test]
    fn a_position_past_the_capacity_writes_nothing_outside_the_cache() {
        let es = 4;
        let g = graph(ElemType::F32);
        let memory = MemoryPlan::new(&g).expect("memory plan");
        let c = Compiled { graph: g, memory };
        let src: Vec<u8> = (0..OUTER * ROWS * INNER * es).map(|i| i as u8).collect();
        for position in [CAPACITY - 1, CAPACITY, CAPACITY + 100] {
            let cur = cursor(position as i32);
            let out = crate::native::exec::emulate::run(&c, &[&src, &cur]).expect("emulated run");
            assert_eq!(out[0], expected(&src, es, position), "position {position}");
            let e = crate::native::exec::reference::run(&c.graph, &c.memory, &[&src, &cur])
                .expect_err("past the capacity");
            assert!(e.contains(&format!("position {position}")), "{e}");
        }
        for position in [-(ROWS as i32), i32::MIN] {
            let cur = cursor(position);
            let out = crate::native::exec::emulate::run(&c, &[&src, &cur]).expect("emulated run");
            assert_eq!(out[0], vec![0xff; OUTER * CAPACITY * INNER * es], "{position}");
        }
    }

    /// In fp16 the new rows are computed in fp16 while the cache (a network output) stays
    /// fp32: the precision pass casts the rows into the cache's type before the update, and
    /// the result equals the fp32 graph's (values exact in fp16).
    #[test]
    fn fp16_rows_are_cast_into_the_cache_type() {
        // Input -> copy into an activation -> update_rows from that activation.
        let mut g = graph(ElemType::F32);
        let StepKind::UpdateRows(mut u) = g.steps[0].kind.clone() else {
            unreachable!()
        };
        let input = u.src;
        let act = g.add_packed("rows", ElemType::F32, &[OUTER, ROWS, INNER], BufferKind::Activation);
        u.src = act;
        g.steps = vec![
            Step {
                node: "rows".into(),
                kind: StepKind::Copy(crate::native::ops::copy::Copy { src: input, dst: act }),
            },
            Step {
                node: "append".into(),
                kind: StepKind::UpdateRows(u),
            },
        ];
        let src: Vec<u8> = (0..OUTER * ROWS * INNER)
            .flat_map(|i| (i as f32 - 7.0).to_ne_bytes())
            .collect();
        let cur = cursor(4);
        let run = |g: &Graph| {
            let memory = MemoryPlan::new(g).expect("memory plan");
            crate::native::exec::reference::run(g, &memory, &[&src, &cur]).expect("run")
        };
        let fp32 = run(&g);
        assert_eq!(fp32[0], expected(&src, 4, 4));
        crate::native::passes::precision::apply(&mut g, crate::backend::Precision::Fp16)
            .expect("fp16");
        assert_eq!(g.tensor(act).dtype, ElemType::F16);
        let names: Vec<&str> = g.steps.iter().map(|s| s.node.as_str()).collect();
        assert_eq!(names, ["rows", "append.cast", "append"]);
        assert_eq!(run(&g), fp32);
    }

    /// The checks name what does not fit: another element type for the rows, a cursor
    /// that is not `i32`, sizes that disagree with the parameters.
    #[test]
    fn mismatched_operands_are_refused_by_the_check() {
        let g = graph(ElemType::F32);
        let StepKind::UpdateRows(ok) = g.steps[0].kind.clone() else {
            unreachable!()
        };
        let mut bad = g.clone();
        let f16 = bad.add_packed("f16", ElemType::F16, &[OUTER, ROWS, INNER], BufferKind::Activation);
        bad.steps[0].kind = StepKind::UpdateRows(UpdateRows { src: f16, ..ok.clone() });
        assert!(bad.validate().unwrap_err().contains("update_rows of f16 rows into a f32 cache"));
        let mut bad = g.clone();
        bad.steps[0].kind = StepKind::UpdateRows(UpdateRows { rows: 2, ..ok.clone() });
        assert!(bad.validate().unwrap_err().contains("rows 2"));
        let mut bad = g.clone();
        bad.steps[0].kind = StepKind::UpdateRows(UpdateRows { slot: 2, ..ok });
        assert!(bad.validate().unwrap_err().contains("slot 2"));
    }
}
