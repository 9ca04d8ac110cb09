//! Decoding image files for tools (feature `cli`): orientation applied, size checked before
//! decoding, memory bounded.
//!
//! - **Orientation.** A JPEG (or TIFF/WebP) from a phone stores the sensor's pixels and an
//!   EXIF `Orientation` tag; viewers, OpenCV (`IMREAD_COLOR` applies it since 3.1) and
//!   Ultralytics show the image upright. [`decode_file`] applies the tag and reports the
//!   displayed size; [`Orientation::Ignore`] keeps the stored pixels.
//! - **Size.** One limit, [`MAX_IMAGE_SIDE`] pixels a side, checked from the header before
//!   any pixel is decoded, named in the error.
//! - **Memory.** The decoder may allocate the decoded image and nothing proportional beyond
//!   it (its allocation limit is set from the header's dimensions); 8-bit gray, RGB and RGBA
//!   images are kept in their own layout (the pipelines read all three), so no colour
//!   conversion copy is made; gray + alpha is kept as [`PixelFormat::GrayAlpha8`]; other
//!   layouts (16-bit, float) are converted to 8 bits once, keeping their alpha channel.
//!   The peak is at most two decoded images (during an orientation that rotates). A
//!   pipeline then stages the frame into its session's input region once (a copy of the
//!   same size), so a run holds at most two frames of the decoded size, plus an annotation
//!   bounded at 4096 pixels a side.
//! - **Transparency.** One mechanism for every image family: the decoder keeps the alpha
//!   channel (`GrayAlpha8`, `Rgba8`) and each family applies its reference's rule to it, in
//!   its own pre-processing. The references differ, so the rules do:
//!
//!   | family | reference | rule |
//!   |---|---|---|
//!   | `detect` | Ultralytics (`cv2.imread(IMREAD_COLOR)`; PIL `convert("RGB")` for PIL inputs) | alpha ignored: the stored colour of every pixel, transparent ones included |
//!   | `ocr` | rapidocr-onnxruntime `LoadImage` | gray + alpha: luminance where alpha is non-zero, plus `255 - alpha` (flattened onto white for on/off alpha); RGBA: masked by alpha, then inverted unless all black (`cvt_four_to_three`) |

use std::io::BufReader;
use std::path::{Path, PathBuf};

use image::{DynamicImage, ImageDecoder};

use crate::vision::{ImageView, MAX_IMAGE_SIDE, PixelFormat};

/// Whether to apply the file's orientation tag.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Orientation {
    /// Apply the EXIF orientation (as viewers and Ultralytics do). Default.
    #[default]
    Apply,
    /// Use the stored pixels as they are.
    Ignore,
}

impl Orientation {
    /// The run option `--ignore-orientation` ([`Orientation::argument`]) of the image
    /// families: [`Orientation::Ignore`] when given, else [`Orientation::Apply`].
    pub fn of_args(args: &clap::ArgMatches) -> Self {
        if crate::args::flag(args, IGNORE_ORIENTATION) {
            Orientation::Ignore
        } else {
            Orientation::Apply
        }
    }

    /// The switch `--ignore-orientation`; `help` says whose behaviour it matches.
    pub fn argument(help: &'static str) -> clap::Arg {
        crate::args::flag_arg(IGNORE_ORIENTATION, help)
    }
}

/// The name of the image families' run option that ignores the EXIF orientation tag.
const IGNORE_ORIENTATION: &str = "ignore-orientation";

/// An image file that could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The path is not a regular file (a directory, a FIFO, a device).
    #[error("{path}: not a regular file ({kind})")]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// A side exceeds [`MAX_IMAGE_SIDE`] (checked before decoding).
    #[error("{path}: image is {width}x{height} pixels; tether accepts at most {max} pixels a side")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Width from the header.
        width: u32,
        /// Height from the header.
        height: u32,
        /// The limit.
        max: u32,
    },
    /// A file whose first bytes are no image format this build decodes.
    #[error(
        "{path}: not an image this build decodes (it looks like {looks_like}); PNG and JPEG are read"
    )]
    NotAnImage {
        /// The file.
        path: PathBuf,
        /// What its first bytes look like ([`crate::sniff::looks_like`]).
        looks_like: &'static str,
    },
    /// Not a PNG/JPEG (or other supported format) the decoder can read.
    #[error("{path}: cannot decode: {source}")]
    Format {
        /// The file.
        path: PathBuf,
        /// The decoder's error.
        source: image::ImageError,
    },
}

