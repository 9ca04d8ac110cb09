//! A long recording is streamed in bounded memory, as a VAD on a robot's microphone must
//! (issue 28: a 10-hour WAV needed 5.66 GB). The WAV files here are generated while they
//! are read (never written to disk): a streaming header (sizes 0xFFFFFFFF, as ffmpeg writes
//! to a pipe) and the field control clip repeated. Peak memory is the process's `VmHWM`
//! (Linux), so this binary holds one test that runs its parts one after the other.

use std::io::Read;
use std::path::PathBuf;

use tether_vad::{AudioStream, SegmentEvent, Vad, VadConfig};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A WAV of `frames` frames at `rate` Hz with `channels` channels, 16-bit PCM, whose samples
/// repeat `clip` (every channel the same, the second one halved), produced on the fly.
struct Generated {
    header: Vec<u8>,
    at_header: usize,
    clip: Vec<i16>,
    channels: u16,
    frames: u64,
    frame: u64,
    channel: u16,
    pending: Option<u8>,
}

impl Generated {
    fn new(clip: Vec<i16>, rate: u32, channels: u16, frames: u64) -> Self {
        let mut h = b"RIFF\xff\xff\xff\xffWAVEfmt \x10\0\0\0\x01\0".to_vec();
        h.extend_from_slice(&channels.to_le_bytes());
        h.extend_from_slice(&rate.to_le_bytes());
        h.extend_from_slice(&(rate * 2 * u32::from(channels)).to_le_bytes());
        h.extend_from_slice(&(2 * channels).to_le_bytes());
        h.extend_from_slice(&16u16.to_le_bytes());
        h.extend_from_slice(b"data\xff\xff\xff\xff");
        Self {
            header: h,
            at_header: 0,
            clip,
            channels,
            frames,
            frame: 0,
            channel: 0,
            pending: None,
        }
    }
}

impl Read for Generated {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            if self.at_header < self.header.len() {
                buf[n] = self.header[self.at_header];
                self.at_header += 1;
            } else if let Some(b) = self.pending.take() {
                buf[n] = b;
            } else if self.frame < self.frames {
                let s = self.clip[(self.frame % self.clip.len() as u64) as usize];
                let s = if self.channel == 0 { s } else { s / 2 };
                let b = s.to_le_bytes();
                buf[n] = b[0];
                self.pending = Some(b[1]);
                self.channel += 1;
                if self.channel == self.channels {
                    self.channel = 0;
                    self.frame += 1;
                }
            } else {
                break;
            }
            n += 1;
        }
        Ok(n)
    }
}

fn control_clip() -> Vec<i16> {
    let b = std::fs::read(repo_root().join("tests/field/vad_control_pcm16.wav")).expect("clip");
    b[44..]
        .chunks_exact(2)
        .map(|c| i16::from_le_bytes([c[0], c[1]]))
        .collect()
}

/// Peak resident memory of this process so far, in bytes (`VmHWM`).
fn peak_rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = s.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("kB");
    kb * 1024
}

fn model() -> Vec<u8> {
    let dir = std::env::var_os("TETHER_ASSETS")
        .map_or_else(|| repo_root().join(".assets"), PathBuf::from);
    std::fs::read(dir.join("silero_vad_op18_ifless.onnx"))
        .expect("silero_vad_op18_ifless.onnx: run `tests/fetch-assets`")
}

#[test]
fn long_recordings_stream_in_bounded_memory_with_the_same_segments() {
    let clip = control_clip();
    let mut vad = Vad::from_onnx(&model(), VadConfig::default()).expect("vad");

    // 1. Streamed = whole, on two minutes at 48 kHz stereo (the resampler streamed too).
    let frames = 2 * 60 * 48_000;
    let whole = AudioStream::new(
        Generated::new(clip.clone(), 48_000, 2, frames),
        None,
        "2 min",
    )
    .expect("open")
    .collect()
    .expect("decode");
    let expected = vad.process(&whole.samples).expect("whole");
    let streamed = vad
        .process_stream(
            &mut AudioStream::new(
                Generated::new(clip.clone(), 48_000, 2, frames),
                None,
                "2 min",
            )
            .expect("open"),
        )
        .expect("streamed");
    assert_eq!(streamed, expected, "streaming changes nothing");
    assert!(expected.segments.len() > 40, "{}", expected.segments.len());
    drop((whole, expected, streamed));

    // 2. Ten hours at 16 kHz mono, decoded: 576 M samples (2.3 GB as f32) through a bounded
    // stream.
    let before = peak_rss();
    let frames = 10 * 3600 * 16_000;
    let mut s = AudioStream::new(
        Generated::new(clip.clone(), 16_000, 1, frames),
        None,
        "10 h",
    )
    .expect("open");
    let (mut n, mut block) = (0u64, Vec::new());
    while s.next_block(&mut block).expect("block") {
        n += block.len() as u64;
    }
    assert_eq!(n, frames);
    let grown = peak_rss().saturating_sub(before);
    println!("10 h decoded: peak memory grew by {} KiB", grown / 1024);
    assert!(grown < 32 << 20, "peak memory grew by {grown} bytes");

    // 3. Twenty minutes of 48 kHz stereo through the network, chunk by chunk, segments as
    // they close: memory does not grow with the length (the signal alone would be 77 MB at
    // 16 kHz, 460 MB as the file's samples).
    let before = peak_rss();
    let frames = 20 * 60 * 48_000;
    let mut s =
        AudioStream::new(Generated::new(clip, 48_000, 2, frames), None, "20 min").expect("open");
    let (mut chunks, mut ends) = (0u64, 0u64);
    let end = vad
        .stream(&mut s, |r| {
            chunks += 1;
            ends += r
                .events
                .iter()
                .filter(|e| matches!(e, SegmentEvent::End(_)))
                .count() as u64;
        })
        .expect("stream");
    assert_eq!(end.samples, 20 * 60 * 16_000);
    assert_eq!(chunks, end.samples.div_ceil(512));
    assert!(ends > 400, "{ends} segments");
    let grown = peak_rss().saturating_sub(before);
    println!(
        "20 min streamed through the network: peak memory grew by {} KiB",
        grown / 1024
    );
    assert!(grown < 48 << 20, "peak memory grew by {grown} bytes");
}
