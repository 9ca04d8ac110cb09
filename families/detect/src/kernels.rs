//! The detection kernels (`kernels/detect.cu`): embedded images and one `#[repr(C)]`
//! parameter struct per kernel, mirrored field for field from the CUDA source.

use tether_runtime::cuda::{DevicePtr, KernelImage, ModuleSource};

/// The embedded kernel images (rebuilt by `runtime/kernels/build-kernels.sh
/// families/detect/kernels/detect.cu`, digests in `kernels/bin/SHA256SUMS`, architectures
/// checked by `runtime/kernels/list-archs.sh families/detect/kernels/bin` in CI).
pub static KERNEL_IMAGES: &[KernelImage] = &[
    KernelImage {
        name: "detect.cu13.fatbin",
        cuda_major: 13,
        sm: None,
        bytes: include_bytes!("../kernels/bin/detect.cu13.fatbin"),
    },
    KernelImage {
        name: "detect.cu12.sm_87.cubin",
        cuda_major: 12,
        sm: Some(87),
        bytes: include_bytes!("../kernels/bin/detect.cu12.sm_87.cubin"),
    },
    KernelImage {
        name: "detect.cu12.sm_90.cubin",
        cuda_major: 12,
        sm: Some(90),
        bytes: include_bytes!("../kernels/bin/detect.cu12.sm_90.cubin"),
    },
    KernelImage {
        name: "detect.cu12.sm_100.cubin",
        cuda_major: 12,
        sm: Some(100),
        bytes: include_bytes!("../kernels/bin/detect.cu12.sm_100.cubin"),
    },
];

/// The kernels' CUDA C source (for the opt-in NVRTC fallback).
pub const KERNEL_SOURCE: &str = include_str!("../kernels/detect.cu");

/// Where the detection kernels come from.
pub fn module_source() -> ModuleSource {
    ModuleSource {
        images: KERNEL_IMAGES,
        source: Some(KERNEL_SOURCE),
        allow_nvrtc: false,
    }
}

pub use crate::stages::{SORT_TILE, padded_anchors};
/// Threads of `sort_tiles` / `sort_merge_shared` (`TILE_THREADS`).
pub const SORT_THREADS: u32 = 1024;
/// Threads of `nms_greedy` (`NMS_CHUNK`).
pub const NMS_THREADS: u32 = 256;

/// `struct LetterboxParams` of `letterbox_bilinear_nchw`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct LetterboxParams {
    /// Source frame, u8 HWC.
    pub frame: DevicePtr,
    /// Network input, f32 NCHW.
    pub tensor: DevicePtr,
    /// Source width in pixels.
    pub src_w: i32,
    /// Source height in pixels.
    pub src_h: i32,
    /// Bytes per source row.
    pub pitch: i32,
    /// Bytes per source pixel.
    pub ch: i32,
    /// Byte offset of R, G, B within a pixel.
    pub off: [i32; 3],
    /// Network input width.
    pub in_w: i32,
    /// Network input height.
    pub in_h: i32,
    /// Resized width inside the input.
    pub new_w: i32,
    /// Resized height.
    pub new_h: i32,
    /// Left padding.
    pub left: i32,
    /// Top padding.
    pub top: i32,
    /// `src_w / new_w` (f32 division).
    pub sx: f32,
    /// `src_h / new_h`.
    pub sy: f32,
    /// Per-channel mean.
    pub mean: [f32; 3],
    /// Per-channel divisor.
    pub std: [f32; 3],
    /// Pad value before normalisation.
    pub pad: f32,
}

/// `struct DecodeParams` of `decode_keys`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct DecodeParams {
    /// Network output f32 `[1, 4 + C, N]`.
    pub raw: DevicePtr,
    /// f32x4 `[N]` box corners per anchor.
    pub boxes: DevicePtr,
    /// u32 `[N]` class per anchor.
    pub cls: DevicePtr,
    /// f32 `[N]` score per anchor.
    pub scores: DevicePtr,
    /// u64 `[P]` sort keys.
    pub keys: DevicePtr,
    /// The 16-byte counter block.
    pub state: DevicePtr,
    /// `C`.
    pub num_classes: i32,
    /// `N`.
    pub num_anchors: i32,
    /// `P` ([`padded_anchors`]).
    pub padded: i32,
    /// Score threshold (strict).
    pub score_thr: f32,
}

/// `struct SortParams` of the sort kernels.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SortParams {
    /// u64 `[P]` keys.
    pub keys: DevicePtr,
    /// The `PostState` counters (the candidate count bounds the sorted prefix).
    pub state: DevicePtr,
    /// `P`.
    pub padded: u32,
    /// Bitonic stage.
    pub k: u32,
    /// Bitonic step (global merge).
    pub j: u32,
    /// Padding.
    pub pad: u32,
}

/// `struct NmsParams` of `nms_greedy`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct NmsParams {
    /// Sorted keys.
    pub keys: DevicePtr,
    /// Boxes per anchor.
    pub boxes: DevicePtr,
    /// Classes per anchor.
    pub cls: DevicePtr,
    /// Scores per anchor.
    pub scores: DevicePtr,
    /// Counters.
    pub state: DevicePtr,
    /// The result record.
    pub out: DevicePtr,
    /// NMS IoU threshold (strict).
    pub iou_thr: f32,
    /// Maximum detections.
    pub max_det: i32,
    /// Letterbox scale (network pixels per source pixel).
    pub ratio: f32,
    /// Left padding.
    pub left: f32,
    /// Top padding.
    pub top: f32,
    /// Source width.
    pub src_w: f32,
    /// Source height.
    pub src_h: f32,
    /// Padding.
    pub pad: i32,
}

/// `struct AddOneParams` of `add_one_u32` (a test kernel of the image).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AddOneParams {
    /// u32 `[n]`.
    pub p: DevicePtr,
    /// Element count.
    pub n: i32,
    /// Padding.
    pub pad: i32,
}

const _: () =
    assert!(std::mem::size_of::<LetterboxParams>() == 16 + 4 * 4 + 12 + 6 * 4 + 8 + 24 + 4);
const _: () = assert!(std::mem::size_of::<DecodeParams>() == 48 + 16);
const _: () = assert!(std::mem::size_of::<SortParams>() == 32);
const _: () = assert!(std::mem::size_of::<NmsParams>() == 48 + 32);
