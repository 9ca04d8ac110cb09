#!/usr/bin/env bash
# Issue 26: the prefill graph on the real SmolLM2-135M-Instruct Q4_1 (98 MB): three device calls
# while the host stays warm (each call carries the 29.5 MB checkout too, 64 MiB in all). Stage in
# .device/s33-prefill/: the GGUF xz-compressed (90.5 MB) and split (`split -b 35000000 -d
# MODEL.gguf.xz h15gguf.xz.part`); p1/ and p2/ hold parts 00 and 01 with a fetch.sh that copies
# its part to /tmp/h15real; run/ holds part 02, tether.xz and gpu_decode.xz (stripped release binaries,
# xz) and this script as real.sh. Calls: `bash .device/s33-prefill/p1/fetch.sh` (carry p1),
# the same for p2, then `bash .device/s33-prefill/run/real.sh` (carry run).
set -u
R=$(pwd)/.device/s33-prefill/run
W=/tmp/h15real
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib | tr '\n' ':')/usr/local/cuda/lib64
mkdir -p $W/assets && cp $R/h15gguf.xz.part02 $W/
cat $W/h15gguf.xz.part00 $W/h15gguf.xz.part01 $W/h15gguf.xz.part02 | xz -dc > $W/assets/SmolLM2-135M-Instruct.Q4_1.gguf
(cd $W/assets && echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c) > $OUT/host.log 2>&1 || { cat $OUT/host.log; exit 3; }
cd $W && for f in tether gpu_decode; do xz -dc $R/$f.xz > $f && chmod +x $f; done
{ date -u; hostname; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >> $OUT/host.log 2>&1
step() { local name=$1 tmo=$2; shift 2; echo "\$ $*" >> $OUT/$name.log; timeout -s INT $tmo "$@" >> $OUT/$name.log 2>&1; echo "rc=$?" >> $OUT/$name.log; }
TETHER_ASSETS=$W/assets step tests 150 ./gpu_decode --test-threads 1 --nocapture
./tether build --family llm --gguf $W/assets/SmolLM2-135M-Instruct.Q4_1.gguf -o $W/smollm2.bundle > $OUT/cli.log 2>&1
step cli 60 ./tether verify $W/smollm2.bundle --self-test --device cuda
step cli 60 ./tether run $W/smollm2.bundle --device cuda --prompt "Where is Paris?" --temperature 0 --max-tokens 32 --json
step bench 200 ./tether bench $W/smollm2.bundle --device cuda --n-prompt 128,512,2048 --n-gen 128 --runs 5
grep -h "rc=\|test result\|pp128\|pp512\|pp2048\|first token\|tg128\|prefill graph" $OUT/*.log | head -40
