#!/usr/bin/env bash
# Issue 26, session 48 (docs/evidence/llm-gpu.md, session 48): the device sampler's top-k
# by `topk_bound` (one pass and a sort of 1,024 ranks, then the survivors gathered) beside
# the radix select it replaces, on the real model, with llama.cpp's decode in the same call.
# Calls that ran (H100 for calls 3-19; the carried folder's binaries of the commit named):
#   1-2 (H200)  runtime/gpu/s47-h200.sh unpack equal speed / unpack real (1e0f9ba)
#   3, 7, 11, 14, 17   the GGUF's part01 + part02 (`unpack`)
#   4     part00 + main's tether + gpu_sample-old: unpack sample-old
#   5     c340029: unpack sample-new decode real prof (no nsys on the host; logs not back)
#   6     old / new (c340029) / new2 (680fd90): unpack samples
#   8, 12, 18   part00 + main's tether (+ gpu_sample-new)
#   9     099cc08: unpack sample-new decode real pack
#   10    new2 / new3 (905b006): unpack samples3
#   13    59d2add (kernels of 905b006): unpack sample-new decode real pack
#   15    59d2add: unpack sprof          16   new3 / new4 (ed993cc): unpack samples4
#   19    ed993cc: unpack sample-new decode real pack
#   20 (H200)   gpu_sample with the six logit shapes (built at ef6db51): unpack sample-final
#   21-22 (H200) the GGUF's parts, main's tether;  23 (H200) ed993cc: unpack decode real pack
# (samples, samples3 and samples4 name their binaries gpu_sample-<version>.)
# Files (built on the development VM, stripped, xz), carried in .device folders over
# consecutive calls while the host is warm (all unpacked by s46-h200.sh's `unpack`):
#   tether-grid.xz     main's tether before the change (1e0f9ba; `cargo build --release --bin tether`)
#   tether-new.xz      the change's tether
#   gpu_sample-old.xz  gpu_sample (`cargo test --release -p tether-llm --features
#                      cuda,build,cli --no-run`) with main's kernels, timing both vocabularies
#   gpu_sample-new.xz  the same with the change's kernels
#   gpu_decode-new.xz  gpu_decode with the change's kernels (gpu_ahead-new.xz: gpu_ahead)
#   part0?             SmolLM2-135M-Instruct.Q4_1.gguf in parts (`split -b 34000000`)
#   llama-bench-sm90.xz  runtime/gpu/llamacpp-cuda-offline.sh's llama-bench
# Steps:
#   unpack    as s46-h200.sh's
#   sample-old / sample-new   gpu_sample's timing test (49,152 and 151,936 logits); -new
#             also the whole test binary (the device sampler equal to the CPU's)
#   samples   the timing test of gpu_sample-old / -new / -new2 twice, then -new2's tests
#   samples3  gpu_sample-new2 against -new3 (loads batched), then -new3's tests
#   samples4  gpu_sample-new3 against -new4 (16 loads a turn, a one-pass gather), ncu durations
#   sample-final  gpu_sample-new whole (six logit shapes, top-k 100 and 500 too)
#   decode    gpu_decode on the real model but the 100,000-token allocation test; gpu_ahead;
#             gpu_fuse (gpu_fuse-new.xz) but its speed test, the real model's case included
#   real      the real model: `tether bench` old / new alternating (2 rounds), llama-bench
#             beside, inter-token latency of the new one (5,120 intervals), sampled text twice
#   sprof     ncu: sample_advance's durations (greedy + penalty, defaults) and stalls by SASS line
#   pack      the logs into logs.tar.xz
#   prof      nsys (not on the host in session 48): per-kernel times of a short decode run of each tether
set -u
R=$(pwd); W=/tmp/s46w; B=/tmp/s46b; mkdir -p $W/assets $B
G=$W/assets/SmolLM2-135M-Instruct.Q4_1.gguf
T0=$(date +%s)
left() { echo $(( ${LIMIT:-560} - ($(date +%s) - T0) )); }
step() { local name=$1 tmo=$2; shift 2; local l; l=$(left); [ "$l" -lt 30 ] && { echo "skipped (time): $*" >> $OUT/$name.log; return; }; [ "$tmo" -gt "$l" ] && tmo=$l; echo "\$ $*" >> $OUT/$name.log; local t0=$(date +%s); timeout -s INT $tmo "$@" >> $OUT/$name.log 2>&1; echo "rc=$? wall=$(( $(date +%s) - t0 )) s" >> $OUT/$name.log; }
AT=128,512,1024,1536,2048
for s in "$@"; do
case "$s" in
unpack) bash $R/runtime/gpu/s46-h200.sh unpack ;;
sample-old|sample-new)
  v=${s#sample-}
  cd $B
  step $s 60 ./gpu_sample-$v device_sampler_time --test-threads 1 --nocapture
  [ $v = new ] && step sample-all 120 ./gpu_sample-new --skip device_sampler_time --test-threads 1 --nocapture
  grep -hE "^n |^test |rc=|panicked|differ" $OUT/$s.log | cut -c1-160
  [ $v = new ] && grep -hE "^test |rc=|panicked|test result" $OUT/sample-all.log | cut -c1-200
  cd $R ;;
samples)
  # gpu_sample's timing test of the kernels before (old), after the first change (new:
  # topk_bound) and after the second (new2: warp sorts, coalesced gather, shuffle
  # reductions), two rounds; then new2's whole binary.
  cd $B
  for i in 1 2; do for v in old new new2; do step times-$v 60 ./gpu_sample-$v device_sampler_time --test-threads 1 --nocapture; done; done
  step sample-all 120 ./gpu_sample-new2 --skip device_sampler_time --test-threads 1 --nocapture
  for v in old new new2; do echo "== $v"; grep -hE "^n (49152|151936) (greedy|defaults|k1|k5|k40)[: ]|rc=" $OUT/times-$v.log | cut -c1-100; done
  grep -hE "^test |^vocabulary|rc=|panicked|test result" $OUT/sample-all.log | cut -c1-200
  cd $R ;;
