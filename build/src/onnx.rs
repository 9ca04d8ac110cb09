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

/// Parse `onnx` as an ONNX protobuf (no graph analysis).
///
/// # Errors
/// [`OnnxError`] when the bytes are not a parsable ONNX protobuf.
fn read_proto(onnx: &[u8]) -> Result<pb::ModelProto, OnnxError> {
    tract_onnx::onnx()
        .proto_model_for_read(&mut &onnx[..])
        .map_err(|e| OnnxError(format!("{e:#}")))
}

/// Read the declared I/O tensors and metadata of an ONNX model.
///
/// # Errors
/// [`OnnxError`] when the bytes are not a parsable ONNX protobuf.
pub fn inspect_onnx(onnx: &[u8]) -> Result<OnnxInfo, OnnxError> {
    let proto = read_proto(onnx)?;
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

/// The lookup table a token-id input indexes: a `Gather` whose indices are `input` (directly
/// or through `Cast`/`Identity`/`Unsqueeze`/`Reshape`), its data traced back through
/// element-wise dequantisation (`Cast`, `Mul`, `Add`, `Sub`, `Div`, `DequantizeLinear`,
/// `Identity`) to an initialiser or a `Constant`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatherTable {
    /// The `Gather` node's name (its output's name when it has none).
    pub node: String,
    /// The initialiser (or `Constant` output) holding the table.
    pub table: String,
    /// The table's dimensions; `dims[0]` is the number of rows (ids `0..dims[0]`).
    pub dims: Vec<i64>,
}

impl GatherTable {
    /// Rows of the table: the ids the input may hold are `0..rows`.
    pub fn rows(&self) -> Option<u64> {
        self.dims.first().and_then(|&d| u64::try_from(d).ok())
    }
}

/// Every lookup table the graph input `input` indexes ([`GatherTable`]); empty when none is
/// found (e.g. the table is computed by other operators).
///
/// # Errors
/// [`OnnxError`] when the bytes are not a parsable ONNX protobuf.
pub fn gather_tables(onnx: &[u8], input: &str) -> Result<Vec<GatherTable>, OnnxError> {
    let proto = read_proto(onnx)?;
    let graph = proto
        .graph
        .as_ref()
        .ok_or_else(|| OnnxError("the model has no graph".into()))?;
    let producer = |name: &str| {
        graph
            .node
            .iter()
            .find(|n| n.output.iter().any(|o| o == name))
    };
    // The values that carry the ids: the input and what index-preserving ops make of it.
    let mut ids: Vec<&str> = vec![input];
    let mut i = 0;
    while i < ids.len() {
        let cur = ids[i];
        for n in &graph.node {
            let passes = matches!(
                n.op_type.as_str(),
                "Cast" | "Identity" | "Unsqueeze" | "Reshape" | "Squeeze" | "Flatten"
            );
            if passes
                && n.input.first().is_some_and(|x| x == cur)
                && let Some(o) = n.output.first()
                && !ids.contains(&o.as_str())
            {
                ids.push(o.as_str());
            }
        }
        i += 1;
    }
    let mut out = Vec::new();
    for n in &graph.node {
        if n.op_type != "Gather" || !n.input.get(1).is_some_and(|x| ids.contains(&x.as_str())) {
            continue;
        }
        // Follow the data input back to a stored tensor.
        let mut data = n.input[0].as_str();
        let mut found = None;
        for _ in 0..16 {
            if let Some(t) = graph.initializer.iter().find(|t| t.name == data) {
                found = Some((t.name.clone(), t.dims.clone()));
                break;
            }
            let Some(p) = producer(data) else { break };
            if p.op_type == "Constant" {
                if let Some(t) = p.attribute.iter().find_map(|a| a.t.as_ref()) {
                    found = Some((data.to_string(), t.dims.clone()));
                }
                break;
            }
            let elementwise = matches!(
                p.op_type.as_str(),
                "Cast" | "Identity" | "Mul" | "Add" | "Sub" | "Div" | "DequantizeLinear"
            );
            // Of a binary op, follow the operand with the table's rank (not a scalar scale).
            let next = if elementwise {
                p.input
                    .iter()
                    .map(String::as_str)
                    .find(|x| !x.is_empty() && !is_scalar(graph, x))
            } else {
                None
            };
            match next {
                Some(x) => data = x,
                None => break,
            }
        }
        if let Some((table, dims)) = found {
            out.push(GatherTable {
                node: if n.name.is_empty() {
                    n.output.first().cloned().unwrap_or_default()
                } else {
                    n.name.clone()
                },
                table,
                dims,
            });
        }
    }
    Ok(out)
}

