//! Building a [`DeviceSession`]: kernels, the memory plan, staging, the steps bound to their
//! regions, then the warm-up run and the capture. Load time only: everything allocated here
//! is allocated once.

use crate::backend::{Bindings, Plan};
use crate::cuda::{
    ArenaPlan, Context, CudaError, DeviceArena, DeviceProperties, DeviceRegion, Event,
    KernelModule, ModuleSource, PinnedBuffer, RegionId as ArenaRegionId, Stream,
};
use crate::error::Error;
use crate::session::spec::{PipelineSpec, RegionDecl, RegionKind, SpecError, Step};
use crate::session::state::{StateBook, StateDecl};
use crate::session::{RegionId, Warmup};

use super::append::{self, AppendLaunch};
use super::{
    DStep, DeviceRegions, DeviceSession, ExecMode, MappedIo, MemoryBudget, SessionOptions, Staged,
    step_name, swapped,
};

fn spec_err(detail: String) -> Error {
    SpecError::MixedPlacement { detail }.into()
}

/// See [`DeviceSession::new`].
pub(super) fn build(spec: PipelineSpec, options: &SessionOptions) -> Result<DeviceSession, Error> {
    let Some(ctx) = options.context.clone() else {
        return Err(spec_err(
            "a device session needs the model's CUDA context".into(),
        ));
    };
    let props = ctx.properties().clone();
    ctx.bind().map_err(CudaError::from)?;
    let (free_before, _) = ctx.mem_info().map_err(CudaError::from)?;
    let stream = Stream::new(&ctx, options.sync).map_err(CudaError::from)?;
    let PipelineSpec {
        regions,
        steps,
        warmups,
        kernels,
        states,
    } = spec;
    let module = kernels
        .map(|src| load_module(&ctx, src, options.allow_nvrtc))
        .transpose()?;
    let state_module = steps
        .iter()
        .any(|s| matches!(s, Step::AppendRows(_)))
        .then(|| load_module(&ctx, append::module_source(), options.allow_nvrtc))
        .transpose()?;
    let staging = StagingPlacement::of(options.mapped, &props);
    let memory = plan_memory(&ctx, &props, &regions, &steps, staging)?;
    let (inputs, outputs, device) = stage_regions(&ctx, &regions, &memory, staging)?;
    let states = StateBook::new(states);
    let pairs: Vec<(RegionId, RegionId)> = states.recurrent_pairs().collect();
    let dsteps = bind_steps(
        &ctx,
        steps,
        &StepEnv {
            regions: &regions,
            states: states.decls(),
            pairs: &pairs,
            memory: &memory,
            device: &device,
            module: module.as_ref(),
            state_module: state_module.as_ref(),
        },
    )?;
    let times = dsteps
        .iter()
        .map(|s| (step_name(s).to_string(), 0.0))
        .collect();
    let events = if options.step_timing {
        (0..=dsteps.len())
            .map(|_| Event::new(&ctx, true, false))
            .collect::<Result<Vec<_>, _>>()
            .map_err(CudaError::from)?
    } else {
        Vec::new()
    };
    let Memory {
        arena,
        workspace_bytes,
        weights,
        ..
    } = memory;
    // The two events of a run on a caller's stream (no timing: only ordering).
    let ready = Event::new(&ctx, false, false).map_err(CudaError::from)?;
    let finished = Event::new(&ctx, false, false).map_err(CudaError::from)?;
    let mut session = DeviceSession {
        segments: Vec::new(),
        alt_segments: Vec::new(),
        device_segments: Vec::new(),
        steps: dsteps,
        events,
        ready,
        finished,
        device_io: options.device_io,
        module,
        _state_module: state_module,
        inputs,
        outputs,
        arena,
        stream,
        ctx,
        regions,
        device,
        mode: ExecMode::Eager,
        note: String::new(),
        budget: MemoryBudget::default(),
        times,
        states,
        pairs,
        parity: 0,
    };
    session.warm_up(&warmups)?;
    if options.graphs {
        session.capture()?;
    } else {
        session.note = "graphs disabled by options".into();
    }
    // A fresh state for the first request.
    session.zero_states()?;
    session.parity = 0;
    session.measure(free_before, workspace_bytes, weights)?;
    session.log_load(&props);
    Ok(session)
}

/// Load a kernel module, NVRTC allowed when the session's options allow it.
fn load_module(
    ctx: &Context,
    mut src: ModuleSource,
    allow_nvrtc: bool,
) -> Result<KernelModule, CudaError> {
    src.allow_nvrtc |= allow_nvrtc;
    KernelModule::load(ctx, src)
}

/// Which staging is mapped into the device address space.
#[derive(Clone, Copy)]
struct StagingPlacement {
    inputs: bool,
    outputs: bool,
}

