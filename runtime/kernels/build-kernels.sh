#!/usr/bin/env bash
# Rebuild the embedded kernel images of one CUDA source: the native GPU engine's
# (runtime/kernels/native.cu, the default) or a family's (families/detect/kernels/detect.cu).
# One script for every kernel source, so that every image is built with the same toolkits
# and options.
#
#   runtime/kernels/build-kernels.sh [--check] [SRC.cu [OUT_DIR]]
#   runtime/kernels/build-kernels.sh                   # native.cu -> runtime/kernels/bin
#   runtime/kernels/build-kernels.sh families/detect/kernels/detect.cu families/detect/kernels/bin
#   runtime/kernels/build-kernels.sh --check ...       # rebuild into a temp dir, compare digests
#
# OUT_DIR defaults to the `bin` folder beside SRC. For SRC = NAME.cu it writes
# NAME.cu13.fatbin, NAME.cu12.sm_{87,90,100}.cubin and SHA256SUMS (--check compares with the
# committed SHA256SUMS in OUT_DIR instead).
#
# Needs no GPU. Both toolkits come from PyPI into private venvs under /tmp (never
# system-wide):
#  * CUDA 13.0 (`nvidia-cuda-nvcc==13.0.88`): NAME.cu13.fatbin with SASS for sm_87, sm_90,
#    sm_100, sm_110 plus PTX for compute_87 (a newer GPU under a 13.x driver JITs it). 13.0 is
#    the oldest 13.x toolkit, so the image loads on every 13.x driver (JetPack 7 / Thor, the
#    H200 host's 580 driver).
#  * CUDA 12.9 (`nvidia-cuda-nvrtc-cu12==12.9.86`): NAME.cu12.sm_{87,90,100}.cubin for
#    JetPack 6 (Orin) and CUDA-12 data-center drivers: a cubin from a newer *major* toolkit
#    does not load on an older major driver. PyPI's 12.9 nvcc wheel has ptxas but no `nvcc`
#    driver, so these are compiled by NVRTC 12.9 (nvrtc_cubin.py, same options).
# The crate embedding them (runtime/src/native/kernels.rs, families/detect/src/kernels.rs)
# lets the loader (`tether_runtime::cuda::image_order`) pick the image by the driver's CUDA
# major and the device's SM. Override the toolkits with NVCC13=/path/to/nvcc and
# LIBNVRTC12=/path/to/libnvrtc.so.12.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CHECK=0
ARGS=()
for a in "$@"; do
  if [[ "$a" == "--check" ]]; then CHECK=1; else ARGS+=("$a"); fi
done
SRC="$(realpath "${ARGS[0]:-$HERE/native.cu}")"
NAME="$(basename "$SRC" .cu)"
DEST="$(realpath -m "${ARGS[1]:-$(dirname "$SRC")/bin}")"
[[ -f "$SRC" ]] || { echo "build-kernels: no source $SRC" >&2; exit 2; }
OUT="$DEST"
[[ $CHECK == 1 ]] && OUT="$(mktemp -d)"
PY="${PYTHON:-python3}"

venv_nvcc() { # venv-dir pip-spec... ; echoes path of nvcc inside it
  local venv="$1"; shift
  if [[ ! -x "$venv/bin/python" ]]; then "$PY" -m venv "$venv" >&2; fi
  if ! find "$venv" -path '*/bin/nvcc' -type f 2>/dev/null | grep -q .; then
    "$venv/bin/pip" install -q --disable-pip-version-check "$@" >&2
  fi
  find "$venv" -path '*/bin/nvcc' -type f | head -n1
}
PRIVATE_NVCC13=0
if [[ -z "${NVCC13:-}" ]]; then
  PRIVATE_NVCC13=1
  NVCC13="$(venv_nvcc /tmp/tether-nvcc13 nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-runtime==13.0.96)"
fi
if [[ -z "${LIBNVRTC12:-}" ]]; then
  [[ -x /tmp/tether-nvrtc12/bin/python ]] || "$PY" -m venv /tmp/tether-nvrtc12 >&2
  find /tmp/tether-nvrtc12 -name 'libnvrtc.so.12' | grep -q . || \
    /tmp/tether-nvrtc12/bin/pip install -q --disable-pip-version-check nvidia-cuda-nvrtc-cu12==12.9.86 >&2
  LIBNVRTC12="$(find /tmp/tether-nvrtc12 -name 'libnvrtc.so.12' | head -n1)"
