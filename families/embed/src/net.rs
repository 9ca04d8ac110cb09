//! The one place this family runs the network: the runtime's model API.
//!
//! [`crate::Embedder`] opens the bundle as a [`Model`] (one engine chosen for
//! the real device), which prepares the encoder once at open for the smallest
//! (batch, sequence) bucket. Every other bucket is a plan from
//! [`Model::prepare`] on that same engine, prepared on first use (or all at
//! open) and kept with its [`Session`] in the runtime's
//! [`tether_runtime::ShapeSessions`] under the (batch, sequence) bucket
//! policy: a bucket is never prepared twice.
//!
//! A [`Bucket`]'s session has the network's i64 inputs (`input_ids`,
//! `attention_mask`, optional `token_type_ids`, `[batch, seq]`) as input
//! regions, written in place by the embedder (no staging copy of ours), and
//! the token embeddings `last_hidden_state` f32 `[batch, seq, 384]` as an
//! output region read in place for pooling. On a GPU the session is one
//! captured CUDA graph per bucket (upload, network, download); on the CPU the
//! tract engine copies the inputs into its own tensors and allocates its
//! intermediate tensors inside every run (`runtime/src/backends/tract_cpu.rs`).
//!
//! int8 weights stored as `Mul(Cast(int8), scale)` are dequantised once per
//! prepared plan by the runtime's load-time constant folding
//! (`runtime/src/backends/onnx_front.rs`), not in every run: each prepared
//! bucket holds the f32 weights (about 90 MB for all-MiniLM-L6-v2).

use tether_family::model::{NetworkRegions, network_session};
use tether_runtime::session::Check;
use tether_runtime::tensor::{view, view_mut};
use tether_runtime::{DType, EngineKind, Model, Plan, RegionId, Session, TensorSpec};

use crate::{EMBEDDING_DIM, EmbedError};

/// Name of the network in an `embed` bundle (`embed/encoder/model.onnx`).
pub(crate) const NETWORK: &str = "encoder";

/// How far a replayed CUDA graph's token embeddings may be from the eager
/// run's when a device session checks its capture at load.
const REPLAY_TOLERANCE: f32 = 1e-3;

/// The encoder prepared for one `[batch, seq]` shape, with its session.
pub(crate) struct Bucket {
    session: Session,
    input_ids: RegionId,
    attention_mask: RegionId,
    token_type_ids: Option<RegionId>,
    hidden: RegionId,
    batch: usize,
    seq: usize,
    engine: EngineKind,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket")
            .field("batch", &self.batch)
            .field("seq", &self.seq)
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

fn bad(reason: String) -> EmbedError {
    EmbedError::Network(reason)
}

fn list(t: &[TensorSpec]) -> String {
    t.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Bucket {
    /// The session of this bucket's shape.
    pub(crate) fn session(&self) -> &Session {
        &self.session
    }

    /// Build the session of `plan`, prepared for `[batch, seq]`.
    ///
    /// # Errors
    /// [`EmbedError::Network`] when the plan's I/O is not a BERT encoder's at
    /// that shape; [`EmbedError::Runtime`] when the session cannot be built.
    pub(crate) fn new(
        model: &Model,
        plan: Plan,
        batch: usize,
        seq: usize,
    ) -> Result<Self, EmbedError> {
        let io = plan.io().clone();
        let engine = plan.kind();
        for t in &io.inputs {
            if t.dtype != DType::I64 || t.shape != [batch, seq] {
                return Err(bad(format!(
                    "input {t} prepared for [{batch}, {seq}]; expected i64[{batch}, {seq}]"
                )));
            }
        }
        let find = |name: &str| io.input_index(name);
        let (Some(i_ids), Some(i_mask)) = (find("input_ids"), find("attention_mask")) else {
            return Err(bad(format!(
                "inputs [{}] lack input_ids or attention_mask",
                list(&io.inputs)
            )));
        };
        let i_types = find("token_type_ids");
        let expected = 2 + usize::from(i_types.is_some());
        if io.inputs.len() != expected {
            return Err(bad(format!(
                "inputs [{}]; expected input_ids, attention_mask and optionally token_type_ids",
                list(&io.inputs)
            )));
        }
        let want = [batch, seq, EMBEDDING_DIM];
        match io.outputs.first() {
            Some(o) if o.dtype == DType::F32 && o.shape == want => {}
            o => {
                return Err(bad(format!(
                    "at [{batch}, {seq}] the first output is {}, expected f32{want:?} token embeddings",
                    o.map_or_else(|| "missing".to_string(), |o| o.to_string())
                )));
            }
        }
        let NetworkRegions {
            session,
            inputs: ins,
            outputs: outs,
        } = network_session(model, NETWORK, plan, Check::F32Abs(REPLAY_TOLERANCE))?;
        log::debug!("embed: session for [{batch}, {seq}] on {engine}");
        Ok(Self {
            session,
            input_ids: ins[i_ids],
            attention_mask: ins[i_mask],
            token_type_ids: i_types.map(|i| ins[i]),
            hidden: outs[0],
            batch,
            seq,
            engine,
        })
    }

    /// The engine running this bucket.
    pub(crate) fn engine(&self) -> EngineKind {
        self.engine
    }

    /// Milliseconds per step of the last run (host wall time, or GPU time
    /// with step timing).
    pub(crate) fn step_times(&self) -> &[(String, f64)] {
        self.session.step_times()
    }

    /// Fill the token inputs in place (page-locked staging on a GPU), each a
    /// `[batch * seq]` slice: `fill_ids`, `fill_mask`, and `fill_types` when
    /// the network has `token_type_ids`. No allocation.
    ///
    /// # Errors
    /// [`EmbedError::Run`] / [`EmbedError::View`] on an engine bug.
    pub(crate) fn fill(
        &mut self,
        fill_ids: impl FnOnce(&mut [i64]),
        fill_mask: impl FnOnce(&mut [i64]),
        fill_types: impl FnOnce(&mut [i64]),
    ) -> Result<(), EmbedError> {
        fill_ids(view_mut::<i64>(
            DType::I64,
            self.session.input_mut(self.input_ids)?,
        )?);
        fill_mask(view_mut::<i64>(
            DType::I64,
            self.session.input_mut(self.attention_mask)?,
        )?);
        if let Some(t) = self.token_type_ids {
            fill_types(view_mut::<i64>(DType::I64, self.session.input_mut(t)?)?);
        }
        Ok(())
    }

    /// Run on the current inputs; the token embeddings `[batch * seq * 384]`.
    ///
    /// # Errors
    /// [`EmbedError::Run`] when the engine fails; [`EmbedError::Output`] for
    /// an output of the wrong size (an engine bug).
    pub(crate) fn run(&mut self) -> Result<&[f32], EmbedError> {
        self.session.run()?;
        let hidden = view::<f32>(DType::F32, self.session.output(self.hidden)?)?;
        let want = self.batch * self.seq * EMBEDDING_DIM;
        if hidden.len() != want {
            return Err(EmbedError::Output {
                index: 0,
                expected: want * 4,
                actual: hidden.len() * 4,
            });
        }
        Ok(hidden)
    }
}
