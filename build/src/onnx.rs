//! ONNX inspection for the build step: declared inputs and outputs, metadata, producer,
//! opset, read from the protobuf with tract-onnx's own types (no graph evaluation).

use std::collections::HashSet;

use tether_bundle::{DType, IoMode, Layout, TensorDesc};
use tract_onnx::pb;
use tract_onnx::prelude::Framework;

/// The bytes are not an ONNX model tract can parse.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot parse the ONNX model: {0}")]
pub struct OnnxError(pub String);

/// What the build step needs from an ONNX file, read from its protobuf.
#[derive(Clone, Debug, Default)]
pub struct OnnxInfo {
    /// Graph inputs (initialisers excluded) as declared: dynamic dimensions are
    /// [`tether_bundle::DYNAMIC_DIM`].
    pub inputs: Vec<TensorDesc>,
    /// Graph outputs as declared.
    pub outputs: Vec<TensorDesc>,
    /// `metadata_props` key/value pairs, in file order.
    pub metadata: Vec<(String, String)>,
    /// `producer_name` and `producer_version`, joined by a space.
    pub producer: String,
    /// Highest default-domain opset imported.
    pub opset: i64,
}

impl OnnxInfo {
    /// The metadata value stored under `key`.
    pub fn metadata(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// ONNX `TensorProto.DataType` code to our dtype (ONNX spec, onnx.proto).
fn onnx_dtype(code: i32) -> DType {
    match code {
        1 => DType::F32,
        2 => DType::U8,
        3 => DType::I8,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::Bool,
        10 => DType::F16,
        16 => DType::BF16,
        other => DType::Unknown(u8::try_from(other).unwrap_or(u8::MAX)),
    }
}

fn value_info_desc(v: &pb::ValueInfoProto, mode: IoMode) -> TensorDesc {
    let mut dtype = DType::Unknown(0);
    let mut dims = Vec::new();
    if let Some(pb::type_proto::Value::TensorType(t)) =
        v.r#type.as_ref().and_then(|t| t.value.as_ref())
    {
        dtype = onnx_dtype(t.elem_type);
        if let Some(shape) = &t.shape {
            for d in &shape.dim {
                let v = match d.value {
                    Some(pb::tensor_shape_proto::dimension::Value::DimValue(n)) if n > 0 => n,
                    _ => tether_bundle::DYNAMIC_DIM,
                };
                dims.push(v);
            }
        }
    }
    let layout = if dims.len() == 4 && dims[1] == 3 {
        Layout::Nchw
    } else {
        Layout::Unspecified
    };
    TensorDesc {
        name: v.name.clone(),
        mode,
        dtype,
        layout,
        dims,
    }
}

/// Read the declared I/O tensors and metadata of an ONNX model.
///
/// # Errors
/// [`OnnxError`] when the bytes are not a parsable ONNX protobuf.
pub fn inspect_onnx(onnx: &[u8]) -> Result<OnnxInfo, OnnxError> {
    let proto = tract_onnx::onnx()
        .proto_model_for_read(&mut &onnx[..])
        .map_err(|e| OnnxError(format!("{e:#}")))?;
    let graph = proto
        .graph
        .as_ref()
        .ok_or_else(|| OnnxError("the model has no graph".into()))?;
    let initialisers: HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    let inputs = graph
        .input
        .iter()
        .filter(|v| !initialisers.contains(v.name.as_str()))
        .map(|v| value_info_desc(v, IoMode::Input))
        .collect();
    let outputs = graph
        .output
        .iter()
        .map(|v| value_info_desc(v, IoMode::Output))
        .collect();
    let metadata = proto
        .metadata_props
        .iter()
        .map(|e| (e.key.clone(), e.value.clone()))
        .collect();
    let opset = proto
        .opset_import
        .iter()
        .filter(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .max()
        .unwrap_or(0);
    Ok(OnnxInfo {
        inputs,
        outputs,
        metadata,
        producer: format!("{} {}", proto.producer_name, proto.producer_version)
            .trim()
            .to_string(),
        opset,
    })
}
