//! The tract CPU backend: ONNX executed by [tract](https://github.com/sonos/tract)
//! (`tract-onnx` 0.23), the portable engine that runs everywhere.
//!
//! [`TractCpu::prepare`] parses the network, fixes every input shape, types, optimises and
//! plans it once ([`TractCpuPlan`], shareable); each [`TractCpuExecutor`] holds tract's run
//! state and its input tensors, allocated once. tract allocates its intermediate tensors
//! inside every run, so this backend is not allocation-free (the allocation-free hot path is
//! the device backends').
//!
//! Threads: [`TractCpu`] runs on the calling thread. [`TractCpuPool`] runs tract's
//! multithreaded executor (matrix products, convolutions and element-wise ops split over a
//! rayon pool of `threads` threads; the calling thread waits). Pools are created once per
//! thread count and shared by every plan of the process ([`shared_pool`]).
//!
//! Networks are parsed with `with_ignore_value_info(true)`: the `value_info` of several
//! exported YOLO/VAD graphs carries symbolic dimensions that tract otherwise fails to unify
//! ("Impossible to unify Sym(batch) with Val(1)").
//!
//! Every call into tract runs under [`catch_prepare`] / [`catch_run`]: a malformed network
//! that makes tract panic becomes a typed error naming the network, never an abort.

use std::sync::{Arc, Mutex};

use tract_onnx::prelude::*;
use tract_onnx::tract_hir::infer::Factoid;

use crate::backend::{
    Backend, EngineKind, HostExecutor, HostPlan, IoSpec, NetworkSource, Placement, Plan,
    PrepareError, PrepareOptions, RunError, SourceFormat, catch_prepare, catch_run,
};
use crate::tensor::{DType, IoMode, TensorSpec};

const KIND: EngineKind = EngineKind::TractCpu;

/// The tract CPU backend on the calling thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct TractCpu;

/// The tract CPU backend on tract's multithreaded executor: a shared rayon pool of
/// `threads` threads (1 runs on the calling thread, as [`TractCpu`]).
#[derive(Clone, Copy, Debug)]
pub struct TractCpuPool {
    threads: usize,
}

impl TractCpuPool {
    /// A backend whose plans run on `threads` threads (0 is taken as 1).
    pub fn new(threads: usize) -> Self {
        TractCpuPool {
            threads: threads.max(1),
        }
    }

    /// The thread count.
    pub fn threads(&self) -> usize {
        self.threads
    }
}

/// The process-wide tract executor for `threads` threads: `None` for one thread (the
/// calling thread), else a rayon pool of that size, built on first use and shared by every
/// plan asking for the same count (threads named `tether-cpu-<i>`). tract's constructor
/// panics when the operating system refuses the threads: call it under [`catch_prepare`].
pub fn shared_pool(threads: usize) -> Option<tract_linalg::multithread::Executor> {
    use tract_linalg::multithread::Executor;
    if threads <= 1 {
        return None;
    }
    static POOLS: Mutex<Vec<(usize, Executor)>> = Mutex::new(Vec::new());
    let mut pools = POOLS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, e)) = pools.iter().find(|(n, _)| *n == threads) {
        return Some(e.clone());
    }
    let e = Executor::multithread_with_name(threads, "tether-cpu");
    pools.push((threads, e.clone()));
    Some(e)
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

fn backend_error(network: &str, e: &TractError) -> PrepareError {
    PrepareError::Backend {
        engine: KIND,
        network: network.to_string(),
        message: format!("{e:#}"),
    }
}

impl Backend for TractCpu {
    fn kind(&self) -> EngineKind {
        KIND
    }

    fn placement(&self) -> Placement {
        Placement::Host
    }

    fn prepare(
        &self,
        source: &NetworkSource<'_>,
        options: &PrepareOptions,
    ) -> Result<Plan, PrepareError> {
        if source.format != SourceFormat::Onnx {
            return Err(PrepareError::Backend {
                engine: KIND,
                network: source.network.to_string(),
                message: format!("{:?} payloads are not ONNX", source.format),
            });
        }
        prepare_on(source, options, 1)
    }
}

