//! What a session runs: regions, stages and networks, declared once at load.

use std::fmt;

use super::state::{
    AppendDecl, AppendState, CURSOR_BYTES, RecurrentState, StateDecl, StateId, StateKind,
};
use crate::backend::Plan;

/// Handle to a region of a [`PipelineSpec`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionId(pub(crate) u16);

impl RegionId {
    /// The region's index in the spec.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// What a region is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionKind {
    /// Written by the host before each run (a camera frame, network inputs of the module
    /// API). On a device session it is staged through page-locked host memory (mapped on an
    /// integrated GPU, where the copy disappears).
    Input,
    /// Read by the host after each run (detections, network outputs). Staged like inputs.
    Output,
    /// Lives only on the session's side (network I/O between stages, scratch).
    Internal,
}

/// How the load-time check compares a region after a graph replay with the eager run.
#[derive(Clone, Copy)]
pub enum Check {
    /// Not compared (scratch whose content is not a result).
    Skip,
    /// Bit for bit.
    Exact,
    /// As `f32` values, each within an absolute tolerance (NaN never matches).
    F32Abs(f32),
    /// A family's own comparison (e.g. detections within a tolerance): `Err` says why not.
    Custom(fn(eager: &[u8], replay: &[u8]) -> Result<(), String>),
}

impl fmt::Debug for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Check::Skip => f.write_str("Skip"),
            Check::Exact => f.write_str("Exact"),
            Check::F32Abs(t) => write!(f, "F32Abs({t})"),
            Check::Custom(_) => f.write_str("Custom"),
        }
    }
}

impl Check {
    /// Compare `eager` with `replay`.
    ///
    /// # Errors
    /// Why they differ.
    pub fn compare(&self, eager: &[u8], replay: &[u8]) -> Result<(), String> {
        match self {
            Check::Skip => Ok(()),
            Check::Exact => match eager.iter().zip(replay).position(|(a, b)| a != b) {
                None if eager.len() == replay.len() => Ok(()),
                None => Err(format!("{} vs {} bytes", eager.len(), replay.len())),
                Some(i) => Err(format!("first difference at byte {i}")),
            },
            Check::F32Abs(tol) => {
                let (a, b) = (
                    crate::tensor::view::<f32>(crate::tensor::DType::F32, eager),
                    crate::tensor::view::<f32>(crate::tensor::DType::F32, replay),
                );
                let (Ok(a), Ok(b)) = (a, b) else {
                    return Err("not f32 data".into());
                };
                let mut worst = (0f32, 0usize);
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    // Equal values (infinities of one sign included) and equal bit patterns
                    // (the same NaN) match; a NaN against anything else does not.
                    if x == y || x.to_bits() == y.to_bits() {
                        continue;
                    }
                    let d = (x - y).abs();
                    if d.is_nan() {
                        // NaN in both (a network output that is NaN by construction) matches.
                        if !(x.is_nan() && y.is_nan()) {
                            return Err(format!("value {i}: {x} vs {y}"));
                        }
                    } else if d > worst.0 {
                        worst = (d, i);
                    }
                }
                if worst.0 > *tol {
                    Err(format!(
                        "value {} differs by {} (tolerance {tol})",
                        worst.1, worst.0
                    ))
                } else {
                    Ok(())
                }
            }
            Check::Custom(f) => f(eager, replay),
        }
    }
}

/// One region: a named byte range of the session.
#[derive(Debug)]
pub struct RegionDecl {
    /// What it holds, e.g. "frame u8 [H, stride]" (for logs and errors).
    pub name: String,
    /// Size in bytes.
    pub bytes: usize,
    /// Input, output or internal.
    pub kind: RegionKind,
    /// How the graph replay is checked against the eager run.
    pub check: Check,
    /// The request state this region belongs to, if any (its regions are declared by
    /// [`PipelineSpec::recurrent_state`] and [`PipelineSpec::append_state`]).
    pub(crate) state: Option<StateId>,
}

