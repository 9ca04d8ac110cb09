//! Where the facts in this crate come from.
//!
//! Every descriptor, table row and selection rule names one or more of these
//! [`Source`]s. NVIDIA's own pages come first; where NVIDIA publishes no
//! table (the exact L4T revision of each JetPack, where JetPack 7.2 puts
//! `libcuda`), the best public third-party record is cited instead and says
//! so in its title. Retrieved 2026-11-30.

/// A citation: a title that says what the page states, and its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Source {
    /// What the page is and what this crate takes from it.
    pub title: &'static str,
    /// Where it is.
    pub url: &'static str,
}

/// NVIDIA's compute-capability table: 8.0 A100/A30, 8.6 A10/A40/RTX 30,
/// 8.7 Jetson AGX Orin / Orin NX / Orin Nano, 8.9 L4/L40/RTX 40, 9.0
/// H100/H200/GH200, 10.0 B200/GB200, 11.0 Jetson T5000/T4000 (Thor), 12.0
/// RTX PRO 6000 Blackwell / RTX 50.
pub const CUDA_GPUS: Source = Source {
    title: "NVIDIA, CUDA GPU Compute Capability (table of devices per compute capability)",
    url: "https://developer.nvidia.com/cuda-gpus",
};

/// CUDA 13.0 renamed Thor's compute capability from 10.1 (`sm_101`) to 11.0
/// (`sm_110`); CUDA 12.9 and older still call it `sm_101`.
pub const CUDA13_THOR_RENAME: Source = Source {
    title: "NVIDIA cuRANDDx release notes 0.2.1: \"Support for Thor SM renaming from sm_101 to sm_110 starting from CUDA 13.0\"",
    url: "https://docs.nvidia.com/cuda/curanddx/release_notes.html",
};

/// JetPack 6.x on Jetson Orin: CUDA 12.6, TensorRT 10.3, cuDNN 9.3.
pub const JETPACK6_RELEASE_NOTES: Source = Source {
    title: "NVIDIA JetPack 6.2.1 Release Notes (JetPack 6.1/6.2: CUDA 12.6, TensorRT 10.3, cuDNN 9.3)",
    url: "https://docs.nvidia.com/jetson/jetpack/release-notes/index.html",
};

/// JetPack 6.0 Developer Preview ships Jetson Linux 36.2 (Ubuntu 22.04).
pub const JETPACK60DP_INTRO: Source = Source {
    title: "NVIDIA JetPack 6.0 DP documentation, Introduction (\"JetPack 6.0 Developer Preview includes NVIDIA Jetson Linux 36.2\")",
    url: "https://docs.nvidia.com/jetson/jetpack/6.0DP/introduction/index.html",
};

/// JetPack 7.0 (Jetson Linux 38.2 / 38.2.1), Jetson AGX Thor only.
pub const JETPACK70_ARCHIVE: Source = Source {
    title: "NVIDIA JetPack 7.0 with Jetson Linux 38.2/38.2.1 - downloads and notes (Jetson AGX Thor; CUDA 13.0, TensorRT 10.13)",
    url: "https://developer.nvidia.com/embedded/jetpack/downloads/archive-7.0",
};

/// JetPack 7.1 (Jetson Linux 38.4): CUDA 13.0.0, cuDNN 9.12.0, TensorRT
/// 10.13.3.9; Jetson software aligned with SBSA.
pub const JETPACK71_ARCHIVE: Source = Source {
    title: "NVIDIA JetPack 7.1 with Jetson Linux 38.4 - downloads and notes (CUDA 13.0.0, cuDNN 9.12.0, TensorRT 10.13.3.9; SBSA-aligned)",
    url: "https://developer.nvidia.com/embedded/jetpack/downloads/archive-7.1",
};

/// JetPack 7.2 (L4T 39.2): Orin and Thor, CUDA 13.2, TensorRT 10.16.
pub const JETPACK72_COMPONENTS: Source = Source {
    title: "Third-party record (OE4T meta-tegra PR #2224, confirmed on a device by roboflow/inference PR #2478): JetPack 7.2 / L4T R39.2.0 supports Orin and Thor; CUDA 13.2, cuDNN 9.20, TensorRT 10.16.2",
    url: "https://github.com/OE4T/meta-tegra/pull/2224",
};

