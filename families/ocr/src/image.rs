//! Input images: a borrowed view of the caller's pixels, and the owned,
//! reusable 8-bit BGR buffer every later stage works on.
//!
//! The conversion to BGR is the reference's `LoadImage.convert_img`
//! (`rapidocr_onnxruntime/utils/load_image.py`): gray is replicated to three
//! channels, RGB is reordered, BGR is taken as is, and images with an alpha
//! channel are flattened the way that file does it (see [`PixelFormat`]).
//!
//! Every shared view ([`tether_family::vision::ImageView`]) converts losslessly
//! (`From`): its `GrayAlpha8` and `Rgba8` get the reference's two- and
//! four-channel treatment, as such files do in `rapidocr-onnxruntime` (the
//! shared decoder keeps the alpha channel for that; detection, whose
//! reference drops alpha, ignores it).

use crate::OcrError;

/// Largest accepted image side, in pixels (the shared limit,
/// [`tether_family::vision::MAX_IMAGE_SIDE`]).
pub const MAX_IMAGE_SIDE: u32 = tether_family::vision::MAX_IMAGE_SIDE;

/// Pixel layout of an [`ImageView`]: 8 bits per channel, interleaved (HWC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PixelFormat {
    /// One luminance channel (PIL mode `L`), replicated to B, G and R.
    Gray8,
    /// Luminance and alpha (PIL `LA`): `gray` where alpha is non-zero, else 0,
    /// plus `255 - alpha`, saturating (`cvt_two_to_three`).
    GrayAlpha8,
    /// R, G, B (a decoded PNG/JPEG file, as the reference reads files).
    Rgb8,
    /// B, G, R (OpenCV / many camera drivers; the reference's ndarray input).
    Bgr8,
    /// R, G, B, alpha: pixels with zero alpha become black; then, if the image
    /// is not all black, it is inverted, else `255 - alpha` is added
    /// (`cvt_four_to_three`, meant for dark text on a transparent background).
    Rgba8,
}

impl PixelFormat {
    /// Bytes per pixel.
    pub const fn channels(self) -> usize {
        match self {
            PixelFormat::Gray8 => 1,
            PixelFormat::GrayAlpha8 => 2,
            PixelFormat::Rgb8 | PixelFormat::Bgr8 => 3,
            PixelFormat::Rgba8 => 4,
        }
    }
}

/// A borrowed 8-bit image, rows top to bottom, `stride` bytes apart.
#[derive(Clone, Copy, Debug)]
pub struct ImageView<'a> {
    data: &'a [u8],
    width: u32,
    height: u32,
    stride: usize,
    format: PixelFormat,
}

impl<'a> ImageView<'a> {
    /// A tightly packed image (`stride = width * channels`).
    ///
    /// # Errors
    /// [`OcrError::Image`] when a side is 0 or above [`MAX_IMAGE_SIDE`], or
    /// `data` is shorter than `width * height * channels` bytes.
    pub fn new(
        data: &'a [u8],
        width: u32,
        height: u32,
        format: PixelFormat,
    ) -> Result<Self, OcrError> {
        let stride = (width as usize).saturating_mul(format.channels());
        Self::with_stride(data, width, height, stride, format)
    }

    /// An image whose rows are `stride` bytes apart.
    ///
    /// # Errors
    /// As [`ImageView::new`], and when `stride < width * channels`.
    pub fn with_stride(
        data: &'a [u8],
        width: u32,
        height: u32,
        stride: usize,
        format: PixelFormat,
    ) -> Result<Self, OcrError> {
        let err = |reason: &'static str| {
            Err(OcrError::Image {
                width,
                height,
                reason,
            })
        };
        if width == 0 || height == 0 || width > MAX_IMAGE_SIDE || height > MAX_IMAGE_SIDE {
            return err("each side must be 1..=32768 pixels");
        }
        let row = width as usize * format.channels();
        if stride < row {
            return err("the row stride is smaller than a row of pixels");
        }
        let need = stride
            .checked_mul(height as usize - 1)
            .and_then(|v| v.checked_add(row));
        match need {
            Some(n) if data.len() >= n => Ok(Self {
                data,
                width,
                height,
                stride,
                format,
            }),
            _ => err("the buffer is shorter than height rows of pixels"),
        }
    }

    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// Pixel layout.
    pub fn format(&self) -> PixelFormat {
        self.format
    }

    /// Bytes between row starts.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// The pixel bytes.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    fn row(&self, y: usize) -> &'a [u8] {
        let start = y * self.stride;
        &self.data[start..start + self.width as usize * self.format.channels()]
    }
}

impl<'a> From<tether_family::vision::ImageView<'a>> for ImageView<'a> {
    /// The same pixels (no copy). The shared view checks the same invariants
    /// (sides `1..=MAX_IMAGE_SIDE`, stride, buffer length), so this cannot
    /// fail. `GrayAlpha8` and `Rgba8` get the reference's two- and
    /// four-channel conversions (see the module docs).
    fn from(v: tether_family::vision::ImageView<'a>) -> Self {
        use tether_family::vision::PixelFormat as Shared;
        Self {
            data: v.data(),
            width: v.width(),
            height: v.height(),
            stride: v.stride(),
            format: match v.format() {
                Shared::Gray8 => PixelFormat::Gray8,
                Shared::GrayAlpha8 => PixelFormat::GrayAlpha8,
                Shared::Rgb8 => PixelFormat::Rgb8,
                Shared::Rgba8 => PixelFormat::Rgba8,
                Shared::Bgr8 => PixelFormat::Bgr8,
            },
        }
    }
}

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
        let (w, h) = (src.width as usize, src.height as usize);
        self.resize(w, h);
        let dst = &mut self.data[..w * h * 3];
        match src.format {
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
                let swap = src.format == PixelFormat::Rgb8;
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
    fn shared_views_convert_without_copying() {
        use tether_family::vision::{ImageView as Shared, PixelFormat as SharedFormat};
        let px = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14];
        let shared = Shared::with_stride(&px, 2, 2, 8, SharedFormat::Rgb8).unwrap();
        let v = ImageView::from(shared);
        assert_eq!((v.width(), v.height(), v.stride()), (2, 2, 8));
        assert_eq!(v.format(), PixelFormat::Rgb8);
        assert_eq!(v.data().as_ptr(), px.as_ptr());
        let mut out = BgrImage::default();
        out.convert_from(&v);
        assert_eq!(out.pixels(), &[3, 2, 1, 6, 5, 4, 11, 10, 9, 14, 13, 12]);
        for (s, o) in [
            (SharedFormat::Gray8, PixelFormat::Gray8),
            (SharedFormat::Bgr8, PixelFormat::Bgr8),
            (SharedFormat::Rgba8, PixelFormat::Rgba8),
        ] {
            let v = ImageView::from(Shared::new(&px[..4], 1, 1, s).unwrap());
            assert_eq!(v.format(), o);
        }
    }

    #[test]
    fn rejects_bad_views() {
        let d = [0u8; 11];
        let e = ImageView::new(&d, 2, 2, PixelFormat::Rgb8).unwrap_err();
        assert!(e.to_string().contains("2x2"), "{e}");
        assert!(ImageView::new(&d, 0, 2, PixelFormat::Gray8).is_err());
        assert!(ImageView::with_stride(&d, 4, 2, 3, PixelFormat::Gray8).is_err());
        assert!(ImageView::with_stride(&d, 4, 2, 6, PixelFormat::Gray8).is_ok());
    }
}
