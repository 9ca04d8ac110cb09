//! Text recognition (PP-OCR): an image view over caller memory in, text lines out into a
//! caller line array and a caller text buffer.

use std::ffi::c_char;

use tether_ocr::{Ocr, OcrError, OcrResult};

use crate::detect::{image_view, tether_image_view};
use crate::error::{Failure, Result, non_null, tether_status};
use crate::model::{Family, tether_model, with_model, wrong_family};

/// One recognised text line (`tether_ocr`). Coordinates are pixels of the source image, as
/// `tether run --json` reports them under `polygon`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct tether_ocr_line {
    /// The line's quadrilateral: x, y of the top-left, top-right, bottom-right and
    /// bottom-left corners, in that order (8 floats; not clamped, not axis-aligned in
    /// general).
    pub quad: [f32; 8],
    /// Recognition confidence in [0, 1]: the mean probability of the decoded characters.
    pub score: f32,
    /// Detection score in [0, 1]: the mean text probability inside the box.
    pub box_score: f32,
    /// 1 when the line was turned by 180 degrees before recognition (the classifier's
    /// decision), else 0.
    pub rotated: u32,
    /// Byte offset of the line's text in the caller's text buffer; the text is
    /// NUL-terminated there.
    pub text_offset: usize,
    /// Bytes of UTF-8 text (the NUL not counted).
    pub text_size: usize,
}

/// The sizes a result needs: its lines, and the text bytes (each line's text and its NUL).
fn needed(r: &OcrResult) -> (usize, usize) {
    (r.len(), r.lines().map(|l| l.text.len() + 1).sum())
}

fn ocr_model<'a>(m: &'a mut tether_model, call: &str) -> Result<&'a mut Ocr> {
    match &mut m.family {
        Family::Ocr(o) => Ok(o),
        other => Err(wrong_family(
            other,
            &m.bundle_name,
            call,
            tether_ocr::FAMILY,
        )),
    }
}

impl From<OcrError> for Failure {
    fn from(e: OcrError) -> Self {
        use OcrError as O;
        let status = match &e {
            O::Model(m) => crate::error::model_status(m),
            O::Config { .. }
            | O::Dictionary(_)
            | O::Network { .. }
            | O::SelfTest(_)
            | O::ReferenceMismatch(_) => tether_status::TETHER_ERR_BUNDLE,
            O::Image { .. } => tether_status::TETHER_ERR_INVALID_ARGUMENT,
            O::TextCapacity { .. } => tether_status::TETHER_ERR_CAPACITY,
            _ => tether_status::TETHER_ERR_RUNTIME,
        };
        Failure::new(status, e.to_string())
    }
}

/// Read the text in `image`: lines in reading order (`RapidOCR.sorted_boxes`), computed
/// as rapidocr-onnxruntime 1.4.4's PP-OCR pipeline does (DB text detection, the optional
/// 180-degree classifier, CTC recognition; lines under the bundle's minimum text score
/// dropped): the lines `tether run BUNDLE IMAGE --json` reports.
///
/// Outputs: `*line_count` receives the number of lines and `*text_size` the text bytes
/// they need (every line's UTF-8 text followed by a NUL, back to back). When both fit
/// (`line_capacity >= *line_count`, `text_capacity >= *text_size`) line `i` goes to
/// `lines[i]` and its text to `text + lines[i].text_offset`. Otherwise the status is
/// `TETHER_ERR_CAPACITY`, the two counts are written and nothing else (call again with
/// arrays of those sizes; with `line_capacity` and `text_capacity` 0 and null arrays this
/// is a size query, which runs the whole pipeline). A line count of 0 (no text) is
/// `TETHER_OK`.
///
/// Errors: `TETHER_ERR_WRONG_FAMILY` (not an `ocr` model), `TETHER_ERR_INVALID_ARGUMENT`
/// (null pointers, a view that does not fit: sizes, pitch, format; an image the detector's
/// size rules cannot take), `TETHER_ERR_CAPACITY` (as above, or more text than the model's
/// own buffer of 64 KiB per image), `TETHER_ERR_RUNTIME`.
///
/// # Safety
/// `model` is a live handle used by no other thread during the call; `image` points to a
/// `tether_image_view` whose `data` is readable as that view describes; `lines` points to
/// `line_capacity` writable elements and `text` to `text_capacity` writable bytes (either
/// may be null when its capacity is 0); `line_count` and `text_size` point to writable
/// `size_t`s. Nothing is kept after the call.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tether_ocr(
    model: *mut tether_model,
    image: *const tether_image_view,
    lines: *mut tether_ocr_line,
    line_capacity: usize,
    line_count: *mut usize,
    text: *mut c_char,
    text_capacity: usize,
    text_size: *mut usize,
) -> tether_status {
    with_model(model, |m| {
        let o = ocr_model(m, "tether_ocr")?;
        non_null(image, "image")?;
        non_null(line_count, "line_count")?;
        non_null(text_size, "text_size")?;
        if line_capacity > 0 {
            non_null(lines, "lines")?;
            if !lines.cast::<usize>().is_aligned() {
                return Err(Failure::invalid(format!(
                    "`lines` is not aligned to {} bytes",
                    std::mem::align_of::<tether_ocr_line>()
                )));
            }
        }
        if text_capacity > 0 {
            non_null(text, "text")?;
        }
        // SAFETY: forwarded contract (a readable view of readable pixels).
        let (_, view) = unsafe { image_view(image) }?;
        let result = o.detect_text(&view)?;
        let (n, bytes) = needed(result);
        // SAFETY: both writable (contract; checked non-null).
        unsafe {
            line_count.write(n);
            text_size.write(bytes);
        }
        if n > line_capacity {
            return Err(Failure::capacity("text lines", line_capacity, n));
        }
        if bytes > text_capacity {
            return Err(Failure::new(
                tether_status::TETHER_ERR_CAPACITY,
                format!("text: the buffer holds {text_capacity} bytes, {bytes} needed"),
            ));
        }
        let mut offset = 0;
        for (i, l) in result.lines().enumerate() {
            let p = l.polygon;
            let size = l.text.len();
            // SAFETY: i < n <= line_capacity and offset + size + 1 <= bytes <= text_capacity
            // (checked above); both arrays are writable for their capacities (contract).
            unsafe {
                std::ptr::copy_nonoverlapping(l.text.as_ptr(), text.add(offset).cast(), size);
                text.add(offset + size).write(0);
                lines.add(i).write(tether_ocr_line {
                    quad: [
                        p[0][0], p[0][1], p[1][0], p[1][1], p[2][0], p[2][1], p[3][0], p[3][1],
                    ],
                    score: l.score,
                    box_score: l.box_score,
                    rotated: u32::from(l.rotated),
                    text_offset: offset,
                    text_size: size,
                });
            }
            offset += size + 1;
        }
        Ok(())
    })
}
