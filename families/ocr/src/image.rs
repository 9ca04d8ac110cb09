//! Input images: a borrowed view of the caller's pixels, and the owned,
//! reusable 8-bit BGR buffer every later stage works on.
//!
//! The conversion to BGR is the reference's `LoadImage.convert_img`
//! (`rapidocr_onnxruntime/utils/load_image.py`): gray is replicated to three
//! channels, RGB is reordered, BGR is taken as is, and images with an alpha
//! channel are flattened the way that file does it (see [`PixelFormat`]).
//!
//! The view is the shared [`tether_family::vision::ImageView`]; what this family does
//! with each [`PixelFormat`] is the reference's: two-channel gray + alpha
//! ([`PixelFormat::GrayAlpha8`]: `cvt_two_to_three`) and four-channel images masked by
//! alpha and inverted ([`PixelFormat::Rgba8`]: `cvt_four_to_three`), as
//! `rapidocr-onnxruntime` treats such files.

pub use tether_family::vision::{ImageView, MAX_IMAGE_SIDE, PixelFormat};

/// An owned 8-bit BGR image (HWC, tightly packed) whose buffer is kept and
/// reused: it reallocates only when an image larger than any before arrives.
#[derive(Clone, Debug, Default)]
pub struct BgrImage {
    /// Pixels, `width * height * 3` bytes in use.
    pub data: Vec<u8>,
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
}

impl BgrImage {
    /// An empty image with room for `pixels` pixels.
    pub fn with_capacity(pixels: usize) -> Self {
        Self {
            data: Vec::with_capacity(pixels * 3),
            width: 0,
            height: 0,
        }
    }

    /// Set the size to `width x height` (contents unspecified), growing the
    /// buffer only when needed.
    pub fn resize(&mut self, width: usize, height: usize) {
        self.width = width;
        self.height = height;
        self.data.resize(width * height * 3, 0);
    }

    /// The pixels in use.
    pub fn pixels(&self) -> &[u8] {
        &self.data[..self.width * self.height * 3]
    }

    /// The pixels in use, writable.
    pub fn pixels_mut(&mut self) -> &mut [u8] {
        let n = self.width * self.height * 3;
        &mut self.data[..n]
    }

    /// Copy `src` (any [`PixelFormat`]) into this buffer as BGR, as the
    /// reference's `LoadImage.convert_img` does.
    pub fn convert_from(&mut self, src: &ImageView<'_>) {
        let (w, h) = (src.width() as usize, src.height() as usize);
        self.resize(w, h);
        let dst = &mut self.data[..w * h * 3];
        match src.format() {
            PixelFormat::Gray8 => {
                for y in 0..h {
                    let row = src.row(y);
                    for (d, &g) in dst[y * w * 3..(y + 1) * w * 3].chunks_exact_mut(3).zip(row) {
                        d.fill(g);
                    }
                }
            }
            PixelFormat::GrayAlpha8 => {
                for y in 0..h {
                    let row = src.row(y);
                    for (d, p) in dst[y * w * 3..(y + 1) * w * 3]
                        .chunks_exact_mut(3)
                        .zip(row.chunks_exact(2))
                    {
                        let (g, a) = (p[0], p[1]);
                        let kept = if a != 0 { g } else { 0 };
                        d.fill(kept.saturating_add(255 - a));
                    }
                }
            }
            PixelFormat::Rgb8 | PixelFormat::Bgr8 => {
                let swap = src.format() == PixelFormat::Rgb8;
                for y in 0..h {
                    let row = src.row(y);
                    for (d, p) in dst[y * w * 3..(y + 1) * w * 3]
                        .chunks_exact_mut(3)
                        .zip(row.chunks_exact(3))
                    {
                        if swap {
                            d.copy_from_slice(&[p[2], p[1], p[0]]);
                        } else {
                            d.copy_from_slice(p);
                        }
                    }
                }
            }
            PixelFormat::Rgba8 => {
                let mut any = false;
                for y in 0..h {
                    let row = src.row(y);
                    for (d, p) in dst[y * w * 3..(y + 1) * w * 3]
                        .chunks_exact_mut(3)
                        .zip(row.chunks_exact(4))
                    {
                        let v = if p[3] != 0 {
                            [p[2], p[1], p[0]]
                        } else {
                            [0, 0, 0]
                        };
                        any |= v != [0, 0, 0];
                        d.copy_from_slice(&v);
                    }
                }
                // `np.mean(new_img) <= 0` is "every byte is zero".
                for y in 0..h {
                    let row = src.row(y);
                    for (d, p) in dst[y * w * 3..(y + 1) * w * 3]
                        .chunks_exact_mut(3)
                        .zip(row.chunks_exact(4))
                    {
                        if any {
                            for v in d.iter_mut() {
                                *v = !*v;
                            }
                        } else {
                            let add = 255 - p[3];
                            for v in d.iter_mut() {
                                *v = v.saturating_add(add);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_like_load_image() {
        let mut out = BgrImage::default();
        let gray = [10u8, 20, 30, 40];
        out.convert_from(&ImageView::new(&gray, 2, 2, PixelFormat::Gray8).unwrap());
        assert_eq!(
            out.pixels(),
            &[10, 10, 10, 20, 20, 20, 30, 30, 30, 40, 40, 40]
        );
        let rgb = [1u8, 2, 3, 4, 5, 6];
        out.convert_from(&ImageView::new(&rgb, 2, 1, PixelFormat::Rgb8).unwrap());
        assert_eq!(out.pixels(), &[3, 2, 1, 6, 5, 4]);
        out.convert_from(&ImageView::new(&rgb, 2, 1, PixelFormat::Bgr8).unwrap());
        assert_eq!(out.pixels(), &rgb);
        // LA: gray kept where alpha != 0, plus 255 - alpha.
        let la = [100u8, 255, 100, 0, 100, 200];
        out.convert_from(&ImageView::new(&la, 3, 1, PixelFormat::GrayAlpha8).unwrap());
        assert_eq!(out.pixels(), &[100, 100, 100, 255, 255, 255, 155, 155, 155]);
        // RGBA with content: masked then inverted.
        let rgba = [10u8, 20, 30, 255, 40, 50, 60, 0];
        out.convert_from(&ImageView::new(&rgba, 2, 1, PixelFormat::Rgba8).unwrap());
        assert_eq!(out.pixels(), &[225, 235, 245, 255, 255, 255]);
        // RGBA all transparent: zero plus 255 - alpha.
        let rgba = [10u8, 20, 30, 0, 40, 50, 60, 55];
        out.convert_from(&ImageView::new(&rgba, 2, 1, PixelFormat::Rgba8).unwrap());
        // second pixel: alpha 55 != 0 keeps (60, 50, 40): not all black -> inverted.
        assert_eq!(out.pixels(), &[255, 255, 255, 195, 205, 215]);
        let rgba = [10u8, 20, 30, 0, 0, 0, 0, 55];
        out.convert_from(&ImageView::new(&rgba, 2, 1, PixelFormat::Rgba8).unwrap());
        assert_eq!(out.pixels(), &[255, 255, 255, 200, 200, 200]);
    }

    #[test]
    fn converts_a_padded_view_row_by_row() {
        // Two 2-pixel RGB rows, 8 bytes apart: the padding is never read.
        let px = [1u8, 2, 3, 4, 5, 6, 99, 99, 7, 8, 9, 10, 11, 12];
        let mut out = BgrImage::default();
        out.convert_from(&ImageView::with_stride(&px, 2, 2, 8, PixelFormat::Rgb8).unwrap());
        assert_eq!(out.pixels(), &[3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10]);
    }
}
