//! The compatibility gate: may this plan be deserialized by the loaded
//! TensorRT library on this GPU? Checked *before* deserializing, from the
//! bundle's target record, so that the user sees one message naming both
//! sides instead of TensorRT's "magic tag does not match" or "expecting
//! compute 7.2 got compute 8.7".
//!
//! [`check_plan_compatibility`] is a pure function of three facts:
//! the plan's record ([`PlanTarget`]), the loaded library
//! ([`LoadedLibrary`]) and the device's compute capability.
//!
//! # The rules (TensorRT's documentation)
//!
//! Version (NVIDIA TensorRT Developer Guide, "Version Compatibility",
//! 10.16.1 and 11.1 "Engine Compatibility"; Support Matrix 11.4.1 "Engine
//! Portability"; DRIVE OS 7.0.3 TensorRT release notes):
//! - "By default, TensorRT engines are compatible only with the version of
//!   TensorRT used to build them": without the version-compatible flag the
//!   library's major.minor.patch must equal the plan's ("in the standard
//!   runtime, version numbers must match (in major, minor, patch, and
//!   build)"; the record carries no build number, so the build is not
//!   checked here; TensorRT itself still rejects a different build).
//! - A plan built with `BuilderFlag::kVERSION_COMPATIBLE` runs on the same or
//!   a *later* TensorRT; "engines built with newer versions do not work with
//!   older runtimes". Across majors only two pairs are supported: "TensorRT 10
//!   version-compatible engines can run with a TensorRT 11 runtime, and
//!   TensorRT 8 version-compatible engines can run with a TensorRT 10
//!   runtime. No other combination across major versions is supported."
//! - Such a plan embeds the lean runtime (host code) unless it was built with
//!   `kEXCLUDE_LEAN_RUNTIME`; the runtime must be told to trust it with
//!   `IRuntime::setEngineHostCodeAllowed(true)` ([`CompatVerdict::host_code_required`]).
//! - The lean runtime library (`libnvinfer_lean`) deserializes only
//!   version-compatible plans.
//! - A plan whose lean runtime was excluded (record flag [`TARGET_FLAG_LEAN`])
//!   carries no host code, so tether requires the loaded library to be of the
//!   plan's own version (the lean runtime "of the version that built it";
//!   this is tether's reading of the `kEXCLUDE_LEAN_RUNTIME` documentation,
//!   the strictest one).
//!
//! Hardware (header `NvInfer.h`, `enum class HardwareCompatibilityLevel`;
//! Developer Guide "Hardware Compatibility"):
//! - `kNONE`: "do not require hardware compatibility with GPU architectures
//!   other than that of the GPU on which the engine was built": the device's
//!   compute capability must equal the plan's.
//! - `kAMPERE_PLUS`: "compatible with Ampere and newer GPUs" (SM 8.0+),
//!   "only supported for engines built on NVIDIA Ampere and later GPUs".
//! - `kSAME_COMPUTE_CAPABILITY` (TensorRT 10.9+): "compatible with GPUs that
//!   have the same Compute Capability as the one it was built on",
//!   "only supported for engines built on NVIDIA Turing and later GPUs".
//! - Hardware compatibility "is not supported on NVIDIA DRIVE OS or
//!   JetPack": a hardware-compatible plan is refused on a Tegra GPU
//!   (SM 5.3, 6.2, 7.2, 8.7, 10.1, 11.0).

use std::fmt;

use super::abi::HardwareCompatibility;

/// Target-record flag: the plan was built with `--versionCompatible`
/// (`BuilderFlag::kVERSION_COMPATIBLE`). Same value as the bundle's
/// `TARGET_FLAG_VERSION_COMPATIBLE`.
pub const TARGET_FLAG_VERSION_COMPATIBLE: u32 = 1;
/// Target-record flag: the plan is meant for the lean runtime. tether's
/// plan builder sets it for plans built with `--excludeLeanRuntime`
/// (`BuilderFlag::kEXCLUDE_LEAN_RUNTIME`): such a plan carries no lean
/// runtime, so the gate requires the loaded library to be of the plan's own
/// version. Same value as the bundle's `TARGET_FLAG_LEAN` ("the plan needs
/// only the lean TensorRT runtime"); it requires
/// [`TARGET_FLAG_VERSION_COMPATIBLE`], since the lean runtime deserializes
/// version-compatible plans only.
pub const TARGET_FLAG_LEAN: u32 = 2;

