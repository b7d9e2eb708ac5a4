#!/usr/bin/env bash
# Creates a venv (default .venv-voxcpm-upstream, or the first argument) holding upstream voxcpm 2.0.3 (it runs
# VoxCPM 0.5B, 1.5 and 2) with every import-time dependency pinned exactly (--no-deps: gradio, modelscope,
# funasr, datasets, wetext and torchcodec are left out; only the CLI, the web demo, the denoiser and the
# optional text normaliser import them), for scripts/parity/voxcpm_*.py. CPU only, Python 3.11, torch 2.13.0.
# torchaudio's compiled libraries are CUDA-linked and do not load beside the CPU torch: they are deleted,
# its pure-Python parts still work (ENGINES.md, cross-cutting facts).
set -euo pipefail
VENV=${1:-${VENV:-.venv-voxcpm-upstream}}
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q --no-deps voxcpm==2.0.3
"$VENV/bin/pip" install -q --no-deps -r /dev/stdin <<'PINS'
annotated-types==0.8.0
audioread==3.1.0
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
cloudpickle==3.1.3
decorator==5.3.1
einops==0.8.2
filelock==4.3.1
fsspec==2026.9.0
hf-xet==1.8.0
huggingface_hub==0.36.2
idna==3.20
inflect==7.6.0
jaraco.functools==4.6.0
Jinja2==3.1.6
joblib==1.6.0
lazy-loader==0.6
librosa==0.11.0
llvmlite==0.50.0
MarkupSafe==3.0.4
more-itertools==11.2.1
mpmath==1.3.0
msgpack==1.2.4
narwhals==2.29.0
networkx==3.6.1
numba==0.68.1
numpy==2.4.6
packaging==26.4
platformdirs==4.14.9
pooch==1.9.0
pycparser==3.12
pydantic==2.14.4
pydantic_core==2.50.5
PyYAML==6.0.4
regex==2026.11.19
requests==2.34.2
safetensors==0.8.0
scikit-learn==1.9.1
scipy==1.17.1
soundfile==0.14.0
soxr==1.1.0
sympy==1.14.0
threadpoolctl==3.8.0
tokenizers==0.22.2
torchaudio==2.11.1
tqdm==4.70.1
transformers==4.57.3
typeguard==4.6.1
typing-inspection==0.4.5
typing_extensions==4.16.0
urllib3==2.8.0
PINS
rm -f "$VENV"/lib/python3.11/site-packages/torchaudio/lib/*.so
ATEN_CPU_CAPABILITY=avx2 "$VENV/bin/python" -c "import voxcpm; \
from voxcpm.model import VoxCPMModel, VoxCPM2Model; print('voxcpm env ok')"
