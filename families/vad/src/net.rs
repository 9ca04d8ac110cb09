//! The one place this family runs the network: the runtime's model API.
//!
//! Silero ships two ONNX interfaces ([`Form`]); both run here one 576-sample window at a
//! time with the LSTM state carried between runs. The sequence form (faster-whisper's
//! `silero_vad_v6.onnx`: `input [T, 576]`, `h`, `c` -> `speech_probs [T]`, `hn`, `cn`) is
//! opened at T = 1 with `h` and `c` as two recurrent states. The streaming form is described
//! below.
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

/// Silero's two ONNX interfaces, told apart by their input names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// The silero-vad package's streaming form (`silero_vad.onnx`,
    /// `silero_vad_op18_ifless.onnx`): `input` f32 `[1, 576]`, `sr` i64 (fixed to 16000 at
    /// load), `state` f32 `[2, 1, 128]` -> `output` f32 `[1, 1]`, `stateN`.
    Streaming,
    /// The sequence form, 16 kHz only (faster-whisper's `silero_vad_v6.onnx`, silero-vad's
    /// `silero_vad_16k_sequence.onnx`): `input` f32 `[T, 576]` (T windows, each with its
    /// 64-sample context), `h` and `c` f32 `[1, 1, 128]` -> `speech_probs` f32 `[T]`, `hn`,
    /// `cn`. The LSTM runs along T, so one window at a time (T = 1, the state carried
    /// between runs) computes what the whole sequence computes in one run.
    Sequence,
}

impl Form {
    /// The form of a network whose inputs have these names; `None` for neither.
    pub fn of_inputs<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<Form> {
        let names: Vec<&str> = names.into_iter().collect();
        let has = |n: &str| names.contains(&n);
        match (has("input"), has("sr"), has("state"), has("h"), has("c")) {
            (true, true, true, false, false) => Some(Form::Streaming),
            (true, false, false, true, true) => Some(Form::Sequence),
            _ => None,
        }
    }

    /// `(state input, state output)` pairs: the recurrent state of the form. Streaming:
    /// `state` `[2, 1, 128]` (h then c); sequence: `h` and `c`, `[1, 1, 128]` each.
    pub fn states(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Form::Streaming => &[("state", "stateN")],
            Form::Sequence => &[("h", "hn"), ("c", "cn")],
        }
    }

    /// The probability output.
    pub fn output(self) -> &'static str {
        match self {
            Form::Streaming => "output",
            Form::Sequence => "speech_probs",
        }
    }

    /// The shape this family runs an input at (one window, one state).
    fn shape(self, input: &str) -> Vec<usize> {
        match (self, input) {
            (_, "input") => vec![1, WINDOW_SAMPLES],
            (Form::Streaming, _) => vec![2, 1, STATE_LEN / 2],
            (Form::Sequence, _) => vec![1, 1, STATE_LEN / 2],
        }
    }

    /// What the form is, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Form::Streaming => "streaming form (`input`, `sr`, `state`)",
            Form::Sequence => "sequence form (`input`, `h`, `c`)",
        }
    }
}

/// The inputs of the `vad` network recorded in `bundle`'s manifest, in order.
fn manifest_inputs(bundle: &Bundle) -> Result<Vec<String>, VadError> {
    let section = bundle.section(&format!("{}/{NETWORK}/model.onnx", crate::FAMILY))?;
    Ok(bundle
        .tensors(section.index)
        .filter(|t| t.mode == tether_bundle::IoMode::Input)
        .map(|t| t.name.to_string())
        .collect())
}

/// The form of the network `bundle` carries, from its manifest; `None` for neither (or an
/// unreadable manifest). Used by the CLI's inspect and run reports.
#[cfg(feature = "cli")]
pub(crate) fn form_of_bundle(bundle: &Bundle) -> Option<Form> {
    let inputs = manifest_inputs(bundle).ok()?;
    Form::of_inputs(inputs.iter().map(String::as_str))
}

/// The model options a `vad` bundle of `form` is opened with: the shapes of one window and
/// one state, in the manifest's input order, and (streaming form) `sr` fixed to 16000.
pub(crate) fn model_options(
    mut options: ModelOptions,
    form: Form,
    inputs: &[String],
) -> ModelOptions {
    options.input_shapes = vec![(
        NETWORK.into(),
        inputs
            .iter()
            .filter(|n| *n != "sr")
            .map(|n| form.shape(n))
            .collect(),
    )];
    if form == Form::Streaming {
        options.fixed_inputs = vec![(
            NETWORK.into(),
            vec![FixedInput::scalar_i64("sr", i64::from(SAMPLE_RATE))],
        )];
    }
    options
}

