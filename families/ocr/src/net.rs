//! The one place the OCR family runs networks: the runtime's model API.
//!
//! [`crate::Ocr`] opens the bundle as a [`Model`], which picks one engine per
//! network for the real device (a TensorRT plan for this GPU, a GPU engine,
//! or the tract CPU engine) and prepares each network once at open for one
//! shape. Every other shape is a plan from [`Model::prepare`] on that same
//! engine, kept with its [`Session`] in the runtime's [`ShapeSessions`] under
//! the network's bucket policy: the detector one per input size (a bounded
//! cache, since the size follows the image's), the recogniser one per width
//! bucket, the classifier only the one prepared at open. Each session has its
//! input and outputs as host-visible regions (on a GPU one captured CUDA graph
//! per run): a plan is never prepared again while it is held.
//!
//! The session path allocates nothing per run on a GPU; on the CPU the tract
//! engine allocates its intermediate tensors inside every run (documented in
//! `runtime/src/backends/tract_cpu.rs`). The host code around it does not
//! (see `pipeline.rs` and `tests/alloc.rs`).

use tether_runtime::session::Check;
use tether_runtime::tensor::{view, view_mut};
use tether_runtime::{
    DType, EngineKind, Model, Plan, RegionId, Session, ShapePolicy, ShapeSessions,
};

use tether_family::io::{dims_of, prepared, select};
use tether_family::model::{NetworkRegions, network_session};

use crate::OcrError;

/// How far a replayed CUDA graph's output may be from the eager run's when a
/// device session checks its capture at load (probabilities in `[0, 1]`).
const REPLAY_TOLERANCE: f32 = 1e-4;

/// A network prepared for one input shape `[1, 3, h, w]`, with its session.
pub(crate) struct Prepared {
    session: Session,
    input: RegionId,
    /// The recogniser's `valid_widths` input (f32 `[K]`), when the bundle added it.
    valid_widths: Option<RegionId>,
    output: RegionId,
    input_len: usize,
    output_shape: Vec<usize>,
    engine: EngineKind,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("engine", &self.engine)
            .field("input_len", &self.input_len)
            .field("output_shape", &self.output_shape)
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// The session of this network and shape.
    pub(crate) fn session(&self) -> &Session {
        &self.session
    }

    /// Build the session of `plan`: its f32 image input (and the recogniser's
    /// `valid_widths`, when present) as input regions, its outputs as output
    /// regions; the output read is the one that plays the network's role
    /// (`crate::network::output`, by the rule of `tether_family::io`).
    ///
    /// # Errors
    /// [`OcrError::Network`] naming `network` for a plan without one f32 image
    /// input and one f32 output of its role, or with other inputs;
    /// [`OcrError::Runtime`] when the session cannot be built.
    pub(crate) fn new(model: &Model, network: &'static str, plan: Plan) -> Result<Self, OcrError> {
        let io = plan.io().clone();
        let bad = |reason: String| OcrError::Network { network, reason };
        let in_dims = dims_of(&io.inputs);
        let out_dims = dims_of(&io.outputs);
        let image = select(
            &crate::network::image_input(),
            &prepared(&io.inputs, &in_dims),
        )
        .map_err(|e| bad(e.to_string()))?;
        let valid = io
            .inputs
            .iter()
            .position(|t| t.name == crate::network::VALID_WIDTHS);
        if let Some(extra) = (0..io.inputs.len()).find(|&i| i != image && Some(i) != valid) {
            return Err(bad(format!(
                "input `{}` is neither the image nor `{}`",
                io.inputs[extra].name,
                crate::network::VALID_WIDTHS
            )));
        }
        let out = select(
            &crate::network::output(network),
            &prepared(&io.outputs, &out_dims),
        )
        .map_err(|e| bad(e.to_string()))?;
        let (input, output) = (&io.inputs[image], &io.outputs[out]);
        if input.dtype != DType::F32 || output.dtype != DType::F32 {
            return Err(bad(format!(
                "input {input} and output {output}; expected f32 tensors"
            )));
        }
        if let Some(v) = valid
            && (io.inputs[v].dtype != DType::F32 || io.inputs[v].shape.len() != 1)
        {
            return Err(bad(format!("input {}; expected f32 [K]", io.inputs[v])));
        }
        let input_len = input.element_count().unwrap_or(0);
        let output_shape = output.shape.clone();
        let engine = plan.kind();
        let NetworkRegions {
            session,
            inputs: ins,
            outputs: outs,
        } = network_session(model, network, plan, Check::F32Abs(REPLAY_TOLERANCE))?;
        log::debug!(
            "{network}: session for input {:?} on {engine}, output {output_shape:?}",
            input.shape
        );
        Ok(Self {
            session,
            input: ins[image],
            valid_widths: valid.map(|v| ins[v]),
            output: outs[out],
            input_len,
            output_shape,
            engine,
        })
    }

