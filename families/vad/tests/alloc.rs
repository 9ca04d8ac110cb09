//! Allocation accounting on the streaming path, with a counting global
//! allocator (this thread's allocations only).
//!
//! - The segment logic (`SegmentTracker`, fixed-capacity events) never
//!   allocates.
//! - `Vad::push_chunk`: this crate's code (window, context, state ping-pong,
//!   tracker) allocates nothing; the tract CPU engine allocates its
//!   intermediate tensors inside every run. The test checks that the count is
//!   the same for every chunk after warm-up (no growth, nothing retained) and
//!   prints it, so the engine's share is on record.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use tether_vad::{CHUNK_SAMPLES, SegmentTracker, Vad, VadConfig, read_wav};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; the only
// addition is a thread-local counter increment, which does not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

#[test]
fn segment_tracker_never_allocates() {
    let mut t = SegmentTracker::new(&VadConfig::default(), CHUNK_SAMPLES);
    // A deterministic speech/silence pattern with many segments.
    let mut events = 0usize;
    let before = allocs();
    for i in 0..100_000u64 {
        let p = if (i / 37) % 3 == 0 { 0.1 } else { 0.9 };
        events += t.push(p).len();
    }
    events += t.finish(100_000 * CHUNK_SAMPLES as u64).len();
    let after = allocs();
    assert!(events > 1000, "{events}");
    assert_eq!(after - before, 0, "the tracker allocated");
}

#[test]
fn push_chunk_allocations_are_the_engines_and_do_not_grow() {
    let model = tether_testkit::asset("silero_vad_op18_ifless.onnx");
    let wav = tether_testkit::asset("Front_Center.wav");
    let onnx = std::fs::read(model).expect("model");
    let audio = read_wav(wav).expect("wav");
    let mut vad = Vad::from_onnx(&onnx, VadConfig::default()).expect("vad");
    let chunks: Vec<&[f32]> = audio.samples.chunks_exact(CHUNK_SAMPLES).collect();
    let mut per_chunk = Vec::new();
    for i in 0..400 {
        let c = chunks[i % chunks.len()];
        let before = allocs();
        let r = vad.push_chunk(c).expect("chunk");
        per_chunk.push(allocs() - before);
        std::hint::black_box(r);
    }
    let steady = &per_chunk[50..];
    let (min, max) = (
        *steady.iter().min().expect("min"),
        *steady.iter().max().expect("max"),
    );
    println!("allocations per push_chunk (tract CPU engine intermediates): {min}..={max}");
    assert_eq!(min, max, "allocations per chunk vary: {min}..={max}");
}
