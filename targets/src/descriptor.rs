//! Target descriptors: what each supported device is and what it can run.
//!
//! Everything here is `&'static` data; nothing allocates. Look a descriptor
//! up with [`by_id`] or [`identify`], or iterate [`TARGETS`]. Where the NVIDIA
//! libraries of each platform live is in [`libs`](crate::libs), the one
//! search list the probe, the runtime and `tether doctor` share.

use core::fmt;

use crate::select::DeviceFacts;
use crate::sources::{self, Source};
use crate::vocab::{CpuArch, CudaVersion, GpuFacts, Sm, TrtLibrary, TrtVersion};

/// The family a target belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum Platform {
    /// A discrete NVIDIA GPU in a server or workstation.
    DataCenter,
    /// Jetson module running JetPack (Jetson Linux / L4T).
    Jetson,
    /// DRIVE AGX running DRIVE OS.
    Drive,
}

/// How the GPU reaches memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum MemoryModel {
    /// The GPU is part of the SoC and shares one DRAM with the CPU
    /// (`CU_DEVICE_ATTRIBUTE_INTEGRATED` = 1 on Orin). Host and device
    /// allocations come out of the same budget; pinned/mapped host memory is
    /// zero-copy.
    Integrated,
    /// The GPU has its own memory behind PCIe/NVLink; host-device copies are
    /// real transfers.
    Discrete,
}

/// A TensorRT version as a software release fixes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum TrtSpec {
    /// An exact version.
    Exact(TrtVersion),
    /// Only the major is documented (e.g. "TensorRT 10.x" on DRIVE Orin
    /// with DriveOS 7.0).
    Major(u32),
}

impl fmt::Display for TrtSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrtSpec::Exact(v) => write!(f, "{v}"),
            TrtSpec::Major(m) => write!(f, "{m}.x"),
        }
    }
}

/// One software release a target runs (a JetPack or DRIVE OS version).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SoftwareRelease {
    /// Name and version, e.g. `JetPack 6.2` or `DRIVE OS 7.0.3`.
    pub name: &'static str,
    /// CUDA version it ships, when documented.
    pub cuda: Option<CudaVersion>,
    /// TensorRT it ships.
    pub tensorrt: TrtSpec,
    /// The compute capability the GPU reports under this release's driver
    /// (Thor: 10.1 with CUDA 12.x, 11.0 with CUDA 13).
    pub sm: Sm,
    /// Where these numbers come from.
    pub source: &'static Source,
}

/// A device tether supports: the static facts `tether doctor` prints and
/// [`select_engine`](crate::select_engine) relies on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TargetDescriptor {
    /// Stable identifier (`jetson-agx-orin`).
    pub id: &'static str,
    /// Human name.
    pub name: &'static str,
    /// Family.
    pub platform: Platform,
    /// CPU architecture of the host the GPU sits in.
    pub arch: CpuArch,
    /// Compute capabilities the family's GPUs report.
    pub sms: &'static [Sm],
    /// Integrated (shared DRAM) or discrete GPU memory.
    pub memory: MemoryModel,
    /// Deep Learning Accelerator cores TensorRT can target (`setDLACore`).
    pub dla_cores: u8,
    /// Whether TensorRT hardware-compatible plans (`kAMPERE_PLUS`,
    /// `kSAME_COMPUTE_CAPABILITY`) are supported here: only on discrete
    /// Ampere-or-newer GPUs, "not supported on NVIDIA DRIVE OS or JetPack"
    /// ([`sources::TRT_HARDWARE_COMPAT`]).
    pub hardware_compatible_plans: bool,
    /// Software releases and what they ship, oldest first.
    pub releases: &'static [SoftwareRelease],
    /// Facts worth knowing that do not fit a field.
    pub notes: &'static [&'static str],
    /// Where the facts come from.
    pub sources: &'static [&'static Source],
}

