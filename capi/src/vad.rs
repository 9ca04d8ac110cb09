//! Voice activity: a stream of 16 kHz mono samples in any pieces, one result per 512-sample
//! chunk into a caller array.

use tether_vad::{CHUNK_SAMPLES, ChunkResult, SAMPLE_RATE, SegmentEvent, Vad};

use crate::error::{Failure, Result, non_null, tether_status};
use crate::model::{Family, tether_model, with_model, wrong_family};

/// `tether_vad_chunk::events` bit: a speech segment is now certain; `speech_start` is its
/// padded first sample (in the past).
pub const TETHER_VAD_SPEECH_START: u32 = 1;
/// `tether_vad_chunk::events` bit: a speech segment ended; `speech_start` and
/// `speech_end` are its padded bounds.
pub const TETHER_VAD_SPEECH_END: u32 = 2;

/// The result of one 512-sample chunk (32 ms at 16 kHz).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct tether_vad_chunk {
    /// Chunk index since the stream's start or last reset (0, 1, ...); its first sample is
    /// `index * 512`.
    pub index: u64,
    /// Speech probability of the chunk, in [0, 1].
    pub probability: f32,
    /// `TETHER_VAD_SPEECH_START` and/or `TETHER_VAD_SPEECH_END` bits (0: no event).
    pub events: u32,
    /// With either event: the segment's padded first sample at 16 kHz.
    pub speech_start: u64,
    /// With `TETHER_VAD_SPEECH_END`: the segment's end sample (exclusive) at 16 kHz.
    pub speech_end: u64,
}

/// What ending a stream produced (`tether_vad_finish`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct tether_vad_end {
    /// Nonzero when a partial chunk was pending: it was zero-padded and run, `last` holds
    /// its result.
    pub has_last: u32,
    /// The last chunk's result (when `has_last`).
    pub last: tether_vad_chunk,
    /// Events of closing the stream not in `last` (a segment still open ends at the
    /// stream's length): `TETHER_VAD_SPEECH_END` with `speech_start`, `speech_end`.
    pub events: u32,
    /// With `events`: the segment's padded first sample.
    pub speech_start: u64,
    /// With `events`: the segment's end sample (exclusive).
    pub speech_end: u64,
    /// Samples in the stream at 16 kHz.
    pub samples: u64,
}

/// The voice-activity state behind a handle.
pub(crate) struct VadModel {
    pub(crate) vad: Vad,
    /// Samples waiting for the next chunk (mirrors the stream's own count, which it keeps
    /// private), to size a call's output before running anything.
    pub(crate) pending: usize,
}

fn vad_model<'a>(m: &'a mut tether_model, call: &str) -> Result<&'a mut VadModel> {
    match &mut m.family {
        Family::Vad(v) => Ok(v),
        other => Err(wrong_family(
            other,
            &m.bundle_name,
            call,
            tether_vad::FAMILY,
        )),
    }
}

/// Apply `events` to a record's event fields.
fn put_events(
    events: &tether_vad::segments::ChunkEvents,
    bits: &mut u32,
    start: &mut u64,
    end: &mut u64,
) {
    for e in events {
        match *e {
            SegmentEvent::Start { start: s } => {
                *bits |= TETHER_VAD_SPEECH_START;
                *start = s;
            }
            SegmentEvent::End(seg) => {
                *bits |= TETHER_VAD_SPEECH_END;
                *start = seg.start;
                *end = seg.end;
            }
        }
    }
}

fn chunk_record(r: &ChunkResult) -> tether_vad_chunk {
    let mut c = tether_vad_chunk {
        index: r.index,
        probability: r.probability,
        ..tether_vad_chunk::default()
    };
    put_events(
        &r.events,
        &mut c.events,
        &mut c.speech_start,
        &mut c.speech_end,
    );
    c
}

