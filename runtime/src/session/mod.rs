//! Sessions: a family's stages and the networks between them, prepared once at load for a
//! declared input geometry, then run frame after frame without allocating.
//!
//! A family describes its pipeline as a [`PipelineSpec`]: regions (named byte ranges:
//! host-written [`RegionKind::Input`]s, host-read [`RegionKind::Output`]s and
//! [`RegionKind::Internal`] tensors and scratch), then steps in order: its [`Stage`]s (its
//! kernels and the regions they read and write) and networks (a [`Plan`](crate::Plan) bound
//! to regions). [`Session::new`] builds it on the plans' placement:
//!
//! - **host** (the tract CPU engine): one aligned buffer per region, allocated once; stages
//!   run their host code, networks their host executor;
//! - **device** (a CUDA GPU, [`DeviceSession`]): one device arena holding every region and
//!   every executor's workspace (one `cuMemAlloc`), page-locked staging for inputs and
//!   outputs (mapped on an integrated GPU, so the copies disappear), the stages' kernel
//!   module, executors bound to their regions; an eager warm-up run, then capture of the
//!   whole frame (upload, stages, networks, download) into CUDA graphs — one graph when every
//!   executor is capture-safe, else graphs split around the executors that are not — and a
//!   replay on poisoned buffers checked against the eager run before the session is handed
//!   out.
//!
//! Either way the caller's path is the same: write [`Session::input_mut`] (in place, or with
//! [`Session::copy_to_input`]), call [`Session::run`], read [`Session::output`].
//!
//! What runs carry from one to the next (a recurrent state, a KV cache) is the session's
//! request state ([`state`]): declared in the spec, sized at load, reset per request
//! ([`Session::reset_states`]), with positions a captured graph reads from device memory.

mod host;
mod spec;
mod stage_copy;
pub mod state;

#[cfg(feature = "cuda")]
mod device;

pub use host::HostIo;
pub use spec::{
    AppendRows, Check, MAX_NETWORK_IO, MAX_REGIONS, NetworkStep, PipelineSpec, RegionDecl,
    RegionId, RegionKind, SpecError, Step, Warmup,
};
pub use stage_copy::{STREAM_MIN_BYTES, copy_to_staging};
pub use state::{
    AppendDecl, AppendState, CURSOR_BYTES, Cursor, RecurrentState, StateError, StateId,
};

#[cfg(feature = "cuda")]
pub use device::{
    DeviceRegions, DeviceSession, ExecMode, MappedIo, MemoryBudget, SessionOptions, StepTimes,
};

use crate::backend::{Placement, RunError};
use crate::error::Error;

/// Where a run on a caller's CUDA stream takes its inputs and leaves its outputs
/// (`DeviceSession::run_on_stream`, [`crate::NetworkSession::run_on_stream`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoMemory {
    /// The host staging, as [`Session::run`]: the run's graph copies the input staging to
    /// the device regions first and the output regions to their staging last; the staging is
    /// read and written when the caller's stream reaches the run, not at the call.
    Host,
    /// The regions' device memory itself (`DeviceSession::io_region`): the run launches
    /// the network steps without the staging copies; the caller's own work on its stream
    /// writes the inputs before the call and reads the outputs after it (zero-copy).
    Device,
}

/// The device memory of one named input or output of a device session: what a caller's
/// kernel or copy writes a frame to or reads a result from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceBuffer {
    /// The first byte's device address (a `CUdeviceptr`; in mapped staging, the device
    /// address of the page-locked host buffer).
    pub address: u64,
    /// Its length in bytes (the tensor's elements times the element size).
    pub bytes: usize,
}

/// A family's unit of pre- or post-processing: host code and, optionally, device kernels,
/// over regions it declares up front.
pub trait Stage: Send {
    /// Name for logs, e.g. "letterbox".
    fn name(&self) -> &str;
    /// Regions read (each at most once across reads and writes).
    fn reads(&self) -> &[RegionId];
    /// Regions written.
    fn writes(&self) -> &[RegionId];