impl TargetDescriptor {
    /// What plans this target can run, in one sentence (for `tether doctor`).
    pub fn plan_summary(&self) -> &'static str {
        if self.hardware_compatible_plans {
            "TensorRT plans built for its SM with the installed TensorRT version; hardware-compatible (Ampere+) plans; version-compatible plans (built with TensorRT >= 8.6, not newer than the library); tract-cuda and tract CPU engines"
        } else {
            "TensorRT plans built for its SM with the installed TensorRT version (hardware-compatible plans are not supported on JetPack/DRIVE OS); version-compatible plans (built with TensorRT >= 8.6, not newer than the library); tract-cuda and tract CPU engines"
        }
    }

    /// The [`DeviceFacts`] a device of this target with `release` installed
    /// presents to [`select_engine`](crate::select_engine): "would this
    /// bundle run on an Orin with JetPack 6.2?" without the device.
    ///
    /// `tensorrt` is `None` when the release documents only a TensorRT major.
    pub fn facts(&self, release: &SoftwareRelease) -> DeviceFacts {
        DeviceFacts {
            arch: self.arch,
            gpu: Some(GpuFacts {
                sm: release.sm,
                integrated: self.memory == MemoryModel::Integrated,
            }),
            // JetPack and DRIVE OS install the full library (libnvinfer).
            tensorrt: match release.tensorrt {
                TrtSpec::Exact(v) => Some(TrtLibrary::full(v)),
                TrtSpec::Major(_) => None,
            },
            cuda_driver: release.cuda.map(|c| c.0),
        }
    }
}

/// Data-center x86_64 GPUs: Ampere (A100 8.0, A10/A40 8.6), Ada (L4/L40
/// 8.9), Hopper (H100/H200 9.0), Blackwell (B200 10.0, RTX PRO 6000 12.0).
pub static DATACENTER_X86_64: TargetDescriptor = TargetDescriptor {
    id: "datacenter-x86_64",
    name: "Data-center GPU on x86_64 (Ampere, Ada, Hopper, Blackwell)",
    platform: Platform::DataCenter,
    arch: CpuArch::X86_64,
    sms: &[
        Sm::new(8, 0),
        Sm::new(8, 6),
        Sm::new(8, 9),
        Sm::new(9, 0),
        Sm::new(10, 0),
        Sm::new(12, 0),
    ],
    memory: MemoryModel::Discrete,
    dla_cores: 0,
    hardware_compatible_plans: true,
    releases: &[],
    notes: &[
        "No fixed software release: the installed driver and TensorRT decide (TensorRT 10.x or 11.x; the gpu-host has driver 580 / CUDA 13.0 and can use the TensorRT 11.4 lean runtime wheel).",
        "Python wheels (tensorrt-cu13-libs, tensorrt-lean-cu13-libs, tensorrt-dispatch-cu13-libs) put TensorRT under site-packages/tensorrt_libs, tensorrt_lean_libs, tensorrt_dispatch_libs; tether searches those folders (tether_targets::libs).",
        "Other compute capabilities exist in this class (10.3 B300, 12.1 GB10); they are not in this descriptor's list and are reported as such.",
    ],
    sources: &[
        &sources::CUDA_GPUS,
        &sources::GPU_HOST_NOTES,
        &sources::TRT_HARDWARE_COMPAT,
    ],
};