fi

# -fmad=false: no FMA contraction, so the kernels compute what their host code computes,
# operation for operation (the native engine's host reference, runtime/src/native/reference.rs;
# the detection family's letterbox.rs / decode.rs, whose kernels also use __f*_rn
# intrinsics). -lineinfo: source lines for compute-sanitizer / ncu. --compress-mode size: the
# fatbin's images compressed (CUDA 12.8+ nvcc; the driver decompresses them at load, every
# 13.x driver can): the llm image 16.4 -> 2.4 MB, which is what the binaries embed and
# the repository carries. The cu12 cubins are ELF, uncompressed (older drivers load them).
COMMON=(--fatbin -O3 -fmad=false -lineinfo -std=c++17 -Xptxas -v --compress-mode size)
build() { # nvcc out archs...
  local nvcc="$1" out="$2"; shift 2
  local inc; inc="$(dirname "$(dirname "$nvcc")")/include"
  # The fatbin's line info records the modification time of every header it includes, and
  # pip stamps the toolkit's headers with the time it installed them: stamp those of the
  # private toolkit with the time the image being rebuilt recorded (header_mtime.py; the
  # source's own 2000-01-01 for a new image), so that a rebuild is byte-identical wherever
  # and whenever the venv was made. A toolkit given with NVCC13 is left alone (its images
  # then differ in those stamps only).
  if [[ $PRIVATE_NVCC13 == 1 ]]; then find "$inc" -type f -exec touch -d "@$HEADER_STAMP" {} +; fi
  local gencode=()
  for sm in "$@"; do gencode+=("-gencode=arch=compute_${sm},code=sm_${sm}"); done
  gencode+=("-gencode=arch=compute_87,code=compute_87")
  echo "== $("$nvcc" --version | tail -n1)  ->  $(basename "$out")  [sm_${*// / sm_}]" >&2
  "$nvcc" "${COMMON[@]}" -I"$inc" "${gencode[@]}" -o "$out" "$SRC" 2> "$out.log" || { cat "$out.log" >&2; exit 1; }
  grep -E "registers|spill|bytes stack" "$out.log" | sort -u | sed 's/^/   /' >&2 || true
  rm -f "$out.log"
}
HEADER_STAMP=946684800
if [[ -f "$DEST/$NAME.cu13.fatbin" ]]; then
  HEADER_STAMP="$("$PY" "$HERE/header_mtime.py" "$DEST/$NAME.cu13.fatbin")"
  HEADER_STAMP="${HEADER_STAMP:-946684800}"
fi
mkdir -p "$OUT"
# -lineinfo records the source path, its modification time and the working directory in the
# images: build from a copy at one fixed path and time, so they (and --check) do not depend on
# the checkout.
FIXED="/tmp/tether-kernel-src-$NAME"; rm -rf "$FIXED"; mkdir -p "$FIXED"; cp "$SRC" "$FIXED/"; touch -d "2000-01-01 00:00:00 UTC" "$FIXED/"*.cu
SRC="$FIXED/$NAME.cu"; cd "$FIXED"
build "$NVCC13" "$OUT/$NAME.cu13.fatbin" 87 90 100 110
"$PY" "$HERE/nvrtc_cubin.py" "$LIBNVRTC12" "$SRC" "$OUT/$NAME.cu12" 87 90 100

(cd "$OUT" && sha256sum "$NAME.cu13.fatbin" "$NAME.cu12.sm_87.cubin" "$NAME.cu12.sm_90.cubin" \
   "$NAME.cu12.sm_100.cubin" > SHA256SUMS.new)
if [[ $CHECK == 1 ]]; then
  # nvcc output is deterministic for a fixed toolkit and source; a difference means the
  # committed images are stale (or a different toolkit was used).
  diff <(cd "$DEST" && cat SHA256SUMS) "$OUT/SHA256SUMS.new" || { echo "$NAME kernel images are stale (or built by another toolkit)" >&2; rm -rf "$OUT"; exit 1; }
  echo "$NAME kernel images up to date"
  rm -rf "$OUT"
else
  mv "$OUT/SHA256SUMS.new" "$OUT/SHA256SUMS"
  cat "$OUT/SHA256SUMS"
  "$HERE/list-archs.sh" "$OUT"
fi
