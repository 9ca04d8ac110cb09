#!/usr/bin/env python3
"""Reference voice-activity pipeline: the `silero-vad==6.2.3` package itself.

Writes the golden JSON the Rust `vad` family is tested against. Nothing here is
re-implemented: every number comes from the package's own functions on
onnxruntime / PyTorch. This docstring is the contract.

Audio -> 16 kHz mono float32
    `silero_vad.read_audio(path, 16000)` (utils_vad.py). With torchaudio 2.8 and
    no libsox on the host, its sox branch fails and it falls back to
    `torchaudio.load` (integer PCM divided by 2^(bits-1)), the mean over
    channels, then `torchaudio.transforms.Resample(sr, 16000)` (windowed sinc,
    `sinc_interp_hann`, lowpass_filter_width 6, rolloff 0.99, kernel computed
    in float64 and cached as float32, convolution in float32). The script
    checks that read_audio equals that explicit chain within 1e-6 and stops
    otherwise (a host with libsox would resample differently).

Per-chunk speech probabilities
    The package's streaming wrapper `OnnxWrapper` (utils_vad.py) around
    `silero_vad_op18_ifless.onnx` on onnxruntime CPU (1 thread): after
    `reset_states()`, each 512-sample chunk is prefixed with the previous 64
    samples (zeros for the first chunk), run with the recurrent state
    [2, 1, 128] (zeros after reset) and `sr` = 16000 (int64); the returned
    state feeds the next chunk. Chunks are taken exactly as
    `get_speech_timestamps` takes them: 0, 512, 1024, ...; the last one is
    zero-padded to 512 samples.
    The same probabilities from the package's default model
    (`load_silero_vad()`, TorchScript) and from `load_silero_vad(onnx=True)`
    are recorded as maximum absolute differences (they agree to ~1e-6).

Speech segments
    `get_speech_timestamps(wav, model)` with the package defaults
    (threshold 0.5, neg_threshold 0.35, min_speech_duration_ms 250,
    min_silence_duration_ms 100, speech_pad_ms 30, max_speech_duration_s inf),
    start/end in samples at 16 kHz.

Inputs
    The alsa-utils WAVs (48 kHz mono int16) from `tests/fetch-assets`, the
    committed espeak-ng sentence `espeak_robot.wav` (22.05 kHz mono int16) and
    a stereo version of it built here (left = s, right = s >> 1, int16, the
    same construction the Rust test writes with hound).

Segment logic alone (segments_synthetic.json)
    `get_speech_timestamps_from_probs` (what get_speech_timestamps calls) on
    seeded random probability sequences (runs of speech-like, silence-like and
    in-between values, float32) with several parameter sets, audio lengths
    that are not multiples of 512 included.

Self-test payload (selftest.json)
    The first SELFTEST_CHUNKS chunks of Front_Center.wav at 16 kHz (float32)
    and the package's probabilities for them from a fresh state.

    python reference.py --assets DIR --out DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import warnings

import numpy as np
import soundfile as sf
import torch
import torchaudio

import silero_vad
from silero_vad import get_speech_timestamps, get_speech_timestamps_from_probs, load_silero_vad, read_audio
from silero_vad.utils_vad import OnnxWrapper

sys.dont_write_bytecode = True
warnings.filterwarnings("ignore")
torch.set_num_threads(1)

SR = 16000
CHUNK = 512
SELFTEST_CHUNKS = 8
ALSA = [
    "Front_Center", "Front_Left", "Front_Right", "Rear_Center", "Rear_Left",
    "Rear_Right", "Side_Left", "Side_Right", "Noise",
]
# Every STRIDE-th sample of the 16 kHz signal is recorded for the resampler test.
STRIDE = 16


def f32(v) -> float:
    """A float32 value as the shortest decimal that reads back to the same float32."""
    return float(f"{float(v):.9g}")


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def explicit_16k(path: str) -> torch.Tensor:
    """load -> channel mean -> torchaudio windowed-sinc resample (read_audio's fallback)."""
    wav, sr = torchaudio.load(path)
    wav = wav.mean(dim=0, keepdim=True)
    if sr != SR:
        wav = torchaudio.transforms.Resample(sr, SR)(wav)
    return wav.squeeze(0)


def chunk_probs(model, wav: torch.Tensor) -> list[float]:
    """get_speech_timestamps' own chunk loop (utils_vad.py), probabilities kept."""
    model.reset_states()
    out = []
    for start in range(0, len(wav), CHUNK):
        chunk = wav[start:start + CHUNK]
        if len(chunk) < CHUNK:
            chunk = torch.nn.functional.pad(chunk, (0, CHUNK - len(chunk)))
        out.append(f32(model(chunk, SR).item()))
    return out


def reference(path: str, name: str, source: str, models: dict, keep_signal: bool) -> dict:
    info = sf.info(path)
    wav = read_audio(path, SR)
    explicit = explicit_16k(path)
    gap = float((wav - explicit).abs().max()) if len(wav) == len(explicit) else float("inf")
    if gap > 1e-6:
        sys.exit(f"{name}: read_audio differs from load+mean+torchaudio resample by {gap} "
                 "(a sox backend is active?); the Rust resampler follows the latter")
    ifless = models["ifless"]
    probs = chunk_probs(ifless, wav)
    jit = chunk_probs(models["jit"], wav)
    onnx16 = chunk_probs(models["onnx"], wav)
    segments = get_speech_timestamps(wav, ifless, sampling_rate=SR)
    segments_jit = get_speech_timestamps(wav, models["jit"], sampling_rate=SR)
    doc = {
        "name": name,
        "source": source,
        "sha256": sha256(path),
        "input_sample_rate": info.samplerate,
        "input_channels": info.channels,
        "input_frames": info.frames,
        "samples_16k": len(wav),
        "read_audio_vs_explicit_resample_max_abs": gap,
        "chunk": CHUNK,
        "probs": probs,
        "max_abs_diff_vs_package_default_jit": float(np.max(np.abs(np.array(probs) - np.array(jit)))),
        "max_abs_diff_vs_package_onnx": float(np.max(np.abs(np.array(probs) - np.array(onnx16)))),
        "segments_samples": [[s["start"], s["end"]] for s in segments],
        "segments_ms": [[s["start"] / 16.0, s["end"] / 16.0] for s in segments],
        "segments_same_with_package_default_jit": segments == segments_jit,
        "max_prob": max(probs),
    }
    if keep_signal:
        doc["signal_stride"] = STRIDE
        doc["signal"] = [f32(v) for v in wav[::STRIDE]]
    return doc


PARAM_SETS = [
    {},
    {"threshold": 0.3},
    {"threshold": 0.7, "neg_threshold": 0.6},
    {"min_speech_duration_ms": 100, "min_silence_duration_ms": 300, "speech_pad_ms": 50},
    {"min_speech_duration_ms": 0, "min_silence_duration_ms": 0, "speech_pad_ms": 0},
    {"min_silence_duration_ms": 32, "speech_pad_ms": 32},
]


def synthetic_segments() -> dict:
    rng = np.random.default_rng(20261201)
    cases = []
    for n in range(36):
        probs = []
        target = int(rng.integers(20, 250))
        while len(probs) < target:
            kind = rng.integers(0, 3)
            run = int(rng.integers(1, 25))
            if kind == 0:
                vals = rng.uniform(0.0, 0.4, run)
            elif kind == 1:
                vals = rng.uniform(0.45, 1.0, run)
            else:
                vals = rng.uniform(0.25, 0.75, run)
            probs.extend(vals.tolist())
        probs = [f32(np.float32(v)) for v in probs[:target]]
        length = len(probs) * CHUNK - int(rng.integers(0, CHUNK))
        params = PARAM_SETS[n % len(PARAM_SETS)]
        segs = get_speech_timestamps_from_probs(probs, sampling_rate=SR, audio_length_samples=length, **params)
        cases.append({
            "params": params,
            "audio_length_samples": length,
            "probs": probs,
            "segments_samples": [[s["start"], s["end"]] for s in segs],
        })
    return {"function": "silero_vad.get_speech_timestamps_from_probs", "silero_vad": silero_vad.__version__,
            "cases": cases}


def write_stereo(mono_path: str, out_path: str) -> None:
    pcm, sr = sf.read(mono_path, dtype="int16")
    stereo = np.stack([pcm, pcm >> 1], axis=1).astype(np.int16)
    sf.write(out_path, stereo, sr, subtype="PCM_16")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--assets", required=True, help="folder with the fetched alsa-utils WAVs and the ifless model")
    ap.add_argument("--out", required=True, help="golden folder (also holds espeak_robot.wav)")
    args = ap.parse_args(argv)

    ifless_path = os.path.join(args.assets, "silero_vad_op18_ifless.onnx")
    packaged = os.path.join(os.path.dirname(silero_vad.__file__), "data", "silero_vad_op18_ifless.onnx")
    if sha256(ifless_path) != sha256(packaged):
        sys.exit(f"{ifless_path} is not the file shipped in silero-vad {silero_vad.__version__}")
    models = {
        "ifless": OnnxWrapper(ifless_path, force_onnx_cpu=True),
        "jit": load_silero_vad(),
        "onnx": load_silero_vad(onnx=True),
    }
    env = {
        "silero_vad": silero_vad.__version__,
        "torch": torch.__version__,
        "torchaudio": torchaudio.__version__,
        "onnxruntime": __import__("onnxruntime").__version__,
        "model": "silero_vad_op18_ifless.onnx",
        "model_sha256": sha256(ifless_path),
    }

    with open(os.path.join(args.out, "segments_synthetic.json"), "w") as f:
        json.dump(synthetic_segments(), f)
        f.write("\n")

    inputs = [(os.path.join(args.assets, f"{n}.wav"), n, "alsa-utils", n == "Front_Center") for n in ALSA]
    espeak = os.path.join(args.out, "espeak_robot.wav")
    inputs.append((espeak, "espeak_robot", "espeak-ng 1.51 (committed)", True))
    with tempfile.TemporaryDirectory() as tmp:
        stereo = os.path.join(tmp, "espeak_robot_stereo.wav")
        write_stereo(espeak, stereo)
        inputs.append((stereo, "espeak_robot_stereo", "espeak_robot.wav as stereo (L = s, R = s >> 1)", False))
        for path, name, source, keep in inputs:
            doc = reference(path, name, source, models, keep)
            doc["environment"] = env
            with open(os.path.join(args.out, f"{name}.json"), "w") as f:
                json.dump(doc, f, indent=1)
                f.write("\n")
            print(f"{name:20s} chunks {len(doc['probs']):4d} max prob {doc['max_prob']:.4f} "
                  f"segments {doc['segments_samples']} jit diff {doc['max_abs_diff_vs_package_default_jit']:.2e}")
            if name == "Front_Center":
                wav = read_audio(path, SR)
                n = SELFTEST_CHUNKS * CHUNK
                selftest = {
                    "description": f"first {SELFTEST_CHUNKS} chunks of alsa-utils Front_Center.wav at 16 kHz",
                    "pcm_16k": [f32(v) for v in wav[:n]],
                    "probs": doc["probs"][:SELFTEST_CHUNKS],
                    "tolerance": 1e-4,
                    "environment": env,
                }
                with open(os.path.join(args.out, "selftest.json"), "w") as f:
                    json.dump(selftest, f)
                    f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
