//! Detection: image views over caller memory, results into caller arrays, the staging
//! buffer a camera driver writes frames into in place.

use std::ffi::{CString, c_char};

use tether_detect::{Detections, Detector, FrameSpec, ImageView, PixelFormat};
use tether_family::vision::MAX_IMAGE_SIDE;

use crate::error::{Failure, Result, non_null, tether_status};
use crate::model::{Family, c_string, tether_model, with_model, wrong_family};

/// Pixel layout of an image (`tether_image_view::format`): 8 bits per channel,
/// interleaved, rows top to bottom.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum tether_pixel_format {
    /// R, G, B (3 bytes per pixel).
    TETHER_PIXEL_RGB8 = 1,
    /// B, G, R (3 bytes per pixel; OpenCV and many camera drivers).
    TETHER_PIXEL_BGR8 = 2,
    /// R, G, B, alpha (4 bytes per pixel; detection ignores alpha).
    TETHER_PIXEL_RGBA8 = 3,
    /// Luminance (1 byte per pixel; replicated to R, G and B).
    TETHER_PIXEL_GRAY8 = 4,
}

/// A caller-owned 8-bit image: `height` rows of `width` pixels, rows `pitch` bytes apart.
/// The library reads it during the call only and keeps nothing.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tether_image_view {
    /// First byte of the top row. Readable for `pitch * (height - 1) + width * bpp` bytes
    /// (the last row may end at its last pixel).
    pub data: *const u8,
    /// Width in pixels, 1 to 32768.
    pub width: u32,
    /// Height in pixels, 1 to 32768.
    pub height: u32,
    /// Bytes from one row's start to the next's, at least `width * bpp`.
    pub pitch: usize,
    /// A `tether_pixel_format` value.
    pub format: u32,
}

/// One detected object. Boxes are in the source image's pixel coordinates (corners,
/// `x1 <= x2`, `y1 <= y2`, not clamped), as the CLI reports them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct tether_detection {
    /// Class index into the bundle's labels (`tether_detect_class_name`).
    pub class_id: u32,
    /// Class score in [0, 1].
    pub score: f32,
    /// Left edge.
    pub x1: f32,
    /// Top edge.
    pub y1: f32,
    /// Right edge.
    pub x2: f32,
    /// Bottom edge.
    pub y2: f32,
}

/// The detector's frame staging (`tether_detect_staging`): the buffer the prepared session
/// reads its next frame from, and the layout a producer writes it in.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tether_staging_buffer {
    /// First byte of the top row. Owned by the model; writable for `size` bytes until the
    /// next `tether_detect_prepare` or `tether_detect` with another geometry, or
    /// `tether_model_close`.
    pub data: *mut u8,
    /// Bytes: `pitch * height`.
    pub size: usize,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Bytes from one row's start to the next's (bytes past a row's pixels are ignored).
    pub pitch: usize,
    /// A `tether_pixel_format` value.
    pub format: u32,
}

/// The detection family's state behind a handle: the detector and its class names as C
/// strings (made once at open).
pub(crate) struct DetectModel {
    detector: Detector,
    names: Vec<CString>,
    /// The geometry the detector's session was last prepared for through this API (the
    /// detector keeps its own private); `None` after a failed preparation.
    spec: Option<FrameSpec>,
}

impl DetectModel {
    pub(crate) fn new(detector: Detector) -> Result<Self> {
        let names = detector.labels().iter().map(|s| c_string(s)).collect();
        Ok(DetectModel {
            detector,
            names,
            spec: None,
        })
    }

    /// The engine running the network.
    pub(crate) fn engine(&self) -> tether_runtime::EngineKind {
        self.detector.engine()
    }

    /// Prepare for `spec` (a no-op when it is the prepared one), keeping `self.spec` true.
    fn prepare(&mut self, spec: FrameSpec) -> Result<()> {
        if self.spec == Some(spec) {
            return Ok(());
        }
        self.spec = None;
        self.detector.prepare(spec)?;
        self.spec = Some(spec);
        Ok(())
    }
}