/// Push `count` samples (f32 mono, nominally in [-1, 1]) of the current stream. Every
/// 512-sample chunk they complete is run and its result written to `chunks`, in order;
/// samples that do not complete a chunk wait for the next call (or `tether_vad_finish`).
/// `*written` receives the number of chunks completed.
///
/// `sample_rate` must be 16000 (the network's rate; resample other rates first).
/// `TETHER_ERR_CAPACITY` when `capacity` is smaller than the chunks these samples
/// complete: then nothing is consumed or run, and `*written` is the capacity needed
/// (`(pending + count) / 512`). `TETHER_ERR_INVALID_ARGUMENT` when a sample is NaN or
/// infinite, the message naming its index in the stream (since its start or last reset)
/// and its value: then nothing is consumed or run, the stream is unchanged and `*written`
/// is 0. `TETHER_ERR_INVALID_ARGUMENT` as well for a `count` above `PTRDIFF_MAX / 4` (more
/// floats than a buffer can hold), before any sample is read. When a chunk's run fails
/// (the engine, the device) the stream is reset. No allocation in this layer.
///
/// # Safety
/// `model` is a live handle used by no other thread during the call; `samples` points to
/// `count` readable floats (or `count` is 0); `chunks` points to `capacity` writable
/// elements (or `capacity` is 0); `written` points to a writable `size_t`. Nothing is kept.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_vad_push(
    model: *mut tether_model,
    samples: *const f32,
    count: usize,
    sample_rate: u32,
    chunks: *mut tether_vad_chunk,
    capacity: usize,
    written: *mut usize,
) -> tether_status {
    with_model(model, |m| {
        let v = vad_model(m, "tether_vad_push")?;
        non_null(written, "written")?;
        if sample_rate != SAMPLE_RATE {
            return Err(Failure::invalid(format!(
                "sample_rate is {sample_rate} Hz; the VAD runs at {SAMPLE_RATE} Hz (resample first)"
            )));
        }
        if count > 0 {
            non_null(samples, "samples")?;
            if !samples.is_aligned() {
                return Err(Failure::invalid("`samples` is not aligned to 4 bytes"));
            }
        }
        // No buffer of floats holds more than isize::MAX bytes: a larger count cannot be
        // the caller's array (and `pending + count` would wrap past the capacity check).
        if count > isize::MAX as usize / std::mem::size_of::<f32>() {
            return Err(Failure::invalid(format!(
                "count is {count}: more floats than any buffer can hold"
            )));
        }
        let needed = (v.pending + count) / CHUNK_SAMPLES;
        // SAFETY: writable (contract; checked non-null).
        unsafe { written.write(needed) };
        if needed > capacity {
            return Err(Failure::capacity("VAD chunks", capacity, needed));
        }
        if needed > 0 {
            non_null(chunks, "chunks")?;
            if !chunks.cast::<u64>().is_aligned() {
                return Err(Failure::invalid("`chunks` is not aligned to 8 bytes"));
            }
        }
        let pcm: &[f32] = if count == 0 {
            &[]
        } else {
            // SAFETY: `count` readable, aligned floats (contract; checked).
            unsafe { std::slice::from_raw_parts(samples, count) }
        };
        let mut n = 0usize;
        let pushed = v.vad.push(pcm, |r| {
            // SAFETY: at most `needed` <= `capacity` chunks complete.
            unsafe { chunks.add(n).write(chunk_record(r)) };
            n += 1;
        });
        // SAFETY: as above.
        unsafe { written.write(n) };
        match pushed {
            Ok(()) => {
                v.pending = (v.pending + count) % CHUNK_SAMPLES;
                Ok(())
            }
            // Refused before anything was consumed: the stream is as it was.
            Err(e @ tether_vad::VadError::NonFiniteSample { .. }) => Err(e.into()),
            Err(e) => {
                // The failing chunk is lost (the stream should be reset): keep the count
                // consistent with what the stream holds.
                let _ = v.vad.reset();
                v.pending = 0;
                Err(e.into())
            }
        }
    })
}

/// End the stream: a pending partial chunk is zero-padded and run as the last chunk, a
/// segment still open ends at the stream's length, and the stream is reset (as
/// `tether_vad_reset`). Results into `*end`.
///
/// # Safety
/// `model` is a live handle used by no other thread during the call; `end` points to a
/// writable `tether_vad_end`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_vad_finish(
    model: *mut tether_model,
    end: *mut tether_vad_end,
) -> tether_status {
    with_model(model, |m| {
        let v = vad_model(m, "tether_vad_finish")?;
        non_null(end, "end")?;
        v.pending = 0;
        let e = v.vad.finish()?;
        let mut r = tether_vad_end {
            samples: e.samples,
            ..tether_vad_end::default()
        };
        if let Some(last) = &e.last_chunk {
            r.has_last = 1;
            r.last = chunk_record(last);
        }
        put_events(
            &e.events,
            &mut r.events,
            &mut r.speech_start,
            &mut r.speech_end,
        );
        // SAFETY: writable (contract; checked non-null).
        unsafe { end.write(r) };
        Ok(())
    })
}

/// Start a new stream: zero the recurrent state and the context, drop pending samples,
/// forget the segment state.
///
/// # Safety
/// `model` is a live handle used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_vad_reset(model: *mut tether_model) -> tether_status {
    with_model(model, |m| {
        let v = vad_model(m, "tether_vad_reset")?;
        v.pending = 0;
        Ok(v.vad.reset()?)
    })
}