/// `name` is an initialiser (or `Constant`) of at most one element.
fn is_scalar(graph: &pb::GraphProto, name: &str) -> bool {
    let small = |dims: &[i64]| dims.iter().product::<i64>() <= 1;
    if let Some(t) = graph.initializer.iter().find(|t| t.name == name) {
        return small(&t.dims);
    }
    graph
        .node
        .iter()
        .find(|n| n.op_type == "Constant" && n.output.iter().any(|o| o == name))
        .and_then(|n| n.attribute.iter().find_map(|a| a.t.as_ref()))
        .is_some_and(|t| small(&t.dims))
}

/// Shape values narrowed to 32-bit integers (`Shape` -> `Cast(to = INT32)`, as
/// paddle2onnx exports a `Reshape` whose target is computed from its input's shape) are
/// widened to `INT64`, for shape inference only: tract carries an `INT64` cast of a shape
/// as a symbolic dimension, but cannot cast a symbolic dimension to `i32`, so with a symbol
/// for the width the `Reshape` target is unknown and typing fails ("shape input is
/// variable"). The values are the same for any shape below 2^31. Follows the shape through
/// `Gather`, `Slice`, `Squeeze` and `Unsqueeze` (their data input) up to the `Shape` node.
/// Returns the number of casts widened.
fn widen_shape_casts(graph: &mut pb::GraphProto) -> usize {
    const INT32: i64 = pb::tensor_proto::DataType::Int32 as i64;
    const INT64: i64 = pb::tensor_proto::DataType::Int64 as i64;
    fn from_shape<'g>(g: &'g pb::GraphProto, mut name: &'g str) -> bool {
        for _ in 0..16 {
            let Some(p) = g.node.iter().find(|n| n.output.iter().any(|o| o == name)) else {
                return false;
            };
            match p.op_type.as_str() {
                "Shape" => return true,
                "Gather" | "Slice" | "Squeeze" | "Unsqueeze" => match p.input.first() {
                    Some(x) => name = x,
                    None => return false,
                },
                _ => return false,
            }
        }
        false
    }
    let widen: Vec<usize> = graph
        .node
        .iter()
        .enumerate()
        .filter(|(_, n)| {
            n.op_type == "Cast"
                && n.attribute.iter().any(|a| a.name == "to" && a.i == INT32)
                && n.input.first().is_some_and(|x| from_shape(graph, x))
        })
        .map(|(i, _)| i)
        .collect();
    for &i in &widen {
        for a in &mut graph.node[i].attribute {
            if a.name == "to" {
                a.i = INT64;
            }
        }
    }
    widen.len()
}

