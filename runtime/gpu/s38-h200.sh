#!/usr/bin/env bash
# Issue 26 on the H200 in few calls (prepared in session 38, which had no device): branch
# s37-cluster's kernels checked and timed, then the real-model comparison with llama.cpp's
# CUDA build prebuilt off the host (runtime/gpu/llamacpp-cuda-offline.sh) instead of
# compiled there (206-246 s of device time saved).
#
# The checkout travels with every call (34 MB on this branch). Make it sparse first, so that a
# call can carry ~63 MB of .device (the device needs only these scripts; every binary is
# carried and self-contained), and restore it after:
#   git sparse-checkout set --no-cone '/runtime/gpu/'    # before the calls
#   git sparse-checkout disable                          # after them
# Calls, back to back while the host stays warm (it is bare again ~30 s after a call):
#   1. carry .device/s37b .device/s38-bin:  bash runtime/gpu/s38-h200.sh kernels
#        runs s37-h200.sh (bit-equality tests of the branch's kernels incl. the cluster
#        attention over 8,192 positions, main-vs-branch speed at 128/2048, ncu kernel times),
#        then stages s38-bin (tether of the branch, llama-bench, the gguf wheel) in /tmp
#   2. carry .device/s37-g0 .device/s37-g1:  bash runtime/gpu/s38-h200.sh part
#   3. carry .device/s37-g2 .device/s37-g3:  bash runtime/gpu/s38-h200.sh real
#        the GGUF assembled and checked, then s34-peers-h200.sh: tether bench --device cuda,
#        llama-bench (prebuilt), the PyTorch peers, in one call
#   4. (optional) carry .device/s38-tests:  BIN=.device/s38-tests bash
#        runtime/gpu/s34-final-tests-h200.sh   (real-model tests, 100,000-token allocation run)
# Logs under $OUT.
set -u
R=$(pwd); W=/tmp/h15real; mkdir -p $W
case "${1:-}" in
kernels)
  # Staged first (seconds), so that a call cut by its time limit still leaves it in /tmp.
  mkdir -p /tmp/s38-bin && cp $R/.device/s38-bin/* /tmp/s38-bin/
  bash $R/runtime/gpu/llamacpp-cuda.sh prebuilt /tmp/s38-bin/llama-bench-sm90.xz > $OUT/llamacpp-prebuilt.log 2>&1
  (LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout 30 /tmp/llamacpp/build/bin/llama-bench --version) >> $OUT/llamacpp-prebuilt.log 2>&1
  cat $OUT/llamacpp-prebuilt.log
  DIR=s37b bash $R/runtime/gpu/s37-h200.sh
  ;;
part)
  for d in $R/.device/s37-g*; do cp $d/part0? $W/; done
  ls -l $W
  ;;
real)
  for d in $R/.device/s37-g*; do cp $d/part0? $W/; done
  mkdir -p $W/assets && cat $W/part0? > $W/assets/SmolLM2-135M-Instruct.Q4_1.gguf
  [ -x /tmp/llamacpp/build/bin/llama-bench ] || bash $R/runtime/gpu/llamacpp-cuda.sh prebuilt /tmp/s38-bin/llama-bench-sm90.xz
  BIN=/tmp/s38-bin FORMS=static_compile bash $R/runtime/gpu/s34-peers-h200.sh
  ;;
*) echo "usage: $0 kernels | part | real" >&2; exit 2 ;;
esac
