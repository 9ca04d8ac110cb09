//! The host session: every region an aligned host buffer, allocated once.

use std::time::Instant;

use heapless::Vec as HVec;

use super::spec::{MAX_NETWORK_IO, MAX_REGIONS, PipelineSpec, RegionDecl, RegionKind, Step};
use super::state::{AppendStep, StateBook, StateId, StateKind};
use super::{RegionId, Stage};
use crate::backend::{HostExecutor, Plan, RunError};
use crate::error::Error;
use crate::tensor::HostBuffer;

/// Views of the regions a stage declared, handed to [`Stage::run_host`].
pub struct HostIo<'a> {
    buffers: &'a mut [HostBuffer],
}

/// Immutable views of `R` regions and mutable views of `W` regions.
pub type Views<'b, const R: usize, const W: usize> = ([&'b [u8]; R], [&'b mut [u8]; W]);

impl<'a> HostIo<'a> {
    /// Borrow `reads` immutably and `writes` mutably at once, in the order given.
    ///
    /// # Errors
    /// [`RunError::NoSuchRegion`] for an unknown region or one named twice.
    pub fn split<const R: usize, const W: usize>(
        &mut self,
        reads: [RegionId; R],
        writes: [RegionId; W],
    ) -> Result<Views<'_, R, W>, RunError> {
        let mut slots: HVec<Option<&mut HostBuffer>, MAX_REGIONS> =
            self.buffers.iter_mut().map(Some).collect();
        let mut take = |id: RegionId| {
            slots
                .get_mut(id.index())
                .and_then(Option::take)
                .ok_or(RunError::NoSuchRegion {
                    index: id.index(),
                    what: "a region (or it was named twice)",
                })
        };
        let mut w: [Option<&mut [u8]>; W] = [const { None }; W];
        for (slot, id) in w.iter_mut().zip(writes) {
            *slot = Some(take(id)?.as_bytes_mut());
        }
        let mut r: [Option<&[u8]>; R] = [None; R];
        for (slot, id) in r.iter_mut().zip(reads) {
            *slot = Some(take(id)?.as_bytes());
        }
        Ok((
            r.map(|x| x.unwrap_or(&[])),
            w.map(|x| x.unwrap_or_default()),
        ))
    }

    /// One region, read-only.
    ///
    /// # Errors
    /// [`RunError::NoSuchRegion`].
    pub fn read(&self, id: RegionId) -> Result<&[u8], RunError> {
        self.buffers
            .get(id.index())
            .map(HostBuffer::as_bytes)
            .ok_or(RunError::NoSuchRegion {
                index: id.index(),
                what: "a region",
            })
    }

    /// One region, writable.
    ///
    /// # Errors
    /// [`RunError::NoSuchRegion`].
    pub fn write(&mut self, id: RegionId) -> Result<&mut [u8], RunError> {
        self.buffers
            .get_mut(id.index())
            .map(HostBuffer::as_bytes_mut)
            .ok_or(RunError::NoSuchRegion {
                index: id.index(),
                what: "a region",
            })
    }
}

enum HostStep {
    Stage(Box<dyn Stage>),
    Network {
        executor: Box<dyn HostExecutor>,
        inputs: Vec<RegionId>,
        outputs: Vec<RegionId>,
        /// Keeps the plan alive as long as its executor.
        _plan: Plan,
    },
    AppendRows(AppendStep),
}

pub(crate) struct HostSession {
    regions: Vec<RegionDecl>,
    buffers: Vec<HostBuffer>,
    steps: Vec<HostStep>,
    times: Vec<(String, f64)>,
    /// The request state: positions, and the recurrent pairs whose buffers are swapped
    /// after every run.
    states: StateBook,
}

impl std::fmt::Debug for HostSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSession")
            .field("regions", &self.regions)
            .field("steps", &self.steps.len())
            .finish()
    }
}