    /// Run on the host. `io` gives views of the declared regions.
    ///
    /// # Errors
    /// A `Copy` [`RunError`]; a stage without a host flavour returns
    /// [`RunError::Unsupported`].
    fn run_host(&mut self, io: &mut HostIo<'_>) -> Result<(), RunError>;

    /// Resolve kernels and region addresses once the device session has allocated its
    /// arena (no allocation afterwards). `kernels` is the module of the spec's
    /// [`PipelineSpec::kernels`].
    ///
    /// # Errors
    /// A missing kernel or a region of the wrong size.
    #[cfg(feature = "cuda")]
    fn prepare_device(
        &mut self,
        kernels: Option<&crate::cuda::KernelModule>,
        regions: &DeviceRegions,
    ) -> Result<(), crate::cuda::CudaError> {
        let _ = (kernels, regions);
        Err(crate::cuda::CudaError::Unsupported(format!(
            "stage `{}` has no device flavour",
            self.name()
        )))
    }

    /// Enqueue the stage's kernels on `stream` (capturable; no allocation).
    ///
    /// # Errors
    /// A driver error.
    #[cfg(feature = "cuda")]
    fn enqueue(&self, stream: &crate::cuda::Stream) -> Result<(), crate::cuda::DriverError> {
        let _ = stream;
        Err(crate::cuda::DriverError::unsupported(
            "Stage::enqueue (no device flavour)",
        ))
    }
}

/// A prepared pipeline on the host or on a CUDA device.
pub struct Session {
    imp: Imp,
}

enum Imp {
    Host(host::HostSession),
    #[cfg(feature = "cuda")]
    Device(Box<DeviceSession>),
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.imp {
            Imp::Host(h) => f.debug_tuple("Session::Host").field(h).finish(),
            #[cfg(feature = "cuda")]
            Imp::Device(d) => f.debug_tuple("Session::Device").field(d).finish(),
        }
    }
}

impl Session {
    /// Build `spec` where its plans run: on the host when every network plan is a host plan
    /// (or there is none and no device context is given), else on the plans' CUDA device.
    ///
    /// # Errors
    /// [`Error::Spec`] for an inconsistent spec, [`Error::Prepare`] when an executor cannot
    /// be created, device errors, and [`Error::Run`] when the warm-up run fails.
    pub fn new(
        spec: PipelineSpec,
        #[cfg(feature = "cuda")] options: &SessionOptions,
    ) -> Result<Self, Error> {
        let placement = placement_of(&spec)?;
        match placement {
            Placement::Host => {
                #[cfg(feature = "cuda")]
                if options.context.is_some() && !has_networks(&spec) {
                    return Ok(Session {
                        imp: Imp::Device(Box::new(DeviceSession::new(spec, options)?)),
                    });
                }
                Ok(Session {
                    imp: Imp::Host(host::HostSession::new(spec)?),
                })
            }
            #[cfg(feature = "cuda")]
            Placement::Device => Ok(Session {
                imp: Imp::Device(Box::new(DeviceSession::new(spec, options)?)),
            }),
            #[cfg(not(feature = "cuda"))]
            Placement::Device => unreachable!("device plans exist only with feature `cuda`"),
        }
    }

    /// Host or device.
    pub fn placement(&self) -> Placement {
        match &self.imp {
            Imp::Host(_) => Placement::Host,
            #[cfg(feature = "cuda")]
            Imp::Device(_) => Placement::Device,
        }
    }

    /// The bytes of input region `id`, to be written before [`Session::run`] (page-locked
    /// staging on a device session). No allocation.
    ///
    /// # Errors
    /// [`RunError::NoSuchRegion`] when `id` is not an input region of this session.
    pub fn input_mut(&mut self, id: RegionId) -> Result<&mut [u8], RunError> {
        match &mut self.imp {
            Imp::Host(h) => h.input_mut(id),
            #[cfg(feature = "cuda")]
            Imp::Device(d) => d.input_mut(id),
        }
    }