    /// The `valid_widths` input to write (no allocation); `None` for a network
    /// without it.
    ///
    /// # Errors
    /// [`OcrError::Run`] / [`OcrError::View`] on an engine bug.
    pub(crate) fn valid_widths_mut(&mut self) -> Result<Option<&mut [f32]>, OcrError> {
        match self.valid_widths {
            Some(r) => Ok(Some(view_mut::<f32>(
                DType::F32,
                self.session.input_mut(r)?,
            )?)),
            None => Ok(None),
        }
    }

    /// The output shape at this input shape.
    pub(crate) fn output_shape(&self) -> &[usize] {
        &self.output_shape
    }

    /// The input tensor, `3 * h * w` f32 values (CHW). No allocation.
    ///
    /// # Errors
    /// [`OcrError::Run`] / [`OcrError::View`] / [`OcrError::InputBuffer`] on
    /// an engine bug.
    pub(crate) fn input_mut(&mut self, network: &'static str) -> Result<&mut [f32], OcrError> {
        let bytes = self.session.input_mut(self.input)?;
        let v = view_mut::<f32>(DType::F32, bytes)?;
        if v.len() != self.input_len {
            return Err(OcrError::InputBuffer {
                network,
                expected: self.input_len,
                actual: v.len(),
            });
        }
        Ok(v)
    }

    /// Run on the current input and return output 0.
    ///
    /// # Errors
    /// [`OcrError::Run`] when the engine fails; [`OcrError::View`] on an
    /// engine bug.
    pub(crate) fn run(&mut self) -> Result<&[f32], OcrError> {
        self.session.run()?;
        Ok(view::<f32>(DType::F32, self.session.output(self.output)?)?)
    }
}

/// The sessions of one network keyed by input size `[h, w]` (the runtime's
/// [`ShapeSessions`] under the network's bucket policy): the detector one per
/// input size, at most `capacity` held (`Exact`), the recogniser one per width
/// bucket (`Buckets`).
pub(crate) type Sessions = ShapeSessions<Prepared, 2>;

/// The sessions of `network`, whose image input is `[1, 3, h, w]`, under `policy`. Every
/// input in the network's order: the image, and the recogniser's `valid_widths` (`[K]`,
/// fixed) when the bundle added it.
pub(crate) fn sessions(model: &Model, network: &'static str, policy: ShapePolicy<2>) -> Sessions {
    let fixed: Vec<Option<Vec<usize>>> = model.network(network).map_or_else(
        |_| vec![None],
        |n| {
            n.io()
                .inputs
                .iter()
                .map(|t| (t.name == crate::network::VALID_WIDTHS).then(|| t.shape.clone()))
                .collect()
        },
    );
    ShapeSessions::new(model, network, policy, move |&[h, w]| {
        fixed
            .iter()
            .map(|f| f.clone().unwrap_or_else(|| vec![1, 3, h, w]))
            .collect()
    })
}

/// The session of `network` for input `h x w` (its bucket), prepared with
/// `model` (on the engine chosen at open) when none is held.
///
/// # Errors
/// [`OcrError::Network`] when preparation fails; [`OcrError::Runtime`] when
/// the session cannot be built.
pub(crate) fn session<'a>(
    sessions: &'a mut Sessions,
    model: &Model,
    network: &'static str,
    h: usize,
    w: usize,
) -> Result<&'a mut Prepared, OcrError> {
    sessions.get(model, [h, w], |plan, [h, w]| {
        let plan = plan.map_err(|e| OcrError::Network {
            network,
            reason: format!("cannot prepare for input {:?}: {e}", [1, 3, h, w]),
        })?;
        Prepared::new(model, network, plan)
    })
}
