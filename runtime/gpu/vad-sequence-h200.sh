#!/usr/bin/env bash
# Stop 31: Silero's sequence form (faster-whisper's silero_vad_v6.onnx) on the H200's native
# engine, beside the CPU engine and faster-whisper's own probabilities (speech_16k.json).
# Run on the GPU host as .device/s31/gpu.sh (the ignored folder carried there), with
# tether.xz (the stripped release build, xz-compressed), silero_vad_v6.onnx and
# silero_vad_op18_ifless.onnx beside it; $OUT is the device tool's output folder.
set -u
cd "$(dirname "$0")"
xz -dkf tether.xz && chmod +x tether
cp ../../families/vad/golden/speech_16k.wav ../../families/vad/golden/speech_16k.json .
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib | tr '\n' ':')/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for m in silero_vad_v6 silero_vad_op18_ifless; do
  ./tether build --family vad --onnx $m.onnx -o /tmp/$m.bundle 2>&1 | tee $OUT/build-$m.txt | tail -2
  for d in cuda cpu; do
    ./tether run /tmp/$m.bundle speech_16k.wav --device $d --json > $OUT/run-$m-$d.json 2> $OUT/run-$m-$d.err; echo "run $m $d rc=$?"
  done
  ./tether verify /tmp/$m.bundle --self-test --device cuda 2>&1 | tail -1
  ./tether bench /tmp/$m.bundle speech_16k.wav --device cuda --runs 20 2>&1 | grep -E "execution|runs/s|per chunk|silero " | tee $OUT/bench-$m.txt
done
python3 - <<'PY' | tee $OUT/compare.txt
import json,os
g=json.load(open('speech_16k.json'))
for m in ['silero_vad_v6','silero_vad_op18_ifless']:
    r={d:json.load(open(os.environ['OUT']+f'/run-{m}-{d}.json'))['results'][0]['result'] for d in ['cuda','cpu']}
    pc,pg=r['cpu']['probabilities'],r['cuda']['probabilities']
    d_cc=max(abs(a-b) for a,b in zip(pc,pg))
    line=f"{m}: {len(pg)} chunks, max |cuda - cpu| {d_cc:.3g}"
    if m=='silero_vad_v6':
        d_ref=max(abs(a-b) for a,b in zip(pg,g['probs']))
        seg=[[s['start_sample'],s['end_sample']] for s in r['cuda']['segments']]
        line+=f", max |cuda - faster-whisper| {d_ref:.3g}, segments equal to faster-whisper's: {seg==g['segments']['silero_defaults']['segments_samples']}"
    print(line)
PY
