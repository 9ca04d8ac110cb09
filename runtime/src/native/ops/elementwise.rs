//! Element-wise steps: `output[i] = program(inputs[0][i], inputs[1][i], ...)`, one fused
//! program ([`Program`], the operator table of `crate::native::ir::program`) per step.

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::cast::Cast;
use tract_onnx::tract_core::ops::element_wise::ElementWiseOp;
use tract_onnx::tract_core::ops::logic::Iff;

use crate::native::front::elem_type;
use crate::native::ir::error::LowerError;
use crate::native::ir::program::{EwOp, Program};
use crate::native::ir::{BufferKind, ElemType, TensorId, Views};
use crate::native::ops::op::{Lower, Op, unsupported};

/// `output[i] = program(inputs[0][i], inputs[1][i], ...)` over the output's shape; every
/// input is a view with the output's shape (broadcasts are stride-0 views).
#[derive(Clone, Debug, PartialEq)]
pub struct Elementwise {
    /// Input views.
    pub inputs: Vec<TensorId>,
    /// Output view.
    pub output: TensorId,
    /// The per-element program.
    pub program: Program,
}

impl Op for Elementwise {
    const NAME: &'static str = "elementwise";

    fn reads(&self) -> Vec<TensorId> {
        self.inputs.clone()
    }

    fn writes(&self) -> TensorId {
        self.output
    }

    fn operands_mut(&mut self, f: &mut dyn FnMut(&mut TensorId, bool)) {
        for t in &mut self.inputs {
            f(t, false);
        }
        f(&mut self.output, true);
    }

    fn check(&self, g: &dyn Views) -> Result<(), String> {
        let out = g.tensor(self.output);
        for &t in &self.inputs {
            if g.tensor(t).shape != out.shape {
                return Err(format!(
                    "input `{}` {:?} vs output {:?}",
                    g.tensor(t).name,
                    g.tensor(t).shape,
                    out.shape
                ));
            }
        }
        self.program.validate(self.inputs.len())
    }
}

/// Lower `node` when it is an element-wise tract operator: a binary operator (`Add`, `Mul`,
/// comparisons, logic, ...), a unary one (`Sigmoid`, `Exp`, GELU, ...), a `Cast` or an `Iff`
/// (ONNX `Where`); `None` for anything else.
pub fn lower<L: Lower>(l: &mut L, node: &TypedNode) -> Option<Result<(), LowerError>>
where
    L::Step: From<Elementwise>,
{
    if let Some(op) = node.op_as::<TypedBinOp>() {
        return Some(binary(l, node, op));
    }
    if let Some(op) = node.op_as::<ElementWiseOp>() {
        return Some(unary(l, node, op));
    }
    if let Some(op) = node.op_as::<Cast>() {
        return Some(cast(l, node, op));
    }
    if node.op_as::<Iff>().is_some() {
        return Some(select(l, node));
    }
    None
}

fn binary<L: Lower>(
    l: &mut L, node: &TypedNode, op: &TypedBinOp) -> Result<(), LowerError>
where
    L::Step: From<Elementwise>,
{
    if op.1.is_some() {
        return Err(unsupported(node, "quantised output type"));
    }
    let (ew, swap, logic) = match op.0.name() {
        "Add" => (EwOp::Add, false, false),
        "Sub" => (EwOp::Sub, false, false),
        "SubF" => (EwOp::Sub, true, false),
        "Mul" => (EwOp::Mul, false, false),
        "Div" => (EwOp::Div, false, false),
        "Min" => (EwOp::Min, false, false),
        "Max" => (EwOp::Max, false, false),
        "Pow" => (EwOp::Pow, false, false),
        "Eq" => (EwOp::Eq, false, false),
        "NE" => (EwOp::Ne, false, false),
        "LT" => (EwOp::Lt, false, false),
        "GT" => (EwOp::Gt, false, false),
        "LTE" => (EwOp::Le, false, false),
        "GTE" => (EwOp::Ge, false, false),
        "And" => (EwOp::And, false, true),
        "Or" => (EwOp::Or, false, true),
        "Xor" => (EwOp::Xor, false, true),
        other => return Err(unsupported(node, format!("binary operator {other}"))),
    };
    let (out_shape, out_dt) = l.output_fact(node, 0)?;
    let (ia, ib) = if swap { (1, 0) } else { (0, 1) };
    let mut operands = Vec::new();
    let mut imms = Vec::new();
    for slot in [ia, ib] {
        let outlet = node.inputs[slot];
        if let Some(v) = l.scalar_const(outlet) {
            imms.push(Some(v));
            continue;
        }
        imms.push(None);
        let t = l.outlet(outlet)?;
        let dt = l.tensor(t).dtype;
        let ok = if logic {
            dt == ElemType::Bool
        } else {
            dt.is_float()
        };
        if !ok {
            return Err(unsupported(
                node,
                format!(
                    "{} on {dt} operands (the engine computes in fp32)",
                    op.0.name()
                ),
            ));
        }
        operands.push(l.broadcast_to(t, &out_shape, node)?);
    }
    let program = match (imms[0], imms[1]) {
        (None, None) => Program::binary(ew),
        (None, Some(v)) => Program::binary_imm(ew, v, false),
        (Some(v), None) => Program::binary_imm(ew, v, true),
        (Some(_), Some(_)) => {
            return Err(unsupported(node, "binary operator over two constants"));
        }
    };
    let y = l.add_packed(&node.name, out_dt, &out_shape, BufferKind::Activation);
    l.set_output(node, 0, y);
    l.push(
        node,
        L::Step::from(Elementwise {
            inputs: operands,
            output: y,
            program,
        }),
    );
    Ok(())
}

