//! Element-wise programs: the per-element computation of a fused chain of element-wise
//! operators, as a small expression list evaluated in fp32 for every output element.
//!
//! One generic kernel interprets these programs on the GPU (`ew_program` in
//! `runtime/kernels/native.cu`); [`Program::eval`] is the host reference with the same
//! formula for every operator. Inputs are loaded and converted to fp32 (f16 exactly, integers
//! rounded to nearest like Rust's `as f32`), the result is converted to the output's element
//! type when stored ([`store_f32`]). Programs with integer results or integer operands are
//! built by the front end only where fp32 is exact for them (casts, comparisons of small
//! integers); arbitrary integer arithmetic is refused there.
//!
//! The operator codes are shared with the kernel source (`enum ew_op`): change both together.

use std::fmt;

/// Most nodes in one program (the kernel's register file).
pub const MAX_NODES: usize = 32;
/// Most inputs of one element-wise step (the kernel's parameter struct).
pub const MAX_INPUTS: usize = 8;

/// An element-wise operator. Unary operators read `args[0]`; binary ones `args[0]` and
/// `args[1]`; [`EwOp::Select`] all three. Comparisons and logic produce 0.0 or 1.0; logic
/// treats any non-zero value as true.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EwOp {
    /// `a + b`
    Add = 1,
    /// `a - b`
    Sub = 2,
    /// `a * b`
    Mul = 3,
    /// `a / b`
    Div = 4,
    /// `min(a, b)` (IEEE `fminf`: a NaN operand loses)
    Min = 5,
    /// `max(a, b)` (IEEE `fmaxf`)
    Max = 6,
    /// `powf(a, b)`
    Pow = 7,
    /// `-a`
    Neg = 10,
    /// `|a|`
    Abs = 11,
    /// `exp(a)`
    Exp = 12,
    /// `ln(a)`
    Ln = 13,
    /// `sqrt(a)`
    Sqrt = 14,
    /// `1 / sqrt(a)`
    Rsqrt = 15,
    /// `1 / a`
    Recip = 16,
    /// `1 / (1 + exp(-a))`
    Sigmoid = 17,
    /// `tanh(a)`
    Tanh = 18,
    /// `erf(a)`
    Erf = 19,
    /// `a * sigmoid(a)` (SiLU, swish)
    Silu = 20,
    /// `floor(a)`
    Floor = 21,
    /// `ceil(a)`
    Ceil = 22,
    /// Round half away from zero (`roundf`).
    Round = 23,
    /// Round half to even (`rintf`).
    RoundEven = 24,
    /// `sin(a)`
    Sin = 25,
    /// `cos(a)`
    Cos = 26,
    /// `a * a`
    Square = 27,
    /// -1, 0 or 1 (0 for NaN).
    Sign = 28,
    /// `a >= 0 ? a : alpha * a`, alpha in `imm`.
    LeakyRelu = 30,
    /// `a * clamp(a / 6 + 0.5, 0, 1)`
    HardSwish = 31,
    /// `(a * 0.5) * (erf(a / sqrt(2)) + 1)` (GELU, exact)
    GeluExact = 32,
    /// `0.5 * a * (1 + tanh(sqrt(2 / pi) * (a + 0.044715 * a^imm)))` (GELU, tanh form; imm
    /// is the power, 3 canonical or 2)
    GeluTanh = 33,
    /// `a == b`
    Eq = 40,
    /// `a != b`
    Ne = 41,
    /// `a < b`
    Lt = 42,
    /// `a <= b`
    Le = 43,
    /// `a > b`
    Gt = 44,
    /// `a >= b`
    Ge = 45,
    /// `a && b`
    And = 46,
    /// `a || b`
    Or = 47,
    /// `a != b` as booleans
    Xor = 48,
    /// `!a`
    Not = 49,
    /// `a ? b : c`
    Select = 50,
    /// `a` is NaN.
    IsNan = 51,
    /// `a` is +inf (imm bit 0 set) or -inf (imm bit 1 set).
    IsInf = 52,
}