/// A TensorRT version, `MAJOR.MINOR.PATCH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TrtVersion {
    /// Major version (10, 11).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version.
    pub patch: u32,
}

impl TrtVersion {
    /// Builds a version.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// Decodes `MAJOR*10000 + MINOR*100 + PATCH`, the encoding of the
    /// target record and of `NV_TENSORRT_VERSION` since TensorRT 10.0
    /// (`getInferLibVersion()` returns 110400 for 11.4.0).
    pub const fn from_encoded(encoded: u32) -> Self {
        Self::new(encoded / 10_000, (encoded / 100) % 100, encoded % 100)
    }

    /// `MAJOR*10000 + MINOR*100 + PATCH`.
    pub const fn encoded(self) -> u32 {
        self.major * 10_000 + self.minor * 100 + self.patch
    }
}

impl fmt::Display for TrtVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// A GPU compute capability (SM version), `(major, minor)`: `(9, 0)` for H100/H200,
/// `(8, 7)` for Jetson Orin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sm(pub u8, pub u8);

impl fmt::Display for Sm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}{}", self.0, self.1)
    }
}

/// Compute capabilities of NVIDIA's integrated (Tegra) GPUs: Jetson Nano 5.3,
/// TX2 6.2, Xavier 7.2, Orin 8.7, Thor 10.1 (CUDA 12.x) / 11.0 (CUDA 13).
pub const TEGRA_SMS: [Sm; 6] = [Sm(5, 3), Sm(6, 2), Sm(7, 2), Sm(8, 7), Sm(10, 1), Sm(11, 0)];

/// What the bundle's target record says about a TensorRT plan. Mirrors
/// `tether_bundle::Target` for `EngineKind::TensorRt` (same field encodings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanTarget {
    /// TensorRT version that built the plan, `MAJOR*10000 + MINOR*100 + PATCH`.
    pub tensorrt_version: u32,
    /// Compute capability of the GPU the plan was built on, if recorded.
    pub sm: Option<(u8, u8)>,
    /// Hardware-compatibility level: 0 none, 1 Ampere+, 2 same compute capability.
    pub hardware_compat: u32,
    /// [`TARGET_FLAG_VERSION_COMPATIBLE`] | [`TARGET_FLAG_LEAN`].
    pub flags: u32,
}

impl PlanTarget {
    /// The building TensorRT version.
    pub fn version(&self) -> TrtVersion {
        TrtVersion::from_encoded(self.tensorrt_version)
    }

    /// Whether the plan is version-compatible.
    pub fn version_compatible(&self) -> bool {
        self.flags & TARGET_FLAG_VERSION_COMPATIBLE != 0
    }

    /// Whether the plan's lean runtime was excluded.
    pub fn lean_runtime_excluded(&self) -> bool {
        self.flags & TARGET_FLAG_LEAN != 0
    }
}

impl From<&tether_bundle::Target<'_>> for PlanTarget {
    /// The TensorRT fields of a bundle's target record (meaningful when its
    /// `engine` is `EngineKind::TensorRt`).
    fn from(t: &tether_bundle::Target<'_>) -> Self {
        Self {
            tensorrt_version: t.tensorrt_version,
            sm: t.sm,
            hardware_compat: t.hardware_compat,
            flags: t.flags,
        }
    }
}

// The flag encodings are the bundle format's.
const _: () =
    assert!(TARGET_FLAG_VERSION_COMPATIBLE == tether_bundle::TARGET_FLAG_VERSION_COMPATIBLE);
const _: () = assert!(TARGET_FLAG_LEAN == tether_bundle::TARGET_FLAG_LEAN);

/// Which TensorRT runtime library was loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LibraryFlavor {
    /// The standard runtime, `libnvinfer.so.<major>`.
    Full,
    /// The lean runtime, `libnvinfer_lean.so.<major>`: runs version-compatible plans only.
    Lean,
}

impl fmt::Display for LibraryFlavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Full => "standard runtime (libnvinfer)",
            Self::Lean => "lean runtime (libnvinfer_lean)",
        })
    }
}

