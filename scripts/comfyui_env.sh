#!/usr/bin/env bash
# A ComfyUI to run tests/host/test_comfyui_real.py and tests/host/test_browser.py against:
#   scripts/comfyui_env.sh [WORKDIR]          (default /tmp/mizuoto-comfy)
# makes WORKDIR/ComfyUI (a clone), WORKDIR/venv (torch on the CPU, ComfyUI's requirements -- which pin its
# frontend -- and Mizuoto's runtime dependencies), WORKDIR/frontend-newest (the newest
# comfyui-frontend-package from PyPI, unpacked), then prints the variables the tests read.
# Needs git, python3 (3.10+), internet access, and for the browser test a Chromium (apt-get install chromium).
set -euo pipefail
WORK=${1:-/tmp/mizuoto-comfy}
REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$WORK"
[ -d "$WORK/ComfyUI" ] || git clone --depth 1 https://github.com/Comfy-Org/ComfyUI "$WORK/ComfyUI"
[ -x "$WORK/venv/bin/python" ] || python3 -m venv "$WORK/venv"
# a set known to import together on the CPU (ComfyUI imports torchvision and torchaudio)
"$WORK/venv/bin/pip" install -q torch==2.14.1 torchvision==0.29.1 torchaudio==2.11.1
"$WORK/venv/bin/pip" install -q -r "$WORK/ComfyUI/requirements.txt"
"$WORK/venv/bin/pip" install -q tiktoken "pypinyin==0.55.*" "rjieba==0.2.*" "soundfile>=0.12.1" "soxr>=0.3.2"
if [ ! -f "$WORK/frontend-newest/comfyui_frontend_package/static/index.html" ]; then
  rm -rf "$WORK/frontend-newest" && mkdir -p "$WORK/frontend-newest"
  "$WORK/venv/bin/pip" download -q --no-deps comfyui-frontend-package -d "$WORK/frontend-newest"
  (cd "$WORK/frontend-newest" && "$WORK/venv/bin/python" -m zipfile -e comfyui_frontend_package-*.whl .)
fi
cat <<VARS
# pinned frontend: $(grep -i '^comfyui-frontend-package' "$WORK/ComfyUI/requirements.txt")
# newest frontend: $(ls "$WORK/frontend-newest"/*.whl | xargs -n1 basename)
export COMFYUI_DIR=$WORK/ComfyUI
export COMFYUI_PYTHON=$WORK/venv/bin/python
export COMFYUI_FRONTEND_ROOT=$WORK/frontend-newest/comfyui_frontend_package/static
export MIZUOTO_SHOTS=$WORK/shots
# then, from $REPO:
#   .venv/bin/python -m pytest tests/host/test_comfyui_real.py tests/host/test_browser.py
VARS