impl EwOp {
    /// The operator with code `code` (the kernels' node `op` field).
    pub fn from_code(code: u8) -> Option<EwOp> {
        use EwOp::*;
        [
            Add, Sub, Mul, Div, Min, Max, Pow, Neg, Abs, Exp, Ln, Sqrt, Rsqrt, Recip, Sigmoid,
            Tanh, Erf, Silu, Floor, Ceil, Round, RoundEven, Sin, Cos, Square, Sign, LeakyRelu,
            HardSwish, GeluExact, GeluTanh, Eq, Ne, Lt, Le, Gt, Ge, And, Or, Xor, Not, Select,
            IsNan, IsInf,
        ]
        .into_iter()
        .find(|o| *o as u8 == code)
    }

    /// Number of operands.
    pub fn arity(self) -> usize {
        use EwOp::*;
        match self {
            Add | Sub | Mul | Div | Min | Max | Pow | Eq | Ne | Lt | Le | Gt | Ge | And | Or
            | Xor => 2,
            Select => 3,
            _ => 1,
        }
    }
}

/// One node of a program.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Expr {
    /// The element of input `i`, converted to fp32.
    Input(usize),
    /// A constant.
    Imm(f32),
    /// An operator over earlier nodes; `imm` is the operator's parameter (LeakyRelu alpha).
    Op {
        /// Operator.
        op: EwOp,
        /// Operand node indices (unused ones are 0).
        args: [usize; 3],
        /// Parameter.
        imm: f32,
    },
}

/// An element-wise program: nodes in evaluation order, each referring only to earlier
/// nodes; the last node is the result.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Program {
    /// Nodes.
    pub nodes: Vec<Expr>,
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, n) in self.nodes.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            match n {
                Expr::Input(k) => write!(f, "%{i}=in{k}")?,
                Expr::Imm(v) => write!(f, "%{i}={v}")?,
                Expr::Op { op, args, imm } => {
                    write!(f, "%{i}={op:?}(")?;
                    for (j, a) in args.iter().take(op.arity()).enumerate() {
                        if j > 0 {
                            f.write_str(",")?;
                        }
                        write!(f, "%{a}")?;
                    }
                    if *op == EwOp::LeakyRelu {
                        write!(f, ",{imm}")?;
                    }
                    f.write_str(")")?;
                }
            }
        }
        Ok(())
    }
}

impl Program {
    /// `in0` (a copy with conversion: a cast).
    pub fn identity() -> Self {
        Program {
            nodes: vec![Expr::Input(0)],
        }
    }

    /// `op(in0)`.
    pub fn unary(op: EwOp, imm: f32) -> Self {
        Program {
            nodes: vec![
                Expr::Input(0),
                Expr::Op {
                    op,
                    args: [0, 0, 0],
                    imm,
                },
            ],
        }
    }

    /// `op(in0, in1)`.
    pub fn binary(op: EwOp) -> Self {
        Program {
            nodes: vec![
                Expr::Input(0),
                Expr::Input(1),
                Expr::Op {
                    op,
                    args: [0, 1, 0],
                    imm: 0.0,
                },
            ],
        }
    }

    /// `op(in0, constant)` or `op(constant, in0)`.
    pub fn binary_imm(op: EwOp, constant: f32, constant_first: bool) -> Self {
        let (a, b) = if constant_first { (1, 0) } else { (0, 1) };
        Program {
            nodes: vec![
                Expr::Input(0),
                Expr::Imm(constant),
                Expr::Op {
                    op,
                    args: [a, b, 0],
                    imm: 0.0,
                },
            ],
        }
    }

    /// `in0 ? in1 : in2`.
    pub fn select() -> Self {
        Program {
            nodes: vec![
                Expr::Input(0),
                Expr::Input(1),
                Expr::Input(2),
                Expr::Op {
                    op: EwOp::Select,
                    args: [0, 1, 2],
                    imm: 0.0,
                },
            ],
        }
    }

    /// True when the program is `in0` (a plain copy or cast).
    pub fn is_identity(&self) -> bool {
        matches!(self.nodes.last(), Some(Expr::Input(0))) && self.nodes.len() == 1
    }

