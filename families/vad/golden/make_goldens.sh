#!/usr/bin/env bash
# Re-create the vad goldens with the silero-vad package itself (reference.py).
# Creates/updates a venv from requirements.txt (default /tmp/vad-golden-venv,
# override with GOLDEN_VENV). The host must have no libsox (read_audio would
# resample with sox instead of torchaudio; reference.py checks and stops).
#
#   families/vad/golden/make_goldens.sh
#   TETHER_ASSETS=/path/to/cache families/vad/golden/make_goldens.sh
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HERE/../../.." && pwd)"
ASSETS="${TETHER_ASSETS:-$REPO_ROOT/.assets}"
VENV="${GOLDEN_VENV:-/tmp/vad-golden-venv}"
PYTHON="${PYTHON:-python3}"

"$REPO_ROOT/tests/fetch-assets"

if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$HERE/requirements.txt"

"$VENV/bin/python" "$HERE/reference.py" --assets "$ASSETS" --out "$HERE"
