//! Which engine of a bundle to run on this device: a pure, allocation-free
//! function of the bundle's target records ([`Offer`]) and the device's
//! facts ([`DeviceFacts`]).
//!
//! # Order
//!
//! 1. [`Rule::ExactPlan`]: a TensorRT plan built for this GPU's compute
//!    capability with exactly the loaded TensorRT version.
//! 2. [`Rule::HardwareCompatiblePlan`]: a plan built with
//!    `HardwareCompatibilityLevel::kAMPERE_PLUS` (any Ampere-or-newer GPU)
//!    with exactly the loaded TensorRT version. TensorRT supports hardware
//!    compatibility only on discrete Ampere-or-newer GPUs, "not on NVIDIA
//!    DRIVE OS or JetPack" ([`sources::TRT_HARDWARE_COMPAT`](crate::sources::TRT_HARDWARE_COMPAT)), so such plans
//!    are refused on integrated GPUs (Orin, Thor).
//! 3. [`Rule::VersionCompatiblePlan`]: a plan built with
//!    `BuilderFlag::kVERSION_COMPATIBLE` (target flag bit 1) by TensorRT
//!    8.6 or later, not newer than the loaded library, and either of the
//!    same major or one of the two documented cross-major pairs: 8 -> 10 and
//!    10 -> 11 ([`sources::TRT_VERSION_COMPAT`](crate::sources::TRT_VERSION_COMPAT),
//!    [`sources::TRT_SUPPORT_MATRIX_1141`](crate::sources::TRT_SUPPORT_MATRIX_1141)). Plans for the same SM are
//!    preferred to hardware-compatible ones, then the newest plan.
//! 4. The portable engines: [`Rule::PortableGpu`] (tract-cuda) when the
//!    device has an NVIDIA GPU and a CUDA driver, then
//!    [`Rule::PortableCpu`] (tract on the CPU).
//!
//! Within a rule, the lower bundle index wins (the bundle author's order).
//!
//! # Versions
//!
//! A plan that is not version-compatible needs the *same* TensorRT version
//! as the library that loads it: "In the standard runtime, version numbers
//! must match (in major, minor, patch, and build)" ([`sources::DRIVE_OS_703_TRT`](crate::sources::DRIVE_OS_703_TRT)).
//! The bundle records `MAJOR*10000+MINOR*100+PATCH` (no build number), so
//! major, minor and patch must be equal; a 10.3.1 plan is refused on a 10.3.0
//! library with a message that names both.

use core::fmt;

use crate::version::{CpuArch, CudaVersion, Sm, TrtVersion};

/// Target flag bit: the plan was built with `kVERSION_COMPATIBLE`.
pub const FLAG_VERSION_COMPATIBLE: u32 = 1;
/// Target flag bit: the plan was built with `kEXCLUDE_LEAN_RUNTIME` (a
/// version-compatible plan without an embedded lean runtime; the loaded
/// library must be able to run it itself).
pub const FLAG_LEAN: u32 = 2;
/// Every flag bit this crate understands.
pub const KNOWN_FLAGS: u32 = FLAG_VERSION_COMPATIBLE | FLAG_LEAN;

/// How an engine runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum EngineKind {
    /// A serialized TensorRT plan.
    TensorRt,
    /// The ONNX graph lowered by tether's native GPU engine (cuDNN, cuBLAS and tether's
    /// kernels; the whole network in one CUDA graph).
    CudaNative,
    /// The ONNX graph on tract-cuda (any NVIDIA GPU with a CUDA driver).
    TractCuda,
    /// The ONNX graph on tract on the CPU (runs everywhere).
    TractCpu,
}

impl EngineKind {
    /// `TensorRT`, `tract-cuda`, `tract CPU`.
    pub const fn as_str(self) -> &'static str {
        match self {
            EngineKind::TensorRt => "TensorRT",
            EngineKind::CudaNative => "cuda-native",
            EngineKind::TractCuda => "tract-cuda",
            EngineKind::TractCpu => "tract CPU",
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// TensorRT `HardwareCompatibilityLevel` (`NvInferRuntime.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum HardwareCompat {
    /// `kNONE` = 0: only the compute capability it was built on.
    None,
    /// `kAMPERE_PLUS` = 1: any Ampere or newer GPU (sm >= 8.0).
    AmperePlus,
    /// `kSAME_COMPUTE_CAPABILITY` = 2: any GPU with the compute capability
    /// it was built on.
    SameComputeCapability,
}

impl HardwareCompat {
    /// From the raw bundle value; `None` for values TensorRT does not define.
    pub const fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            0 => Some(HardwareCompat::None),
            1 => Some(HardwareCompat::AmperePlus),
            2 => Some(HardwareCompat::SameComputeCapability),
            _ => None,
        }
    }
}

/// One target record of a bundle: an engine the bundle offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Offer {
    /// Index of the target record in the bundle.
    pub index: u32,
    /// Which engine.
    pub engine: EngineKind,
    /// CPU architecture the engine is for ([`CpuArch::Any`] for ONNX on
    /// tract).
    pub arch: CpuArch,
    /// TensorRT: the compute capability the plan was built on. tract-cuda:
    /// an optional minimum. tract CPU: ignored.
    pub sm: Option<Sm>,
    /// TensorRT version that built the plan, `MAJOR*10000+MINOR*100+PATCH`;
    /// 0 for non-TensorRT engines.
    pub tensorrt_version: u32,
    /// Raw `HardwareCompatibilityLevel` (0 none, 1 Ampere+, 2 same compute
    /// capability).
    pub hardware_compat: u32,
    /// [`FLAG_VERSION_COMPATIBLE`] | [`FLAG_LEAN`].
    pub flags: u32,
}