/// JetPack 7.2 on Thor: `libcuda` lives in `/opt/nvidia/l4t-gpu-libs/openrm`.
pub const JETPACK72_OPENRM_LIBCUDA: Source = Source {
    title: "Third-party record (NVIDIA-AI-Blueprints video-search-and-summarization PR #1478): \"JetPack 7.2 / R39 (Thor) injects libcuda under /opt/nvidia/l4t-gpu-libs/openrm\"; Orin keeps the nvgpu stack (anduril/jetpack-nixos PR #510)",
    url: "https://github.com/NVIDIA-AI-Blueprints/video-search-and-summarization/pull/1478",
};

/// The L4T revision to JetPack release table.
pub const L4T_JETPACK_TABLE: Source = Source {
    title: "Third-party table: rbonghi/jetson_stats jtop/core/jetson_variables.py NVIDIA_JETPACK (commit f41d5ca, 2026-07-30), cross-checked against NVIDIA's JetPack archive",
    url: "https://github.com/rbonghi/jetson_stats/blob/f41d5cadfeafc3516ff8cb7ddd5712cfa9a78611/jtop/core/jetson_variables.py",
};

/// NVIDIA's list of JetPack releases and their Jetson Linux versions.
pub const JETPACK_ARCHIVE: Source = Source {
    title: "NVIDIA JetPack archive (JetPack release to Jetson Linux release)",
    url: "https://developer.nvidia.com/embedded/jetpack-archive",
};

/// `/etc/nv_tegra_release` format as shipped by JetPack 6 and 7.
pub const NV_TEGRA_RELEASE_FORMAT: Source = Source {
    title: "/etc/nv_tegra_release as written by the nvidia-l4t-core package, e.g. \"# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: ...\" then TARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia (parsed the same way by jetson_stats get_nvidia_l4t())",
    url: "https://github.com/rbonghi/jetson_stats/blob/f41d5cadfeafc3516ff8cb7ddd5712cfa9a78611/jtop/core/jetson_variables.py",
};

/// nvpmodel configuration and status file formats.
pub const NVPMODEL_FORMAT: Source = Source {
    title: "NVIDIA Jetson skills, jetson-customize-nvpmodel (nvpmodel.conf: '< POWER_MODEL ID=<int> NAME=<string> >', mandatory '< PM_CONFIG DEFAULT=<id> >'); the active mode is saved by nvpmodel in /var/lib/nvpmodel/status as 'pmode:NNNN'",
    url: "https://github.com/NVIDIA/skills/blob/main/skills/jetson-customize-nvpmodel/SKILL.md",
};

/// DRIVE OS 7.0.3: TensorRT 10.10.10, CUDA 12.8, Thor = SM 10.1, no DLA,
/// and the standard-runtime rule that plan and library versions must match.
pub const DRIVE_OS_703_TRT: Source = Source {
    title: "NVIDIA TensorRT 10.10.10 Release Notes for DRIVE OS 7.0.3, Release Properties (CUDA 12.8; SM 10.1 NVIDIA Thor, DLA: No; \"In the standard runtime, version numbers must match (in major, minor, patch, and build)\")",
    url: "https://developer.nvidia.com/docs/drive/drive-os/7.0.3/public/drive-os-tensorrt-release-notes/release-properties.html",
};

/// DriveOS 7.2.5+ on DRIVE Thor: TensorRT 11.0.1; DRIVE Orin stays on 10.x.
pub const DRIVE_TRT11_MIGRATION: Source = Source {
    title: "NVIDIA, Migrating TensorRT from 10.x to 11.x on NVIDIA DriveOS (DRIVE Thor DriveOS 7.2.6+: TensorRT 11.0.1; DRIVE Orin DriveOS 7.0/7.3: TensorRT 10.x)",
    url: "https://docs.nvidia.com/deeplearning/tensorrt/11.3.0/api/migration/tensorrt-10x-to-11x-driveos.html",
};

/// DRIVE OS 6.0.9.1 on DRIVE AGX Orin: TensorRT 8.6.12.
pub const DRIVE_OS_6091_TRT: Source = Source {
    title: "NVIDIA TensorRT 8.6.12 Release Notes for DRIVE OS 6.0.9.1",
    url: "https://developer.nvidia.com/docs/drive/drive-os/6.0.9.1/public/drive-os-tensorrt/release-notes/index.html",
};