impl HostSession {
    pub(crate) fn new(spec: PipelineSpec) -> Result<Self, Error> {
        let PipelineSpec {
            regions,
            steps,
            warmups,
            states,
            ..
        } = spec;
        let mut buffers: Vec<HostBuffer> = regions
            .iter()
            .map(|r| HostBuffer::zeroed(r.bytes))
            .collect();
        let mut host_steps = Vec::with_capacity(steps.len());
        let mut times = Vec::with_capacity(steps.len());
        for step in steps {
            match step {
                Step::Stage(stage) => {
                    super::spec::check_stage_regions(stage.as_ref(), &regions, &states)?;
                    times.push((stage.name().to_string(), 0.0));
                    host_steps.push(HostStep::Stage(stage));
                }
                Step::Network(n) => {
                    let executor = match &n.plan {
                        Plan::Host(p) => p.executor()?,
                        #[cfg(feature = "cuda")]
                        Plan::Device(_) => {
                            return Err(super::SpecError::MixedPlacement {
                                detail: format!("network `{}` is not a host plan", n.name),
                            }
                            .into());
                        }
                    };
                    times.push((n.name.clone(), 0.0));
                    host_steps.push(HostStep::Network {
                        executor,
                        inputs: n.inputs,
                        outputs: n.outputs,
                        _plan: n.plan,
                    });
                }
                Step::AppendRows(a) => {
                    times.push((format!("append `{}`", region_name(&regions, a.0.rows)), 0.0));
                    host_steps.push(HostStep::AppendRows(a.0));
                }
            }
        }
        for (id, fill) in &warmups {
            if let Some(b) = buffers.get_mut(id.index()) {
                fill(b.as_bytes_mut());
            }
        }
        Ok(HostSession {
            regions,
            buffers,
            steps: host_steps,
            times,
            states: StateBook::new(states),
        })
    }

    fn region_of_kind(&self, id: RegionId, kind: RegionKind) -> Result<usize, RunError> {
        match self.regions.get(id.index()) {
            // A state's cursor is an input region the session writes itself.
            Some(r) if r.kind == kind && r.state.is_none() => Ok(id.index()),
            _ => Err(RunError::NoSuchRegion {
                index: id.index(),
                what: if kind == RegionKind::Input {
                    "an input region"
                } else {
                    "an output region"
                },
            }),
        }
    }

    pub(crate) fn input_mut(&mut self, id: RegionId) -> Result<&mut [u8], RunError> {
        let i = self.region_of_kind(id, RegionKind::Input)?;
        Ok(self.buffers[i].as_bytes_mut())
    }

    pub(crate) fn output(&self, id: RegionId) -> Result<&[u8], RunError> {
        let i = self.region_of_kind(id, RegionKind::Output)?;
        Ok(self.buffers[i].as_bytes())
    }

    pub(crate) fn read_region(&mut self, id: RegionId, dst: &mut [u8]) -> Result<(), RunError> {
        let b = self.buffers.get(id.index()).ok_or(RunError::NoSuchRegion {
            index: id.index(),
            what: "a region",
        })?;
        if dst.len() != b.len() {
            return Err(RunError::BufferSize {
                what: "region",
                index: id.index(),
                expected: b.len(),
                actual: dst.len(),
            });
        }
        dst.copy_from_slice(b.as_bytes());
        Ok(())
    }

    pub(crate) fn write_region(&mut self, id: RegionId, src: &[u8]) -> Result<(), RunError> {
        let b = self
            .buffers
            .get_mut(id.index())
            .ok_or(RunError::NoSuchRegion {
                index: id.index(),
                what: "a region",
            })?;
        if src.len() != b.len() {
            return Err(RunError::BufferSize {
                what: "region",
                index: id.index(),
                expected: b.len(),
                actual: src.len(),
            });
        }
        b.as_bytes_mut().copy_from_slice(src);
        Ok(())
    }

    pub(crate) fn step_times(&self) -> &[(String, f64)] {
        &self.times
    }

    pub(crate) fn states(&self) -> &StateBook {
        &self.states
    }

    pub(crate) fn states_mut(&mut self) -> &mut StateBook {
        &mut self.states
    }

    pub(crate) fn reset_states(&mut self) -> Result<(), RunError> {
        self.states.reset_appends();
        for (a, b) in self.states.recurrent_pairs() {
            self.buffers[a.index()].as_bytes_mut().fill(0);
            self.buffers[b.index()].as_bytes_mut().fill(0);
        }
        Ok(())
    }

    pub(crate) fn reset_state(&mut self, id: StateId) -> Result<(), RunError> {
        match self.states.decl(id)?.kind {
            StateKind::Recurrent { current, next } => {
                self.buffers[current.index()].as_bytes_mut().fill(0);
                self.buffers[next.index()].as_bytes_mut().fill(0);
            }
            StateKind::Append { slots, .. } => {
                for slot in 0..slots {
                    self.states.reset_slot(id, slot)?;
                }
            }
        }
        Ok(())
    }

