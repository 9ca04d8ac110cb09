//! The small ONNX model `tether doctor --self-test` generates in memory (no download):
//! input `x` f32 `[1, 3, 32, 32]`, `y = Relu(Conv3x3(x, W, B, pads 1)) + x`, weights, bias
//! and input from integer formulas ([`weight`], [`bias`], [`input_value`]) chosen so that
//! every product and partial sum is a multiple of 1/64 below 16 in magnitude: exact in f32
//! *and* f16, so the result does not depend on summation order; [`reference_output`]
//! evaluates the formula directly (the reference every engine is compared with).

use prost::Message;
use tract_onnx::pb;

/// Input (and output) shape of the generated model.
pub const SHAPE: [usize; 4] = [1, 3, 32, 32];
/// Channels of the generated model (in = out).
const C: usize = SHAPE[1];
const H: usize = SHAPE[2];
const W: usize = SHAPE[3];
/// Name of the model's input.
pub const INPUT_NAME: &str = "x";
/// Name of the model's output.
pub const OUTPUT_NAME: &str = "y";
/// Relative tolerance against the CPU for an FP16 plan.
pub const TOL_FP16: f32 = 1e-2;
/// Relative tolerance against the CPU for an FP32 plan.
pub const TOL_FP32: f32 = 1e-4;

/// Input element `x[0, c, h, w]`: `((7c + 3h + 5w) mod 17) / 8 - 1`.
pub fn input_value(c: usize, h: usize, w: usize) -> f32 {
    ((c * 7 + h * 3 + w * 5) % 17) as f32 / 8.0 - 1.0
}

/// Convolution weight `W[o, i, kh, kw]`: `((5o + 3i + 2kh + kw) mod 7) / 8 - 3/8`.
pub fn weight(o: usize, i: usize, kh: usize, kw: usize) -> f32 {
    ((o * 5 + i * 3 + kh * 2 + kw) % 7) as f32 / 8.0 - 0.375
}

/// Convolution bias `B[o]`: `(o - 1) / 4`.
pub fn bias(o: usize) -> f32 {
    (o as f32 - 1.0) / 4.0
}

/// The whole input tensor, NCHW.
pub fn input() -> Vec<f32> {
    let mut v = Vec::with_capacity(C * H * W);
    for c in 0..C {
        for h in 0..H {
            for w in 0..W {
                v.push(input_value(c, h, w));
            }
        }
    }
    v
}

/// `Relu(Conv3x3(x) + B) + x` evaluated directly (zero padding 1, stride 1).
pub fn reference_output(x: &[f32]) -> Vec<f32> {
    let at = |c: usize, h: isize, w: isize| -> f32 {
        if h < 0 || w < 0 || h >= H as isize || w >= W as isize {
            0.0
        } else {
            x[(c * H + h as usize) * W + w as usize]
        }
    };
    let mut y = Vec::with_capacity(C * H * W);
    for o in 0..C {
        for h in 0..H {
            for w in 0..W {
                let mut s = bias(o);
                for i in 0..C {
                    for kh in 0..3 {
                        for kw in 0..3 {
                            s += weight(o, i, kh, kw)
                                * at(
                                    i,
                                    h as isize + kh as isize - 1,
                                    w as isize + kw as isize - 1,
                                );
                        }
                    }
                }
                y.push(s.max(0.0) + x[(o * H + h) * W + w]);
            }
        }
    }
    y
}

/// Sum of all elements, in f64 (exact for this model's values).
pub fn checksum(y: &[f32]) -> f64 {
    y.iter().map(|&v| f64::from(v)).sum()
}

fn float_tensor(name: &str, dims: &[usize], data: Vec<f32>) -> pb::TensorProto {
    pb::TensorProto {
        name: name.into(),
        dims: dims.iter().map(|&d| d as i64).collect(),
        data_type: pb::tensor_proto::DataType::Float as i32,
        float_data: data,
        ..Default::default()
    }
}

