//! The TensorRT compatibility rules: may a plan be deserialized by this
//! TensorRT library on this GPU? One pure, allocation-free function,
//! [`check_plan`], used by engine selection
//! ([`select_engine`](crate::select_engine)) for every TensorRT offer *and*
//! by the runtime's deserialize gate (`tether_runtime::tensorrt`) before it
//! hands a plan to TensorRT. One table ([`table::CASES`]) drives the tests of
//! both.
//!
//! # Inputs
//!
//! * the plan's target record ([`PlanRecord`]): the TensorRT version that
//!   built it, the compute capability it was built on, its
//!   `HardwareCompatibilityLevel` and the flag bits
//!   [`FLAG_VERSION_COMPATIBLE`] / [`FLAG_EXCLUDE_LEAN_RUNTIME`];
//! * the loaded library ([`TrtLibrary`]: version and flavor), or none;
//! * the GPU ([`GpuFacts`]: compute capability, integrated or not), or none.
//!
//! # The rules, in the order they are checked
//!
//! The first broken rule is the one reported, so the order decides which
//! reason a user sees: what the record cannot mean comes first, then what the
//! GPU cannot change, then what another library would fix.
//!
//! **The record.**
//! 1. A version of 0 is no version; flag bits other than 1 and 2 and
//!    hardware levels other than 0, 1, 2 are values tether does not know.
//! 2. Flag 2 (lean runtime excluded) needs flag 1 (version-compatible):
//!    `kEXCLUDE_LEAN_RUNTIME` "will be ignored" without `kVERSION_COMPATIBLE`
//!    ([`crate::sources::TRT_LOAD_RUNTIME`]), so a record claiming both states
//!    nothing TensorRT built.
//! 3. Version-compatible plans exist from TensorRT 8.6 ("the plan must be
//!    built with a version at least 8.6 or higher",
//!    [`crate::sources::TRT_VERSION_COMPAT`]).
//! 4. `kSAME_COMPUTE_CAPABILITY` exists from TensorRT 10.9
//!    ([`crate::sources::TRT_HW_LEVELS_HEADER`]): a same-compute-capability record
//!    from an older TensorRT is refused *even when the SM matches* (the
//!    selection used to skip this floor for same-SM plans; the gate did not).
//! 5. Levels `kNONE` and `kSAME_COMPUTE_CAPABILITY` need the building SM to
//!    compare with the device; `kAMPERE_PLUS` does not (any Ampere+ GPU).
//! 6. Build floors: `kAMPERE_PLUS` "is only supported for engines built on
//!    NVIDIA Ampere and later GPUs" (sm >= 8.0), `kSAME_COMPUTE_CAPABILITY`
//!    "on NVIDIA Turing and later GPUs" (sm >= 7.5)
//!    ([`crate::sources::TRT_HW_LEVELS_HEADER`]).
//!
//! **The GPU.**
//! 7. Hardware compatibility "is not supported on NVIDIA DRIVE OS or JetPack"
//!    ([`crate::sources::TRT_HARDWARE_COMPAT`]): any plan with a level other than
//!    `kNONE` is refused on an integrated GPU, *also when it was built on
//!    that very SM*. An Ampere+ record built on Orin (sm_87) names a build
//!    mode JetPack's TensorRT does not offer, so tether does not trust it to
//!    run (the selection used to accept it because the SMs were equal; the
//!    gate refused it; the gate's reading is the documented one).
//! 8. `kNONE` and `kSAME_COMPUTE_CAPABILITY`: the device's compute capability
//!    must equal the plan's ("compatible with GPUs that have the same Compute
//!    Capability as the one it was built on", `NvInfer.h`). Thor's 10.1 and
//!    11.0 are different numbers for this rule (CUDA 13 renamed it,
//!    [`crate::sources::CUDA13_THOR_RENAME`]).
//! 9. `kAMPERE_PLUS`: the device must be Ampere or newer (sm >= 8.0).
//!
//! **The library.**
//! 10. A plan that is not version-compatible runs only on the version that
//!     built it: "By default, TensorRT engines are compatible only with the
//!     version of TensorRT used to build them" ([`crate::sources::TRT_ENGINE_COMPAT_111`]);
//!     "version numbers must match (in major, minor, patch, and build)"
//!     ([`crate::sources::DRIVE_OS_703_TRT`]; the record has no build number, so
//!     the build is left to TensorRT). Only the full library runs it: the
//!     lean and dispatch runtimes "require loading VC engine"
//!     ([`crate::sources::TRTEXEC_RUNTIMES`]).
//! 11. A version-compatible plan whose lean runtime was excluded
//!     (`kEXCLUDE_LEAN_RUNTIME`) carries no runtime of its own; the
//!     application "must explicitly specify a valid lean runtime"
//!     ([`crate::sources::TRTEXEC_RUNTIMES`]), and that runtime must be "built with
//!     the same version of TensorRT" as the plan ([`crate::sources::TRT_LOAD_RUNTIME`]).
//!     So the loaded library must be of the plan's own version (full or lean),
//!     and the dispatch runtime, which only runs a lean runtime it is given
//!     (the plan's embedded one; tether does not call `loadRuntime`), cannot
//!     run it. A 10.3 plan of this kind is therefore refused by a 10.10
//!     library (the selection used to accept it as version-compatible; the
//!     gate refused it; the header's rule is the gate's).
//! 12. A version-compatible plan with its embedded lean runtime runs on the
//!     same or a later TensorRT, never an earlier one ("engines built with
//!     newer versions ... do not work with older runtimes",
//!     [`crate::sources::TRT_ENGINE_COMPAT_111`]), on the full, lean or dispatch
//!     library ([`crate::sources::TRTEXEC_RUNTIMES`]); across majors only
//!     8 -> 10 and 10 -> 11 ("No other combination across major versions is
//!     supported", [`crate::sources::TRT_SUPPORT_MATRIX_1141`]). The embedded runtime
//!     is host code: the runtime must be told
//!     `setEngineHostCodeAllowed(true)` ([`PlanVerdict::host_code_required`],
//!     [`crate::sources::TRT_VERSION_COMPAT`]).
//!
//! Not encoded, because the inputs cannot show it: `kVERSION_COMPATIBLE` "is
//! not supported in NVIDIA Drive(R) products" (`NvInfer.h`); [`GpuFacts`]
//! does not tell DRIVE from Jetson, and TensorRT itself refuses such a build.

