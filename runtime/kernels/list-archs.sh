#!/usr/bin/env bash
# List the GPU architectures inside each embedded kernel image of the native engine
# (runtime/kernels/bin) with cuobjdump, verify the committed SHA-256 digests, and fail when
# a required target is missing:
#   CUDA 13 image (native.cu13.fatbin): sm_87 (Orin), sm_90 (H100/H200), sm_100 (B200),
#                                       sm_110 (Thor), PTX compute_87
#   CUDA 12 images (native.cu12.sm_*.cubin): sm_87, sm_90, sm_100
# Used by CI (tests/run). cuobjdump comes from PyPI (`nvidia-cuda-cuobjdump`) into a venv
# under /tmp unless CUOBJDUMP=/path/to/cuobjdump is set.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN="$HERE/bin"
PY="${PYTHON:-python3}"
if [[ -z "${CUOBJDUMP:-}" ]]; then
  if command -v cuobjdump >/dev/null; then CUOBJDUMP="$(command -v cuobjdump)"
  else
    V=/tmp/tether-cuobjdump
    [[ -x "$V/bin/python" ]] || "$PY" -m venv "$V" >&2
    find "$V" -path '*/bin/cuobjdump' -type f | grep -q . || \
      "$V/bin/pip" install -q --disable-pip-version-check nvidia-cuda-cuobjdump==13.2.86 >&2
    CUOBJDUMP="$(find "$V" -path '*/bin/cuobjdump' -type f | head -n1)"
  fi
fi
echo "cuobjdump: $CUOBJDUMP"
(cd "$BIN" && sha256sum -c SHA256SUMS)

fail=0
archs_of() { # file -> "sm_87 sm_90 ... compute_87" (SASS from ELF images, PTX from ptx images)
  { "$CUOBJDUMP" --list-elf "$1" 2>/dev/null | grep -o 'sm_[0-9]*[af]*' || true
    "$CUOBJDUMP" --list-ptx "$1" 2>/dev/null | grep -o 'sm_[0-9]*[af]*' | sed 's/^sm_/compute_/' || true
  } | sort -u | tr '\n' ' '
}
check() { # file required...
  local f="$1"; shift
  local got; got="$(archs_of "$BIN/$f")"
  printf '%-26s %s\n' "$f" "$got"
  for need in "$@"; do
    if [[ " $got " != *" $need "* ]]; then echo "  MISSING $need in $f" >&2; fail=1; fi
  done
}
check native.cu13.fatbin sm_87 sm_90 sm_100 sm_110 compute_87
check native.cu12.sm_87.cubin sm_87
check native.cu12.sm_90.cubin sm_90
check native.cu12.sm_100.cubin sm_100
if [[ $fail != 0 ]]; then echo "list-archs: required architectures missing" >&2; exit 1; fi
echo "list-archs: all required architectures present"
