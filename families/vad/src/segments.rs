//! Speech segments from per-chunk probabilities: hysteresis thresholds and
//! minimum speech / silence durations, one chunk at a time (host code).
//!
//! This mirrors `get_speech_timestamps_from_probs` in
//! `silero_vad/utils_vad.py` (silero-vad 6.2.3; line numbers of that file),
//! which `get_speech_timestamps` calls, with `max_speech_duration_s = inf`
//! (its default, so the max-speech branch, lines 499-535, never runs):
//!
//! - durations in samples: `16000 * ms / 1000` (lines 465-468); exit
//!   threshold `max(threshold - 0.15, 0.01)` (line 476);
//! - chunk `i` starts at sample `cur = 512 * i` (lines 481-482);
//! - `p >= threshold` with a pending silence start (`temp_end`): forget it
//!   (line 485);
//! - not in speech and `p >= threshold`: speech starts at `cur` (line 494);
//! - in speech and `p < neg_threshold`: the first such chunk sets
//!   `temp_end = cur`; once `cur - temp_end >= min_silence` (line 545) the
//!   segment ends at `temp_end` and is kept only if
//!   `end - start > min_speech` (line 549);
//! - at the end of the audio, a segment still open ends at the audio length
//!   and is kept if `length - start > min_speech` (line 557);
//! - padding (lines 561-572): `start = max(0, start - pad)`,
//!   `end = min(length, end + pad)`. The package instead splits a gap shorter
//!   than `2 * pad` between two segments in half (line 566);
//!   [`crate::VadConfig::validate`] requires `min_silence + 512 >= 2 * pad`,
//!   under which two kept segments are always at least `min_silence + 512`
//!   samples apart, so that branch never runs and a segment is final as soon
//!   as it ends.
//!
//! Streaming adds one thing the offline function does not need: the moment a
//! segment is certain to be kept ([`SegmentEvent::Start`]), reported as soon as
//! its length can no longer be `<= min_speech` whatever comes next.
//!
//! Sample positions are `u64` at 16 kHz; `temp_end == 0` means "none", as in
//! the package (a silence can only start at chunk 1 or later while in speech).

use crate::config::{SAMPLES_PER_MS, VadConfig};

/// One speech segment, in samples at 16 kHz, padded as the package pads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpeechSegment {
    /// First sample (inclusive).
    pub start: u64,
    /// End sample (exclusive).
    pub end: u64,
}

impl SpeechSegment {
    /// Start in milliseconds.
    pub fn start_ms(&self) -> f64 {
        self.start as f64 / SAMPLES_PER_MS as f64
    }
    /// End in milliseconds.
    pub fn end_ms(&self) -> f64 {
        self.end as f64 / SAMPLES_PER_MS as f64
    }
    /// Length in milliseconds.
    pub fn duration_ms(&self) -> f64 {
        self.end_ms() - self.start_ms()
    }
}

/// What a chunk changed in the segmentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentEvent {
    /// A segment is now certain to be kept; `start` is its padded first
    /// sample (in the past: speech began up to `min_speech` earlier).
    Start {
        /// Padded first sample at 16 kHz.
        start: u64,
    },
    /// A segment ended (after `min_silence` of silence, or at the end of the
    /// stream). Every `End` follows the `Start` of the same segment.
    End(SpeechSegment),
}

/// Capacity of the events one chunk can produce: one event, or a `Start` and
/// an `End` for the last chunk of a stream.
pub const MAX_EVENTS_PER_CHUNK: usize = 2;

/// Events produced by one chunk (fixed capacity, no allocation).
pub type ChunkEvents = heapless::Vec<SegmentEvent, MAX_EVENTS_PER_CHUNK>;

/// The segments `events` close (their `End`s), in order.
pub fn closed(events: &ChunkEvents) -> impl Iterator<Item = SpeechSegment> + '_ {
    events.iter().filter_map(|e| match e {
        SegmentEvent::End(s) => Some(*s),
        SegmentEvent::Start { .. } => None,
    })
}