fn unary<L: Lower>(
    l: &mut L, node: &TypedNode, op: &ElementWiseOp) -> Result<(), LowerError>
where
    L::Step: From<Elementwise>,
{
    use tract_onnx::tract_core::ops::nn::LeakyRelu;
    if op.1.is_some() {
        return Err(unsupported(node, "quantised output type"));
    }
    let name = op.0.name();
    let mut imm = 0.0f32;
    let ew = match name.as_str() {
        "Neg" => EwOp::Neg,
        "Abs" => EwOp::Abs,
        "Exp" => EwOp::Exp,
        "Ln" => EwOp::Ln,
        "Sqrt" => EwOp::Sqrt,
        "Rsqrt" => EwOp::Rsqrt,
        "Recip" => EwOp::Recip,
        "Sigmoid" => EwOp::Sigmoid,
        "Tanh" => EwOp::Tanh,
        "Erf" => EwOp::Erf,
        "Silu" => EwOp::Silu,
        "Floor" => EwOp::Floor,
        "Ceil" => EwOp::Ceil,
        "Round" => EwOp::Round,
        "RoundHalfToEven" => EwOp::RoundEven,
        "Sin" => EwOp::Sin,
        "Cos" => EwOp::Cos,
        "Square" => EwOp::Square,
        "Sign" => EwOp::Sign,
        "HardSwish" => EwOp::HardSwish,
        "GeluExact" => EwOp::GeluExact,
        "IsNan" => EwOp::IsNan,
        "IsInf" => {
            use tract_onnx::tract_core::ops::math::IsInf;
            let f =
                op.0.downcast_ref::<IsInf>()
                    .ok_or_else(|| unsupported(node, "IsInf of an unknown type"))?;
            imm = (f.detect_positive as u8 | (f.detect_negative as u8) << 1) as f32;
            EwOp::IsInf
        }
        "GeluApproximate" => {
            use tract_onnx::tract_core::ops::nn::gelu_approximate::GeluApproximate;
            let g =
                op.0.downcast_ref::<GeluApproximate>()
                    .ok_or_else(|| unsupported(node, "GeluApproximate of an unknown type"))?;
            imm = if g.fast_impl { 2.0 } else { 3.0 };
            EwOp::GeluTanh
        }
        "Not" => EwOp::Not,
        "LeakyRelu" => {
            let l =
                op.0.downcast_ref::<LeakyRelu>()
                    .ok_or_else(|| unsupported(node, "LeakyRelu of an unknown type"))?;
            imm = l.alpha;
            EwOp::LeakyRelu
        }
        other => return Err(unsupported(node, format!("element-wise operator {other}"))),
    };
    let x = l.outlet(node.inputs[0])?;
    let dt = l.tensor(x).dtype;
    let ok = if ew == EwOp::Not {
        dt == ElemType::Bool
    } else {
        dt.is_float()
    };
    if !ok {
        return Err(unsupported(node, format!("{name} on {dt}")));
    }
    let y = l.new_output(node, 0)?;
    l.push(
        node,
        L::Step::from(Elementwise {
            inputs: vec![x],
            output: y,
            program: Program::unary(ew, imm),
        }),
    );
    Ok(())
}

fn cast<L: Lower>(
    l: &mut L, node: &TypedNode, op: &Cast) -> Result<(), LowerError>
where
    L::Step: From<Elementwise>,
{
    let x = l.outlet(node.inputs[0])?;
    let from = l.tensor(x).dtype;
    let to =
        elem_type(op.to).ok_or_else(|| unsupported(node, format!("cast to {:?}", op.to)))?;
    if from == to {
        l.set_output(node, 0, x);
        return Ok(());
    }
    // fp32 carries every value of these conversions exactly (or rounds it the way
    // Rust's `as` does); integer-to-integer casts wrap in tract and would saturate here.
    let exact =
        to.is_float() || from.is_float() || from == ElemType::Bool || to == ElemType::Bool;
    if !exact {
        return Err(unsupported(node, format!("cast {from} -> {to}")));
    }
    let y = l.new_output(node, 0)?;
    l.push(
        node,
        L::Step::from(Elementwise {
            inputs: vec![x],
            output: y,
            program: Program::identity(),
        }),
    );
    Ok(())
}

fn select<L: Lower>(
    l: &mut L, node: &TypedNode) -> Result<(), LowerError>
where
    L::Step: From<Elementwise>,
{
    let (shape, _) = l.output_fact(node, 0)?;
    let mut ins = Vec::new();
    for slot in 0..3 {
        let t = l.outlet(node.inputs[slot])?;
        let dt = l.tensor(t).dtype;
        if slot > 0 && !dt.is_float() {
            return Err(unsupported(node, format!("select over {dt} values")));
        }
        ins.push(l.broadcast_to(t, &shape, node)?);
    }
    let y = l.new_output(node, 0)?;
    l.push(
        node,
        L::Step::from(Elementwise {
            inputs: ins,
            output: y,
            program: Program::select(),
        }),
    );
    Ok(())
}