use core::fmt;

use crate::vocab::{
    CpuArch, GpuFacts, HardwareCompat, KNOWN_FLAGS, LibraryFlavor, Sm, TrtLibrary, TrtVersion,
};
#[cfg(doc)]
use crate::vocab::{FLAG_EXCLUDE_LEAN_RUNTIME, FLAG_VERSION_COMPATIBLE};

/// The first TensorRT with version-compatible plans.
pub const VERSION_COMPATIBLE_SINCE: TrtVersion = TrtVersion::new(8, 6, 0);
/// The first TensorRT with `kSAME_COMPUTE_CAPABILITY`.
pub const SAME_COMPUTE_CAPABILITY_SINCE: TrtVersion = TrtVersion::new(10, 9, 0);

/// The TensorRT fields of a bundle's target record: what the rules know about
/// a plan before TensorRT sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PlanRecord {
    /// The TensorRT that built the plan; `TrtVersion(0)`: not recorded.
    pub tensorrt: TrtVersion,
    /// Compute capability of the GPU it was built on; `None`: not recorded.
    pub sm: Option<Sm>,
    /// Raw `HardwareCompatibilityLevel` (0 none, 1 Ampere+, 2 same compute
    /// capability; other values are refused).
    pub hardware_compat: u32,
    /// [`FLAG_VERSION_COMPATIBLE`] | [`FLAG_EXCLUDE_LEAN_RUNTIME`] (other bits
    /// are refused).
    pub flags: u32,
}

impl PlanRecord {
    /// A plan built by `tensorrt` on `sm`, no hardware or version
    /// compatibility.
    pub const fn new(tensorrt: TrtVersion, sm: Option<Sm>) -> Self {
        Self {
            tensorrt,
            sm,
            hardware_compat: 0,
            flags: 0,
        }
    }
    /// The same record with `flags`.
    pub const fn with_flags(mut self, flags: u32) -> Self {
        self.flags = flags;
        self
    }
    /// The same record with hardware-compatibility level `level`.
    pub const fn with_hardware_compat(mut self, level: HardwareCompat) -> Self {
        self.hardware_compat = level.raw();
        self
    }
    /// Whether [`FLAG_VERSION_COMPATIBLE`] is set.
    pub const fn version_compatible(&self) -> bool {
        self.flags & crate::vocab::FLAG_VERSION_COMPATIBLE != 0
    }
    /// Whether [`FLAG_EXCLUDE_LEAN_RUNTIME`] is set.
    pub const fn lean_runtime_excluded(&self) -> bool {
        self.flags & crate::vocab::FLAG_EXCLUDE_LEAN_RUNTIME != 0
    }
}

/// Which rule admits a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum PlanRule {
    /// Built on this compute capability by this TensorRT version.
    Exact,
    /// Built on another compute capability (Ampere+), by this TensorRT
    /// version.
    HardwareCompatible,
    /// Built by an older TensorRT, version-compatible.
    VersionCompatible,
}

/// Why a plan may be deserialized, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PlanVerdict {
    /// The rule that admits it.
    pub rule: PlanRule,
    /// The plan was built on this device's compute capability.
    pub same_sm: bool,
    /// The plan embeds its lean runtime (host code): call
    /// `IRuntime::setEngineHostCodeAllowed(true)` before deserializing.
    pub host_code_required: bool,
    /// The plan was built by an older TensorRT than the loaded one.
    pub runs_forward: bool,
}

