#!/usr/bin/env bash
# Build tether's TensorRT STAND-IN library (not TensorRT; see README.md) with g++ against the
# official TensorRT 11.x headers. No CUDA toolkit, no GPU, no TensorRT library needed.
#
#   runtime/trt-standin/build.sh OUTDIR HEADERS_DIR
#
# HEADERS_DIR holds NvInfer.h & co. (runtime/trt-probe/fetch-headers.sh puts the 11.4.0 set
# in <repo>/.assets/trt-headers/11.4.0). Writes two flavours, named like TensorRT's:
#   OUTDIR/libnvinfer.so.11       the standard runtime (exports createInferBuilder_INTERNAL)
#   OUTDIR/libnvinfer_lean.so.11  the lean runtime (no builder entry; version-compatible plans only)
# CXX overrides the compiler (default g++). Exit status non-zero on any failure.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ $# -ne 2 ]]; then
  echo "usage: $0 OUTDIR HEADERS_DIR" >&2
  exit 2
fi
OUT="$1"
HDR="$2"
[[ -f "$HDR/NvInferImpl.h" ]] || { echo "build.sh: $HDR holds no TensorRT headers (NvInferImpl.h)" >&2; exit 1; }
CXX="${CXX:-g++}"
mkdir -p "$OUT"
tmp="$(mktemp -d "$OUT/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# kernels.ptx as a raw string literal for standin.cpp's `#include "kernels.ptx.inc"`.
{ printf 'R"TSTANDINPTX('; cat "$HERE/kernels.ptx"; printf ')TSTANDINPTX"\n'; } > "$tmp/kernels.ptx.inc"
# Export the TensorRT entry points and the test hook, nothing else.
printf '{\n  global: createInferRuntime_INTERNAL; createInferBuilder_INTERNAL; getInferLib*; tether_standin_*;\n  local: *;\n};\n' > "$tmp/exports.map"
# -isystem: the official headers' own warnings are not ours. -static-libstdc++/-libgcc: the
# library carries to a GPU host whose libstdc++ may be older. -Bsymbolic: two flavours loaded
# in one process keep their own state.
flags=(-std=c++17 -O2 -g -fPIC -shared -fvisibility=hidden -fvisibility-inlines-hidden
       -Wall -Wextra -Werror -Wno-unused-parameter
       -isystem "$HERE/../trt-probe/stub" -isystem "$HDR" -I "$tmp"
       -static-libstdc++ -static-libgcc -Wl,--version-script="$tmp/exports.map" -Wl,-Bsymbolic -Wl,--no-undefined -Wl,-z,defs)
"$CXX" "${flags[@]}" -Wl,-soname,libnvinfer.so.11 "$HERE/standin.cpp" -o "$tmp/libnvinfer.so.11" -ldl
"$CXX" "${flags[@]}" -DTETHER_STANDIN_LEAN -Wl,-soname,libnvinfer_lean.so.11 "$HERE/standin.cpp" \
  -o "$tmp/libnvinfer_lean.so.11" -ldl
mv -f "$tmp/libnvinfer.so.11" "$tmp/libnvinfer_lean.so.11" "$OUT/"
echo "build.sh: TensorRT stand-in (NOT TensorRT) built against $(cat "$HDR/SOURCE" 2>/dev/null || echo "$HDR"): $OUT/libnvinfer.so.11 $OUT/libnvinfer_lean.so.11" >&2