/// The network typed by tract's shape inference with input 0 an f32 tensor of dimensions
/// `dims` (`None`: the symbol `symbol`), after [`widen_shape_casts`]. For reading shapes
/// only; the model that runs is not changed.
fn typed_with_symbol(
    model_bytes: &[u8],
    dims: &[Option<usize>],
    symbol: &str,
) -> Result<(tract_onnx::prelude::TypedModel, tract_onnx::prelude::Symbol), OnnxError> {
    use tract_onnx::prelude::*;
    let err = |e: TractError| OnnxError(format!("{e:#}"));
    let onnx = tract_onnx::onnx();
    let mut proto = read_proto(model_bytes)?;
    if let Some(graph) = proto.graph.as_mut() {
        widen_shape_casts(graph);
    }
    let mut model = onnx.model_for_proto_model(&proto).map_err(err)?;
    let free = model.symbols.sym(symbol);
    let shape: TVec<TDim> = dims
        .iter()
        .map(|d| d.map_or_else(|| free.to_dim(), |v| v.to_dim()))
        .collect();
    model
        .set_input_fact(0, InferenceFact::dt_shape(f32::datum_type(), shape))
        .map_err(err)?;
    Ok((model.into_typed().map_err(err)?, free))
}

/// The size of dimension `axis` of output `output` for every value of one free dimension of
/// input 0 (an f32 input), read from the network's own shape inference (tract's, with the
/// free dimension a symbol): `dims[i]` is `Some(n)` for a fixed dimension and `None` for
/// the free one. The table is what the network emits, not a formula of ours (e.g. the
/// steps a CTC recogniser emits for each input width). The first and last entries are
/// checked against the network typed with that value as a concrete dimension (the shape
/// the runtime's tract CPU backend prepares), unchanged.
///
/// # Errors
/// [`OnnxError`] when the model does not parse or type with the symbol, the dimension
/// does not evaluate to an integer, or the concrete typing disagrees (naming both).
pub fn output_dim_table(
    model_bytes: &[u8],
    dims: &[Option<usize>],
    output: usize,
    axis: usize,
    values: std::ops::RangeInclusive<i64>,
) -> Result<Vec<i64>, OnnxError> {
    use tract_onnx::prelude::*;
    let err = |e: TractError| OnnxError(format!("{e:#}"));
    let (typed, free) = typed_with_symbol(model_bytes, dims, "tether_free_dim")?;
    let fact = typed.output_fact(output).map_err(err)?;
    let dim = fact
        .shape
        .get(axis)
        .cloned()
        .ok_or_else(|| OnnxError(format!("output {output} has no axis {axis}")))?;
    let table: Vec<i64> = values
        .clone()
        .map(|v| {
            dim.eval_to_i64(&SymbolValues::default().with(&free, v))
                .map_err(|e| OnnxError(format!("output {output} axis {axis} is {dim}: {e:#}")))
        })
        .collect::<Result<_, _>>()?;
    // The symbolic table against the unchanged network at a concrete value, at both ends.
    for (v, want) in [
        (*values.start(), table.first()),
        (*values.end(), table.last()),
    ] {
        let Some(&want) = want else { continue };
        let concrete: Vec<usize> = dims
            .iter()
            .map(|d| d.unwrap_or(usize::try_from(v).unwrap_or(0)))
            .collect();
        let mut model = tract_onnx::onnx()
            .model_for_read(&mut &model_bytes[..])
            .map_err(err)?;
        model
            .set_input_fact(
                0,
                InferenceFact::dt_shape(f32::datum_type(), concrete.iter().copied()),
            )
            .map_err(err)?;
        let model = model.into_typed().map_err(err)?;
        let got = model
            .output_fact(output)
            .map_err(err)?
            .shape
            .get(axis)
            .and_then(|d| d.to_i64().ok());
        if got != Some(want) {
            return Err(OnnxError(format!(
                "output {output} axis {axis} at input shape {concrete:?} is {got:?}, the symbolic shape {dim} gives {want}"
            )));
        }
    }
    Ok(table)
}

