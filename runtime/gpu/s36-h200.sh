#!/usr/bin/env bash
# Session 36, issue 26: one device call with stripped test binaries (built on the development
# VM: `cargo test --release -p tether-llm --features cuda,build,cli --no-run`, stripped, xz),
# carried as .device/DIR/NAME.xz, or as .device/DIR/V-NAME.xz for variants V of the kernels
# (VARIANTS="A B"; each variant's binaries embed that variant's kernel image):
#   gpu_share     two generators on one upload, the RoPE table compared on the device
#   gpu_numerics  decode step, fused step and prefill graph against the CPU engine, bit for bit
#   gpu_prefill   prefill graph = token by token (every weight type), TTFT on the SmolLM2 shape
#   gpu_sample    the device sampler against the CPU engine's, requests prefilled by the graph
#   gpu_ahead     steps launched ahead give the tokens of one step at a time
#   gpu_fuse      the fused step equals the unfused one bit for bit; their speeds
# then (PROFILE=1, the default) ncu over the first eager 128-token chunk of the prefill load
# check (SmolLM2 shape, 30 layers): kernel time by kernel name and grid (ncu_sum.py).
# Run from the checkout: DIR=s36a bash runtime/gpu/s36-h200.sh (logs under $OUT).
set -u
R=$(pwd); S=$R/.device/${DIR:?}
{ date -u; hostname; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $OUT/host.log 2>&1
run() { # name timeout binary args...
  local n=$1 t=$2; shift 2
  local t0=$(date +%s)
  timeout -s INT $t "$@" --test-threads 1 --nocapture > $OUT/$n.log 2>&1
  echo "rc=$? wall=$(( $(date +%s) - t0 )) s" >> $OUT/$n.log
}
for V in ${VARIANTS:-_}; do
  B=/tmp/s36bin/$V; mkdir -p $B; P=""; [ "$V" = _ ] || P="$V-"
  for f in $S/$P*.xz; do n=$(basename $f .xz); n=${n#$P}; xz -dc $f > $B/$n; chmod +x $B/$n; done
  (cd $B && sha256sum *) >> $OUT/host.log
  cd $B
  [ -x ./gpu_share ] && run ${P}share 120 ./gpu_share
  [ -x ./gpu_numerics ] && run ${P}numerics 200 ./gpu_numerics
  [ -x ./gpu_prefill ] && run ${P}prefill 150 ./gpu_prefill
  [ -x ./gpu_sample ] && run ${P}sample 150 ./gpu_sample
  [ -x ./gpu_ahead ] && run ${P}ahead 120 ./gpu_ahead
  [ -x ./gpu_fuse ] && run ${P}fuse 150 ./gpu_fuse
  echo "=== variant $V"; grep -hE "^test |differ|refus|pp128|pp512|pp2048|per call|panicked|rc=|result|MiB|prefill chunk" $OUT/${P}*.log | cut -c1-240 | head -40
  if [ "${PROFILE:-1}" = 1 ] && [ -x ./gpu_prefill ]; then
    NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    TETHER_LLM_PREFILL_LOAD_ONLY=1 timeout -s INT 200 $NCU -k 'regex:(_chunk|chunk_advance)$' --launch-count 320 --cache-control none --clock-control none --metrics gpu__time_duration.sum,launch__grid_size --csv --page raw ./gpu_prefill prefill_graph_on_a_model_of_smollm2_shape --test-threads 1 > $OUT/${P}ncu-prefill.csv 2> $OUT/${P}prof.log
    python3 $R/runtime/gpu/ncu_sum.py $OUT/${P}ncu-prefill.csv >> $OUT/${P}prof.log 2>&1; tail -10 $OUT/${P}prof.log
  fi
  cd $R
done