    pub(crate) fn run(&mut self) -> Result<(), RunError> {
        // The cursors of this run (checked against the capacities first).
        let buffers = &mut self.buffers;
        self.states.begin(|region, fill| {
            fill(buffers[region.index()].as_bytes_mut());
            Ok(())
        })?;
        for (step, time) in self.steps.iter_mut().zip(self.times.iter_mut()) {
            let t0 = Instant::now();
            match step {
                HostStep::Stage(stage) => {
                    let mut io = HostIo {
                        buffers: &mut self.buffers,
                    };
                    stage.run_host(&mut io)?;
                }
                HostStep::Network {
                    executor,
                    inputs,
                    outputs,
                    ..
                } => {
                    run_network(executor.as_mut(), &mut self.buffers, inputs, outputs)?;
                }
                HostStep::AppendRows(a) => {
                    let mut io = HostIo {
                        buffers: &mut self.buffers,
                    };
                    let ([src, cursor], [rows]) = io.split([a.src, a.cursor], [a.rows])?;
                    a.run_host(src, cursor, rows);
                }
            }
            time.1 = t0.elapsed().as_secs_f64() * 1e3;
        }
        // The state just written becomes the state the next run reads (no copy: the
        // buffers, not their bytes, change places); the rows appended are valid.
        for (a, b) in self.states.recurrent_pairs() {
            self.buffers.swap(a.index(), b.index());
        }
        self.states.commit();
        Ok(())
    }
}

fn region_name(regions: &[RegionDecl], id: RegionId) -> &str {
    regions.get(id.index()).map_or("?", |r| r.name.as_str())
}