impl Offer {
    /// A plain TensorRT plan record (no hardware or version compatibility).
    pub const fn tensorrt(index: u32, arch: CpuArch, sm: Sm, tensorrt_version: u32) -> Self {
        Self {
            index,
            engine: EngineKind::TensorRt,
            arch,
            sm: Some(sm),
            tensorrt_version,
            hardware_compat: 0,
            flags: 0,
        }
    }
    /// A tract-cuda record for any architecture and any GPU.
    pub const fn tract_cuda(index: u32) -> Self {
        Self {
            index,
            engine: EngineKind::TractCuda,
            arch: CpuArch::Any,
            sm: None,
            tensorrt_version: 0,
            hardware_compat: 0,
            flags: 0,
        }
    }
    /// A tract CPU record for any architecture.
    pub const fn tract_cpu(index: u32) -> Self {
        Self {
            index,
            engine: EngineKind::TractCpu,
            arch: CpuArch::Any,
            sm: None,
            tensorrt_version: 0,
            hardware_compat: 0,
            flags: 0,
        }
    }
    /// The same record with `flags`.
    pub const fn with_flags(mut self, flags: u32) -> Self {
        self.flags = flags;
        self
    }
    /// The same record with hardware-compatibility level `raw`.
    pub const fn with_hardware_compat(mut self, raw: u32) -> Self {
        self.hardware_compat = raw;
        self
    }
    /// Whether [`FLAG_VERSION_COMPATIBLE`] is set.
    pub const fn version_compatible(&self) -> bool {
        self.flags & FLAG_VERSION_COMPATIBLE != 0
    }
    /// Whether [`FLAG_LEAN`] is set.
    pub const fn lean(&self) -> bool {
        self.flags & FLAG_LEAN != 0
    }
}

impl fmt::Display for Offer {
    /// `#0 TensorRT plan sm_87 TensorRT 10.3.0 aarch64 [version-compatible]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} {}", self.index, self.engine)?;
        if self.engine == EngineKind::TensorRt {
            f.write_str(" plan")?;
            if let Some(sm) = self.sm {
                write!(f, " sm_{}", sm.number())?;
            }
            write!(f, " TensorRT {}", TrtVersion(self.tensorrt_version))?;
        } else if let Some(sm) = self.sm {
            write!(f, " (sm_{}+)", sm.number())?;
        }
        if self.arch != CpuArch::Any {
            write!(f, " {}", self.arch)?;
        }
        match HardwareCompat::from_raw(self.hardware_compat) {
            Some(HardwareCompat::None) => {}
            Some(HardwareCompat::AmperePlus) => f.write_str(" [hardware-compatible: Ampere+]")?,
            Some(HardwareCompat::SameComputeCapability) => {
                f.write_str(" [hardware-compatible: same compute capability]")?
            }
            None => write!(f, " [hardware-compat {}?]", self.hardware_compat)?,
        }
        if self.version_compatible() {
            f.write_str(" [version-compatible]")?;
        }
        if self.lean() {
            f.write_str(" [lean]")?;
        }
        Ok(())
    }
}

/// The GPU of a device, as selection needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct GpuFacts {
    /// Compute capability the driver reports.
    pub sm: Sm,
    /// `CU_DEVICE_ATTRIBUTE_INTEGRATED`: shares DRAM with the CPU (Jetson,
    /// DRIVE).
    pub integrated: bool,
}

/// What selection needs to know about a device. Build it from
/// [`ProbeReport::device_facts`](crate::probe::ProbeReport::device_facts)
/// or [`TargetDescriptor::facts`](crate::TargetDescriptor::facts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct DeviceFacts {
    /// Host CPU architecture.
    pub arch: CpuArch,
    /// The GPU engines would run on, if any.
    pub gpu: Option<GpuFacts>,
    /// Version of the TensorRT library found, `MAJOR*10000+MINOR*100+PATCH`.
    pub tensorrt: Option<u32>,
    /// CUDA driver version (`cuDriverGetVersion`, e.g. 12060).
    pub cuda_driver: Option<u32>,
}

impl DeviceFacts {
    /// A device with no GPU and no TensorRT.
    pub const fn cpu_only(arch: CpuArch) -> Self {
        Self {
            arch,
            gpu: None,
            tensorrt: None,
            cuda_driver: None,
        }
    }
}

impl fmt::Display for DeviceFacts {
    /// `aarch64, GPU sm_87 (integrated), TensorRT 10.3.0, CUDA driver 12.6`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.arch)?;
        match self.gpu {
            Some(g) => write!(
                f,
                ", GPU sm_{} ({})",
                g.sm.number(),
                if g.integrated {
                    "integrated"
                } else {
                    "discrete"
                }
            )?,
            None => f.write_str(", no NVIDIA GPU")?,
        }
        match self.tensorrt {
            Some(v) => write!(f, ", TensorRT {}", TrtVersion(v))?,
            None => f.write_str(", no TensorRT library")?,
        }
        if let Some(d) = self.cuda_driver {
            write!(f, ", CUDA driver {}", CudaVersion(d))?;
        }
        Ok(())
    }
}

