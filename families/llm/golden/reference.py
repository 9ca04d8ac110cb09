#!/usr/bin/env python3
"""Reference outputs of the LLM family, from llama.cpp (llama-cpp-python 0.3.36).

Never run by the Rust build: its outputs are committed in this folder and the tests read
them. Two sub-commands, each in its own virtual environment:

  llama   (pip install llama-cpp-python==0.3.36 numpy; builds llama.cpp from source)
      reference.py llama --gguf .assets/SmolLM2-135M-Instruct.Q4_1.gguf --out families/llm/golden
      writes tokens.json   (a) token ids of hard strings, as llama_tokenize gives them
             logits.json   (b) teacher-forced logits over a text of >= 256 tokens (compact)
             chat.json     (c) chat prompts rendered by llama-cpp-python's Jinja2ChatFormatter
                               (the GGUF's own template), their ids, and 32 greedy tokens

  hf-dir  (pip install transformers gguf torch; CPU is enough)
      reference.py hf-dir --gguf .assets/SmolLM2-135M-Instruct.Q4_1.gguf --dir /tmp/smollm2-hf
      (d) the GGUF converted to a Hugging Face directory by transformers' GGUF loader
          (from_pretrained(..., gguf_file=...) then save_pretrained), weights saved as
          bfloat16 (what Hugging Face checkpoints of this model ship; the Q4_1 values
          dequantised then rounded to bf16). Not committed: tests find it through
          $TETHER_LLM_HF_DIR.

Logits are stored compactly (README.md): per position the top-1 id, the top-20 ids and
their logits, and the logits of a fixed sample of 64 vocabulary ids (numpy seed 25), all as
JSON floats (float32 values printed with 9 significant digits, exact round trip).
"""

import argparse
import json
import os
import sys

HARD_STRINGS = [
    "",
    " ",
    "Hello, world!",
    "Hello world",
    " Hello world",
    "  two leading spaces",
    "trailing spaces   ",
    "multiple\n\n\nnewlines\n",
    "\t tabs\tand spaces \t",
    "\r\nwindows\r\nline ends",
    "   \n  \n ",
    "café naïve résumé Ünïcödé",
    "emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷",
    "日本語のテキスト、中文文本。한국어 텍스트",
    "Ελληνικά Русский עברית العربية हिन्दी ไทย",
    "zero\u200bwidth\u00a0nbsp\u2009thin",
    "Ǆ ǅ ǆ ﬁ ﬀ ℌ",
    "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n",
    "def f(x):\n\treturn x ** 2  # square\n",
    "numbers 1234567 3.14159 1,000,000 -42 0x1F",
    "'s 't 're 've 'm 'll 'd THEY'RE I'M",
    "URL https://example.com/a?b=c&d=e#frag user@example.org",
    "!!!???... --- *** ===",
    "a" * 64,
    "                                ",
    "<|im_start|>user\nWhere is Paris?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text<|im_end|>more<|im_start|>",
    "<repo_name>tether<file_sep>main.rs<filename>x",
    "<|im_start|> spaced <|im_end|>",
    "not special: <|im_start |> <im_end>",
]

CHAT_PROMPTS = [
    [{"role": "user", "content": "Where is Paris?"}],
    [
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "Write a haiku about robots."},
    ],
    [{"role": "user", "content": "What is 17 * 23? Answer with the number only."}],
    [
        {"role": "user", "content": "Name three primary colors."},
        {"role": "assistant", "content": "Red, blue and yellow."},
        {"role": "user", "content": "And the secondary ones?"},
    ],
]

# >= 256 tokens of prose and code (written for this test).
LOGITS_TEXT = """The small robot rolled across the warehouse floor, its sensors sweeping the aisles for \
misplaced boxes. Every morning it woke at six, checked its battery, and downloaded the list of \
orders that had arrived overnight. Most days were quiet: a few dozen parcels, a pallet of paper, \
now and then a crate of spare parts for the forklifts. But on the first Monday of the month the \
list was long, and the robot had to plan its route carefully, because the charging dock was at \
the far end of the building and the battery never lasted more than four hours.

Engineers who build such machines care about latency more than throughput. A perception model \
that answers in ten milliseconds on average but sometimes takes a hundred is worse than one that \
always takes twenty, because the controller must plan for the worst case. That is why the \
runtime allocates every buffer when the model is loaded, captures the whole network into one \
graph, and never touches the allocator while the robot is moving.

def plan_route(orders, dock, battery_minutes):
    route = []
    for order in sorted(orders, key=lambda o: o.shelf):
        if estimate(route + [order], dock) > battery_minutes:
            route.append(dock)
        route.append(order)
    return route

In the evening the robot returned to its dock, reported the day's work, and waited."""

EVAL_N_CTX = 1024


def f32(x):
    return float(f"{float(x):.9g}")