/// A network rewritten so that padding on the right of its width axis does not change what
/// it computes for the columns before it ([`mask_width_padding`]).
#[derive(Clone, Debug)]
pub struct WidthMasked {
    /// The rewritten model.
    pub onnx: Vec<u8>,
    /// Name of the added input: f32 `[tables.len()]`, entry `k` the valid width of table
    /// `k` at the unpadded input width.
    pub input: String,
    /// Per valid-width table: the widths from `first` on (`values[i]` at input width
    /// `first + i`), read from the network's own shape inference.
    pub tables: Vec<Vec<i64>>,
    /// Input width of `tables[k][0]`.
    pub first: i64,
    /// Sites masked: convolutions and pools that look across columns, global average pools
    /// (averaged over the valid columns), attentions (keys past the valid ones get no weight).
    pub sites: usize,
}

/// Make a network's output for an input padded on the right (its last axis, the width) equal
/// to its output for the unpadded input, column for column: the masking transformers use for
/// padded sequences, carried through a convolutional network. Every op that looks across
/// columns gets its input's columns past the valid width zeroed, which is what its zero
/// padding shows it at the unpadded width (convolutions, pools); global average pools average
/// over the valid columns only; attention softmaxes (scores `Q K^T`, a MatMul with a Transpose
/// of perm `[0, 1, 3, 2]`) give the keys past the valid ones no weight. The valid width at each
/// site is the width that site's input has when the network runs unpadded: its last dimension
/// in the network's own shape inference with the input width a symbol, tabulated for every
/// input width in `widths` (one table per distinct expression), and passed at run time as
/// one f32 input `input_name` of shape `[tables]`.
///
/// `dims` fixes input 0's dimensions but the last (`None`: the width).
///
/// Returns `Ok(None)` when the network has no site to mask, and an error naming the node when
/// it mixes columns in a way this cannot follow (a resize, a recurrent layer, a reduction or
/// a softmax over the width that is not an attention).
///
/// # Errors
/// [`OnnxError`] for an unparsable model, a failed shape inference, or a node it cannot mask.
pub fn mask_width_padding(
    model_bytes: &[u8],
    dims: &[Option<usize>],
    widths: std::ops::RangeInclusive<i64>,
    input_name: &str,
) -> Result<Option<WidthMasked>, OnnxError> {
    use prost::Message as _;
    use tract_onnx::prelude::*;

    // Symbolic shapes of every tensor.
    let (typed, width) = typed_with_symbol(model_bytes, dims, "tether_width")?;
    let shape_of = |name: &str| -> Option<TVec<TDim>> {
        let outlet = typed.find_outlet_label(name)?;
        typed.outlet_fact(outlet).ok().map(|f| f.shape.to_tvec())
    };

    let mut proto = read_proto(model_bytes)?;
    let graph = proto
        .graph
        .as_mut()
        .ok_or_else(|| OnnxError("the model has no graph".into()))?;
    if graph.input.iter().any(|i| i.name == input_name) {
        return Err(OnnxError(format!(
            "the model already has an input `{input_name}`"
        )));
    }
    let sites = mask_sites(graph, &shape_of, &width)?;
    if sites.is_empty() {
        return Ok(None);
    }
    // One table per distinct expression.
    let mut exprs: Vec<TDim> = Vec::new();
    for s in &sites {
        if !exprs.contains(&s.expr) {
            exprs.push(s.expr.clone());
        }
    }
    let mut tables = Vec::with_capacity(exprs.len());
    for e in &exprs {
        let t: Result<Vec<i64>, OnnxError> = widths
            .clone()
            .map(|w| {
                e.eval_to_i64(&SymbolValues::default().with(&width, w))
                    .map_err(|x| OnnxError(format!("width {e}: {x:#}")))
            })
            .collect();
        tables.push(t?);
    }

    insert_masks(graph, &sites, &exprs, input_name);
    Ok(Some(WidthMasked {
        onnx: proto.encode_to_vec(),
        input: input_name.into(),
        tables,
        first: *widths.start(),
        sites: sites.len(),
    }))
}

