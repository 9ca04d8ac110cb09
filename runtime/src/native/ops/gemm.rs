//! Mapping an IR matrix product ([`Gemm`], row-major semantics through arbitrary strides)
//! onto one strided-batched call of column-major BLAS (`cublasGemmStridedBatchedEx`).
//!
//! BLAS computes `C'[r, c] = sum_l op(A')[r, l] * op(B')[l, c]` with every matrix stored
//! column-major: element `(r, c)` of a stored matrix at `r + c * ld`. The IR's `c[i, j]` is
//! stored at `i * sc_m + j * sc_n`:
//! * when `sc_m == 1`, `C' = c` (rows `i`, `ldc = sc_n`), `A'` provides `a[i, l]` and `B'`
//!   provides `b[l, j]`;
//! * when `sc_n == 1`, `C' = c^T` (rows `j`, `ldc = sc_m`), `A'` provides `b^T` and `B'`
//!   provides `a^T` (`c^T = b^T a^T`).
//!
//! An operand whose row stride is 1 is stored "N" (`ld` = its column stride), one whose
//! column stride is 1 is stored "T" (`ld` = its row stride). A dimension of size 1 may have
//! any stride. Pure logic, no CUDA: the front end asks [`blas_gemm`] whether a product fits
//! (and packs its operands when not), the GPU executor makes the call.

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::einsum::EinSum;

use crate::native::ir::error::LowerError;
use crate::native::ir::Tensor as View;
use crate::native::ir::{BufferKind, TensorId, Views};
use crate::native::ops::copy::Copy;
pub use crate::native::ops::op::BlasGemm;
use crate::native::ops::op::{
    Call, HostMemory, Kernel, Library, Lower, Op, ParamError, Uses, one_float_type, unsupported,
};

/// A batched matrix product `c[b, m, n] = sum_k a[b, m, k] * b[b, k, n]`, every operand
/// addressed through its own strides (in elements, from its tensor's offset). A batch stride
/// of 0 broadcasts an operand over the batch.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemm {
    /// Left operand.
    pub a: TensorId,
    /// Right operand.
    pub b: TensorId,
    /// Result.
    pub c: TensorId,
    /// Batch count.
    pub batch: usize,
    /// Rows of `c`.
    pub m: usize,
    /// Columns of `c`.
    pub n: usize,
    /// Contracted length.
    pub k: usize,
    /// `a` strides: batch, m, k.
    pub sa: [isize; 3],
    /// `b` strides: batch, k, n.
    pub sb: [isize; 3],
    /// `c` strides: batch, m, n.
    pub sc: [isize; 3],
}

impl Op for Gemm {
    const NAME: &'static str = "gemm";

    fn reads(&self) -> Vec<TensorId> {
        vec![self.a, self.b]
    }

    fn writes(&self) -> TensorId {
        self.c
    }

    fn operands_mut(&mut self, f: &mut dyn FnMut(&mut TensorId, bool)) {
        f(&mut self.a, false);
        f(&mut self.b, false);
        f(&mut self.c, true);
    }

    fn check(&self, g: &dyn Views) -> Result<(), String> {
        one_float_type(g, Self::NAME, &self.reads(), self.c)
    }

    const USES: Uses = Uses::Cublas;

    const KERNELS: &'static [Kernel] = &[];

    /// Through the operands' own strides, fp32 accumulation in `k` order; the whole result
    /// computed before it is stored through `c`'s strides.
    fn reference(&self, mem: &mut dyn HostMemory) -> Result<(), String> {
        let g = self;
        let mut c = vec![0f32; g.batch * g.m * g.n];
        for bt in 0..g.batch {
            for i in 0..g.m {
                for j in 0..g.n {
                    let mut acc = 0f32;
                    for k in 0..g.k {
                        let ia =
                            bt as isize * g.sa[0] + i as isize * g.sa[1] + k as isize * g.sa[2];
                        let ib =
                            bt as isize * g.sb[0] + k as isize * g.sb[1] + j as isize * g.sb[2];
                        acc += mem.load(g.a, ia) * mem.load(g.b, ib);
                    }
                    c[(bt * g.m + i) * g.n + j] = acc;
                }
            }
        }
        for bt in 0..g.batch {
            for i in 0..g.m {
                for j in 0..g.n {
                    let off = bt as isize * g.sc[0] + i as isize * g.sc[1] + j as isize * g.sc[2];
                    mem.store(g.c, off, c[(bt * g.m + i) * g.n + j]);
                }
            }
        }
        Ok(())
    }