fn detect_model<'a>(m: &'a mut tether_model, call: &str) -> Result<&'a mut DetectModel> {
    match &mut m.family {
        Family::Detect(d) => Ok(d),
        other => Err(wrong_family(
            other,
            &m.bundle_name,
            call,
            tether_detect::FAMILY,
        )),
    }
}

/// `v` as a pixel format; `what` names the struct it came from (no allocation unless bad).
fn pixel_format(v: u32, what: &str) -> Result<PixelFormat> {
    Ok(match v {
        1 => PixelFormat::Rgb8,
        2 => PixelFormat::Bgr8,
        3 => PixelFormat::Rgba8,
        4 => PixelFormat::Gray8,
        v => {
            return Err(Failure::invalid(format!(
                "{what}.format is {v}; expected TETHER_PIXEL_RGB8 (1), _BGR8 (2), _RGBA8 (3) or _GRAY8 (4)"
            )));
        }
    })
}

fn format_code(f: PixelFormat) -> u32 {
    match f {
        PixelFormat::Rgb8 => tether_pixel_format::TETHER_PIXEL_RGB8 as u32,
        PixelFormat::Bgr8 => tether_pixel_format::TETHER_PIXEL_BGR8 as u32,
        PixelFormat::Rgba8 => tether_pixel_format::TETHER_PIXEL_RGBA8 as u32,
        // Never prepared through this API (no C format names it).
        _ => tether_pixel_format::TETHER_PIXEL_GRAY8 as u32,
    }
}

/// Check a geometry the way `ImageView` does, before any arithmetic on it.
pub(crate) fn frame_spec(
    width: u32,
    height: u32,
    pitch: usize,
    format: u32,
    what: &str,
) -> Result<FrameSpec> {
    let format = pixel_format(format, what)?;
    for (name, v) in [("width", width), ("height", height)] {
        if v == 0 || v > MAX_IMAGE_SIDE {
            return Err(Failure::invalid(format!(
                "{what}.{name} is {v}; each side must be 1..={MAX_IMAGE_SIDE} pixels"
            )));
        }
    }
    let row = width as usize * format.channels();
    if pitch < row {
        return Err(Failure::invalid(format!(
            "{what}.pitch is {pitch} bytes, smaller than a row of {width} {} pixels ({row} bytes)",
            format.as_str()
        )));
    }
    // The staging a prepare allocates is pitch * height bytes: bounded by the largest tight
    // frame the side limit allows, so that a wrong pitch is refused here instead of ending
    // the process in a failed allocation.
    let max = MAX_IMAGE_SIDE as usize * MAX_IMAGE_SIDE as usize * 4;
    match pitch.checked_mul(height as usize) {
        Some(bytes) if bytes <= max => {}
        _ => {
            return Err(Failure::invalid(format!(
                "{what}.pitch is {pitch} bytes: pitch * height ({height}) exceeds {max} bytes, the largest frame ({MAX_IMAGE_SIDE} x {MAX_IMAGE_SIDE} x 4 bytes)"
            )));
        }
    }
    Ok(FrameSpec {
        width,
        height,
        format,
        stride: pitch,
    })
}

/// The caller's image as a checked geometry and a view over its pixels (no copy, no
/// allocation unless it is bad).
///
/// # Safety
/// `image` is non-null and points to a `tether_image_view` whose `data` is readable as the
/// view describes, for the lifetime `'a` the result is used in (the call).
pub(crate) unsafe fn image_view<'a>(
    image: *const tether_image_view,
) -> Result<(FrameSpec, ImageView<'a>)> {
    // SAFETY: readable view struct (contract; non-null).
    let v = unsafe { image.read_unaligned() };
    let spec = frame_spec(v.width, v.height, v.pitch, v.format, "image")?;
    non_null(v.data, "image.data")?;
    let len = spec
        .stride
        .checked_mul(spec.height as usize - 1)
        .and_then(|n| n.checked_add(spec.width as usize * spec.format.channels()))
        .ok_or_else(|| Failure::invalid("image: pitch * height overflows"))?;
    // SAFETY: `data` is readable for this length (contract: the view describes it).
    let bytes = unsafe { std::slice::from_raw_parts(v.data, len) };
    let view = ImageView::with_stride(bytes, spec.width, spec.height, spec.stride, spec.format)
        .map_err(tether_detect::FrameError::from)?;
    Ok((spec, view))
}