/// A decoded image in a layout the pipelines read directly.
#[derive(Clone, Debug)]
pub struct DecodedImage {
    /// Pixels, tightly packed rows.
    pub data: Vec<u8>,
    /// Displayed width in pixels (after orientation).
    pub width: u32,
    /// Displayed height in pixels.
    pub height: u32,
    /// Layout of `data`.
    pub format: PixelFormat,
    /// The orientation tag that was applied (`None`: none, or it was the identity).
    pub orientation: Option<String>,
}

impl DecodedImage {
    /// An image of `data` (`width * height * channels` bytes, packed rows), no orientation
    /// applied.
    ///
    /// # Errors
    /// [`crate::vision::ImageError`] when `data` is not a valid image of that size.
    pub fn new(
        data: Vec<u8>,
        width: u32,
        height: u32,
        format: PixelFormat,
    ) -> Result<Self, crate::vision::ImageError> {
        ImageView::new(&data, width, height, format)?;
        Ok(DecodedImage {
            data,
            width,
            height,
            format,
            orientation: None,
        })
    }

    /// The image as an [`ImageView`].
    pub fn view(&self) -> ImageView<'_> {
        ImageView::new(&self.data, self.width, self.height, self.format)
            .expect("a decoded image is a valid view of itself")
    }

    /// A copy as RGB8 (for annotation; allocates one RGB image).
    pub fn to_rgb8(&self) -> image::RgbImage {
        let n = (self.width * self.height) as usize;
        let mut out = Vec::with_capacity(n * 3);
        let ch = self.format.channels();
        let offs = self.format.rgb_offsets();
        for px in self.data.chunks_exact(ch) {
            out.extend_from_slice(&[px[offs[0]], px[offs[1]], px[offs[2]]]);
        }
        image::RgbImage::from_raw(self.width, self.height, out)
            .expect("buffer sized from the dimensions")
    }
}

/// Open `path` for reading only if it is a regular file (never blocks on a FIFO): the
/// bundle crate's check, for every file tether reads.
///
/// # Errors
/// [`DecodeError::NotAFile`], [`DecodeError::Io`].
pub fn open_regular(path: &Path) -> Result<std::fs::File, DecodeError> {
    tether_bundle::files::open_regular(path).map_err(|e| match e {
        tether_bundle::files::FileError::NotRegular { kind, .. } => DecodeError::NotAFile {
            path: path.to_path_buf(),
            kind: kind.describe(),
        },
        tether_bundle::files::FileError::Io { source, .. } => DecodeError::Io {
            path: path.to_path_buf(),
            source,
        },
        other => DecodeError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(other.to_string()),
        },
    })
}

