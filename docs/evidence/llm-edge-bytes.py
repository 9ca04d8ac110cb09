#!/usr/bin/env python3
"""Bytes one generated token reads, and the tokens per second that memory bandwidth allows.

Decode at batch 1 is memory-bound: every weight matrix is read once per token (the token
embedding table once as the output head when the embeddings are tied, one row otherwise),
plus the KV cache of every earlier position (K and V, f16, every layer, the KV heads only).
Activations (a few KB) are left out. The bound is bandwidth / bytes; real decoders reach a
fraction of it (kernel efficiency, launch gaps).

Usage:
  llm-edge-bytes.py MODEL.gguf [--positions 128,2048]     (needs `pip install gguf==0.19.0`)
  llm-edge-bytes.py --qwen3-0.6b-q4                       (published hyper-parameters, below)

Bandwidths (vendor datasheets): Jetson AGX Orin 64GB 204.8 GB/s, Jetson Orin Nano 8GB
68 GB/s, Orin Nano Super 102 GB/s, H200 4.8 TB/s.
"""

import argparse

BANDWIDTHS = [
    ("Jetson AGX Orin (204.8 GB/s)", 204.8e9),
    ("Jetson Orin Nano 8GB (68 GB/s)", 68e9),
    ("Jetson Orin Nano Super (102 GB/s)", 102e9),
    ("H200 (4.8 TB/s)", 4.8e12),
]

# ggml block sizes: (values per block, bytes per block); ggml/include/ggml.h, ggml-common.h.
BLOCK = {
    "F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q8_0": (32, 34), "Q4_0": (32, 18),
    "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24), "Q4_K": (256, 144),
    "Q5_K": (256, 176), "Q6_K": (256, 210), "Q8_K": (256, 292),
}


def tensor_bytes(ttype, n):
    per, size = BLOCK[ttype]
    return n // per * size


def from_gguf(path):
    import gguf

    r = gguf.GGUFReader(path)
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")

    def kv(key):
        return int(r.fields[f"{arch}.{key}"].parts[-1][0])

    layers, width = kv("block_count"), kv("embedding_length")
    heads, kv_heads = kv("attention.head_count"), kv("attention.head_count_kv")
    head_dim = (
        kv("attention.key_length") if f"{arch}.attention.key_length" in r.fields else width // heads
    )
    names = {t.name: t for t in r.tensors}
    tied = "output.weight" not in names
    weights = 0
    for t in r.tensors:
        b = int(t.n_bytes)
        if t.name == "token_embd.weight" and not tied:
            b = b // int(t.shape[-1])  # one row: the step's token
        weights += b
    return dict(name=path.rsplit("/", 1)[-1], weights=weights, layers=layers,
                kv_heads=kv_heads, head_dim=head_dim, tied=tied)


def qwen3_06b_q4():
    # Qwen/Qwen3-0.6B config.json: 28 layers, hidden 1024, 16 heads, 8 KV heads, head_dim 128,
    # intermediate 3072, vocab 151936, tie_word_embeddings true. Every matrix at Q4_0
    # (4.5 bits per weight), the small norms in f32.
    layers, d, q, kvh, hd, ff, vocab = 28, 1024, 16, 8, 128, 3072, 151936
    per_layer = d * q * hd + 2 * d * kvh * hd + q * hd * d + 3 * d * ff
    mats = layers * per_layer + vocab * d
    norms = 4 * (layers * (2 * d + 2 * hd) + d)
    return dict(name="Qwen3-0.6B, every matrix Q4_0 (tied embeddings)",
                weights=tensor_bytes("Q4_0", mats) + norms, layers=layers, kv_heads=kvh,
                head_dim=hd, tied=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf", nargs="?")
    ap.add_argument("--qwen3-0.6b-q4", dest="qwen3", action="store_true")
    ap.add_argument("--positions", default="128,2048")
    a = ap.parse_args()
    m = qwen3_06b_q4() if a.qwen3 else from_gguf(a.gguf)
    cache = m["layers"] * 2 * m["kv_heads"] * m["head_dim"] * 2
    print(f"model: {m['name']}")
    print(f"weights read per token: {m['weights']} bytes ({m['weights'] / 1e6:.1f} MB)"
          f"{', embedding table read as the output head' if m['tied'] else ''}")
    print(f"KV cache read per token: {cache} bytes per earlier position (f16 K and V)")
    for p in [int(x) for x in a.positions.split(",")]:
        total = m["weights"] + cache * p
        print(f"\nat position {p}: {total / 1e6:.1f} MB per token")
        for label, bw in BANDWIDTHS:
            print(f"  {label:36s} bound {bw / total:8.0f} tokens/s")


if __name__ == "__main__":
    main()
