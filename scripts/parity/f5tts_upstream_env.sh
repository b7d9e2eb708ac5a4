#!/usr/bin/env bash
# Creates a venv (default .venv-f5tts-upstream, or the first argument) holding upstream F5-TTS 1.1.22 and
# Vocos 0.1.0 with their numerics-carrying dependencies pinned exactly (--no-deps: nothing else resolves),
# for scripts/parity/f5tts_references.py. CPU only, Python 3.11, torch 2.13.0.
# torchaudio's compiled libraries are CUDA-linked and do not load beside the CPU torch: they are deleted,
# its pure-Python parts (Resample, MelSpectrogram) still work (ENGINES.md, cross-cutting facts).
set -euo pipefail
VENV=${1:-${VENV:-.venv-f5tts-upstream}}
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q --no-deps f5-tts==1.1.22 vocos==0.1.0
"$VENV/bin/pip" install -q --no-deps -r /dev/stdin <<'PINS'
accelerate==1.15.0
annotated-doc==0.0.7
annotated-types==0.8.0
antlr4-python3-runtime==4.9.3
anyio==4.16.0
audioread==3.1.0
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
cloudpickle==3.1.3
contourpy==1.3.3
cwevals==0.0.1b1
cycler==0.12.1
datasets==5.2.0
decorator==5.3.1
dill==0.4.1
distro==1.9.0
einops==0.8.2
einx==0.4.3
ema-pytorch==0.8.3
encodec==0.1.1
filelock==4.3.1
fonttools==4.68.0
frozendict==2.5.1
fsspec==2026.9.0
googleapis-common-protos==1.76.0
h11==0.16.0
hf-xet==1.8.0
httpcore==1.0.9
httpcore2==2.16.2
httpx==0.28.1
httpx2==2.16.2
huggingface_hub==2.4.0
hydra-core==1.3.8
idna==3.20
Jinja2==3.1.6
joblib==1.6.0
kiwisolver==1.5.1
lazy-loader==0.6
librosa==0.11.0
llvmlite==0.50.0
loguru==0.7.3
markdown-it-py==4.3.0
MarkupSafe==3.0.4
matplotlib==3.11.2
mdurl==0.1.2
mpmath==1.3.0
msgpack==1.2.4
multiprocess==0.70.19
narwhals==2.29.0
networkx==3.6.1
numba==0.68.1
numpy==2.4.6
omegaconf==2.3.1
opentelemetry-api==1.45.2
opentelemetry-exporter-http-transport==0.66b2
opentelemetry-exporter-otlp-common==0.66b2
opentelemetry-exporter-otlp-proto-common==1.45.2
opentelemetry-exporter-otlp-proto-http==1.45.2
opentelemetry-proto==1.45.2
opentelemetry-sdk==1.45.2
opentelemetry-semantic-conventions==0.66b2
packaging==26.4
pandas==3.1.1
pillow==13.0.0
platformdirs==4.14.9
pooch==1.9.0
protobuf==7.36.2
psutil==7.2.2
pyarrow==26.0.1
pycparser==3.12
pydantic==2.14.4
pydantic_core==2.50.5
pydub==0.25.1
Pygments==2.21.0
pyparsing==3.3.3
pypinyin==0.55.0
python-dateutil==4.0.0
PyYAML==6.0.4
regex==2026.11.19
requests==2.34.2
rich==15.0.0
rjieba==0.2.2
safetensors==0.8.0
scikit-learn==1.9.1
scipy==1.17.1
shellingham==1.5.4
sniffio==1.3.1
soundfile==0.14.0
soxr==1.1.0
sympy==1.14.0
threadpoolctl==3.8.0
tokenizers==0.23.3
torch-einops-utils==0.2.0
torchaudio==2.11.1
torchdiffeq==0.2.5
tqdm==4.70.1
transformers==5.24.0
truststore==0.10.5
typer==0.29.2
typing-inspection==0.4.5
typing_extensions==4.16.0
tzdata==2026.6
urllib3==2.8.0
wandb==0.31.0
x-transformers==2.31.10
xxhash==4.1.0
PINS
rm -f "$VENV"/lib/python3.11/site-packages/torchaudio/lib/*.so
ATEN_CPU_CAPABILITY=avx2 "$VENV/bin/python" -c "import f5_tts.model, f5_tts.infer.utils_infer, vocos; print('f5env ok')"