/// How a masked site treats the columns past the valid width.
#[derive(Clone, Copy, PartialEq)]
enum MaskKind {
    /// Zeroed before an op that looks across columns (a convolution, a pool).
    Zero,
    /// Zeroed before a global average pool, whose result is then scaled to the mean over the
    /// valid columns.
    Mean,
    /// Attention scores: keys past the valid ones get a large negative bias (no weight).
    Keys,
}

/// One place [`mask_width_padding`] masks: node `at`'s first input `tensor`, treated as
/// `kind`, whose last axis is `expr` in the input width.
struct MaskSite {
    at: usize,
    tensor: String,
    kind: MaskKind,
    expr: tract_onnx::prelude::TDim,
}

impl MaskSite {
    fn new(at: usize, tensor: String, kind: MaskKind, expr: tract_onnx::prelude::TDim) -> Self {
        MaskSite {
            at,
            tensor,
            kind,
            expr,
        }
    }
}

/// The sites of `graph` [`mask_width_padding`] masks, in node order, from the symbolic shapes
/// `shape_of` with the input width the symbol `width`; an error naming the node that mixes
/// columns in a way masking cannot follow.
fn mask_sites(
    graph: &pb::GraphProto,
    shape_of: &dyn Fn(&str) -> Option<tract_onnx::prelude::TVec<tract_onnx::prelude::TDim>>,
    width: &tract_onnx::prelude::Symbol,
) -> Result<Vec<MaskSite>, OnnxError> {
    use tract_onnx::prelude::*;
    let depends = |d: &TDim| d.symbols().contains(width);
    let attr_ints = |n: &pb::NodeProto, name: &str| -> Vec<i64> {
        n.attribute
            .iter()
            .find(|a| a.name == name)
            .map(|a| a.ints.clone())
            .unwrap_or_default()
    };
    let attr_int = |n: &pb::NodeProto, name: &str| -> Option<i64> {
        n.attribute.iter().find(|a| a.name == name).map(|a| a.i)
    };
    let producer = |g: &pb::GraphProto, name: &str| -> Option<usize> {
        g.node
            .iter()
            .position(|n| n.output.iter().any(|o| o == name))
    };
    let is_attention = |g: &pb::GraphProto, name: &str| -> bool {
        let mut cur = name.to_string();
        for _ in 0..3 {
            let Some(i) = producer(g, &cur) else {
                return false;
            };
            let n = &g.node[i];
            match n.op_type.as_str() {
                "MatMul" => {
                    return n
                        .input
                        .get(1)
                        .and_then(|k| producer(g, k))
                        .is_some_and(|t| {
                            let t = &g.node[t];
                            t.op_type == "Transpose"
                                && t.attribute
                                    .iter()
                                    .any(|a| a.name == "perm" && a.ints == [0, 1, 3, 2])
                        });
                }
                "Mul" | "Div" | "Add" => match n.input.first() {
                    Some(x) => cur = x.clone(),
                    None => return false,
                },
                _ => return false,
            }
        }
        false
    };

    let mut sites = Vec::new();
    for (i, n) in graph.node.iter().enumerate() {
        let input = n.input.first().cloned().unwrap_or_default();
        let Some(shape) = shape_of(&input) else {
            continue;
        };
        let Some(last) = shape.last().cloned() else {
            continue;
        };
        let along_width = |axis: i64| -> bool {
            let r = shape.len() as i64;
            let a = if axis < 0 { axis + r } else { axis };
            shape.get(a as usize).is_some_and(depends)
        };
        let cannot = |why: &str| {
            Err(OnnxError(format!(
                "node `{}` ({}) {why}; its padding cannot be masked",
                n.name, n.op_type
            )))
        };
        match n.op_type.as_str() {
            "Conv" | "AveragePool" | "MaxPool" if depends(&last) => {
                let k = attr_ints(n, "kernel_shape");
                let s = attr_ints(n, "strides");
                let p = attr_ints(n, "pads");
                let d = attr_ints(n, "dilations");
                let local = n.op_type == "Conv"
                    && k.last().copied().unwrap_or(1) == 1
                    && s.last().copied().unwrap_or(1) == 1
                    && d.last().copied().unwrap_or(1) == 1
                    && p.iter().skip(1).step_by(2).all(|&v| v == 0)
                    && attr_ints(n, "pads").len() <= 4;
                if !local {
                    sites.push(MaskSite::new(i, input, MaskKind::Zero, last));
                }
            }
            "GlobalAveragePool" if depends(&last) => {
                sites.push(MaskSite::new(i, input, MaskKind::Mean, last))
            }
            "Softmax" => {
                let axis = attr_int(n, "axis").unwrap_or(-1);
                if along_width(axis) {
                    if shape.len() == 4 && (axis == -1 || axis == 3) && is_attention(graph, &input)
                    {
                        sites.push(MaskSite::new(i, input, MaskKind::Keys, last));
                    } else {
                        return cannot("normalises over the width");
                    }
                }
            }
            "Resize" | "Upsample" | "ConvTranspose" | "LSTM" | "GRU" | "RNN" | "CumSum"
            | "GlobalMaxPool" | "GlobalLpPool" | "LpPool" | "Pad"
                if shape.iter().any(depends) =>
            {
                return cannot("looks across the width");
            }
            op if op.starts_with("Reduce") || op == "ArgMax" || op == "ArgMin" => {
                let axes = attr_ints(n, "axes");
                let over_width = if axes.is_empty() && n.input.len() < 2 {
                    shape.iter().any(depends)
                } else {
                    axes.iter().any(|&a| along_width(a))
                };
                if over_width {
                    return cannot("reduces over the width");
                }
            }
            _ => {}
        }
    }
    Ok(sites)
}