/// Why an engine cannot run on a device. Every variant that compares two
/// things names both (the plan's side and the library's or device's).
/// `Copy` and allocation-free.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
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
    /// A portable GPU engine asks for a newer GPU.
    SmBelowMinimum {
        /// Required minimum.
        minimum: Sm,
        /// The device's.
        device: Sm,
    },
    /// The plan record has no TensorRT version (0).
    MissingTensorRtVersion,
    /// Flag bits this tether does not understand (the whole flags word).
    UnknownFlags(u32),
    /// Flag 2 (lean runtime excluded) without flag 1 (version-compatible).
    ExcludedLeanWithoutVersionCompatible,
    /// A hardware-compatibility value TensorRT does not define.
    UnknownHardwareCompat(u32),
    /// The record has no compute capability and its level needs one.
    MissingSm {
        /// The plan's level.
        level: HardwareCompat,
    },
    /// A version-compatible record from before TensorRT 8.6.
    VersionCompatibleTooOld {
        /// The plan's TensorRT.
        plan: TrtVersion,
    },
    /// A same-compute-capability record from before TensorRT 10.9.
    SameComputeCapabilityTooOld {
        /// The plan's TensorRT.
        plan: TrtVersion,
    },
    /// A hardware-compatible record built on a GPU below the level's floor
    /// (Ampere+: sm_80; same compute capability: sm_75).
    BuiltBelowLevelFloor {
        /// The plan's level.
        level: HardwareCompat,
        /// The SM it says it was built on.
        plan: Sm,
    },
    /// A hardware-compatible plan on an integrated GPU (JetPack, DRIVE OS).
    HardwareCompatOnIntegrated {
        /// The plan's level.
        level: HardwareCompat,
        /// The device's SM.
        device: Sm,
    },
    /// Built for another compute capability, and its level needs the same.
    SmMismatch {
        /// The plan's SM.
        plan: Sm,
        /// The device's.
        device: Sm,
        /// The plan's level (none or same compute capability).
        level: HardwareCompat,
    },
    /// An Ampere+ plan on a GPU older than Ampere.
    DeviceBelowAmpere {
        /// The device's SM.
        device: Sm,
    },
    /// A plan that is not version-compatible, and a lean or dispatch library.
    LibraryNeedsVersionCompatible {
        /// The plan's TensorRT.
        plan: TrtVersion,
        /// The loaded library.
        library: TrtLibrary,
    },
    /// A plan that is not version-compatible, built by another version.
    VersionMismatch {
        /// The plan's TensorRT.
        plan: TrtVersion,
        /// The loaded library.
        library: TrtLibrary,
    },
    /// A version-compatible plan without its lean runtime, and a library of
    /// another version.
    ExcludedLeanRuntimeVersion {
        /// The plan's TensorRT.
        plan: TrtVersion,
        /// The loaded library.
        library: TrtLibrary,
    },
    /// A version-compatible plan without its lean runtime, and the dispatch
    /// runtime (which runs only a lean runtime the plan embeds).
    DispatchNeedsEmbeddedLeanRuntime {
        /// The plan's TensorRT.
        plan: TrtVersion,
        /// The loaded library.
        library: TrtLibrary,
    },
    /// A version-compatible plan built by a newer TensorRT than the library.
    LibraryOlderThanPlan {
        /// The plan's TensorRT.
        plan: TrtVersion,
        /// The loaded library.
        library: TrtLibrary,
    },
    /// A version-compatible plan across a major boundary TensorRT does not
    /// support (only 8 -> 10 and 10 -> 11 are).
    CrossMajorUnsupported {
        /// The plan's TensorRT.
        plan: TrtVersion,
        /// The loaded library.
        library: TrtLibrary,
    },
}

impl Reject {
    /// How far an offer got before this reason stopped it (higher: closer to
    /// running): 0 architecture, 1 no GPU or library, 2 the record, 3 the
    /// GPU, 4 the library. Selection logs the closest one.
    pub const fn closeness(&self) -> u8 {
        match self {
            Reject::ArchMismatch { .. } => 0,
            Reject::NoGpu | Reject::NoTensorRt => 1,
            Reject::MissingTensorRtVersion
            | Reject::UnknownFlags(_)
            | Reject::ExcludedLeanWithoutVersionCompatible
            | Reject::UnknownHardwareCompat(_)
            | Reject::MissingSm { .. }
            | Reject::VersionCompatibleTooOld { .. }
            | Reject::SameComputeCapabilityTooOld { .. }
            | Reject::BuiltBelowLevelFloor { .. } => 2,
            Reject::SmBelowMinimum { .. }
            | Reject::HardwareCompatOnIntegrated { .. }
            | Reject::SmMismatch { .. }
            | Reject::DeviceBelowAmpere { .. } => 3,
            Reject::LibraryNeedsVersionCompatible { .. }
            | Reject::VersionMismatch { .. }
            | Reject::ExcludedLeanRuntimeVersion { .. }
            | Reject::DispatchNeedsEmbeddedLeanRuntime { .. }
            | Reject::LibraryOlderThanPlan { .. }
            | Reject::CrossMajorUnsupported { .. } => 4,
        }
    }
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Reject::ArchMismatch { offer, device } => {
                write!(f, "built for {offer}, this device is {device}")
            }
            Reject::NoGpu => f.write_str("needs an NVIDIA GPU, none was found"),
            Reject::NoTensorRt => f.write_str("needs the TensorRT library, none was found"),
            Reject::SmBelowMinimum { minimum, device } => write!(
                f,
                "needs sm_{} or newer, this GPU is sm_{}",
                minimum.number(),
                device.number()
            ),
            Reject::MissingTensorRtVersion => {
                f.write_str("TensorRT record has no TensorRT version")
            }
            Reject::UnknownFlags(bits) => write!(
                f,
                "flag bits {:#x} are not understood by this tether (known: 1 version-compatible, 2 lean runtime excluded)",
                bits & !KNOWN_FLAGS
            ),
            Reject::ExcludedLeanWithoutVersionCompatible => f.write_str(
                "record says lean runtime excluded (flag 2) but not version-compatible (flag 1); TensorRT ignores kEXCLUDE_LEAN_RUNTIME without kVERSION_COMPATIBLE, so the record is invalid",
            ),
            Reject::UnknownHardwareCompat(v) => write!(
                f,
                "hardware-compatibility level {v} is not defined by TensorRT (0 none, 1 Ampere+, 2 same compute capability)"
            ),
            Reject::MissingSm { level } => write!(
                f,
                "TensorRT record has no compute capability, which hardware compatibility `{level}` needs to compare with this GPU"
            ),
            Reject::VersionCompatibleTooOld { plan } => write!(
                f,
                "version-compatible plans exist from TensorRT 8.6, this record says {plan}"
            ),
            Reject::SameComputeCapabilityTooOld { plan } => write!(
                f,
                "same-compute-capability plans exist from TensorRT 10.9, this record says {plan}"
            ),
            Reject::BuiltBelowLevelFloor { level, plan } => write!(
                f,
                "{level} plans can only be built on sm_{} or newer, this record says sm_{}",
                match level {
                    HardwareCompat::SameComputeCapability => Sm::TURING.number(),
                    _ => Sm::AMPERE.number(),
                },
                plan.number()
            ),
            Reject::HardwareCompatOnIntegrated { level, device } => write!(
                f,
                "hardware-compatible plan ({level}) cannot run on the integrated sm_{} GPU: TensorRT hardware compatibility is not supported on JetPack or DRIVE OS; build the plan without hardware compatibility",
                device.number()
            ),
            Reject::SmMismatch {
                plan,
                device,
                level,
            } => {
                write!(
                    f,
                    "built for sm_{}, this GPU is sm_{}",
                    plan.number(),
                    device.number()
                )?;
                if level == HardwareCompat::SameComputeCapability {
                    f.write_str(" (hardware compatibility: same compute capability)")?;
                }
                if plan.is_thor() && device.is_thor() {
                    f.write_str(" (the same Thor GPU: sm_101 under CUDA 12.x, sm_110 under CUDA 13; rebuild the plan with this driver)")?;
                }
                Ok(())
            }
            Reject::DeviceBelowAmpere { device } => write!(
                f,
                "Ampere+ plan needs an sm_80 or newer GPU, this GPU is sm_{}",
                device.number()
            ),
            Reject::LibraryNeedsVersionCompatible { plan, library } => write!(
                f,
                "plan built with TensorRT {plan} is not version-compatible, and the loaded library is the {library}, which deserializes version-compatible plans only; load {}.so.{}",
                LibraryFlavor::Full.stem(),
                plan.major()
            ),
            Reject::VersionMismatch { plan, library } => write!(
                f,
                "plan built with TensorRT {plan}, library is {} (a plan that is not version-compatible needs the same TensorRT version)",
                library.version
            ),
            Reject::ExcludedLeanRuntimeVersion { plan, library } => write!(
                f,
                "plan built with TensorRT {plan} excludes its lean runtime, so it needs a TensorRT {plan} library, but the loaded library is the {library}"
            ),
            Reject::DispatchNeedsEmbeddedLeanRuntime { plan, library } => write!(
                f,
                "plan built with TensorRT {plan} excludes its lean runtime, and the loaded {library} only runs a lean runtime the plan embeds; load the TensorRT {plan} lean or full library"
            ),
            Reject::LibraryOlderThanPlan { plan, library } => write!(
                f,
                "version-compatible plan built with TensorRT {plan}, library {} is older (version compatibility only runs forward)",
                library.version
            ),
            Reject::CrossMajorUnsupported { plan, library } => write!(
                f,
                "version-compatible plan built with TensorRT {plan}, library is {}: TensorRT supports only 8 -> 10 and 10 -> 11 across majors",
                library.version
            ),
        }
    }
}