/// The library side of the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadedLibrary {
    /// Version reported by the loaded library (`getInferLib*Version`).
    pub version: TrtVersion,
    /// Which runtime it is.
    pub flavor: LibraryFlavor,
}

impl fmt::Display for LoadedLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TensorRT {} {}", self.version, self.flavor)
    }
}

/// The gate's answer when the plan may be deserialized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompatVerdict {
    /// The plan embeds the lean runtime (host code): the runtime must be
    /// told `setEngineHostCodeAllowed(true)` before deserializing it.
    pub host_code_required: bool,
    /// The plan was built by an older TensorRT than the loaded one
    /// (version-compatible plan running forward).
    pub runs_forward: bool,
}

/// Why the gate refuses a plan. Every message names the plan's side and the
/// library's or device's side.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompatError {
    /// The target record holds a value no TensorRT plan can have.
    #[error("plan target record is invalid: {field} = {value}: {reason}")]
    InvalidRecord {
        /// Which field.
        field: &'static str,
        /// The value seen.
        value: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Not version-compatible and built by another version.
    #[error(
        "plan built with TensorRT {plan} (not version-compatible) cannot be deserialized by the loaded {library}: without version compatibility the versions must match exactly; rebuild the plan with TensorRT {} or load that version",
        .library.version
    )]
    VersionMismatch {
        /// Version that built the plan.
        plan: TrtVersion,
        /// The loaded library.
        library: LoadedLibrary,
    },
    /// A version-compatible plan built by a newer TensorRT than the loaded one.
    #[error(
        "version-compatible plan built with TensorRT {plan} needs TensorRT {plan} or later, but the loaded library is {library}: version compatibility only runs forward"
    )]
    PlanNewerThanLibrary {
        /// Version that built the plan.
        plan: TrtVersion,
        /// The loaded library.
        library: LoadedLibrary,
    },
    /// A version-compatible plan across a major-version pair TensorRT does not support.
    #[error(
        "version-compatible plan built with TensorRT {plan} cannot run on the loaded {library}: across major versions only 10 -> 11 and 8 -> 10 are supported"
    )]
    MajorNotSupported {
        /// Version that built the plan.
        plan: TrtVersion,
        /// The loaded library.
        library: LoadedLibrary,
    },
    /// The lean runtime was loaded but the plan is not version-compatible.
    #[error(
        "plan built with TensorRT {plan} is not version-compatible, but the loaded library is the {library}, which deserializes version-compatible plans only; load libnvinfer.so.{} instead",
        .plan.major
    )]
    LeanNeedsVersionCompatible {
        /// Version that built the plan.
        plan: TrtVersion,
        /// The loaded library.
        library: LoadedLibrary,
    },
    /// A plan without its lean runtime on a library of another version.
    #[error(
        "plan built with TensorRT {plan} excludes its lean runtime, so it needs the TensorRT {plan} runtime, but the loaded library is {library}"
    )]
    ExcludedLeanRuntimeVersion {
        /// Version that built the plan.
        plan: TrtVersion,
        /// The loaded library.
        library: LoadedLibrary,
    },
    /// The record lacks the SM the plan was built for, and the level needs it.
    #[error(
        "plan target record has no SM, which hardware-compatibility level {level:?} needs to check against the device ({device})"
    )]
    MissingSm {
        /// The plan's hardware-compatibility level.
        level: HardwareCompatibility,
        /// The device's compute capability.
        device: Sm,
    },
    /// The device's SM differs from the plan's and the level requires equality.
    #[error(
        "plan was built for {plan} (hardware compatibility {level:?}) but the device is {device}: rebuild the plan on a {device} GPU or with --hardwareCompatibilityLevel=ampere+"
    )]
    SmMismatch {
        /// The plan's SM.
        plan: Sm,
        /// The device's SM.
        device: Sm,
        /// The plan's hardware-compatibility level.
        level: HardwareCompatibility,
    },
    /// An Ampere+ plan on a pre-Ampere device.
    #[error(
        "plan is hardware-compatible with Ampere and later GPUs (sm_80+), but the device is {device}"
    )]
    DeviceBelowAmpere {
        /// The device's SM.
        device: Sm,
    },
    /// A hardware-compatible plan on a Jetson or DRIVE GPU.
    #[error(
        "plan was built with hardware compatibility {level:?}, which TensorRT does not support on JetPack or DRIVE OS, and the device is the integrated GPU {device}: build the plan without hardware compatibility on the target"
    )]
    HardwareCompatOnTegra {
        /// The plan's level.
        level: HardwareCompatibility,
        /// The device's SM.
        device: Sm,
    },
}