/// Why the chosen engine was allowed to run, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum Rule {
    /// Same compute capability and same TensorRT version.
    ExactPlan,
    /// Hardware-compatible (Ampere+) plan, same TensorRT version.
    HardwareCompatiblePlan,
    /// Version-compatible plan run by a newer (or equal) TensorRT.
    VersionCompatiblePlan,
    /// tract-cuda on the GPU.
    PortableGpu,
    /// tract on the CPU.
    PortableCpu,
}

/// Why one offer cannot run on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum Reject {
    /// Built for another CPU architecture.
    ArchMismatch {
        /// The offer's architecture.
        offer: CpuArch,
        /// The device's.
        device: CpuArch,
    },
    /// A GPU engine and the device has no (usable) NVIDIA GPU.
    NoGpu,
    /// A TensorRT plan and no TensorRT library was found.
    NoTensorRt,
    /// A TensorRT record without a compute capability.
    MissingSm,
    /// A TensorRT record with version 0.
    MissingTensorRtVersion,
    /// Flag bits this tether does not understand.
    UnknownFlags(u32),
    /// [`FLAG_LEAN`] without [`FLAG_VERSION_COMPATIBLE`].
    LeanWithoutVersionCompatible,
    /// A hardware-compatibility value TensorRT does not define.
    UnknownHardwareCompat(u32),
    /// Built for another compute capability, not hardware-compatible.
    SmMismatch {
        /// The plan's.
        plan: Sm,
        /// The device's.
        device: Sm,
    },
    /// A hardware-compatible plan on an integrated GPU (JetPack / DRIVE OS).
    HardwareCompatOnIntegrated {
        /// The plan's.
        plan: Sm,
        /// The device's.
        device: Sm,
    },
    /// An Ampere+ plan on a GPU older than Ampere, or built on one.
    NotAmpere {
        /// The plan's.
        plan: Sm,
        /// The device's.
        device: Sm,
    },
    /// tract-cuda record asks for a newer GPU.
    SmBelowMinimum {
        /// Required minimum.
        minimum: Sm,
        /// The device's.
        device: Sm,
    },
    /// A non-version-compatible plan built by another TensorRT version.
    VersionMismatch {
        /// The plan's TensorRT.
        plan: u32,
        /// The loaded library's.
        library: u32,
    },
    /// A version-compatible plan built before TensorRT 8.6.
    VersionCompatibleTooOld {
        /// The plan's TensorRT.
        plan: u32,
    },
    /// A version-compatible plan built by a newer TensorRT than the library.
    LibraryOlderThanPlan {
        /// The plan's TensorRT.
        plan: u32,
        /// The loaded library's.
        library: u32,
    },
    /// A version-compatible plan across a major boundary TensorRT does not
    /// support (only 8 -> 10 and 10 -> 11 are).
    CrossMajorUnsupported {
        /// The plan's TensorRT.
        plan: u32,
        /// The loaded library's.
        library: u32,
    },
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Reject::ArchMismatch { offer, device } => {
                write!(f, "built for {offer}, this device is {device}")
            }
            Reject::NoGpu => f.write_str("needs an NVIDIA GPU, none was found"),
            Reject::NoTensorRt => f.write_str("needs the TensorRT library, none was found"),
            Reject::MissingSm => f.write_str("TensorRT record has no compute capability"),
            Reject::MissingTensorRtVersion => {
                f.write_str("TensorRT record has no TensorRT version")
            }
            Reject::UnknownFlags(bits) => write!(
                f,
                "flag bits {:#x} are not understood by this tether",
                bits & !KNOWN_FLAGS
            ),
            Reject::LeanWithoutVersionCompatible => {
                f.write_str("marked lean but not version-compatible (invalid record)")
            }
            Reject::UnknownHardwareCompat(v) => write!(
                f,
                "hardware-compatibility level {v} is not defined by TensorRT"
            ),
            Reject::SmMismatch { plan, device } => {
                write!(
                    f,
                    "built for sm_{}, this GPU is sm_{}",
                    plan.number(),
                    device.number()
                )?;
                if plan.is_thor() && device.is_thor() {
                    f.write_str(" (the same Thor GPU: sm_101 under CUDA 12.x, sm_110 under CUDA 13; rebuild the plan with this driver)")?;
                }
                Ok(())
            }
            Reject::HardwareCompatOnIntegrated { plan, device } => write!(
                f,
                "hardware-compatible plan (built on sm_{}) cannot run on the integrated sm_{} GPU: TensorRT hardware compatibility is not supported on JetPack or DRIVE OS",
                plan.number(),
                device.number()
            ),
            Reject::NotAmpere { plan, device } => write!(
                f,
                "Ampere+ plan (built on sm_{}) needs both build and run GPU at sm_80 or newer, this GPU is sm_{}",
                plan.number(),
                device.number()
            ),
            Reject::SmBelowMinimum { minimum, device } => write!(
                f,
                "needs sm_{} or newer, this GPU is sm_{}",
                minimum.number(),
                device.number()
            ),
            Reject::VersionMismatch { plan, library } => write!(
                f,
                "plan built with TensorRT {}, library is {} (a plan that is not version-compatible needs the same TensorRT version)",
                TrtVersion(plan),
                TrtVersion(library)
            ),
            Reject::VersionCompatibleTooOld { plan } => write!(
                f,
                "version-compatible plans need TensorRT 8.6 or later, this one was built with {}",
                TrtVersion(plan)
            ),
            Reject::LibraryOlderThanPlan { plan, library } => write!(
                f,
                "version-compatible plan built with TensorRT {}, library {} is older",
                TrtVersion(plan),
                TrtVersion(library)
            ),
            Reject::CrossMajorUnsupported { plan, library } => write!(
                f,
                "version-compatible plan built with TensorRT {}, library is {}: TensorRT supports only 8 -> 10 and 10 -> 11 across majors",
                TrtVersion(plan),
                TrtVersion(library)
            ),
        }
    }
}

