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


# Speech thresholds at and below 0.01, where the package's exit threshold
# max(threshold - 0.15, 0.01) is at or above the speech threshold (issue 28).
LOW_THRESHOLD_SETS = [
    {"threshold": 0.01},
    {"threshold": 0.005},
    {"threshold": 0.0},
    {"threshold": 0.1},
    {"threshold": 0.005, "min_silence_duration_ms": 0, "speech_pad_ms": 0},
]


def low_threshold_segments() -> dict:
    """`get_speech_timestamps_from_probs` with LOW_THRESHOLD_SETS on seeded
    sequences of small probabilities (0 to 0.05, runs around the thresholds)."""
    rng = np.random.default_rng(20261228)
    cases = []
    for n in range(20):
        probs = []
        target = int(rng.integers(20, 250))
        while len(probs) < target:
            kind = rng.integers(0, 3)
            run = int(rng.integers(1, 25))
            if kind == 0:
                vals = rng.uniform(0.0, 0.006, run)
            elif kind == 1:
                vals = rng.uniform(0.004, 0.012, run)
            else:
                vals = rng.uniform(0.0, 0.05, run)
            probs.extend(vals.tolist())
        probs = [f32(np.float32(v)) for v in probs[:target]]
        length = len(probs) * CHUNK - int(rng.integers(0, CHUNK))
        params = LOW_THRESHOLD_SETS[n % len(LOW_THRESHOLD_SETS)]
        segs = get_speech_timestamps_from_probs(probs, sampling_rate=SR, audio_length_samples=length, **params)
        cases.append({
            "params": params,
            "audio_length_samples": length,
            "probs": probs,
            "segments_samples": [[s["start"], s["end"]] for s in segs],
        })
    return {"function": "silero_vad.get_speech_timestamps_from_probs", "silero_vad": silero_vad.__version__,
            "cases": cases}


# ---------------------------------------------------------------- WAV formats
#
# What the reference's `read_audio` decodes (torchaudio 2.8 -> libsndfile through the
# soundfile backend) for every kind of WAV file in the field (issue 28): small clips written
# from the field control clip by libsndfile itself (or patched to the header a streaming or
# cut-off writer leaves), committed under tests/field/wav/; the golden is each file's
# decoded 16 kHz float32 signal (its SHA-256 and samples), and the speech segments of the
# full-length field files in tests/field/.

CLIP = slice(8000, 10000)  # 2000 samples of speech of the control clip


def riff_chunks(b: bytes):
    i, out = 12, []
    while i + 8 <= len(b):
        cid, size = b[i:i + 4], int.from_bytes(b[i + 4:i + 8], "little")
        out.append((cid, i, size))
        i += 8 + size + (size & 1)
    return out


def patch_size(b: bytearray, chunk: bytes, value: int) -> None:
    for cid, at, _ in riff_chunks(bytes(b)):
        if cid == chunk:
            b[at + 4:at + 8] = value.to_bytes(4, "little")
            return
    raise ValueError(chunk)


def insert_before_data(b: bytes, chunk: bytes) -> bytes:
    for cid, at, _ in riff_chunks(b):
        if cid == b"data":
            out = bytearray(b[:at] + chunk + b[at:])
            out[4:8] = (len(out) - 8).to_bytes(4, "little")
            return bytes(out)
    raise ValueError("no data chunk")


def write_format_files(field: str) -> dict:
    """The clips under field/wav/: name -> how it was made."""
    pcm, sr = sf.read(os.path.join(field, "vad_control_pcm16.wav"), dtype="int16")
    clip = pcm[CLIP]
    d = os.path.join(field, "wav")
    os.makedirs(d, exist_ok=True)
    made = {}
    for name, fmt, subtype in [
        ("pcm_u8", "WAV", "PCM_U8"), ("pcm_s24", "WAV", "PCM_24"), ("pcm_s32", "WAV", "PCM_32"),
        ("float32", "WAV", "FLOAT"), ("float64", "WAV", "DOUBLE"), ("alaw", "WAV", "ALAW"),
        ("mulaw", "WAV", "ULAW"), ("ext_pcm16", "WAVEX", "PCM_16"), ("ext_pcm24", "WAVEX", "PCM_24"),
        ("ext_float32", "WAVEX", "FLOAT"), ("ext_float64", "WAVEX", "DOUBLE"), ("ext_alaw", "WAVEX", "ALAW"),
        ("ext_mulaw", "WAVEX", "ULAW"), ("rf64_pcm16", "RF64", "PCM_16"),
    ]:
        path = os.path.join(d, f"{name}.wav")
        # Float files hold the samples as the reader normalises them (libsndfile would
        # store int16 values as they are).
        data = clip.astype(np.float64) / 32768.0 if subtype in ("FLOAT", "DOUBLE") else clip
        sf.write(path, data, sr, format=fmt, subtype=subtype)
        made[name] = f"libsndfile {fmt} {subtype}"
    with tempfile.NamedTemporaryFile(suffix=".wav") as t:
        sf.write(t.name, clip, sr, format="WAV", subtype="PCM_16")
        plain = bytearray(open(t.name, "rb").read())
    # ffmpeg/arecord writing to a pipe: RIFF and data sizes 0xFFFFFFFF.
    b = bytearray(plain)
    b[4:8] = (0xFFFFFFFF).to_bytes(4, "little")
    patch_size(b, b"data", 0xFFFFFFFF)
    open(os.path.join(d, "stream_ffffffff.wav"), "wb").write(b)
    made["stream_ffffffff"] = "PCM_16 with RIFF and data sizes 0xFFFFFFFF (a streaming writer)"
    for name, size in [("stream_7fffffff", 0x7FFFFFFF), ("stream_zero", 0)]:
        b = bytearray(plain)
        b[4:8] = size.to_bytes(4, "little")
        patch_size(b, b"data", size)
        open(os.path.join(d, f"{name}.wav"), "wb").write(b)
        made[name] = f"PCM_16 with RIFF and data sizes {size:#x} (a streaming writer)"
    # A data size larger than the file (a recording cut off): header for 2000 samples,
    # 1500 present, the last one half (an odd byte).
    b = bytearray(plain)
    open(os.path.join(d, "cut_off.wav"), "wb").write(bytes(b[:len(b) - 1001]))
    made["cut_off"] = "PCM_16, the last 1001 bytes of data missing (the header still says 4000)"
    # An odd-sized chunk (with its pad byte) before data.
    odd = b"LIST" + (5).to_bytes(4, "little") + b"INFOa" + b"\0"
    open(os.path.join(d, "odd_chunk.wav"), "wb").write(insert_before_data(bytes(plain), odd))
    made["odd_chunk"] = "PCM_16 with a 5-byte LIST chunk and its pad byte before data"
    # 12 significant bits in 16-bit samples (wBitsPerSample 12, block align 2).
    b = bytearray(plain)
    for cid, at, _ in riff_chunks(bytes(b)):
        if cid == b"fmt ":
            b[at + 8 + 14:at + 8 + 16] = (12).to_bytes(2, "little")
    data_at = [at for cid, at, _ in riff_chunks(bytes(b)) if cid == b"data"][0] + 8
    x = np.frombuffer(bytes(b[data_at:data_at + 2 * len(clip)]), "<i2") & ~0xF
    b[data_at:data_at + 2 * len(clip)] = x.astype("<i2").tobytes()
    open(os.path.join(d, "pcm12_in_16.wav"), "wb").write(b)
    made["pcm12_in_16"] = "12-bit samples (low 4 bits zero) in a 16-bit container"
    return made