samples3)
  # new2 against new3 (the passes over the logits load SAMPLE_UNROLL values at a time).
  cd $B
  for i in 1 2; do for v in new2 new3; do step times-$v 60 ./gpu_sample-$v device_sampler_time --test-threads 1 --nocapture; done; done
  step sample-all 120 ./gpu_sample-new3 --skip device_sampler_time --test-threads 1 --nocapture
  for v in new2 new3; do echo "== $v"; sed 's/^test .*\.\.\. //' $OUT/times-$v.log | grep -hE "^n (49152|151936) (greedy|defaults|k1|k5|k40)[: ]|rc=" | cut -c1-60; done
  grep -hE "^test |^vocabulary|rc=|panicked|test result" $OUT/sample-all.log | cut -c1-200
  cd $R ;;
samples4)
  # new3 against new4 (16 loads at a time; one pass of the gather where no warp has more
  # than 32 survivors); the durations of sample_advance under ncu for new4 as `sprof`.
  cd $B
  for i in 1 2; do for v in new3 new4; do step times-$v 60 ./gpu_sample-$v device_sampler_time --test-threads 1 --nocapture; done; done
  step sample-all 120 ./gpu_sample-new4 --skip device_sampler_time --test-threads 1 --nocapture
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu | head -1)
  for v in new3 new4; do step sprof-$v 120 $NCU -k regex:^sample_advance$ --launch-skip 95 --launch-count 10 --section SpeedOfLight ./gpu_sample-$v device_sampler_time --test-threads 1; done
  for v in new3 new4; do echo "== $v"; sed 's/^test .*\.\.\. //' $OUT/times-$v.log | grep -hE "^n (49152|151936) (greedy|defaults|k1|k5|k40)[: ]|rc=" | cut -c1-60; grep -E "Duration" $OUT/sprof-$v.log | tr -s ' ' | tr '\n' ' '; echo; done
  grep -hE "^test |^vocabulary|rc=|panicked|test result" $OUT/sample-all.log | cut -c1-200
  cd $R ;;
sample-final)
  # gpu_sample with the six logit shapes and the top-k 100 / 500 sets, whole, then timed.
  cd $B
  step sample-final 200 ./gpu_sample-new --test-threads 1 --nocapture
  grep -hE "^test |^vocabulary|^n [0-9]+ kind|rc=|panicked|test result" $OUT/sample-final.log | cut -c1-200
  sed 's/^test .*\.\.\. //' $OUT/sample-final.log | grep -hE "^n (49152|151936) (greedy|defaults|k100|k500)" | cut -c1-60
  cd $R ;;
