//! The device session: one arena, page-locked staging, kernels, executors, CUDA graphs.
//!
//! What [`DeviceSession::new`] prepares, all of it once:
//! * the stream (a non-blocking stream of the model's context, with the chosen
//!   [`SyncPolicy`]);
//! * the spec's kernel module (embedded images chosen by driver major and SM; NVRTC only
//!   when allowed), and the request state's own kernels when the spec appends rows
//!   (`append.rs`);
//! * one [`DeviceArena`]: every region of the spec and every executor's workspace, planned
//!   with [`ArenaPlan`] and taken in one `cuMemAlloc`; page-locked staging for the input and
//!   output regions — *mapped* into the device address space on an integrated GPU (or with
//!   [`MappedIo::Always`]; outputs alone with [`MappedIo::Outputs`]), where kernels then
//!   read and write the host buffers in place and the copies disappear;
//! * the executors, bound to their regions and workspaces (two per network naming a
//!   recurrent state: one per state parity);
//! * an eager warm-up run (first-run initialisation is illegal under capture: field.md 1),
//!   then the capture of the whole frame — upload, stages, networks, download — into one CUDA
//!   graph when every executor is capture-safe, else into graphs split around the executors
//!   that are not (the reason is logged); then one replay on poisoned buffers compared region
//!   by region with the eager run ([`Check`]); a mismatch disables the graphs and says why
//!   (field.md 2: a replay that silently returns stale data is the failure to prevent).
//!
//! Per frame ([`DeviceSession::run`]): the request state's cursors written into their
//! staging, one graph launch (or a few, split), one wait. No host or device allocation.
//!
//! Construction is in `build.rs` (memory plan, staging, steps), capture and its check in
//! `capture.rs`, the append kernel in `append.rs`.

mod append;
mod build;
mod capture;

use std::fmt;

use crate::backend::{CaptureSafety, DeviceExecutor, Enqueue, Plan, RunError};
use crate::cuda::{
    Context, CudaError, DeviceArena, DeviceRegion, Event, Graph, KernelModule, PinnedBuffer,
    Stream, SyncPolicy,
};
use crate::error::Error;

use super::spec::{PipelineSpec, RegionDecl};
use super::state::{StateBook, StateId, StateKind};
use super::{IoMemory, RegionId, Stage};

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
    /// Also capture, at load, the run without its staging copies (the steps between the
    /// upload and the download), for [`DeviceSession::run_on_stream`] with
    /// [`IoMemory::Device`]: one more instantiated graph (the network's nodes, no copy
    /// nodes), checked like the first. Off by default; without it such runs enqueue those
    /// steps eagerly. Ignored for a spec with request state (its runs need the upload).
    pub device_io: bool,
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
            device_io: false,
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
    /// [`CudaError::Invalid`] for an id from another spec.
    pub fn get(&self, id: RegionId) -> Result<DeviceRegion, CudaError> {
        self.regions
            .get(id.index())
            .copied()
            .ok_or_else(|| CudaError::Invalid(format!("region {} does not exist", id.index())))
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
        /// The executor of odd runs, bound with the recurrent states' regions swapped
        /// (`None` when the network names none).
        alternate: Option<Box<dyn DeviceExecutor>>,
        safety: CaptureSafety,
        _plan: Plan,
    },
    AppendRows {
        name: String,
        launch: append::AppendLaunch,
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
    // Field order is drop order: graphs before the steps, modules and memory they reference.
    segments: Vec<Segment>,
    /// The graphs of odd runs when the spec has recurrent states (empty otherwise).
    alt_segments: Vec<Segment>,
    /// The graphs of a run on device memory ([`IoMemory::Device`]: the steps between the
    /// upload and the download), with [`SessionOptions::device_io`] (empty otherwise).
    device_segments: Vec<Segment>,
    steps: Vec<DStep>,
    events: Vec<Event>,
    /// Recorded on a caller's stream by [`DeviceSession::run_on_stream`]; the session's
    /// stream waits on it before the run.
    ready: Event,
    /// Recorded on the session's stream after such a run; the caller's stream waits on it.
    finished: Event,
    /// [`SessionOptions::device_io`] as given.
    device_io: bool,
    module: Option<KernelModule>,
    /// The request state's kernels (when the spec appends rows; the append steps launch
    /// its functions, so it lives as long as they do).
    _state_module: Option<KernelModule>,
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
    /// The request state: positions (the host's truth) and the recurrent states.
    states: StateBook,
    /// The recurrent states' region pairs, exchanged after every run.
    pairs: Vec<(RegionId, RegionId)>,
    /// 0 or 1: which executors and graphs the next run uses (always 0 without a recurrent
    /// state).
    parity: usize,
}

