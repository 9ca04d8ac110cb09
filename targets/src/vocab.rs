//! The platform vocabulary: the one definition of every value type that the
//! descriptors, the probe, engine selection, the TensorRT compatibility rules,
//! the bundle format and the runtime share.
//!
//! * [`Sm`]: a CUDA compute capability; [`GpuFacts`]: a GPU as the rules need it.
//! * [`TrtVersion`], [`CudaVersion`]: version numbers in NVIDIA's encodings.
//! * [`CpuArch`]: a CPU architecture.
//! * [`EngineKind`]: how a network runs.
//! * [`HardwareCompat`]: TensorRT's `HardwareCompatibilityLevel`.
//! * [`LibraryFlavor`] and [`TrtLibrary`]: which TensorRT runtime library is
//!   loaded (full, lean, dispatch) and its version.
//! * [`FLAG_VERSION_COMPATIBLE`], [`FLAG_EXCLUDE_LEAN_RUNTIME`]: the target
//!   record's flag bits.
//!
//! Everything here is `Copy`, `const`-constructible and allocation-free.

use core::fmt;

/// A CUDA compute capability ("SM version"), `major.minor`.
///
/// This is what `cuDeviceGetAttribute` reports as
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR` (75) and `..._MINOR` (76),
/// and what a TensorRT plan is built for. The list of devices per compute
/// capability is NVIDIA's "CUDA GPU Compute Capability" table,
/// <https://developer.nvidia.com/cuda-gpus>.
///
/// Ordering is numeric (`8.7 < 9.0 < 10.0 < 11.0 < 12.0`).
///
/// Serializes (feature `serde`) as the string `"8.7"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sm {
    /// Major revision: the core architecture (8 = Ampere/Ada, 9 = Hopper,
    /// 10/11/12 = Blackwell variants).
    pub major: u8,
    /// Minor revision within the architecture.
    pub minor: u8,
}

impl Sm {
    /// `Sm { major, minor }`.
    pub const fn new(major: u8, minor: u8) -> Self {
        Self { major, minor }
    }

    /// The number `nvcc` uses in `sm_XY` / `compute_XY`: `major * 10 + minor`
    /// (87 for Orin, 110 for Thor under CUDA 13).
    pub const fn number(self) -> u16 {
        self.major as u16 * 10 + self.minor as u16
    }

    /// The first Ampere compute capability, 8.0: the floor of TensorRT's
    /// `HardwareCompatibilityLevel::kAMPERE_PLUS` ("only supported for engines
    /// built on NVIDIA Ampere and later GPUs", `NvInfer.h`).
    pub const AMPERE: Sm = Sm::new(8, 0);

    /// The first Turing compute capability, 7.5: the floor of TensorRT's
    /// `HardwareCompatibilityLevel::kSAME_COMPUTE_CAPABILITY` ("only supported
    /// for engines built on NVIDIA Turing and later GPUs", `NvInfer.h`).
    pub const TURING: Sm = Sm::new(7, 5);

    /// True for the two names one Thor GPU has had: compute capability 10.1
    /// under CUDA 12.x drivers (DRIVE OS 7.0) and 11.0 from CUDA 13.0 on
    /// (JetPack 7). Source: CUDA 13.0 renamed `sm_101` to `sm_110` (e.g. the
    /// cuRANDDx / nvCOMPDx release notes: "Thor SM renaming from sm_101 to
    /// sm_110 starting from CUDA 13.0",
    /// <https://docs.nvidia.com/cuda/curanddx/release_notes.html>).
    pub const fn is_thor(self) -> bool {
        matches!((self.major, self.minor), (10, 1) | (11, 0))
    }
}

