#!/usr/bin/env bash
# Verify the committed SHA-256 digests of a folder of embedded kernel images (the native
# engine's runtime/kernels/bin, the default, or a family's, e.g. families/detect/kernels/bin),
# list each image's GPU architectures with cuobjdump, and fail when a required target is
# missing. What is required follows from each image's name (build-kernels.sh writes them):
#   NAME.cu13.fatbin        sm_87 (Orin), sm_90 (H100/H200), sm_100 (B200), sm_110 (Thor),
#                           PTX compute_87
#   NAME.cu12.sm_NN.cubin   sm_NN (sm_87, sm_90, sm_100)
#
#   runtime/kernels/list-archs.sh [BIN_DIR]
#
# Used by CI (tests/run). cuobjdump comes from PyPI (`nvidia-cuda-cuobjdump`) into a venv
# under /tmp unless CUOBJDUMP=/path/to/cuobjdump is set (the H200 host has one in
# /usr/local/cuda/bin).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN="$(realpath "${1:-$HERE/bin}")"
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
echo "cuobjdump: $CUOBJDUMP ($BIN)"
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
images=0
while read -r _ f; do
  case "$f" in
    *.cu13.fatbin) check "$f" sm_87 sm_90 sm_100 sm_110 compute_87 ;;
    *.cu12.sm_*.cubin) sm="${f##*.cu12.}"; check "$f" "${sm%.cubin}" ;;
    *) echo "  unexpected image $f (build-kernels.sh writes NAME.cu13.fatbin and NAME.cu12.sm_NN.cubin)" >&2; fail=1 ;;
  esac
  images=$((images + 1))
done < "$BIN/SHA256SUMS"
[[ $images == 4 ]] || { echo "  $images images listed in $BIN/SHA256SUMS; expected 4 (one fatbin, three cubins)" >&2; fail=1; }
if [[ $fail != 0 ]]; then echo "list-archs: required architectures missing" >&2; exit 1; fi
echo "list-archs: all required architectures present"
