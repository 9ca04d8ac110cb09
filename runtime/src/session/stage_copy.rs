//! Copying a frame into a session's input staging.
//!
//! On a discrete GPU the staging is page-locked host memory the captured graph's upload
//! reads by DMA. A plain `memcpy` of a frame (a 512x512 RGB frame is 768 KiB) leaves its
//! lines modified in the writing core's caches, and the DMA read then has to fetch them from
//! there: on the H200 host (Xeon, PCIe) the 320n frame's upload took 0.043 ms after a plain
//! copy, 0.020 ms when the staging had not been written since the last run, and 0.021-0.023
//! ms after a copy with streaming (non-temporal) stores, which write the lines to memory
//! without keeping them in the caches; the copy itself was as fast or faster
//! (`docs/evidence/native-h200.md`, sixth run, call 3). The store fence after the streaming
//! stores orders them before the graph launch that follows. Frames below
//! [`STREAM_MIN_BYTES`] are copied plainly (a few microseconds either way), and so is every
//! frame on other architectures: on an integrated GPU (Jetson) the staging is mapped and the
//! kernels read it in place. Writing the frame into the staging in place avoids the copy
//! altogether.

/// Copies of at least this many bytes use streaming stores on x86-64 (64 KiB).
pub const STREAM_MIN_BYTES: usize = 64 * 1024;

/// Copy `src` into the start of `dst` (a staging buffer the GPU reads next), with streaming
/// stores on x86-64 for copies of at least [`STREAM_MIN_BYTES`]. The bytes written are
/// exactly `src`'s; `dst` past `src.len()` is untouched. No allocation.
///
/// Returns the bytes copied: `src.len()`, or `dst.len()` when `dst` is shorter (never a
/// panic; callers size the staging for the frame, so a short count is their bug to report).
pub fn copy_to_staging(dst: &mut [u8], src: &[u8]) -> usize {
    let n = src.len().min(dst.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    // Miri cannot run the streaming store (an inline `movntdq`): plain copy under it.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if n >= STREAM_MIN_BYTES {
        stream_copy(dst, src);
        return n;
    }
    dst.copy_from_slice(src);
    n
}

/// `dst.copy_from_slice(src)` with 16-byte non-temporal stores for the body from dst's first
/// 64-byte (cache-line) boundary, whole lines at a time, then a store fence. `dst` and `src`
/// have the same length.
#[cfg(all(target_arch = "x86_64", not(miri)))]
fn stream_copy(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    const CHUNK: usize = 64;
    let n = dst.len();
    // Plain stores up to dst's first cache-line boundary, so that every streamed chunk is
    // one whole line (write-combining buffers flush full lines).
    let head = dst.as_ptr().align_offset(CHUNK).min(n);
    dst[..head].copy_from_slice(&src[..head]);
    let body = (n - head) / CHUNK * CHUNK;
    let (d, s) = (&mut dst[head..head + body], &src[head..head + body]);
    for (dc, sc) in d.chunks_exact_mut(CHUNK).zip(s.chunks_exact(CHUNK)) {
        let dp = dc.as_mut_ptr().cast::<__m128i>();
        let sp = sc.as_ptr().cast::<__m128i>();
        // SAFETY: SSE2 is part of the x86-64 baseline. Each chunk is CHUNK = 4 * 16 bytes of
        // both slices, so the four loads and stores stay inside them; loads are unaligned
        // (`loadu`), and stores are 16-byte aligned because dc starts at `head` (dst aligned
        // to 64 there) plus a multiple of 64.
        unsafe {
            let a = _mm_loadu_si128(sp);
            let b = _mm_loadu_si128(sp.add(1));
            let c = _mm_loadu_si128(sp.add(2));
            let e = _mm_loadu_si128(sp.add(3));
            _mm_stream_si128(dp, a);
            _mm_stream_si128(dp.add(1), b);
            _mm_stream_si128(dp.add(2), c);
            _mm_stream_si128(dp.add(3), e);
        }
    }
    dst[head + body..].copy_from_slice(&src[head + body..]);
    // SAFETY: SSE2 baseline; a fence has no memory operands. It makes the streaming stores
    // globally visible before any later store (the graph launch).
    unsafe { _mm_sfence() };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length around the threshold and every misalignment of both sides copies
    /// exactly, and leaves the rest of dst alone.
    #[test]
    fn copies_exactly_at_every_alignment_and_length() {
        let src: Vec<u8> = (0..STREAM_MIN_BYTES * 2 + 300)
            .map(|i| (i * 131 % 251) as u8)
            .collect();
        let mut dst = vec![0u8; src.len() + 64];
        for len in [
            0,
            1,
            17,
            4095,
            STREAM_MIN_BYTES - 1,
            STREAM_MIN_BYTES,
            STREAM_MIN_BYTES + 63,
            STREAM_MIN_BYTES * 2 + 7,
        ] {
            for s_off in [0, 1, 15] {
                for d_off in [0, 3, 16, 33] {
                    dst.fill(0xEE);
                    let s = &src[s_off..s_off + len];
                    let n = copy_to_staging(&mut dst[d_off..], s);
                    assert_eq!(n, len);
                    assert_eq!(&dst[d_off..d_off + len], s, "len {len} s+{s_off} d+{d_off}");
                    assert!(dst[..d_off].iter().all(|&b| b == 0xEE), "before dst");
                    assert!(dst[d_off + len..].iter().all(|&b| b == 0xEE), "after dst");
                }
            }
        }
    }

    /// A destination shorter than the source gets what fits; the count says so.
    #[test]
    fn a_short_destination_is_filled_not_overrun() {
        let src = vec![7u8; STREAM_MIN_BYTES + 100];
        let mut dst = vec![0u8; STREAM_MIN_BYTES + 10];
        assert_eq!(copy_to_staging(&mut dst, &src), STREAM_MIN_BYTES + 10);
        assert!(dst.iter().all(|&b| b == 7));
    }
}