/// An offer and why it was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Rejected {
    /// The offer.
    pub offer: Offer,
    /// Why it cannot run here.
    pub reason: Reject,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.offer, self.reason)
    }
}

/// The engine to run, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Choice {
    /// Index of the chosen target record.
    pub index: u32,
    /// Its engine kind.
    pub engine: EngineKind,
    /// The rule that admitted it.
    pub rule: Rule,
    /// The whole record.
    pub offer: Offer,
    /// The device it was chosen for.
    pub device: DeviceFacts,
    /// The runtime must call `IRuntime::setEngineHostCodeAllowed(true)`
    /// before deserializing: a version-compatible plan that embeds its lean
    /// runtime ([`sources::TRT_VERSION_COMPAT`](crate::sources::TRT_VERSION_COMPAT)).
    pub host_code_required: bool,
    /// The first offer of a better kind that could not run (to say why a
    /// portable engine was chosen), if any.
    pub passed_over: Option<Rejected>,
    /// How many offers could not run on this device.
    pub rejected: u32,
}

impl fmt::Display for Choice {
    /// One line for the log, e.g. `engine #0: TensorRT plan sm_87 TensorRT
    /// 10.3.0 aarch64 - exact match for this device (aarch64, GPU sm_87
    /// (integrated), TensorRT 10.3.0, CUDA driver 12.6)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "engine {} - ", self.offer)?;
        match self.rule {
            Rule::ExactPlan => f.write_str("exact match for this device")?,
            Rule::HardwareCompatiblePlan => f.write_str("hardware-compatible plan for this GPU")?,
            Rule::VersionCompatiblePlan => write!(
                f,
                "version-compatible plan run by the newer library{}",
                if self.host_code_required {
                    " (lean runtime from the plan: host code allowed)"
                } else {
                    ""
                }
            )?,
            Rule::PortableGpu => f.write_str("portable GPU engine")?,
            Rule::PortableCpu => f.write_str("portable CPU engine")?,
        }
        write!(f, " ({})", self.device)?;
        if let Some(p) = self.passed_over {
            write!(f, "; not used: {p}")?;
            if self.rejected > 1 {
                write!(f, " (+{} more)", self.rejected - 1)?;
            }
        }
        Ok(())
    }
}

/// How many rejected offers a [`Refusal`] lists; more are counted.
pub const MAX_LISTED: usize = 16;

/// No offer of the bundle can run on the device. Names the device and, for
/// each offer (up to [`MAX_LISTED`]), what it is and why it cannot run.
/// `Copy`, `'static` and allocation-free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    device: DeviceFacts,
    listed: [Option<Rejected>; MAX_LISTED],
    total: usize,
}

impl Refusal {
    /// The device that was refused.
    pub fn device(&self) -> &DeviceFacts {
        &self.device
    }
    /// Number of offers in the bundle (0: the bundle offers no engine).
    pub fn offered(&self) -> usize {
        self.total
    }
    /// The first [`MAX_LISTED`] offers and why each cannot run.
    pub fn rejected(&self) -> impl Iterator<Item = &Rejected> {
        self.listed.iter().flatten()
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.total == 0 {
            return write!(
                f,
                "the bundle offers no engine at all (device: {})",
                self.device
            );
        }
        write!(
            f,
            "no engine in the bundle can run on this device ({}); the bundle offers {}: ",
            self.device, self.total
        )?;
        for (i, r) in self.rejected().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{r}")?;
        }
        if self.total > MAX_LISTED {
            write!(f, "; and {} more", self.total - MAX_LISTED)?;
        }
        Ok(())
    }
}

impl std::error::Error for Refusal {}

#[cfg(feature = "serde")]
impl serde::Serialize for Refusal {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        struct List<'a>(&'a Refusal);
        impl serde::Serialize for List<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.0.rejected())
            }
        }
        let mut st = s.serialize_struct("Refusal", 3)?;
        st.serialize_field("device", &self.device)?;
        st.serialize_field("offered", &self.total)?;
        st.serialize_field("rejected", &List(self))?;
        st.end()
    }
}

/// Where an accepted offer ranks: rule, then a rule-specific sub-rank (lower
/// is better), then newer plan first, then lower index.
type Rank = (Rule, u8, core::cmp::Reverse<u32>, u32);