impl RegionDecl {
    /// The request state this region belongs to.
    pub fn state(&self) -> Option<StateId> {
        self.state
    }
}

/// A network step: a prepared plan bound to regions.
pub struct NetworkStep {
    /// The network's name (for logs).
    pub name: String,
    /// The plan.
    pub plan: Plan,
    /// One region per plan input, in order.
    pub inputs: Vec<RegionId>,
    /// One region per plan output, in order.
    pub outputs: Vec<RegionId>,
}

/// The step that appends rows to an appendable request state
/// ([`PipelineSpec::append_rows`]).
#[derive(Clone, Copy, Debug)]
pub struct AppendRows(pub(crate) super::state::AppendStep);

/// One step of a pipeline, in execution order.
pub enum Step {
    /// A family stage (kernels on the device, host code on the host).
    Stage(Box<dyn super::Stage>),
    /// A network.
    Network(NetworkStep),
    /// Rows appended to a request state at its cursor.
    AppendRows(AppendRows),
}

/// Fills an input region for the warm-up run and the load-time check.
pub type Warmup = Box<dyn Fn(&mut [u8]) + Send>;

/// A pipeline declared at load: regions, then steps in execution order.
///
/// ```text
/// [Input regions] -> stage -> ... -> network -> ... -> stage -> [Output regions]
/// ```
///
/// A family builds one spec per input geometry (a change of frame size builds a new session
/// from the same plans: the networks are never re-prepared).
#[derive(Default)]
pub struct PipelineSpec {
    pub(crate) regions: Vec<RegionDecl>,
    pub(crate) steps: Vec<Step>,
    pub(crate) warmups: Vec<(RegionId, Warmup)>,
    #[cfg(feature = "cuda")]
    pub(crate) kernels: Option<crate::cuda::ModuleSource>,
    /// The request state ([`PipelineSpec::recurrent_state`], [`PipelineSpec::append_state`]).
    pub(crate) states: Vec<StateDecl>,
}

impl fmt::Debug for PipelineSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PipelineSpec")
            .field("regions", &self.regions)
            .field("steps", &self.steps.len())
            .field("states", &self.states)
            .finish()
    }
}

/// Most regions a spec may declare.
pub const MAX_REGIONS: usize = 64;
/// Most inputs plus outputs one network step may bind.
pub const MAX_NETWORK_IO: usize = 32;

impl PipelineSpec {
    /// An empty spec.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declare a region.
    ///
    /// # Errors
    /// [`SpecError::TooManyRegions`].
    pub fn region(
        &mut self,
        name: impl Into<String>,
        bytes: usize,
        kind: RegionKind,
        check: Check,
    ) -> Result<RegionId, SpecError> {
        if self.regions.len() >= MAX_REGIONS {
            return Err(SpecError::TooManyRegions { max: MAX_REGIONS });
        }
        self.regions.push(RegionDecl {
            name: name.into(),
            bytes,
            kind,
            check,
            state: None,
        });
        Ok(RegionId((self.regions.len() - 1) as u16))
    }

    fn decl(&self, r: RegionId) -> Result<&RegionDecl, SpecError> {
        self.regions.get(r.index()).ok_or(SpecError::NoSuchRegion {
            index: r.index(),
            count: self.regions.len(),
        })
    }

    /// A region of the request state `state`.
    fn state_region(
        &mut self,
        state: StateId,
        name: String,
        bytes: usize,
        kind: RegionKind,
        check: Check,
    ) -> Result<RegionId, SpecError> {
        let id = self.region(name, bytes, kind, check)?;
        self.regions[id.index()].state = Some(state);
        Ok(id)
    }

    fn next_state_id(&self) -> Result<StateId, SpecError> {
        u16::try_from(self.states.len())
            .map(StateId)
            .map_err(|_| SpecError::TooManyRegions { max: MAX_REGIONS })
    }