/// The network, its session, and its regions.
pub(crate) struct Network {
    /// Kept for the session's lifetime: it holds the bundle and, on a GPU, the context.
    model: Model,
    session: Session,
    window: RegionId,
    /// The recurrent state: `state` (streaming form) or `h`, `c` (sequence form).
    state: Vec<RecurrentState>,
    probability: RegionId,
    engine: EngineKind,
    form: Form,
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
    /// streaming or sequence I/O.
    pub(crate) fn open(bundle: Arc<Bundle>, options: ModelOptions) -> Result<Self, VadError> {
        let inputs = manifest_inputs(&bundle)?;
        let form = Form::of_inputs(inputs.iter().map(String::as_str)).ok_or_else(|| {
            bad(format!(
                "inputs [{}]: neither Silero's {} nor its {}",
                inputs.join(", "),
                Form::Streaming.describe(),
                Form::Sequence.describe()
            ))
        })?;
        let model = Model::from_bundle(bundle, &model_options(options, form, &inputs))?;
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
        let n_io = 1 + form.states().len();
        if io.inputs.len() != n_io || io.outputs.len() != n_io {
            return Err(bad(format!(
                "inputs [{}] and outputs [{}]; the {} has {n_io} of each (`sr` fixed)",
                list(&io.inputs),
                list(&io.outputs),
                form.describe()
            )));
        }
        let expect = |t: &tether_runtime::TensorSpec, shape: &[usize]| {
            if t.dtype == DType::F32 && t.shape == shape {
                Ok(())
            } else {
                Err(bad(format!("tensor {t}, expected f32{shape:?}")))
            }
        };
        let i_input = find_in("input")?;
        expect(&io.inputs[i_input], &[1, WINDOW_SAMPLES])?;
        let o_output = find_out(form.output())?;
        // One probability: `[1, 1]` (streaming) or `[1]` (sequence, T = 1).
        let p = &io.outputs[o_output];
        if p.dtype != DType::F32 || p.shape.iter().product::<usize>() != 1 {
            return Err(bad(format!("tensor {p}, expected one f32 probability")));
        }
        let mut states = Vec::new();
        for (sin, sout) in form.states() {
            let (i, o) = (find_in(sin)?, find_out(sout)?);
            let shape = form.shape(sin);
            expect(&io.inputs[i], &shape)?;
            expect(&io.outputs[o], &shape)?;
            states.push((i, o));
        }

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
        let probability = region(
            &mut spec,
            &io.outputs[o_output],
            RegionKind::Output,
            Check::F32Abs(REPLAY_TOLERANCE),
        )?;
        let mut ins = vec![window; n_io];
        let mut outs = vec![probability; n_io];
        let mut state = Vec::new();
        for &(i, o) in &states {
            let t = &io.inputs[i];
            let r = spec
                .recurrent_state(
                    format!("{NETWORK}:{t}"),
                    t.byte_len().unwrap_or(0),
                    Check::F32Abs(REPLAY_TOLERANCE),
                )
                .map_err(tether_runtime::Error::from)?;
            ins[i] = r.current;
            outs[o] = r.next;
            state.push(r);
        }
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
            form,
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

    /// Which of Silero's interfaces the network has.
    pub(crate) fn form(&self) -> Form {
        self.form
    }

    /// Zero the recurrent state (a new stream). Blocks on a GPU; no allocation.
    ///
    /// # Errors
    /// [`VadError::Run`] on a device error.
    pub(crate) fn reset_state(&mut self) -> Result<(), VadError> {
        for s in &self.state {
            self.session.reset_state(s.id)?;
        }
        Ok(())
    }

    /// The current recurrent state, read back (blocks on a GPU): 256 f32, the LSTM's `h`
    /// then `c` (the streaming form's `[2, 1, 128]`; the sequence form's `h` and `c`
    /// `[1, 1, 128]` one after the other, the same numbers).
    ///
    /// # Errors
    /// [`VadError::Run`] on a device error.
    pub(crate) fn read_state(&mut self, out: &mut [f32; STATE_LEN]) -> Result<(), VadError> {
        let mut bytes = [0u8; STATE_LEN * 4];
        let per = bytes.len() / self.state.len();
        for (s, part) in self.state.iter().zip(bytes.chunks_exact_mut(per)) {
            self.session.read_region(s.current, part)?;
        }
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

#[cfg(test)]
mod tests {
    use super::Form;

    #[test]
    fn forms_are_told_apart_by_their_inputs() {
        assert_eq!(
            Form::of_inputs(["input", "sr", "state"]),
            Some(Form::Streaming)
        );
        assert_eq!(Form::of_inputs(["input", "h", "c"]), Some(Form::Sequence));
        // Mixed or partial interfaces are neither.
        assert_eq!(Form::of_inputs(["input", "sr", "h", "c"]), None);
        assert_eq!(Form::of_inputs(["input", "state"]), None);
        assert_eq!(Form::of_inputs(["x", "h", "c"]), None);
        assert_eq!(Form::Sequence.states(), &[("h", "hn"), ("c", "cn")]);
    }
}