/// The hysteresis state machine; see the module documentation.
#[derive(Clone, Debug)]
pub struct SegmentTracker {
    threshold: f64,
    neg_threshold: f64,
    min_speech: u64,
    min_silence: u64,
    pad: u64,
    chunk: u64,
    /// Chunks seen since the last reset.
    chunks: u64,
    triggered: bool,
    /// Unpadded start of the current segment.
    start: u64,
    /// Start of the pending silence, 0 for none.
    temp_end: u64,
    /// Whether the current segment's `Start` has been reported.
    confirmed: bool,
}

impl SegmentTracker {
    /// A tracker for chunks of `chunk` samples.
    pub fn new(config: &VadConfig, chunk: usize) -> Self {
        Self {
            threshold: config.threshold,
            neg_threshold: config.neg_threshold,
            min_speech: config.min_speech_samples(),
            min_silence: config.min_silence_samples(),
            pad: config.speech_pad_samples(),
            chunk: chunk as u64,
            chunks: 0,
            triggered: false,
            start: 0,
            temp_end: 0,
            confirmed: false,
        }
    }

    /// Forget everything (a new stream).
    pub fn reset(&mut self) {
        self.chunks = 0;
        self.triggered = false;
        self.start = 0;
        self.temp_end = 0;
        self.confirmed = false;
    }

    /// Chunks seen since the last reset.
    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// Whether a segment is open (speech started and has not ended).
    pub fn in_speech(&self) -> bool {
        self.triggered
    }

    fn padded_start(&self) -> u64 {
        self.start.saturating_sub(self.pad)
    }

    fn close(&mut self, end: u64, length: u64, events: &mut ChunkEvents) {
        let keep = end.saturating_sub(self.start) > self.min_speech;
        if keep {
            if !self.confirmed {
                push(
                    events,
                    SegmentEvent::Start {
                        start: self.padded_start(),
                    },
                );
            }
            push(
                events,
                SegmentEvent::End(SpeechSegment {
                    start: self.padded_start(),
                    end: (end + self.pad).min(length),
                }),
            );
        }
        self.triggered = false;
        self.temp_end = 0;
        self.confirmed = false;
    }

    /// Account for the next chunk's speech probability; returns the events it
    /// caused (usually none or one; a `Start` and an `End` together when a
    /// segment is kept only once it ends, e.g. with `min_silence_ms = 0`).
    pub fn push(&mut self, probability: f32) -> ChunkEvents {
        let mut events = ChunkEvents::new();
        self.step(probability, u64::MAX, &mut events);
        events
    }

    /// Account for the last chunk of a stream of `length` samples (the true
    /// signal length: the chunk's zero padding excluded), then close a segment
    /// still open at `length` as the package does, and reset. Returns up to
    /// two events (a `Start` and an `End`).
    pub fn push_last(&mut self, probability: f32, length: u64) -> ChunkEvents {
        let mut events = ChunkEvents::new();
        self.step(probability, length, &mut events);
        if self.triggered {
            self.close(length, length, &mut events);
        }
        self.reset();
        events
    }

    fn step(&mut self, probability: f32, length: u64, events: &mut ChunkEvents) {
        let p = f64::from(probability);
        let cur = self.chunks * self.chunk;
        self.chunks += 1;
        if p >= self.threshold && self.temp_end != 0 {
            self.temp_end = 0;
        }
        if p >= self.threshold && !self.triggered {
            self.triggered = true;
            self.start = cur;
            self.confirmed = false;
        } else if p < self.neg_threshold && self.triggered {
            if self.temp_end == 0 {
                self.temp_end = cur;
            }
            if cur - self.temp_end >= self.min_silence {
                // While the stream goes on (length unknown, u64::MAX) the
                // padded end is never past it: pad <= min_silence + 512.
                let end = self.temp_end;
                self.close(end, length, events);
                return;
            }
        }
        if self.triggered && !self.confirmed {
            // The segment will end at the pending silence start, at a later
            // silence start (>= the next chunk's start), or at the end of the
            // stream (>= the samples seen, which is >= the next chunk's start
            // while the stream goes on): the smallest possible end is known.
            let least_end = if self.temp_end != 0 {
                self.temp_end
            } else {
                self.chunks * self.chunk
            };
            if least_end - self.start > self.min_speech {
                self.confirmed = true;
                push(
                    events,
                    SegmentEvent::Start {
                        start: self.padded_start(),
                    },
                );
            }
        }
    }