    /// Append a family stage.
    pub fn stage(&mut self, stage: Box<dyn super::Stage>) {
        self.steps.push(Step::Stage(stage));
    }

    /// Append a network bound to existing regions (one per input and output, in order,
    /// each at least the tensor's size).
    ///
    /// # Errors
    /// [`SpecError`] when the counts or sizes do not fit the plan.
    pub fn network(
        &mut self,
        name: impl Into<String>,
        plan: Plan,
        inputs: &[RegionId],
        outputs: &[RegionId],
    ) -> Result<(), SpecError> {
        let name = name.into();
        let io = plan.io();
        if inputs.len() != io.inputs.len() || outputs.len() != io.outputs.len() {
            return Err(SpecError::NetworkIo {
                network: name,
                inputs: (io.inputs.len(), inputs.len()),
                outputs: (io.outputs.len(), outputs.len()),
            });
        }
        if inputs.len() + outputs.len() > MAX_NETWORK_IO {
            return Err(SpecError::TooManyTensors {
                network: name,
                max: MAX_NETWORK_IO,
            });
        }
        for r in outputs {
            if self.is_cursor(*r) {
                return Err(SpecError::State {
                    state: self.decl(*r)?.name.clone(),
                    detail: format!(
                        "network `{name}` writes a cursor region (the session writes it)"
                    ),
                });
            }
        }
        for (t, r) in io
            .inputs
            .iter()
            .zip(inputs)
            .chain(io.outputs.iter().zip(outputs))
        {
            let decl = self.decl(*r)?;
            let need = t.byte_len().ok_or_else(|| SpecError::TensorSize {
                tensor: t.to_string(),
            })?;
            if decl.bytes != need {
                return Err(SpecError::RegionSize {
                    region: decl.name.clone(),
                    bytes: decl.bytes,
                    tensor: t.to_string(),
                    needed: need,
                });
            }
        }
        self.steps.push(Step::Network(NetworkStep {
            name,
            plan,
            inputs: inputs.to_vec(),
            outputs: outputs.to_vec(),
        }));
        Ok(())
    }

    /// Declare one region per input and output of `plan` (inputs as `input_kind`, outputs as
    /// `output_kind`, named `<network>:<tensor>`) and append the network bound to them.
    /// Returns the regions, inputs then outputs.
    ///
    /// # Errors
    /// [`SpecError`].
    pub fn network_with_regions(
        &mut self,
        name: &str,
        plan: Plan,
        input_kind: RegionKind,
        output_kind: RegionKind,
        output_check: Check,
    ) -> Result<(Vec<RegionId>, Vec<RegionId>), SpecError> {
        let io = plan.io().clone();
        let mut ins = Vec::new();
        for t in &io.inputs {
            let bytes = t.byte_len().ok_or_else(|| SpecError::TensorSize {
                tensor: t.to_string(),
            })?;
            ins.push(self.region(
                format!("{name}:{}", t.name),
                bytes,
                input_kind,
                Check::Exact,
            )?);
        }
        let mut outs = Vec::new();
        for t in &io.outputs {
            let bytes = t.byte_len().ok_or_else(|| SpecError::TensorSize {
                tensor: t.to_string(),
            })?;
            outs.push(self.region(
                format!("{name}:{}", t.name),
                bytes,
                output_kind,
                output_check,
            )?);
        }
        self.network(name, plan, &ins, &outs)?;
        Ok((ins, outs))
    }

    /// Fill input region `region` with `fill` before the warm-up run and the load-time check
    /// (default: zeros). Give values the network handles like real data (token ids in range,
    /// an image with structure).
    pub fn warmup(&mut self, region: RegionId, fill: Warmup) {
        self.warmups.push((region, fill));
    }

