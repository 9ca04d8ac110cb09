#!/usr/bin/env bash
# Regenerate state.ptx from state.cu with NVRTC 12.0 (PyPI `nvidia-cuda-nvrtc-cu12==12.0.76`,
# fetched into a private folder under /tmp; never system-wide). No GPU needed.
#   runtime/src/session/device/state-ptx.sh          # rewrite state.ptx
#   runtime/src/session/device/state-ptx.sh --check  # compare with the committed file
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-python3}"
if [[ -z "${LIBNVRTC120:-}" ]]; then
  D=/tmp/tether-nvrtc120
  if ! find "$D" -name 'libnvrtc.so.12' 2>/dev/null | grep -q .; then
    mkdir -p "$D"
    "$PY" -m pip download -q --disable-pip-version-check --no-deps -d "$D" nvidia-cuda-nvrtc-cu12==12.0.76
    (cd "$D" && "$PY" -m zipfile -e nvidia_cuda_nvrtc_cu12-12.0.76-*.whl .)
  fi
  LIBNVRTC120="$(find "$D" -name 'libnvrtc.so.12' | head -n1)"
fi
OUT="$HERE/state.ptx"
[[ "${1:-}" == "--check" ]] && OUT="$(mktemp)"
"$PY" "$HERE/state-ptx.py" "$LIBNVRTC120" "$HERE/state.cu" "$OUT"
if [[ "${1:-}" == "--check" ]]; then
  cmp "$OUT" "$HERE/state.ptx" && echo "state.ptx is up to date"
fi
