//! The device session: one arena, page-locked staging, kernels, executors, CUDA graphs.
//!
//! What [`DeviceSession::new`] prepares, all of it once:
//! * the stream (a non-blocking stream of the model's context, with the chosen
//!   [`SyncPolicy`]);
//! * the spec's kernel module (embedded images chosen by driver major and SM; NVRTC only
//!   when allowed);
//! * one [`DeviceArena`]: every region of the spec and every executor's workspace, planned
//!   with [`ArenaPlan`] and taken in one `cuMemAlloc`; page-locked staging for the input and
//!   output regions — *mapped* into the device address space on an integrated GPU (or with
//!   [`MappedIo::Always`]), where kernels then read and write the host buffers in place and
//!   the copies disappear;
//! * the executors, bound to their regions and workspaces;
//! * an eager warm-up run (first-run initialisation is illegal under capture: field.md 1),
//!   then the capture of the whole frame — upload, stages, networks, download — into one CUDA
//!   graph when every executor is capture-safe, else into graphs split around the executors
//!   that are not (the reason is logged); then one replay on poisoned buffers compared region
//!   by region with the eager run ([`Check`]); a mismatch disables the graphs and says why
//!   (field.md 2: a replay that silently returns stale data is the failure to prevent).
//!
//! Per frame ([`DeviceSession::run`]): one graph launch (or a few, split), one wait. No host
//! or device allocation.

use std::fmt;

use crate::backend::{Bindings, CaptureSafety, DeviceExecutor, Enqueue, Plan, RunError};
use crate::cuda::{
    ArenaPlan, Context, CudaError, DeviceArena, DeviceRegion, Event, Graph, KernelModule,
    PinnedBuffer, RegionId as ArenaRegionId, Stream, SyncPolicy,
};
use crate::error::Error;

use super::spec::{Check, PipelineSpec, RegionDecl, RegionKind, SpecError, Step};
use super::{RegionId, Stage};

/// Whether host staging is mapped into the device address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MappedIo {
    /// Mapped on integrated GPUs (Jetson, DRIVE), copied on discrete ones.
    #[default]
    Auto,
    /// Always mapped (works on discrete GPUs too: kernels then read over the bus).
    Always,
    /// Never mapped: explicit copies inside the graph.
    Never,
}

/// How a device session is built.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The device's context (the model's). Required for a device session; a spec of host
    /// plans with a context and no network builds a device session of stages only.
    pub context: Option<Context>,
    /// How the host waits for each run.
    pub sync: SyncPolicy,
    /// Mapped (zero-copy) staging.
    pub mapped: MappedIo,
    /// Capture CUDA graphs (default). `false` runs every step eagerly (for comparison).
    pub graphs: bool,
    /// Record a timing event between steps (inside the graph) and report GPU time per step
    /// in [`DeviceSession::step_times`]. Off by default: events cost a little.
    pub step_timing: bool,
    /// Compile the stages' kernels from source with NVRTC when no embedded image loads.
    pub allow_nvrtc: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            context: None,
            sync: SyncPolicy::Spin,
            mapped: MappedIo::Auto,
            graphs: true,
            step_timing: false,
            allow_nvrtc: false,
        }
    }
}

/// How runs execute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecMode {
    /// One CUDA graph per run: upload, stages, networks, download.
    WholeGraph,
    /// Graphs around executors that cannot be captured; those run eagerly in between.
    SplitGraphs,
    /// Every step launched eagerly (graphs disabled, failed, or failed the check).
    Eager,
}

/// Memory of a device session, measured at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryBudget {
    /// Bytes of the session's device arena (one allocation): regions and workspaces.
    pub device_arena: usize,
    /// Of the arena, bytes of executor workspaces (intermediate tensors, library scratch).
    pub workspaces: usize,
    /// Bytes of weights held by the session's plans (uploaded once per plan, shared).
    pub weights: usize,
    /// Page-locked host bytes (input and output staging).
    pub pinned: usize,
    /// Of those, bytes mapped into the device address space.
    pub mapped: usize,
    /// Device memory the driver reported in use after load minus before (arena, kernel
    /// module, and whatever an executor allocated itself).
    pub device_used_by_load: isize,
}

