#!/usr/bin/env python3
"""Reference for Silero's *sequence form*: faster-whisper's own VAD (`faster-whisper==1.2.1`).

Writes the goldens the Rust `vad` family's sequence-form tests compare with. Every number comes
from faster-whisper's functions on onnxruntime; nothing is re-implemented. This docstring is
the contract.

Network
    `faster_whisper/assets/silero_vad_v6.onnx` (SHA-256 recorded): input f32 [T, 576], h and c
    f32 [1, 1, 128] -> speech_probs [T], hn, cn. `faster_whisper.vad.SileroVADModel.__call__`
    cuts 16 kHz audio (a multiple of 512 samples) into T windows of 512 samples, prefixes each
    with the previous window's last 64 samples (zeros for the first), and runs them as one
    sequence (batches of 10,000 windows, h and c carried) on onnxruntime CPU.

Self-test payload (selftest_sequence.json)
    The 16 kHz input of the streaming form's self-test (`selftest.json`: the first 8 chunks
    of alsa-utils Front_Center.wav, resampled by the silero-vad package) and the sequence
    network's probabilities for it, computed with one chunk of zeros appended (as
    get_speech_timestamps pads a whole number of chunks): `__call__` zeroes the last 64
    samples of its last window (`context[-1] = 0` writes through a numpy view into the
    windows), which must fall on padding, as it does inside get_speech_timestamps whenever
    the audio's last partial chunk holds at most 448 samples.

Speech (speech_16k.json, input speech_16k.wav)
    A 16 kHz mono int16 WAV made here once (espeak_robot.wav, a second of silence, the same
    sentence at half amplitude; 22.05 kHz -> 16 kHz by linear interpolation: any fixed signal
    does, both sides read this file). Read with `faster_whisper.audio.decode_audio`
    (checked equal to int16 / 32768). Probabilities: `get_vad_model()(audio padded as
    get_speech_timestamps pads it)`; segments: `get_speech_timestamps` with silero-vad's
    defaults (threshold 0.5, min speech 250 ms, min silence 100 ms, pad 30 ms) and with
    faster-whisper's own defaults (min speech 0 ms, min silence 2000 ms, pad 400 ms).

    /tmp/fw-venv/bin/python reference_sequence.py   # pip install faster-whisper==1.2.1
                                                    #   onnxruntime==1.32.0 numpy==2.4.6
"""

import hashlib
import json
import os
import sys
import wave

import numpy as np
import onnxruntime
import faster_whisper
from faster_whisper.audio import decode_audio
from faster_whisper.vad import VadOptions, get_speech_timestamps, get_vad_model
from faster_whisper.utils import get_assets_path

HERE = os.path.dirname(os.path.abspath(__file__))


def write_fixture(path):
    with wave.open(os.path.join(HERE, "espeak_robot.wav")) as w:
        assert w.getnchannels() == 1 and w.getsampwidth() == 2
        rate = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64)
    n = int(len(x) * 16000 / rate)
    y = np.interp(np.arange(n) * rate / 16000, np.arange(len(x)), x)
    sig = np.concatenate([y, np.zeros(16000), y * 0.5])
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.round(sig).astype("<i2").tobytes())


def main():
    model_path = os.path.join(get_assets_path(), "silero_vad_v6.onnx")
    sha = hashlib.sha256(open(model_path, "rb").read()).hexdigest()
    env = {
        "faster_whisper": faster_whisper.__version__,
        "onnxruntime": onnxruntime.__version__,
        "numpy": np.__version__,
        "model": "faster_whisper/assets/silero_vad_v6.onnx",
        "model_sha256": sha,
    }
    model = get_vad_model()

    st = json.load(open(os.path.join(HERE, "selftest.json")))
    pcm = np.array(st["pcm_16k"], dtype=np.float32)
    # One chunk of zeros appended, as get_speech_timestamps appends it to a whole number of
    # chunks: SileroVADModel.__call__ zeroes the last 64 samples of the last window (its
    # `context[-1] = 0` writes through a view into the windows), which must fall on padding.
    n = pcm.shape[0] // 512
    probs = model(np.pad(pcm, (0, 512)))[:n]
    json.dump(
        {
            "description": "the streaming form's self-test input through faster-whisper's sequence network",
            "pcm_16k": st["pcm_16k"],
            "probs": [float(p) for p in probs],
            "tolerance": 1e-4,
            "environment": env,
        },
        open(os.path.join(HERE, "selftest_sequence.json"), "w"),
    )

    wav = os.path.join(HERE, "speech_16k.wav")
    if not os.path.exists(wav):
        write_fixture(wav)
    audio = decode_audio(wav, sampling_rate=16000)
    with wave.open(wav) as w:
        raw = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768
    assert np.array_equal(audio, raw), "decode_audio is not int16 / 32768 here"
    padded = np.pad(audio, (0, 512 - audio.shape[0] % 512))
    speech_probs = model(padded)
    segments = {}
    for name, opts in {
        "silero_defaults": VadOptions(
            threshold=0.5, min_speech_duration_ms=250, min_silence_duration_ms=100, speech_pad_ms=30
        ),
        "faster_whisper_defaults": VadOptions(),
    }.items():
        segments[name] = {
            "options": {
                "threshold": opts.threshold,
                "min_speech_duration_ms": opts.min_speech_duration_ms,
                "min_silence_duration_ms": opts.min_silence_duration_ms,
                "speech_pad_ms": opts.speech_pad_ms,
            },
            "segments_samples": [
                [s["start"], s["end"]] for s in get_speech_timestamps(audio, opts, 16000)
            ],
        }
    json.dump(
        {
            "input": "speech_16k.wav",
            "input_sha256": hashlib.sha256(open(wav, "rb").read()).hexdigest(),
            "samples_16k": int(audio.shape[0]),
            "probs": [float(p) for p in speech_probs],
            "segments": segments,
            "environment": env,
        },
        open(os.path.join(HERE, "speech_16k.json"), "w"),
        indent=1,
    )
    print(sha, len(speech_probs), segments, file=sys.stderr)


if __name__ == "__main__":
    main()
