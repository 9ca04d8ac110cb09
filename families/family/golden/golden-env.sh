# Sourced by every family's golden/make_goldens.sh (bash; `set -euo pipefail` is the
# caller's): the one place that knows where the repository, the assets and the reference
# venv are, fetches the assets and creates/updates the venv.
#
#   HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
#   source "$HERE/../../family/golden/golden-env.sh" /tmp/NAME-golden-venv
#
# Argument: the default venv folder (GOLDEN_VENV overrides it). Needs HERE, the calling
# family's golden/ folder (its requirements.txt is installed). Sets REPO_ROOT, ASSETS
# (${TETHER_ASSETS:-<repo>/.assets}), VENV, PYTHON (the interpreter that creates the venv,
# ${PYTHON:-python3}) and VPY (the venv's python).

REPO_ROOT="$(cd "$HERE/../../.." && pwd)"
ASSETS="${TETHER_ASSETS:-$REPO_ROOT/.assets}"
VENV="${GOLDEN_VENV:-$1}"
PYTHON="${PYTHON:-python3}"

TETHER_ASSETS="$ASSETS" "$REPO_ROOT/tests/fetch-assets"

if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
"$VPY" -m pip install -q --disable-pip-version-check -r "$HERE/requirements.txt"
