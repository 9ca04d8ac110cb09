//! The portable CPU engine: ONNX executed by [tract](https://github.com/sonos/tract)
//! (`tract-onnx` 0.23), and the ONNX inspection the build step uses.
//!
//! This is the embedded default when there is no GPU, or no TensorRT plan for
//! the device. The network is parsed, typed with concrete input shapes,
//! optimised and planned once in [`TractCpuEngine::load`]; the per-run state
//! (`SimpleState`) and the input tensors are allocated there and reused.
//!
//! tract allocates its intermediate tensors inside every run, so this engine
//! is **not** allocation-free and not capture-safe; the allocation-free hot
//! path is the GPU engines' (see `docs/`). It runs on the calling thread only.
//!
//! Models are parsed with `with_ignore_value_info(true)`: the `value_info` of
//! several exported YOLO/VAD graphs carries symbolic dimensions that tract
//! otherwise fails to unify ("Impossible to unify Sym(batch) with Val(1)").

use std::sync::Arc;

use tract_onnx::pb;
use tract_onnx::prelude::*;

use crate::engine::{CaptureSafety, Engine, Placement, RunError, StreamHandle, TensorSpec};
use tether_bundle::{DType, EngineKind, IoMode, Layout, TensorDesc};

/// Error while preparing a CPU engine or inspecting an ONNX model.
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    /// The bytes are not an ONNX model tract can parse.
    #[error("cannot parse the ONNX model: {0}")]
    Parse(String),
    /// The model parsed but could not be typed, optimised or planned with the
    /// requested input shapes.
    #[error("cannot prepare the ONNX model for input shapes {shapes:?}: {message}")]
    Prepare {
        /// The concrete input shapes that were asked for.
        shapes: Vec<Vec<usize>>,
        /// tract's message chain.
        message: String,
    },
    /// The caller gave a different number of input shapes than the model has inputs.
    #[error("the model has {model} inputs but {given} input shapes were given")]
    InputCount {
        /// Inputs of the model.
        model: usize,
        /// Shapes given.
        given: usize,
    },
    /// An I/O tensor has an element type this engine does not bind.
    #[error("tensor `{name}` has element type {dtype}, which the CPU engine does not support")]
    UnsupportedDType {
        /// Tensor name.
        name: String,
        /// Its type.
        dtype: String,
    },
    /// An output shape is still symbolic after fixing every input shape.
    #[error(
        "output `{name}` has a data-dependent shape {shape}; the CPU engine needs static output shapes"
    )]
    DynamicOutput {
        /// Output name.
        name: String,
        /// The shape tract inferred.
        shape: String,
    },
}

fn chain(e: &TractError) -> String {
    format!("{e:#}")
}

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
/// [`CpuError::Parse`] when the bytes are not a parsable ONNX protobuf.
pub fn inspect_onnx(onnx: &[u8]) -> Result<OnnxInfo, CpuError> {
    let proto = tract_onnx::onnx()
        .proto_model_for_read(&mut &onnx[..])
        .map_err(|e| CpuError::Parse(chain(&e)))?;
    let graph = proto
        .graph
        .as_ref()
        .ok_or_else(|| CpuError::Parse("the model has no graph".into()))?;
    let initialisers: std::collections::HashSet<&str> =
        graph.initializer.iter().map(|t| t.name.as_str()).collect();
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

fn our_dtype(dt: DatumType) -> Option<DType> {
    Some(match dt {
        DatumType::F32 => DType::F32,
        DatumType::F16 => DType::F16,
        DatumType::U8 => DType::U8,
        DatumType::I8 => DType::I8,
        DatumType::I32 => DType::I32,
        DatumType::I64 => DType::I64,
        DatumType::Bool => DType::Bool,
        _ => return None,
    })
}

fn tract_dtype(dt: DType) -> Option<DatumType> {
    Some(match dt {
        DType::F32 => DatumType::F32,
        DType::F16 => DatumType::F16,
        DType::U8 => DatumType::U8,
        DType::I8 => DatumType::I8,
        DType::I32 => DatumType::I32,
        DType::I64 => DatumType::I64,
        DType::Bool => DatumType::Bool,
        _ => return None,
    })
}

/// tract CPU engine: one optimised plan plus its reusable run state.
pub struct TractCpuEngine {
    state: TypedSimpleState,
    inputs: Vec<TensorSpec>,
    outputs: Vec<TensorSpec>,
    input_tensors: Vec<Arc<Tensor>>,
    results: TVec<TValue>,
}

impl std::fmt::Debug for TractCpuEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TractCpuEngine")
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish_non_exhaustive()
    }
}