fn value_info(name: &str, dims: &[usize]) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::{Dimension, dimension};
    pb::ValueInfoProto {
        name: name.into(),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: pb::tensor_proto::DataType::Float as i32,
                shape: Some(pb::TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            value: Some(dimension::Value::DimValue(d as i64)),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn ints(name: &str, v: &[i64]) -> pb::AttributeProto {
    pb::AttributeProto {
        name: name.into(),
        r#type: pb::attribute_proto::AttributeType::Ints as i32,
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn node(
    op: &str,
    inputs: &[&str],
    output: &str,
    attribute: Vec<pb::AttributeProto>,
) -> pb::NodeProto {
    pb::NodeProto {
        name: format!("{op}_{output}"),
        op_type: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        attribute,
        ..Default::default()
    }
}

/// The self-test model as ONNX protobuf bytes (IR 8, opset 13):
/// `y = Add(Relu(Conv(x, W, B, kernel 3x3, pads 1)), x)`.
pub fn generate_onnx() -> Vec<u8> {
    let mut wdata = Vec::with_capacity(C * C * 9);
    for o in 0..C {
        for i in 0..C {
            for kh in 0..3 {
                for kw in 0..3 {
                    wdata.push(weight(o, i, kh, kw));
                }
            }
        }
    }
    let graph = pb::GraphProto {
        name: "tether_selftest".into(),
        node: vec![
            node(
                "Conv",
                &[INPUT_NAME, "W", "B"],
                "conv",
                vec![ints("kernel_shape", &[3, 3]), ints("pads", &[1, 1, 1, 1])],
            ),
            node("Relu", &["conv"], "relu", vec![]),
            node("Add", &["relu", INPUT_NAME], OUTPUT_NAME, vec![]),
        ],
        initializer: vec![
            float_tensor("W", &[C, C, 3, 3], wdata),
            float_tensor("B", &[C], (0..C).map(bias).collect()),
        ],
        input: vec![value_info(INPUT_NAME, &SHAPE)],
        output: vec![value_info(OUTPUT_NAME, &SHAPE)],
        ..Default::default()
    };
    pb::ModelProto {
        ir_version: 8,
        opset_import: vec![pb::OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        producer_name: "tether doctor --self-test".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_onnx_declares_its_shapes() {
        let info = crate::inspect_onnx(&generate_onnx()).expect("tract parses the model");
        assert_eq!(info.inputs.len(), 1);
        assert_eq!(info.outputs.len(), 1);
        assert_eq!(info.inputs[0].name, INPUT_NAME);
        assert_eq!(info.outputs[0].name, OUTPUT_NAME);
        assert_eq!(info.inputs[0].dims, vec![1, 3, 32, 32]);
        assert_eq!(info.outputs[0].dims, vec![1, 3, 32, 32]);
    }

    #[test]
    fn formulas_give_the_values_worked_out_by_hand() {
        // x[0,0,0,0] = 0/8 - 1; x[0,1,2,3] = ((7+6+15) mod 17)/8 - 1 = 11/8 - 1.
        assert_eq!(input_value(0, 0, 0), -1.0);
        assert_eq!(input_value(1, 2, 3), 0.375);
        // W[0,0,0,0] = 0/8 - 3/8; W[1,2,1,1] = ((5+6+2+1) mod 7)/8 - 3/8 = -3/8.
        assert_eq!(weight(0, 0, 0, 0), -0.375);
        assert_eq!(weight(1, 2, 1, 1), -0.375);
        assert_eq!(bias(0), -0.25);
        assert_eq!(bias(2), 0.25);
    }

    /// `y[0, o, 0, 0]` from the formulas alone: at the top-left corner only the kernel taps
    /// kh, kw in {1, 2} see the image (the rest is padding).
    fn corner_by_hand(o: usize) -> f32 {
        let mut s = bias(o);
        for i in 0..3 {
            for kh in 1..3 {
                for kw in 1..3 {
                    s += weight(o, i, kh, kw) * input_value(i, kh - 1, kw - 1);
                }
            }
        }
        s.max(0.0) + input_value(o, 0, 0)
    }

    #[test]
    fn reference_matches_values_computed_by_hand() {
        let y = reference_output(&input());
        assert_eq!(y.len(), 3 * 32 * 32);
        // Channel 0: the conv sum at the corner is -1.171875, Relu clips it to 0, plus
        // x[0,0,0,0] = -1: -1.
        assert_eq!(corner_by_hand(0), -1.0);
        assert_eq!(y[0], -1.0);
        // Channel 1: the conv sum is 0.203125, Relu keeps it, plus x[0,1,0,0] = -0.125.
        assert_eq!(corner_by_hand(1), 0.078125);
        assert_eq!(y[32 * 32], 0.078125);
        // The exact sum of all 3072 outputs (also checked by tests/cli_selftest.rs).
        assert_eq!(checksum(&y), 1630.109375);
    }
}
