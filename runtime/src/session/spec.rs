//! What a session runs: regions, stages and networks, declared once at load.

use std::fmt;

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

/// One step of a pipeline, in execution order.
pub enum Step {
    /// A family stage (kernels on the device, host code on the host).
    Stage(Box<dyn super::Stage>),
    /// A network.
    Network(NetworkStep),
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
    /// Pairs of regions that exchange places after every run ([`PipelineSpec::ping_pong`]).
    pub(crate) ping_pong: Vec<(RegionId, RegionId)>,
}

impl fmt::Debug for PipelineSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PipelineSpec")
            .field("regions", &self.regions)
            .field("steps", &self.steps.len())
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
        });
        Ok(RegionId((self.regions.len() - 1) as u16))
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
        for (t, r) in io
            .inputs
            .iter()
            .zip(inputs)
            .chain(io.outputs.iter().zip(outputs))
        {
            let decl = self.regions.get(r.index()).ok_or(SpecError::NoSuchRegion {
                index: r.index(),
                count: self.regions.len(),
            })?;
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

    /// Make regions `a` and `b` exchange places after every run: a recurrent state's
    /// ping-pong, with nothing copied.
    ///
    /// A network reading its state from `a` and writing the next state to `b` reads, on the
    /// next run, what it just wrote, and writes over the state it read. Region ids stay
    /// logical: after each run, `a` names the buffer the next run reads as `a` (the state
    /// just produced), so [`super::Session::read_region`] and
    /// [`super::Session::write_region`] on `a` read and set the current state.
    ///
    /// Both regions start zeroed (a fresh state). On the host the two buffers are swapped
    /// after each run; on a device the session holds one executor per parity for the
    /// networks bound to them (each bound once) and captures one set of CUDA graphs per
    /// parity, so the state never leaves the device and a run is still one launch.
    ///
    /// Both must be [`RegionKind::Internal`] regions of the same size, in no other pair;
    /// stages may not name them (only networks), which [`super::Session::new`] checks.
    ///
    /// # Errors
    /// [`SpecError::PingPong`] naming the regions and what does not fit.
    pub fn ping_pong(&mut self, a: RegionId, b: RegionId) -> Result<(), SpecError> {
        let decl = |r: RegionId| {
            self.regions.get(r.index()).ok_or(SpecError::NoSuchRegion {
                index: r.index(),
                count: self.regions.len(),
            })
        };
        let (da, db) = (decl(a)?, decl(b)?);
        let refuse = |detail: String| SpecError::PingPong {
            regions: format!("`{}` and `{}`", da.name, db.name),
            detail,
        };
        if a == b {
            return Err(refuse("a region cannot swap with itself".into()));
        }
        if da.kind != RegionKind::Internal || db.kind != RegionKind::Internal {
            return Err(refuse(format!(
                "they are {:?} and {:?} regions; only internal regions swap",
                da.kind, db.kind
            )));
        }
        if da.bytes != db.bytes {
            return Err(refuse(format!(
                "they hold {} and {} bytes",
                da.bytes, db.bytes
            )));
        }
        if self
            .ping_pong
            .iter()
            .any(|&(x, y)| [x, y].contains(&a) || [x, y].contains(&b))
        {
            return Err(refuse(
                "one of them already swaps with another region".into(),
            ));
        }
        self.ping_pong.push((a, b));
        Ok(())
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
    /// Regions that cannot exchange places ([`PipelineSpec::ping_pong`]).
    #[error("regions {regions} cannot ping-pong: {detail}")]
    PingPong {
        /// The two regions.
        regions: String,
        /// Why not.
        detail: String,
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

/// Check a stage's declared regions: each exists and appears once, and none is a region of
/// a ping-pong pair (only networks swap).
pub(crate) fn check_stage_regions(
    stage: &dyn super::Stage,
    regions: &[RegionDecl],
    ping_pong: &[(RegionId, RegionId)],
) -> Result<(), SpecError> {
    let mut seen = [false; MAX_REGIONS];
    for r in stage.reads().iter().chain(stage.writes()) {
        let decl = regions.get(r.index()).ok_or(SpecError::NoSuchRegion {
            index: r.index(),
            count: regions.len(),
        })?;
        if let Some(&(a, b)) = ping_pong.iter().find(|(a, b)| a == r || b == r) {
            return Err(SpecError::PingPong {
                regions: format!(
                    "`{}` and `{}`",
                    regions[a.index()].name,
                    regions[b.index()].name
                ),
                detail: format!("stage `{}` names one of them", stage.name()),
            });
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
