#!/usr/bin/env bash
# Session 36, issue 24: the detection scores' spread from one load to the next. Run in the
# device call right after runtime/gpu/s36-structure-h200.sh, while the host stayed warm (its
# bundles in /tmp/s36-cli, its binaries in /tmp/s36/bin and /tmp/h15real). Each case loads each
# binary three times, each load with an empty plan cache, so the TF32 / fp16 convolution
# algorithms are timed and chosen anew. It ran as this inline command (the same lines):
#   bash runtime/gpu/s36-reloads-h200.sh   (log: $OUT/s24-reloads.log)
W=/tmp/s36-cli; A=/tmp/s36/assets; export TETHER_CACHE_DIR=/tmp/s36-pc2; for m in "nudenet astronaut.png tf32" "nudenet astronaut.png fp16" "doclaynet page.png fp16"; do set -- $m; for v in before after; do T=/tmp/h15real/tether; [ $v = before ] && T=/tmp/s36/bin/tether-before; for i in 1 2 3; do rm -rf $TETHER_CACHE_DIR; echo "$1 $3 $v load $i: $($T run $W/$1-$v.bundle $A/$2 --device cuda --precision $3 --json 2>/dev/null | python3 -c "
import json,sys
def find(j):
    if isinstance(j, dict):
        if isinstance(j.get('detections'), list): return j['detections']
        j = list(j.values())
    if isinstance(j, list):
        for x in j:
            r = find(x)
            if r is not None: return r
d=find(json.load(sys.stdin)) or []
print([(x['class_id'], round(float(x['score']),4), [round(float(v),2) for v in x['box']]) for x in d])")"; done; done; done 2>&1 | tee $OUT/s24-reloads.log