    /// Copy `src` into the start of input region `id`, the way the session's consumer reads
    /// it best: on a device session with [`copy_to_staging`] (streaming stores on x86-64 for
    /// large inputs: the graph's upload then reads memory, not the CPU's caches); on a host
    /// session with a plain copy (the host stage that reads it next finds it in cache). No
    /// allocation.
    ///
    /// # Errors
    /// [`RunError::NoSuchRegion`]; [`RunError::BufferSize`] (`what` "input region") when the
    /// region holds fewer bytes than `src`: nothing is copied then.
    pub fn copy_to_input(&mut self, id: RegionId, src: &[u8]) -> Result<(), RunError> {
        let device = self.placement() == Placement::Device;
        let dst = self.input_mut(id)?;
        if dst.len() < src.len() {
            return Err(RunError::BufferSize {
                what: "input region",
                index: id.index(),
                expected: src.len(),
                actual: dst.len(),
            });
        }
        if device {
            copy_to_staging(dst, src);
        } else {
            dst[..src.len()].copy_from_slice(src);
        }
        Ok(())
    }

    /// Run the pipeline once on the current inputs; returns when the outputs are ready.
    /// No allocation on a device session (the host session's networks may allocate inside
    /// their engine: tract does).
    ///
    /// # Errors
    /// A `Copy` [`RunError`].
    pub fn run(&mut self) -> Result<(), RunError> {
        match &mut self.imp {
            Imp::Host(h) => h.run(),
            #[cfg(feature = "cuda")]
            Imp::Device(d) => d.run(),
        }
    }

    /// The bytes of output region `id` after [`Session::run`]. No allocation.
    ///
    /// # Errors
    /// [`RunError::NoSuchRegion`] when `id` is not an output region.
    pub fn output(&self, id: RegionId) -> Result<&[u8], RunError> {
        match &self.imp {
            Imp::Host(h) => h.output(id),
            #[cfg(feature = "cuda")]
            Imp::Device(d) => d.output(id),
        }
    }

    /// Copy any region's current bytes to `dst` (tests, tools, debugging; blocks on a device
    /// session).
    ///
    /// # Errors
    /// [`RunError::NoSuchRegion`], [`RunError::BufferSize`] or a driver error.
    pub fn read_region(&mut self, id: RegionId, dst: &mut [u8]) -> Result<(), RunError> {
        match &mut self.imp {
            Imp::Host(h) => h.read_region(id, dst),
            #[cfg(feature = "cuda")]
            Imp::Device(d) => d.read_region(id, dst),
        }
    }

    /// Overwrite any region's current bytes with `src` (a state restored; not for per-run
    /// inputs, which [`Session::input_mut`] stages: an input region written here is
    /// overwritten by the next run's upload, and so is a state's cursor). Blocks on a device
    /// session. A region of a recurrent state is the logical one (the buffer the next run
    /// reads under that id).
    ///
    /// # Errors
    /// [`RunError::NoSuchRegion`], [`RunError::BufferSize`] or a driver error.
    pub fn write_region(&mut self, id: RegionId, src: &[u8]) -> Result<(), RunError> {
        match &mut self.imp {
            Imp::Host(h) => h.write_region(id, src),
            #[cfg(feature = "cuda")]
            Imp::Device(d) => d.write_region(id, src),
        }
    }

    /// Reset every request state for a new request: appendable states to no valid rows in
    /// every slot (a host store: the next run's cursor says so), recurrent states to zeros
    /// (blocks on a device session). No allocation.
    ///
    /// # Errors
    /// A driver error.
    pub fn reset_states(&mut self) -> Result<(), RunError> {
        match &mut self.imp {
            Imp::Host(h) => h.reset_states(),
            #[cfg(feature = "cuda")]
            Imp::Device(d) => d.reset_states(),
        }
    }

    /// Reset one request state (every slot of an appendable one; a recurrent one to zeros,
    /// blocking on a device session). No allocation.
    ///
    /// # Errors
    /// [`StateError::NoSuchState`], a driver error.
    pub fn reset_state(&mut self, id: StateId) -> Result<(), RunError> {
        match &mut self.imp {
            Imp::Host(h) => h.reset_state(id),
            #[cfg(feature = "cuda")]
            Imp::Device(d) => d.reset_state(id),
        }
    }