/// Jetson AGX Orin (T234, Ampere iGPU sm_87, 2 DLA cores).
pub static JETSON_AGX_ORIN: TargetDescriptor = TargetDescriptor {
    id: "jetson-agx-orin",
    name: "NVIDIA Jetson AGX Orin",
    platform: Platform::Jetson,
    arch: CpuArch::Aarch64,
    sms: &[Sm::new(8, 7)],
    memory: MemoryModel::Integrated,
    dla_cores: 2,
    hardware_compatible_plans: false,
    releases: &[
        SoftwareRelease {
            name: "JetPack 6.1",
            cuda: Some(CudaVersion::new(12, 6)),
            tensorrt: TrtSpec::Exact(TrtVersion::new(10, 3, 0)),
            sm: Sm::new(8, 7),
            source: &sources::JETPACK6_RELEASE_NOTES,
        },
        SoftwareRelease {
            name: "JetPack 6.2",
            cuda: Some(CudaVersion::new(12, 6)),
            tensorrt: TrtSpec::Exact(TrtVersion::new(10, 3, 0)),
            sm: Sm::new(8, 7),
            source: &sources::JETPACK6_RELEASE_NOTES,
        },
        SoftwareRelease {
            name: "JetPack 7.2",
            cuda: Some(CudaVersion::new(13, 2)),
            tensorrt: TrtSpec::Exact(TrtVersion::new(10, 16, 2)),
            sm: Sm::new(8, 7),
            source: &sources::JETPACK72_COMPONENTS,
        },
    ],
    notes: &[
        "JetPack 6 puts the L4T user-space driver (libcuda.so.1) in /usr/lib/aarch64-linux-gnu/nvidia (TARGET_USERSPACE_LIB_DIR_PATH in /etc/nv_tegra_release); JetPack 5 used .../tegra.",
        "JetPack 7.2 (L4T 39.2) brings Orin onto the Ubuntu 24.04 / CUDA 13 stack but keeps the nvgpu driver; CUDA libraries then follow the SBSA layout (targets/sbsa-linux).",
        "JetPack's CUDA may lack runtime PTX compilation: kernels must carry SASS for sm_87.",
        "DLA: usable through JetPack 6's TensorRT 10.3; TensorRT 10.7 was the last 10.x release with DLA (so not JetPack 7.2's 10.16); TensorRT 11.4.1 supports DLA on AGX Orin with JetPack 7.2.2 or later.",
        "Shared DRAM: deserializing an engine and the CPU pipeline draw from the same memory as the GPU.",
    ],
    sources: &[
        &sources::CUDA_GPUS,
        &sources::JETPACK6_RELEASE_NOTES,
        &sources::JETPACK72_COMPONENTS,
        &sources::NV_TEGRA_RELEASE_FORMAT,
        &sources::DLA,
        &sources::TRT_HARDWARE_COMPAT,
    ],
};

/// Jetson AGX Thor (T5000/T4000, Blackwell iGPU, sm_110 under CUDA 13).
pub static JETSON_AGX_THOR: TargetDescriptor = TargetDescriptor {
    id: "jetson-agx-thor",
    name: "NVIDIA Jetson AGX Thor",
    platform: Platform::Jetson,
    arch: CpuArch::Aarch64,
    sms: &[Sm::new(11, 0)],
    memory: MemoryModel::Integrated,
    dla_cores: 0,
    hardware_compatible_plans: false,
    releases: &[
        SoftwareRelease {
            name: "JetPack 7.0",
            cuda: Some(CudaVersion::new(13, 0)),
            tensorrt: TrtSpec::Exact(TrtVersion::new(10, 13, 3)),
            sm: Sm::new(11, 0),
            source: &sources::JETPACK70_ARCHIVE,
        },
        SoftwareRelease {
            name: "JetPack 7.1",
            cuda: Some(CudaVersion::new(13, 0)),
            tensorrt: TrtSpec::Exact(TrtVersion::new(10, 13, 3)),
            sm: Sm::new(11, 0),
            source: &sources::JETPACK71_ARCHIVE,
        },
        SoftwareRelease {
            name: "JetPack 7.2",
            cuda: Some(CudaVersion::new(13, 2)),
            tensorrt: TrtSpec::Exact(TrtVersion::new(10, 16, 2)),
            sm: Sm::new(11, 0),
            source: &sources::JETPACK72_COMPONENTS,
        },
    ],
    notes: &[
        "JetPack 7 aligns Jetson with SBSA: one CUDA 13 for all Arm targets; CUDA libraries under /usr/local/cuda/targets/sbsa-linux/lib.",
        "JetPack 7.2 (L4T 39.2) moved libcuda.so.1 to /opt/nvidia/l4t-gpu-libs/openrm (OpenRM driver); JetPack 7.0/7.1 had it in /usr/lib/aarch64-linux-gnu.",
        "Compute capability 11.0 under CUDA 13 (the same GPU was sm_101 under CUDA 12.x): kernels must carry SASS for sm_110.",
        "No DLA on Thor.",
    ],
    sources: &[
        &sources::CUDA_GPUS,
        &sources::CUDA13_THOR_RENAME,
        &sources::JETPACK70_ARCHIVE,
        &sources::JETPACK71_ARCHIVE,
        &sources::JETPACK72_COMPONENTS,
        &sources::JETPACK72_OPENRM_LIBCUDA,
        &sources::DLA,
    ],
};

