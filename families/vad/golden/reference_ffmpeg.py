#!/usr/bin/env python3
"""The WAV goldens again through silero-vad's other audio reader: FFmpeg.

`silero_vad.read_audio` (silero-vad 6.2.3, utils_vad.py) reads a file with
`torchaudio.load` when torchaudio < 2.9 is installed (reference.py records that
branch: the soundfile backend, libsndfile), and with torchaudio 2.9 (or without
torchaudio) through torchcodec's `AudioDecoder`, i.e. FFmpeg's WAV demuxer and
decoders. Which one a user has depends on the torchaudio they installed, so
tether is checked against both. Nothing is re-implemented here: every number is
read_audio's output and get_speech_timestamps' segments (package defaults) with
the package's `OnnxWrapper` on `silero_vad_op18_ifless.onnx` (onnxruntime CPU).

Writes formats_ffmpeg.json next to this file:
  files.NAME   for each clip of formats.json (tests/field/wav/NAME.wav): the
               sample count and SHA-256 of the float32 little-endian signal, or
               `error` with FFmpeg's message where it refuses the file.
  full.NAME    the field files of ../../../shared cases (FIELD_DIR): samples
               and segments, as formats.json's `full`.

    python reference_ffmpeg.py --field FIELD_DIR --wav REPO/tests/field/wav \
        --model silero_vad_op18_ifless.onnx
"""
import argparse
import hashlib
import json
import os
import sys
import tempfile
import warnings

import numpy as np
import soundfile as sf
import torchaudio
import torchcodec
from silero_vad import get_speech_timestamps, read_audio
from silero_vad.utils_vad import OnnxWrapper

SR = 16000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--field", required=True, help="folder with vad_control_pcm16.wav, vad_alaw.wav, vad_12bit_in_16.wav")
    ap.add_argument("--wav", required=True, help="the format clips (tests/field/wav)")
    ap.add_argument("--model", required=True, help="silero_vad_op18_ifless.onnx")
    a = ap.parse_args()
    if not torchaudio.__version__.startswith("2.9"):
        sys.exit(f"torchaudio {torchaudio.__version__}: this script records the torchcodec branch of read_audio (torchaudio 2.9)")
    warnings.filterwarnings("ignore")
    here = os.path.dirname(os.path.abspath(__file__))
    clips = json.load(open(os.path.join(here, "formats.json")))["files"]
    files = {}
    for name in clips:
        try:
            w = read_audio(os.path.join(a.wav, f"{name}.wav"), sampling_rate=SR).numpy().astype("<f4")
            files[name] = {"samples": int(w.shape[0]), "sha256_f32le": hashlib.sha256(w.tobytes()).hexdigest()}
        except Exception as e:  # the reference refusing a file is a result too
            files[name] = {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
    model = OnnxWrapper(a.model, force_onnx_cpu=True)
    full = {}
    with tempfile.TemporaryDirectory() as tmp:
        ctl = open(os.path.join(a.field, "vad_control_pcm16.wav"), "rb").read()
        cut = os.path.join(tmp, "vad_truncated.wav")
        open(cut, "wb").write(ctl[:75060])
        f64 = os.path.join(tmp, "vad_f64.wav")
        pcm, sr = sf.read(os.path.join(a.field, "vad_control_pcm16.wav"), dtype="int16")
        sf.write(f64, pcm.astype(np.float64) / 32768.0, sr, format="WAV", subtype="DOUBLE")
        paths = {n: os.path.join(a.field, f"{n}.wav") for n in ["vad_control_pcm16", "vad_alaw", "vad_12bit_in_16"]}
        paths["vad_truncated (control cut to 75,060 bytes)"] = cut
        paths["vad_f64 (control / 32768 as 64-bit float)"] = f64
        for name, path in paths.items():
            wav = read_audio(path, sampling_rate=SR)
            model.reset_states()
            segs = get_speech_timestamps(wav, model)
            full[name] = {"samples": int(wav.shape[0]),
                          "segments_samples": [[s["start"], s["end"]] for s in segs]}
    out = {"reference": f"silero_vad.read_audio (torchaudio {torchaudio.__version__}, torchcodec "
                        f"{torchcodec.__version__}: FFmpeg {ffmpeg_version()}) + get_speech_timestamps",
           "files": files, "full": full}
    with open(os.path.join(here, "formats_ffmpeg.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    return 0


def ffmpeg_version() -> str:
    try:
        from torchcodec._core import get_ffmpeg_library_versions
        return get_ffmpeg_library_versions().get("ffmpeg_version", "?")
    except Exception:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
