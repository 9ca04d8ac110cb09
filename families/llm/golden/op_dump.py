#!/usr/bin/env python3
"""llama.cpp's tensor after every operation of a forward pass, for comparing the CPU engine
with it op by op (docs/evidence/llm-cpu.md, 2026-12-04). Never run by the Rust build, never
a golden: a diagnostic of the reference side.

  LLAMA_CPP_LIB_PATH=<dir with libllama.so> python op_dump.py --gguf MODEL.gguf \
      --golden families/llm/golden/logits.json --tokens 6 --out /tmp/llama-ops.npz

llama-cpp-python 0.3.36's ctypes layer (its package; the library from LLAMA_CPP_LIB_PATH, e.g.
its vendored llama.cpp built with the AVX2 flags of the evidence). The first --tokens ids of
the golden text go in one batch (n_ctx 1024, n_batch 512, 2 threads, no flash attention, as
reference.py); `cb_eval` asks for every f32 tensor and stores the contiguous ones as
`<name>#<k>` (k-th tensor of that name: `Qcur-0#0` the projection, `#2` after RoPE).
"""

import argparse
import ctypes
import json

import numpy as np


class GgmlTensor(ctypes.Structure):
    # ggml.h `struct ggml_tensor` (GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64, GGML_MAX_SRC 10,
    # GGML_MAX_NAME 64) of the vendored ggml.
    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--golden", required=True)
    ap.add_argument("--tokens", type=int, default=6)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import llama_cpp as L

    ids = json.load(open(args.golden))["ids"][: args.tokens]
    seen, out = {}, {}

    @L.ggml_backend_sched_eval_callback
    def cb(t, ask, _user):
        if ask:
            return True
        tt = ctypes.cast(t, ctypes.POINTER(GgmlTensor)).contents
        ne, nb = list(tt.ne), list(tt.nb)
        if tt.type != 0 or nb[0] != 4 or nb[1] != 4 * ne[0] or nb[2] != nb[1] * ne[1]:
            return True  # f32 and contiguous only
        n = ne[0] * ne[1] * ne[2] * ne[3]
        p = ctypes.cast(tt.data, ctypes.POINTER(ctypes.c_float))
        name = tt.name.decode()
        k = seen.get(name, 0)
        seen[name] = k + 1
        out[f"{name}#{k}"] = np.ctypeslib.as_array(p, shape=(n,)).copy()
        return True

    L.llama_backend_init()
    model = L.llama_model_load_from_file(args.gguf.encode(), L.llama_model_default_params())
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 1024, 512, 512
    cp.n_threads = cp.n_threads_batch = 2
    cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cp.cb_eval = cb
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(512, 0, 1)
    for i, t in enumerate(ids):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = t, i, 1, 1
        batch.seq_id[i][0] = 0
    batch.n_tokens = len(ids)
    if L.llama_decode(ctx, batch) != 0:
        raise SystemExit("llama_decode failed")
    np.savez(args.out, **out)
    print(f"{len(out)} tensors -> {args.out}")


if __name__ == "__main__":
    main()