/// Major-version pairs (plan, library) TensorRT runs version-compatible plans
/// across ([`crate::sources::TRT_SUPPORT_MATRIX_1141`]).
const CROSS_MAJOR: [(u32, u32); 2] = [(8, 10), (10, 11)];

/// Whether a TensorRT plan described by `plan` may be deserialized by
/// `library` on `gpu`, and how; the rules, their order and their sources are
/// in the [module documentation](self). Pure and allocation-free.
///
/// # Errors
///
/// The first broken rule as a [`Reject`] naming both sides: [`Reject::NoGpu`]
/// when `gpu` is `None`, [`Reject::NoTensorRt`] when `library` is `None`,
/// then record, GPU and library rules in that order.
pub const fn check_plan(
    plan: PlanRecord,
    library: Option<TrtLibrary>,
    gpu: Option<GpuFacts>,
) -> Result<PlanVerdict, Reject> {
    let Some(gpu) = gpu else {
        return Err(Reject::NoGpu);
    };
    let Some(library) = library else {
        return Err(Reject::NoTensorRt);
    };
    let p = plan.tensorrt;
    let vc = plan.version_compatible();
    let excluded = plan.lean_runtime_excluded();

    // 1-6: the record.
    if p.is_unset() {
        return Err(Reject::MissingTensorRtVersion);
    }
    if plan.flags & !KNOWN_FLAGS != 0 {
        return Err(Reject::UnknownFlags(plan.flags));
    }
    if excluded && !vc {
        return Err(Reject::ExcludedLeanWithoutVersionCompatible);
    }
    let Some(level) = HardwareCompat::from_raw(plan.hardware_compat) else {
        return Err(Reject::UnknownHardwareCompat(plan.hardware_compat));
    };
    if vc && p.0 < VERSION_COMPATIBLE_SINCE.0 {
        return Err(Reject::VersionCompatibleTooOld { plan: p });
    }
    if matches!(level, HardwareCompat::SameComputeCapability)
        && p.0 < SAME_COMPUTE_CAPABILITY_SINCE.0
    {
        return Err(Reject::SameComputeCapabilityTooOld { plan: p });
    }
    let floor = match level {
        HardwareCompat::None => None,
        HardwareCompat::AmperePlus => Some(Sm::AMPERE),
        HardwareCompat::SameComputeCapability => Some(Sm::TURING),
    };
    match (plan.sm, floor) {
        (None, _) if !matches!(level, HardwareCompat::AmperePlus) => {
            return Err(Reject::MissingSm { level });
        }
        (Some(built), Some(floor)) if sm_lt(built, floor) => {
            return Err(Reject::BuiltBelowLevelFloor { level, plan: built });
        }
        _ => {}
    }

    // 7-9: the GPU.
    if !matches!(level, HardwareCompat::None) && gpu.integrated {
        return Err(Reject::HardwareCompatOnIntegrated {
            level,
            device: gpu.sm,
        });
    }
    let same_sm = match plan.sm {
        Some(built) => sm_eq(built, gpu.sm),
        None => false,
    };
    match level {
        HardwareCompat::None | HardwareCompat::SameComputeCapability => {
            if let Some(built) = plan.sm
                && !same_sm
            {
                return Err(Reject::SmMismatch {
                    plan: built,
                    device: gpu.sm,
                    level,
                });
            }
        }
        HardwareCompat::AmperePlus => {
            if sm_lt(gpu.sm, Sm::AMPERE) {
                return Err(Reject::DeviceBelowAmpere { device: gpu.sm });
            }
        }
    }

    // 10-12: the library.
    let l = library.version;
    if !vc {
        if library.flavor.version_compatible_only() {
            return Err(Reject::LibraryNeedsVersionCompatible { plan: p, library });
        }
        if p.0 != l.0 {
            return Err(Reject::VersionMismatch { plan: p, library });
        }
    } else if excluded {
        if matches!(library.flavor, LibraryFlavor::Dispatch) {
            return Err(Reject::DispatchNeedsEmbeddedLeanRuntime { plan: p, library });
        }
        if p.0 != l.0 {
            return Err(Reject::ExcludedLeanRuntimeVersion { plan: p, library });
        }
    } else {
        if l.0 < p.0 {
            return Err(Reject::LibraryOlderThanPlan { plan: p, library });
        }
        if p.major() != l.major() {
            let mut i = 0;
            let mut supported = false;
            while i < CROSS_MAJOR.len() {
                if CROSS_MAJOR[i].0 == p.major() && CROSS_MAJOR[i].1 == l.major() {
                    supported = true;
                }
                i += 1;
            }
            if !supported {
                return Err(Reject::CrossMajorUnsupported { plan: p, library });
            }
        }
    }

    let same_version = p.0 == l.0;
    Ok(PlanVerdict {
        rule: if !same_version {
            PlanRule::VersionCompatible
        } else if same_sm {
            PlanRule::Exact
        } else {
            PlanRule::HardwareCompatible
        },
        same_sm,
        host_code_required: vc && !excluded,
        runs_forward: p.0 < l.0,
    })
}

