"""PyTorch peers of tether's GPU decoder (issue 26), SmolLM2-135M-Instruct from the same GGUF
(transformers dequantises it; bf16 on the GPU): eager `generate`, and the static KV cache
with `torch.compile` (mode reduce-overhead: CUDA graphs). Greedy, batch 1, pseudo-random
prompt ids. Decode tok/s at a position P = 127 / (t(prompt P, 128 new) - t(prompt P, 1 new));
time to first token = t(prompt 128, 1 new). Median of 3 after warm-up."""
import json, os, statistics, sys, time
import torch
from transformers import AutoModelForCausalLM

path = sys.argv[1]
forms = sys.argv[2].split(",") if len(sys.argv) > 2 else ["eager", "static_compile"]
d, f = os.path.dirname(path), os.path.basename(path)
torch.manual_seed(0)
out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
import transformers
out["transformers"] = transformers.__version__

def load():
    m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.bfloat16).cuda().eval()
    return m

def timed(m, prompt_len, new, **kw):
    ids = torch.randint(100, 40000, (1, prompt_len), device="cuda")
    torch.cuda.synchronize()
    t = time.perf_counter()
    with torch.inference_mode():
        o = m.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, **kw)
    torch.cuda.synchronize()
    assert o.shape[1] == prompt_len + new, o.shape
    return time.perf_counter() - t

def measure(name, m, kw, reps=3):
    r = {}
    for P in (128, 2048):
        for _ in range(2):
            timed(m, P, 128, **kw); timed(m, P, 1, **kw)
        print(name, P, "warm", flush=True)
        full = statistics.median(timed(m, P, 128, **kw) for _ in range(reps))
        one = statistics.median(timed(m, P, 1, **kw) for _ in range(reps))
        r[f"decode_tok_s@{P}"] = 127 / (full - one)
        r[f"ms_per_token@{P}"] = (full - one) / 127 * 1e3
        if P == 128:
            r["ttft_ms_pp128"] = one * 1e3
        print(name, P, r, flush=True)
    out[name] = r

m = load()
if "eager" in forms:
    t0 = time.time()
    measure("eager", m, {})
    out["eager"]["seconds"] = time.time() - t0
if "static_compile" in forms:
    # transformers' own path: a static KV cache makes `generate` compile the forward
    # (its CompileConfig: fullgraph, mode "reduce-overhead" = CUDA graphs).
    t0 = time.time()
    try:
        measure("static_compile", m, {"cache_implementation": "static"})
        out["static_compile"]["seconds"] = time.time() - t0
        out["static_compile"]["compile_config"] = str(m.generation_config.compile_config)
    except Exception as e:
        print("static cache + generate's compile failed:", repr(e)[:400], flush=True)
        out["static_compile_error"] = repr(e)[:400]
        torch._dynamo.reset()
        m = load()
        m.forward = torch.compile(m.forward, fullgraph=True)  # default mode: no CUDA graphs
        t0 = time.time()
        measure("static_compile_default_mode", m, {"cache_implementation": "static", "disable_compile": True})
        out["static_compile_default_mode"]["seconds"] = time.time() - t0
print(json.dumps(out, indent=1))
