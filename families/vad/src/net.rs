//! The one place this family runs the network: the runtime's model API.
//!
//! [`Network::open`] opens the bundle as a [`Model`] (one engine chosen for the real device)
//! with the network's `sr` input fixed to 16000 ([`FixedInput`]): the engine substitutes
//! the constant before it optimises, so the model's `If (sr == 16000)` is resolved to its
//! 16 kHz branch once, at load (left as an input, tract re-plans the branch on every chunk,
//! about 1 ms instead of 61 us). The plan then has two inputs, `input` f32 `[1, 576]` and
//! `state` f32 `[2, 1, 128]`, and two outputs, `output` f32 `[1, 1]` and `stateN` f32
//! `[2, 1, 128]`.
//!
//! One [`Session`] runs it: the window as an input region, the probability as an output
//! region, and the LSTM state as the session's recurrent request state
//! ([`PipelineSpec::recurrent_state`]): the network reads `state` from its current region and
//! writes `stateN` into its next one, and the two exchange places after every chunk. On the
//! CPU the two host buffers are swapped (the tract engine copies the 1 KiB state into its own
//! input tensor); on a GPU the state never leaves the device: the session holds one executor
//! per parity, each bound once, and one captured CUDA graph per parity, so a chunk is one
//! graph launch (upload 2.3 KiB, network, download 4 bytes) and one wait, with no
//! allocation. A new stream resets it ([`Session::reset_state`]).

use std::sync::Arc;

use tether_bundle::Bundle;
use tether_runtime::session::{Check, RecurrentState};
use tether_runtime::tensor::{view, view_mut};
use tether_runtime::{
    DType, EngineKind, FixedInput, Model, ModelOptions, PipelineSpec, RegionId, RegionKind, Session,
};

use crate::{SAMPLE_RATE, STATE_LEN, VadError, WINDOW_SAMPLES};

/// Name of the network in a `vad` bundle (`vad/silero/model.onnx`).
pub(crate) const NETWORK: &str = "silero";

/// How far a replayed CUDA graph's outputs may be from the eager run's when the device
/// session checks its capture at load.
const REPLAY_TOLERANCE: f32 = 1e-5;

/// The model options a `vad` bundle is opened with: `sr` fixed to 16000 and the network's
/// input shapes (`input [1, 576]`, `state [2, 1, 128]`).
pub(crate) fn model_options(mut options: ModelOptions) -> ModelOptions {
    options.input_shapes = vec![(
        NETWORK.into(),
        vec![vec![1, WINDOW_SAMPLES], vec![2, 1, STATE_LEN / 2]],
    )];
    options.fixed_inputs = vec![(
        NETWORK.into(),
        vec![FixedInput::scalar_i64("sr", i64::from(SAMPLE_RATE))],
    )];
    options
}