/// Decides whether a plan described by `plan` may be deserialized by
/// `library` on a device of compute capability `device_sm`.
///
/// Pure: no I/O, no TensorRT call. The rules and their sources are in the
/// [module documentation](self).
///
/// # Errors
/// A [`CompatError`] naming both sides: an invalid record, a version rule or a
/// hardware rule broken.
pub fn check_plan_compatibility(
    plan: &PlanTarget,
    library: &LoadedLibrary,
    device_sm: (u8, u8),
) -> Result<CompatVerdict, CompatError> {
    let device = Sm(device_sm.0, device_sm.1);
    let plan_version = plan.version();
    let known_flags = TARGET_FLAG_VERSION_COMPATIBLE | TARGET_FLAG_LEAN;
    if plan.flags & !known_flags != 0 {
        return Err(CompatError::InvalidRecord {
            field: "flags",
            value: u64::from(plan.flags),
            reason: "unknown flag bits (known: 1 version-compatible, 2 lean runtime excluded)",
        });
    }
    if plan_version.major < 8 {
        return Err(CompatError::InvalidRecord {
            field: "tensorrt_version",
            value: u64::from(plan.tensorrt_version),
            reason: "not a TensorRT 8 or later version (encoding MAJOR*10000+MINOR*100+PATCH)",
        });
    }
    let level = HardwareCompatibility::from_raw(i64::from(plan.hardware_compat)).ok_or(
        CompatError::InvalidRecord {
            field: "hardware_compat",
            value: u64::from(plan.hardware_compat),
            reason: "known levels are 0 none, 1 ampere+, 2 same compute capability",
        },
    )?;
    if plan.lean_runtime_excluded() && !plan.version_compatible() {
        return Err(CompatError::InvalidRecord {
            field: "flags",
            value: u64::from(plan.flags),
            reason: "the lean-runtime-excluded flag (2) needs the version-compatible flag (1)",
        });
    }
    if level == HardwareCompatibility::SameComputeCapability
        && plan_version < TrtVersion::new(10, 9, 0)
    {
        return Err(CompatError::InvalidRecord {
            field: "hardware_compat",
            value: u64::from(plan.hardware_compat),
            reason: "same-compute-capability plans exist only from TensorRT 10.9",
        });
    }

    // Version.
    let lib = library.version;
    if !plan.version_compatible() {
        if library.flavor == LibraryFlavor::Lean {
            return Err(CompatError::LeanNeedsVersionCompatible {
                plan: plan_version,
                library: *library,
            });
        }
        if plan_version != lib {
            return Err(CompatError::VersionMismatch {
                plan: plan_version,
                library: *library,
            });
        }
    } else if plan.lean_runtime_excluded() {
        if plan_version != lib {
            return Err(CompatError::ExcludedLeanRuntimeVersion {
                plan: plan_version,
                library: *library,
            });
        }
    } else {
        if plan_version > lib {
            return Err(CompatError::PlanNewerThanLibrary {
                plan: plan_version,
                library: *library,
            });
        }
        let supported_pair = plan_version.major == lib.major
            || (plan_version.major == 10 && lib.major == 11)
            || (plan_version.major == 8 && lib.major == 10);
        if !supported_pair {
            return Err(CompatError::MajorNotSupported {
                plan: plan_version,
                library: *library,
            });
        }
    }

    // Hardware.
    let plan_sm = plan.sm.map(|(a, b)| Sm(a, b));
    match level {
        HardwareCompatibility::None | HardwareCompatibility::SameComputeCapability => {
            let plan_sm = plan_sm.ok_or(CompatError::MissingSm { level, device })?;
            if level == HardwareCompatibility::SameComputeCapability && TEGRA_SMS.contains(&device)
            {
                return Err(CompatError::HardwareCompatOnTegra { level, device });
            }
            if plan_sm != device {
                return Err(CompatError::SmMismatch {
                    plan: plan_sm,
                    device,
                    level,
                });
            }
        }
        HardwareCompatibility::AmperePlus => {
            if TEGRA_SMS.contains(&device) {
                return Err(CompatError::HardwareCompatOnTegra { level, device });
            }
            if device.0 < 8 {
                return Err(CompatError::DeviceBelowAmpere { device });
            }
            if let Some(p) = plan_sm
                && p.0 < 8
            {
                return Err(CompatError::InvalidRecord {
                    field: "sm",
                    value: u64::from(p.0) * 10 + u64::from(p.1),
                    reason: "ampere+ plans can only be built on Ampere (sm_80) or later GPUs",
                });
            }
        }
    }

    Ok(CompatVerdict {
        host_code_required: plan.version_compatible() && !plan.lean_runtime_excluded(),
        runs_forward: plan_version < lib,
    })
}