/// Whether and how `offer` can run on `device`.
pub fn evaluate(offer: &Offer, device: &DeviceFacts) -> Result<Rule, Reject> {
    evaluate_ranked(offer, device).map(|r| r.0)
}

fn evaluate_ranked(offer: &Offer, device: &DeviceFacts) -> Result<Rank, Reject> {
    if !offer.arch.runs_on(device.arch) {
        return Err(Reject::ArchMismatch {
            offer: offer.arch,
            device: device.arch,
        });
    }
    let late = core::cmp::Reverse(0);
    match offer.engine {
        EngineKind::TractCpu => Ok((Rule::PortableCpu, 0, late, offer.index)),
        EngineKind::CudaNative | EngineKind::TractCuda => {
            // A GPU is only ever known through a loaded CUDA driver.
            let gpu = device.gpu.ok_or(Reject::NoGpu)?;
            if let Some(minimum) = offer.sm
                && gpu.sm < minimum
            {
                return Err(Reject::SmBelowMinimum {
                    minimum,
                    device: gpu.sm,
                });
            }
            Ok((Rule::PortableGpu, 0, late, offer.index))
        }
        EngineKind::TensorRt => evaluate_plan(offer, device),
    }
}

fn evaluate_plan(offer: &Offer, device: &DeviceFacts) -> Result<Rank, Reject> {
    let gpu = device.gpu.ok_or(Reject::NoGpu)?;
    let library = device.tensorrt.ok_or(Reject::NoTensorRt)?;
    let plan_sm = offer.sm.ok_or(Reject::MissingSm)?;
    if offer.tensorrt_version == 0 {
        return Err(Reject::MissingTensorRtVersion);
    }
    if offer.flags & !KNOWN_FLAGS != 0 {
        return Err(Reject::UnknownFlags(offer.flags));
    }
    if offer.lean() && !offer.version_compatible() {
        return Err(Reject::LeanWithoutVersionCompatible);
    }
    let hw = HardwareCompat::from_raw(offer.hardware_compat)
        .ok_or(Reject::UnknownHardwareCompat(offer.hardware_compat))?;

    // Compute capability.
    let same_sm = plan_sm == gpu.sm;
    if !same_sm {
        match hw {
            HardwareCompat::None | HardwareCompat::SameComputeCapability => {
                return Err(Reject::SmMismatch {
                    plan: plan_sm,
                    device: gpu.sm,
                });
            }
            HardwareCompat::AmperePlus => {
                if gpu.integrated {
                    return Err(Reject::HardwareCompatOnIntegrated {
                        plan: plan_sm,
                        device: gpu.sm,
                    });
                }
                if plan_sm < Sm::AMPERE || gpu.sm < Sm::AMPERE {
                    return Err(Reject::NotAmpere {
                        plan: plan_sm,
                        device: gpu.sm,
                    });
                }
            }
        }
    }

    // TensorRT version.
    let plan_v = TrtVersion(offer.tensorrt_version);
    let lib_v = TrtVersion(library);
    let same_version = plan_v == lib_v;
    if !same_version {
        if !offer.version_compatible() {
            return Err(Reject::VersionMismatch {
                plan: plan_v.0,
                library: lib_v.0,
            });
        }
        if plan_v < TrtVersion::new(8, 6, 0) {
            return Err(Reject::VersionCompatibleTooOld { plan: plan_v.0 });
        }
        if lib_v < plan_v {
            return Err(Reject::LibraryOlderThanPlan {
                plan: plan_v.0,
                library: lib_v.0,
            });
        }
        let pair = (plan_v.major(), lib_v.major());
        if pair.0 != pair.1 && pair != (8, 10) && pair != (10, 11) {
            return Err(Reject::CrossMajorUnsupported {
                plan: plan_v.0,
                library: lib_v.0,
            });
        }
    }

    let newest = core::cmp::Reverse(plan_v.0);
    Ok(match (same_sm, same_version) {
        (true, true) => (Rule::ExactPlan, 0, newest, offer.index),
        (false, true) => (Rule::HardwareCompatiblePlan, 0, newest, offer.index),
        (true, false) => (Rule::VersionCompatiblePlan, 0, newest, offer.index),
        (false, false) => (Rule::VersionCompatiblePlan, 1, newest, offer.index),
    })
}

/// How far an offer got before it was rejected (higher: closer to
/// running).
fn closeness(r: &Reject) -> u8 {
    match r {
        Reject::ArchMismatch { .. } => 0,
        Reject::NoGpu | Reject::NoTensorRt => 1,
        Reject::MissingSm
        | Reject::MissingTensorRtVersion
        | Reject::UnknownFlags(_)
        | Reject::LeanWithoutVersionCompatible
        | Reject::UnknownHardwareCompat(_) => 2,
        Reject::SmMismatch { .. }
        | Reject::HardwareCompatOnIntegrated { .. }
        | Reject::NotAmpere { .. }
        | Reject::SmBelowMinimum { .. } => 3,
        Reject::VersionMismatch { .. }
        | Reject::VersionCompatibleTooOld { .. }
        | Reject::LibraryOlderThanPlan { .. }
        | Reject::CrossMajorUnsupported { .. } => 4,
    }
}