    /// End of a stream of `length` samples whose last chunk was already
    /// pushed (a stream of whole chunks): closes a segment still open at
    /// `length`, then resets.
    pub fn finish(&mut self, length: u64) -> ChunkEvents {
        let mut events = ChunkEvents::new();
        if self.triggered {
            self.close(length, length, &mut events);
        }
        self.reset();
        events
    }
}

fn push(events: &mut ChunkEvents, e: SegmentEvent) {
    // Capacity 2: a chunk adds at most one event in `push`, and `finish`
    // at most a Start and an End to an empty list.
    if events.push(e).is_err() {
        debug_assert!(false, "segment event capacity exceeded");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(config: &VadConfig, probs: &[f32], length: u64) -> (Vec<SpeechSegment>, Vec<u64>) {
        let mut t = SegmentTracker::new(config, 512);
        let mut segments = Vec::new();
        let mut starts = Vec::new();
        let mut open_start = None;
        for (i, &p) in probs.iter().enumerate() {
            for e in t.push(p) {
                match e {
                    SegmentEvent::Start { start } => {
                        assert!(open_start.is_none());
                        open_start = Some(start);
                        starts.push(i as u64);
                    }
                    SegmentEvent::End(s) => {
                        assert_eq!(open_start.take(), Some(s.start));
                        segments.push(s);
                    }
                }
            }
        }
        for e in t.finish(length) {
            if let SegmentEvent::End(s) = e {
                segments.push(s);
            }
        }
        (segments, starts)
    }

    #[test]
    fn short_bursts_are_dropped_and_long_ones_padded() {
        let c = VadConfig::default();
        // 5 speech chunks = 2560 samples: not > 4000, dropped.
        let mut p = vec![0.0f32; 3];
        p.extend([0.9; 5]);
        p.extend([0.0; 10]);
        let (s, _) = run(&c, &p, p.len() as u64 * 512);
        assert!(s.is_empty());
        // 10 speech chunks from chunk 3: start 1536, temp_end 6656.
        let mut p = vec![0.0f32; 3];
        p.extend([0.9; 10]);
        p.extend([0.0; 10]);
        let (s, starts) = run(&c, &p, p.len() as u64 * 512);
        assert_eq!(
            s,
            [SpeechSegment {
                start: 1536 - 480,
                end: 6656 + 480
            }]
        );
        // Confirmed once (i + 1) * 512 - 1536 > 4000, i.e. at chunk 10.
        assert_eq!(starts, [10]);
    }

    #[test]
    fn hysteresis_keeps_speech_between_the_two_thresholds() {
        let c = VadConfig::default();
        let mut p = vec![0.9f32; 10];
        p.extend([0.4; 20]); // between 0.35 and 0.5: still speech
        p.extend([0.1; 5]);
        let (s, _) = run(&c, &p, p.len() as u64 * 512);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].start, 0);
        assert_eq!(s[0].end, 30 * 512 + 480);
    }

    #[test]
    fn open_segment_ends_at_the_stream_length() {
        let c = VadConfig::default();
        let p = [0.0f32, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.2];
        let length = 10 * 512 + 100;
        let (s, _) = run(&c, &p, length);
        assert_eq!(
            s,
            [SpeechSegment {
                start: 512 - 480,
                end: length
            }]
        );
        assert!((s[0].end_ms() - length as f64 / 16.0).abs() < 1e-9);
    }

    #[test]
    fn a_short_silence_does_not_split() {
        let c = VadConfig::default();
        let mut p = vec![0.9f32; 10];
        p.extend([0.1; 3]); // 3 chunks: cur - temp_end reaches 1024 < 1600
        p.extend([0.9; 10]);
        p.extend([0.1; 6]);
        let (s, _) = run(&c, &p, p.len() as u64 * 512);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].end, 23 * 512 + 480);
    }
}
