//! Letterbox preprocessing: u8 image (HWC) -> NCHW f32 network input.
//!
//! The Ultralytics YOLOv8 `LetterBox` transform (ultralytics/data/augment.py):
//! scale to fit keeping the aspect ratio, centre, pad with 114. The exact
//! arithmetic below is the contract shared with the onnxruntime reference
//! (`golden/reference.py`) and the CUDA kernels, so that all three agree:
//!
//! - `r = min(in_h / H, in_w / W)` in f64;
//! - `new_w = floor(W * r + 0.5)`, `new_h = floor(H * r + 0.5)`, clamped to `[1, in]`;
//! - `left = (in_w - new_w) / 2`, `top = (in_h - new_h) / 2` (integer division);
//! - bilinear resampling with half-pixel centres (as OpenCV `INTER_LINEAR` and
//!   PyTorch `align_corners=False`, no antialiasing), in f32 from the u8 source:
//!   `src_x = max((x + 0.5) * W / new_w - 0.5, 0)`, `x0 = min(floor(src_x), W - 1)`,
//!   `x1 = min(x0 + 1, W - 1)`, `fx = src_x - x0`, likewise for rows;
//! - `(value - mean[c]) / std[c]` per RGB channel (`/255` for YOLOv8), padding
//!   normalised the same way.

use crate::DetectError;

pub use tether_family::vision::{FrameSpec, ImageView, MAX_IMAGE_SIDE, PixelFormat};

/// The geometry of one letterbox transform, from source image to network input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Letterbox {
    /// Source width in pixels.
    pub src_width: u32,
    /// Source height in pixels.
    pub src_height: u32,
    /// Network input width in pixels.
    pub input_width: u32,
    /// Network input height in pixels.
    pub input_height: u32,
    /// Scale factor `r` (network pixels per source pixel).
    pub scale: f64,
    /// Width of the resized image inside the input.
    pub new_width: u32,
    /// Height of the resized image inside the input.
    pub new_height: u32,
    /// Left padding in network pixels.
    pub left: u32,
    /// Top padding in network pixels.
    pub top: u32,
}

impl Letterbox {
    /// Compute the transform (see the module docs for the formulas).
    pub fn new(src_width: u32, src_height: u32, input_width: u32, input_height: u32) -> Self {
        let sw = f64::from(src_width.max(1));
        let sh = f64::from(src_height.max(1));
        let r = (f64::from(input_height) / sh).min(f64::from(input_width) / sw);
        let fit = |v: f64, max: u32| -> u32 {
            let n = (v * r + 0.5).floor();
            // Saturating float->int conversion, then clamp into [1, max].
            (n as u32).clamp(1, max.max(1))
        };
        let new_width = fit(sw, input_width);
        let new_height = fit(sh, input_height);
        Self {
            src_width,
            src_height,
            input_width,
            input_height,
            scale: r,
            new_width,
            new_height,
            left: (input_width - new_width) / 2,
            top: (input_height - new_height) / 2,
        }
    }

    /// Map a point from network-input pixels back to source pixels, clamped
    /// to `[0, W] x [0, H]`.
    pub fn to_source(&self, x: f32, y: f32) -> (f32, f32) {
        let r = self.scale as f32;
        let sx = ((x - self.left as f32) / r).clamp(0.0, self.src_width as f32);
        let sy = ((y - self.top as f32) / r).clamp(0.0, self.src_height as f32);
        (sx, sy)
    }
}

/// One bilinear tap: the two source indices and the weight of the second.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Tap {
    i0: u32,
    i1: u32,
    frac: f32,
}

fn taps(out: &mut Vec<Tap>, src_len: u32, dst_len: u32) {
    out.clear();
    let scale = src_len as f32 / dst_len as f32;
    let last = src_len - 1;
    for d in 0..dst_len {
        let s = ((d as f32 + 0.5) * scale - 0.5).max(0.0);
        let i0 = (s.floor() as u32).min(last);
        let i1 = (i0 + 1).min(last);
        out.push(Tap {
            i0,
            i1,
            frac: s - i0 as f32,
        });
    }
}

/// Reusable letterbox preprocessor: its tap tables are sized once for the
/// network input and refilled per frame without allocating.
#[derive(Clone, Debug)]
pub struct Preprocessor {
    input_width: u32,
    input_height: u32,
    xs: Vec<Tap>,
    ys: Vec<Tap>,
}

impl Preprocessor {
    /// A preprocessor for a `input_width x input_height` network input.
    pub fn new(input_width: u32, input_height: u32) -> Self {
        Self {
            input_width,
            input_height,
            xs: Vec::with_capacity(input_width as usize),
            ys: Vec::with_capacity(input_height as usize),
        }
    }