/// Picks the engine of a bundle to run on a device, or says exactly why none
/// can run. Pure and allocation-free; see the [module docs](self) for the
/// order and the TensorRT rules it follows.
///
/// # Errors
///
/// [`Refusal`] when no offer can run (including a bundle with no offers); it
/// names the device and every offer with its reason.
#[expect(
    clippy::result_large_err,
    reason = "the refusal lists every offer without allocating; it is built once per bundle load, never on the hot path"
)]
pub fn select_engine(offers: &[Offer], device: &DeviceFacts) -> Result<Choice, Refusal> {
    let mut best: Option<(Rank, &Offer)> = None;
    let mut rejected = 0u32;
    let mut listed = [None; MAX_LISTED];
    for (i, offer) in offers.iter().enumerate() {
        match evaluate_ranked(offer, device) {
            Ok(rank) => {
                if best.as_ref().is_none_or(|(b, _)| rank < *b) {
                    best = Some((rank, offer));
                }
            }
            Err(reason) => {
                rejected += 1;
                if let Some(slot) = listed.get_mut(i) {
                    *slot = Some(Rejected {
                        offer: *offer,
                        reason,
                    });
                }
            }
        }
    }
    let Some(((rule, ..), offer)) = best else {
        return Err(Refusal {
            device: *device,
            listed,
            total: offers.len(),
        });
    };
    // The first rejected offer of an engine kind that would have ranked above
    // the chosen one (TensorRT above portable, tract-cuda above CPU).
    let kind_rank = |k: EngineKind| match k {
        EngineKind::TensorRt => 0,
        EngineKind::CudaNative | EngineKind::TractCuda => 1,
        EngineKind::TractCpu => 2,
    };
    // Of those, the one that came closest to running (right architecture and
    // GPU but another TensorRT beats another architecture): the most useful
    // single reason to log.
    let mut passed_over: Option<(u8, Rejected)> = None;
    for o in offers
        .iter()
        .filter(|o| kind_rank(o.engine) < kind_rank(offer.engine))
    {
        if let Err(reason) = evaluate(o, device) {
            let c = closeness(&reason);
            if passed_over.as_ref().is_none_or(|(b, _)| c > *b) {
                passed_over = Some((c, Rejected { offer: *o, reason }));
            }
        }
    }
    let passed_over = passed_over.map(|(_, r)| r);
    Ok(Choice {
        index: offer.index,
        engine: offer.engine,
        rule,
        offer: *offer,
        device: *device,
        host_code_required: offer.engine == EngineKind::TensorRt
            && offer.version_compatible()
            && !offer.lean(),
        passed_over,
        rejected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::{self, TrtSpec};

    const A64: CpuArch = CpuArch::Aarch64;
    const X64: CpuArch = CpuArch::X86_64;
    const TRT103: u32 = 100300;
    const TRT1013: u32 = 101303;
    const TRT1016: u32 = 101602;
    const TRT114: u32 = 110400;

    /// Orin, JetPack 6.2: sm_87 iGPU, TensorRT 10.3.0, CUDA 12.6.
    const ORIN_JP62: DeviceFacts = DeviceFacts {
        arch: A64,
        gpu: Some(GpuFacts {
            sm: Sm::new(8, 7),
            integrated: true,
        }),
        tensorrt: Some(TRT103),
        cuda_driver: Some(12060),
    };
    /// Thor, JetPack 7.1: sm_110 iGPU, TensorRT 10.13.3, CUDA 13.0.
    const THOR_JP71: DeviceFacts = DeviceFacts {
        arch: A64,
        gpu: Some(GpuFacts {
            sm: Sm::new(11, 0),
            integrated: true,
        }),
        tensorrt: Some(TRT1013),
        cuda_driver: Some(13000),
    };
    /// The H200 gpu-host with the TensorRT 11.4 lean runtime.
    const H200: DeviceFacts = DeviceFacts {
        arch: X64,
        gpu: Some(GpuFacts {
            sm: Sm::new(9, 0),
            integrated: false,
        }),
        tensorrt: Some(TRT114),
        cuda_driver: Some(13000),
    };
    const CPU_X64: DeviceFacts = DeviceFacts::cpu_only(X64);
    const CPU_A64: DeviceFacts = DeviceFacts::cpu_only(A64);

    /// A bundle built for the three GPU targets plus the portable engines.
    fn full_bundle() -> [Offer; 5] {
        [
            Offer::tensorrt(0, X64, Sm::new(9, 0), TRT114),
            Offer::tensorrt(1, A64, Sm::new(8, 7), TRT103),
            Offer::tensorrt(2, A64, Sm::new(11, 0), TRT1013),
            Offer::tract_cuda(3),
            Offer::tract_cpu(4),
        ]
    }

    #[derive(Debug)]
    enum Want {
        Pick(u32, Rule),
        Refuse,
    }

    #[test]
    fn table() {
        use Want::*;
        let vc = FLAG_VERSION_COMPATIBLE;
        let cases: &[(&str, &[Offer], DeviceFacts, Want)] = &[
            (
                "orin exact",
                &full_bundle(),
                ORIN_JP62,
                Pick(1, Rule::ExactPlan),
            ),
            (
                "thor exact",
                &full_bundle(),
                THOR_JP71,
                Pick(2, Rule::ExactPlan),
            ),
            ("h200 exact", &full_bundle(), H200, Pick(0, Rule::ExactPlan)),
            (
                "cpu-only x86 takes tract cpu",
                &full_bundle(),
                CPU_X64,
                Pick(4, Rule::PortableCpu),
            ),
            (
                "cpu-only arm takes tract cpu",
                &full_bundle(),
                CPU_A64,
                Pick(4, Rule::PortableCpu),
            ),
            (
                "orin without tensorrt takes tract-cuda",
                &full_bundle(),
                DeviceFacts {
                    tensorrt: None,
                    ..ORIN_JP62
                },
                Pick(3, Rule::PortableGpu),
            ),
            (
                "orin on jetpack 7.2 (trt 10.16) cannot run the 10.3 plan",
                &full_bundle(),
                DeviceFacts {
                    tensorrt: Some(TRT1016),
                    ..ORIN_JP62
                },
                Pick(3, Rule::PortableGpu),
            ),
            (
                "orin jp7.2 takes a version-compatible 10.3 plan",
                &[
                    Offer::tensorrt(0, A64, Sm::new(8, 7), TRT103).with_flags(vc),
                    Offer::tract_cpu(1),
                ],
                DeviceFacts {
                    tensorrt: Some(TRT1016),
                    ..ORIN_JP62
                },
                Pick(0, Rule::VersionCompatiblePlan),
            ),
            (
                "exact beats version-compatible",
                &[
                    Offer::tensorrt(0, A64, Sm::new(8, 7), 100000).with_flags(vc),
                    Offer::tensorrt(1, A64, Sm::new(8, 7), TRT103),
                ],
                ORIN_JP62,
                Pick(1, Rule::ExactPlan),
            ),
            (
                "newest version-compatible plan first",
                &[
                    Offer::tensorrt(0, A64, Sm::new(8, 7), 100000).with_flags(vc),
                    Offer::tensorrt(1, A64, Sm::new(8, 7), 101000).with_flags(vc),
                ],
                DeviceFacts {
                    tensorrt: Some(TRT1016),
                    ..ORIN_JP62
                },
                Pick(1, Rule::VersionCompatiblePlan),
            ),
            (
                "sm_80 plan fails on orin with no kernel image",
                &[
                    Offer::tensorrt(0, A64, Sm::new(8, 0), TRT103),
                    Offer::tract_cpu(1),
                ],
                ORIN_JP62,
                Pick(1, Rule::PortableCpu),
            ),
            (
                "ampere+ plan refused on orin (JetPack)",
                &[Offer::tensorrt(0, A64, Sm::new(8, 6), TRT103).with_hardware_compat(1)],
                ORIN_JP62,
                Refuse,
            ),
            (
                "ampere+ plan from an A100 runs on H200",
                &[
                    Offer::tensorrt(0, X64, Sm::new(8, 0), TRT114).with_hardware_compat(1),
                    Offer::tract_cuda(1),
                ],
                H200,
                Pick(0, Rule::HardwareCompatiblePlan),
            ),
            (
                "exact beats hardware-compatible",
                &[
                    Offer::tensorrt(0, X64, Sm::new(8, 0), TRT114).with_hardware_compat(1),
                    Offer::tensorrt(1, X64, Sm::new(9, 0), TRT114),
                ],
                H200,
                Pick(1, Rule::ExactPlan),
            ),
            (
                "hardware-compatible beats version-compatible",
                &[
                    Offer::tensorrt(0, X64, Sm::new(9, 0), 110000).with_flags(vc),
                    Offer::tensorrt(1, X64, Sm::new(8, 9), TRT114).with_hardware_compat(1),
                ],
                H200,
                Pick(1, Rule::HardwareCompatiblePlan),
            ),
            (
                "same-compute-capability plan from another sm refused",
                &[Offer::tensorrt(0, X64, Sm::new(8, 9), TRT114).with_hardware_compat(2)],
                H200,
                Refuse,
            ),
            (
                "h200 with trt 11.4 runs a version-compatible trt 10 plan",
                &[Offer::tensorrt(0, X64, Sm::new(9, 0), 101300).with_flags(vc | FLAG_LEAN)],
                H200,
                Pick(0, Rule::VersionCompatiblePlan),
            ),
            (
                "trt 8.6 version-compatible plan is refused by trt 11",
                &[Offer::tensorrt(0, X64, Sm::new(9, 0), 80600).with_flags(vc)],
                H200,
                Refuse,
            ),
            (
                "x86 plan never runs on arm",
                &[Offer::tensorrt(0, X64, Sm::new(8, 7), TRT103)],
                ORIN_JP62,
                Refuse,
            ),
            (
                "patch mismatch refused",
                &[Offer::tensorrt(0, A64, Sm::new(8, 7), 100301)],
                ORIN_JP62,
                Refuse,
            ),
            (
                "thor sm_101 plan refused under CUDA 13 (sm_110)",
                &[Offer::tensorrt(0, A64, Sm::new(10, 1), TRT1013)],
                THOR_JP71,
                Refuse,
            ),
            ("empty bundle", &[], H200, Refuse),
            (
                "tract-cuda minimum sm",
                &[
                    Offer {
                        sm: Some(Sm::new(9, 0)),
                        ..Offer::tract_cuda(0)
                    },
                    Offer::tract_cpu(1),
                ],
                ORIN_JP62,
                Pick(1, Rule::PortableCpu),
            ),
            (
                "lower index wins a tie",
                &[Offer::tract_cpu(5), Offer::tract_cpu(2)],
                CPU_X64,
                Pick(2, Rule::PortableCpu),
            ),
            (
                "unknown flag bit refuses the plan",
                &[Offer::tensorrt(0, A64, Sm::new(8, 7), TRT103).with_flags(4)],
                ORIN_JP62,
                Refuse,
            ),
        ];
        for (name, offers, device, want) in cases {
            let got = select_engine(offers, device);
            match (want, &got) {
                (Pick(i, r), Ok(c)) => {
                    assert_eq!((c.index, c.rule), (*i, *r), "{name}: {c}");
                }
                (Refuse, Err(_)) => {}
                _ => panic!("{name}: wanted {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn reasons_name_both_sides() {
        let r = select_engine(
            &[Offer::tensorrt(0, A64, Sm::new(8, 0), TRT103)],
            &ORIN_JP62,
        )
        .unwrap_err();
        let s = r.to_string();
        assert!(s.contains("sm_80") && s.contains("sm_87"), "{s}");
        assert!(s.contains("TensorRT 10.3.0"), "{s}");
        assert_eq!(r.offered(), 1);
        assert_eq!(
            r.rejected().next().map(|x| x.reason),
            Some(Reject::SmMismatch {
                plan: Sm::new(8, 0),
                device: Sm::new(8, 7)
            })
        );

        let r = select_engine(
            &[Offer::tensorrt(0, A64, Sm::new(8, 7), 100301)],
            &ORIN_JP62,
        )
        .unwrap_err();
        let s = r.to_string();
        assert!(s.contains("10.3.1") && s.contains("10.3.0"), "{s}");

        let r = select_engine(
            &[Offer::tensorrt(0, A64, Sm::new(8, 6), TRT103).with_hardware_compat(1)],
            &ORIN_JP62,
        )
        .unwrap_err();
        assert!(r.to_string().contains("JetPack or DRIVE OS"), "{r}");

        let r = select_engine(
            &[Offer::tensorrt(0, A64, Sm::new(10, 1), TRT1013)],
            &THOR_JP71,
        )
        .unwrap_err();
        assert!(r.to_string().contains("sm_101 under CUDA 12.x"), "{r}");

        let r = select_engine(&[], &CPU_X64).unwrap_err();
        assert!(r.to_string().contains("no engine at all"), "{r}");
    }

    #[test]
    fn choice_line_explains_fallback() {
        let c = select_engine(&full_bundle(), &CPU_A64).unwrap();
        let s = c.to_string();
        assert!(s.contains("portable CPU engine"), "{s}");
        assert!(s.contains("not used: #1"), "{s}");
        assert!(s.contains("needs an NVIDIA GPU"), "{s}");
        assert!(!s.contains('\n'));
        assert_eq!(c.rejected, 4);

        // Orin on JetPack 7.2: the sm_87 plan is the useful reason, not the
        // x86_64 one listed first.
        let jp72 = DeviceFacts {
            tensorrt: Some(TRT1016),
            ..ORIN_JP62
        };
        let c = select_engine(&full_bundle(), &jp72).unwrap();
        assert_eq!(c.engine, EngineKind::TractCuda);
        assert_eq!(c.passed_over.map(|p| p.offer.index), Some(1), "{c}");
        assert!(c.to_string().contains("library is 10.16.2"), "{c}");

        let c = select_engine(&full_bundle(), &ORIN_JP62).unwrap();
        assert!(c.to_string().contains("exact match"), "{c}");
        assert!(c.passed_over.is_none());
        assert!(!c.host_code_required);
    }

    #[test]
    fn host_code_flag() {
        let dev = DeviceFacts {
            tensorrt: Some(TRT1016),
            ..ORIN_JP62
        };
        let vc = Offer::tensorrt(0, A64, Sm::new(8, 7), TRT103).with_flags(FLAG_VERSION_COMPATIBLE);
        assert!(select_engine(&[vc], &dev).unwrap().host_code_required);
        let lean = vc.with_flags(FLAG_VERSION_COMPATIBLE | FLAG_LEAN);
        assert!(!select_engine(&[lean], &dev).unwrap().host_code_required);
    }

    #[test]
    fn refusal_lists_at_most_max() {
        let offers: Vec<Offer> = (0..20)
            .map(|i| Offer::tensorrt(i, X64, Sm::new(9, 0), TRT114))
            .collect();
        let r = select_engine(&offers, &CPU_A64).unwrap_err();
        assert_eq!(r.rejected().count(), MAX_LISTED);
        assert!(r.to_string().ends_with("and 4 more"), "{r}");
    }

    #[test]
    fn descriptors_run_their_own_plans() {
        // Every descriptor release with an exact TensorRT version runs a plan
        // built for it, and refuses the same plan on another release's SM.
        for t in descriptor::TARGETS {
            for rel in t.releases {
                let TrtSpec::Exact(v) = rel.tensorrt else {
                    continue;
                };
                let facts = t.facts(rel);
                let plan = Offer::tensorrt(0, t.arch, rel.sm, v.0);
                let c = select_engine(&[plan], &facts).unwrap();
                assert_eq!(c.rule, Rule::ExactPlan, "{} {}", t.id, rel.name);
            }
        }
    }
}