impl fmt::Display for Sm {
    /// `8.7`. Use [`Sm::number`] for the `sm_87` spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A TensorRT version encoded as `MAJOR * 10000 + MINOR * 100 + PATCH`, the
/// same number `getInferLibVersion()` returns and `createInferRuntime`
/// passes (`NV_TENSORRT_VERSION` in `NvInferVersion.h`): 100300 is 10.3.0,
/// 110400 is 11.4.0. The build number is not part of it.
///
/// Serializes (feature `serde`) as the string `"10.3.0"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TrtVersion(pub u32);

impl TrtVersion {
    /// Builds the encoded number from its parts (`minor`, `patch` < 100).
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self(major * 10000 + minor * 100 + patch)
    }
    /// `MAJOR`.
    pub const fn major(self) -> u32 {
        self.0 / 10000
    }
    /// `MINOR`.
    pub const fn minor(self) -> u32 {
        (self.0 / 100) % 100
    }
    /// `PATCH`.
    pub const fn patch(self) -> u32 {
        self.0 % 100
    }
    /// `MAJOR * 100 + MINOR`: equal for two versions of one minor release.
    pub const fn major_minor(self) -> u32 {
        self.0 / 100
    }
    /// Whether the record holds no version (0).
    pub const fn is_unset(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for TrtVersion {
    /// `10.3.0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major(), self.minor(), self.patch())
    }
}

/// A CUDA driver API version as `cuDriverGetVersion` reports it:
/// `MAJOR * 1000 + MINOR * 10` (12060 is CUDA 12.6, 13000 is 13.0;
/// `CUDA_VERSION` in `cuda.h`).
///
/// Serializes (feature `serde`) as the string `"12.6"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CudaVersion(pub u32);

impl CudaVersion {
    /// Builds the encoded number from `major.minor`.
    pub const fn new(major: u32, minor: u32) -> Self {
        Self(major * 1000 + minor * 10)
    }
    /// `MAJOR`.
    pub const fn major(self) -> u32 {
        self.0 / 1000
    }
    /// `MINOR`.
    pub const fn minor(self) -> u32 {
        (self.0 % 1000) / 10
    }
}

impl fmt::Display for CudaVersion {
    /// `12.6`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major(), self.minor())
    }
}

/// A CPU architecture, as a bundle target records it and as a device has it.
///
/// In a bundle offer, [`CpuArch::Any`] means "runs on every architecture"
/// (an ONNX model for the tract CPU engine). As a *device* architecture,
/// `Any` means "neither x86_64 nor aarch64" and only matches `Any` offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CpuArch {
    /// No architecture requirement (offer) / another architecture (device).
    Any,
    /// x86_64 (`x86_64-unknown-linux-gnu`).
    X86_64,
    /// 64-bit Arm (`aarch64-unknown-linux-gnu`): Jetson, DRIVE, Grace/SBSA.
    Aarch64,
}

impl CpuArch {
    /// The architecture this binary was compiled for.
    pub const fn host() -> Self {
        if cfg!(target_arch = "x86_64") {
            CpuArch::X86_64
        } else if cfg!(target_arch = "aarch64") {
            CpuArch::Aarch64
        } else {
            CpuArch::Any
        }
    }

    /// Whether an offer for `self` runs on a device of architecture `device`.
    pub const fn runs_on(self, device: CpuArch) -> bool {
        matches!(
            (self, device),
            (CpuArch::Any, _)
                | (CpuArch::X86_64, CpuArch::X86_64)
                | (CpuArch::Aarch64, CpuArch::Aarch64)
        )
    }

    /// Lower-case name: `any`, `x86_64`, `aarch64`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CpuArch::Any => "any",
            CpuArch::X86_64 => "x86_64",
            CpuArch::Aarch64 => "aarch64",
        }
    }
}

