//! The smallest use of tether in an application (Rust): open a detection bundle, detect in
//! one camera frame (RGB8, row-major), print the boxes.
//!
//! ```text
//! detect-minimal BUNDLE [FRAME.rgb WIDTH HEIGHT]
//! ```
//! (`ffmpeg -i img.png -pix_fmt rgb24 -f rawvideo FRAME.rgb` makes a frame; without one, a
//! grey 640x480 frame is used.)

use tether::detect::{Detector, ImageView, PixelFormat};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: detect-minimal BUNDLE [FRAME.rgb WIDTH HEIGHT]";
    let bundle = args.first().ok_or(usage)?;
    let (frame, width, height) = match args.get(1..4) {
        Some([path, w, h]) => (std::fs::read(path)?, w.parse()?, h.parse()?),
        _ => (vec![114u8; 640 * 480 * 3], 640, 480),
    };
    // Maps the bundle and prepares the network on the best engine for this machine.
    let mut detector = Detector::load(bundle)?;
    let labels = detector.labels().to_vec();
    let image = ImageView::new(&frame, width, height, PixelFormat::Rgb8)?;
    for d in detector.detect(&image)? {
        let (b, name) = (d.bbox, labels.get(usize::from(d.class_id)));
        let name = name.map_or("?", String::as_str);
        println!(
            "{name} {:.2} [{:.0}, {:.0}, {:.0}, {:.0}]",
            d.score, b.x1, b.y1, b.x2, b.y2
        );
    }
    Ok(())
}