    /// Letterbox `image` into `dst`, an NCHW f32 tensor `[1, 3, in_h, in_w]`
    /// (RGB planes), normalised as `(v - mean[c]) / std[c]`.
    ///
    /// # Errors
    /// [`DetectError::InputBuffer`] when `dst` does not hold exactly
    /// `3 * in_h * in_w` values.
    pub fn run(
        &mut self,
        image: &ImageView<'_>,
        mean: [f32; 3],
        std: [f32; 3],
        pad_value: u8,
        dst: &mut [f32],
    ) -> Result<Letterbox, DetectError> {
        let (iw, ih) = (self.input_width as usize, self.input_height as usize);
        let plane = iw * ih;
        if dst.len() != 3 * plane {
            return Err(DetectError::InputBuffer {
                expected: 3 * plane,
                actual: dst.len(),
            });
        }
        let lb = Letterbox::new(
            image.width(),
            image.height(),
            self.input_width,
            self.input_height,
        );
        taps(&mut self.xs, image.width(), lb.new_width);
        taps(&mut self.ys, image.height(), lb.new_height);
        let offs = image.format().rgb_offsets();
        let ch = image.format().channels();
        let (left, top) = (lb.left as usize, lb.top as usize);
        let (nw, nh) = (lb.new_width as usize, lb.new_height as usize);
        for c in 0..3 {
            let padv = (f32::from(pad_value) - mean[c]) / std[c];
            let out = &mut dst[c * plane..(c + 1) * plane];
            // Top and bottom bands, then left/right margins of each interior row.
            out[..top * iw].fill(padv);
            out[(top + nh) * iw..].fill(padv);
            let oc = offs[c];
            for (y, ty) in self.ys.iter().enumerate() {
                let row = &mut out[(top + y) * iw..(top + y + 1) * iw];
                row[..left].fill(padv);
                row[left + nw..].fill(padv);
                let r0 = &image.data()[ty.i0 as usize * image.stride()..];
                let r1 = &image.data()[ty.i1 as usize * image.stride()..];
                let fy = ty.frac;
                for (dst_px, tx) in row[left..left + nw].iter_mut().zip(&self.xs) {
                    let a = tx.i0 as usize * ch + oc;
                    let b = tx.i1 as usize * ch + oc;
                    let fx = tx.frac;
                    let top_v = (1.0 - fx) * f32::from(r0[a]) + fx * f32::from(r0[b]);
                    let bot_v = (1.0 - fx) * f32::from(r1[a]) + fx * f32::from(r1[b]);
                    let v = (1.0 - fy) * top_v + fy * bot_v;
                    *dst_px = (v - mean[c]) / std[c];
                }
            }
        }
        Ok(lb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_matches_the_contract() {
        // 384 wide x 191 high page into 1024x1024: r = 1024/384.
        let lb = Letterbox::new(384, 191, 1024, 1024);
        assert_eq!((lb.new_width, lb.new_height), (1024, 509));
        assert_eq!((lb.left, lb.top), (0, 257));
        // Square image: no padding.
        let lb = Letterbox::new(512, 512, 320, 320);
        assert_eq!(
            (lb.new_width, lb.new_height, lb.left, lb.top),
            (320, 320, 0, 0)
        );
        // Tall 1x1000 sliver keeps at least one column.
        let lb = Letterbox::new(1, 1000, 640, 640);
        assert_eq!((lb.new_width, lb.new_height, lb.left), (1, 640, 319));
    }

    #[test]
    fn identity_resize_copies_pixels_and_pads() {
        // 2x1 RGB image into a 2x4 input (in_w=2, in_h=4): r = 1, new 2x1, top = 1.
        let img = [10u8, 20, 30, 40, 50, 60];
        let view = ImageView::new(&img, 2, 1, PixelFormat::Rgb8).unwrap();
        let mut p = Preprocessor::new(2, 4);
        let mut dst = vec![0f32; 3 * 8];
        let lb = p.run(&view, [0.0; 3], [1.0; 3], 114, &mut dst).unwrap();
        assert_eq!((lb.top, lb.left, lb.new_width, lb.new_height), (1, 0, 2, 1));
        // R plane: pad row, pixel row, two pad rows.
        assert_eq!(
            &dst[0..8],
            &[114.0, 114.0, 10.0, 40.0, 114.0, 114.0, 114.0, 114.0]
        );
        assert_eq!(&dst[8 + 2..8 + 4], &[20.0, 50.0]);
        assert_eq!(&dst[16 + 2..16 + 4], &[30.0, 60.0]);
    }

    #[test]
    fn upscale_interpolates_with_half_pixel_centres() {
        // 2x1 gray [0, 100] to 4x1: src_x = (x+0.5)*0.5-0.5 = -0.25, 0.25, 0.75, 1.25.
        let img = [0u8, 100];
        let view = ImageView::new(&img, 2, 1, PixelFormat::Gray8).unwrap();
        let mut p = Preprocessor::new(4, 2);
        let mut dst = vec![0f32; 3 * 8];
        let lb = p.run(&view, [0.0; 3], [1.0; 3], 0, &mut dst).unwrap();
        assert_eq!((lb.new_width, lb.new_height, lb.top), (4, 2, 0));
        assert_eq!(&dst[0..4], &[0.0, 25.0, 75.0, 100.0]);
    }

    #[test]
    fn bgr_and_stride_are_honoured() {
        // One BGR pixel per row with 2 bytes of row padding.
        let img = [1u8, 2, 3, 0, 0, 4, 5, 6];
        let view = ImageView::with_stride(&img, 1, 2, 5, PixelFormat::Bgr8).unwrap();
        let mut p = Preprocessor::new(1, 2);
        let mut dst = vec![0f32; 6];
        p.run(&view, [0.0; 3], [1.0; 3], 0, &mut dst).unwrap();
        assert_eq!(dst, vec![3.0, 6.0, 2.0, 5.0, 1.0, 4.0]);
    }

    #[test]
    fn bad_buffers_are_typed_errors() {
        let view = ImageView::new(&[0u8; 3], 1, 1, PixelFormat::Rgb8).unwrap();
        let mut p = Preprocessor::new(4, 4);
        let e = p
            .run(&view, [0.0; 3], [1.0; 3], 0, &mut [0.0; 47])
            .unwrap_err();
        assert!(matches!(
            e,
            DetectError::InputBuffer {
                expected: 48,
                actual: 47
            }
        ));
    }
}