/// Orin has up to two second-generation DLAs; Thor has none; TensorRT 11.4.1
/// supports DLA on AGX Orin with JetPack 7.2.2+ only.
pub const DLA: Source = Source {
    title: "NVIDIA Deep-Learning-Accelerator-SW (\"Orin SoCs feature up to two second-generation DLAs\") and TensorRT 11.4.1 Working with DLA (Thor has no DLA; DriveOS not supported)",
    url: "https://docs.nvidia.com/deeplearning/tensorrt/11.4.1/inference-library/work-with-dla.html",
};

/// TensorRT version compatibility (`kVERSION_COMPATIBLE`): plans built with
/// 8.6 or later run on later runtimes; embedded lean runtime needs
/// `setEngineHostCodeAllowed(true)`.
pub const TRT_VERSION_COMPAT: Source = Source {
    title: "NVIDIA TensorRT Developer Guide, Version Compatibility (\"supported from version 8.6; the plan must be built with a version at least 8.6 or higher, and the runtime must be 8.6 or higher\"; trusted plans need setEngineHostCodeAllowed(true))",
    url: "https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/version-compatibility.html",
};

/// Which version-compatible plans a runtime of another major accepts.
pub const TRT_SUPPORT_MATRIX_1141: Source = Source {
    title: "NVIDIA TensorRT 11.4.1 Support Matrix, Engine Portability (\"TensorRT 10 version-compatible engines can run with a TensorRT 11 runtime, and TensorRT 8 version-compatible engines can run with a TensorRT 10 runtime. No other combination across major versions is supported\")",
    url: "https://docs.nvidia.com/deeplearning/tensorrt/11.4.1/getting-started/support-matrix.html",
};

/// Hardware compatibility (`HardwareCompatibilityLevel`).
pub const TRT_HARDWARE_COMPAT: Source = Source {
    title: "NVIDIA TensorRT Developer Guide, Hardware Compatibility (kAMPERE_PLUS: Ampere and newer GPUs; \"not supported on NVIDIA DRIVE OS or JetPack\") and NvInferRuntime.h HardwareCompatibilityLevel (kNONE=0, kAMPERE_PLUS=1, kSAME_COMPUTE_CAPABILITY=2)",
    url: "https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/advanced.html#hardware-compatibility",
};

/// The CUDA driver API (`cuda.h`): entry points, attribute numbers, error
/// codes.
pub const CUDA_DRIVER_API: Source = Source {
    title: "NVIDIA CUDA Driver API reference (cuInit, cuDriverGetVersion, cuDeviceGetAttribute: CU_DEVICE_ATTRIBUTE_INTEGRATED = 18, COMPUTE_CAPABILITY_MAJOR = 75, MINOR = 76; CUresult codes)",
    url: "https://docs.nvidia.com/cuda/cuda-driver-api/index.html",
};

/// The data-center GPU host this project measures on.
pub const GPU_HOST_NOTES: Source = Source {
    title: "tether shared/reference/gpu-host.md (H200, driver 580, CUDA 13.0; libcuda.so.1 via the loader, CUDA libraries in /usr/local/cuda/targets/x86_64-linux/lib)",
    url: "file:shared/reference/gpu-host.md",
};

/// Version compatibility within and across majors, and the runtimes that run
/// version-compatible plans.
pub const TRT_ENGINE_COMPAT_111: Source = Source {
    title: "NVIDIA TensorRT 11.1 Developer Guide, Engine Compatibility (\"By default, TensorRT engines are compatible only with the version of TensorRT used to build them\"; \"engines built with newer versions (TensorRT 11) do not work with older runtimes (TensorRT 10)\"; \"engines built with version compatibility enabled using TensorRT 11.0 will be compatible with TensorRT 11.1 and later 11.x versions\"; the version-compatible plan embeds a lean runtime, trusted with setEngineHostCodeAllowed(true))",
    url: "https://docs.nvidia.com/deeplearning/tensorrt/11.1.0/inference-library/engine-compatibility.html",
};

