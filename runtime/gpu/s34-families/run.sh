#!/usr/bin/env bash
# One device call of session 34's family GPU tests: `bash runtime/gpu/s34-families/run.sh NAME`
# from the repository root with `.device/NAME` carried (its *.xz test binaries and assets/;
# README beside this script). Assets accumulate in /tmp/fam/assets over back-to-back calls,
# xz-compressed ones unpacked; each test binary's log is $OUT/NAME-BINARY.log.
set -u
N=$1
export TETHER_FIELD_CASES=$(pwd)/tests/field
B=$(pwd)/.device/$N; W=/tmp/fam; mkdir -p $W/assets; cp $B/assets/* $W/assets/
(cd $W/assets && for x in *.xz; do [ -e "$x" ] && xz -dfk "$x"; done); cd $W
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64
export TETHER_ASSETS=$W/assets TETHER_CACHE_DIR=/tmp/fam-cache
{ date -u; hostname; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $OUT/$N-host.log
for f in $B/*.xz; do
  n=$(basename $f .xz); xz -dc $f > $n && chmod +x $n; sha256sum $n >> $OUT/$N-host.log
  timeout 200 ./$n --test-threads 1 --nocapture > $OUT/$N-$n.log 2>&1; echo "rc=$?" >> $OUT/$N-$n.log
done
grep -hE "^test |result|rc=" $OUT/$N-*.log | cut -c1-200
