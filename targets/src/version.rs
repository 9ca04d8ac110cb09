//! Small value types shared by the descriptors, the probe and the selection:
//! CUDA compute capability ([`Sm`]), TensorRT version numbers
//! ([`TrtVersion`]), CUDA driver versions ([`CudaVersion`]) and CPU
//! architectures ([`CpuArch`]).

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
    /// `HardwareCompatibilityLevel::kAMPERE_PLUS`.
    pub const AMPERE: Sm = Sm::new(8, 0);

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
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
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
    fn arch_matching() {
        assert!(CpuArch::Any.runs_on(CpuArch::Aarch64));
        assert!(CpuArch::Aarch64.runs_on(CpuArch::Aarch64));
        assert!(!CpuArch::X86_64.runs_on(CpuArch::Aarch64));
        assert!(!CpuArch::Aarch64.runs_on(CpuArch::Any));
    }
}
