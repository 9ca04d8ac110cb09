//! Annotated images for tools (feature `cli`, `tether run --annotate`): an RGB copy of a
//! decoded input, bounded in size, with outlines and labels drawn on it.
//!
//! What every image family draws the same way lives here: the copy (at most
//! [`MAX_ANNOTATED_SIDE`] pixels a side, decimated straight from the source when larger, so
//! memory stays bounded whatever the input), the mapping of source pixels onto it, line
//! widths and label size that grow with the image, clipping at the edges, and a label box
//! (filled in the outline's colour, black ASCII text in one of `embedded-graphics`' mono
//! fonts: the 10x20 font from 800 pixels up, else 6x10; other characters are drawn as `?`).
//! What is drawn, and in which colour, is the family's.

use embedded_graphics::mono_font::{MonoFont, MonoTextStyle, ascii::FONT_6X10, ascii::FONT_10X20};
use embedded_graphics::pixelcolor::Rgb888;
use embedded_graphics::prelude::*;
use embedded_graphics::primitives::{
    Line, PrimitiveStyle, PrimitiveStyleBuilder, Rectangle, StrokeAlignment,
};
use embedded_graphics::text::{Baseline, Text};
use image::RgbImage;

use crate::decode::DecodedImage;

/// Largest side of an annotated image, in pixels: larger inputs are annotated on a
/// downscaled copy (memory stays bounded whatever the input size).
pub const MAX_ANNOTATED_SIDE: u32 = 4096;

/// A colour, `0xRRGGBB`.
pub type Colour = Rgb888;

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

/// An RGB copy of an input being annotated, and the scale from source pixels to its pixels.
pub struct Annotation {
    image: RgbImage,
    scale: f64,
    font: &'static MonoFont<'static>,
}

impl Annotation {
    /// An RGB copy of `image`, at most [`MAX_ANNOTATED_SIDE`] a side (decimated from the
    /// source, nearest pixel, when larger: one output-sized buffer, no full-size copy).
    pub fn new(image: &DecodedImage) -> Self {
        let long = image.width.max(image.height);
        let (copy, scale) = if long <= MAX_ANNOTATED_SIDE {
            (image.to_rgb8(), 1.0)
        } else {
            let shrink = f64::from(MAX_ANNOTATED_SIDE) / f64::from(long);
            (decimate(image, shrink), shrink)
        };
        let font = if copy.width().max(copy.height()) >= 800 {
            &FONT_10X20
        } else {
            &FONT_6X10
        };
        Annotation {
            image: copy,
            scale,
            font,
        }
    }

    /// Annotated image pixels per source pixel (1, or less for a large input).
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// A line width that grows with the image: `1 / per` of its long side, at least `min`
    /// pixels.
    pub fn stroke(&self, per: u32, min: u32) -> u32 {
        (self.image.width().max(self.image.height()) / per).max(min)
    }

    /// `(x, y)` in source pixels as a point `(x, y)` of the annotated image (rounded).
    pub fn point(&self, x: f64, y: f64) -> (i32, i32) {
        (
            (x * self.scale).round() as i32,
            (y * self.scale).round() as i32,
        )
    }

    /// The outline of the axis-aligned box `[x1, y1, x2, y2]` (source pixels), `stroke`
    /// pixels wide, drawn inside the box.
    pub fn outline_box(&mut self, bbox: [f64; 4], colour: Colour, stroke: u32) {
        let (a, b) = (self.point(bbox[0], bbox[1]), self.point(bbox[2], bbox[3]));
        let size = Size::new((b.0 - a.0).max(1) as u32, (b.1 - a.1).max(1) as u32);
        let style = PrimitiveStyleBuilder::new()
            .stroke_color(colour)
            .stroke_width(stroke)
            .stroke_alignment(StrokeAlignment::Inside)
            .build();
        let _ = Rectangle::new(Point::new(a.0, a.1), size)
            .into_styled(style)
            .draw(&mut Canvas(&mut self.image));
    }

    /// The closed outline through `corners` (source pixels), `stroke` pixels wide.
    pub fn outline_polygon(&mut self, corners: &[[f64; 2]], colour: Colour, stroke: u32) {
        let pts: Vec<Point> = corners
            .iter()
            .map(|p| {
                let (x, y) = self.point(p[0], p[1]);
                Point::new(x, y)
            })
            .collect();
        let style = PrimitiveStyle::with_stroke(colour, stroke);
        let mut canvas = Canvas(&mut self.image);
        for (i, &p) in pts.iter().enumerate() {
            let _ = Line::new(p, pts[(i + 1) % pts.len()])
                .into_styled(style)
                .draw(&mut canvas);
        }
    }