/// Decode an image file (see the module docs for orientation, size and memory).
///
/// # Errors
/// [`DecodeError`] naming the file and what is wrong.
pub fn decode_file(path: &Path, orientation: Orientation) -> Result<DecodedImage, DecodeError> {
    let fmt = |source| DecodeError::Format {
        path: path.to_path_buf(),
        source,
    };
    let file = open_regular(path)?;
    let reader = image::ImageReader::new(BufReader::new(file))
        .with_guessed_format()
        .map_err(|source| DecodeError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if reader.format().is_none() {
        // No format's signature: say what the file looks like instead of the decoder's
        // "The image format could not be determined".
        use std::io::{Read, Seek};
        let mut file = reader.into_inner();
        let mut head = Vec::with_capacity(12);
        file.seek(std::io::SeekFrom::Start(0))
            .and_then(|_| (&mut file).take(12).read_to_end(&mut head))
            .map_err(|source| DecodeError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        return Err(DecodeError::NotAnImage {
            path: path.to_path_buf(),
            looks_like: crate::sniff::looks_like(&head),
        });
    }
    let mut decoder = reader.into_decoder().map_err(fmt)?;
    let (width, height) = decoder.dimensions();
    if width > MAX_IMAGE_SIDE || height > MAX_IMAGE_SIDE || width == 0 || height == 0 {
        return Err(DecodeError::TooLarge {
            path: path.to_path_buf(),
            width,
            height,
            max: MAX_IMAGE_SIDE,
        });
    }
    let tag = match orientation {
        Orientation::Apply => decoder
            .orientation()
            .unwrap_or(image::metadata::Orientation::NoTransforms),
        Orientation::Ignore => image::metadata::Orientation::NoTransforms,
    };
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(MAX_IMAGE_SIDE);
    limits.max_image_height = Some(MAX_IMAGE_SIDE);
    // The decoded image itself (up to 8 bytes a pixel for 16-bit RGBA) plus decoder state.
    limits.max_alloc = Some(u64::from(width) * u64::from(height) * 8 + (64 << 20));
    decoder.set_limits(limits).map_err(fmt)?;
    let mut img = DynamicImage::from_decoder(decoder).map_err(fmt)?;
    let applied = if tag == image::metadata::Orientation::NoTransforms {
        None
    } else {
        img.apply_orientation(tag);
        Some(format!("{tag:?}"))
    };
    let (width, height) = (img.width(), img.height());
    // The alpha channel is kept: each family applies its reference's rule (module docs).
    let (data, format) = match img {
        DynamicImage::ImageLuma8(b) => (b.into_raw(), PixelFormat::Gray8),
        DynamicImage::ImageLumaA8(b) => (b.into_raw(), PixelFormat::GrayAlpha8),
        DynamicImage::ImageRgb8(b) => (b.into_raw(), PixelFormat::Rgb8),
        DynamicImage::ImageRgba8(b) => (b.into_raw(), PixelFormat::Rgba8),
        DynamicImage::ImageLumaA16(_) => {
            (img.into_luma_alpha8().into_raw(), PixelFormat::GrayAlpha8)
        }
        other if other.color().has_alpha() => (other.into_rgba8().into_raw(), PixelFormat::Rgba8),
        other => (other.into_rgb8().into_raw(), PixelFormat::Rgb8),
    };
    Ok(DecodedImage {
        data,
        width,
        height,
        format,
        orientation: applied,
    })
}

/// An image file decoded for an image family's runner ([`crate::family::Runner::load`]): the
/// input label (the path as given) and its pixels.
pub struct ImageInput {
    /// The path as given.
    pub label: String,
    /// The decoded pixels.
    pub image: DecodedImage,
}

impl ImageInput {
    /// Decode `path` ([`decode_file`]).
    ///
    /// # Errors
    /// [`DecodeError`] naming the file.
    pub fn load(path: &Path, orientation: Orientation) -> Result<Self, DecodeError> {
        Ok(ImageInput {
            label: path.display().to_string(),
            image: decode_file(path, orientation)?,
        })
    }

    /// The input `source` names, for the image family `family`: a file, decoded with
    /// `orientation`; text is refused.
    ///
    /// # Errors
    /// [`DecodeError`] naming the file; text.
    pub fn from_source(
        source: crate::family::InputSource<'_>,
        orientation: Orientation,
        family: &str,
    ) -> anyhow::Result<Box<dyn crate::family::Input>> {
        match source {
            crate::family::InputSource::File(path) => {
                Ok(Box::new(ImageInput::load(path, orientation)?))
            }
            crate::family::InputSource::Text(_) => {
                anyhow::bail!("the {family} family reads images, not text")
            }
        }
    }

    /// A result's one-line summary: `counted` (`3 detections`), then the image's size and
    /// whether its orientation tag was applied (`3 detections (640x480, EXIF orientation
    /// applied)`).
    pub fn summary(&self, counted: &str) -> String {
        format!(
            "{counted} ({}x{}{})",
            self.image.width,
            self.image.height,
            if self.image.orientation.is_some() {
                ", EXIF orientation applied"
            } else {
                ""
            }
        )
    }

    /// Add the image's part of a result's JSON object to `json`: `image_width`,
    /// `image_height`, `orientation_applied`.
    pub fn add_to_json(&self, json: &mut serde_json::Value) {
        json["image_width"] = self.image.width.into();
        json["image_height"] = self.image.height.into();
        json["orientation_applied"] = self.image.orientation.clone().into();
    }

    /// `input` as an image input, or an error naming `family` (an input another family
    /// loaded).
    ///
    /// # Errors
    /// `input` is not an [`ImageInput`].
    pub fn of<'a>(input: &'a dyn crate::family::Input, family: &str) -> anyhow::Result<&'a Self> {
        crate::family::input_as(input, &format!("an image input of the {family} family"))
    }
}

impl crate::family::Input for ImageInput {
    fn label(&self) -> &str {
        &self.label
    }
    fn describe(&self) -> String {
        let mut s = format!(
            "{}x{} {:?}",
            self.image.width, self.image.height, self.image.format
        );
        if let Some(o) = &self.image.orientation {
            s.push_str(&format!(", EXIF orientation applied ({o})"));
        }
        s
    }
}