impl StagingPlacement {
    fn of(mapped: MappedIo, props: &DeviceProperties) -> Self {
        let (inputs, outputs) = match mapped {
            MappedIo::Auto => {
                let m = props.integrated && props.can_map_host_memory;
                (m, m)
            }
            MappedIo::Always => (true, true),
            MappedIo::Never => (false, false),
            MappedIo::Outputs => (false, true),
        };
        StagingPlacement { inputs, outputs }
    }

    fn mapped(self, kind: RegionKind) -> bool {
        match kind {
            RegionKind::Input => self.inputs,
            RegionKind::Output => self.outputs,
            RegionKind::Internal => false,
        }
    }
}

/// The arena: every region not mapped, then one workspace per network.
struct Memory {
    arena: DeviceArena,
    /// Per spec region: its arena region (`None` when it lives in mapped staging).
    arena_ids: Vec<Option<ArenaRegionId>>,
    /// One per network step, in order.
    workspaces: Vec<ArenaRegionId>,
    workspace_bytes: usize,
    weights: usize,
}

fn plan_memory(
    ctx: &Context,
    props: &DeviceProperties,
    regions: &[RegionDecl],
    steps: &[Step],
    staging: StagingPlacement,
) -> Result<Memory, Error> {
    let mut plan = ArenaPlan::new();
    let mut arena_ids = Vec::with_capacity(regions.len());
    for r in regions {
        arena_ids.push(if staging.mapped(r.kind) {
            None
        } else {
            Some(plan.add(r.name.clone(), r.bytes)?)
        });
    }
    let mut workspaces = Vec::new();
    let mut workspace_bytes = 0usize;
    let mut weights = 0usize;
    for step in steps {
        let Step::Network(n) = step else { continue };
        let Plan::Device(p) = &n.plan else {
            return Err(spec_err(format!(
                "network `{}` is a host plan in a device session",
                n.name
            )));
        };
        if p.ordinal() != props.ordinal {
            return Err(spec_err(format!(
                "network `{}` was prepared on CUDA device {}, the session is on device {}",
                n.name,
                p.ordinal(),
                props.ordinal
            )));
        }
        let ws = p.workspace();
        workspace_bytes += ws.bytes;
        weights += p.memory().weights_bytes;
        workspaces.push(plan.add_aligned(
            format!("{}: workspace", n.name),
            ws.bytes,
            ws.align.max(crate::cuda::DEFAULT_ALIGN),
        )?);
    }
    log::debug!("{}", plan.describe());
    let arena = DeviceArena::new(ctx, plan).map_err(CudaError::from)?;
    Ok(Memory {
        arena,
        arena_ids,
        workspaces,
        workspace_bytes,
        weights,
    })
}

/// Page-locked staging for the input and output regions, and every region's device memory.
fn stage_regions(
    ctx: &Context,
    regions: &[RegionDecl],
    memory: &Memory,
    staging: StagingPlacement,
) -> Result<(Vec<Staged>, Vec<Staged>, DeviceRegions), Error> {
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    let mut device = Vec::with_capacity(regions.len());
    for (i, r) in regions.iter().enumerate() {
        let mapped = staging.mapped(r.kind);
        let host = match r.kind {
            RegionKind::Internal => None,
            _ => Some(PinnedBuffer::new(ctx, r.bytes, mapped)?),
        };
        let dev = match (&host, memory.arena_ids[i]) {
            (_, Some(a)) => memory.arena.region(a),
            (Some(s), None) => DeviceRegion::new(s.device_ptr().unwrap_or_default(), r.bytes),
            (None, None) => DeviceRegion::EMPTY,
        };
        device.push(dev);
        if let Some(host) = host {
            let st = Staged {
                region: RegionId(i as u16),
                host,
                device: dev,
                mapped,
            };
            match r.kind {
                RegionKind::Input => inputs.push(st),
                _ => outputs.push(st),
            }
        }
    }
    Ok((inputs, outputs, DeviceRegions { regions: device }))
}

/// What binding the steps needs to know.
struct StepEnv<'a> {
    regions: &'a [RegionDecl],
    states: &'a [StateDecl],
    pairs: &'a [(RegionId, RegionId)],
    memory: &'a Memory,
    device: &'a DeviceRegions,
    module: Option<&'a KernelModule>,
    state_module: Option<&'a KernelModule>,
}