/// DRIVE AGX Orin (Orin SoC, sm_87, 2 DLA cores) on DRIVE OS.
pub static DRIVE_AGX_ORIN: TargetDescriptor = TargetDescriptor {
    id: "drive-agx-orin",
    name: "NVIDIA DRIVE AGX Orin",
    platform: Platform::Drive,
    arch: CpuArch::Aarch64,
    sms: &[Sm::new(8, 7)],
    memory: MemoryModel::Integrated,
    dla_cores: 2,
    hardware_compatible_plans: false,
    releases: &[
        SoftwareRelease {
            name: "DRIVE OS 6.0.9.1",
            cuda: None,
            tensorrt: TrtSpec::Exact(TrtVersion::new(8, 6, 12)),
            sm: Sm::new(8, 7),
            source: &sources::DRIVE_OS_6091_TRT,
        },
        SoftwareRelease {
            name: "DriveOS 7.0 (Orin)",
            cuda: None,
            tensorrt: TrtSpec::Major(10),
            sm: Sm::new(8, 7),
            source: &sources::DRIVE_TRT11_MIGRATION,
        },
    ],
    notes: &[
        "The libcuda directories are not verified on a DRIVE OS target; the probe asks the dynamic loader (ld.so.cache) first, which DRIVE OS configures.",
        "DRIVE OS does not ship /etc/nv_tegra_release; the probe tells DRIVE from Jetson by its absence and by the device-tree model.",
        "TensorRT 11 is not planned for DRIVE Orin: DriveOS 7.0/7.3 stay on a TensorRT 10.x branch.",
    ],
    sources: &[
        &sources::CUDA_GPUS,
        &sources::DRIVE_OS_6091_TRT,
        &sources::DRIVE_TRT11_MIGRATION,
        &sources::DLA,
        &sources::TRT_HARDWARE_COMPAT,
    ],
};

/// DRIVE AGX Thor on DriveOS 7.
pub static DRIVE_AGX_THOR: TargetDescriptor = TargetDescriptor {
    id: "drive-agx-thor",
    name: "NVIDIA DRIVE AGX Thor",
    platform: Platform::Drive,
    arch: CpuArch::Aarch64,
    sms: &[Sm::new(10, 1), Sm::new(11, 0)],
    memory: MemoryModel::Integrated,
    dla_cores: 0,
    hardware_compatible_plans: false,
    releases: &[
        SoftwareRelease {
            name: "DRIVE OS 7.0.3",
            cuda: Some(CudaVersion::new(12, 8)),
            tensorrt: TrtSpec::Exact(TrtVersion::new(10, 10, 10)),
            sm: Sm::new(10, 1),
            source: &sources::DRIVE_OS_703_TRT,
        },
        SoftwareRelease {
            name: "DriveOS 7.2.6",
            cuda: None,
            tensorrt: TrtSpec::Exact(TrtVersion::new(11, 0, 1)),
            sm: Sm::new(11, 0),
            source: &sources::DRIVE_TRT11_MIGRATION,
        },
    ],
    notes: &[
        "DRIVE OS 7.0.x runs CUDA 12.8, under which Thor reports compute capability 10.1; CUDA 13 drivers report 11.0 for the same GPU. A plan records the number it was built under.",
        "The libcuda directories are not verified on a DRIVE OS target; the probe asks the dynamic loader first.",
        "No DLA on Thor; TensorRT DLA is not supported on DriveOS.",
    ],
    sources: &[
        &sources::DRIVE_OS_703_TRT,
        &sources::DRIVE_TRT11_MIGRATION,
        &sources::CUDA13_THOR_RENAME,
        &sources::DLA,
    ],
};