impl TractCpuEngine {
    /// Parse, type, optimise and plan an ONNX model with concrete input shapes.
    ///
    /// `input_shapes[i]` is the shape of the model's `i`-th input (row-major,
    /// e.g. `[1, 3, 640, 640]`); the input element types are the model's own.
    ///
    /// # Errors
    /// [`CpuError::Parse`], [`CpuError::InputCount`], [`CpuError::Prepare`],
    /// [`CpuError::UnsupportedDType`], [`CpuError::DynamicOutput`].
    pub fn load(onnx: &[u8], input_shapes: &[Vec<usize>]) -> Result<Self, CpuError> {
        let info = inspect_onnx(onnx)?;
        if info.inputs.len() != input_shapes.len() {
            return Err(CpuError::InputCount {
                model: info.inputs.len(),
                given: input_shapes.len(),
            });
        }
        let prepare = |e: TractError| CpuError::Prepare {
            shapes: input_shapes.to_vec(),
            message: chain(&e),
        };
        let framework = tract_onnx::onnx().with_ignore_value_info(true);
        let proto = framework
            .proto_model_for_read(&mut &onnx[..])
            .map_err(|e| CpuError::Parse(chain(&e)))?;
        let mut model = framework
            .model_for_proto_model(&proto)
            .map_err(|e| CpuError::Parse(chain(&e)))?;
        drop(proto);
        let mut inputs = Vec::with_capacity(input_shapes.len());
        for (ix, (desc, shape)) in info.inputs.iter().zip(input_shapes).enumerate() {
            let dt = tract_dtype(desc.dtype).ok_or_else(|| CpuError::UnsupportedDType {
                name: desc.name.clone(),
                dtype: desc.dtype.to_string(),
            })?;
            model
                .set_input_fact(ix, InferenceFact::dt_shape(dt, shape.as_slice()))
                .map_err(prepare)?;
            inputs.push(TensorSpec {
                name: desc.name.clone(),
                mode: IoMode::Input,
                dtype: desc.dtype,
                shape: shape.clone(),
            });
        }
        let typed = model
            .into_typed()
            .and_then(|m| m.into_optimized())
            .map_err(prepare)?;
        let mut outputs = Vec::new();
        for (ix, outlet) in typed.output_outlets().map_err(prepare)?.iter().enumerate() {
            let fact = typed.outlet_fact(*outlet).map_err(prepare)?;
            let name = typed
                .outlet_label(*outlet)
                .map(str::to_owned)
                .or_else(|| info.outputs.get(ix).map(|d| d.name.clone()))
                .unwrap_or_else(|| format!("output{ix}"));
            let shape = fact
                .shape
                .as_concrete()
                .ok_or_else(|| CpuError::DynamicOutput {
                    name: name.clone(),
                    shape: format!("{:?}", fact.shape),
                })?
                .to_vec();
            let dtype = our_dtype(fact.datum_type).ok_or_else(|| CpuError::UnsupportedDType {
                name: name.clone(),
                dtype: format!("{:?}", fact.datum_type),
            })?;
            outputs.push(TensorSpec {
                name,
                mode: IoMode::Output,
                dtype,
                shape,
            });
        }
        let plan = typed.into_runnable().map_err(prepare)?;
        let state = TypedSimpleState::new(&plan).map_err(prepare)?;
        let mut input_tensors = Vec::with_capacity(inputs.len());
        for spec in &inputs {
            // Checked above: every input dtype maps to a tract type.
            let dt = tract_dtype(spec.dtype).ok_or_else(|| CpuError::UnsupportedDType {
                name: spec.name.clone(),
                dtype: spec.dtype.to_string(),
            })?;
            let t = Tensor::zero_dt(dt, &spec.shape).map_err(prepare)?;
            input_tensors.push(Arc::new(t));
        }
        log::debug!(
            "tract CPU engine ready: inputs [{}], outputs [{}]",
            inputs
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            outputs
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(Self {
            state,
            inputs,
            outputs,
            input_tensors,
            results: tvec!(),
        })
    }
}

impl Engine for TractCpuEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::TractCpu
    }

    fn inputs(&self) -> &[TensorSpec] {
        &self.inputs
    }

    fn outputs(&self) -> &[TensorSpec] {
        &self.outputs
    }

    fn placement(&self) -> Placement {
        Placement::Host
    }

    fn capture_safety(&self) -> CaptureSafety {
        CaptureSafety::Unsafe("the tract CPU engine runs on the host")
    }

    fn input_host_mut(&mut self, index: usize) -> Result<&mut [u8], RunError> {
        let count = self.input_tensors.len();
        let t = self
            .input_tensors
            .get_mut(index)
            .ok_or(RunError::NoSuchTensor {
                mode: IoMode::Input,
                index,
                count,
            })?;
        // After a run tract has dropped its references, so this does not copy;
        // if it ever kept one, make_mut copies once instead of corrupting it.
        let t = Arc::make_mut(t);
        Ok(t.as_bytes_mut())
    }

    fn output_host(&self, index: usize) -> Result<&[u8], RunError> {
        if index >= self.outputs.len() {
            return Err(RunError::NoSuchTensor {
                mode: IoMode::Output,
                index,
                count: self.outputs.len(),
            });
        }
        let v = self.results.get(index).ok_or(RunError::NotRun { index })?;
        Ok(v.as_bytes())
    }

    fn run(&mut self, _stream: StreamHandle) -> Result<(), RunError> {
        let inputs: TVec<TValue> = self
            .input_tensors
            .iter()
            .map(|t| TValue::from_const(Arc::clone(t)))
            .collect();
        self.results.clear();
        match self.state.run(inputs) {
            Ok(out) => {
                self.results = out;
                Ok(())
            }
            Err(e) => {
                log::error!("tract run failed: {e:#}");
                Err(RunError::Backend {
                    engine: EngineKind::TractCpu,
                    what: "run",
                })
            }
        }
    }
}
