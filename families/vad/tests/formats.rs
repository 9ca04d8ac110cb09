//! WAV files every audio tool reads (issue 28): each decodes to exactly the signal the
//! reference decodes (`silero_vad.read_audio`: torchaudio 2.8 on libsndfile), and the field
//! cases give the reference's segments.
//!
//! Goldens: `golden/formats.json`, written by `golden/reference.py --formats tests/field`
//! (which also writes the clips under `tests/field/wav/`: libsndfile's own PCM 8/24/32-bit,
//! float 32/64-bit, A-law, mu-law, WAVE_FORMAT_EXTENSIBLE with each subformat and RF64, and
//! patched headers: streaming sizes, a cut-off file, an odd-sized chunk before `data`,
//! 12-bit samples in 16 bits).

use std::path::PathBuf;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tether_vad::{AudioStream, Vad, VadConfig, VadError, read_wav, read_wav_bytes};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn field(name: &str) -> PathBuf {
    repo_root().join("tests/field").join(name)
}

fn golden() -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden/formats.json");
    serde_json::from_slice(&std::fs::read(p).expect("golden")).expect("JSON")
}

fn asset(name: &str) -> PathBuf {
    let dir = std::env::var_os("TETHER_ASSETS")
        .map_or_else(|| repo_root().join(".assets"), PathBuf::from);
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "missing test asset {}: run `tests/fetch-assets`",
        p.display()
    );
    p
}