impl Backend for TractCpuPool {
    fn kind(&self) -> EngineKind {
        KIND
    }

    fn placement(&self) -> Placement {
        Placement::Host
    }

    fn prepare(
        &self,
        source: &NetworkSource<'_>,
        options: &PrepareOptions,
    ) -> Result<Plan, PrepareError> {
        if source.format != SourceFormat::Onnx {
            return Err(PrepareError::Backend {
                engine: KIND,
                network: source.network.to_string(),
                message: format!("{:?} payloads are not ONNX", source.format),
            });
        }
        prepare_on(source, options, self.threads)
    }
}

fn prepare_on(
    source: &NetworkSource<'_>,
    options: &PrepareOptions,
    threads: usize,
) -> Result<Plan, PrepareError> {
    catch_prepare(KIND, source.network, || {
        let executor = shared_pool(threads);
        let plan = TractCpuPlan::load(
            source.network,
            source.bytes,
            &options.input_shapes,
            &options.fixed_inputs,
            options.tensor_limit(),
            executor,
        )?;
        Ok(Plan::Host(Arc::new(plan)))
    })
}

/// A network parsed, typed, optimised and planned by tract for fixed input shapes.
pub struct TractCpuPlan {
    network: String,
    plan: Arc<TypedSimplePlan>,
    io: IoSpec,
    threads: usize,
}

impl std::fmt::Debug for TractCpuPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TractCpuPlan")
            .field("network", &self.network)
            .field("io", &self.io)
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

/// Parse an ONNX model the way every tract-based backend of tether does, after checking
/// the attributes tract trusts ([`check_attributes`]), with the `fixed` inputs made
/// constants of the graph ([`super::onnx_front::substitute_fixed_inputs`]).
///
/// # Errors
/// [`PrepareError::Backend`] for a protobuf tract cannot read; [`PrepareError::Unsupported`]
/// naming the node, the operator and the attribute for a malformed convolution or pooling;
/// [`PrepareError::Io`] for a fixed input that does not fit the network.
pub(crate) fn parse_onnx(
    network: &str,
    onnx: &[u8],
    fixed: &[crate::backend::FixedInput],
) -> Result<InferenceModel, PrepareError> {
    let framework = tract_onnx::onnx().with_ignore_value_info(true);
    let mut proto = framework
        .proto_model_for_read(&mut &onnx[..])
        .map_err(|e| backend_error(network, &e))?;
    if let Some(graph) = &proto.graph {
        check_attributes(network, graph)?;
        if let Some(r) = super::onnx_front::ignored_recurrent_attribute(graph) {
            return Err(PrepareError::Unsupported {
                engine: KIND,
                network: network.to_string(),
                node: r.node,
                op: r.op,
                detail: r.detail,
            });
        }
    }
    if !fixed.is_empty() {
        let graph = proto.graph.as_mut().ok_or_else(|| PrepareError::Backend {
            engine: KIND,
            network: network.to_string(),
            message: "the ONNX model has no graph".into(),
        })?;
        super::onnx_front::substitute_fixed_inputs(network, graph, fixed)?;
    }
    framework
        .model_for_proto_model(&proto)
        .map_err(|e| backend_error(network, &e))
}