/// Region `id` with the recurrent states' pairs swapped when `parity` is odd.
fn swapped(pairs: &[(RegionId, RegionId)], parity: usize, id: RegionId) -> RegionId {
    if parity == 0 {
        return id;
    }
    for &(a, b) in pairs {
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
            .field("states", &self.states)
            .finish_non_exhaustive()
    }
}

impl DeviceSession {
    /// Prepare `spec` on the device of `options.context`.
    ///
    /// # Errors
    /// [`Error::Spec`] (no context, host plans, a plan of another device, a stage without
    /// a device flavour), device errors, executor creation errors, [`Error::Run`] when the
    /// warm-up run fails.
    pub fn new(spec: PipelineSpec, options: &SessionOptions) -> Result<Self, Error> {
        build::build(spec, options)
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

    /// Write every appendable state's cursors into their staging (checked against the
    /// capacities first: a run that would overflow is refused before anything is enqueued).
    fn begin_run(&mut self) -> Result<(), RunError> {
        let inputs = &mut self.inputs;
        self.states.begin(|region, fill| {
            let staged =
                inputs
                    .iter_mut()
                    .find(|s| s.region == region)
                    .ok_or(RunError::NoSuchRegion {
                        index: region.index(),
                        what: "a staged cursor region",
                    })?;
            fill(staged.host.as_mut_slice());
            Ok(())
        })
    }

    /// After a run: the next one reads the recurrent states this one wrote (their regions
    /// swap) and appends after the rows this one appended.
    fn end_run(&mut self) {
        if !self.pairs.is_empty() {
            self.parity ^= 1;
        }
        self.states.commit();
    }

    /// Run once on the current input staging; returns when the output staging holds the
    /// results. No allocation.
    ///
    /// # Errors
    /// [`crate::session::StateError::Full`] (nothing ran) when a run would pass an
    /// appendable state's capacity; a `Copy` driver or executor error.
    pub fn run(&mut self) -> Result<(), RunError> {
        self.begin_run()?;
        self.stream.bind()?;
        self.launch(IoMemory::Host)?;
        self.stream.synchronize()?;
        self.end_run();
        if !self.events.is_empty() {
            for (i, t) in self.times.iter_mut().enumerate() {
                t.1 = Event::elapsed_ms(&self.events[i], &self.events[i + 1])
                    .map(f64::from)
                    .unwrap_or(f64::NAN);
            }
        }
        Ok(())
    }

    /// Enqueue one run on the session's stream (context bound): with [`IoMemory::Host`] the
    /// graphs of the current parity (or every step eagerly), with [`IoMemory::Device`] the
    /// device-I/O graphs (or the steps between the upload and the download eagerly).
    fn launch(&mut self, memory: IoMemory) -> Result<(), RunError> {
        let (n, eager) = match memory {
            IoMemory::Host => (self.current_segments().len(), 0..self.steps.len()),
            IoMemory::Device => (
                self.device_segments.len(),
                1..self.steps.len().saturating_sub(1),
            ),
        };
        if n == 0 {
            for i in eager {
                self.enqueue(i, Enqueue::Eager)?;
            }
            return Ok(());
        }
        for k in 0..n {
            let segments = match memory {
                IoMemory::Host => self.current_segments(),
                IoMemory::Device => self.device_segments.as_slice(),
            };
            match &segments[k] {
                Segment::Graph(g) => g.launch(&self.stream)?,
                Segment::Eager(i) => {
                    let i = *i;
                    self.enqueue(i, Enqueue::Eager)?;
                }
            }
        }
        Ok(())
    }

    /// Run once ordered on a caller's CUDA stream, without a host wait: an event recorded
    /// on `stream` makes the session's stream wait for the caller's work enqueued before
    /// this call, the run is launched on the session's stream (its captured graphs), and
    /// `stream` then waits for an event recorded after it, so that the caller's work
    /// enqueued after this call sees the outputs. Four driver calls besides the run's own;
    /// no allocation, no host synchronisation; [`DeviceSession::step_times`] is not
    /// updated.
    ///
    /// `memory` says where the run reads and writes: [`IoMemory::Host`] (the staging, read
    /// and written when the run executes: leave it alone until `stream` has passed this
    /// point) or [`IoMemory::Device`] (the regions of [`DeviceSession::io_region`], which
    /// the caller's work on `stream` writes before and reads after; the staging is neither
    /// read nor written).
    ///
    /// # Safety
    /// `stream` is null (the context's legacy default stream) or a live `CUstream` of this
    /// session's context, the device's primary context (a `cudaStream_t` the CUDA runtime
    /// made on the same device is one), not being captured; it stays live until this call
    /// returns.
    ///
    /// # Errors
    /// [`RunError::Unsupported`] for [`IoMemory::Device`] on a session with request state
    /// (its cursors travel in the upload); [`crate::session::StateError::Full`] as in
    /// [`DeviceSession::run`]; a driver error (a stream of another context, say).
    pub unsafe fn run_on_stream(
        &mut self,
        stream: *mut std::ffi::c_void,
        memory: IoMemory,
    ) -> Result<(), RunError> {
        if memory == IoMemory::Device && !self.states.is_empty() {
            return Err(RunError::Unsupported {
                what: "a run on device memory of a session with request state (its cursors \
                       travel in the staging upload)",
            });
        }
        self.begin_run()?;
        self.stream.bind()?;
        // SAFETY: the caller's contract: null or a live stream of this context.
        unsafe { self.ready.record_raw(stream) }?;
        self.stream.wait(&self.ready)?;
        self.launch(memory)?;
        self.finished.record(&self.stream)?;
        // SAFETY: as above.
        unsafe { self.finished.wait_in_raw(stream) }?;
        self.end_run();
        Ok(())
    }

    /// The device memory of input or output region `id`: the buffer the run's graph reads
    /// (an input) or writes (an output), at the same address for the session's life (in
    /// mapped staging, the device address of the page-locked buffer). No allocation.
    ///
    /// # Errors
    /// [`RunError::NoSuchRegion`] for a region that is not an input or output of this
    /// session (a state's cursor is not the caller's).
    pub fn io_region(&self, id: RegionId) -> Result<DeviceRegion, RunError> {
        let owned = self
            .regions
            .get(id.index())
            .is_some_and(|r| r.state.is_some());
        self.inputs
            .iter()
            .chain(&self.outputs)
            .find(|s| s.region == id && !owned)
            .map(|s| s.device)
            .ok_or(RunError::NoSuchRegion {
                index: id.index(),
                what: "an input or output region",
            })
    }

    /// The input staging of region `id` (write the next frame here). No allocation.
    ///
    /// # Errors
    /// [`RunError::NoSuchRegion`] (a state's cursor is not the caller's to write).
    pub fn input_mut(&mut self, id: RegionId) -> Result<&mut [u8], RunError> {
        let owned = self
            .regions
            .get(id.index())
            .is_some_and(|r| r.state.is_some());
        self.inputs
            .iter_mut()
            .find(|s| s.region == id && !owned)
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

    /// The device memory of region `id` as the next run sees it (a recurrent state's
    /// regions swapped by parity), with `len` checked against it.
    fn logical_region(&self, id: RegionId, len: usize) -> Result<DeviceRegion, RunError> {
        let r = *self
            .device
            .regions
            .get(swapped(&self.pairs, self.parity, id).index())
            .ok_or(RunError::NoSuchRegion {
                index: id.index(),
                what: "a region",
            })?;
        if len != r.bytes {
            return Err(RunError::BufferSize {
                what: "region",
                index: id.index(),
                expected: r.bytes,
                actual: len,
            });
        }
        Ok(r)
    }

    /// Copy region `id`'s device bytes (or staging) to `dst`; blocks.
    ///
    /// # Errors
    /// [`RunError::NoSuchRegion`], [`RunError::BufferSize`], a driver error.
    pub fn read_region(&mut self, id: RegionId, dst: &mut [u8]) -> Result<(), RunError> {
        let r = self.logical_region(id, dst.len())?;
        self.stream.bind()?;
        // SAFETY: dst holds r.bytes bytes and outlives the synchronise below.
        unsafe { self.stream.memcpy_dtoh(dst.as_mut_ptr(), r.ptr, r.bytes) }?;
        self.stream.synchronize()?;
        Ok(())
    }

    /// Overwrite region `id`'s device bytes with `src`; blocks. A region of a recurrent
    /// state is the logical one (what the next run reads under that id).
    ///
    /// # Errors
    /// [`RunError::NoSuchRegion`], [`RunError::BufferSize`], a driver error.
    pub fn write_region(&mut self, id: RegionId, src: &[u8]) -> Result<(), RunError> {
        let r = self.logical_region(id, src.len())?;
        self.stream.bind()?;
        // SAFETY: src holds r.bytes bytes and outlives the synchronise below; the region is
        // r.bytes long in the arena (or mapped staging).
        unsafe { self.stream.memcpy_htod(r.ptr, src.as_ptr(), r.bytes) }?;
        self.stream.synchronize()?;
        Ok(())
    }

    // ------------------------------------------------------------------ request state

    pub(crate) fn states(&self) -> &StateBook {
        &self.states
    }

    pub(crate) fn states_mut(&mut self) -> &mut StateBook {
        &mut self.states
    }

    /// Zero `regions` on the device (enqueued on the session's stream; no wait).
    fn zero(
        &self,
        regions: impl Iterator<Item = RegionId>,
    ) -> Result<(), crate::cuda::DriverError> {
        for id in regions {
            let r = self.device.regions[id.index()];
            if r.bytes > 0 {
                // SAFETY: the region lies in the arena and is r.bytes long.
                unsafe { self.stream.memset_u8(r.ptr, 0, r.bytes) }?;
            }
        }
        Ok(())
    }

    /// A new request: appendable states back to no rows (host only: the next run's cursor
    /// says so), recurrent states zeroed (both regions; blocks). No allocation.
    ///
    /// # Errors
    /// A driver error.
    pub fn reset_states(&mut self) -> Result<(), RunError> {
        self.states.reset_appends();
        if self.pairs.is_empty() {
            return Ok(());
        }
        self.stream.bind()?;
        self.zero(self.pairs.iter().flat_map(|&(a, b)| [a, b]))?;
        self.stream.synchronize()?;
        Ok(())
    }

    /// Reset one state (see [`DeviceSession::reset_states`]).
    ///
    /// # Errors
    /// [`crate::session::StateError::NoSuchState`], a driver error.
    pub fn reset_state(&mut self, id: StateId) -> Result<(), RunError> {
        match self.states.decl(id)?.kind {
            StateKind::Recurrent { current, next } => {
                self.stream.bind()?;
                self.zero([current, next].into_iter())?;
                self.stream.synchronize()?;
            }
            StateKind::Append { slots, .. } => {
                for slot in 0..slots {
                    self.states.reset_slot(id, slot)?;
                }
            }
        }
        Ok(())
    }

    /// Every state's memory zeroed and every position reset: what the load-time runs and
    /// the replay check start from, so that eager and replayed runs compare byte for byte
    /// (the rows past a cursor included). Blocks.
    fn zero_states(&mut self) -> Result<(), CudaError> {
        self.states.reset_appends();
        if self.states.is_empty() {
            return Ok(());
        }
        self.stream.bind()?;
        let regions: Vec<RegionId> = self
            .states
            .decls()
            .iter()
            .flat_map(|d| match d.kind {
                StateKind::Recurrent { current, next } => [Some(current), Some(next)],
                StateKind::Append { rows, .. } => [Some(rows), None],
            })
            .flatten()
            .collect();
        self.zero(regions.into_iter())?;
        self.stream.synchronize()?;
        Ok(())
    }

    /// Which executors and graphs the next run uses: 0 or 1, flipping after every run when
    /// the spec has a recurrent state (always 0 otherwise).
    pub fn parity(&self) -> usize {
        self.parity
    }

    /// GPU time per step of the last run in milliseconds (with
    /// [`SessionOptions::step_timing`]; zeros otherwise).
    pub fn step_times(&self) -> &StepTimes {
        &self.times
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
    /// A driver error, [`crate::session::StateError::Full`] as in a run, or
    /// [`RunError::Unsupported`] when the session is not graphs alone (nothing captured, or
    /// engines launched eagerly between graphs).
    pub fn launch_graphs_and_wait(&mut self) -> Result<(), RunError> {
        let segments = self.current_segments();
        if segments.is_empty() || segments.iter().any(|s| matches!(s, Segment::Eager(_))) {
            return Err(RunError::Unsupported {
                what: "a bare graph launch: the session is not captured graphs alone",
            });
        }
        self.begin_run()?;
        self.stream.bind()?;
        for segment in self.current_segments() {
            if let Segment::Graph(g) = segment {
                g.launch(&self.stream)?;
            }
        }
        self.stream.synchronize()?;
        self.end_run();
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

    /// Names of the steps in execution order ("upload", stage names, network names,
    /// "download").
    pub fn step_names(&self) -> impl Iterator<Item = &str> {
        self.steps.iter().map(step_name)
    }
}

impl Drop for DeviceSession {
    /// Waits for the session's stream first: a run on a caller's stream may still be
    /// executing when the session is dropped, and its graphs, arena and staging are freed
    /// next.
    fn drop(&mut self) {
        if self.stream.bind().is_ok() {
            let _ = self.stream.synchronize();
        }
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
        DStep::AppendRows { launch, .. } => launch.enqueue(stream)?,
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
        DStep::Network { name, .. } | DStep::AppendRows { name, .. } => name,
        DStep::Download => "download",
    }
}
