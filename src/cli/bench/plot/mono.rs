//! A bitmap backend whose text is drawn with embedded-graphics' mono fonts: plotters'
//! own bitmap text needs system fonts (font-kit) or a font file, neither of which a
//! robot's image has.

use embedded_graphics::mono_font::ascii::{FONT_6X10, FONT_7X13, FONT_9X15, FONT_10X20};
use embedded_graphics::mono_font::{MonoFont, MonoTextStyle};
use embedded_graphics::pixelcolor::Rgb888;
use embedded_graphics::prelude::*;
use embedded_graphics::text::{Baseline, Text};
use plotters::prelude::{BitMapBackend, DrawingBackend};
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
};

/// The wrapped bitmap backend.
pub struct MonoText<'a>(pub BitMapBackend<'a>);

/// The mono font whose advance is closest to the width plotters lays text out with
/// (its font-less estimate: 0.7 em a character, an em being `size / 1.24^2`), so
/// captions and legends fit the boxes plotters computes for them.
fn font(size: f64) -> &'static MonoFont<'static> {
    let want = size / (1.24 * 1.24) * 0.7;
    [&FONT_6X10, &FONT_7X13, &FONT_9X15, &FONT_10X20]
        .into_iter()
        .min_by(|a, b| {
            let d = |f: &MonoFont<'_>| {
                (f64::from(f.character_size.width + f.character_spacing) - want).abs()
            };
            d(a).total_cmp(&d(b))
        })
        .unwrap_or(&FONT_6X10)
}

fn extent(text: &str, f: &MonoFont<'_>) -> (u32, u32) {
    let n = text.chars().count() as u32;
    (
        n * (f.character_size.width + f.character_spacing),
        f.character_size.height,
    )
}

/// Collects the pixels a text sets.
struct Pixels(Vec<(i32, i32)>);

impl OriginDimensions for Pixels {
    fn size(&self) -> Size {
        Size::new(1 << 15, 1 << 15)
    }
}

impl DrawTarget for Pixels {
    type Color = Rgb888;
    type Error = std::convert::Infallible;
    fn draw_iter<I: IntoIterator<Item = Pixel<Rgb888>>>(
        &mut self,
        pixels: I,
    ) -> Result<(), Self::Error> {
        self.0
            .extend(pixels.into_iter().map(|Pixel(p, _)| (p.x, p.y)));
        Ok(())
    }
}

type Error<'a> = DrawingErrorKind<<BitMapBackend<'a> as DrawingBackend>::ErrorType>;

impl<'a> DrawingBackend for MonoText<'a> {
    type ErrorType = <BitMapBackend<'a> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }
    fn ensure_prepared(&mut self) -> Result<(), Error<'a>> {
        self.0.ensure_prepared()
    }
    fn present(&mut self) -> Result<(), Error<'a>> {
        self.0.present()
    }
    fn draw_pixel(&mut self, p: BackendCoord, c: BackendColor) -> Result<(), Error<'a>> {
        self.0.draw_pixel(p, c)
    }
    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), Error<'a>> {
        self.0.draw_line(from, to, style)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        ul: BackendCoord,
        br: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), Error<'a>> {
        self.0.draw_rect(ul, br, style, fill)
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), Error<'a>> {
        self.0.draw_path(path, style)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), Error<'a>> {
        self.0.fill_polygon(vert, style)
    }
    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), Error<'a>> {
        self.0.draw_circle(center, radius, style, fill)
    }

    fn estimate_text_size<T: BackendTextStyle>(
        &self,
        text: &str,
        style: &T,
    ) -> Result<(u32, u32), Error<'a>> {
        Ok(extent(text, font(style.size())))
    }

    fn draw_text<T: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &T,
        pos: BackendCoord,
    ) -> Result<(), Error<'a>> {
        let colour = style.color();
        if colour.alpha == 0.0 {
            return Ok(());
        }
        let f = font(style.size());
        let (w, h) = extent(text, f);
        let (w, h) = (w as i32, h as i32);
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Right => -w,
            HPos::Center => -w / 2,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -h / 2,
            VPos::Bottom => -h,
        };
        let mut pixels = Pixels(Vec::new());
        let _ = Text::with_baseline(
            text,
            Point::zero(),
            MonoTextStyle::new(f, Rgb888::BLACK),
            Baseline::Top,
        )
        .draw(&mut pixels);
        let trans = style.transform();
        let (bw, bh) = self.get_size();
        for (x, y) in pixels.0 {
            let (x, y) = trans.transform(x + dx, y + dy);
            let (x, y) = (pos.0 + x, pos.1 + y);
            if x >= 0 && y >= 0 && x < bw as i32 && y < bh as i32 {
                self.0.draw_pixel((x, y), colour)?;
            }
        }
        Ok(())
    }
}