impl fmt::Display for CpuArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an engine runs a network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    /// `TensorRT`, `cuda-native`, `tract-cuda`, `tract CPU`.
    pub const fn as_str(self) -> &'static str {
        match self {
            EngineKind::TensorRt => "TensorRT",
            EngineKind::CudaNative => "cuda-native",
            EngineKind::TractCuda => "tract-cuda",
            EngineKind::TractCpu => "tract CPU",
        }
    }

    /// The stable identifier used in JSON and in `bundle/FORMAT.md` (table 5.3):
    /// `tensorrt`, `cuda-native`, `tract-cuda`, `tract-cpu`.
    pub const fn id(self) -> &'static str {
        match self {
            EngineKind::TensorRt => "tensorrt",
            EngineKind::CudaNative => "cuda-native",
            EngineKind::TractCuda => "tract-cuda",
            EngineKind::TractCpu => "tract-cpu",
        }
    }

    /// Whether the engine needs an NVIDIA GPU.
    pub const fn needs_gpu(self) -> bool {
        !matches!(self, EngineKind::TractCpu)
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// TensorRT `HardwareCompatibilityLevel` (`NvInfer.h`): on which GPUs other
/// than the building one a plan may run. The discriminants are TensorRT's
/// (`kNONE` = 0, `kAMPERE_PLUS` = 1, `kSAME_COMPUTE_CAPABILITY` = 2), which
/// are also the bundle target record's `hardware_compat` encoding.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum HardwareCompat {
    /// `kNONE`: only GPUs of the compute capability it was built on.
    None = 0,
    /// `kAMPERE_PLUS`: any Ampere or newer GPU (sm >= 8.0); built on one.
    AmperePlus = 1,
    /// `kSAME_COMPUTE_CAPABILITY` (TensorRT 10.9 and later): any GPU with the
    /// compute capability it was built on; built on Turing (7.5) or newer.
    SameComputeCapability = 2,
}

impl HardwareCompat {
    /// From the raw value (bundle record or `getHardwareCompatibilityLevel()`);
    /// `None` for values TensorRT does not define.
    pub const fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            0 => Some(HardwareCompat::None),
            1 => Some(HardwareCompat::AmperePlus),
            2 => Some(HardwareCompat::SameComputeCapability),
            _ => None,
        }
    }

    /// The raw value.
    pub const fn raw(self) -> u32 {
        self as u32
    }

    /// The spelling of `trtexec --hardwareCompatibilityLevel=` (`none`,
    /// `ampere+`, `sameComputeCapability`).
    pub const fn trtexec_name(self) -> &'static str {
        match self {
            HardwareCompat::None => "none",
            HardwareCompat::AmperePlus => "ampere+",
            HardwareCompat::SameComputeCapability => "sameComputeCapability",
        }
    }
}

impl fmt::Display for HardwareCompat {
    /// `none`, `Ampere+`, `same compute capability`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HardwareCompat::None => "none",
            HardwareCompat::AmperePlus => "Ampere+",
            HardwareCompat::SameComputeCapability => "same compute capability",
        })
    }
}

/// Target-record flag bit 0: the plan was built with
/// `BuilderFlag::kVERSION_COMPATIBLE` (`trtexec --versionCompatible`).
pub const FLAG_VERSION_COMPATIBLE: u32 = 1;
/// Target-record flag bit 1: the plan was built with
/// `BuilderFlag::kEXCLUDE_LEAN_RUNTIME` (`trtexec --excludeLeanRuntime`): a
/// version-compatible plan without its embedded lean runtime, so it needs a
/// lean runtime of its own TensorRT version.
pub const FLAG_EXCLUDE_LEAN_RUNTIME: u32 = 2;
/// Every flag bit this crate understands.
pub const KNOWN_FLAGS: u32 = FLAG_VERSION_COMPATIBLE | FLAG_EXCLUDE_LEAN_RUNTIME;