/// Every descriptor, in the order `identify` tries them.
pub static TARGETS: &[&TargetDescriptor] = &[
    &JETSON_AGX_ORIN,
    &JETSON_AGX_THOR,
    &DRIVE_AGX_ORIN,
    &DRIVE_AGX_THOR,
    &DATACENTER_X86_64,
];

/// The descriptor with this [`TargetDescriptor::id`].
pub fn by_id(id: &str) -> Option<&'static TargetDescriptor> {
    TARGETS.iter().copied().find(|t| t.id == id)
}

/// Which descriptor a probed device is, from facts that need no NVIDIA tool.
///
/// * `sm`: the GPU's compute capability (`None`: no GPU found).
/// * `arch`: the host CPU architecture.
/// * `jetson_l4t`: whether `/etc/nv_tegra_release` exists (JetPack).
/// * `model`: `/proc/device-tree/model`, if readable.
///
/// Rules: an sm 8.7 or Thor GPU on aarch64 is Jetson when L4T is present or
/// the model says "Jetson", DRIVE when the model says "DRIVE" or no L4T
/// release file exists; a discrete-class SM on x86_64 is the data-center
/// descriptor. Returns `None` for anything else (e.g. GH200 on aarch64).
pub fn identify(
    sm: Option<Sm>,
    arch: CpuArch,
    jetson_l4t: bool,
    model: Option<&str>,
) -> Option<&'static TargetDescriptor> {
    let sm = sm?;
    let says = |word: &str| model.is_some_and(|m| m.contains(word));
    let jetson = !says("DRIVE") && (jetson_l4t || says("Jetson"));
    match arch {
        CpuArch::Aarch64 if sm == Sm::new(8, 7) => Some(if jetson {
            &JETSON_AGX_ORIN
        } else {
            &DRIVE_AGX_ORIN
        }),
        CpuArch::Aarch64 if sm.is_thor() => Some(if jetson {
            &JETSON_AGX_THOR
        } else {
            &DRIVE_AGX_THOR
        }),
        CpuArch::X86_64 if DATACENTER_X86_64.sms.contains(&sm) => Some(&DATACENTER_X86_64),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_found() {
        for t in TARGETS {
            assert_eq!(by_id(t.id).map(|d| d.id), Some(t.id));
            assert!(!t.sources.is_empty(), "{} cites nothing", t.id);
            for r in t.releases {
                assert!(t.sms.contains(&r.sm), "{} {}", t.id, r.name);
            }
        }
        assert!(by_id("nope").is_none());
    }

    #[test]
    fn datacenter_sms_are_the_six_asked_for() {
        let n: Vec<u16> = DATACENTER_X86_64.sms.iter().map(|s| s.number()).collect();
        assert_eq!(n, [80, 86, 89, 90, 100, 120]);
    }

    #[test]
    fn identify_rules() {
        let orin = Some(Sm::new(8, 7));
        let thor = Some(Sm::new(11, 0));
        let a = CpuArch::Aarch64;
        let id = |sm, arch, l4t, model| identify(sm, arch, l4t, model).map(|t| t.id);
        assert_eq!(
            id(orin, a, true, Some("NVIDIA Jetson AGX Orin Developer Kit")),
            Some("jetson-agx-orin")
        );
        assert_eq!(id(orin, a, false, None), Some("drive-agx-orin"));
        assert_eq!(
            id(thor, a, true, Some("NVIDIA Jetson AGX Thor Developer Kit")),
            Some("jetson-agx-thor")
        );
        assert_eq!(
            id(Some(Sm::new(10, 1)), a, false, None),
            Some("drive-agx-thor")
        );
        assert_eq!(
            id(Some(Sm::new(9, 0)), CpuArch::X86_64, false, None),
            Some("datacenter-x86_64")
        );
        assert_eq!(id(Some(Sm::new(9, 0)), a, false, None), None);
        assert_eq!(id(None, CpuArch::X86_64, false, None), None);
    }
}