    fn call(
        &self,
        g: &dyn Views,
        node: &str,
        addr: &dyn Fn(TensorId) -> u64,
    ) -> Result<Call, ParamError> {
        let p = blas_gemm(self).ok_or_else(|| ParamError {
            step: node.into(),
            detail: "a matrix product that fits no BLAS call".into(),
        })?;
        let (a, b) = if p.swapped {
            (addr(self.b), addr(self.a))
        } else {
            (addr(self.a), addr(self.b))
        };
        Ok(Call::Library(Library::Gemm {
            p,
            dtype: g.tensor(self.c).dtype,
            a,
            b,
            c: addr(self.c),
        }))
    }
}

/// One stored operand: (`trans`, `ld`) for a matrix providing `(rows, cols)` with strides
/// (`s_rows`, `s_cols`), or `None` when neither stride is 1.
fn operand(rows: usize, cols: usize, s_rows: isize, s_cols: isize) -> Option<(bool, i64)> {
    let s_rows = if rows == 1 { 1 } else { s_rows };
    let s_cols = if cols == 1 { 1 } else { s_cols };
    if s_rows == 1 && (cols == 1 || s_cols >= rows as isize) {
        // Column-major rows x cols: ld >= rows.
        let ld = if cols == 1 {
            rows.max(1) as isize
        } else {
            s_cols
        };
        Some((false, ld as i64))
    } else if s_cols == 1 && (rows == 1 || s_rows >= cols as isize) {
        // Stored as the transpose: column-major cols x rows, ld >= cols.
        let ld = if rows == 1 {
            cols.max(1) as isize
        } else {
            s_rows
        };
        Some((true, ld as i64))
    } else {
        None
    }
}

/// The BLAS call computing `g`, or `None` when the strides do not fit one (then the front
/// end packs the operands).
pub fn blas_gemm(g: &Gemm) -> Option<BlasGemm> {
    let (m, n, k) = (g.m, g.n, g.k);
    let [sb_a, sa_m, sa_k] = g.sa;
    let [sb_b, sb_k, sb_n] = g.sb;
    let [sb_c, sc_m, sc_n] = g.sc;
    let fits = |v: i64| i32::try_from(v).ok();
    let plan = |swapped: bool| -> Option<BlasGemm> {
        let (rows, cols, ldc) = if swapped {
            (n, m, if m == 1 { n.max(1) as i64 } else { sc_m as i64 })
        } else {
            (m, n, if n == 1 { m.max(1) as i64 } else { sc_n as i64 })
        };
        if ldc < rows as i64 {
            return None;
        }
        // First operand provides (rows, l), second (l, cols).
        let (first, second) = if swapped {
            // b^T: (j, l) from b[l, j]; a^T: (l, i) from a[i, l].
            (operand(n, k, sb_n, sb_k)?, operand(k, m, sa_k, sa_m)?)
        } else {
            (operand(m, k, sa_m, sa_k)?, operand(k, n, sb_k, sb_n)?)
        };
        let (stride_a, stride_b) = if swapped { (sb_b, sb_a) } else { (sb_a, sb_b) };
        let batch_stride = |s: isize| if g.batch == 1 { 0 } else { s as i64 };
        Some(BlasGemm {
            swapped,
            trans_a: first.0,
            trans_b: second.0,
            m: fits(rows as i64)?,
            n: fits(cols as i64)?,
            k: fits(k as i64)?,
            lda: fits(first.1)?,
            ldb: fits(second.1)?,
            ldc: fits(ldc)?,
            stride_a: batch_stride(stride_a),
            stride_b: batch_stride(stride_b),
            stride_c: batch_stride(sb_c),
            batch: fits(g.batch as i64)?,
        })
    };
    if (m == 1 || sc_m == 1)
        && let Some(p) = plan(false)
    {
        return Some(p);
    }
    if n == 1 || sc_n == 1 {
        return plan(true);
    }
    None
}