def decoded(path: str) -> dict:
    """The reference's read_audio on `path`: its float32 signal, or the error it raises."""
    try:
        wav = read_audio(path, sampling_rate=SR).numpy().astype("<f4")
    except Exception as e:  # noqa: BLE001 - recorded: the reference refuses the file
        return {"error": f"{type(e).__name__}: {e}"}
    return {
        "samples": int(wav.shape[0]),
        "sha256_f32le": hashlib.sha256(wav.tobytes()).hexdigest(),
        "first": [float(v) for v in wav[:8]],
    }


def formats_golden(field: str, model) -> dict:
    made = write_format_files(field)
    files = {}
    for name, how in made.items():
        g = decoded(os.path.join(field, "wav", f"{name}.wav"))
        g["made"] = how
        files[name] = g
    # Full-length field files: segments of get_speech_timestamps on what read_audio gives.
    full = {}
    with tempfile.TemporaryDirectory() as tmp:
        ctl = open(os.path.join(field, "vad_control_pcm16.wav"), "rb").read()
        cut = os.path.join(tmp, "vad_truncated.wav")
        open(cut, "wb").write(ctl[:75060])
        f64 = os.path.join(tmp, "vad_f64.wav")
        pcm, sr = sf.read(os.path.join(field, "vad_control_pcm16.wav"), dtype="int16")
        sf.write(f64, pcm.astype(np.float64) / 32768.0, sr, format="WAV", subtype="DOUBLE")
        paths = {n: os.path.join(field, f"{n}.wav") for n in ["vad_control_pcm16", "vad_alaw", "vad_12bit_in_16"]}
        paths["vad_truncated (control cut to 75,060 bytes)"] = cut
        paths["vad_f64 (control / 32768 as 64-bit float)"] = f64
        for name, path in paths.items():
            wav = read_audio(path, sampling_rate=SR)
            model.reset_states()
            segs = get_speech_timestamps(wav, model)
            full[name] = {"samples": int(wav.shape[0]),
                          "segments_samples": [[s["start"], s["end"]] for s in segs]}
    return {"reference": "silero_vad.read_audio (torchaudio 2.8, soundfile backend: libsndfile "
                         f"{sf.__libsndfile_version__}) + get_speech_timestamps",
            "clip": [CLIP.start, CLIP.stop], "files": files, "full": full}


def write_stereo(mono_path: str, out_path: str) -> None:
    pcm, sr = sf.read(mono_path, dtype="int16")
    stereo = np.stack([pcm, pcm >> 1], axis=1).astype(np.int16)
    sf.write(out_path, stereo, sr, subtype="PCM_16")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--assets", required=True, help="folder with the fetched alsa-utils WAVs and the ifless model")
    ap.add_argument("--out", required=True, help="golden folder (also holds espeak_robot.wav)")
    ap.add_argument("--segments-only", action="store_true",
                    help="write only the segment-logic goldens (pure Python in the package; no audio, no model)")
    ap.add_argument("--formats", metavar="FIELD_DIR",
                    help="write the WAV format clips under FIELD_DIR/wav/ and formats.json (then stop)")
    args = ap.parse_args(argv)

    with open(os.path.join(args.out, "segments_synthetic.json"), "w") as f:
        json.dump(synthetic_segments(), f)
        f.write("\n")
    with open(os.path.join(args.out, "segments_low_threshold.json"), "w") as f:
        json.dump(low_threshold_segments(), f)
        f.write("\n")
    if args.segments_only:
        return 0
    if args.formats:
        ifless = OnnxWrapper(os.path.join(args.assets, "silero_vad_op18_ifless.onnx"), force_onnx_cpu=True)
        with open(os.path.join(args.out, "formats.json"), "w") as f:
            json.dump(formats_golden(args.formats, ifless), f, indent=1)
            f.write("\n")
        return 0

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