/// The device address of every region, for [`Stage::prepare_device`].
#[derive(Debug, Clone)]
pub struct DeviceRegions {
    regions: Vec<DeviceRegion>,
}

impl DeviceRegions {
    /// Region `id`'s address and length.
    ///
    /// # Errors
    /// [`CudaError::Plan`] for an id from another spec.
    pub fn get(&self, id: RegionId) -> Result<DeviceRegion, CudaError> {
        self.regions
            .get(id.index())
            .copied()
            .ok_or_else(|| CudaError::Plan(format!("region {} does not exist", id.index())))
    }
}

/// GPU or host time per step of the last run, in milliseconds.
pub type StepTimes = [(String, f64)];

struct Staged {
    region: RegionId,
    host: PinnedBuffer,
    device: DeviceRegion,
    mapped: bool,
}

enum DStep {
    Upload,
    Stage(Box<dyn Stage>),
    Network {
        name: String,
        executor: Box<dyn DeviceExecutor>,
        safety: CaptureSafety,
        _plan: Plan,
    },
    Download,
}

enum Segment {
    Graph(Graph),
    Eager(usize),
}

/// A pipeline prepared on one CUDA device. Not `Sync` (one run at a time); `Send`: it may
/// move between threads (the context is bound on whichever thread runs it).
pub struct DeviceSession {
    // Field order is drop order: graphs before the steps, module and memory they reference.
    segments: Vec<Segment>,
    steps: Vec<DStep>,
    events: Vec<Event>,
    module: Option<KernelModule>,
    inputs: Vec<Staged>,
    outputs: Vec<Staged>,
    arena: DeviceArena,
    stream: Stream,
    ctx: Context,
    regions: Vec<RegionDecl>,
    device: DeviceRegions,
    mode: ExecMode,
    note: String,
    budget: MemoryBudget,
    times: Vec<(String, f64)>,
}

impl fmt::Debug for DeviceSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceSession")
            .field("device", &self.ctx.properties().name)
            .field("mode", &self.mode)
            .field("note", &self.note)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

fn spec_err(detail: String) -> Error {
    SpecError::MixedPlacement { detail }.into()
}

impl DeviceSession {
    /// Prepare `spec` on the device of `options.context`.
    ///
    /// # Errors
    /// [`Error::Spec`] (no context, host plans, a plan of another device, a stage without
    /// a device flavour), device errors, executor creation errors, [`Error::Run`] when the
    /// warm-up run fails.
    pub fn new(spec: PipelineSpec, options: &SessionOptions) -> Result<Self, Error> {
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
        } = spec;

        let module = match kernels {
            Some(src) => {
                let mut src = src;
                src.allow_nvrtc |= options.allow_nvrtc;
                Some(KernelModule::load(&ctx, src)?)
            }
            None => None,
        };

