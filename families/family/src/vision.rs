//! Borrowed 8-bit images in the layouts cameras and decoders produce: one [`ImageView`] for
//! every family that takes an image. A [`PixelFormat`] names a byte layout; what a family
//! makes of alpha is the family's (detection ignores it, OCR converts the way its reference
//! does: each family's documentation says).

/// Largest accepted image side, in pixels (2^15). One limit for every family and every
/// entry point (decoders check it before decoding).
pub const MAX_IMAGE_SIDE: u32 = 1 << 15;

/// Pixel layout of an [`ImageView`]: 8 bits per channel, interleaved (HWC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PixelFormat {
    /// One luminance channel (replicated to R, G and B by families that need colour).
    Gray8,
    /// R, G, B.
    Rgb8,
    /// R, G, B, alpha (detection ignores alpha; OCR flattens it as its reference does).
    Rgba8,
    /// B, G, R (OpenCV and many camera drivers).
    Bgr8,
    /// Luminance, alpha (PIL mode `LA`; detection reads the luminance as gray, OCR flattens
    /// alpha as its reference does).
    GrayAlpha8,
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

    /// Every format.
    pub const ALL: [PixelFormat; 5] = [
        PixelFormat::Gray8,
        PixelFormat::Rgb8,
        PixelFormat::Rgba8,
        PixelFormat::Bgr8,
        PixelFormat::GrayAlpha8,
    ];

    /// `gray8`, `rgb8`, `rgba8`, `bgr8`, `gray-alpha8` (the names files and records use).
    pub const fn as_str(self) -> &'static str {
        match self {
            PixelFormat::Gray8 => "gray8",
            PixelFormat::Rgb8 => "rgb8",
            PixelFormat::Rgba8 => "rgba8",
            PixelFormat::Bgr8 => "bgr8",
            PixelFormat::GrayAlpha8 => "gray-alpha8",
        }
    }

    /// The format named `name` ([`PixelFormat::as_str`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.as_str() == name)
    }

    /// Byte offsets of R, G and B within a pixel (`[0, 0, 0]` for gray, with or without
    /// alpha).
    pub const fn rgb_offsets(self) -> [usize; 3] {
        match self {
            PixelFormat::Gray8 | PixelFormat::GrayAlpha8 => [0, 0, 0],
            PixelFormat::Rgb8 | PixelFormat::Rgba8 => [0, 1, 2],
            PixelFormat::Bgr8 => [2, 1, 0],
        }
    }
}

