#!/usr/bin/env bash
# Issue 26, session 43: the decoder taking the layer kernel's graph below a position and the
# fused step's from there (GpuOptions::layer_kernel_below), and the layer kernel asking L2
# for the cache rows it attends over before its dependency wait (LayerParams::kv_rows).
# Unpacks as runtime/gpu/s42-h200.sh does (whatever `.device` folders the call carries: `*.xz`
# into $B, `part0?` into $W; the host keeps /tmp while it stays warm between back-to-back
# calls), so the GGUF's four parts can come over several calls.
# Files, built on the development VM (untracked, stripped):
#   gpu_fuse.xz       `cargo test --release -p tether-llm --features cuda,build,cli --no-run`
#   tether.xz         `cargo build --release --bin tether`
#   layer-prof*.xz    runtime/gpu/s41-layer-prof.cu (nvcc -arch=sm_90 -O3; each run without
#                     and with the cache prefetch) on variants of llm.cu: call 1 the session's
#                     first change (layer-prof) and the same with `::evict_last` (layer-prof-el);
#                     call 5 commit 0bc2d26's (layer-prof-head) and the batched attention loads
#                     (layer-prof-rows)
#   llama-bench-sm90.xz  llamacpp-cuda-offline.sh's llama-bench
#   COMMIT            the commit the binaries are of
# Steps (any order, several per call):
#   unpack   unpack / copy what this call carried
#   kernels  gpu_fuse's tests (bit-equality, the switching decoder, the speed test on the
#            SmolLM2 shape), then the layer profile without and with the cache prefetch
#   real     the real model: its decoders equal bit for bit (TETHER_FUSE_REAL=1); `tether
#            bench` at positions 128, 512, 1024, 1536, 2048 with the fused step alone
#            (TETHER_LLM_LAYER_KERNEL=0), the layer kernel alone with and without the cache
#            prefetch (=1, TETHER_LLM_KV_PREFETCH=0) and the default (the layer kernel below
#            position 1,536; the first call's binaries, before 0bc2d26: 1,024), alternating,
#            ROUNDS rounds; a chat run with the default; llama.cpp's
#            llama-bench (prebuilt) with flash attention at depths 128, 512, 1024, 1536, 2048
# e.g. carry .device/s43 .device/s37-g0:  bash runtime/gpu/s43-h200.sh unpack kernels
# Logs under $OUT (`real` tars all of them into real-logs.tgz).
set -u
R=$(pwd); W=/tmp/h15real; B=/tmp/s42-bin; mkdir -p $W $B
step() { local name=$1 tmo=$2; shift 2; echo "\$ $*" >> $OUT/$name.log; local t0=$(date +%s); timeout -s INT $tmo "$@" >> $OUT/$name.log 2>&1; echo "rc=$? wall=$(( $(date +%s) - t0 )) s" >> $OUT/$name.log; }
AT=128,512,1024,1536,2048
for s in "$@"; do
case "$s" in
unpack)
  bash $R/runtime/gpu/s42-h200.sh unpack
  ;;
kernels)
  cd $B
  sha256sum gpu_fuse tether layer-prof* >> $OUT/host.log 2>&1
  step fuse 330 ./gpu_fuse --test-threads 1 --nocapture
  for p in $(ls layer-prof* | grep -v '[.]xz$'); do step $p 90 ./$p; done
  grep -hE "^test |differ|launches|switching|layer kernel|tg128|rc=|panicked" $OUT/fuse.log | cut -c1-220
  grep -E "==|position|attention|rc=" $OUT/layer-prof*.log
  cd $R
  ;;
real)
  bash $R/runtime/gpu/s42-h200.sh model || exit $?
  G=$W/assets/SmolLM2-135M-Instruct.Q4_1.gguf
  cd $B
  step real-fuse 150 env TETHER_FUSE_REAL=1 TETHER_ASSETS=$W/assets ./gpu_fuse real_model --test-threads 1 --nocapture
  step build 60 ./tether build --family llm --gguf $G -o $W/smollm2.bundle
  for i in $(seq ${ROUNDS:-1}); do
    step bench-default 100 env RUST_LOG=tether_llm=info ./tether bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
    step bench-fused 100 env TETHER_LLM_LAYER_KERNEL=0 ./tether bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
    step bench-layer 100 env TETHER_LLM_LAYER_KERNEL=1 ./tether bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
    step bench-layer-noprefetch 100 env TETHER_LLM_LAYER_KERNEL=1 TETHER_LLM_KV_PREFETCH=0 ./tether bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  done
  step run 60 ./tether run $W/smollm2.bundle --device cuda --prompt "What is the capital of France?" --max-tokens 32
  SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
  export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64
  step llamacpp 150 /tmp/llamacpp/build/bin/llama-bench -m $G -ngl 99 -fa on -p 0 -n 128 -d $AT -r 5 -o md
  grep -hE "^test |differ|launches|layer kernel|rc=|tg128|panicked" $OUT/*.log | cut -c1-220 | head -80
  (cd $OUT && tar czf real-logs.tgz *.log)
  cd $R
  ;;
*) echo "usage: $0 unpack | kernels | real ..." >&2; exit 2 ;;
esac
done
