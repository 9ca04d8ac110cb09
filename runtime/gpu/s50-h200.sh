#!/usr/bin/env bash
# Issue 26, session 50 (docs/evidence/llm-gpu.md, session 50): `layers_grid` (every merged
# layer as one cooperative launch, `TETHER_LLM_GRID=1`) below the layer kernel's switch,
# beside the default decoder (the layer kernel below 640, the paired tails from there) on
# the real model, with llama.cpp's decode in the same call; on an H200 also session 49's
# `final` (the default decoder's evidence: gpu_fuse, gpu_decode, gpu_ahead, benches,
# llama.cpp, inter-token latency, sampled text).
# Run in session 51 (an H100): `stage-syn` and `stage` (its calls in docs/evidence/llm-gpu.md,
# session 51); `grid` and `final` not run (session 50's call 3 measured the grid directly).
# Files (built on the development VM, stripped, xz), carried in .device folders over
# consecutive calls while the host is warm (all unpacked by lib.sh's `unpack`):
#   gpu_fuse-new.xz, gpu_decode-new.xz, gpu_ahead-new.xz   `cargo test --release -p tether-llm
#                      --features cuda,build,cli --no-run`
#   tether-new.xz      `cargo build --release --features cuda --bin tether`
#   part0?             SmolLM2-135M-Instruct.Q4_1.gguf in parts (`split -b 34000000`)
#   llama-bench-sm90.xz  runtime/gpu/llamacpp-cuda-offline.sh's llama-bench
# Steps:
#   unpack    lib.sh's
#   grid      with the GGUF: `layers_grid` bit-equal (gpu_fuse's layer-kernel tests and
#             real-model case, gpu_decode's greedy and teacher-forced checks, each with
#             TETHER_LLM_GRID=1); `tether bench` of the default decoder and of
#             TETHER_LLM_GRID=1 alternating (2 rounds), the grid without staged cache rows
#             (TETHER_LLM_GRID_STAGE=0) once; inter-token latency over 5,120 intervals at
#             128 for the three and at 384 for the grid; llama-bench beside
#   stage-syn `attention_cluster` staging its earlier cache rows in shared memory before its
#             dependency wait (default) against TETHER_LLM_ATT_STAGE=0 (the same binary):
#             gpu_fuse but its speed test (the fused step and the tails bit-equal to the
#             unfused step, spans up to 8,192), its speed test at AT2 with and without
#   stage     the same on the real model (the GGUF): gpu_decode (but the allocation test),
#             gpu_ahead, gpu_fuse's real-model case; `tether bench` with and without
#             alternating (2 rounds), llama-bench beside, inter-token latency at 2,048
#             (5,120 intervals)
#   final     on an H200 only: session 49's `final` (runtime/gpu/s49-h200.sh)
#   pack      the logs into logs.tar.xz
set -u
source "$(dirname "$0")/lib.sh"
AT=128,256,384,512,640,1024,2048
AT2=128,768,2048
for s in "$@"; do
case "$s" in
unpack) unpack ;;
grid)
  gguf
  cd $B
  step fuse-grid 150 env TETHER_LLM_GRID=1 ./gpu_fuse-new layer_kernel --test-threads 1 --nocapture
  step real-grid 150 env TETHER_LLM_GRID=1 TETHER_FUSE_REAL=1 TETHER_ASSETS=$W/assets ./gpu_fuse-new real_model --test-threads 1 --nocapture
  step decode-grid 200 env TETHER_LLM_GRID=1 TETHER_ASSETS=$W/assets ./gpu_decode-new --skip allocation_free --test-threads 1 --nocapture
  grep -hE "^test |chat |top-1|differ|rc=|panicked|test result" $OUT/fuse-grid.log $OUT/real-grid.log $OUT/decode-grid.log | cut -c1-200
  [ -f $W/smollm2.bundle ] || step build 60 ./tether-new build --family llm --gguf $G -o $W/smollm2.bundle
  for i in 1 2; do
    step bench-default 100 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
    step bench-grid 100 env TETHER_LLM_GRID=1 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  done
  step bench-grid-nostage 100 env TETHER_LLM_GRID=1 TETHER_LLM_GRID_STAGE=0 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  step itl-default 60 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt 128 --n-gen 128 --runs 40
  step itl-grid 60 env TETHER_LLM_GRID=1 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt 128,384 --n-gen 128 --runs 40
  step itl-grid-nostage 60 env TETHER_LLM_GRID=1 TETHER_LLM_GRID_STAGE=0 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt 128 --n-gen 128 --runs 40
  llamacpp $AT
  for f in bench-default bench-grid bench-grid-nostage itl-default itl-grid itl-grid-nostage; do echo "== $f"; grep -E "tg128|inter-token @|launches per|rc=" $OUT/$f.log | grep -v "no step" | cut -c1-200; done
  grep -E "tg128|rc=" $OUT/llamacpp.log 2>/dev/null
  cd $R ;;
stage-syn)
  cd $B
  step fuse 150 ./gpu_fuse-new --skip speeds --test-threads 1 --nocapture
  grep -hE "^test |differ|rc=|panicked|test result" $OUT/fuse.log | cut -c1-200
  for v in 1 0; do
    step speed-stage$v 150 env TETHER_LLM_ATT_STAGE=$v TETHER_FUSE_AT=$AT2 TETHER_FUSE_VARIANTS=1,4,5 ./gpu_fuse-new fused_and_unfused_step_speeds --test-threads 1 --nocapture
    grep -hE "tg128@|rc=" $OUT/speed-stage$v.log | sed -E 's/SmolLM2 shape, 30 layers Q4_1, //' | cut -c1-200
  done
  cd $R ;;
stage)
  gguf
  cd $B
  step decode 200 env TETHER_ASSETS=$W/assets ./gpu_decode-new --skip allocation_free --test-threads 1 --nocapture
  step ahead 100 ./gpu_ahead-new --test-threads 1 --nocapture
  step fuse-real 200 env TETHER_FUSE_REAL=1 TETHER_ASSETS=$W/assets ./gpu_fuse-new real_model --test-threads 1 --nocapture
  grep -hE "^test |chat |top-1|rc=|panicked|test result" $OUT/decode.log $OUT/ahead.log $OUT/fuse-real.log | cut -c1-200
  [ -f $W/smollm2.bundle ] || step build 60 ./tether-new build --family llm --gguf $G -o $W/smollm2.bundle
  for i in 1 2; do
    step bench-nostage 100 env TETHER_LLM_ATT_STAGE=0 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
    step bench-stage 100 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  done
  step bench-stage-tails 100 env TETHER_LLM_LAYER_KERNEL=0 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  llamacpp $AT
  step itl-stage 60 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt 2048 --n-gen 128 --runs 40
  for f in bench-nostage bench-stage bench-stage-tails itl-stage; do echo "== $f"; grep -E "tg128|inter-token @|launches per|rc=" $OUT/$f.log | grep -v "no step" | cut -c1-200; done
  grep -E "tg128|rc=" $OUT/llamacpp.log 2>/dev/null
  cd $R ;;
final)
  if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    LIMIT=$(left) bash $R/runtime/gpu/s49-h200.sh final
  else
    echo "final: not an H200 ($(nvidia-smi --query-gpu=name --format=csv,noheader)), skipped" | tee -a $OUT/host.log
  fi ;;
pack)
  (cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log) ;;
*) echo "usage: $0 unpack | stage-syn | stage | grid | final | pack ..." >&2; exit 2 ;;
esac
done
