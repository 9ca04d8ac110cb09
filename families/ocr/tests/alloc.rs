//! The host stages of the pipeline allocate nothing once their buffers have
//! seen an image: a counting global allocator around 200 repetitions of DB
//! post-processing, line cutting (perspective warp + 90-degree turn),
//! resizing and CTC decoding on fixed inputs.
//!
//! (The networks are left out: the tract CPU engine allocates its
//! intermediates inside every run, see `runtime/src/cpu.rs`.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use tether_ocr::OcrConfig;
use tether_ocr::ctc::{Dictionary, decode};
use tether_ocr::db::{DbPostprocessor, DetBox};
use tether_ocr::image::BgrImage;
use tether_ocr::resize::{ResizeScratch, resize_linear};
use tether_ocr::warp::{perspective_transform, rotate90_ccw, warp_perspective_cubic};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A probability map with a few text-like bars, one tilted, one with a hole.
fn map(w: usize, h: usize) -> Vec<f32> {
    let mut m = vec![0.02f32; w * h];
    let mut bar = |x0: usize, y0: usize, len: usize, th: usize, slope: f32| {
        for i in 0..len {
            for t in 0..th {
                let y = y0 as f32 + i as f32 * slope + t as f32;
                let (x, y) = (x0 + i, y as usize);
                if x < w && y < h {
                    m[y * w + x] = 0.9;
                }
            }
        }
    };
    bar(10, 10, 150, 12, 0.0);
    bar(20, 40, 120, 10, 0.15);
    bar(180, 20, 40, 30, 0.0);
    bar(5, 90, 230, 9, -0.05);
    for y in 30..38 {
        for x in 195..205 {
            m[y * w + x] = 0.02;
        }
    }
    m
}

#[test]
fn host_stages_do_not_allocate_after_warm_up() {
    let (w, h) = (240, 120);
    let prob = map(w, h);
    let config = OcrConfig::rapidocr(5);
    let mut db = DbPostprocessor::with_capacity(w * h, 1000);
    let mut boxes: Vec<DetBox> = Vec::with_capacity(1000);
    let mut image = BgrImage::default();
    image.resize(w, h);
    for (i, v) in image.pixels_mut().iter_mut().enumerate() {
        *v = (i * 31 % 251) as u8;
    }
    let (mut crop, mut turned, mut line) = (
        BgrImage::default(),
        BgrImage::default(),
        BgrImage::default(),
    );
    let mut rs = ResizeScratch::default();
    let dict = Dictionary::from_metadata("a\nb\nc").expect("dict");
    let probs: Vec<f32> = (0..40 * 5).map(|i| ((i * 7) % 5) as f32 / 5.0).collect();
    let mut text = String::with_capacity(1024);

    let mut round = |count_from: Option<usize>| {
        db.run(&prob, w, h, w, h, &config, &mut boxes).expect("db");
        assert!(boxes.len() >= 3, "{boxes:?}");
        for b in &boxes {
            let p = b.points;
            let cw = (p[1][0] - p[0][0]).abs().max(4.0) as usize;
            let ch = (p[3][1] - p[0][1]).abs().max(4.0) as usize;
            let dst = [
                [0.0, 0.0],
                [cw as f32, 0.0],
                [cw as f32, ch as f32],
                [0.0, ch as f32],
            ];
            let m = perspective_transform(&p, &dst).expect("homography");
            warp_perspective_cubic(&image, &m, cw, ch, &mut crop);
            rotate90_ccw(&crop, &mut turned);
            line.resize(96, 48);
            resize_linear(
                crop.pixels(),
                cw,
                ch,
                cw * 3,
                3,
                &mut line.data,
                96,
                48,
                &mut rs,
            );
        }
        text.clear();
        decode(&probs, &dict, &mut text).expect("decode");
        count_from.map(|start| ALLOCATIONS.load(Ordering::Relaxed) - start)
    };
    round(None);
    round(None);
    let start = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..200 {
        round(Some(start));
    }
    let n = ALLOCATIONS.load(Ordering::Relaxed) - start;
    assert_eq!(n, 0, "{n} allocations in 200 rounds of the host stages");
}