/// Insert the masks of `sites` (valid widths from row `exprs.iter().position(site.expr)` of
/// the new f32 input `input_name`, shape `[exprs.len()]`) into `graph`, and that input.
fn insert_masks(
    graph: &mut pb::GraphProto,
    sites: &[MaskSite],
    exprs: &[tract_onnx::prelude::TDim],
    input_name: &str,
) {
    // The rewrite.
    let f32_scalar = |name: String, v: f32| pb::TensorProto {
        name,
        dims: vec![],
        data_type: pb::tensor_proto::DataType::Float as i32,
        float_data: vec![v],
        ..Default::default()
    };
    let i64_1d = |name: String, v: i64| pb::TensorProto {
        name,
        dims: vec![1],
        data_type: pb::tensor_proto::DataType::Int64 as i32,
        int64_data: vec![v],
        ..Default::default()
    };
    let int_attr = |name: &str, v: i64| pb::AttributeProto {
        name: name.into(),
        r#type: pb::attribute_proto::AttributeType::Int as i32,
        i: v,
        ..Default::default()
    };
    let node = |op: &str, out: String, inputs: Vec<String>, attrs: Vec<pb::AttributeProto>| {
        pb::NodeProto {
            name: out.clone(),
            op_type: op.into(),
            input: inputs,
            output: vec![out],
            attribute: attrs,
            ..Default::default()
        }
    };
    let p = format!("{input_name}__");
    graph.initializer.extend([
        f32_scalar(format!("{p}zero"), 0.0),
        f32_scalar(format!("{p}one"), 1.0),
        f32_scalar(format!("{p}big"), 10_000.0),
        i64_1d(format!("{p}last"), -1),
    ]);
    for k in 0..exprs.len() {
        graph.initializer.push(i64_1d(format!("{p}k{k}"), k as i64));
    }
    let mut inserted = 0;
    for (j, site) in sites.iter().enumerate() {
        let (tensor, kind) = (&site.tensor, site.kind);
        let at = site.at + inserted;
        let k = exprs.iter().position(|e| *e == site.expr).unwrap_or(0);
        let q = format!("{p}{j}/");
        let mut nodes = vec![
            node(
                "Gather",
                format!("{q}valid"),
                vec![input_name.into(), format!("{p}k{k}")],
                vec![int_attr("axis", 0)],
            ),
            node("Shape", format!("{q}shape"), vec![tensor.clone()], vec![]),
            node(
                "Gather",
                format!("{q}cols_i64"),
                vec![format!("{q}shape"), format!("{p}last")],
                vec![int_attr("axis", 0)],
            ),
            node(
                "Cast",
                format!("{q}cols_1"),
                vec![format!("{q}cols_i64")],
                vec![int_attr("to", pb::tensor_proto::DataType::Float as i64)],
            ),
            node(
                "ReduceMax",
                format!("{q}cols"),
                vec![format!("{q}cols_1")],
                vec![int_attr("keepdims", 0)],
            ),
            node(
                "Range",
                format!("{q}index"),
                vec![format!("{p}zero"), format!("{q}cols"), format!("{p}one")],
                vec![],
            ),
            // keep[c] = clip(valid - c, 0, 1): 1 for c < valid, 0 from there on.
            node(
                "Sub",
                format!("{q}left"),
                vec![format!("{q}valid"), format!("{q}index")],
                vec![],
            ),
            node(
                "Max",
                format!("{q}lo"),
                vec![format!("{q}left"), format!("{p}zero")],
                vec![],
            ),
            node(
                "Min",
                format!("{q}keep"),
                vec![format!("{q}lo"), format!("{p}one")],
                vec![],
            ),
        ];
        let masked = format!("{q}masked");
        match kind {
            MaskKind::Zero | MaskKind::Mean => {
                nodes.push(node(
                    "Mul",
                    masked.clone(),
                    vec![tensor.clone(), format!("{q}keep")],
                    vec![],
                ));
            }
            MaskKind::Keys => {
                nodes.push(node(
                    "Sub",
                    format!("{q}drop"),
                    vec![format!("{q}keep"), format!("{p}one")],
                    vec![],
                ));
                nodes.push(node(
                    "Mul",
                    format!("{q}bias"),
                    vec![format!("{q}drop"), format!("{p}big")],
                    vec![],
                ));
                nodes.push(node(
                    "Add",
                    masked.clone(),
                    vec![tensor.clone(), format!("{q}bias")],
                    vec![],
                ));
            }
        }
        let n_new = nodes.len();
        for (o, nd) in nodes.into_iter().enumerate() {
            graph.node.insert(at + o, nd);
        }
        inserted += n_new;
        let site = at + n_new;
        graph.node[site].input[0] = masked;
        if kind == MaskKind::Mean {
            // The pool averaged over every column: scale to the mean over the valid ones.
            let out = graph.node[site].output[0].clone();
            let raw = format!("{q}sum_mean");
            graph.node[site].output[0] = raw.clone();
            let extra = vec![
                node(
                    "Div",
                    format!("{q}scale"),
                    vec![format!("{q}cols"), format!("{q}valid")],
                    vec![],
                ),
                pb::NodeProto {
                    name: format!("{q}mean"),
                    op_type: "Mul".into(),
                    input: vec![raw, format!("{q}scale")],
                    output: vec![out],
                    ..Default::default()
                },
            ];
            let n_extra = extra.len();
            for (o, nd) in extra.into_iter().enumerate() {
                graph.node.insert(site + 1 + o, nd);
            }
            inserted += n_extra;
        }
    }
    {
        use pb::tensor_shape_proto::{Dimension, dimension};
        graph.input.push(pb::ValueInfoProto {
            name: input_name.into(),
            r#type: Some(pb::TypeProto {
                value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                    elem_type: pb::tensor_proto::DataType::Float as i32,
                    shape: Some(pb::TensorShapeProto {
                        dim: vec![Dimension {
                            value: Some(dimension::Value::DimValue(exprs.len() as i64)),
                            ..Default::default()
                        }],
                    }),
                })),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
}
