//! # tether-targets
//!
//! What a tether target device is and what it can run.
//!
//! * [`descriptor`]: static descriptors of the supported targets (data-center
//!   x86_64 GPUs, Jetson AGX Orin, Jetson AGX Thor, DRIVE AGX Orin, DRIVE AGX
//!   Thor): compute capabilities, memory model, DLA cores, software releases
//!   with their CUDA and TensorRT, and the directories their CUDA and
//!   TensorRT libraries live in. `&'static` tables, no allocation.
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

pub mod descriptor;
pub mod jetpack;
pub mod probe;
pub mod select;
pub mod sources;
mod version;

pub use descriptor::{
    MemoryModel, Platform, SoftwareRelease, TARGETS, TargetDescriptor, TrtSpec, by_id,
    cuda_lib_dirs, identify, tensorrt_lib_dirs,
};
pub use jetpack::{JetPackMatch, JetPackRelease, L4tVersion, jetpack_for};
pub use probe::{ProbeOptions, ProbeReport, Root, probe, probe_with};
pub use select::{
    Choice, DeviceFacts, EngineKind, FLAG_LEAN, FLAG_VERSION_COMPATIBLE, GpuFacts, HardwareCompat,
    Offer, Refusal, Reject, Rejected, Rule, select_engine,
};
pub use sources::Source;
pub use version::{CpuArch, CudaVersion, Sm, TrtVersion};
