//! Silero VAD on a GPU (the model API on `Device::Cuda(0)`: the engine chosen
//! for the device, `sr` fixed at load, the recurrent state as a ping-pong pair
//! of device regions with one captured graph per state parity) against the
//! `silero-vad` 6.2.3 package's goldens, with the CPU test's tolerances
//! (`tests/golden.rs`): probabilities within 1e-4, segment edges within one
//! chunk.
//!
//! Without a CUDA driver and device every test is reported *ignored* with the
//! reason (a libtest-mimic harness decides at run time), never as a pass. The
//! goldens are embedded (the binary runs without a checkout); the model and
//! the alsa-utils WAVs come from `$TETHER_ASSETS`. On the GPU host:
//! `TETHER_ASSETS=DIR gpu_vad --test-threads=1 --nocapture`.

use serde_json::Value;
use tether_runtime::cuda::skip_reason;
use tether_testkit::GpuTests;
use tether_testkit::asset;
use tether_vad::recipe::{BuildCommon, BuildOptions, build};
use tether_vad::{CHUNK_SAMPLES, Device, EngineKind, Vad, VadConfig, VadOptions, read_wav};

/// `(name, golden)`: the package's probabilities and segments per file.
const GOLDENS: [(&str, &str); 3] = [
    ("Front_Center", include_str!("../golden/Front_Center.json")),
    ("Rear_Left", include_str!("../golden/Rear_Left.json")),
    ("Noise", include_str!("../golden/Noise.json")),
];

fn model() -> Vec<u8> {
    std::fs::read(asset("silero_vad_op18_ifless.onnx")).expect("model bytes")
}

fn gpu() -> VadOptions {
    VadOptions {
        device: Device::Cuda(0),
        ..VadOptions::default()
    }
}

fn gpu_vad() -> Vad {
    let vad = Vad::from_onnx_with(&model(), VadConfig::default(), &gpu()).expect("vad on cuda:0");
    eprintln!("vad engine on cuda:0: {}", vad.engine());
    assert_ne!(
        vad.engine(),
        EngineKind::TractCpu,
        "the network fell back to the CPU on a GPU device"
    );
    // The native engine lowers Silero VAD completely (runtime/tests/native_reference.rs):
    // when it is compiled in, selection must pick it, not fall through to tract-cuda.
    if tether_runtime::device::compiled(EngineKind::CudaNative) {
        assert_eq!(
            vad.engine(),
            EngineKind::CudaNative,
            "the native engine is compiled in but was passed over (see the load log)"
        );
    }
    vad
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number") as f32)
        .collect()
}

fn probabilities_and_segments_match_the_package() {
    let mut vad = gpu_vad();
    for (name, json) in GOLDENS {
        let g: Value = serde_json::from_str(json).expect("golden JSON");
        let samples = read_wav(asset(&format!("{name}.wav")))
            .expect("wav")
            .samples;
        let det = vad.process(&samples).expect("process");
        let want = floats(&g["probs"]);
        assert_eq!(det.probabilities.len(), want.len(), "{name}: chunk count");
        let worst = det
            .probabilities
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst <= 1e-4, "{name}: worst |prob diff| {worst}");
        let segs: Vec<[u64; 2]> = g["segments_samples"]
            .as_array()
            .expect("segments")
            .iter()
            .map(|s| [s[0].as_u64().expect("start"), s[1].as_u64().expect("end")])
            .collect();
        assert_eq!(det.segments.len(), segs.len(), "{name}: {:?}", det.segments);
        for (s, w) in det.segments.iter().zip(&segs) {
            let d = s.start.abs_diff(w[0]).max(s.end.abs_diff(w[1]));
            assert!(d <= CHUNK_SAMPLES as u64, "{name}: {s:?} vs {w:?}");
        }
        eprintln!(
            "{name:14} {} chunks, worst |prob diff| {worst:.2e}, step times {:?}",
            want.len(),
            vad.step_times()
        );
    }
}

/// The state is carried on the device across both parities, and a reset
/// really zeroes it: the same file twice gives bit-identical probabilities,
/// whichever parity the second pass starts on; chunk by chunk equals the
/// whole-file API.
fn state_ping_pong_and_reset_on_the_device() {
    let mut vad = gpu_vad();
    let samples = read_wav(asset("Front_Center.wav")).expect("wav").samples;
    let first = vad.process(&samples).expect("first");
    // An odd number of chunks leaves the session on the other parity.
    for chunk in samples.chunks_exact(CHUNK_SAMPLES).take(7) {
        vad.push_chunk(chunk).expect("chunk");
    }
    let second = vad.process(&samples).expect("second");
    assert_eq!(first.probabilities, second.probabilities);
    vad.reset().expect("reset");
    let mut state = [1f32; tether_vad::STATE_LEN];
    vad.state(&mut state).expect("state");
    assert!(state.iter().all(|&v| v == 0.0), "reset leaves a zero state");
    let mut chunked = Vec::new();
    for chunk in samples.chunks_exact(CHUNK_SAMPLES) {
        chunked.push(vad.push_chunk(chunk).expect("chunk").probability);
    }
    assert_eq!(chunked, first.probabilities[..chunked.len()]);
    vad.state(&mut state).expect("state");
    assert!(state.iter().any(|&v| v != 0.0), "the state moved");
}

fn self_test_passes() {
    let (writer, _) = build(
        &model(),
        &BuildOptions {
            common: BuildCommon::named("silero-vad"),
            ..BuildOptions::default()
        },
        &mut |_| {},
    )
    .expect("build");
    let bundle = tether_family::recipe::in_memory(&writer).expect("bundle");
    let mut vad = Vad::from_bundle(bundle, &gpu()).expect("vad");
    let r = vad.self_test().expect("self-test");
    eprintln!("on {}: {r}", vad.engine());
    assert!(r.passed, "{r}");
}

fn main() {
    GpuTests::new(skip_reason())
        .test(
            "real_model::probabilities_and_segments_match_the_package",
            probabilities_and_segments_match_the_package,
        )
        .test(
            "real_model::state_ping_pong_and_reset_on_the_device",
            state_ping_pong_and_reset_on_the_device,
        )
        .test("real_model::self_test_passes", self_test_passes)
        .run()
}
