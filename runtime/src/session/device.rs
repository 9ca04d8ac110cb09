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
//!   [`MappedIo::Always`]; outputs alone with [`MappedIo::Outputs`]), where kernels then
//!   read and write the host buffers in place and the copies disappear;
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

pub use crate::vocab::MappedIo;

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
        /// The executor of odd runs, bound with the ping-pong regions swapped (`None` when
        /// the network names none).
        alternate: Option<Box<dyn DeviceExecutor>>,
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
    /// The graphs of odd runs when the spec has ping-pong regions (empty otherwise).
    alt_segments: Vec<Segment>,
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
    /// Region pairs exchanged after every run ([`PipelineSpec::ping_pong`]).
    ping_pong: Vec<(RegionId, RegionId)>,
    /// 0 or 1: which executors and graphs the next run uses (always 0 without ping-pong).
    parity: usize,
}

/// Region `id` with the ping-pong pairs swapped when `parity` is odd.
fn swapped(ping_pong: &[(RegionId, RegionId)], parity: usize, id: RegionId) -> RegionId {
    if parity == 0 {
        return id;
    }
    for &(a, b) in ping_pong {
        if id == a {
            return b;
        }
        if id == b {
            return a;
        }
    }
    id
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
            ping_pong,
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
        let (map_inputs, map_outputs) = match options.mapped {
            MappedIo::Auto => {
                let m = props.integrated && props.can_map_host_memory;
                (m, m)
            }
            MappedIo::Always => (true, true),
            MappedIo::Never => (false, false),
            MappedIo::Outputs => (false, true),
        };
        let mapped = |kind: RegionKind| match kind {
            RegionKind::Input => map_inputs,
            RegionKind::Output => map_outputs,
            RegionKind::Internal => false,
        };
        let mut plan = ArenaPlan::new();
        let mut arena_ids: Vec<Option<ArenaRegionId>> = Vec::with_capacity(regions.len());
        for r in &regions {
            arena_ids.push(if mapped(r.kind) {
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
                _ => Some(PinnedBuffer::new(&ctx, r.bytes, mapped(r.kind))?),
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
                    mapped: mapped(r.kind),
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
                    super::spec::check_stage_regions(stage.as_ref(), &regions, &ping_pong)?;
                    stage.prepare_device(module.as_ref(), &device)?;
                    dsteps.push(DStep::Stage(stage));
                }
                Step::Network(n) => {
                    let Plan::Device(p) = &n.plan else {
                        unreachable!("checked above");
                    };
                    let ws = ws_iter.next().map(|w| arena.region(*w));
                    let swaps = n
                        .inputs
                        .iter()
                        .chain(&n.outputs)
                        .any(|r| swapped(&ping_pong, 1, *r) != *r);
                    // Parity 0 binds the regions as declared; parity 1 (only for a network
                    // naming a ping-pong region) with each pair swapped. Both executors share
                    // the workspace: runs never overlap.
                    let mut bound = Vec::with_capacity(2);
                    for parity in 0..if swaps { 2 } else { 1 } {
                        let mut executor = p.executor(&ctx)?;
                        let at =
                            |r: &RegionId| device.regions[swapped(&ping_pong, parity, *r).index()];
                        let ins: Vec<DeviceRegion> = n.inputs.iter().map(at).collect();
                        let outs: Vec<DeviceRegion> = n.outputs.iter().map(at).collect();
                        // SAFETY: every region lies in this session's arena or mapped
                        // staging, sized by the spec (checked against the plan's tensors when
                        // the network was added; the two regions of a ping-pong pair have the
                        // same size), and lives as long as the session, which owns the
                        // executor.
                        unsafe {
                            executor.bind(&Bindings {
                                inputs: &ins,
                                outputs: &outs,
                                workspace: ws.unwrap_or(DeviceRegion::EMPTY),
                            })
                        }?;
                        bound.push(executor);
                    }
                    let alternate = if bound.len() == 2 { bound.pop() } else { None };
                    let Some(executor) = bound.pop() else {
                        unreachable!("one executor per parity, at least one");
                    };
                    dsteps.push(DStep::Network {
                        name: n.name,
                        executor,
                        alternate,
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
        let pinned_mapped: usize = inputs
            .iter()
            .chain(&outputs)
            .filter(|s| s.mapped)
            .map(|s| s.host.len())
            .sum();
        let mut session = DeviceSession {
            segments: Vec::new(),
            alt_segments: Vec::new(),
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
            ping_pong,
            parity: 0,
        };

        // --- warm-up (eager), then graphs checked against it
        for (id, fill) in &warmups {
            if let Some(s) = session.inputs.iter_mut().find(|s| s.region == *id) {
                fill(s.host.as_mut_slice());
            }
        }
        session.zero_ping_pong()?;
        session.run()?;
        if options.graphs {
            session.capture()?;
        } else {
            session.note = "graphs disabled by options".into();
        }
        // A fresh state for the first run.
        session.zero_ping_pong()?;
        session.parity = 0;
        let (free_after, _) = session.ctx.mem_info().map_err(CudaError::from)?;
        session.budget = MemoryBudget {
            device_arena: session.arena.plan().total_bytes(),
            workspaces: workspace_bytes,
            weights,
            pinned,
            mapped: pinned_mapped,
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
            if pinned_mapped == 0 {
                String::new()
            } else {
                format!(" ({pinned_mapped} B mapped)")
            },
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
            self.parity,
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
            for k in 0..self.current_segments().len() {
                match &self.current_segments()[k] {
                    Segment::Graph(g) => g.launch(&self.stream)?,
                    Segment::Eager(i) => {
                        let i = *i;
                        self.enqueue(i, Enqueue::Eager)?;
                    }
                }
            }
        }
        self.stream.synchronize()?;
        self.advance_parity();
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
            .get(swapped(&self.ping_pong, self.parity, id).index())
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

    /// Overwrite region `id`'s device bytes with `src`; blocks. A region of a ping-pong pair
    /// is the logical one (what the next run reads under that id).
    ///
    /// # Errors
    /// [`RunError::NoSuchRegion`], [`RunError::BufferSize`], a driver error.
    pub fn write_region(&mut self, id: RegionId, src: &[u8]) -> Result<(), RunError> {
        let r = *self
            .device
            .regions
            .get(swapped(&self.ping_pong, self.parity, id).index())
            .ok_or(RunError::NoSuchRegion {
                index: id.index(),
                what: "a region",
            })?;
        if src.len() != r.bytes {
            return Err(RunError::BufferSize {
                what: "region",
                index: id.index(),
                expected: r.bytes,
                actual: src.len(),
            });
        }
        self.stream.bind()?;
        // SAFETY: src holds r.bytes bytes and outlives the synchronise below; the region is
        // r.bytes long in the arena (or mapped staging).
        unsafe { self.stream.memcpy_htod(r.ptr, src.as_ptr(), r.bytes) }?;
        self.stream.synchronize()?;
        Ok(())
    }

    /// Zero both regions of every ping-pong pair (a fresh recurrent state); blocks.
    fn zero_ping_pong(&mut self) -> Result<(), CudaError> {
        if self.ping_pong.is_empty() {
            return Ok(());
        }
        self.stream.bind()?;
        for &(a, b) in &self.ping_pong {
            for id in [a, b] {
                let r = self.device.regions[id.index()];
                if r.bytes > 0 {
                    // SAFETY: the region lies in the arena and is r.bytes long.
                    unsafe { self.stream.memset_u8(r.ptr, 0, r.bytes) }?;
                }
            }
        }
        self.stream.synchronize()?;
        Ok(())
    }

    /// Which executors and graphs the next run uses: 0 or 1, flipping after every run when
    /// the spec has [`PipelineSpec::ping_pong`] regions (always 0 otherwise).
    pub fn parity(&self) -> usize {
        self.parity
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
        // With ping-pong regions: one set of graphs per state parity, each checked against an
        // eager run of that parity from a zero state. Without: one set, checked against the
        // warm-up run.
        let parities = if self.ping_pong.is_empty() { 1 } else { 2 };
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
        let mut eager = Vec::with_capacity(parities);
        let mut sets: Vec<Vec<Segment>> = Vec::with_capacity(parities);
        for parity in 0..parities {
            if parities == 2 {
                self.zero_ping_pong()?;
                self.parity = parity;
                self.run()?;
            }
            eager.push(self.snapshot()?);
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
                                enqueue_step(
                                    s,
                                    steps,
                                    inputs,
                                    outputs,
                                    events,
                                    i,
                                    Enqueue::Capturing,
                                    parity,
                                )?;
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
            sets.push(segments);
        }
        let nodes: usize = sets
            .iter()
            .flatten()
            .map(|s| match s {
                Segment::Graph(g) => g.nodes(),
                Segment::Eager(_) => 0,
            })
            .sum();
        let mut sets = sets.into_iter();
        self.segments = sets.next().unwrap_or_default();
        self.alt_segments = sets.next().unwrap_or_default();
        self.mode = if eager_reasons.is_empty() {
            ExecMode::WholeGraph
        } else {
            ExecMode::SplitGraphs
        };
        // Replay once (per parity) on poisoned buffers and compare with the eager run.
        let mut mismatch = None;
        for (parity, eager) in eager.iter().enumerate() {
            self.poison()?;
            if parities == 2 {
                self.zero_ping_pong()?;
                self.parity = parity;
            }
            self.run()?;
            let replay = self.snapshot()?;
            for (i, r) in self.regions.iter().enumerate() {
                if let Err(why) = r.check.compare(&eager[i], &replay[i]) {
                    let at = if parities == 2 {
                        format!("state parity {parity}: ")
                    } else {
                        String::new()
                    };
                    mismatch = Some(format!("{at}region `{}`: {why}", r.name));
                    break;
                }
            }
            if mismatch.is_some() {
                break;
            }
        }
        let per_parity = if parities == 2 {
            " (one set per state parity)"
        } else {
            ""
        };
        let what = match self.mode {
            ExecMode::WholeGraph if parities == 2 => {
                format!("one graph per run, two graphs of {nodes} nodes in all{per_parity}")
            }
            ExecMode::WholeGraph => format!("one graph of {nodes} nodes"),
            _ => format!(
                "{} graphs ({nodes} nodes){per_parity}; {}",
                self.segments
                    .iter()
                    .chain(&self.alt_segments)
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
                self.alt_segments.clear();
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

    /// The floor a run is measured against (benchmarks): launch the captured graph(s) of
    /// the current parity (`cuGraphLaunch`) and wait for them the session's way, nothing
    /// else: no per-step timing reads, no result handling. The staging copies are inside
    /// the graph, so the GPU work is a run's; a stateful session's state advances as in a
    /// run. No allocation.
    ///
    /// # Errors
    /// A driver error, or [`RunError::Unsupported`] when the session is not graphs alone
    /// (nothing captured, or engines launched eagerly between graphs).
    pub fn launch_graphs_and_wait(&mut self) -> Result<(), RunError> {
        let segments = self.current_segments();
        if segments.is_empty() || segments.iter().any(|s| matches!(s, Segment::Eager(_))) {
            return Err(RunError::Unsupported {
                what: "a bare graph launch: the session is not captured graphs alone",
            });
        }
        self.stream.bind()?;
        for segment in segments {
            if let Segment::Graph(g) = segment {
                g.launch(&self.stream)?;
            }
        }
        self.stream.synchronize()?;
        self.advance_parity();
        Ok(())
    }

    /// The captured segments of the current state parity.
    fn current_segments(&self) -> &[Segment] {
        if self.parity == 1 {
            &self.alt_segments
        } else {
            &self.segments
        }
    }

    /// After a run: the next one reads the state this one wrote (ping-pong regions swap).
    fn advance_parity(&mut self) {
        if !self.ping_pong.is_empty() {
            self.parity ^= 1;
        }
    }

    /// Names of the steps in execution order ("upload", stage names, network names,
    /// "download").
    pub fn step_names(&self) -> impl Iterator<Item = &str> {
        self.steps.iter().map(step_name)
    }
}

/// Enqueue step `i` (and the timing events around it). No allocation.
#[allow(clippy::too_many_arguments)] // the session's disjoint fields, borrowed apart
fn enqueue_step(
    stream: &Stream,
    steps: &mut [DStep],
    inputs: &[Staged],
    outputs: &mut [Staged],
    events: &[Event],
    i: usize,
    mode: Enqueue,
    parity: usize,
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
        DStep::Network {
            executor,
            alternate,
            ..
        } => match alternate {
            Some(alt) if parity == 1 => alt.enqueue(stream, mode)?,
            _ => executor.enqueue(stream, mode)?,
        },
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