    /// A label at `at` (a point of the annotated image, usually a box's top-left corner):
    /// `text` in black on a box filled with `colour`, above the point when it fits there,
    /// else below it. Characters the ASCII fonts lack are drawn as `?`.
    pub fn label(&mut self, at: (i32, i32), text: &str, colour: Colour) {
        let at = Point::new(at.0, at.1);
        let text: String = text
            .chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        let f = self.font;
        let (fw, fh) = (
            f.character_size.width + f.character_spacing,
            f.character_size.height,
        );
        let (tw, th) = (fw * text.chars().count() as u32 + 4, fh + 2);
        let ty = if at.y >= th as i32 {
            at.y - th as i32
        } else {
            at.y
        };
        let mut canvas = Canvas(&mut self.image);
        let _ = Rectangle::new(Point::new(at.x, ty), Size::new(tw, th))
            .into_styled(PrimitiveStyle::with_fill(colour))
            .draw(&mut canvas);
        let _ = Text::with_baseline(
            &text,
            Point::new(at.x + 2, ty + 1),
            MonoTextStyle::new(f, Rgb888::BLACK),
            Baseline::Top,
        )
        .draw(&mut canvas);
    }

    /// The annotated image.
    pub fn into_image(self) -> RgbImage {
        self.image
    }
}

/// `image` scaled by `shrink` (< 1), nearest source pixel, read straight from the source.
fn decimate(image: &DecodedImage, shrink: f64) -> RgbImage {
    let w = ((f64::from(image.width) * shrink).round() as u32).max(1);
    let h = ((f64::from(image.height) * shrink).round() as u32).max(1);
    let view = image.view();
    let ch = view.format().channels();
    let offs = view.format().rgb_offsets();
    let d = view.data();
    let mut o = RgbImage::new(w, h);
    for (x, y, px) in o.enumerate_pixels_mut() {
        let sx = ((f64::from(x) + 0.5) / shrink) as usize;
        let sy = ((f64::from(y) + 0.5) / shrink) as usize;
        let i = sy.min(image.height as usize - 1) * view.stride()
            + sx.min(image.width as usize - 1) * ch;
        *px = image::Rgb([d[i + offs[0]], d[i + offs[1]], d[i + offs[2]]]);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vision::PixelFormat;

    fn black(w: u32, h: u32) -> DecodedImage {
        DecodedImage::new(vec![0; (w * h * 3) as usize], w, h, PixelFormat::Rgb8).unwrap()
    }

    const RED: Colour = Rgb888::new(0xFF, 0, 0);

    #[test]
    fn small_images_keep_their_size_and_boxes_are_drawn_inside() {
        let mut a = Annotation::new(&black(500, 500));
        assert_eq!(a.scale(), 1.0);
        assert_eq!(a.stroke(400, 2), 2);
        a.outline_box([100.0, 100.0, 200.0, 200.0], RED, 2);
        let out = a.into_image();
        assert_eq!(out.dimensions(), (500, 500), "no silent upscaling");
        assert_eq!(out.get_pixel(150, 100).0, [0xFF, 0, 0]);
        assert_eq!(out.get_pixel(150, 101).0, [0xFF, 0, 0]);
        assert_eq!(out.get_pixel(150, 99).0, [0, 0, 0], "inside alignment");
        assert_eq!(out.get_pixel(150, 150).0, [0, 0, 0], "interior untouched");
    }

    #[test]
    fn large_images_are_decimated_and_coordinates_scaled() {
        let mut img = black(8192, 2048);
        // A bright source pixel the decimation reads: output (10, 10) samples (21, 21).
        let i = (21 * 8192 + 21) * 3;
        img.data[i..i + 3].copy_from_slice(&[7, 8, 9]);
        let mut a = Annotation::new(&img);
        assert_eq!(a.scale(), 0.5);
        assert_eq!(a.stroke(400, 2), 10);
        a.outline_polygon(
            &[
                [4096.0, 1024.0],
                [6144.0, 1024.0],
                [6144.0, 1536.0],
                [4096.0, 1536.0],
            ],
            RED,
            1,
        );
        let out = a.into_image();
        assert_eq!(out.dimensions(), (4096, 1024));
        assert_eq!(out.get_pixel(10, 10).0, [7, 8, 9]);
        assert_eq!(out.get_pixel(2500, 768).0, [0xFF, 0, 0], "bottom edge");
        assert_eq!(out.get_pixel(2500, 700).0, [0, 0, 0]);
    }

    #[test]
    fn labels_sit_above_the_point_when_they_fit() {
        let mut a = Annotation::new(&black(200, 200));
        a.label((50, 50), "x", RED);
        a.label((50, 0), "文", RED);
        let out = a.into_image();
        // 6x10 font: the box is 12 px tall, from y = 38 to 49 above the point.
        assert_eq!(out.get_pixel(50, 38).0, [0xFF, 0, 0]);
        assert_eq!(out.get_pixel(50, 37).0, [0, 0, 0]);
        // At the top edge it goes below; a non-ASCII character is one `?` wide.
        assert_eq!(out.get_pixel(50, 5).0, [0xFF, 0, 0]);
        assert_eq!(out.get_pixel(50 + 6 + 4, 5).0, [0, 0, 0]);
    }
}
