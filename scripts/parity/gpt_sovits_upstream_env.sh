#!/usr/bin/env bash
# Creates a venv (default .venv-gpt-sovits-upstream, or the first argument) in which GPT-SoVITS's writers
# (scripts/parity/gpt_sovits_*_references.py) run upstream's own modules from a checkout of RVC-Boss/GPT-SoVITS
# (GitHub only, not installable: the writers put its GPT_SoVITS/ folder on sys.path and take the checkout's path
# as --checkout; reference_sets.py write gpt_sovits_t2s --checkout PATH --python VENV/bin/python).
# CPU only, Python 3.11, torch 2.13.0; what the modules read import, pinned exactly: AR/models/t2s_model.py
# imports torchmetrics (MulticlassAccuracy, for training) and tqdm; module/models.py imports einops and, through
# f5_tts (v3's DiT), x-transformers with loguru, einx, frozendict and torch-einops-utils. The checkout's large files (the English
# dictionary pickle, the Japanese user dictionary) need not be present: mark them skip-worktree so the recorded
# commit reads unmodified.
set -euo pipefail
VENV=${1:-${VENV:-.venv-gpt-sovits-upstream}}
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q --no-deps -r /dev/stdin <<'PINS'
einops==0.8.2
einx==0.4.3
frozendict==2.5.1
lightning-utilities==0.15.3
loguru==0.7.3
numpy==2.4.6
packaging==26.4
safetensors==0.8.0
torch-einops-utils==0.2.0
torchmetrics==1.9.0
tqdm==4.70.1
typing_extensions==4.16.0
x-transformers==2.31.10
PINS