/// Column-major reference of a [`BlasGemm`] over flat buffers (for tests): what cuBLAS
/// computes, `C' = op(A') op(B')` per batch.
pub fn reference_blas(p: &BlasGemm, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    for bt in 0..p.batch as usize {
        let (ao, bo, co) = (
            bt as i64 * p.stride_a,
            bt as i64 * p.stride_b,
            bt as i64 * p.stride_c,
        );
        for r in 0..m {
            for col in 0..n {
                let mut acc = 0f32;
                for l in 0..k {
                    let av = if p.trans_a {
                        a[(ao + l as i64 + r as i64 * p.lda as i64) as usize]
                    } else {
                        a[(ao + r as i64 + l as i64 * p.lda as i64) as usize]
                    };
                    let bv = if p.trans_b {
                        b[(bo + col as i64 + l as i64 * p.ldb as i64) as usize]
                    } else {
                        b[(bo + l as i64 + col as i64 * p.ldb as i64) as usize]
                    };
                    acc += av * bv;
                }
                c[(co + r as i64 + col as i64 * p.ldc as i64) as usize] = acc;
            }
        }
    }
}


/// Lower `node` when it is tract's `EinSum` over two operands (ONNX `MatMul`, `Gemm`, and
/// the 1x1 convolutions tract's declutter turns into products): one strided-batched BLAS
/// call, its operands packed by copies only where their strides fit none; `None` for
/// anything else.
pub fn lower<L: Lower>(l: &mut L, node: &TypedNode) -> Option<Result<(), LowerError>>
where
    L::Step: From<Gemm> + From<Copy>,
{
    let op = node.op_as::<EinSum>()?;
    Some(einsum(l, node, op))
}

fn einsum<L: Lower>(
    l: &mut L, node: &TypedNode, op: &EinSum) -> Result<(), LowerError>
