#!/usr/bin/env bash
# Rebuild the embedded kernel images of the detection family from detect.cu.
#
#   families/detect/kernels/build-kernels.sh          # rebuild bin/*.fatbin and bin/SHA256SUMS
#   families/detect/kernels/build-kernels.sh --check  # rebuild into a temp dir, compare digests
#
# Needs no GPU. Both toolkits come from PyPI into private venvs under /tmp (never
# system-wide):
#  * CUDA 13.0 (`nvidia-cuda-nvcc==13.0.88`): bin/detect.cu13.fatbin with SASS for sm_87,
#    sm_90, sm_100, sm_110 plus PTX for compute_87 (a newer GPU under a 13.x driver JITs it).
#    13.0 is the oldest 13.x toolkit, so the image loads on every 13.x driver (JetPack 7 /
#    Thor, the H200 host's 580 driver).
#  * CUDA 12.9 (`nvidia-cuda-nvrtc-cu12==12.9.86`): bin/detect.cu12.sm_{87,90,100}.cubin for
#    JetPack 6 (Orin) and CUDA-12 data-center drivers: a cubin from a newer *major* toolkit
#    does not load on an older major driver. PyPI's 12.9 nvcc wheel has ptxas but no `nvcc`
#    driver, so these are compiled by NVRTC 12.9 (nvrtc_cubin.py, same options).
# The loader (gpu.rs) picks the image by the driver's CUDA major. Override the toolkits with
# NVCC13=/path/to/nvcc and LIBNVRTC12=/path/to/libnvrtc.so.12.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/detect.cu"
OUT="$HERE/bin"
CHECK=0
[[ "${1:-}" == "--check" ]] && { CHECK=1; OUT="$(mktemp -d)"; }
PY="${PYTHON:-python3}"

venv_nvcc() { # venv-dir pip-spec... ; echoes path of nvcc inside it
  local venv="$1"; shift
  if [[ ! -x "$venv/bin/python" ]]; then "$PY" -m venv "$venv" >&2; fi
  if ! find "$venv" -path '*/bin/nvcc' -type f 2>/dev/null | grep -q .; then
    "$venv/bin/pip" install -q --disable-pip-version-check "$@" >&2
  fi
  find "$venv" -path '*/bin/nvcc' -type f | head -n1
}
NVCC13="${NVCC13:-$(venv_nvcc /tmp/tether-nvcc13 nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-runtime==13.0.96)}"
if [[ -z "${LIBNVRTC12:-}" ]]; then
  [[ -x /tmp/tether-nvrtc12/bin/python ]] || "$PY" -m venv /tmp/tether-nvrtc12 >&2
  find /tmp/tether-nvrtc12 -name 'libnvrtc.so.12' | grep -q . || \
    /tmp/tether-nvrtc12/bin/pip install -q --disable-pip-version-check nvidia-cuda-nvrtc-cu12==12.9.86 >&2
  LIBNVRTC12="$(find /tmp/tether-nvrtc12 -name 'libnvrtc.so.12' | head -n1)"
fi

# -fmad=false: no FMA contraction anywhere (the kernels also use __f*_rn intrinsics), so the
# GPU arithmetic equals the CPU path's. -lineinfo: source lines for compute-sanitizer / ncu.
COMMON=(--fatbin -O3 -fmad=false -lineinfo -std=c++17 -Xptxas -v)
build() { # nvcc out archs...
  local nvcc="$1" out="$2"; shift 2
  local inc; inc="$(dirname "$(dirname "$nvcc")")/include"
  local gencode=()
  for sm in "$@"; do gencode+=("-gencode=arch=compute_${sm},code=sm_${sm}"); done
  gencode+=("-gencode=arch=compute_87,code=compute_87")
  echo "== $("$nvcc" --version | tail -n1)  ->  $(basename "$out")  [sm_${*// / sm_}]" >&2
  "$nvcc" "${COMMON[@]}" -I"$inc" "${gencode[@]}" -o "$out" "$SRC" 2> "$out.log" || { cat "$out.log" >&2; exit 1; }
  grep -E "registers|spill|bytes stack" "$out.log" | sort -u | sed 's/^/   /' >&2 || true
  rm -f "$out.log"
}
mkdir -p "$OUT"
# -lineinfo records the source path, its modification time and the working directory in the
# images: build from a copy at one fixed path and time, so they (and --check) do not depend on
# the checkout.
FIXED=/tmp/tether-kernel-src-detect; rm -rf "$FIXED"; mkdir -p "$FIXED"; cp "$SRC" "$FIXED/"; touch -d "2000-01-01 00:00:00 UTC" "$FIXED/"*.cu
SRC="$FIXED/detect.cu"; cd "$FIXED"
build "$NVCC13" "$OUT/detect.cu13.fatbin" 87 90 100 110
"$PY" "$HERE/nvrtc_cubin.py" "$LIBNVRTC12" "$SRC" "$OUT/detect.cu12" 87 90 100

(cd "$OUT" && sha256sum detect.cu13.fatbin detect.cu12.sm_87.cubin detect.cu12.sm_90.cubin \
   detect.cu12.sm_100.cubin > SHA256SUMS.new)
if [[ $CHECK == 1 ]]; then
  # nvcc output is deterministic for a fixed toolkit and source; a difference means the
  # committed images are stale (or a different toolkit was used).
  diff <(cd "$HERE/bin" && cat SHA256SUMS) "$OUT/SHA256SUMS.new" || { echo "kernel images are stale (or built by another toolkit)" >&2; rm -rf "$OUT"; exit 1; }
  echo "kernel images up to date"
  rm -rf "$OUT"
else
  mv "$OUT/SHA256SUMS.new" "$OUT/SHA256SUMS"
  cat "$OUT/SHA256SUMS"
  "$HERE/list-archs.sh"
fi