/// A plan without its lean runtime needs a lean runtime of the very version
/// that built it.
pub const TRT_LOAD_RUNTIME: Source = Source {
    title: "NVIDIA TensorRT NvInferRuntime.h, IRuntime::loadRuntime (\"The runtime can then be used to execute a plan file built with BuilderFlag::kVERSION_COMPATIBLE and BuilderFlag::kEXCLUDE_LEAN_RUNTIME both set and built with the same version of TensorRT as the loaded runtime library\"); NvInfer.h BuilderFlag::kEXCLUDE_LEAN_RUNTIME (ignored unless kVERSION_COMPATIBLE is set)",
    url: "https://github.com/NVIDIA/TensorRT/blob/a892d22267d9cd2dedc1a0893e6892ac901f6d3d/include/NvInferRuntime.h",
};

/// What the lean and dispatch runtimes deserialize (trtexec's own help).
pub const TRTEXEC_RUNTIMES: Source = Source {
    title: "NVIDIA trtexec options (samples/common/sampleOptions.cpp): --versionCompatible \"allows the engine to be used with newer versions of TensorRT on the same host OS, as well as TensorRT's dispatch and lean runtimes\"; --useRuntime: \"lean\" and \"dispatch\" require loading VC engine and do not support building an engine\"; --excludeLeanRuntime: \"the user must explicitly specify a valid lean runtime to use when loading the engine\"",
    url: "https://github.com/NVIDIA/TensorRT/blob/a892d22267d9cd2dedc1a0893e6892ac901f6d3d/samples/common/sampleOptions.cpp",
};

/// The build floors of the hardware-compatibility levels, and when
/// `kSAME_COMPUTE_CAPABILITY` appeared.
pub const TRT_HW_LEVELS_HEADER: Source = Source {
    title: "NVIDIA TensorRT NvInfer.h, HardwareCompatibilityLevel: kAMPERE_PLUS \"only supported for engines built on NVIDIA Ampere and later GPUs\"; kSAME_COMPUTE_CAPABILITY \"only supported for engines built on NVIDIA Turing and later GPUs\", first present in the TensorRT 10.9 OSS release (commit 8c6d69d)",
    url: "https://github.com/NVIDIA/TensorRT/commit/8c6d69ddec0b2feff12f55472dc5d55cb6861d53",
};

/// The TensorRT wheels on PyPI and the site-packages folders they install.
pub const TRT_PIP_WHEELS: Source = Source {
    title: "PyPI tensorrt-cu13-libs / tensorrt-lean-cu13-libs / tensorrt-dispatch-cu13-libs 11.4.0.106 (folders tensorrt_libs, tensorrt_lean_libs, tensorrt_dispatch_libs; libnvinfer_dispatch.so.11 exports createInferRuntime_INTERNAL, createLeanRuntime, createInferRefitter_INTERNAL and getInferLib*Version, and no createInferBuilder_INTERNAL: read from the wheel, 2026-12-01)",
    url: "https://pypi.org/project/tensorrt-dispatch-cu13-libs/11.4.0.106/",
};

/// Where the CUDA 12 and CUDA 13 library wheels put their libraries.
pub const CUDA_PIP_WHEELS: Source = Source {
    title: "PyPI nvidia-cuda-runtime 13.0.96 (CUDA 13 wheels install under site-packages/nvidia/cu13/{include,lib}; the CUDA 12 wheels use nvidia/<component>/lib, e.g. nvidia/cublas/lib; cuDNN wheels use nvidia/cudnn/lib): read from the wheel, 2026-12-01",
    url: "https://pypi.org/project/nvidia-cuda-runtime/13.0.96/",
};

/// `cudnnGetVersion` and its encoding.
pub const CUDNN_VERSION: Source = Source {
    title: "NVIDIA cuDNN API, cudnnGetVersion (returns CUDNN_VERSION; cudnn_version.h of cuDNN 9: CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL; cuDNN 8 used MAJOR * 1000 + MINOR * 100 + PATCHLEVEL); needs no GPU",
    url: "https://docs.nvidia.com/deeplearning/cudnn/backend/latest/api/cudnn-graph-library.html",
};

/// `cublasGetProperty` (no handle, no GPU needed).
pub const CUBLAS_GET_PROPERTY: Source = Source {
    title: "NVIDIA cuBLAS library, cublasGetProperty(libraryPropertyType type, int *value) with MAJOR_VERSION = 0, MINOR_VERSION = 1, PATCH_LEVEL = 2 (library_types.h); needs no handle",
    url: "https://docs.nvidia.com/cuda/cublas/index.html#cublasgetproperty",
};