const fn sm_eq(a: Sm, b: Sm) -> bool {
    a.major == b.major && a.minor == b.minor
}

const fn sm_lt(a: Sm, b: Sm) -> bool {
    a.number() < b.number()
}

pub mod table {
    //! The one table of TensorRT compatibility cases. `tether-targets` runs it
    //! against [`check_plan`](super::check_plan) and [`select_engine`](crate::select_engine);
    //! `tether-runtime` runs it against its deserialize gate. The two cases
    //! on which selection and gate used to disagree, and the 10.9 floor of
    //! same-compute-capability plans, are rows (marked in their names).

    use super::{PlanRecord, PlanRule, PlanVerdict, Reject};
    use crate::vocab::{
        FLAG_EXCLUDE_LEAN_RUNTIME as X, FLAG_VERSION_COMPATIBLE as VC, GpuFacts, HardwareCompat,
        Sm, TrtLibrary, TrtVersion,
    };

    /// One case: a plan record, a library, a GPU, and the only right answer.
    #[derive(Clone, Copy, Debug)]
    pub struct Case {
        /// What the case is about.
        pub name: &'static str,
        /// The plan's target record.
        pub plan: PlanRecord,
        /// The loaded library.
        pub library: Option<TrtLibrary>,
        /// The device's GPU.
        pub gpu: Option<GpuFacts>,
        /// The expected outcome.
        pub want: Result<PlanVerdict, Reject>,
    }

    const fn v(major: u32, minor: u32, patch: u32) -> TrtVersion {
        TrtVersion::new(major, minor, patch)
    }
    const fn plan(version: TrtVersion, major: u8, minor: u8) -> PlanRecord {
        PlanRecord::new(version, Some(Sm::new(major, minor)))
    }
    const fn full(version: TrtVersion) -> Option<TrtLibrary> {
        Some(TrtLibrary::full(version))
    }
    const fn lean(version: TrtVersion) -> Option<TrtLibrary> {
        Some(TrtLibrary::lean(version))
    }
    const fn dispatch(version: TrtVersion) -> Option<TrtLibrary> {
        Some(TrtLibrary::dispatch(version))
    }
    const fn ok(
        rule: PlanRule,
        same_sm: bool,
        host: bool,
        forward: bool,
    ) -> Result<PlanVerdict, Reject> {
        Ok(PlanVerdict {
            rule,
            same_sm,
            host_code_required: host,
            runs_forward: forward,
        })
    }

    const ORIN: Option<GpuFacts> = Some(GpuFacts::integrated(Sm::new(8, 7)));
    const THOR: Option<GpuFacts> = Some(GpuFacts::integrated(Sm::new(11, 0)));
    const H200: Option<GpuFacts> = Some(GpuFacts::discrete(Sm::new(9, 0)));
    const L4: Option<GpuFacts> = Some(GpuFacts::discrete(Sm::new(8, 9)));
    const T4: Option<GpuFacts> = Some(GpuFacts::discrete(Sm::new(7, 5)));
    const AP: HardwareCompat = HardwareCompat::AmperePlus;
    const SCC: HardwareCompat = HardwareCompat::SameComputeCapability;
    const NONE: HardwareCompat = HardwareCompat::None;
    const EXACT: PlanRule = PlanRule::Exact;
    const HWC: PlanRule = PlanRule::HardwareCompatible;
    const VCR: PlanRule = PlanRule::VersionCompatible;

