set -u
export TETHER_FIELD_CASES=$(pwd)/tests/field
B=$(pwd)/.device/fam-a2; W=/tmp/fam; mkdir -p $W/assets; cp $B/assets/* $W/assets/; (cd $W/assets && for x in *.xz; do [ -e "$x" ] && xz -dfk "$x"; done); cd $W
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64
export TETHER_ASSETS=$W/assets TETHER_CACHE_DIR=/tmp/fam-a2ache
{ date -u; hostname; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $OUT/fam-a2-host.log
for f in $B/*.xz; do n=$(basename $f .xz); xz -dc $f > $n && chmod +x $n; sha256sum $n >> $OUT/fam-a2-host.log; timeout 200 ./$n --test-threads 1 --nocapture > $OUT/fam-a2-$n.log 2>&1; echo "rc=$?" >> $OUT/fam-a2-$n.log; done
grep -hE "^test |result|rc=" $OUT/fam-a2-*.log | cut -c1-200
