#!/usr/bin/env bash
# Shared by the device scripts from session 49 on (`source runtime/gpu/lib.sh`): the work
# folders, the time-boxed `step`, `unpack` of the carried .device folders, the GGUF's
# reassembly and check, and llama.cpp's decode beside ours. Each script sets LIMIT (seconds
# the call may run, 560 by default) and writes under $OUT.
#   W  work folder (the GGUF's parts, the bundle);  B  the carried binaries, unpacked
#   G  SmolLM2-135M-Instruct Q4_1 (sha256 b179c952...), reassembled from part00-part02
R=$(pwd); W=/tmp/s46w; B=/tmp/s46b; mkdir -p $W/assets $B
G=$W/assets/SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
T0=$(date +%s)
# Seconds left of the call.
left() { echo $(( ${LIMIT:-560} - ($(date +%s) - T0) )); }
# step NAME TIMEOUT CMD...: CMD's output appended to $OUT/NAME.log with the command, its exit
# status and wall time; cut to the time left, skipped with under 30 s left.
step() {
  local name=$1 tmo=$2; shift 2; local l; l=$(left)
  [ "$l" -lt 30 ] && { echo "skipped (time): $*" >> $OUT/$name.log; return; }
  [ "$tmo" -gt "$l" ] && tmo=$l
  echo "\$ $*" >> $OUT/$name.log; local t0; t0=$(date +%s)
  timeout -s INT $tmo "$@" >> $OUT/$name.log 2>&1
  echo "rc=$? wall=$(( $(date +%s) - t0 )) s" >> $OUT/$name.log
}
# Every carried .device/*/ file into W (GGUF parts) or B (binaries; .xz unpacked), then the
# host's GPU, driver and clock into host.log.
unpack() {
  for d in $R/.device/*/; do
    for f in $d*; do
      [ -f "$f" ] || continue
      case "$f" in
        */part0?) cp "$f" $W/ ;;
        */llama-bench*) cp "$f" $B/ ;;
        *.xz) n=$(basename "$f" .xz); xz -dc "$f" > $B/$n && chmod +x $B/$n ;;
        *) cp "$f" $B/ ;;
      esac
    done
  done
  { date -u; hostname; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; cat $B/COMMIT 2>/dev/null; ls -l $W $B; } >> $OUT/host.log 2>&1
}
# The GGUF from its parts, checked (exits 3 when a part is missing or wrong).
gguf() {
  [ -f $G ] || cat $W/part0? > $G
  (cd $W/assets && echo "$GGUF_SHA  $(basename $G)" | sha256sum -c) >> $OUT/host.log 2>&1 || { cat $OUT/host.log; exit 3; }
}
# llama.cpp's flash-attention decode at the depths $1 (llama-bench-sm90.xz, built by
# llamacpp-cuda-offline.sh) into $OUT/llamacpp.log.
llamacpp() {
  [ -f $B/llama-bench-sm90.xz ] || { echo "no llama-bench carried" >> $OUT/llamacpp.log; return; }
  [ -x /tmp/llamacpp/build/bin/llama-bench ] || bash $R/runtime/gpu/llamacpp-cuda.sh prebuilt $B/llama-bench-sm90.xz > $OUT/llamacpp-prebuilt.log 2>&1
  local sp; sp=$(python3 -c "import site;print(site.getsitepackages()[0])")
  step llamacpp 150 env LD_LIBRARY_PATH=$(ls -d $sp/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64 /tmp/llamacpp/build/bin/llama-bench -m $G -ngl 99 -fa on -p 0 -n 128 -d $1 -r 5 -o md
}