/// Which TensorRT runtime library is loaded. The three ship as separate
/// libraries (and as the pip wheels `tensorrt-cuXX-libs`,
/// `tensorrt-lean-cuXX-libs`, `tensorrt-dispatch-cuXX-libs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LibraryFlavor {
    /// The full (standard) library, `libnvinfer.so.<major>`: builder and
    /// runtime; deserializes every plan of its own version, and
    /// version-compatible plans of older ones.
    Full,
    /// The lean runtime, `libnvinfer_lean.so.<major>`: deserializes
    /// version-compatible plans only.
    Lean,
    /// The dispatch runtime, `libnvinfer_dispatch.so.<major>`: a shim that runs
    /// the lean runtime a version-compatible plan embeds; it deserializes
    /// version-compatible plans only.
    Dispatch,
}

impl LibraryFlavor {
    /// Every flavor, in the order tether prefers them.
    pub const ALL: [LibraryFlavor; 3] = [
        LibraryFlavor::Full,
        LibraryFlavor::Lean,
        LibraryFlavor::Dispatch,
    ];

    /// The file-name stem: `libnvinfer`, `libnvinfer_lean`, `libnvinfer_dispatch`.
    pub const fn stem(self) -> &'static str {
        match self {
            LibraryFlavor::Full => "libnvinfer",
            LibraryFlavor::Lean => "libnvinfer_lean",
            LibraryFlavor::Dispatch => "libnvinfer_dispatch",
        }
    }

    /// `full`, `lean`, `dispatch`.
    pub const fn as_str(self) -> &'static str {
        match self {
            LibraryFlavor::Full => "full",
            LibraryFlavor::Lean => "lean",
            LibraryFlavor::Dispatch => "dispatch",
        }
    }

    /// Whether it deserializes only version-compatible plans (lean and
    /// dispatch).
    pub const fn version_compatible_only(self) -> bool {
        !matches!(self, LibraryFlavor::Full)
    }
}

impl fmt::Display for LibraryFlavor {
    /// `full runtime (libnvinfer)`, `lean runtime (libnvinfer_lean)`,
    /// `dispatch runtime (libnvinfer_dispatch)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} runtime ({})", self.as_str(), self.stem())
    }
}

/// A TensorRT library as the compatibility rules need it: the version it
/// reports (`getInferLib{Major,Minor,Patch}Version`) and its flavor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TrtLibrary {
    /// `MAJOR.MINOR.PATCH`.
    pub version: TrtVersion,
    /// Full, lean or dispatch.
    pub flavor: LibraryFlavor,
}

impl TrtLibrary {
    /// A full library of `version`.
    pub const fn full(version: TrtVersion) -> Self {
        Self {
            version,
            flavor: LibraryFlavor::Full,
        }
    }
    /// A lean runtime of `version`.
    pub const fn lean(version: TrtVersion) -> Self {
        Self {
            version,
            flavor: LibraryFlavor::Lean,
        }
    }
    /// A dispatch runtime of `version`.
    pub const fn dispatch(version: TrtVersion) -> Self {
        Self {
            version,
            flavor: LibraryFlavor::Dispatch,
        }
    }
}

impl fmt::Display for TrtLibrary {
    /// `TensorRT 10.3.0 full runtime (libnvinfer)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TensorRT {} {}", self.version, self.flavor)
    }
}

/// A GPU as selection and the TensorRT rules need it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct GpuFacts {
    /// Compute capability the driver reports.
    pub sm: Sm,
    /// `CU_DEVICE_ATTRIBUTE_INTEGRATED`: shares DRAM with the CPU (Jetson,
    /// DRIVE).
    pub integrated: bool,
}

impl GpuFacts {
    /// A discrete GPU of compute capability `sm`.
    pub const fn discrete(sm: Sm) -> Self {
        Self {
            sm,
            integrated: false,
        }
    }
    /// An integrated (Jetson, DRIVE) GPU of compute capability `sm`.
    pub const fn integrated(sm: Sm) -> Self {
        Self {
            sm,
            integrated: true,
        }
    }
}

impl fmt::Display for GpuFacts {
    /// `sm_87 (integrated)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sm_{} ({})",
            self.sm.number(),
            if self.integrated {
                "integrated"
            } else {
                "discrete"
            }
        )
    }
}