    /// Declare a recurrent request state of `bytes` bytes: two internal regions, `name` (the
    /// state the next run reads) and `name` + " (next)" (where the run writes the next one),
    /// that exchange places after every run, with nothing copied (module [`super::state`]).
    ///
    /// A network reading its state from [`RecurrentState::current`] and writing the next
    /// state to [`RecurrentState::next`] reads, on the next run, what it just wrote, and
    /// writes over the state it read. Region ids stay logical: after each run `current`
    /// names the buffer holding the state just produced, so [`super::Session::read_region`]
    /// and [`super::Session::write_region`] on it read and set the current state. Both start
    /// zeroed, and [`super::Session::reset_state`] zeroes them again.
    ///
    /// Only networks may name the two regions (a stage may not: it would see one buffer
    /// under both parities), which [`super::Session::new`] checks.
    ///
    /// # Errors
    /// [`SpecError::TooManyRegions`].
    pub fn recurrent_state(
        &mut self,
        name: impl Into<String>,
        bytes: usize,
        check: Check,
    ) -> Result<RecurrentState, SpecError> {
        let name = name.into();
        let id = self.next_state_id()?;
        let current = self.state_region(id, name.clone(), bytes, RegionKind::Internal, check)?;
        let next = self.state_region(
            id,
            format!("{name} (next)"),
            bytes,
            RegionKind::Internal,
            check,
        )?;
        self.states.push(StateDecl {
            name,
            kind: StateKind::Recurrent { current, next },
        });
        Ok(RecurrentState { id, current, next })
    }

    /// Declare an appendable request state (a KV cache): `capacity` rows of `row_bytes` for
    /// each of `slots` sequences, allocated with the session, never reallocated, and one
    /// [`super::Cursor`] per slot (module [`super::state`]: where the position lives, who
    /// advances it, how reset works).
    ///
    /// The rows region is internal; the cursor region (`i32 [slots, 2]`) is written by the
    /// session before every run (on a device: staged and uploaded by the graph). Networks
    /// and stages may read both and write the rows; nothing but the session writes the
    /// cursor. Rows are appended by [`PipelineSpec::append_rows`] or by a network's in-place
    /// operator.
    ///
    /// # Errors
    /// [`SpecError::State`] for a zero size, capacity, slot count or `max_rows`,
    /// `rows_per_run` above `max_rows` or `max_rows` above the capacity, a capacity past
    /// `i32::MAX`, or a region size that overflows; [`SpecError::TooManyRegions`].
    pub fn append_state(&mut self, decl: AppendDecl) -> Result<AppendState, SpecError> {
        let AppendDecl {
            name,
            row_bytes,
            capacity,
            slots,
            max_rows,
            rows_per_run,
            check,
        } = decl;
        let refuse = |detail: String| SpecError::State {
            state: name.clone(),
            detail,
        };
        if row_bytes == 0 || capacity == 0 || slots == 0 || max_rows == 0 {
            return Err(refuse(format!(
                "{row_bytes} bytes a row, {capacity} rows, {slots} slots, {max_rows} rows a run: none may be 0"
            )));
        }
        if rows_per_run > max_rows || max_rows > capacity {
            return Err(refuse(format!(
                "{rows_per_run} rows a run by default, at most {max_rows} in one run, capacity {capacity}: each must be at most the next"
            )));
        }
        if i32::try_from(capacity).is_err() {
            return Err(refuse(format!(
                "capacity {capacity} rows; positions are i32, at most {}",
                i32::MAX
            )));
        }
        let bytes = row_bytes
            .checked_mul(capacity)
            .and_then(|b| b.checked_mul(slots))
            .ok_or_else(|| {
                refuse(format!(
                    "{slots} x {capacity} rows of {row_bytes} bytes overflow"
                ))
            })?;
        let id = self.next_state_id()?;
        let rows = self.state_region(id, name.clone(), bytes, RegionKind::Internal, check)?;
        let cursor = self.state_region(
            id,
            format!("{name} (cursor)"),
            slots * CURSOR_BYTES,
            RegionKind::Input,
            Check::Exact,
        )?;
        self.states.push(StateDecl {
            name,
            kind: StateKind::Append {
                rows,
                cursor,
                row_bytes,
                capacity,
                slots,
                max_rows,
                rows_per_run,
            },
        });
        Ok(AppendState { id, rows, cursor })
    }