/// What the first bytes of a serialized plan say (the header trtexec's
/// `--getPlanVersionOnly` reads, NVIDIA/TensorRT `samples/common/sampleEngines.cpp`):
/// a little-endian `u32` tag `0x74727466` ("ftrt"), a `u32` serialization
/// version, and for serialization version 0 the building TensorRT's
/// major, minor, patch and build as single bytes at offsets 24..28.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanHeader {
    /// Version that serialized the plan.
    pub version: TrtVersion,
    /// Its build number.
    pub build: u8,
}

/// The plan tag, `"ftrt"` read as a little-endian `u32`.
pub const PLAN_TAG: u32 = 0x7472_7466;

impl PlanHeader {
    /// Reads the header, `None` when the bytes do not start like a plan of
    /// serialization version 0 (then only TensorRT can say more).
    pub fn parse(plan: &[u8]) -> Option<Self> {
        let head = plan.get(..28)?;
        let tag = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let serialization = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        if tag != PLAN_TAG || serialization != 0 {
            return None;
        }
        Some(Self {
            version: TrtVersion::new(
                u32::from(head[24]),
                u32::from(head[25]),
                u32::from(head[26]),
            ),
            build: head[27],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: u32 = TARGET_FLAG_VERSION_COMPATIBLE;
    const L: u32 = TARGET_FLAG_LEAN;

    fn full(major: u32, minor: u32, patch: u32) -> LoadedLibrary {
        LoadedLibrary {
            version: TrtVersion::new(major, minor, patch),
            flavor: LibraryFlavor::Full,
        }
    }

    fn lean(major: u32, minor: u32, patch: u32) -> LoadedLibrary {
        LoadedLibrary {
            version: TrtVersion::new(major, minor, patch),
            flavor: LibraryFlavor::Lean,
        }
    }

    fn plan(version: u32, sm: Option<(u8, u8)>, hw: u32, flags: u32) -> PlanTarget {
        PlanTarget {
            tensorrt_version: version,
            sm,
            hardware_compat: hw,
            flags,
        }
    }

    /// Which variant a case must produce (`Ok` or the error's name).
    fn outcome(r: &Result<CompatVerdict, CompatError>) -> &'static str {
        match r {
            Ok(_) => "ok",
            Err(CompatError::InvalidRecord { .. }) => "InvalidRecord",
            Err(CompatError::VersionMismatch { .. }) => "VersionMismatch",
            Err(CompatError::PlanNewerThanLibrary { .. }) => "PlanNewerThanLibrary",
            Err(CompatError::MajorNotSupported { .. }) => "MajorNotSupported",
            Err(CompatError::LeanNeedsVersionCompatible { .. }) => "LeanNeedsVersionCompatible",
            Err(CompatError::ExcludedLeanRuntimeVersion { .. }) => "ExcludedLeanRuntimeVersion",
            Err(CompatError::MissingSm { .. }) => "MissingSm",
            Err(CompatError::SmMismatch { .. }) => "SmMismatch",
            Err(CompatError::DeviceBelowAmpere { .. }) => "DeviceBelowAmpere",
            Err(CompatError::HardwareCompatOnTegra { .. }) => "HardwareCompatOnTegra",
        }
    }

    /// (name, plan record, loaded library, device SM, expected outcome)
    type Case = (
        &'static str,
        PlanTarget,
        LoadedLibrary,
        (u8, u8),
        &'static str,
    );

    #[test]
    fn gate_table() {
        let h200 = (9, 0);
        let orin = (8, 7);
        #[rustfmt::skip]
        let cases: &[Case] = &[
            ("same version, same SM", plan(100300, Some((8, 7)), 0, 0), full(10, 3, 0), orin, "ok"),
            ("same version 11.4 on H200", plan(110400, Some((9, 0)), 0, 0), full(11, 4, 0), h200, "ok"),
            ("different patch", plan(100300, Some((8, 7)), 0, 0), full(10, 3, 1), orin, "VersionMismatch"),
            ("different minor (plan older)", plan(100300, Some((8, 7)), 0, 0), full(10, 10, 0), orin, "VersionMismatch"),
            ("different minor (plan newer)", plan(101000, Some((8, 7)), 0, 0), full(10, 3, 0), orin, "VersionMismatch"),
            ("different major", plan(100300, Some((9, 0)), 0, 0), full(11, 4, 0), h200, "VersionMismatch"),
            ("VC plan on newer minor", plan(110000, Some((9, 0)), 0, V), full(11, 4, 0), h200, "ok"),
            ("VC plan on same version", plan(110400, Some((9, 0)), 0, V), full(11, 4, 0), h200, "ok"),
            ("VC plan on older minor", plan(110400, Some((9, 0)), 0, V), full(11, 1, 0), h200, "PlanNewerThanLibrary"),
            ("VC 10.x plan on 11.x", plan(101600, Some((9, 0)), 0, V), full(11, 4, 0), h200, "ok"),
            ("VC 11.x plan on 10.x", plan(110000, Some((9, 0)), 0, V), full(10, 16, 0), h200, "PlanNewerThanLibrary"),
            ("VC 8.6 plan on 10.x", plan(80601, Some((8, 7)), 0, V), full(10, 3, 0), orin, "ok"),
            ("VC 8.6 plan on 11.x", plan(80601, Some((9, 0)), 0, V), full(11, 4, 0), h200, "MajorNotSupported"),
            ("VC plan on lean runtime, newer", plan(110000, Some((9, 0)), 0, V), lean(11, 4, 0), h200, "ok"),
            ("non-VC plan on lean runtime", plan(110400, Some((9, 0)), 0, 0), lean(11, 4, 0), h200, "LeanNeedsVersionCompatible"),
            ("lean excluded, same version", plan(110400, Some((9, 0)), 0, V | L), lean(11, 4, 0), h200, "ok"),
            ("lean excluded, newer library", plan(110000, Some((9, 0)), 0, V | L), lean(11, 4, 0), h200, "ExcludedLeanRuntimeVersion"),
            ("lean flag without VC", plan(110400, Some((9, 0)), 0, L), lean(11, 4, 0), h200, "InvalidRecord"),
            ("unknown flag", plan(110400, Some((9, 0)), 0, 4), full(11, 4, 0), h200, "InvalidRecord"),
            ("unknown hw level", plan(110400, Some((9, 0)), 3, 0), full(11, 4, 0), h200, "InvalidRecord"),
            ("garbage version", plan(42, Some((9, 0)), 0, 0), full(11, 4, 0), h200, "InvalidRecord"),
            ("hw none, other SM", plan(110400, Some((8, 0)), 0, 0), full(11, 4, 0), h200, "SmMismatch"),
            ("hw none, no SM recorded", plan(110400, None, 0, 0), full(11, 4, 0), h200, "MissingSm"),
            ("ampere+ on sm_90", plan(110400, Some((8, 6)), 1, 0), full(11, 4, 0), h200, "ok"),
            ("ampere+ on sm_90, SM not recorded", plan(110400, None, 1, 0), full(11, 4, 0), h200, "ok"),
            ("ampere+ on sm_75", plan(100300, Some((8, 6)), 1, 0), full(10, 3, 0), (7, 5), "DeviceBelowAmpere"),
            ("ampere+ built on sm_75", plan(100300, Some((7, 5)), 1, 0), full(10, 3, 0), (8, 6), "InvalidRecord"),
            ("ampere+ on Jetson Orin", plan(100300, Some((8, 6)), 1, 0), full(10, 3, 0), orin, "HardwareCompatOnTegra"),
            ("ampere+ on Thor", plan(101000, Some((9, 0)), 1, 0), full(10, 10, 0), (11, 0), "HardwareCompatOnTegra"),
            ("same-CC, same SM", plan(101000, Some((8, 9)), 2, 0), full(10, 10, 0), (8, 9), "ok"),
            ("same-CC, other minor SM", plan(101000, Some((8, 6)), 2, 0), full(10, 10, 0), (8, 9), "SmMismatch"),
            ("same-CC, other major SM", plan(110400, Some((8, 0)), 2, 0), full(11, 4, 0), h200, "SmMismatch"),
            ("same-CC before 10.9", plan(100300, Some((8, 7)), 2, 0), full(10, 3, 0), orin, "InvalidRecord"),
            ("same-CC on Orin", plan(101000, Some((8, 7)), 2, 0), full(10, 10, 0), orin, "HardwareCompatOnTegra"),
            ("VC + ampere+ forward on H200", plan(110000, Some((8, 0)), 1, V), lean(11, 4, 0), h200, "ok"),
        ];
        for (name, p, lib, sm, want) in cases {
            let got = check_plan_compatibility(p, lib, *sm);
            assert_eq!(outcome(&got), *want, "case `{name}`: {got:?}");
        }
    }

    #[test]
    fn verdict_reports_host_code_and_direction() {
        let v =
            check_plan_compatibility(&plan(110000, Some((9, 0)), 0, V), &full(11, 4, 0), (9, 0))
                .unwrap();
        assert!(v.host_code_required);
        assert!(v.runs_forward);
        let v =
            check_plan_compatibility(&plan(110400, Some((9, 0)), 0, 0), &full(11, 4, 0), (9, 0))
                .unwrap();
        assert!(!v.host_code_required);
        assert!(!v.runs_forward);
        let v = check_plan_compatibility(
            &plan(110400, Some((9, 0)), 0, V | L),
            &lean(11, 4, 0),
            (9, 0),
        )
        .unwrap();
        assert!(!v.host_code_required);
    }

    #[test]
    fn messages_name_both_sides() {
        let e =
            check_plan_compatibility(&plan(100300, Some((8, 7)), 0, 0), &full(10, 10, 0), (8, 7))
                .unwrap_err()
                .to_string();
        assert!(e.contains("10.3.0") && e.contains("10.10.0"), "{e}");
        let e =
            check_plan_compatibility(&plan(110400, Some((8, 0)), 0, 0), &full(11, 4, 0), (9, 0))
                .unwrap_err()
                .to_string();
        assert!(e.contains("sm_80") && e.contains("sm_90"), "{e}");
        let e =
            check_plan_compatibility(&plan(110400, Some((9, 0)), 0, 0), &lean(11, 4, 0), (9, 0))
                .unwrap_err()
                .to_string();
        assert!(e.contains("11.4.0") && e.contains("lean"), "{e}");
    }

    #[test]
    fn version_encoding() {
        assert_eq!(TrtVersion::from_encoded(110400), TrtVersion::new(11, 4, 0));
        assert_eq!(TrtVersion::from_encoded(101003), TrtVersion::new(10, 10, 3));
        assert_eq!(TrtVersion::new(10, 16, 1).encoded(), 101601);
        assert_eq!(TrtVersion::new(10, 3, 0).to_string(), "10.3.0");
    }

    #[test]
    fn plan_header() {
        let mut bytes = vec![0u8; 64];
        bytes[..4].copy_from_slice(&PLAN_TAG.to_le_bytes());
        bytes[24..28].copy_from_slice(&[11, 4, 0, 106]);
        let h = PlanHeader::parse(&bytes).unwrap();
        assert_eq!(h.version, TrtVersion::new(11, 4, 0));
        assert_eq!(h.build, 106);
        assert_eq!(&bytes[..4], b"ftrt");
        assert!(PlanHeader::parse(&bytes[..20]).is_none());
        assert!(PlanHeader::parse(b"not a plan at all, definitely not a plan").is_none());
    }
}