/// Check the attributes of convolution and pooling nodes against the ONNX operator spec
/// (onnx/docs/Operators.md, `Conv`, `ConvTranspose`, `MaxPool`, `AveragePool`, `LpPool`):
/// `kernel_shape`, `strides` and `dilations` hold one value per spatial axis and `pads` two
/// (begin and end per axis), all non-negative and strides/dilations positive. tract indexes
/// them without checking (a three-value `pads` on a 2-D convolution panics inside its padding
/// code), so a malformed node is refused here with its name instead.
///
/// # Errors
/// [`PrepareError::Unsupported`] naming the node, the operator and the attribute.
pub fn check_attributes(
    network: &str,
    graph: &tract_onnx::pb::GraphProto,
) -> Result<(), PrepareError> {
    use tract_onnx::pb::attribute_proto::AttributeType;
    const OPS: [&str; 5] = ["Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool"];
    for (index, node) in graph.node.iter().enumerate() {
        if !OPS.contains(&node.op_type.as_str()) {
            continue;
        }
        let name = if node.name.is_empty() {
            format!("#{index} (unnamed)")
        } else {
            node.name.clone()
        };
        let refuse = |detail: String| PrepareError::Unsupported {
            engine: KIND,
            network: network.to_string(),
            node: name.clone(),
            op: node.op_type.clone(),
            detail,
        };
        let ints = |name: &str| -> Option<&[i64]> {
            node.attribute
                .iter()
                .find(|a| a.name == name && a.r#type() == AttributeType::Ints)
                .map(|a| a.ints.as_slice())
        };
        // Spatial rank: from kernel_shape, else (convolutions) from the weight initializer.
        let rank = match ints("kernel_shape") {
            Some(k) => Some(k.len()),
            None => node.input.get(1).and_then(|w| {
                graph
                    .initializer
                    .iter()
                    .find(|t| &t.name == w)
                    .map(|t| t.dims.len().saturating_sub(2))
            }),
        };
        let Some(rank) = rank else { continue };
        for (attr, per_axis, min) in [
            ("kernel_shape", 1usize, 1i64),
            ("strides", 1, 1),
            ("dilations", 1, 1),
            ("pads", 2, 0),
            ("output_padding", 1, 0),
        ] {
            let Some(v) = ints(attr) else { continue };
            if v.len() != per_axis * rank {
                return Err(refuse(format!(
                    "attribute `{attr}` has {} value(s) {v:?}; a {rank}-D {} needs {}",
                    v.len(),
                    node.op_type,
                    per_axis * rank
                )));
            }
            if let Some(bad) = v.iter().find(|&&x| x < min) {
                return Err(refuse(format!(
                    "attribute `{attr}` holds {bad}; values must be >= {min}"
                )));
            }
        }
    }
    Ok(())
}

/// Fix the input facts of a parsed model to `shapes` (keeping each input's declared element
/// type) and return the input tensor descriptors.
///
/// # Errors
/// [`PrepareError::Io`] for an input count mismatch or an element type tether does not bind.
pub(crate) fn fix_inputs(
    network: &str,
    model: &mut InferenceModel,
    shapes: &[Vec<usize>],
) -> Result<Vec<TensorSpec>, PrepareError> {
    let outlets = model
        .input_outlets()
        .map_err(|e| backend_error(network, &e))?
        .to_vec();
    if outlets.len() != shapes.len() {
        return Err(PrepareError::Io {
            network: network.to_string(),
            tensor: "(inputs)".into(),
            detail: format!(
                "the network has {} inputs but {} input shapes were given",
                outlets.len(),
                shapes.len()
            ),
        });
    }
    let mut inputs = Vec::with_capacity(shapes.len());
    for (ix, (outlet, shape)) in outlets.iter().zip(shapes).enumerate() {
        let name = model.node(outlet.node).name.clone();
        let fact = model
            .input_fact(ix)
            .map_err(|e| backend_error(network, &e))?;
        let dt = fact.datum_type.concretize().unwrap_or(DatumType::F32);
        let dtype = our_dtype(dt).ok_or_else(|| PrepareError::Io {
            network: network.to_string(),
            tensor: name.clone(),
            detail: format!("element type {dt:?} is not supported"),
        })?;
        model
            .set_input_fact(ix, InferenceFact::dt_shape(dt, shape.as_slice()))
            .map_err(|e| backend_error(network, &e))?;
        inputs.push(TensorSpec {
            name,
            mode: IoMode::Input,
            dtype,
            shape: shape.clone(),
        });
    }
    Ok(inputs)
}

/// A tract error from typing or optimising a network at `shapes`: [`PrepareError::TooLarge`]
/// when a tensor broke the size limit ([`super::onnx_front::into_typed_bounded`]), else
/// [`PrepareError::Backend`] with tract's message chain.
pub(crate) fn typing_error(network: &str, shapes: &[Vec<usize>], e: TractError) -> PrepareError {
    match super::onnx_front::too_large(&e) {
        Some(tensor) => PrepareError::TooLarge {
            engine: KIND,
            network: network.to_string(),
            tensor,
        },
        None => PrepareError::Backend {
            engine: KIND,
            network: network.to_string(),
            message: format!("input shapes {shapes:?}: {e:#}"),
        },
    }
}

/// The concrete output descriptors of a typed model.
///
/// # Errors
/// [`PrepareError::Io`] for a data-dependent output shape or an unsupported element type.
pub(crate) fn typed_outputs(
    network: &str,
    typed: &TypedModel,
) -> Result<Vec<TensorSpec>, PrepareError> {
    let mut outputs = Vec::new();
    for (ix, outlet) in typed
        .output_outlets()
        .map_err(|e| backend_error(network, &e))?
        .iter()
        .enumerate()
    {
        let fact = typed
            .outlet_fact(*outlet)
            .map_err(|e| backend_error(network, &e))?;
        let name = typed
            .outlet_label(*outlet)
            .map(str::to_owned)
            .unwrap_or_else(|| typed.node(outlet.node).name.clone());
        let name = if name.is_empty() {
            format!("output{ix}")
        } else {
            name
        };
        let shape = fact
            .shape
            .as_concrete()
            .ok_or_else(|| PrepareError::Io {
                network: network.to_string(),
                tensor: name.clone(),
                detail: format!(
                    "data-dependent shape {:?}; tether needs static output shapes",
                    fact.shape
                ),
            })?
            .to_vec();
        let dtype = our_dtype(fact.datum_type).ok_or_else(|| PrepareError::Io {
            network: network.to_string(),
            tensor: name.clone(),
            detail: format!("element type {:?} is not supported", fact.datum_type),
        })?;
        outputs.push(TensorSpec {
            name,
            mode: IoMode::Output,
            dtype,
            shape,
        });
    }
    Ok(outputs)
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

impl TractCpuPlan {
    fn load(
        network: &str,
        onnx: &[u8],
        shapes: &[Vec<usize>],
        fixed: &[crate::backend::FixedInput],
        max_tensor_bytes: u64,
        executor: Option<tract_linalg::multithread::Executor>,
    ) -> Result<Self, PrepareError> {
        let mut model = parse_onnx(network, onnx, fixed)?;
        let inputs = fix_inputs(network, &mut model, shapes)?;
        let prepare = |e: TractError| typing_error(network, shapes, e);
        // Typed with every tensor bounded (`onnx_front::into_typed_bounded`), every
        // all-constant node evaluated once (int8 weights dequantised at load, not per run:
        // see `onnx_front::fold_constants`), then tract's own optimisation.
        let typed = super::onnx_front::into_typed_bounded(model, max_tensor_bytes)
            .and_then(|mut m| {
                let folded = super::onnx_front::fold_constants(&mut m)?;
                let scans = super::onnx_front::scans_reset_every_run(&mut m);
                let names = super::onnx_front::output_labels(&m)?;
                let mut m = m.into_optimized()?;
                super::onnx_front::relabel_outputs(&mut m, &names)?;
                let moved = super::onnx_front::softmax_axes_last(&mut m)?;
                log::debug!(
                    "tract CPU plan for `{network}`: {folded} constant nodes folded, {scans} recurrent loops reset every run, {moved} softmax axes moved last"
                );
                Ok(m)
            })
            .map_err(prepare)?;
        let outputs = typed_outputs(network, &typed)?;
        let threads = match &executor {
            Some(tract_linalg::multithread::Executor::MultiThread(pool)) => {
                pool.current_num_threads()
            }
            _ => 1,
        };
        let run_options = tract_onnx::tract_core::runtime::RunOptions {
            executor,
            ..Default::default()
        };
        let plan = typed
            .into_runnable_with_options(&run_options)
            .map_err(prepare)?;
        log::debug!(
            "tract CPU plan for `{network}` on {threads} thread(s): inputs [{}], outputs [{}]",
            list(&inputs),
            list(&outputs)
        );
        Ok(Self {
            network: network.to_string(),
            plan,
            io: IoSpec { inputs, outputs },
            threads,
        })
    }
}

impl TractCpuPlan {
    /// Threads a run uses (1: the calling thread).
    pub fn threads(&self) -> usize {
        self.threads
    }
}

fn list(t: &[TensorSpec]) -> String {
    t.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl HostPlan for TractCpuPlan {
    fn kind(&self) -> EngineKind {
        KIND
    }

    fn io(&self) -> &IoSpec {
        &self.io
    }

    fn executor(&self) -> Result<Box<dyn HostExecutor>, PrepareError> {
        catch_prepare(KIND, &self.network, || {
            let state =
                TypedSimpleState::new(&self.plan).map_err(|e| backend_error(&self.network, &e))?;
            let mut inputs = Vec::with_capacity(self.io.inputs.len());
            for spec in &self.io.inputs {
                let dt = tract_dtype(spec.dtype).ok_or_else(|| PrepareError::Io {
                    network: self.network.clone(),
                    tensor: spec.name.clone(),
                    detail: format!("element type {} is not supported", spec.dtype),
                })?;
                let t = Tensor::zero_dt(dt, &spec.shape)
                    .map_err(|e| backend_error(&self.network, &e))?;
                inputs.push(Arc::new(t));
            }
            let sizes = self
                .io
                .inputs
                .iter()
                .chain(&self.io.outputs)
                .map(|t| t.byte_len().unwrap_or(usize::MAX))
                .collect();
            Ok(Box::new(TractCpuExecutor {
                state,
                inputs,
                sizes,
                n_in: self.io.inputs.len(),
            }) as Box<dyn HostExecutor>)
        })
    }
}

/// Per-run state of a [`TractCpuPlan`]: tract's state and the input tensors, allocated once.
pub struct TractCpuExecutor {
    state: TypedSimpleState,
    inputs: Vec<Arc<Tensor>>,
    /// Byte sizes: inputs then outputs.
    sizes: Vec<usize>,
    n_in: usize,
}

impl HostExecutor for TractCpuExecutor {
    fn run(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), RunError> {
        let n_out = self.sizes.len() - self.n_in;
        if inputs.len() != self.n_in {
            return Err(RunError::BufferCount {
                what: "inputs",
                expected: self.n_in,
                actual: inputs.len(),
            });
        }
        if outputs.len() != n_out {
            return Err(RunError::BufferCount {
                what: "outputs",
                expected: n_out,
                actual: outputs.len(),
            });
        }
        for (i, (t, src)) in self.inputs.iter_mut().zip(inputs).enumerate() {
            if src.len() != self.sizes[i] {
                return Err(RunError::BufferSize {
                    what: "input",
                    index: i,
                    expected: self.sizes[i],
                    actual: src.len(),
                });
            }
            // After a run tract has dropped its references, so this does not copy the tensor.
            Arc::make_mut(t).as_bytes_mut().copy_from_slice(src);
        }
        let state = &mut self.state;
        let values: TVec<TValue> = self
            .inputs
            .iter()
            .map(|t| TValue::from_const(Arc::clone(t)))
            .collect();
        let results = catch_run(KIND, "run", || {
            state.run(values).map_err(|e| {
                log::error!("tract CPU run failed: {e:#}");
                RunError::Backend {
                    engine: KIND,
                    what: "run",
                }
            })
        })?;
        for (i, (dst, v)) in outputs.iter_mut().zip(&results).enumerate() {
            let bytes = v.as_bytes();
            if dst.len() != bytes.len() {
                return Err(RunError::BufferSize {
                    what: "output",
                    index: i,
                    expected: bytes.len(),
                    actual: dst.len(),
                });
            }
            dst.copy_from_slice(bytes);
        }
        Ok(())
    }
}