    /// Every case.
    pub static CASES: &[Case] = &[
        // --- exact --------------------------------------------------------------------
        Case {
            name: "same version, same SM (Orin, JetPack 6)",
            plan: plan(v(10, 3, 0), 8, 7),
            library: full(v(10, 3, 0)),
            gpu: ORIN,
            want: ok(EXACT, true, false, false),
        },
        Case {
            name: "same version, same SM (H200, 11.4)",
            plan: plan(v(11, 4, 0), 9, 0),
            library: full(v(11, 4, 0)),
            gpu: H200,
            want: ok(EXACT, true, false, false),
        },
        // --- not version-compatible -------------------------------------------------------
        Case {
            name: "patch differs",
            plan: plan(v(10, 3, 0), 8, 7),
            library: full(v(10, 3, 1)),
            gpu: ORIN,
            want: Err(Reject::VersionMismatch {
                plan: v(10, 3, 0),
                library: TrtLibrary::full(v(10, 3, 1)),
            }),
        },
        Case {
            name: "older plan, newer minor library",
            plan: plan(v(10, 3, 0), 8, 7),
            library: full(v(10, 16, 2)),
            gpu: ORIN,
            want: Err(Reject::VersionMismatch {
                plan: v(10, 3, 0),
                library: TrtLibrary::full(v(10, 16, 2)),
            }),
        },
        Case {
            name: "newer plan, older library",
            plan: plan(v(10, 10, 0), 8, 7),
            library: full(v(10, 3, 0)),
            gpu: ORIN,
            want: Err(Reject::VersionMismatch {
                plan: v(10, 10, 0),
                library: TrtLibrary::full(v(10, 3, 0)),
            }),
        },
        Case {
            name: "not version-compatible on the lean runtime",
            plan: plan(v(11, 4, 0), 9, 0),
            library: lean(v(11, 4, 0)),
            gpu: H200,
            want: Err(Reject::LibraryNeedsVersionCompatible {
                plan: v(11, 4, 0),
                library: TrtLibrary::lean(v(11, 4, 0)),
            }),
        },
        Case {
            name: "not version-compatible on the dispatch runtime",
            plan: plan(v(11, 4, 0), 9, 0),
            library: dispatch(v(11, 4, 0)),
            gpu: H200,
            want: Err(Reject::LibraryNeedsVersionCompatible {
                plan: v(11, 4, 0),
                library: TrtLibrary::dispatch(v(11, 4, 0)),
            }),
        },
        // --- version-compatible, lean runtime embedded ---------------------------------------
        Case {
            name: "VC 11.0 plan on full 11.4",
            plan: plan(v(11, 0, 0), 9, 0).with_flags(VC),
            library: full(v(11, 4, 0)),
            gpu: H200,
            want: ok(VCR, true, true, true),
        },
        Case {
            name: "VC plan on its own version: exact, host code still needed",
            plan: plan(v(11, 4, 0), 9, 0).with_flags(VC),
            library: full(v(11, 4, 0)),
            gpu: H200,
            want: ok(EXACT, true, true, false),
        },
        Case {
            name: "VC plan newer than the library",
            plan: plan(v(11, 4, 0), 9, 0).with_flags(VC),
            library: full(v(11, 1, 0)),
            gpu: H200,
            want: Err(Reject::LibraryOlderThanPlan {
                plan: v(11, 4, 0),
                library: TrtLibrary::full(v(11, 1, 0)),
            }),
        },
        Case {
            name: "VC 10.16 plan on 11.4 (10 -> 11)",
            plan: plan(v(10, 16, 2), 9, 0).with_flags(VC),
            library: full(v(11, 4, 0)),
            gpu: H200,
            want: ok(VCR, true, true, true),
        },
        Case {
            name: "VC 11.0 plan on 10.16",
            plan: plan(v(11, 0, 0), 9, 0).with_flags(VC),
            library: full(v(10, 16, 2)),
            gpu: H200,
            want: Err(Reject::LibraryOlderThanPlan {
                plan: v(11, 0, 0),
                library: TrtLibrary::full(v(10, 16, 2)),
            }),
        },
        Case {
            name: "VC 8.6 plan on 10.3 (8 -> 10)",
            plan: plan(v(8, 6, 1), 8, 7).with_flags(VC),
            library: full(v(10, 3, 0)),
            gpu: ORIN,
            want: ok(VCR, true, true, true),
        },
        Case {
            name: "VC 8.6 plan on 11.4 (8 -> 11 unsupported)",
            plan: plan(v(8, 6, 1), 9, 0).with_flags(VC),
            library: full(v(11, 4, 0)),
            gpu: H200,
            want: Err(Reject::CrossMajorUnsupported {
                plan: v(8, 6, 1),
                library: TrtLibrary::full(v(11, 4, 0)),
            }),
        },
        Case {
            name: "VC record from 8.5",
            plan: plan(v(8, 5, 3), 8, 7).with_flags(VC),
            library: full(v(10, 3, 0)),
            gpu: ORIN,
            want: Err(Reject::VersionCompatibleTooOld { plan: v(8, 5, 3) }),
        },
        Case {
            name: "VC plan on a newer lean runtime",
            plan: plan(v(11, 0, 0), 9, 0).with_flags(VC),
            library: lean(v(11, 4, 0)),
            gpu: H200,
            want: ok(VCR, true, true, true),
        },
        Case {
            name: "VC plan on a newer dispatch runtime",
            plan: plan(v(11, 0, 0), 9, 0).with_flags(VC),
            library: dispatch(v(11, 4, 0)),
            gpu: H200,
            want: ok(VCR, true, true, true),
        },
        // --- version-compatible, lean runtime excluded ---------------------------------------
        Case {
            name: "lean excluded, lean runtime of its version",
            plan: plan(v(11, 4, 0), 9, 0).with_flags(VC | X),
            library: lean(v(11, 4, 0)),
            gpu: H200,
            want: ok(EXACT, true, false, false),
        },
        Case {
            name: "lean excluded, full library of its version",
            plan: plan(v(11, 4, 0), 9, 0).with_flags(VC | X),
            library: full(v(11, 4, 0)),
            gpu: H200,
            want: ok(EXACT, true, false, false),
        },
        Case {
            name: "DISAGREEMENT 2: lean excluded, built by 10.3, full 10.10 library",
            plan: plan(v(10, 3, 0), 8, 7).with_flags(VC | X),
            library: full(v(10, 10, 0)),
            gpu: ORIN,
            want: Err(Reject::ExcludedLeanRuntimeVersion {
                plan: v(10, 3, 0),
                library: TrtLibrary::full(v(10, 10, 0)),
            }),
        },
        Case {
            name: "DISAGREEMENT 2: lean excluded, built by 10.3, lean 10.10 runtime",
            plan: plan(v(10, 3, 0), 8, 7).with_flags(VC | X),
            library: lean(v(10, 10, 0)),
            gpu: ORIN,
            want: Err(Reject::ExcludedLeanRuntimeVersion {
                plan: v(10, 3, 0),
                library: TrtLibrary::lean(v(10, 10, 0)),
            }),
        },
        Case {
            name: "lean excluded on the dispatch runtime",
            plan: plan(v(11, 4, 0), 9, 0).with_flags(VC | X),
            library: dispatch(v(11, 4, 0)),
            gpu: H200,
            want: Err(Reject::DispatchNeedsEmbeddedLeanRuntime {
                plan: v(11, 4, 0),
                library: TrtLibrary::dispatch(v(11, 4, 0)),
            }),
        },
        // --- invalid records -------------------------------------------------------------------
        Case {
            name: "lean excluded without VC",
            plan: plan(v(11, 4, 0), 9, 0).with_flags(X),
            library: lean(v(11, 4, 0)),
            gpu: H200,
            want: Err(Reject::ExcludedLeanWithoutVersionCompatible),
        },
        Case {
            name: "unknown flag bit",
            plan: plan(v(11, 4, 0), 9, 0).with_flags(4),
            library: full(v(11, 4, 0)),
            gpu: H200,
            want: Err(Reject::UnknownFlags(4)),
        },
        Case {
            name: "unknown hardware level",
            plan: PlanRecord {
                hardware_compat: 3,
                ..plan(v(11, 4, 0), 9, 0)
            },
            library: full(v(11, 4, 0)),
            gpu: H200,
            want: Err(Reject::UnknownHardwareCompat(3)),
        },
        Case {
            name: "no TensorRT version",
            plan: plan(v(0, 0, 0), 9, 0),
            library: full(v(11, 4, 0)),
            gpu: H200,
            want: Err(Reject::MissingTensorRtVersion),
        },
        Case {
            name: "no SM recorded (level none)",
            plan: PlanRecord::new(v(11, 4, 0), None),
            library: full(v(11, 4, 0)),
            gpu: H200,
            want: Err(Reject::MissingSm { level: NONE }),
        },
        // --- hardware compatibility ------------------------------------------------------------
        Case {
            name: "level none, another SM",
            plan: plan(v(11, 4, 0), 8, 0),
            library: full(v(11, 4, 0)),
            gpu: H200,
            want: Err(Reject::SmMismatch {
                plan: Sm::new(8, 0),
                device: Sm::new(9, 0),
                level: NONE,
            }),
        },
        Case {
            name: "Thor sm_101 plan under CUDA 13 (sm_110)",
            plan: plan(v(10, 13, 3), 10, 1),
            library: full(v(10, 13, 3)),
            gpu: THOR,
            want: Err(Reject::SmMismatch {
                plan: Sm::new(10, 1),
                device: Sm::new(11, 0),
                level: NONE,
            }),
        },
        Case {
            name: "Ampere+ plan from sm_86 on H200",
            plan: plan(v(11, 4, 0), 8, 6).with_hardware_compat(AP),
            library: full(v(11, 4, 0)),
            gpu: H200,
            want: ok(HWC, false, false, false),
        },
        Case {
            name: "Ampere+ plan, SM not recorded, on H200",
            plan: PlanRecord::new(v(11, 4, 0), None).with_hardware_compat(AP),
            library: full(v(11, 4, 0)),
            gpu: H200,
            want: ok(HWC, false, false, false),
        },
        Case {
            name: "Ampere+ plan on sm_75",
            plan: plan(v(10, 3, 0), 8, 6).with_hardware_compat(AP),
            library: full(v(10, 3, 0)),
            gpu: T4,
            want: Err(Reject::DeviceBelowAmpere {
                device: Sm::new(7, 5),
            }),
        },
        Case {
            name: "Ampere+ record built on sm_75",
            plan: plan(v(10, 3, 0), 7, 5).with_hardware_compat(AP),
            library: full(v(10, 3, 0)),
            gpu: L4,
            want: Err(Reject::BuiltBelowLevelFloor {
                level: AP,
                plan: Sm::new(7, 5),
            }),
        },
        Case {
            name: "DISAGREEMENT 1: Ampere+ plan built on Orin, run on Orin",
            plan: plan(v(10, 3, 0), 8, 7).with_hardware_compat(AP),
            library: full(v(10, 3, 0)),
            gpu: ORIN,
            want: Err(Reject::HardwareCompatOnIntegrated {
                level: AP,
                device: Sm::new(8, 7),
            }),
        },
        Case {
            name: "Ampere+ plan from a dGPU on Thor",
            plan: plan(v(10, 13, 3), 9, 0).with_hardware_compat(AP),
            library: full(v(10, 13, 3)),
            gpu: THOR,
            want: Err(Reject::HardwareCompatOnIntegrated {
                level: AP,
                device: Sm::new(11, 0),
            }),
        },
        Case {
            name: "same-CC plan, same SM",
            plan: plan(v(10, 10, 0), 8, 9).with_hardware_compat(SCC),
            library: full(v(10, 10, 0)),
            gpu: L4,
            want: ok(EXACT, true, false, false),
        },
        Case {
            name: "same-CC plan, another SM",
            plan: plan(v(10, 10, 0), 8, 6).with_hardware_compat(SCC),
            library: full(v(10, 10, 0)),
            gpu: L4,
            want: Err(Reject::SmMismatch {
                plan: Sm::new(8, 6),
                device: Sm::new(8, 9),
                level: SCC,
            }),
        },
        Case {
            name: "10.9 FLOOR: same-CC record from 10.3, same SM",
            plan: plan(v(10, 3, 0), 8, 9).with_hardware_compat(SCC),
            library: full(v(10, 3, 0)),
            gpu: L4,
            want: Err(Reject::SameComputeCapabilityTooOld { plan: v(10, 3, 0) }),
        },
        Case {
            name: "same-CC plan on Orin",
            plan: plan(v(10, 16, 2), 8, 7).with_hardware_compat(SCC),
            library: full(v(10, 16, 2)),
            gpu: ORIN,
            want: Err(Reject::HardwareCompatOnIntegrated {
                level: SCC,
                device: Sm::new(8, 7),
            }),
        },
        Case {
            name: "same-CC record built on sm_70",
            plan: plan(v(10, 10, 0), 7, 0).with_hardware_compat(SCC),
            library: full(v(10, 10, 0)),
            gpu: L4,
            want: Err(Reject::BuiltBelowLevelFloor {
                level: SCC,
                plan: Sm::new(7, 0),
            }),
        },
        Case {
            name: "VC + Ampere+ plan forward on the H200 lean runtime",
            plan: plan(v(11, 0, 0), 8, 0)
                .with_flags(VC)
                .with_hardware_compat(AP),
            library: lean(v(11, 4, 0)),
            gpu: H200,
            want: ok(VCR, false, true, true),
        },
        // --- order: the GPU before the library; missing pieces ------------------------------------
        Case {
            name: "wrong SM and wrong version: the SM is reported",
            plan: plan(v(10, 3, 0), 8, 7),
            library: full(v(11, 4, 0)),
            gpu: H200,
            want: Err(Reject::SmMismatch {
                plan: Sm::new(8, 7),
                device: Sm::new(9, 0),
                level: NONE,
            }),
        },
        Case {
            name: "Ampere+ plan, other version, not VC",
            plan: plan(v(11, 0, 0), 8, 0).with_hardware_compat(AP),
            library: full(v(11, 4, 0)),
            gpu: H200,
            want: Err(Reject::VersionMismatch {
                plan: v(11, 0, 0),
                library: TrtLibrary::full(v(11, 4, 0)),
            }),
        },
        Case {
            name: "no GPU",
            plan: plan(v(11, 4, 0), 9, 0),
            library: full(v(11, 4, 0)),
            gpu: None,
            want: Err(Reject::NoGpu),
        },
        Case {
            name: "no TensorRT library",
            plan: plan(v(11, 4, 0), 9, 0),
            library: None,
            gpu: H200,
            want: Err(Reject::NoTensorRt),
        },
    ];
}