/// The network, its session, and its regions.
pub(crate) struct Network {
    /// Kept for the session's lifetime: it holds the bundle and, on a GPU, the context.
    model: Model,
    session: Session,
    window: RegionId,
    state: RecurrentState,
    probability: RegionId,
    engine: EngineKind,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network")
            .field("engine", &self.engine)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

fn bad(reason: String) -> VadError {
    VadError::Network(reason)
}

/// A smooth test tone with some noise, for the warm-up run and the load-time check of a
/// device session (values like speech-level audio, not zeros).
fn warmup_window(bytes: &mut [u8]) {
    if let Ok(v) = view_mut::<f32>(DType::F32, bytes) {
        for (i, x) in v.iter_mut().enumerate() {
            let t = i as f32 / SAMPLE_RATE as f32;
            let noise = ((i * 2_654_435_761) % 1000) as f32 / 1000.0 - 0.5;
            *x = 0.3 * (2.0 * std::f32::consts::PI * 220.0 * t).sin() + 0.05 * noise;
        }
    }
}

impl Network {
    /// Open the model of `bundle` with `options` (device, engines, precision; the shapes
    /// and the fixed `sr` are set here) and build the session.
    ///
    /// # Errors
    /// [`VadError::Runtime`] (no engine for the network on this device, device
    /// unavailable, session), [`VadError::Network`] for a network without Silero's
    /// streaming I/O.
    pub(crate) fn open(bundle: Arc<Bundle>, options: ModelOptions) -> Result<Self, VadError> {
        let model = Model::from_bundle(bundle, &model_options(options))?;
        let net = model.network(NETWORK)?;
        let plan = net.plan().clone();
        let engine = net.engine();
        let io = plan.io().clone();
        let find_in = |name: &str| {
            io.input_index(name).ok_or_else(|| {
                bad(format!(
                    "no input `{name}` among [{}] (`sr` is fixed to {SAMPLE_RATE})",
                    list(&io.inputs)
                ))
            })
        };
        let find_out = |name: &str| {
            io.output_index(name)
                .ok_or_else(|| bad(format!("no output `{name}` among [{}]", list(&io.outputs))))
        };
        let (i_input, i_state) = (find_in("input")?, find_in("state")?);
        let (o_output, o_state) = (find_out("output")?, find_out("stateN")?);
        if io.inputs.len() != 2 || io.outputs.len() != 2 {
            return Err(bad(format!(
                "inputs [{}] and outputs [{}]; expected `input`, `state` (`sr` fixed) and `output`, `stateN`",
                list(&io.inputs),
                list(&io.outputs)
            )));
        }
        let state_shape = [2, 1, STATE_LEN / 2];
        let expect = |t: &tether_runtime::TensorSpec, shape: &[usize]| {
            if t.dtype == DType::F32 && t.shape == shape {
                Ok(())
            } else {
                Err(bad(format!("tensor {t}, expected f32{shape:?}")))
            }
        };
        expect(&io.inputs[i_input], &[1, WINDOW_SAMPLES])?;
        expect(&io.inputs[i_state], &state_shape)?;
        expect(&io.outputs[o_output], &[1, 1])?;
        expect(&io.outputs[o_state], &state_shape)?;

        let mut spec = PipelineSpec::new();
        let region = |spec: &mut PipelineSpec, t: &tether_runtime::TensorSpec, kind, check| {
            spec.region(
                format!("{NETWORK}:{t}"),
                t.byte_len().unwrap_or(0),
                kind,
                check,
            )
            .map_err(tether_runtime::Error::from)
        };
        let window = region(
            &mut spec,
            &io.inputs[i_input],
            RegionKind::Input,
            Check::Exact,
        )?;
        let state = spec
            .recurrent_state(
                format!("{NETWORK}:{}", io.inputs[i_state]),
                STATE_LEN * 4,
                Check::F32Abs(REPLAY_TOLERANCE),
            )
            .map_err(tether_runtime::Error::from)?;
        let probability = region(
            &mut spec,
            &io.outputs[o_output],
            RegionKind::Output,
            Check::F32Abs(REPLAY_TOLERANCE),
        )?;
        let mut ins = [window; 2];
        ins[i_state] = state.current;
        ins[i_input] = window;
        let mut outs = [probability; 2];
        outs[o_state] = state.next;
        outs[o_output] = probability;
        spec.network(NETWORK, plan, &ins, &outs)
            .map_err(tether_runtime::Error::from)?;
        spec.warmup(window, Box::new(warmup_window));
        let session = model.session(spec)?;
        log::debug!("vad: session on {engine}: {session:?}");
        Ok(Self {
            model,
            session,
            window,
            state,
            probability,
            engine,
        })
    }

    /// The engine running the network.
    pub(crate) fn engine(&self) -> EngineKind {
        self.engine
    }

    /// The model (device, networks and why each engine was chosen).
    pub(crate) fn model(&self) -> &Model {
        &self.model
    }

    /// The session (placement, device details, step times).
    pub(crate) fn session(&self) -> &Session {
        &self.session
    }

    /// The network input `[1, 576]` to fill before [`Network::run`] (page-locked staging
    /// on a GPU). No allocation.
    ///
    /// # Errors
    /// [`VadError::Run`] / [`VadError::View`] on an engine bug.
    pub(crate) fn window_mut(&mut self) -> Result<&mut [f32], VadError> {
        let bytes = self.session.input_mut(self.window)?;
        Ok(view_mut::<f32>(DType::F32, bytes)?)
    }

    /// Run on the current window: the speech probability; the next state replaces the
    /// current one (the regions swap). No allocation on a GPU.
    ///
    /// # Errors
    /// [`VadError::Run`] when the engine fails.
    pub(crate) fn run(&mut self) -> Result<f32, VadError> {
        self.session.run()?;
        let p = view::<f32>(DType::F32, self.session.output(self.probability)?)?;
        p.first().copied().ok_or(VadError::Output {
            index: 0,
            expected: 4,
            actual: 0,
        })
    }

    /// Zero the recurrent state (a new stream). Blocks on a GPU; no allocation.
    ///
    /// # Errors
    /// [`VadError::Run`] on a device error.
    pub(crate) fn reset_state(&mut self) -> Result<(), VadError> {
        self.session.reset_state(self.state.id)?;
        Ok(())
    }

    /// The current recurrent state (`[2, 1, 128]` f32), read back (blocks on a GPU).
    ///
    /// # Errors
    /// [`VadError::Run`] on a device error.
    pub(crate) fn read_state(&mut self, out: &mut [f32; STATE_LEN]) -> Result<(), VadError> {
        let mut bytes = [0u8; STATE_LEN * 4];
        self.session.read_region(self.state.current, &mut bytes)?;
        for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
            *o = f32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
        }
        Ok(())
    }
}

fn list(t: &[tether_runtime::TensorSpec]) -> String {
    t.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