/// Why bytes cannot be viewed as an image. `Copy`, numbers only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// A side is 0 or above [`MAX_IMAGE_SIDE`].
    #[error("image {width}x{height}: each side must be 1..={max} pixels")]
    Size {
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
        /// The limit.
        max: u32,
    },
    /// Rows are closer than a row's pixels.
    #[error("image {width}x{height}: stride {stride} is smaller than a row ({row} bytes)")]
    Stride {
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
        /// Bytes between rows given.
        stride: usize,
        /// Bytes of one row's pixels.
        row: usize,
    },
    /// The buffer is shorter than the image.
    #[error("image {width}x{height} {format:?} needs {needed} bytes, got {got}")]
    Short {
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
        /// The layout.
        format: PixelFormat,
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
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
    /// [`ImageError::Size`] when a side is 0 or above [`MAX_IMAGE_SIDE`];
    /// [`ImageError::Short`] when `data` is shorter than the image.
    pub fn new(
        data: &'a [u8],
        width: u32,
        height: u32,
        format: PixelFormat,
    ) -> Result<Self, ImageError> {
        let stride = (width as usize).saturating_mul(format.channels());
        Self::with_stride(data, width, height, stride, format)
    }

    /// An image whose rows are `stride` bytes apart (camera buffers with row padding). The
    /// last row may stop at its pixels: `data` needs `stride * (height - 1) + width *
    /// channels` bytes.
    ///
    /// # Errors
    /// As [`ImageView::new`], and [`ImageError::Stride`] when `stride < width * channels`.
    pub fn with_stride(
        data: &'a [u8],
        width: u32,
        height: u32,
        stride: usize,
        format: PixelFormat,
    ) -> Result<Self, ImageError> {
        if width == 0 || height == 0 || width > MAX_IMAGE_SIDE || height > MAX_IMAGE_SIDE {
            return Err(ImageError::Size {
                width,
                height,
                max: MAX_IMAGE_SIDE,
            });
        }
        let row = width as usize * format.channels();
        if stride < row {
            return Err(ImageError::Stride {
                width,
                height,
                stride,
                row,
            });
        }
        let needed = stride
            .checked_mul(height as usize - 1)
            .and_then(|v| v.checked_add(row))
            .unwrap_or(usize::MAX);
        if data.len() < needed {
            return Err(ImageError::Short {
                width,
                height,
                format,
                needed,
                got: data.len(),
            });
        }
        Ok(Self {
            data,
            width,
            height,
            stride,
            format,
        })
    }

    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }
    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }
    /// Pixel format.
    pub fn format(&self) -> PixelFormat {
        self.format
    }
    /// Bytes between the starts of consecutive rows.
    pub fn stride(&self) -> usize {
        self.stride
    }
    /// The raw bytes.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }
    /// The pixels of row `y` (`width * channels` bytes, the row padding left out).
    ///
    /// # Panics
    /// When `y >= height`.
    pub fn row(&self, y: usize) -> &'a [u8] {
        let start = y * self.stride;
        &self.data[start..start + self.width as usize * self.format.channels()]
    }
    /// The bytes the image covers: full rows, the last one up to its pixels.
    pub fn used(&self) -> &'a [u8] {
        let n =
            self.stride * (self.height as usize - 1) + self.width as usize * self.format.channels();
        &self.data[..n]
    }
    /// The geometry, for preparing pipelines.
    pub fn spec(&self) -> FrameSpec {
        FrameSpec {
            width: self.width,
            height: self.height,
            format: self.format,
            stride: self.stride,
        }
    }
}

/// The geometry of a frame a pipeline is prepared for (a CUDA graph bakes it in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameSpec {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Pixel layout.
    pub format: PixelFormat,
    /// Bytes per row (>= width * channels).
    pub stride: usize,
}

impl FrameSpec {
    /// A tightly packed frame.
    pub fn packed(width: u32, height: u32, format: PixelFormat) -> Self {
        FrameSpec {
            width,
            height,
            format,
            stride: width as usize * format.channels(),
        }
    }
    /// Bytes of one frame as staged (`stride * height`).
    pub fn bytes(&self) -> usize {
        self.stride * self.height as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_views_are_typed_errors() {
        assert_eq!(
            ImageView::new(&[0u8; 5], 2, 1, PixelFormat::Rgb8).unwrap_err(),
            ImageError::Short {
                width: 2,
                height: 1,
                format: PixelFormat::Rgb8,
                needed: 6,
                got: 5
            }
        );
        assert!(matches!(
            ImageView::new(&[], 0, 1, PixelFormat::Rgb8),
            Err(ImageError::Size { .. })
        ));
        assert!(matches!(
            ImageView::with_stride(&[0u8; 12], 2, 2, 5, PixelFormat::Rgb8),
            Err(ImageError::Stride { .. })
        ));
        // The last row may stop at its pixels: 8 + 6 bytes for two 2-pixel RGB rows.
        let v = ImageView::with_stride(&[0u8; 14], 2, 2, 8, PixelFormat::Rgb8).unwrap();
        assert_eq!(v.used().len(), 14);
        assert_eq!(v.spec().bytes(), 16);
        assert!(ImageView::with_stride(&[0u8; 13], 2, 2, 8, PixelFormat::Rgb8).is_err());
        assert_eq!(v.row(1), &[0u8; 6]);
    }

    #[test]
    fn formats_are_named_and_found_by_name() {
        for f in PixelFormat::ALL {
            assert_eq!(PixelFormat::from_name(f.as_str()), Some(f));
        }
        assert_eq!(PixelFormat::from_name("yuv"), None);
        assert_eq!(PixelFormat::GrayAlpha8.channels(), 2);
        assert_eq!(PixelFormat::GrayAlpha8.rgb_offsets(), [0, 0, 0]);
    }
}