where
    L::Step: From<Gemm> + From<Copy>,
{
    if op.q_params.is_some() {
        return Err(unsupported(node, "quantised matrix product"));
    }
    if node.inputs.len() != 2 {
        return Err(unsupported(
            node,
            format!("einsum over {} inputs", node.inputs.len()),
        ));
    }
    if !matches!(op.operating_dt, DatumType::F32 | DatumType::F16) {
        return Err(unsupported(
            node,
            format!("einsum in {:?}", op.operating_dt),
        ));
    }
    let a = l.float_input(node, 0)?;
    let b = l.float_input(node, 1)?;
    let y = l.new_output(node, 0)?;
    let (at, bt, ct) = (
        l.tensor(a).clone(),
        l.tensor(b).clone(),
        l.tensor(y).clone(),
    );
    // Classify every axis: batch (a, b, c), m (a, c), n (b, c), k (a, b).
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Cat {
        Batch,
        M,
        N,
        K,
    }
    struct Ax {
        cat: Cat,
        pa: Option<usize>,
        pb: Option<usize>,
        pc: Option<usize>,
    }
    let mut axes = Vec::new();
    for axis in op.axes.iter_all_axes() {
        let one = |v: &[usize]| -> Result<Option<usize>, LowerError> {
            match v.len() {
                0 => Ok(None),
                1 => Ok(Some(v[0])),
                _ => Err(unsupported(
                    node,
                    format!("axis {} repeated in an operand", axis.repr),
                )),
            }
        };
        let pa = one(&axis.inputs[0])?;
        let pb = one(&axis.inputs[1])?;
        let pc = one(&axis.outputs[0])?;
        let dim = |t: &View, p: Option<usize>| p.map(|p| t.shape[p]).unwrap_or(1);
        let (da, db, dc) = (dim(&at, pa), dim(&bt, pb), dim(&ct, pc));
        // Dimensions of 1 take part in nothing.
        let pa = pa.filter(|_| da != 1);
        let pb = pb.filter(|_| db != 1);
        let pc = pc.filter(|_| dc != 1);
        let cat = match (pa.is_some(), pb.is_some(), pc.is_some()) {
            (_, _, false) if pa.is_none() && pb.is_none() => continue,
            (true, true, true) => Cat::Batch,
            (true, false, true) => Cat::M,
            (false, true, true) => Cat::N,
            (true, true, false) => {
                if da != db {
                    return Err(unsupported(
                        node,
                        format!("contracted axis {} of {da} vs {db}", axis.repr),
                    ));
                }
                Cat::K
            }
            (false, false, true) => {
                return Err(unsupported(
                    node,
                    format!("output axis {} broadcast from nothing", axis.repr),
                ));
            }
            _ => {
                return Err(unsupported(
                    node,
                    format!("axis {} summed within one operand", axis.repr),
                ));
            }
        };
        axes.push(Ax { cat, pa, pb, pc });
    }
    // Merged (size, stride) of one category in one operand, in the output's order (k: in
    // a's order); None when the axes do not form one run of memory.
    let order = |cat: Cat| -> Vec<usize> {
        let mut ix: Vec<usize> = (0..axes.len()).filter(|&i| axes[i].cat == cat).collect();
        ix.sort_by_key(|&i| {
            if cat == Cat::K {
                axes[i].pa
            } else {
                axes[i].pc
            }
        });
        ix
    };
    let merged = |t: &View,
                  pos: &dyn Fn(&Ax) -> Option<usize>,
                  ix: &[usize],
                  size: &dyn Fn(&Ax) -> usize|
     -> Option<(usize, isize)> {
        let mut dims: Vec<(usize, isize)> = Vec::new();
        for &i in ix {
            let d = size(&axes[i]);
            let s = pos(&axes[i]).map(|p| t.strides[p]).unwrap_or(0);
            dims.push((d, s));
        }
        let total: usize = dims.iter().map(|d| d.0).product();
        let dims: Vec<(usize, isize)> = dims.into_iter().filter(|d| d.0 != 1).collect();
        if dims.is_empty() {
            return Some((1, 0));
        }
        if !dims.windows(2).all(|w| w[0].1 == w[1].1 * w[1].0 as isize) {
            return None;
        }
        Some((total, dims.last().expect("non-empty").1))
    };
    let size_c = |x: &Ax| x.pc.map(|p| ct.shape[p]).unwrap_or(1);
    let size_k = |x: &Ax| x.pa.map(|p| at.shape[p]).unwrap_or(1);
    let (ob, om, on, ok) = (
        order(Cat::Batch),
        order(Cat::M),
        order(Cat::N),
        order(Cat::K),
    );
    let pa = |x: &Ax| x.pa;
    let pb = |x: &Ax| x.pb;
    let pc = |x: &Ax| x.pc;
    let batch: usize = ob.iter().map(|&i| size_c(&axes[i])).product();
    let m: usize = om.iter().map(|&i| size_c(&axes[i])).product();
    let n: usize = on.iter().map(|&i| size_c(&axes[i])).product();
    let k: usize = ok.iter().map(|&i| size_k(&axes[i])).product();
    // Batch axes of a and b may be broadcast (size 1 in the operand): stride 0.
    let size_in = |t: &View, p: Option<usize>| p.map(|p| t.shape[p]).unwrap_or(1);
    for &i in &ob {
        let x = &axes[i];
        for (t, p) in [(&at, x.pa), (&bt, x.pb)] {
            if size_in(t, p) != size_c(x) {
                return Err(unsupported(node, "batch axis broadcast inside an operand"));
            }
        }
    }
    let plan_a = (|| {
        let (_, sb) = merged(&at, &pa, &ob, &size_c)?;
        let (_, sm) = merged(&at, &pa, &om, &size_c)?;
        let (_, sk) = merged(&at, &pa, &ok, &size_k)?;
        Some([sb, sm, sk])
    })();
    let plan_b = (|| {
        let (_, sb) = merged(&bt, &pb, &ob, &size_c)?;
        let (_, sk) = merged(&bt, &pb, &ok, &size_k)?;
        let (_, sn) = merged(&bt, &pb, &on, &size_c)?;
        Some([sb, sk, sn])
    })();
    let plan_c = (|| {
        let (_, sb) = merged(&ct, &pc, &ob, &size_c)?;
        let (_, sm) = merged(&ct, &pc, &om, &size_c)?;
        let (_, sn) = merged(&ct, &pc, &on, &size_c)?;
        Some([sb, sm, sn])
    })();
    // Which of a, b, c go through a packed copy: none if the strides fit one BLAS call,
    // else the fewest that make it fit (packed operands always do).
    let fits = |sa: Option<[isize; 3]>, sb: Option<[isize; 3]>, sc: Option<[isize; 3]>| {
        let packed_a = [(m * k) as isize, k as isize, 1];
        let packed_b = [(k * n) as isize, n as isize, 1];
        let packed_c = [(m * n) as isize, n as isize, 1];
        blas_gemm(&Gemm {
            a,
            b,
            c: y,
            batch,
            m,
            n,
            k,
            sa: sa.unwrap_or(packed_a),
            sb: sb.unwrap_or(packed_b),
            sc: sc.unwrap_or(packed_c),
        })
        .is_some()
    };
    let choices: [(bool, bool, bool); 8] = [
        (false, false, false),
        (true, false, false),
        (false, true, false),
        (false, false, true),
        (true, true, false),
        (true, false, true),
        (false, true, true),
        (true, true, true),
    ];
    let (pack_a, pack_b, pack_c) = choices
        .into_iter()
        .find(|&(xa, xb, xc)| {
            (xa || plan_a.is_some())
                && (xb || plan_b.is_some())
                && (xc || plan_c.is_some())
                && fits(
                    if xa { None } else { plan_a },
                    if xb { None } else { plan_b },
                    if xc { None } else { plan_c },
                )
        })
        .expect("packed operands always fit one BLAS call");
    let plan_a = if pack_a { None } else { plan_a };
    let plan_b = if pack_b { None } else { plan_b };
    let plan_c = if pack_c { None } else { plan_c };
    // Operands that do not fit are packed in [batch, m, k] / [batch, k, n] order first;
    // a result that does not fit goes through a packed [batch, m, n] tensor.
    let pack = |l: &mut L,
                t: TensorId,
                tt: &View,
                groups: [&[usize]; 3],
                pos: &dyn Fn(&Ax) -> Option<usize>,
                sizes: [&dyn Fn(&Ax) -> usize; 3]|
     -> (TensorId, [isize; 3]) {
        let mut shape = Vec::new();
        let mut strides = Vec::new();
        for (g, size) in groups.iter().zip(sizes) {
            for &i in g.iter() {
                shape.push(size(&axes[i]));
                strides.push(pos(&axes[i]).map(|p| tt.strides[p]).unwrap_or(0));
            }
        }
        let v = l.view(
            t,
            format!("{}.gemm_order", tt.name),
            shape.clone(),
            tt.offset,
            strides,
        );
        let p = l.packed(v, &node.name);
        let d: Vec<usize> = groups
            .iter()
            .zip(sizes)
            .map(|(g, size)| g.iter().map(|&i| size(&axes[i])).product())
            .collect();
        (p, [(d[1] * d[2]) as isize, d[2] as isize, 1])
    };
    let (a, sa) = match plan_a {
        Some(s) => (a, s),
        None => pack(l,
            a,
            &at,
            [&ob, &om, &ok],
            &pa,
            [&size_c, &size_c, &size_k],
        ),
    };
    let (b, sb) = match plan_b {
        Some(s) => (b, s),
        None => pack(l,
            b,
            &bt,
            [&ob, &ok, &on],
            &pb,
            [&size_c, &size_k, &size_c],
        ),
    };
    match plan_c {
        Some(sc) => {
            l.push(
                node,
                L::Step::from(Gemm {
                    a,
                    b,
                    c: y,
                    batch,
                    m,
                    n,
                    k,
                    sa,
                    sb,
                    sc,
                }),
            );
        }
        None => {
            let tmp = l.add_packed(
                format!("{}.gemm", node.name),
                ct.dtype,
                &[batch, m, n],
                BufferKind::Activation,
            );
            l.push(
                node,
                L::Step::from(Gemm {
                    a,
                    b,
                    c: tmp,
                    batch,
                    m,
                    n,
                    k,
                    sa,
                    sb,
                    sc: [(m * n) as isize, n as isize, 1],
                }),
            );
            // View tmp with the output's shape: each output axis gets its stride inside
            // its category's block.
            let mut strides = vec![0isize; ct.shape.len()];
            for (g, base) in [(&ob, (m * n) as isize), (&om, n as isize), (&on, 1isize)] {
                let mut acc = base;
                for &i in g.iter().rev() {
                    if let Some(p) = axes[i].pc {
                        strides[p] = acc;
                    }
                    acc *= size_c(&axes[i]) as isize;
                }
            }
            let v = l.view(
                tmp,
                format!("{}.gemm_view", node.name),
                ct.shape.clone(),
                0,
                strides,
            );
            l.push(node, L::Step::from(Copy { src: v, dst: y }));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::ir::TensorId;

    fn gemm(
        batch: usize,
        m: usize,
        n: usize,
        k: usize,
        sa: [isize; 3],
        sb: [isize; 3],
        sc: [isize; 3],
    ) -> Gemm {
        Gemm {
            a: TensorId(0),
            b: TensorId(1),
            c: TensorId(2),
            batch,
            m,
            n,
            k,
            sa,
            sb,
            sc,
        }
    }

    /// The IR semantics, directly.
    fn ir_reference(g: &Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
        for bt in 0..g.batch {
            for i in 0..g.m {
                for j in 0..g.n {
                    let mut acc = 0f32;
                    for l in 0..g.k {
                        let ia =
                            bt as isize * g.sa[0] + i as isize * g.sa[1] + l as isize * g.sa[2];
                        let ib =
                            bt as isize * g.sb[0] + l as isize * g.sb[1] + j as isize * g.sb[2];
                        acc += a[ia as usize] * b[ib as usize];
                    }
                    let ic = bt as isize * g.sc[0] + i as isize * g.sc[1] + j as isize * g.sc[2];
                    c[ic as usize] = acc;
                }
            }
        }
    }

    fn check(g: Gemm) {
        let p = blas_gemm(&g).expect("fits");
        let a: Vec<f32> = (0..4096)
            .map(|i| ((i * 37 % 101) as f32) * 0.01 - 0.5)
            .collect();
        let b: Vec<f32> = (0..4096)
            .map(|i| ((i * 53 % 97) as f32) * 0.02 - 1.0)
            .collect();
        let mut want = vec![f32::NAN; 4096];
        ir_reference(&g, &a, &b, &mut want);
        let mut got = vec![f32::NAN; 4096];
        if p.swapped {
            reference_blas(&p, &b, &a, &mut got);
        } else {
            reference_blas(&p, &a, &b, &mut got);
        }
        for (i, (x, y)) in got.iter().zip(&want).enumerate() {
            assert!(
                x == y || (x.is_nan() && y.is_nan()),
                "{g:?} -> {p:?}: c[{i}] {x} vs {y}"
            );
        }
    }

    #[test]
    fn one_by_one_convolution_is_one_gemm() {
        // c[o, hw] = sum_c w[o, c] x[c, hw] as the front end lowers it: m = hw (x rows, stride
        // 1), k = c (stride hw), n = o (w: k stride 1, n stride c), c: m stride 1, n stride hw.
        let (hw, ci, co) = (20, 6, 5);
        check(gemm(
            1,
            hw,
            co,
            ci,
            [0, 1, hw as isize],
            [0, 1, ci as isize],
            [0, 1, hw as isize],
        ));
    }

    #[test]
    fn row_major_batched_matmul_maps_through_the_transpose() {
        // Packed [b, m, k] x [b, k, n] -> [b, m, n]: c has n stride 1.
        let (bt, m, n, k) = (3, 4, 5, 6);
        check(gemm(
            bt,
            m,
            n,
            k,
            [(m * k) as isize, k as isize, 1],
            [(k * n) as isize, n as isize, 1],
            [(m * n) as isize, n as isize, 1],
        ));
        // Broadcast right operand (batch stride 0) and a transposed left operand.
        check(gemm(
            bt,
            m,
            n,
            k,
            [(m * k) as isize, 1, m as isize],
            [0, n as isize, 1],
            [(m * n) as isize, n as isize, 1],
        ));
    }

    #[test]
    fn vectors_and_degenerate_dimensions() {
        // DFL: m = 8400-like, n = 1, k = 16.
        check(gemm(1, 40, 1, 16, [0, 1, 40], [0, 1, 1], [0, 1, 40]));
        // m = 1.
        check(gemm(1, 1, 7, 9, [0, 9, 1], [0, 7, 1], [0, 7, 1]));
    }

    #[test]
    fn strides_without_a_unit_dimension_do_not_fit() {
        assert!(blas_gemm(&gemm(1, 4, 4, 4, [0, 8, 2], [0, 4, 1], [0, 4, 1])).is_none());
    }
}