    /// Reset one slot of an appendable state (a new request in that slot; the others keep
    /// theirs). No allocation, nothing on the device.
    ///
    /// # Errors
    /// [`StateError::NoSuchState`], [`StateError::NoSuchSlot`],
    /// [`StateError::NotAppendable`].
    pub fn reset_slot(&mut self, id: StateId, slot: usize) -> Result<(), StateError> {
        self.states_mut().reset_slot(id, slot)
    }

    /// Rows the next run appends to `slot` of an appendable state (a prompt's length, then
    /// each decode step's 1): for that run only, then the state's `rows_per_run` again.
    /// Checked now and again when the run starts. No allocation.
    ///
    /// # Errors
    /// [`StateError::Full`] when the rows would pass the capacity,
    /// [`StateError::TooManyRows`] past the state's `max_rows`, and the errors of a wrong
    /// id or slot.
    pub fn set_next_rows(
        &mut self,
        id: StateId,
        slot: usize,
        rows: usize,
    ) -> Result<(), StateError> {
        self.states_mut().set_next_rows(id, slot, rows)
    }

    /// The cursor the next run sees in `slot` of an appendable state: `position` = rows
    /// valid now, `length` = rows valid after it.
    ///
    /// # Errors
    /// The errors of a wrong id or slot, [`StateError::NotAppendable`].
    pub fn cursor(&self, id: StateId, slot: usize) -> Result<Cursor, StateError> {
        self.states().cursor(id, slot)
    }

    /// A request state's name (errors carry its index).
    ///
    /// # Errors
    /// [`StateError::NoSuchState`].
    pub fn state_name(&self, id: StateId) -> Result<&str, StateError> {
        self.states().name(id)
    }

    fn states(&self) -> &state::StateBook {
        match &self.imp {
            Imp::Host(h) => h.states(),
            #[cfg(feature = "cuda")]
            Imp::Device(d) => d.states(),
        }
    }

    fn states_mut(&mut self) -> &mut state::StateBook {
        match &mut self.imp {
            Imp::Host(h) => h.states_mut(),
            #[cfg(feature = "cuda")]
            Imp::Device(d) => d.states_mut(),
        }
    }

    /// Wall time of each step of the last run on the host, or GPU time from events when the
    /// device session was built with [`SessionOptions::step_timing`].
    pub fn step_times(&self) -> &[(String, f64)] {
        match &self.imp {
            Imp::Host(h) => h.step_times(),
            #[cfg(feature = "cuda")]
            Imp::Device(d) => d.step_times(),
        }
    }

    /// The device session, when this is one.
    #[cfg(feature = "cuda")]
    pub fn device(&self) -> Option<&DeviceSession> {
        match &self.imp {
            Imp::Device(d) => Some(d),
            Imp::Host(_) => None,
        }
    }

    /// The device session, mutable.
    #[cfg(feature = "cuda")]
    pub fn device_mut(&mut self) -> Option<&mut DeviceSession> {
        match &mut self.imp {
            Imp::Device(d) => Some(d),
            Imp::Host(_) => None,
        }
    }
}

#[cfg(feature = "cuda")]
fn has_networks(spec: &PipelineSpec) -> bool {
    spec.steps.iter().any(|s| matches!(s, Step::Network(_)))
}

fn placement_of(spec: &PipelineSpec) -> Result<Placement, SpecError> {
    let mut placement: Option<Placement> = None;
    for step in &spec.steps {
        if let Step::Network(n) = step {
            let p = n.plan.placement();
            match placement {
                None => placement = Some(p),
                Some(q) if q != p => {
                    return Err(SpecError::MixedPlacement {
                        detail: format!("network `{}` is {p:?}, an earlier one {q:?}", n.name),
                    });
                }
                Some(_) => {}
            }
        }
    }
    Ok(placement.unwrap_or(Placement::Host))
}