    /// Append a step that copies this run's rows from `src` into the appendable state
    /// `state` at its cursor: for each slot `s`, the first `cursor.length -
    /// cursor.position` rows of `src`'s block `s` (`src` holds `[slots, max_rows,
    /// row_bytes]` bytes) go to rows `[position, length)` of slot `s`. On the host a copy;
    /// on a device one kernel that reads the cursor from device memory, so one captured
    /// graph appends at every position.
    ///
    /// # Errors
    /// [`SpecError::State`] when `state` is not an appendable state of this spec or `src`
    /// is not `slots * max_rows * row_bytes` bytes or is a region of a state.
    pub fn append_rows(&mut self, state: StateId, src: RegionId) -> Result<(), SpecError> {
        let decl = self
            .states
            .get(state.index())
            .ok_or(SpecError::NoSuchState {
                index: state.index(),
                count: self.states.len(),
            })?;
        let StateKind::Append {
            rows,
            cursor,
            row_bytes,
            capacity,
            slots,
            max_rows,
            ..
        } = decl.kind
        else {
            return Err(SpecError::State {
                state: decl.name.clone(),
                detail: "rows are appended to an appendable state; this one is recurrent".into(),
            });
        };
        let name = decl.name.clone();
        let src_decl = self.decl(src)?;
        let want = slots * max_rows * row_bytes;
        if src_decl.bytes != want || src_decl.state.is_some() {
            return Err(SpecError::State {
                state: name,
                detail: format!(
                    "the rows to append come from region `{}` ({} bytes{}); it must be a region of no state holding {slots} slots x {max_rows} rows x {row_bytes} bytes = {want}",
                    src_decl.name,
                    src_decl.bytes,
                    if src_decl.state.is_some() {
                        ", a state's"
                    } else {
                        ""
                    }
                ),
            });
        }
        self.steps
            .push(Step::AppendRows(AppendRows(super::state::AppendStep {
                src,
                rows,
                cursor,
                row_bytes,
                capacity,
                slots,
                max_rows,
            })));
        Ok(())
    }

    /// Whether `r` is the cursor region of an appendable state.
    fn is_cursor(&self, r: RegionId) -> bool {
        self.states
            .iter()
            .any(|s| matches!(s.kind, StateKind::Append { cursor, .. } if cursor == r))
    }

    /// The kernels the device flavour of this spec's stages launches.
    #[cfg(feature = "cuda")]
    pub fn kernels(&mut self, source: crate::cuda::ModuleSource) {
        self.kernels = Some(source);
    }

    /// The declared regions.
    pub fn regions(&self) -> &[RegionDecl] {
        &self.regions
    }
}