decode)
  cat $W/part0? > $G
  (cd $W/assets && echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c) >> $OUT/host.log 2>&1 || { cat $OUT/host.log; exit 3; }
  cd $B
  step decode 200 env TETHER_ASSETS=$W/assets ./gpu_decode-new --skip allocation_free --test-threads 1 --nocapture
  step ahead 100 ./gpu_ahead-new --test-threads 1 --nocapture
  [ -x ./gpu_fuse-new ] && step fuse 200 env TETHER_FUSE_REAL=1 TETHER_ASSETS=$W/assets ./gpu_fuse-new --skip speeds --test-threads 1 --nocapture
  grep -hE "^test |chat |top-1|rc=|panicked|test result" $OUT/decode.log $OUT/ahead.log $OUT/fuse.log 2>/dev/null | cut -c1-220
  cd $R ;;
real)
  [ -f $G ] || cat $W/part0? > $G
  cd $B
  sha256sum tether-grid tether-new >> $OUT/host.log 2>&1
  step build 60 ./tether-new build --family llm --gguf $G -o $W/smollm2.bundle
  for i in 1 2; do
    step bench-old 100 ./tether-grid bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
    step bench-new 100 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  done
  step bench-greedy 100 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3 --temperature 0
  step itl-new 60 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt 128 --n-gen 128 --runs 40
  for i in 1 2; do step text 30 ./tether-new run $W/smollm2.bundle --device cuda --prompt "Write a haiku about the sea." --seed 7 --max-tokens 48 --json; done
  if [ -f $B/llama-bench-sm90.xz ]; then
    bash $R/runtime/gpu/llamacpp-cuda.sh prebuilt $B/llama-bench-sm90.xz > $OUT/llamacpp-prebuilt.log 2>&1
    SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
    step llamacpp 150 env LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64 /tmp/llamacpp/build/bin/llama-bench -m $G -ngl 99 -fa on -p 0 -n 128 -d $AT -r 5 -o md
  fi
  for f in bench-old bench-new bench-greedy itl-new; do echo "== $f"; grep -E "tg128|inter-token|rc=" $OUT/$f.log | grep -v "no step" | cut -c1-200; done
  grep -E "tg128|rc=" $OUT/llamacpp.log 2>/dev/null
  grep -hoE '"text": *"[^"]{0,120}' $OUT/text.log
  cd $R ;;
sprof)
  # Nsight Compute on sample_advance (gpu_sample-new's timing test: at 49,152 logits 50
  # greedy, 50 greedy + penalty, then 50 with llama.cpp's defaults): the durations of the
  # last 5 greedy + penalty launches and the first 5 with the defaults, then warp stalls by
  # SASS line of one launch with the defaults.
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu | head -1)
  cd $B
  step sprof 120 $NCU -k regex:^sample_advance$ --launch-skip 95 --launch-count 10 --section SpeedOfLight ./gpu_sample-new device_sampler_time --test-threads 1
  step sprof 200 $NCU -k regex:^sample_advance$ --launch-skip 102 --launch-count 1 --section WarpStateStats --section SourceCounters --section LaunchStats --import-source yes -o $OUT/s102 ./gpu_sample-new device_sampler_time --test-threads 1
  $NCU -i $OUT/s102.ncu-rep --page source --csv --print-source sass > $OUT/s102-sass.csv 2>&1; xz -9 $OUT/s102-sass.csv
  $NCU -i $OUT/s102.ncu-rep --page details > $OUT/s102-details.txt 2>&1
  grep -E "Duration|sample_advance" $OUT/sprof.log | head -24
  grep -E "Duration|Registers|Warp Cycles Per Issued" $OUT/s102-details.txt | head
  cd $R ;;
pack)
  # The logs in one file (a call brings back at most a few files).
  (cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log) ;;
prof)
  NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null | head -1)
  [ -n "$NSYS" ] || { echo "no nsys" > $OUT/prof.log; continue; }
  cd $W
  for b in tether-grid tether-new; do
    step prof-$b 60 "$NSYS" profile --cuda-graph-trace=node -t cuda -o prof-$b --force-overwrite true $B/$b bench $W/smollm2.bundle --device cuda --n-prompt 128 --n-gen 128 --runs 1
    step prof-$b 30 "$NSYS" stats --report cuda_gpu_kern_sum prof-$b.nsys-rep
    grep -E "sample_advance|layer|prep_matvec|embed|Time" $OUT/prof-$b.log | head -12 | cut -c1-200
  done
  cd $R ;;
*) echo "usage: $0 unpack | sample-old | sample-new | decode | real | prof ..." >&2; exit 2 ;;
esac
done
