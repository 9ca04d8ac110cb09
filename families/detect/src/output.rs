//! The result record both post-processing flavours write: the CUDA kernel into device (or
//! mapped) memory, the host stage into a host buffer. One layout, one parser.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::MAX_DETECTIONS;
use crate::decode::{BoundingBox, Detection, Detections};

/// Value of [`DetectOutput::magic`] once a run wrote the record: a record that still holds
/// anything else was never written (a graph that did not run, a poisoned buffer).
pub const OUTPUT_MAGIC: u32 = 0x7e7d_e7ec;

/// One detection as the post-processing writes it (`#[repr(C)]` mirror of `GpuDetection`
/// in `kernels/detect.cu`): corners in source pixels, score, class.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct GpuDetection {
    /// Left, top, right, bottom in source pixels.
    pub x1: f32,
    /// Top.
    pub y1: f32,
    /// Right.
    pub x2: f32,
    /// Bottom.
    pub y2: f32,
    /// Class score.
    pub score: f32,
    /// Class index.
    pub class_id: u32,
}

/// The post-processing's result record (`#[repr(C)]` mirror of `DetectOutput` in
/// `kernels/detect.cu`): 16 header bytes and up to [`MAX_DETECTIONS`] detections.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct DetectOutput {
    /// Detections written (<= max_det).
    pub count: u32,
    /// Anchors above the score threshold (all finite).
    pub candidates: u32,
    /// Anchors dropped because a box coordinate or a score was NaN or infinite.
    pub nonfinite: u32,
    /// [`OUTPUT_MAGIC`] once written.
    pub magic: u32,
    /// The detections, best first.
    pub det: [GpuDetection; MAX_DETECTIONS],
}

/// Size of a [`DetectOutput`] record in bytes.
pub const OUTPUT_BYTES: usize = std::mem::size_of::<DetectOutput>();

const _: () = assert!(OUTPUT_BYTES == 16 + 24 * MAX_DETECTIONS);

/// Counters of one run, for logs, results and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PostStats {
    /// Anchors above the score threshold.
    pub candidates: usize,
    /// Anchors whose network outputs were not finite (never detections).
    pub nonfinite: usize,
    /// Boxes returned.
    pub kept: usize,
}

/// A result record that was not written by a run. `Copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the detection result record was not written (magic {magic:#x}, count {count})")]
pub struct NotWritten {
    /// The magic field seen.
    pub magic: u32,
    /// The count field seen.
    pub count: u32,
}

/// Read a result record into `out` (cleared first). No allocation.
///
/// # Errors
/// [`NotWritten`] when the record's magic or count is not one a run writes.
pub fn parse(bytes: &[u8], out: &mut Detections) -> Result<PostStats, NotWritten> {
    out.clear();
    let Ok((o, _)) = DetectOutput::ref_from_prefix(bytes) else {
        return Err(NotWritten { magic: 0, count: 0 });
    };
    if o.magic != OUTPUT_MAGIC || o.count as usize > MAX_DETECTIONS {
        return Err(NotWritten {
            magic: o.magic,
            count: o.count,
        });
    }
    for d in &o.det[..o.count as usize] {
        let _ = out.push(Detection {
            class_id: u16::try_from(d.class_id).unwrap_or(u16::MAX),
            score: d.score,
            bbox: BoundingBox {
                x1: d.x1,
                y1: d.y1,
                x2: d.x2,
                y2: d.y2,
            },
        });
    }
    Ok(PostStats {
        candidates: o.candidates as usize,
        nonfinite: o.nonfinite as usize,
        kept: out.len(),
    })
}

/// Compare two result records (the device session's replay-versus-eager check): same
/// counts, same classes, boxes and scores within `1e-4` absolute.
///
/// # Errors
/// The first difference.
pub fn compare(eager: &[u8], replay: &[u8]) -> Result<(), String> {
    let (Ok((a, _)), Ok((b, _))) = (
        DetectOutput::ref_from_prefix(eager),
        DetectOutput::ref_from_prefix(replay),
    ) else {
        return Err("not a detection record".into());
    };
    if b.magic != OUTPUT_MAGIC {
        return Err(format!(
            "replay did not write the record (magic {:#x})",
            b.magic
        ));
    }
    if (a.count, a.candidates, a.nonfinite) != (b.count, b.candidates, b.nonfinite) {
        return Err(format!(
            "{} vs {} detections, {} vs {} candidates, {} vs {} non-finite",
            a.count, b.count, a.candidates, b.candidates, a.nonfinite, b.nonfinite
        ));
    }
    let n = (a.count as usize).min(MAX_DETECTIONS);
    for (i, (x, y)) in a.det[..n].iter().zip(&b.det[..n]).enumerate() {
        let d = [
            x.x1 - y.x1,
            x.y1 - y.y1,
            x.x2 - y.x2,
            x.y2 - y.y2,
            x.score - y.score,
        ];
        if x.class_id != y.class_id || d.iter().any(|v| v.is_nan() || v.abs() > 1e-4) {
            return Err(format!("detection {i}: {x:?} vs {y:?}"));
        }
    }
    Ok(())
}