/// `Serialize` through `Display`, for the small version-like types.
macro_rules! serialize_as_display {
    ($($t:ty),*) => {$(
        #[cfg(feature = "serde")]
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    )*};
}
pub(crate) use serialize_as_display;

serialize_as_display!(Sm, TrtVersion, CudaVersion);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trt_version_parts() {
        let v = TrtVersion(100300);
        assert_eq!((v.major(), v.minor(), v.patch()), (10, 3, 0));
        assert_eq!(v.to_string(), "10.3.0");
        assert_eq!(TrtVersion::new(11, 4, 0), TrtVersion(110400));
        assert_eq!(TrtVersion::new(10, 13, 3).to_string(), "10.13.3");
        assert_eq!(
            TrtVersion(100303).major_minor(),
            TrtVersion(100300).major_minor()
        );
    }

    #[test]
    fn cuda_version_parts() {
        assert_eq!(CudaVersion(12060).to_string(), "12.6");
        assert_eq!(CudaVersion(13000).to_string(), "13.0");
        assert_eq!(CudaVersion::new(13, 2), CudaVersion(13020));
    }

    #[test]
    fn sm_order_and_names() {
        assert!(Sm::new(8, 7) < Sm::new(9, 0));
        assert!(Sm::new(10, 0) < Sm::new(11, 0));
        assert_eq!(Sm::new(11, 0).number(), 110);
        assert_eq!(Sm::new(8, 7).to_string(), "8.7");
        assert!(Sm::new(10, 1).is_thor() && Sm::new(11, 0).is_thor());
        assert!(!Sm::new(10, 0).is_thor());
    }

    #[test]
    fn hardware_levels_are_tensorrts_numbers() {
        for raw in 0..3 {
            let level = HardwareCompat::from_raw(raw).unwrap();
            assert_eq!(level.raw(), raw);
            assert_eq!(level as i32, raw as i32);
        }
        assert_eq!(HardwareCompat::from_raw(3), None);
        assert_eq!(HardwareCompat::AmperePlus.trtexec_name(), "ampere+");
    }

    #[test]
    fn library_flavors() {
        assert_eq!(LibraryFlavor::Lean.stem(), "libnvinfer_lean");
        assert!(LibraryFlavor::Dispatch.version_compatible_only());
        assert!(!LibraryFlavor::Full.version_compatible_only());
        assert_eq!(
            TrtLibrary::lean(TrtVersion::new(11, 4, 0)).to_string(),
            "TensorRT 11.4.0 lean runtime (libnvinfer_lean)"
        );
        assert_eq!(
            GpuFacts::integrated(Sm::new(8, 7)).to_string(),
            "sm_87 (integrated)"
        );
        assert_eq!(KNOWN_FLAGS, 3);
    }

    #[test]
    fn arch_matching() {
        assert!(CpuArch::Any.runs_on(CpuArch::Aarch64));
        assert!(CpuArch::Aarch64.runs_on(CpuArch::Aarch64));
        assert!(!CpuArch::X86_64.runs_on(CpuArch::Aarch64));
        assert!(!CpuArch::Aarch64.runs_on(CpuArch::Any));
    }
}

/// Serialised as the words the reports print (`x86_64`, `tensorrt`, `lean`), never as Rust
/// spells the variant: [`CpuArch::as_str`], [`EngineKind::id`], [`LibraryFlavor::as_str`].
#[cfg(feature = "serde")]
mod serialise_as_words {
    use super::{CpuArch, EngineKind, LibraryFlavor};

    macro_rules! as_word {
        ($t:ty, $word:ident) => {
            impl serde::Serialize for $t {
                fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    s.serialize_str(self.$word())
                }
            }
        };
    }
    as_word!(CpuArch, as_str);
    as_word!(EngineKind, id);
    as_word!(LibraryFlavor, as_str);
}