/// Write `dets` into the caller's array; `TETHER_ERR_CAPACITY` when it is too small (the
/// best `capacity` are written, `*count` is the number found).
///
/// # Safety
/// `out` points to `capacity` writable elements (or `capacity` is 0); `count` is writable.
unsafe fn write_detections(
    dets: &Detections,
    out: *mut tether_detection,
    capacity: usize,
    count: *mut usize,
) -> Result<()> {
    // SAFETY: checked non-null by the caller of this function.
    unsafe { count.write(dets.len()) };
    for (i, d) in dets.iter().take(capacity).enumerate() {
        // SAFETY: i < capacity; `out` holds `capacity` elements (contract).
        unsafe {
            out.add(i).write(tether_detection {
                class_id: u32::from(d.class_id),
                score: d.score,
                x1: d.bbox.x1,
                y1: d.bbox.y1,
                x2: d.bbox.x2,
                y2: d.bbox.y2,
            });
        }
    }
    if dets.len() > capacity {
        return Err(Failure::capacity("detections", capacity, dets.len()));
    }
    Ok(())
}

fn check_out(out: *mut tether_detection, capacity: usize, count: *mut usize) -> Result<()> {
    non_null(count, "count")?;
    if capacity > 0 {
        non_null(out, "detections")?;
        if !out.cast::<f32>().is_aligned() {
            return Err(Failure::invalid("`detections` is not aligned to 4 bytes"));
        }
    }
    Ok(())
}

/// Detect objects in `image`: best score first, at most the bundle's maximum (<= 300).
/// `*count` receives the number found; the first `min(count, capacity)` are written to
/// `detections`. When `capacity` < the number found the status is `TETHER_ERR_CAPACITY`
/// (the best `capacity` are written; `detections` may be null with `capacity` 0 to ask
/// for the count).
///
/// A frame of a geometry (size, pitch, format) other than the prepared one prepares a new
/// session first (slow, allocating; see `tether_detect_prepare`); frames of the prepared
/// geometry take the hot path: the frame is copied into the session's staging and run,
/// with no allocation in this layer.
///
/// Errors: `TETHER_ERR_WRONG_FAMILY` (not a `detect` model), `TETHER_ERR_INVALID_ARGUMENT`
/// (null pointers, a view that does not fit: sizes, pitch, format), `TETHER_ERR_RUNTIME`.
///
/// # Safety
/// `model` is a live handle used by no other thread during the call; `image` points to a
/// `tether_image_view` whose `data` is readable as that view describes; `detections`
/// points to `capacity` writable elements (or `capacity` is 0); `count` points to a
/// writable `size_t`. Nothing is kept after the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_detect(
    model: *mut tether_model,
    image: *const tether_image_view,
    detections: *mut tether_detection,
    capacity: usize,
    count: *mut usize,
) -> tether_status {
    with_model(model, |m| {
        let d = detect_model(m, "tether_detect")?;
        non_null(image, "image")?;
        check_out(detections, capacity, count)?;
        // SAFETY: forwarded contract (a readable view of readable pixels).
        let (spec, view) = unsafe { image_view(image) }?;
        d.prepare(spec)?;
        let dets = d.detector.detect_prepared(&view)?;
        // SAFETY: output pointers checked above (contract for their extents).
        unsafe { write_detections(dets, detections, capacity, count) }
    })
}

/// Prepare the detector for frames of this geometry (letterbox, network binding, graph
/// capture on a GPU): once per geometry, off the hot path; a no-op when it is already the
/// prepared one. Needed before `tether_detect_staging` (a first `tether_detect` prepares
/// too). `format` is a `tether_pixel_format` value, `pitch` the bytes between rows.
///
/// # Safety
/// `model` is a live handle used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_detect_prepare(
    model: *mut tether_model,
    width: u32,
    height: u32,
    pitch: usize,
    format: u32,
) -> tether_status {
    with_model(model, |m| {
        let d = detect_model(m, "tether_detect_prepare")?;
        let spec = frame_spec(width, height, pitch, format, "frame")?;
        d.prepare(spec)
    })
}

