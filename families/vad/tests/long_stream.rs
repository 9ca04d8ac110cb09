//! A long recording is streamed in bounded memory, as a VAD on a robot's microphone must
//! (issue 28: a 10-hour WAV needed 5.66 GB). The WAV files here are generated while they
//! are read (never written to disk): a streaming header (sizes 0xFFFFFFFF, as ffmpeg writes
//! to a pipe) and a recorded clip repeated at its own sample rate. Peak memory is the
//! process's `VmHWM` (Linux), so this binary holds one test that runs its parts one after
//! the other.
//!
//! The segments are checked against silero-vad's `get_speech_timestamps` on the same clip
//! (`golden/espeak_robot_stereo.json`: `espeak_robot.wav`, 22.05 kHz, as stereo with
//! left = s, right = s >> 1, the construction the stream repeats): the first repetition
//! gives the package's segments. Later repetitions start at another phase of the 512-sample
//! chunks and with the state the previous one left, so only bounds follow from the
//! package's segments: at most its three phrases per repetition, and at least two, because
//! the package separates phrases 2 and 3 by 1.09 s and phrase 3 from the clip's end by
//! 0.23 s (plus 2 ms before phrase 1), silences several times `min_silence_duration_ms`
//! (100 ms), while phrases 1 and 2 are 132 ms apart and may be bridged.

use std::io::Read;
use std::path::PathBuf;

use tether_vad::{AudioStream, SegmentEvent, Vad, VadConfig};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A WAV of `frames` frames at `rate` Hz with `channels` channels, 16-bit PCM, whose samples
/// repeat `clip` (recorded at `rate`; every channel the same, the others `s >> 1` as in the
/// reference's stereo golden), produced on the fly.
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
                let s = if self.channel == 0 { s } else { s >> 1 };
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

/// The field control clip: 16 kHz mono PCM16 (3.13 s of speech).
fn control_clip() -> Vec<i16> {
    let b = std::fs::read(repo_root().join("tests/field/vad_control_pcm16.wav")).expect("clip");
    b[44..]
        .chunks_exact(2)
        .map(|c| i16::from_le_bytes([c[0], c[1]]))
        .collect()
}

/// `espeak_robot.wav` (22.05 kHz mono PCM16, 5.09 s, three spoken phrases): its samples and
/// rate, and the package's segments (16 kHz samples) for its stereo form.
fn robot_clip() -> (Vec<i16>, u32, Vec<[u64; 2]>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden");
    let mut r = hound::WavReader::open(dir.join("espeak_robot.wav")).expect("espeak_robot.wav");
    let spec = r.spec();
    assert_eq!((spec.channels, spec.bits_per_sample), (1, 16));
    let samples: Vec<i16> = r.samples::<i16>().collect::<Result<_, _>>().expect("pcm");
    let g: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("espeak_robot_stereo.json")).expect("golden"),
    )
    .expect("golden JSON");
    assert_eq!(
        g["input_sample_rate"].as_u64(),
        Some(u64::from(spec.sample_rate))
    );
    let segments = g["segments_samples"]
        .as_array()
        .expect("segments")
        .iter()
        .map(|s| [s[0].as_u64().expect("start"), s[1].as_u64().expect("end")])
        .collect();
    (samples, spec.sample_rate, segments)
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
    let (robot, robot_rate, want) = robot_clip();
    let mut vad = Vad::from_onnx(&model(), VadConfig::default()).expect("vad");
    // One repetition of the clip in 16 kHz samples, and the number of whole repetitions in
    // `frames` frames.
    let period = robot.len() as f64 * 16_000.0 / f64::from(robot_rate);
    let clip_frames = robot.len() as u64;
    let repetitions = |frames: u64| frames / clip_frames;

    // 1. Streamed = whole, on two minutes at 22.05 kHz stereo (the resampler streamed too).
    let frames = 2 * 60 * u64::from(robot_rate);
    let whole = AudioStream::new(
        Generated::new(robot.clone(), robot_rate, 2, frames),
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
                Generated::new(robot.clone(), robot_rate, 2, frames),
                None,
                "2 min",
            )
            .expect("open"),
        )
        .expect("streamed");
    assert_eq!(streamed, expected, "streaming changes nothing");
    // The first repetition: the package's segments, edges within one chunk (as in
    // tests/golden.rs).
    let first: Vec<_> = expected
        .segments
        .iter()
        .filter(|s| (s.end as f64) < period)
        .collect();
    assert_eq!(first.len(), want.len(), "{first:?} vs package {want:?}");
    for (s, w) in first.iter().zip(&want) {
        let d = s.start.abs_diff(w[0]).max(s.end.abs_diff(w[1]));
        assert!(d <= 512, "segment {s:?} vs package {w:?}");
    }
    // Every repetition: two or three segments (see the module's documentation).
    let reps = repetitions(frames);
    let n = expected.segments.len() as u64;
    assert!(
        (2 * reps..=3 * (reps + 1)).contains(&n),
        "{n} segments in {reps} whole repetitions of a clip with {}",
        want.len()
    );
    drop((whole, expected, streamed));

    // 2. Ten hours at 16 kHz mono, decoded: 576 M samples (2.3 GB as f32) through a bounded
    // stream.
    let before = peak_rss();
    let frames = 10 * 3600 * 16_000;
    let mut s = AudioStream::new(
        Generated::new(control_clip(), 16_000, 1, frames),
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

    // 3. Twenty minutes of 22.05 kHz stereo through the network, chunk by chunk, segments
    // as they close: memory does not grow with the length (the signal alone would be 77 MB
    // at 16 kHz, 212 MB as the file's samples).
    let before = peak_rss();
    let frames = 20 * 60 * u64::from(robot_rate);
    let mut s = AudioStream::new(Generated::new(robot, robot_rate, 2, frames), None, "20 min")
        .expect("open");
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
    let reps = repetitions(frames);
    assert!(
        (2 * reps..=3 * (reps + 1)).contains(&ends),
        "{ends} segments in {reps} whole repetitions of a clip with {}",
        want.len()
    );
    let grown = peak_rss().saturating_sub(before);
    println!(
        "20 min streamed through the network: peak memory grew by {} KiB",
        grown / 1024
    );
    assert!(grown < 48 << 20, "peak memory grew by {grown} bytes");
}
