//! Annotated images: boxes and labels drawn with `embedded-graphics`.

use embedded_graphics::mono_font::{MonoTextStyle, ascii::FONT_6X10};
use embedded_graphics::pixelcolor::Rgb888;
use embedded_graphics::prelude::*;
use embedded_graphics::primitives::{PrimitiveStyle, Rectangle};
use embedded_graphics::text::{Baseline, Text};
use image::RgbImage;
use tether_detect::Detection;

/// `embedded-graphics` draw target over an `image` RGB buffer (clips at the edges).
struct Canvas<'a>(&'a mut RgbImage);

impl OriginDimensions for Canvas<'_> {
    fn size(&self) -> Size {
        Size::new(self.0.width(), self.0.height())
    }
}

impl DrawTarget for Canvas<'_> {
    type Color = Rgb888;
    type Error = std::convert::Infallible;

    fn draw_iter<I: IntoIterator<Item = Pixel<Rgb888>>>(
        &mut self,
        pixels: I,
    ) -> Result<(), Self::Error> {
        let (w, h) = (self.0.width() as i32, self.0.height() as i32);
        for Pixel(p, c) in pixels {
            if (0..w).contains(&p.x) && (0..h).contains(&p.y) {
                self.0
                    .put_pixel(p.x as u32, p.y as u32, image::Rgb([c.r(), c.g(), c.b()]));
            }
        }
        Ok(())
    }
}

/// A distinct colour per class (the Ultralytics palette's first entries, cycled;
/// ultralytics/utils/plotting.py `Colors`).
fn colour(class_id: u16) -> Rgb888 {
    const PALETTE: [u32; 10] = [
        0xFF3838, 0xFF9D97, 0xFF701F, 0xFFB21D, 0xCFD231, 0x48F90A, 0x92CC17, 0x3DDB86, 0x1A9334,
        0x00D4BB,
    ];
    let c = PALETTE[usize::from(class_id) % PALETTE.len()];
    Rgb888::new((c >> 16) as u8, (c >> 8) as u8, c as u8)
}

/// Draw every detection (box, "name score" label) on a copy of `image`.
/// Images smaller than 400 px on the long side are upscaled 2x first so the
/// labels stay legible.
pub fn draw(image: &RgbImage, dets: &[Detection], labels: &[String]) -> RgbImage {
    let k = if image.width().max(image.height()) < 400 {
        2
    } else {
        1
    };
    let mut out = if k == 1 {
        image.clone()
    } else {
        image::imageops::resize(
            image,
            image.width() * k,
            image.height() * k,
            image::imageops::FilterType::Nearest,
        )
    };
    let kf = k as f32;
    let mut canvas = Canvas(&mut out);
    for d in dets {
        let c = colour(d.class_id);
        let (x1, y1) = (
            (d.bbox.x1 * kf).round() as i32,
            (d.bbox.y1 * kf).round() as i32,
        );
        let (x2, y2) = (
            (d.bbox.x2 * kf).round() as i32,
            (d.bbox.y2 * kf).round() as i32,
        );
        let size = Size::new((x2 - x1).max(1) as u32, (y2 - y1).max(1) as u32);
        let _ = Rectangle::new(Point::new(x1, y1), size)
            .into_styled(PrimitiveStyle::with_stroke(c, 2))
            .draw(&mut canvas);
        let name = labels
            .get(usize::from(d.class_id))
            .map_or("?", String::as_str);
        let text = format!("{name} {:.2}", d.score);
        let tw = 6 * text.len() as u32 + 4;
        let ty = if y1 >= 12 { y1 - 12 } else { y1 };
        let _ = Rectangle::new(Point::new(x1, ty), Size::new(tw, 12))
            .into_styled(PrimitiveStyle::with_fill(c))
            .draw(&mut canvas);
        let _ = Text::with_baseline(
            &text,
            Point::new(x1 + 2, ty + 1),
            MonoTextStyle::new(&FONT_6X10, Rgb888::BLACK),
            Baseline::Top,
        )
        .draw(&mut canvas);
    }
    out
}

/// Writes `image` to `path` atomically (`tether_bundle::files::AtomicFile`):
/// the file appears complete or not at all, even on Ctrl-C; a destination
/// that is not a regular file (a FIFO, `/dev/null`, a directory) is refused.
/// The format follows the extension as `image::save` does (PNG when there is
/// none or it is unknown).
///
/// # Errors
/// The destination check, the encoder, or the write, naming `path`.
pub fn save(image: &RgbImage, path: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let format = image::ImageFormat::from_path(path).unwrap_or(image::ImageFormat::Png);
    let mut out = tether_bundle::files::AtomicFile::create(path)?;
    image
        .write_to(&mut out, format)
        .with_context(|| format!("encoding {}", path.display()))?;
    out.persist()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_detect::BoundingBox;

    #[test]
    fn save_writes_a_complete_png_and_refuses_a_fifo() {
        let dir = std::env::temp_dir().join(format!("tether-annotate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let img = RgbImage::from_pixel(7, 5, image::Rgb([1, 2, 3]));
        let png = dir.join("out.png");
        save(&img, &png).unwrap();
        let back = image::open(&png).unwrap().to_rgb8();
        assert_eq!(back, img);
        let fifo = dir.join("fifo.png");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let e = save(&img, &fifo).unwrap_err();
        assert!(format!("{e:#}").contains("FIFO"), "{e:#}");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 2, "{left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn draws_the_box_outline_in_the_class_colour() {
        let img = RgbImage::from_pixel(500, 500, image::Rgb([0, 0, 0]));
        let d = Detection {
            class_id: 0,
            score: 0.9,
            bbox: BoundingBox {
                x1: 100.0,
                y1: 100.0,
                x2: 200.0,
                y2: 200.0,
            },
        };
        let out = draw(&img, &[d], &["person".into()]);
        assert_eq!(out.get_pixel(150, 100).0, [0xFF, 0x38, 0x38]);
        assert_eq!(
            out.get_pixel(150, 150).0,
            [0, 0, 0],
            "box interior untouched"
        );
    }
}