    /// Check that every node refers to earlier nodes and existing inputs, within the kernel
    /// limits.
    ///
    /// # Errors
    /// The violation.
    pub fn validate(&self, inputs: usize) -> Result<(), String> {
        if self.nodes.is_empty() || self.nodes.len() > MAX_NODES {
            return Err(format!(
                "program of {} nodes (1..={MAX_NODES})",
                self.nodes.len()
            ));
        }
        if inputs > MAX_INPUTS {
            return Err(format!("{inputs} inputs (at most {MAX_INPUTS})"));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            match *n {
                Expr::Input(k) if k >= inputs => {
                    return Err(format!("node {i} reads input {k} of {inputs}"));
                }
                Expr::Op { op, args, .. } if args.iter().take(op.arity()).any(|&a| a >= i) => {
                    return Err(format!("node {i} ({op:?}) reads a later node {args:?}"));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Evaluate for one element (the host reference of the kernel).
    pub fn eval(&self, inputs: &[f32]) -> f32 {
        let mut r = [0f32; MAX_NODES];
        for (i, n) in self.nodes.iter().enumerate() {
            r[i] = match *n {
                Expr::Input(k) => inputs[k],
                Expr::Imm(v) => v,
                Expr::Op { op, args, imm } => apply(op, r[args[0]], r[args[1]], r[args[2]], imm),
            };
        }
        r[self.nodes.len() - 1]
    }

    /// Substitute `producer` for input `slot` of `self`: the result reads `self`'s inputs
    /// followed by `producer`'s (input `slot` itself is no longer read). Use
    /// [`Program::simplify`] afterwards to drop and merge inputs.
    pub fn inline(&self, slot: usize, producer: &Program, self_inputs: usize) -> Program {
        let mut nodes = Vec::with_capacity(self.nodes.len() + producer.nodes.len());
        for n in &producer.nodes {
            nodes.push(match *n {
                Expr::Input(k) => Expr::Input(self_inputs + k),
                other => other,
            });
        }
        let shift = producer.nodes.len();
        let result = shift - 1;
        // Map of self's node indices to new indices.
        let mut map = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            match *n {
                Expr::Input(k) if k == slot => map.push(result),
                Expr::Op { op, args, imm } => {
                    let a = [map[args[0]], map[args[1]], map[args[2]]];
                    nodes.push(Expr::Op { op, args: a, imm });
                    map.push(nodes.len() - 1);
                }
                other => {
                    nodes.push(other);
                    map.push(nodes.len() - 1);
                }
            }
        }
        // The result must stay last.
        let last = *map.last().expect("a program has nodes");
        if last != nodes.len() - 1 {
            push_copy(&mut nodes, last);
        }
        Program { nodes }
    }

    /// Merge inputs that read the same tensor (`same[i] == same[j]`), drop unread inputs
    /// and dead nodes. Returns the simplified program and, for each of its inputs, the index
    /// of the original input it reads.
    pub fn simplify<T: PartialEq + Copy>(&self, inputs: &[T]) -> (Program, Vec<T>) {
        // Live nodes, backwards from the result.
        let n = self.nodes.len();
        let mut live = vec![false; n];
        live[n - 1] = true;
        for i in (0..n).rev() {
            if !live[i] {
                continue;
            }
            if let Expr::Op { op, args, .. } = self.nodes[i] {
                for &a in args.iter().take(op.arity()) {
                    live[a] = true;
                }
            }
        }
        let mut new_inputs: Vec<T> = Vec::new();
        let mut nodes = Vec::new();
        let mut map = vec![usize::MAX; n];
        // One node per distinct input tensor.
        let mut input_node: Vec<(T, usize)> = Vec::new();
        for i in 0..n {
            if !live[i] {
                continue;
            }
            match self.nodes[i] {
                Expr::Input(k) => {
                    let t = inputs[k];
                    if let Some(&(_, node)) = input_node.iter().find(|(u, _)| *u == t) {
                        map[i] = node;
                    } else {
                        let slot = new_inputs.len();
                        new_inputs.push(t);
                        nodes.push(Expr::Input(slot));
                        map[i] = nodes.len() - 1;
                        input_node.push((t, map[i]));
                    }
                }
                Expr::Imm(v) => {
                    nodes.push(Expr::Imm(v));
                    map[i] = nodes.len() - 1;
                }
                Expr::Op { op, args, imm } => {
                    let mut a = [0usize; 3];
                    for j in 0..op.arity() {
                        a[j] = map[args[j]];
                    }
                    nodes.push(Expr::Op { op, args: a, imm });
                    map[i] = nodes.len() - 1;
                }
            }
        }
        // If the result is an input node merged into an earlier one, it may not be last.
        let result = map[n - 1];
        if result != nodes.len() - 1 {
            push_copy(&mut nodes, result);
        }
        (Program { nodes }, new_inputs)
    }
}

/// Append `nodes[of] * 1.0` (exact for every value, signed zeros and NaN included) so that
/// the program's result is its last node.
fn push_copy(nodes: &mut Vec<Expr>, of: usize) {
    nodes.push(Expr::Imm(1.0));
    let one = nodes.len() - 1;
    nodes.push(Expr::Op {
        op: EwOp::Mul,
        args: [of, one, 0],
        imm: 0.0,
    });
}

fn truth(v: f32) -> bool {
    v != 0.0
}

fn b2f(b: bool) -> f32 {
    if b { 1.0 } else { 0.0 }
}

/// One operator in fp32 (the reference for the kernel's `apply`).
pub fn apply(op: EwOp, a: f32, b: f32, c: f32, imm: f32) -> f32 {
    use EwOp::*;
    match op {
        Add => a + b,
        Sub => a - b,
        Mul => a * b,
        Div => a / b,
        Min => a.min(b),
        Max => a.max(b),
        Pow => a.powf(b),
        Neg => -a,
        Abs => a.abs(),
        Exp => a.exp(),
        Ln => a.ln(),
        Sqrt => a.sqrt(),
        Rsqrt => 1.0 / a.sqrt(),
        Recip => 1.0 / a,
        Sigmoid => 1.0 / (1.0 + (-a).exp()),
        Tanh => a.tanh(),
        Erf => erf(a),
        Silu => a * (1.0 / (1.0 + (-a).exp())),
        Floor => a.floor(),
        Ceil => a.ceil(),
        Round => a.round(),
        RoundEven => a.round_ties_even(),
        Sin => a.sin(),
        Cos => a.cos(),
        Square => a * a,
        Sign => {
            if a > 0.0 {
                1.0
            } else if a < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        LeakyRelu => {
            if a >= 0.0 {
                a
            } else {
                imm * a
            }
        }
        HardSwish => a * (a / 6.0 + 0.5).clamp(0.0, 1.0),
        GeluExact => (a * 0.5) * (erf(a * std::f32::consts::FRAC_1_SQRT_2) + 1.0),
        GeluTanh => {
            let c = (2.0 / std::f32::consts::PI).sqrt();
            0.5 * a * (1.0 + (c * (a + 0.044715 * a.powf(imm))).tanh())
        }
        Eq => b2f(a == b),
        Ne => b2f(a != b),
        Lt => b2f(a < b),
        Le => b2f(a <= b),
        Gt => b2f(a > b),
        Ge => b2f(a >= b),
        And => b2f(truth(a) && truth(b)),
        Or => b2f(truth(a) || truth(b)),
        Xor => b2f(truth(a) != truth(b)),
        Not => b2f(!truth(a)),
        Select => {
            if truth(a) {
                b
            } else {
                c
            }
        }
        IsNan => b2f(a.is_nan()),
        IsInf => {
            let bits = imm as u32;
            b2f((a == f32::INFINITY && bits & 1 != 0) || (a == f32::NEG_INFINITY && bits & 2 != 0))
        }
    }
}

/// `erf` in fp32 through f64 (Rust's standard library has none): the continued-fraction
/// free series/complement split of W. J. Cody's rational approximations is overkill for a
/// reference that is compared at 1e-4; this uses the Abramowitz & Stegun 7.1.26 form
/// refined in f64, absolute error below 1.5e-7.
fn erf(x: f32) -> f32 {
    let x = x as f64;
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let y = 1.0 - poly * (-x * x).exp();
    (if x < 0.0 { -y } else { y }) as f32
}

/// Convert an fp32 register to an element of type `dtype` the way the kernel stores it:
/// floats round to nearest, integers truncate toward zero and saturate (NaN gives 0), like
/// Rust's `as` and PTX `cvt.rzi.sat`; booleans are `v != 0`.
pub fn store_f32(v: f32, dtype: crate::native::ir::ElemType, out: &mut [u8]) {
    use crate::native::ir::ElemType::*;
    match dtype {
        F32 => out.copy_from_slice(&v.to_ne_bytes()),
        F16 => out.copy_from_slice(&half::f16::from_f32(v).to_bits().to_ne_bytes()),
        I32 => out.copy_from_slice(&(v as i32).to_ne_bytes()),
        I64 => out.copy_from_slice(&(v as i64).to_ne_bytes()),
        U8 => out[0] = v as u8,
        I8 => out[0] = (v as i8) as u8,
        Bool => out[0] = (v != 0.0) as u8,
    }
}

/// Read an element of type `dtype` as fp32 the way the kernel loads it.
pub fn load_f32(dtype: crate::native::ir::ElemType, bytes: &[u8]) -> f32 {
    use crate::native::ir::ElemType::*;
    match dtype {
        F32 => f32::from_ne_bytes(bytes[..4].try_into().expect("4 bytes")),
        F16 => half::f16::from_bits(u16::from_ne_bytes(bytes[..2].try_into().expect("2 bytes")))
            .to_f32(),
        I32 => i32::from_ne_bytes(bytes[..4].try_into().expect("4 bytes")) as f32,
        I64 => i64::from_ne_bytes(bytes[..8].try_into().expect("8 bytes")) as f32,
        U8 => bytes[0] as f32,
        I8 => bytes[0] as i8 as f32,
        Bool => (bytes[0] != 0) as u8 as f32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_simplify_fuse_bias_and_silu() {
        // consumer: silu(in0); producer: in0 + in1 (conv output + bias).
        let consumer = Program::unary(EwOp::Silu, 0.0);
        let producer = Program::binary(EwOp::Add);
        let fused = consumer.inline(0, &producer, 1);
        // Inputs of the fused program: consumer's [y], then producer's [conv, bias].
        let (p, inputs) = fused.simplify(&["y", "conv", "bias"]);
        assert_eq!(inputs, vec!["conv", "bias"]);
        p.validate(2).unwrap();
        let x: f32 = 0.3 + -1.2;
        let want = x * (1.0 / (1.0 + (-x).exp()));
        assert_eq!(p.eval(&[0.3, -1.2]), want);
    }

    #[test]
    fn simplify_merges_repeated_inputs() {
        // x * sigmoid(x) written as mul(in0, sigmoid(in1)) with in0 and in1 the same tensor.
        let p = Program {
            nodes: vec![
                Expr::Input(0),
                Expr::Input(1),
                Expr::Op {
                    op: EwOp::Sigmoid,
                    args: [1, 0, 0],
                    imm: 0.0,
                },
                Expr::Op {
                    op: EwOp::Mul,
                    args: [0, 2, 0],
                    imm: 0.0,
                },
            ],
        };
        let (s, inputs) = p.simplify(&[7, 7]);
        assert_eq!(inputs, vec![7]);
        assert_eq!(s.nodes.len(), 3);
        assert_eq!(s.eval(&[2.0]), 2.0 * (1.0 / (1.0 + (-2.0f32).exp())));
    }

    #[test]
    fn store_truncates_and_saturates_like_rust_as() {
        let mut b = [0u8; 8];
        store_f32(-2.7, crate::native::ir::ElemType::I64, &mut b);
        assert_eq!(i64::from_ne_bytes(b), -2);
        let mut one = [0u8; 1];
        store_f32(300.0, crate::native::ir::ElemType::U8, &mut one);
        assert_eq!(one[0], 255);
        store_f32(f32::NAN, crate::native::ir::ElemType::U8, &mut one);
        assert_eq!(one[0], 0);
    }

    #[test]
    fn erf_is_accurate() {
        // Reference values of erf from the defining integral (tabulated, A&S table 7.1).
        for (x, want) in [
            (0.5f32, 0.520_499_9f32),
            (1.0, 0.842_700_8),
            (-2.0, -0.995_322_3),
        ] {
            assert!((erf(x) - want).abs() < 2e-7, "erf({x}) = {}", erf(x));
        }
    }
}
