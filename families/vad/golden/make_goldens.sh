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
# REPO_ROOT, ASSETS, VENV, VPY; assets fetched, venv ready (shared by every family).
source "$HERE/../../family/golden/golden-env.sh" /tmp/vad-golden-venv

"$VPY" "$HERE/reference.py" --assets "$ASSETS" --out "$HERE"
