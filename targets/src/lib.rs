//! # tether-targets
//!
//! The ground floor of tether: the platform vocabulary, what a target device
//! is, what it can run, and where its NVIDIA libraries are.
//!
//! * [`vocab`]: the one definition of [`Sm`], [`TrtVersion`], [`CudaVersion`],
//!   [`CpuArch`], [`EngineKind`], [`HardwareCompat`], [`LibraryFlavor`],
//!   [`TrtLibrary`], [`GpuFacts`] and the target flag bits, shared by the
//!   bundle format, the runtime and the CLI.
//! * [`compat`]: [`check_plan`], the TensorRT compatibility rules (plan
//!   record, loaded library, GPU), used by engine selection *and* by the
//!   runtime's deserialize gate; one table of cases tests both.
//! * [`libs`]: the one list of library directories (per library, per CPU
//!   architecture, plus pip's folders) and the one loader of `libcuda`,
//!   TensorRT, cuDNN and cuBLAS, reporting every place tried.
//! * [`descriptor`]: static descriptors of the supported targets (data-center
//!   x86_64 GPUs, Jetson AGX Orin, Jetson AGX Thor, DRIVE AGX Orin, DRIVE AGX
//!   Thor): compute capabilities, memory model, DLA cores, software releases
//!   with their CUDA and TensorRT. `&'static` tables, no allocation.
//! * [`jetpack`]: the Jetson Linux (L4T) to JetPack table.
//! * [`probe`](mod@probe): run-time detection with no NVIDIA tool and no SDK: the CUDA
//!   driver by `dlopen` (every path tried is reported), GPUs, L4T/JetPack,
//!   board model, nvpmodel power mode, CPU and OS. Works, and explains
//!   itself, on machines with none of these.
//! * [`select`]: [`select_engine`], the pure function that picks which of a
//!   bundle's engines to run on a device, or returns a [`Refusal`] naming
//!   both sides.
//! * [`sources`]: the citations behind every fact above.
//!
//! Feature `serde`: `Serialize` for all report, descriptor and selection
//! types (for `tether doctor --json`).

#![warn(missing_docs)]

pub mod compat;
pub mod descriptor;
pub mod jetpack;
pub mod libs;
pub mod probe;
pub mod select;
pub mod sources;
pub mod vocab;

pub use compat::{PlanRecord, PlanRule, PlanVerdict, Reject, check_plan};
pub use descriptor::{
    MemoryModel, Platform, SoftwareRelease, TARGETS, TargetDescriptor, TrtSpec, by_id, identify,
};
pub use jetpack::{JetPackMatch, JetPackRelease, L4tVersion, jetpack_for};
pub use libs::{Library, SearchEnv, SearchReport, Tried};
pub use probe::{ProbeOptions, ProbeReport, Root, cpu_model, probe, probe_with};
pub use select::{Choice, DeviceFacts, Offer, Refusal, Rejected, Rule, select_engine};
pub use sources::Source;
pub use vocab::{
    CpuArch, CudaVersion, EngineKind, FLAG_EXCLUDE_LEAN_RUNTIME, FLAG_VERSION_COMPATIBLE, GpuFacts,
    HardwareCompat, KNOWN_FLAGS, LibraryFlavor, Sm, TrtLibrary, TrtVersion,
};
