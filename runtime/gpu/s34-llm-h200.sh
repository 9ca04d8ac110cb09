#!/usr/bin/env bash
# Session 34 (issue 26, "Correct"), for the lead's real-model call: the GPU decoder's tests
# on the real SmolLM2-135M-Instruct Q4_1 with the known gaps included (greedy tokens against
# llama.cpp's and the CPU engine's, teacher-forced top-1), and the synthetic bit-for-bit tests.
# Needs, built from branch s34-gnum (`cargo test --release -p tether-llm --features
# cuda,build,cli --no-run`, stripped), in directory $1: gpu_decode, gpu_numerics, gpu_fuse,
# gpu_prefill; $2: the GGUF (SmolLM2-135M-Instruct.Q4_1.gguf, SHA-256 b179c952...db53).
# Usage: bash runtime/gpu/s34-llm-h200.sh BIN_DIR GGUF   (logs into $OUT, or ./out)
set -u
BIN=$(cd "$1" && pwd); GGUF=$(readlink -f "$2"); OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
A=/tmp/s34-assets; mkdir -p $A; ln -sf "$GGUF" $A/SmolLM2-135M-Instruct.Q4_1.gguf
{ date -u; hostname; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader;
  (cd "$BIN" && sha256sum gpu_decode gpu_numerics gpu_fuse gpu_prefill); sha256sum "$GGUF"; } > "$OUT/s34-llm-host.log" 2>&1
cd "$BIN"
for t in gpu_numerics gpu_fuse gpu_prefill; do
  timeout -s INT 300 ./$t --test-threads 1 --nocapture > "$OUT/s34-llm-$t.log" 2>&1; echo "rc=$?" >> "$OUT/s34-llm-$t.log"
done
TETHER_ASSETS=$A TETHER_FUSE_REAL=1 timeout -s INT 200 ./gpu_fuse --test-threads 1 --nocapture real_model > "$OUT/s34-llm-gpu_fuse-real.log" 2>&1; echo "rc=$?" >> "$OUT/s34-llm-gpu_fuse-real.log"
TETHER_ASSETS=$A timeout -s INT 400 ./gpu_decode --test-threads 1 --nocapture --include-ignored > "$OUT/s34-llm-gpu_decode.log" 2>&1; echo "rc=$?" >> "$OUT/s34-llm-gpu_decode.log"
grep -hE "^test |differ|greedy|top-1|GPU =|tokens|tg128|pp128|panicked|rc=|result" "$OUT"/s34-llm-*.log | cut -c1-300 | head -80