#[cfg(test)]
mod tests {
    use super::table::CASES;
    use super::*;

    #[test]
    fn table_against_check_plan() {
        for c in CASES {
            assert_eq!(
                check_plan(c.plan, c.library, c.gpu),
                c.want,
                "case `{}`",
                c.name
            );
        }
    }

    #[test]
    fn the_disagreements_and_the_floor_are_rows() {
        for tag in ["DISAGREEMENT 1", "DISAGREEMENT 2", "10.9 FLOOR"] {
            assert!(
                CASES
                    .iter()
                    .any(|c| c.name.starts_with(tag) && c.want.is_err()),
                "{tag}"
            );
        }
    }

    #[test]
    fn messages_name_both_sides() {
        for c in CASES {
            let Err(r) = c.want else { continue };
            let s = r.to_string();
            match r {
                Reject::VersionMismatch { plan, library }
                | Reject::LibraryOlderThanPlan { plan, library }
                | Reject::CrossMajorUnsupported { plan, library } => {
                    assert!(
                        s.contains(&plan.to_string()) && s.contains(&library.version.to_string()),
                        "{s}"
                    );
                }
                Reject::LibraryNeedsVersionCompatible { plan, library }
                | Reject::ExcludedLeanRuntimeVersion { plan, library }
                | Reject::DispatchNeedsEmbeddedLeanRuntime { plan, library } => {
                    assert!(
                        s.contains(&plan.to_string())
                            && s.contains(&library.version.to_string())
                            && s.contains(library.flavor.stem()),
                        "{s}"
                    );
                }
                Reject::SmMismatch { plan, device, .. } => {
                    assert!(
                        s.contains(&format!("sm_{}", plan.number()))
                            && s.contains(&format!("sm_{}", device.number())),
                        "{s}"
                    );
                }
                _ => {}
            }
        }
    }
}