        // --- memory plan: regions, then workspaces
        let mapped = match options.mapped {
            MappedIo::Auto => props.integrated && props.can_map_host_memory,
            MappedIo::Always => true,
            MappedIo::Never => false,
        };
        let mut plan = ArenaPlan::new();
        let mut arena_ids: Vec<Option<ArenaRegionId>> = Vec::with_capacity(regions.len());
        for r in &regions {
            let staged = r.kind != RegionKind::Internal;
            arena_ids.push(if staged && mapped {
                None
            } else {
                Some(plan.add(r.name.clone(), r.bytes)?)
            });
        }
        let mut workspaces = Vec::new();
        let mut workspace_bytes = 0usize;
        let mut weights = 0usize;
        for step in &steps {
            if let Step::Network(n) = step {
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
        }
        log::debug!("{}", plan.describe());
        let arena = DeviceArena::new(&ctx, plan).map_err(CudaError::from)?;

        // --- staging
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        let mut device = Vec::with_capacity(regions.len());
        for (i, r) in regions.iter().enumerate() {
            let id = RegionId(i as u16);
            let staging = match r.kind {
                RegionKind::Internal => None,
                _ => Some(PinnedBuffer::new(&ctx, r.bytes, mapped)?),
            };
            let dev = match (&staging, arena_ids[i]) {
                (_, Some(a)) => arena.region(a),
                (Some(s), None) => DeviceRegion::new(s.device_ptr().unwrap_or_default(), r.bytes),
                (None, None) => DeviceRegion::EMPTY,
            };
            device.push(dev);
            if let Some(host) = staging {
                let st = Staged {
                    region: id,
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
        let device = DeviceRegions { regions: device };

        // --- steps: stages prepared, executors created and bound
        let mut dsteps = vec![DStep::Upload];
        let mut ws_iter = workspaces.iter();
        for step in steps {
            match step {
                Step::Stage(mut stage) => {
                    super::spec::check_stage_regions(stage.as_ref(), &regions)?;
                    stage.prepare_device(module.as_ref(), &device)?;
                    dsteps.push(DStep::Stage(stage));
                }
                Step::Network(n) => {
                    let Plan::Device(p) = &n.plan else {
                        unreachable!("checked above");
                    };
                    let mut executor = p.executor(&ctx)?;
                    let ws = ws_iter.next().map(|w| arena.region(*w));
                    let ins: Vec<DeviceRegion> =
                        n.inputs.iter().map(|r| device.regions[r.index()]).collect();
                    let outs: Vec<DeviceRegion> = n
                        .outputs
                        .iter()
                        .map(|r| device.regions[r.index()])
                        .collect();
                    // SAFETY: every region lies in this session's arena or mapped staging,
                    // sized by the spec (checked against the plan's tensors when the network
                    // was added), and lives as long as the session, which owns the executor.
                    unsafe {
                        executor.bind(&Bindings {
                            inputs: &ins,
                            outputs: &outs,
                            workspace: ws.unwrap_or(DeviceRegion::EMPTY),
                        })
                    }?;
                    dsteps.push(DStep::Network {
                        name: n.name,
                        executor,
                        safety: p.capture_safety(),
                        _plan: n.plan,
                    });
                }
            }
        }
        dsteps.push(DStep::Download);

        let mut times = Vec::with_capacity(dsteps.len());
        for s in &dsteps {
            times.push((step_name(s).to_string(), 0.0));
        }
        let events = if options.step_timing {
            (0..=dsteps.len())
                .map(|_| Event::new(&ctx, true, false))
                .collect::<Result<Vec<_>, _>>()
                .map_err(CudaError::from)?
        } else {
            Vec::new()
        };

        let pinned: usize = inputs.iter().chain(&outputs).map(|s| s.host.len()).sum();
        let mut session = DeviceSession {
            segments: Vec::new(),
            steps: dsteps,
            events,
            module,
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
        };

        // --- warm-up (eager), then graphs checked against it
        for (id, fill) in &warmups {
            if let Some(s) = session.inputs.iter_mut().find(|s| s.region == *id) {
                fill(s.host.as_mut_slice());
            }
        }
        session.run()?;
        if options.graphs {
            session.capture()?;
        } else {
            session.note = "graphs disabled by options".into();
        }
        let (free_after, _) = session.ctx.mem_info().map_err(CudaError::from)?;
        session.budget = MemoryBudget {
            device_arena: session.arena.plan().total_bytes(),
            workspaces: workspace_bytes,
            weights,
            pinned,
            mapped: if mapped { pinned } else { 0 },
            device_used_by_load: free_before as isize - free_after as isize,
        };
        log::info!(
            "session on {} (sm_{}, {}): {:?} ({}); kernels {}; memory: arena {} B (workspaces {} B), weights {} B, pinned {} B{}, device in use after load +{} B",
            props.name,
            props.sm(),
            if props.integrated {
                "integrated"
            } else {
                "discrete"
            },
            session.mode,
            session.note,
            session.module.as_ref().map_or("none", |m| m.image.as_str()),
            session.budget.device_arena,
            session.budget.workspaces,
            session.budget.weights,
            session.budget.pinned,
            if mapped { " (mapped)" } else { "" },
            session.budget.device_used_by_load
        );
        Ok(session)
    }

    // ------------------------------------------------------------------ per run (no alloc)

    fn enqueue(&mut self, i: usize, mode: Enqueue) -> Result<(), RunError> {
        enqueue_step(
            &self.stream,
            &mut self.steps,
            &self.inputs,
            &mut self.outputs,
            &self.events,
            i,
            mode,
        )
    }

    /// Run once on the current input staging; returns when the output staging holds the
    /// results. No allocation.
    ///
    /// # Errors
    /// A `Copy` driver or executor error.
    pub fn run(&mut self) -> Result<(), RunError> {
        self.stream.bind()?;
        if self.segments.is_empty() {
            for i in 0..self.steps.len() {
                self.enqueue(i, Enqueue::Eager)?;
            }
        } else {
            for k in 0..self.segments.len() {
                match &self.segments[k] {
                    Segment::Graph(g) => g.launch(&self.stream)?,
                    Segment::Eager(i) => {
                        let i = *i;
                        self.enqueue(i, Enqueue::Eager)?;
                    }
                }
            }
        }
        self.stream.synchronize()?;
        if !self.events.is_empty() {
            for (i, t) in self.times.iter_mut().enumerate() {
                t.1 = Event::elapsed_ms(&self.events[i], &self.events[i + 1])
                    .map(f64::from)
                    .unwrap_or(f64::NAN);
            }
        }
        Ok(())
    }

    /// The input staging of region `id` (write the next frame here). No allocation.
    ///
    /// # Errors
    /// [`RunError::NoSuchRegion`].
    pub fn input_mut(&mut self, id: RegionId) -> Result<&mut [u8], RunError> {
        self.inputs
            .iter_mut()
            .find(|s| s.region == id)
            .map(|s| s.host.as_mut_slice())
            .ok_or(RunError::NoSuchRegion {
                index: id.index(),
                what: "an input region",
            })
    }

    /// The output staging of region `id`, valid after [`DeviceSession::run`].
    ///
    /// # Errors
    /// [`RunError::NoSuchRegion`].
    pub fn output(&self, id: RegionId) -> Result<&[u8], RunError> {
        self.outputs
            .iter()
            .find(|s| s.region == id)
            .map(|s| s.host.as_slice())
            .ok_or(RunError::NoSuchRegion {
                index: id.index(),
                what: "an output region",
            })
    }

    /// Copy region `id`'s device bytes (or staging) to `dst`; blocks.
    ///
    /// # Errors
    /// [`RunError::NoSuchRegion`], [`RunError::BufferSize`], a driver error.
    pub fn read_region(&mut self, id: RegionId, dst: &mut [u8]) -> Result<(), RunError> {
        let r = *self
            .device
            .regions
            .get(id.index())
            .ok_or(RunError::NoSuchRegion {
                index: id.index(),
                what: "a region",
            })?;
        if dst.len() != r.bytes {
            return Err(RunError::BufferSize {
                what: "region",
                index: id.index(),
                expected: r.bytes,
                actual: dst.len(),
            });
        }
        self.stream.bind()?;
        // SAFETY: dst holds r.bytes bytes and outlives the synchronise below.
        unsafe { self.stream.memcpy_dtoh(dst.as_mut_ptr(), r.ptr, r.bytes) }?;
        self.stream.synchronize()?;
        Ok(())
    }

    /// GPU time per step of the last run in milliseconds (with
    /// [`SessionOptions::step_timing`]; zeros otherwise).
    pub fn step_times(&self) -> &StepTimes {
        &self.times
    }

    // ------------------------------------------------------------------ capture

    fn snapshot(&mut self) -> Result<Vec<Vec<u8>>, Error> {
        let mut snap = Vec::with_capacity(self.regions.len());
        for i in 0..self.regions.len() {
            let id = RegionId(i as u16);
            let r = &self.regions[i];
            if matches!(r.check, Check::Skip) {
                snap.push(Vec::new());
                continue;
            }
            let mut v = vec![0u8; r.bytes];
            match r.kind {
                RegionKind::Output => v.copy_from_slice(self.output(id)?),
                _ => self.read_region(id, &mut v)?,
            }
            snap.push(v);
        }
        Ok(snap)
    }

    fn poison(&mut self) -> Result<(), Error> {
        self.stream.bind().map_err(CudaError::from)?;
        for (i, r) in self.regions.iter().enumerate() {
            if matches!(r.check, Check::Skip) {
                continue;
            }
            let dev = self.device.regions[i];
            let staged_in_place = r.kind != RegionKind::Internal
                && self
                    .inputs
                    .iter()
                    .chain(&self.outputs)
                    .any(|s| s.region.index() == i && s.mapped);
            if r.kind == RegionKind::Input && staged_in_place {
                continue; // the input itself
            }
            if !staged_in_place && dev.bytes > 0 {
                // SAFETY: the region lies in the arena and is dev.bytes long.
                unsafe {
                    if dev.bytes.is_multiple_of(4) && dev.ptr.0.is_multiple_of(4) {
                        self.stream.memset_u32(dev.ptr, 0x7fc0_0000, dev.bytes / 4) // NaN
                    } else {
                        self.stream.memset_u8(dev.ptr, 0xff, dev.bytes)
                    }
                }
                .map_err(CudaError::from)?;
            }
        }
        for s in &mut self.outputs {
            s.host.as_mut_slice().fill(0xff);
        }
        self.stream.synchronize().map_err(CudaError::from)?;
        Ok(())
    }

    fn capture(&mut self) -> Result<(), Error> {
        let eager = self.snapshot()?;
        // Segments: runs of capturable steps, split at executors that are not.
        let mut plan: Vec<Result<(usize, usize), usize>> = Vec::new();
        let mut start = 0;
        let mut eager_reasons = Vec::new();
        for (i, s) in self.steps.iter().enumerate() {
            if let DStep::Network {
                name,
                safety: CaptureSafety::Unsafe(why),
                ..
            } = s
            {
                if start < i {
                    plan.push(Ok((start, i)));
                }
                plan.push(Err(i));
                eager_reasons.push(format!("`{name}` runs eagerly: {why}"));
                start = i + 1;
            }
        }
        if start < self.steps.len() {
            plan.push(Ok((start, self.steps.len())));
        }
        let mut segments = Vec::with_capacity(plan.len());
        for seg in &plan {
            match *seg {
                Err(i) => segments.push(Segment::Eager(i)),
                Ok((a, b)) => {
                    let (steps, inputs, outputs, events) = (
                        &mut self.steps,
                        &self.inputs,
                        &mut self.outputs,
                        &self.events,
                    );
                    let captured = Graph::capture(&self.stream, |s| -> Result<(), RunError> {
                        for i in a..b {
                            enqueue_step(s, steps, inputs, outputs, events, i, Enqueue::Capturing)?;
                        }
                        Ok(())
                    });
                    match captured {
                        Ok(g) => segments.push(Segment::Graph(g)),
                        Err(e) => {
                            self.note = format!("graph capture failed, running eagerly: {e}");
                            log::warn!("{}", self.note);
                            return Ok(());
                        }
                    }
                }
            }
        }
        let nodes: usize = segments
            .iter()
            .map(|s| match s {
                Segment::Graph(g) => g.nodes(),
                Segment::Eager(_) => 0,
            })
            .sum();
        self.segments = segments;
        self.mode = if eager_reasons.is_empty() {
            ExecMode::WholeGraph
        } else {
            ExecMode::SplitGraphs
        };
        // Replay once on poisoned buffers and compare with the eager run.
        self.poison()?;
        self.run()?;
        let replay = self.snapshot()?;
        let mut mismatch = None;
        for (i, r) in self.regions.iter().enumerate() {
            if let Err(why) = r.check.compare(&eager[i], &replay[i]) {
                mismatch = Some(format!("region `{}`: {why}", r.name));
                break;
            }
        }
        let what = match self.mode {
            ExecMode::WholeGraph => format!("one graph of {nodes} nodes"),
            _ => format!(
                "{} graphs ({nodes} nodes); {}",
                self.segments
                    .iter()
                    .filter(|s| matches!(s, Segment::Graph(_)))
                    .count(),
                eager_reasons.join("; ")
            ),
        };
        match mismatch {
            None => {
                self.note = format!("{what}; replay on poisoned buffers matches the eager run");
            }
            Some(why) => {
                self.segments.clear();
                self.mode = ExecMode::Eager;
                self.note =
                    format!("graphs disabled: the replay differs from the eager run: {why}");
                log::error!("{}", self.note);
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------------ inspection

    /// How runs execute, and why (capture result, check).
    pub fn exec_mode(&self) -> (ExecMode, &str) {
        (self.mode, &self.note)
    }

    /// Memory measured at load.
    pub fn memory_budget(&self) -> MemoryBudget {
        self.budget
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The stream runs are enqueued on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Whether the staging is mapped (zero-copy).
    pub fn is_mapped(&self) -> bool {
        self.inputs.iter().chain(&self.outputs).any(|s| s.mapped)
    }

    /// The device regions (addresses), for tools and tests.
    pub fn regions(&self) -> &DeviceRegions {
        &self.device
    }

    /// Launch the captured graph(s) and wait, with no staging copies outside them and no
    /// result handling: the floor a run is measured against (benchmarks).
    ///
    /// # Errors
    /// A driver error, or [`RunError::Unsupported`] when nothing was captured.
    pub fn launch_graphs_and_wait(&mut self) -> Result<(), RunError> {
        if self.segments.is_empty() {
            return Err(RunError::Unsupported {
                what: "no graph was captured",
            });
        }
        self.run()
    }

    /// Names of the steps in execution order ("upload", stage names, network names,
    /// "download").
    pub fn step_names(&self) -> impl Iterator<Item = &str> {
        self.steps.iter().map(step_name)
    }
}

/// Enqueue step `i` (and the timing events around it). No allocation.
fn enqueue_step(
    stream: &Stream,
    steps: &mut [DStep],
    inputs: &[Staged],
    outputs: &mut [Staged],
    events: &[Event],
    i: usize,
    mode: Enqueue,
) -> Result<(), RunError> {
    // Timing events: event record nodes when captured (a plain record would only order the
    // graph's work and never be recorded at replay).
    let record = |e: &Event| match mode {
        Enqueue::Eager => e.record(stream),
        Enqueue::Capturing => e.record_captured(stream),
    };
    if let Some(e) = events.get(i) {
        record(e)?;
    }
    let last = i + 1 == steps.len();
    match &mut steps[i] {
        DStep::Upload => {
            for s in inputs {
                if !s.mapped {
                    // SAFETY: pinned staging and arena region are both `bytes` long and live
                    // as long as the session (and any graph capturing this copy).
                    unsafe { stream.memcpy_htod(s.device.ptr, s.host.as_ptr(), s.host.len()) }?;
                }
            }
        }
        DStep::Stage(stage) => stage.enqueue(stream)?,
        DStep::Network { executor, .. } => executor.enqueue(stream, mode)?,
        DStep::Download => {
            for s in outputs.iter_mut() {
                if !s.mapped {
                    let dst = s.host.as_mut_ptr();
                    // SAFETY: as for the upload.
                    unsafe { stream.memcpy_dtoh(dst, s.device.ptr, s.host.len()) }?;
                }
            }
        }
    }
    if last && let Some(e) = events.get(i + 1) {
        record(e)?;
    }
    Ok(())
}

fn step_name(s: &DStep) -> &str {
    match s {
        DStep::Upload => "upload",
        DStep::Stage(st) => st.name(),
        DStep::Network { name, .. } => name,
        DStep::Download => "download",
    }
}