fn sha256_f32le(x: &[f32]) -> String {
    let mut h = Sha256::new();
    for v in x {
        h.update(v.to_le_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn every_clip_decodes_to_the_reference_signal_bit_for_bit() {
    let g = golden();
    let files = g["files"].as_object().expect("files");
    assert!(files.len() >= 18);
    for (name, want) in files {
        let path = field(&format!("wav/{name}.wav"));
        let audio = read_wav(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        if name == "stream_zero" {
            // libsndfile reads no samples after a data size of 0; tether reads them as FFmpeg
            // does (the next test).
            assert_eq!(want["samples"], 0, "{name}: libsndfile's reading changed");
            assert_eq!(audio.samples.len(), 2000, "{name}");
            continue;
        }
        assert_eq!(
            audio.samples.len() as u64,
            want["samples"].as_u64().expect("samples"),
            "{name}: sample count"
        );
        assert_eq!(
            sha256_f32le(&audio.samples),
            want["sha256_f32le"].as_str().expect("sha"),
            "{name}: the decoded signal differs from the reference's ({})",
            want["made"]
        );
        // Streamed block by block: the same samples.
        let mut s = AudioStream::open(&path).expect("open");
        let (mut all, mut block) = (Vec::new(), Vec::new());
        while s.next_block(&mut block).expect("block") {
            all.extend_from_slice(&block);
        }
        assert_eq!(all, audio.samples, "{name}: streamed");
        let cut = name == "cut_off";
        assert_eq!(
            audio.truncation.is_some(),
            cut,
            "{name}: truncation reported"
        );
    }
}

fn vad() -> Vad {
    let onnx = std::fs::read(asset("silero_vad_op18_ifless.onnx")).expect("model");
    Vad::from_onnx(&onnx, VadConfig::default()).expect("vad")
}

fn segments(d: &tether_vad::Detection) -> Vec<[u64; 2]> {
    d.segments.iter().map(|s| [s.start, s.end]).collect()
}

fn want_segments(g: &Value, key: &str) -> (u64, Vec<[u64; 2]>) {
    let f = &g["full"][key];
    let segs = f["segments_samples"]
        .as_array()
        .expect("segments")
        .iter()
        .map(|s| [s[0].as_u64().unwrap(), s[1].as_u64().unwrap()])
        .collect();
    (f["samples"].as_u64().expect("samples"), segs)
}

#[test]
fn the_field_files_give_the_references_segments() {
    let g = golden();
    let mut vad = vad();
    let control = std::fs::read(field("vad_control_pcm16.wav")).expect("control");
    // A-law, 12 bits in 16, and the control, as files.
    for name in ["vad_control_pcm16", "vad_alaw", "vad_12bit_in_16"] {
        let d = vad.process_wav(field(&format!("{name}.wav"))).expect(name);
        let (samples, want) = want_segments(&g, name);
        assert_eq!((d.samples, segments(&d)), (samples, want), "{name}");
    }
    // Cut off at 75,060 bytes (the header still says 100,022 data bytes): the samples
    // present, and a truncation.
    let cut = read_wav_bytes(&control[..75_060]).expect("cut off");
    let t = cut.truncation.expect("truncation reported");
    assert_eq!((t.declared_bytes, t.present_bytes), (100_022, 75_016));
    let d = vad.process(&cut.samples).expect("run");
    let (samples, want) = want_segments(&g, "vad_truncated (control cut to 75,060 bytes)");
    assert_eq!((d.samples, segments(&d)), (samples, want));
    // 64-bit float: the control's samples / 32768, written here.
    let pcm: Vec<i16> = control[44..]
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    let mut f64_wav = Vec::new();
    let data_len = (pcm.len() * 8) as u32;
    f64_wav.extend_from_slice(b"RIFF");
    f64_wav.extend_from_slice(&(36 + data_len).to_le_bytes());
    f64_wav.extend_from_slice(b"WAVEfmt \x10\0\0\0\x03\0\x01\0");
    f64_wav.extend_from_slice(&16_000u32.to_le_bytes());
    f64_wav.extend_from_slice(&128_000u32.to_le_bytes());
    f64_wav.extend_from_slice(&8u16.to_le_bytes());
    f64_wav.extend_from_slice(&64u16.to_le_bytes());
    f64_wav.extend_from_slice(b"data");
    f64_wav.extend_from_slice(&data_len.to_le_bytes());
    for v in &pcm {
        f64_wav.extend_from_slice(&(f64::from(*v) / 32_768.0).to_le_bytes());
    }
    let a = read_wav_bytes(&f64_wav).expect("f64");
    let d = vad.process(&a.samples).expect("run");
    let (samples, want) = want_segments(&g, "vad_f64 (control / 32768 as 64-bit float)");
    assert_eq!((d.samples, segments(&d)), (samples, want));
}

fn golden_ffmpeg() -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden/formats_ffmpeg.json");
    serde_json::from_slice(&std::fs::read(p).expect("golden")).expect("JSON")
}

/// silero-vad's `read_audio` reads through FFmpeg (torchcodec) with torchaudio 2.9 and
/// through libsndfile with torchaudio 2.8 (`golden/reference_ffmpeg.py`). Where FFmpeg reads
/// a clip, tether's signal is bit-equal to it too. The two readers differ on two clips: a
/// data size of 0 with the samples after it (libsndfile: no samples; FFmpeg and tether: the
/// samples) and a file cut off inside a sample (FFmpeg: refused; libsndfile and tether: the
/// whole samples present, checked above). The field files, A-law included, give the same
/// segments through both readers and tether.
#[test]
fn the_references_ffmpeg_reader_gives_the_same_signals_and_segments() {
    let g = golden_ffmpeg();
    let files = g["files"].as_object().expect("files");
    assert_eq!(
        files.len(),
        golden()["files"].as_object().expect("files").len()
    );
    for (name, want) in files {
        let audio = read_wav(field(&format!("wav/{name}.wav"))).expect(name);
        match name.as_str() {
            "cut_off" => assert!(
                want["error"].is_string(),
                "{name}: FFmpeg's reading changed"
            ),
            _ => {
                assert_eq!(
                    audio.samples.len() as u64,
                    want["samples"].as_u64().expect("samples"),
                    "{name}"
                );
                assert_eq!(
                    sha256_f32le(&audio.samples),
                    want["sha256_f32le"].as_str().expect("sha"),
                    "{name}: differs from FFmpeg's decoding"
                );
            }
        }
    }
    let mut vad = vad();
    for name in ["vad_control_pcm16", "vad_alaw", "vad_12bit_in_16"] {
        let d = vad.process_wav(field(&format!("{name}.wav"))).expect(name);
        let (samples, want) = want_segments(&g, name);
        assert_eq!((d.samples, segments(&d)), (samples, want), "{name}");
    }
}

#[test]
fn a_file_that_is_not_wav_is_named_by_what_it_looks_like() {
    let e = read_wav(field("red_square.png")).unwrap_err();
    let VadError::Wav { .. } = &e else {
        panic!("{e:?}")
    };
    let m = e.to_string();
    assert!(m.contains("red_square.png"), "{m}");
    assert!(
        m.contains("not a WAV file (it looks like a PNG image)"),
        "{m}"
    );
    assert!(m.contains("ffmpeg"), "a hint: {m}");
    let e = read_wav(field("embed_cr_only_lines.txt"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("it looks like text"), "{e}");
}