/// The prepared session's frame staging, for a producer (a camera driver's colour
/// conversion, a decoder, a DMA engine) to write the next frame into in place, then
/// `tether_detect_staged`: no copy of the frame on the host. On a GPU it is the pinned
/// (on Jetson, mapped) host buffer the captured graph uploads from; on the CPU the
/// session's input buffer. Its content stays between runs.
///
/// Ownership: the buffer belongs to the model. `out->data` stays valid, at the same
/// address, until the next `tether_detect_prepare` or `tether_detect` of another
/// geometry, or `tether_model_close`; write it only between calls on the model (never
/// while a call on it runs).
///
/// Errors: `TETHER_ERR_STATE` when no geometry was prepared yet.
///
/// # Safety
/// `model` is a live handle used by no other thread during the call; `out` points to a
/// writable `tether_staging_buffer`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_detect_staging(
    model: *mut tether_model,
    out: *mut tether_staging_buffer,
) -> tether_status {
    with_model(model, |m| {
        let d = detect_model(m, "tether_detect_staging")?;
        non_null(out, "out")?;
        let buf = d.detector.staging_mut()?;
        let (data, size) = (buf.as_mut_ptr(), buf.len());
        let spec = d.spec.ok_or(tether_detect::FrameError::NotPrepared)?;
        // SAFETY: writable (contract; checked non-null).
        unsafe {
            out.write(tether_staging_buffer {
                data,
                size,
                width: spec.width,
                height: spec.height,
                pitch: spec.stride,
                format: format_code(spec.format),
            });
        }
        Ok(())
    })
}

/// Detect in the frame already in the staging (`tether_detect_staging`): the same run as
/// `tether_detect` without its copy. Outputs as `tether_detect`. The hot path: no
/// allocation in this layer.
///
/// Errors: `TETHER_ERR_STATE` when no geometry was prepared yet.
///
/// # Safety
/// As `tether_detect`, without `image`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_detect_staged(
    model: *mut tether_model,
    detections: *mut tether_detection,
    capacity: usize,
    count: *mut usize,
) -> tether_status {
    with_model(model, |m| {
        let d = detect_model(m, "tether_detect_staged")?;
        check_out(detections, capacity, count)?;
        let dets = d.detector.detect_staged()?;
        // SAFETY: output pointers checked above (contract for their extents).
        unsafe { write_detections(dets, detections, capacity, count) }
    })
}

/// The number of classes of a `detect` model into `*count`.
///
/// # Safety
/// `model` is a live handle used by no other thread during the call; `count` points to a
/// writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_detect_class_count(
    model: *mut tether_model,
    count: *mut usize,
) -> tether_status {
    with_model(model, |m| {
        let d = detect_model(m, "tether_detect_class_count")?;
        non_null(count, "count")?;
        // SAFETY: writable (contract; checked non-null).
        unsafe { count.write(d.names.len()) };
        Ok(())
    })
}

/// The name of class `class_id` (NUL-terminated UTF-8) into `*name`.
/// `TETHER_ERR_INVALID_ARGUMENT` for an id out of range.
///
/// Ownership: the string belongs to the model; valid until `tether_model_close`.
///
/// # Safety
/// `model` is a live handle used by no other thread during the call; `name` points to a
/// writable `const char*`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_detect_class_name(
    model: *mut tether_model,
    class_id: u32,
    name: *mut *const c_char,
) -> tether_status {
    with_model(model, |m| {
        let d = detect_model(m, "tether_detect_class_name")?;
        non_null(name, "name")?;
        let s = d.names.get(class_id as usize).ok_or_else(|| {
            Failure::invalid(format!(
                "class_id {class_id} is out of range: the model has {} classes",
                d.names.len()
            ))
        })?;
        // SAFETY: writable (contract; checked non-null).
        unsafe { name.write(s.as_ptr()) };
        Ok(())
    })
}