/// Run a host executor with its input regions borrowed immutably and its output regions
/// mutably (no allocation: fixed-capacity lists).
fn run_network(
    executor: &mut dyn HostExecutor,
    buffers: &mut [HostBuffer],
    inputs: &[RegionId],
    outputs: &[RegionId],
) -> Result<(), RunError> {
    let mut slots: HVec<Option<&mut HostBuffer>, MAX_REGIONS> =
        buffers.iter_mut().map(Some).collect();
    let mut outs: HVec<&mut [u8], MAX_NETWORK_IO> = HVec::new();
    for id in outputs {
        let b = slots
            .get_mut(id.index())
            .and_then(Option::take)
            .ok_or(RunError::NoSuchRegion {
                index: id.index(),
                what: "a region bound once",
            })?;
        outs.push(b.as_bytes_mut())
            .map_err(|_| RunError::Unsupported {
                what: "more network outputs than MAX_NETWORK_IO",
            })?;
    }
    let mut ins: HVec<&[u8], MAX_NETWORK_IO> = HVec::new();
    for id in inputs {
        let b = slots
            .get_mut(id.index())
            .and_then(Option::take)
            .ok_or(RunError::NoSuchRegion {
                index: id.index(),
                what: "a region bound once",
            })?;
        ins.push(b.as_bytes()).map_err(|_| RunError::Unsupported {
            what: "more network inputs than MAX_NETWORK_IO",
        })?;
    }
    executor.run(&ins, &mut outs)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::backend::{
        EngineKind, HostExecutor, HostPlan, IoSpec, Plan, PrepareError, RunError,
    };
    #[cfg(feature = "cuda")]
    use crate::session::SessionOptions;
    use crate::session::{Check, PipelineSpec, RegionKind, Session};
    use crate::tensor::{DType, IoMode, TensorSpec};

    const N: usize = 4;

    /// A recurrent toy network on f32 `[4]` tensors: `y = state`, `stateN = state + x`.
    struct Accumulate(IoSpec);

    fn spec(name: &str, mode: IoMode) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            mode,
            dtype: DType::F32,
            shape: vec![N],
        }
    }

    impl HostPlan for Accumulate {
        fn kind(&self) -> EngineKind {
            EngineKind::TractCpu
        }
        fn io(&self) -> &IoSpec {
            &self.0
        }
        fn executor(&self) -> Result<Box<dyn HostExecutor>, PrepareError> {
            Ok(Box::new(AccumulateRun))
        }
    }

    struct AccumulateRun;

    fn f32s(b: &[u8]) -> impl Iterator<Item = f32> + '_ {
        b.chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
    }

    impl HostExecutor for AccumulateRun {
        fn run(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), RunError> {
            let (x, state) = (inputs[0], inputs[1]);
            let [y, next] = outputs else {
                return Err(RunError::BufferCount {
                    what: "outputs",
                    expected: 2,
                    actual: outputs.len(),
                });
            };
            y.copy_from_slice(state);
            for (i, v) in f32s(x).zip(f32s(state)).map(|(a, b)| a + b).enumerate() {
                next[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
            }
            Ok(())
        }
    }

    fn session() -> (
        Session,
        crate::session::RecurrentState,
        [crate::session::RegionId; 2],
    ) {
        let plan = Plan::Host(Arc::new(Accumulate(IoSpec {
            inputs: vec![spec("x", IoMode::Input), spec("state", IoMode::Input)],
            outputs: vec![spec("y", IoMode::Output), spec("stateN", IoMode::Output)],
        })));
        let mut s = PipelineSpec::new();
        let x = s.region("x", 16, RegionKind::Input, Check::Exact).unwrap();
        let st = s.recurrent_state("state", 16, Check::Exact).unwrap();
        let y = s.region("y", 16, RegionKind::Output, Check::Exact).unwrap();
        s.network("acc", plan, &[x, st.current], &[y, st.next])
            .unwrap();
        let session = Session::new(
            s,
            #[cfg(feature = "cuda")]
            &SessionOptions::default(),
        )
        .unwrap();
        (session, st, [x, y])
    }

    fn read(session: &mut Session, id: crate::session::RegionId) -> Vec<f32> {
        let mut b = [0u8; 16];
        session.read_region(id, &mut b).unwrap();
        f32s(&b).collect()
    }

    /// The state a run writes is the state the next run reads, under the same region id,
    /// without a copy; `write_region` sets it, `reset_state` zeroes it.
    #[test]
    fn a_recurrent_state_is_carried_between_runs() {
        let (mut session, state, [x, y]) = session();
        let st = state.current;
        assert_eq!(read(&mut session, st), [0.0; N], "a fresh state is zero");
        for run in 1..=3 {
            session
                .input_mut(x)
                .unwrap()
                .copy_from_slice(bytes(&[1.0, 2.0, 3.0, 4.0]).as_slice());
            session.run().unwrap();
            let k = run as f32;
            assert_eq!(read(&mut session, st), [k, 2.0 * k, 3.0 * k, 4.0 * k]);
            let y: Vec<f32> = f32s(session.output(y).unwrap()).collect();
            assert_eq!(
                y,
                [k - 1.0, 2.0 * (k - 1.0), 3.0 * (k - 1.0), 4.0 * (k - 1.0)]
            );
        }
        session.write_region(st, &[0u8; 16]).unwrap();
        session.run().unwrap();
        assert_eq!(
            read(&mut session, st),
            [1.0, 2.0, 3.0, 4.0],
            "set by write_region"
        );
        let e = session.write_region(st, &[0u8; 8]).unwrap_err();
        assert!(
            matches!(
                e,
                RunError::BufferSize {
                    expected: 16,
                    actual: 8,
                    ..
                }
            ),
            "{e}"
        );
        // A new request: both regions zeroed, whichever holds the current state.
        session.reset_state(state.id).unwrap();
        assert_eq!(read(&mut session, st), [0.0; N]);
        assert_eq!(read(&mut session, state.next), [0.0; N]);
        session.run().unwrap();
        session.run().unwrap();
        session.reset_states().unwrap();
        assert_eq!(
            read(&mut session, st),
            [0.0; N],
            "reset_states zeroes it too"
        );
        assert_eq!(session.state_name(state.id).unwrap(), "state");
        assert!(matches!(
            session.cursor(state.id, 0),
            Err(crate::session::StateError::NotAppendable { state: 0 })
        ));
    }

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|f| f.to_ne_bytes()).collect()
    }

    /// Only networks name a recurrent state's regions: a stage would see one buffer under
    /// both parities.
    #[test]
    fn a_stage_may_not_name_a_recurrent_state() {
        struct Peek([crate::session::RegionId; 1]);
        impl crate::session::Stage for Peek {
            fn name(&self) -> &str {
                "peek"
            }
            fn reads(&self) -> &[crate::session::RegionId] {
                &self.0
            }
            fn writes(&self) -> &[crate::session::RegionId] {
                &[]
            }
            fn run_host(&mut self, _: &mut crate::session::HostIo<'_>) -> Result<(), RunError> {
                Ok(())
            }
        }
        let mut s = PipelineSpec::new();
        let st = s.recurrent_state("h", 16, Check::Exact).unwrap();
        s.stage(Box::new(Peek([st.next])));
        let e = Session::new(
            s,
            #[cfg(feature = "cuda")]
            &SessionOptions::default(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("request state `h`: stage `peek` names a region of this recurrent state"),
            "{e}"
        );
    }
}