/// Stages prepared, executors created and bound, appends resolved; upload first, download
/// last.
fn bind_steps(ctx: &Context, steps: Vec<Step>, c: &StepEnv<'_>) -> Result<Vec<DStep>, Error> {
    let mut dsteps = vec![DStep::Upload];
    let mut workspaces = c.memory.workspaces.iter();
    for step in steps {
        dsteps.push(match step {
            Step::Stage(mut stage) => {
                crate::session::spec::check_stage_regions(stage.as_ref(), c.regions, c.states)?;
                stage.prepare_device(c.module, c.device)?;
                DStep::Stage(stage)
            }
            Step::Network(n) => {
                let ws = workspaces.next().map(|w| c.memory.arena.region(*w));
                bind_network(ctx, n, ws.unwrap_or(DeviceRegion::EMPTY), c)?
            }
            Step::AppendRows(a) => {
                let module = c.state_module.ok_or_else(|| {
                    CudaError::Invalid("the request state's kernels are not loaded".into())
                })?;
                DStep::AppendRows {
                    name: format!("append `{}`", c.regions[a.0.rows.index()].name),
                    launch: AppendLaunch::new(module, &a.0, |r| c.device.regions[r.index()])?,
                }
            }
        });
    }
    dsteps.push(DStep::Download);
    Ok(dsteps)
}

/// A network's executor bound to its regions; a network naming a recurrent state's region
/// gets a second executor for odd runs, bound with each pair swapped. Both share the
/// workspace: runs never overlap.
fn bind_network(
    ctx: &Context,
    n: crate::session::NetworkStep,
    workspace: DeviceRegion,
    c: &StepEnv<'_>,
) -> Result<DStep, Error> {
    let Plan::Device(p) = &n.plan else {
        return Err(spec_err(format!(
            "network `{}` is a host plan in a device session",
            n.name
        )));
    };
    let swaps = n
        .inputs
        .iter()
        .chain(&n.outputs)
        .any(|r| swapped(c.pairs, 1, *r) != *r);
    let mut bound = Vec::with_capacity(2);
    for parity in 0..if swaps { 2 } else { 1 } {
        let mut executor = p.executor(ctx)?;
        let at = |r: &RegionId| c.device.regions[swapped(c.pairs, parity, *r).index()];
        let ins: Vec<DeviceRegion> = n.inputs.iter().map(at).collect();
        let outs: Vec<DeviceRegion> = n.outputs.iter().map(at).collect();
        // SAFETY: every region lies in this session's arena or mapped staging, sized by the
        // spec (checked against the plan's tensors when the network was added; the two
        // regions of a recurrent state have the same size), and lives as long as the
        // session, which owns the executor.
        unsafe {
            executor.bind(&Bindings {
                inputs: &ins,
                outputs: &outs,
                workspace,
            })
        }?;
        bound.push(executor);
    }
    let alternate = if bound.len() == 2 { bound.pop() } else { None };
    let Some(executor) = bound.pop() else {
        unreachable!("one executor per parity, at least one");
    };
    Ok(DStep::Network {
        name: n.name,
        executor,
        alternate,
        safety: p.capture_safety(),
        _plan: n.plan,
    })
}

impl DeviceSession {
    /// The eager warm-up run (first-run initialisation is illegal under capture), on the
    /// spec's warm-up inputs and a zero state.
    fn warm_up(&mut self, warmups: &[(RegionId, Warmup)]) -> Result<(), Error> {
        for (id, fill) in warmups {
            if let Some(s) = self.inputs.iter_mut().find(|s| s.region == *id) {
                fill(s.host.as_mut_slice());
            }
        }
        self.zero_states()?;
        self.run()?;
        Ok(())
    }

    /// The memory budget, measured after load.
    fn measure(
        &mut self,
        free_before: usize,
        workspace_bytes: usize,
        weights: usize,
    ) -> Result<(), Error> {
        let (free_after, _) = self.ctx.mem_info().map_err(CudaError::from)?;
        let staged = || self.inputs.iter().chain(&self.outputs);
        self.budget = MemoryBudget {
            device_arena: self.arena.plan().total_bytes(),
            workspaces: workspace_bytes,
            weights,
            pinned: staged().map(|s| s.host.len()).sum(),
            mapped: staged().filter(|s| s.mapped).map(|s| s.host.len()).sum(),
            device_used_by_load: free_before as isize - free_after as isize,
        };
        Ok(())
    }

    /// One `info` line: device, execution mode, kernels, memory.
    fn log_load(&self, props: &DeviceProperties) {
        let b = &self.budget;
        log::info!(
            "session on {} (sm_{}, {}): {:?} ({}); kernels {}; memory: arena {} B (workspaces {} B), weights {} B, pinned {} B{}, device in use after load +{} B",
            props.name,
            props.sm(),
            if props.integrated {
                "integrated"
            } else {
                "discrete"
            },
            self.mode,
            self.note,
            self.module.as_ref().map_or("none", |m| m.image.as_str()),
            b.device_arena,
            b.workspaces,
            b.weights,
            b.pinned,
            if b.mapped == 0 {
                String::new()
            } else {
                format!(" ({} B mapped)", b.mapped)
            },
            b.device_used_by_load
        );
    }
}