def cmd_llama(args):
    import numpy as np
    import llama_cpp
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    os.makedirs(args.out, exist_ok=True)
    llm = llama_cpp.Llama(
        model_path=args.gguf,
        n_ctx=EVAL_N_CTX,
        n_batch=512,
        n_threads=args.threads,
        logits_all=True,
        verbose=False,
    )
    version = f"llama-cpp-python {llama_cpp.__version__}"
    meta = llm.metadata
    n_vocab = llm.n_vocab()

    def tok(text, add_special, parse_special):
        return llm.tokenize(text.encode("utf-8"), add_bos=add_special, special=parse_special)

    # (a) tokenisation.
    cases = []
    for s in HARD_STRINGS:
        plain = tok(s, False, False)
        cases.append(
            {
                "text": s,
                "parse_special": tok(s, False, True),
                "plain": plain,
                "add_special": tok(s, True, True),
                # detokenised as llama.cpp's token_to_piece concatenates them
                "detok": llm.detokenize(plain, special=False).decode("utf-8", "replace"),
            }
        )
    # Every single token's piece for a sample of ids (the streaming decoder's table).
    rng = np.random.default_rng(25)
    sample_ids = sorted(set(int(i) for i in rng.integers(0, n_vocab, 200)) | set(range(0, 20)))
    pieces = {
        str(i): list(llm.detokenize([i], special=True)) for i in sample_ids
    }
    with open(os.path.join(args.out, "tokens.json"), "w", encoding="utf-8") as f:
        json.dump(
            {
                "reference": version,
                "model": os.path.basename(args.gguf),
                "tokenizer_pre": meta.get("tokenizer.ggml.pre"),
                "cases": cases,
                "pieces_special": pieces,
            },
            f,
            ensure_ascii=False,
            indent=1,
        )

    # (b) teacher-forced logits.
    ids = tok(LOGITS_TEXT, True, False)
    assert len(ids) >= 256, len(ids)
    llm.reset()
    llm.eval(ids)
    scores = np.array(llm.scores[: len(ids)], dtype=np.float32)
    sample = sorted(int(i) for i in np.random.default_rng(25).choice(n_vocab, 64, replace=False))
    positions = []
    for p in range(len(ids)):
        row = scores[p]
        top = np.argsort(-row, kind="stable")[:20]
        positions.append(
            {
                "top1": int(top[0]),
                "top_ids": [int(i) for i in top],
                "top_logits": [f32(row[i]) for i in top],
                "sample_logits": [f32(row[i]) for i in sample],
            }
        )
    with open(os.path.join(args.out, "logits.json"), "w", encoding="utf-8") as f:
        json.dump(
            {
                "reference": version,
                "model": os.path.basename(args.gguf),
                "n_threads": args.threads,
                "text": LOGITS_TEXT,
                "ids": ids,
                "sample_ids": sample,
                "positions": positions,
            },
            f,
            ensure_ascii=False,
        )

    # (c) chat prompts through the GGUF's own template, and greedy generation.
    template = meta["tokenizer.chat_template"]
    bos = llm._model.token_get_text(llm.token_bos())
    eos = llm._model.token_get_text(llm.token_eos())
    fmt = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
    eog = [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(llm._model.vocab, i)]
    chats = []
    for messages in CHAT_PROMPTS:
        r = fmt(messages=messages)
        # llama-cpp-python's chat handler: add_bos=not result.added_special, special=True.
        prompt_ids = llm.tokenize(
            r.prompt.encode("utf-8"), add_bos=not r.added_special, special=True
        )
        llm.reset()
        llm.eval(prompt_ids)
        out = []
        finish = "length"
        for _ in range(args.max_tokens):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            t = int(np.argmax(logits))
            if t in eog:
                finish = "stop"
                out.append(t)
                break
            out.append(t)
            llm.eval([t])
        gen = [t for t in out if t not in eog]
        chats.append(
            {
                "messages": messages,
                "prompt": r.prompt,
                "prompt_ids": prompt_ids,
                "generated_ids": out,
                "finish": finish,
                "text": llm.detokenize(gen, special=False).decode("utf-8", "replace"),
            }
        )
    with open(os.path.join(args.out, "chat.json"), "w", encoding="utf-8") as f:
        json.dump(
            {
                "reference": version,
                "model": os.path.basename(args.gguf),
                "bos_token": bos,
                "eos_token": eos,
                "eog_ids": eog,
                "max_tokens": args.max_tokens,
                "greedy": "argmax over llama.cpp's logits after each token, stop at an end-of-generation id",
                "chats": chats,
            },
            f,
            ensure_ascii=False,
            indent=1,
        )
    print(f"wrote tokens.json, logits.json ({len(ids)} positions), chat.json to {args.out}")


def cmd_hf_dir(args):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d, name = os.path.split(os.path.abspath(args.gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, torch_dtype=torch.bfloat16)
    # transformers 5 marks a GGUF-loaded model as quantised and refuses to save it: the
    # weights are already dequantised, so move them into a plain model of the same config.
    config = model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    plain = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    assert not unexpected and all("lm_head" in k for k in missing), (missing, unexpected)
    plain.tie_weights()
    os.makedirs(args.dir, exist_ok=True)
    plain.save_pretrained(args.dir, safe_serialization=True)
    tok.save_pretrained(args.dir)
    with open(os.path.join(args.dir, "tether-reference.json"), "w") as f:
        json.dump(
            {
                "made_by": f"transformers {transformers.__version__}, torch {torch.__version__}",
                "from": name,
                "dtype": "bfloat16",
            },
            f,
        )
    print(f"wrote {args.dir}: {sorted(os.listdir(args.dir))}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("llama")
    a.add_argument("--gguf", required=True)
    a.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    a.add_argument("--threads", type=int, default=2)
    a.add_argument("--max-tokens", type=int, default=32)
    b = sub.add_parser("hf-dir")
    b.add_argument("--gguf", required=True)
    b.add_argument("--dir", required=True)
    args = p.parse_args()
    {"llama": cmd_llama, "hf-dir": cmd_hf_dir}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