/// A spec that cannot be built into a session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// More than [`MAX_REGIONS`] regions.
    #[error("a session holds at most {max} regions")]
    TooManyRegions {
        /// The limit.
        max: usize,
    },
    /// A network with more than [`MAX_NETWORK_IO`] tensors.
    #[error("network `{network}` has more than {max} I/O tensors")]
    TooManyTensors {
        /// The network.
        network: String,
        /// The limit.
        max: usize,
    },
    /// A region id from another spec.
    #[error("region {index} does not exist (the spec has {count})")]
    NoSuchRegion {
        /// The index.
        index: usize,
        /// Regions in the spec.
        count: usize,
    },
    /// A stage names the same region twice, or reads and writes it.
    #[error("stage `{stage}` names region `{region}` more than once")]
    RegionTwice {
        /// The stage.
        stage: String,
        /// The region.
        region: String,
    },
    /// The number of regions given for a network does not match its plan.
    #[error(
        "network `{network}`: {} inputs and {} outputs, but {} and {} regions were given",
        .inputs.0, .outputs.0, .inputs.1, .outputs.1
    )]
    NetworkIo {
        /// The network.
        network: String,
        /// (plan, given) inputs.
        inputs: (usize, usize),
        /// (plan, given) outputs.
        outputs: (usize, usize),
    },
    /// A region's size does not match the tensor bound to it.
    #[error("region `{region}` holds {bytes} bytes, tensor {tensor} needs {needed}")]
    RegionSize {
        /// The region.
        region: String,
        /// Its size.
        bytes: usize,
        /// The tensor.
        tensor: String,
        /// The tensor's size.
        needed: usize,
    },
    /// A tensor whose size overflows or whose dtype has no size.
    #[error("tensor {tensor} has no computable byte size")]
    TensorSize {
        /// The tensor.
        tensor: String,
    },
    /// Host and device plans in one spec, or device plans of different devices.
    #[error("one session runs on one device: {detail}")]
    MixedPlacement {
        /// What was mixed.
        detail: String,
    },
    /// A request state that cannot be declared or used as asked.
    #[error("request state `{state}`: {detail}")]
    State {
        /// The state's name.
        state: String,
        /// Why not.
        detail: String,
    },
    /// A request state id from another spec.
    #[error("request state {index} does not exist (the spec has {count})")]
    NoSuchState {
        /// The index.
        index: usize,
        /// States in the spec.
        count: usize,
    },
    /// A stage has no implementation for the session's placement.
    #[error("stage `{stage}` has no {placement} implementation")]
    StageUnsupported {
        /// The stage.
        stage: String,
        /// "host" or "device".
        placement: &'static str,
    },
}

/// Check a stage's declared regions: each exists and appears once; none is a region of a
/// recurrent state (only networks swap) and none it writes is a cursor (the session's).
pub(crate) fn check_stage_regions(
    stage: &dyn super::Stage,
    regions: &[RegionDecl],
    states: &[StateDecl],
) -> Result<(), SpecError> {
    let mut seen = [false; MAX_REGIONS];
    let writes = stage.writes();
    for r in stage.reads().iter().chain(writes) {
        let decl = regions.get(r.index()).ok_or(SpecError::NoSuchRegion {
            index: r.index(),
            count: regions.len(),
        })?;
        if let Some(s) = decl.state.and_then(|s| states.get(s.index())) {
            let refused = match s.kind {
                StateKind::Recurrent { .. } => Some("names a region of this recurrent state"),
                StateKind::Append { cursor, .. } if cursor == *r && writes.contains(r) => {
                    Some("writes its cursor (the session writes it)")
                }
                StateKind::Append { .. } => None,
            };
            if let Some(why) = refused {
                return Err(SpecError::State {
                    state: s.name.clone(),
                    detail: format!("stage `{}` {why}", stage.name()),
                });
            }
        }
        if std::mem::replace(&mut seen[r.index()], true) {
            return Err(SpecError::RegionTwice {
                stage: stage.name().to_string(),
                region: decl.name.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|f| f.to_ne_bytes()).collect()
    }

    #[test]
    fn f32_check_matches_equal_values_and_same_nans_and_nothing_else() {
        let c = Check::F32Abs(1e-4);
        let a = bytes(&[1.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
        assert_eq!(c.compare(&a, &a), Ok(()));
        let b = bytes(&[1.00005, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
        assert_eq!(c.compare(&a, &b), Ok(()));
        let far = bytes(&[1.001, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
        assert!(c.compare(&a, &far).unwrap_err().contains("differs by"));
        let nan = bytes(&[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
        assert!(c.compare(&a, &nan).unwrap_err().contains("value 0"));
        let flipped = bytes(&[1.0, f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NAN]);
        assert!(c.compare(&a, &flipped).is_err());
        assert!(Check::Exact.compare(&a, &b).is_err());
        assert_eq!(Check::Skip.compare(&a, &far), Ok(()));
    }
}
