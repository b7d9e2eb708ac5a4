#!/usr/bin/env bash
# Creates a venv (default .venv-seedvc-upstream, or the first argument) holding upstream seed-vc 0.4.3, the oracle
# of the shared voice parts in mizuoto/nn/ (CAM++, BigVGAN v2, HiFT, the s2mel DiT with its WaveNet, length
# regulator and CFM) and of the Seed-VC engine, for scripts/parity/seedvc_*.py. CPU only, Python 3.11, torch 2.13.0.
# --no-deps: seed-vc's metadata pulls gradio-era tooling (tensorboard, pystoi, jiwer, hydra, resemblyzer) that
# none of its model modules import; what they import is pinned exactly below. The wheel vendors audiocodec and
# audiotools; only the length regulator's optional vector quantiser reaches them. torchaudio's compiled libraries
# are CUDA-linked and do not load beside the CPU torch: they are deleted, and kaldi.fbank (pure Python) still
# works (ENGINES.md, cross-cutting facts). Upstream's modules import each other as top-level `modules.*`: the
# writers put the installed seed_vc folder on sys.path, as seed_vc/_entry.py does. The end-to-end writer
# (seedvc_references.py) runs seed_vc_wrapper.SeedVCWrapper, which imports transformers (WhisperModel, the
# feature extractor; transformers 4.57.3 with tokenizers and regex, what it imports) and pydub (its mp3 stream
# output, unused there but imported at the top of the module).
set -euo pipefail
VENV=${1:-${VENV:-.venv-seedvc-upstream}}
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q --no-deps seed-vc==0.4.3
"$VENV/bin/pip" install -q --no-deps -r /dev/stdin <<'PINS'
audioread==3.1.0
certifi==2026.10.19.post1
cffi==2.1.1
cloudpickle==3.1.3
charset-normalizer==3.5.3
contourpy==1.3.3
cycler==0.12.1
decorator==5.3.1
einops==0.8.2
filelock==4.3.1
fonttools==4.68.0
fsspec==2026.9.0
hf-xet==1.8.0
huggingface_hub==0.36.2
idna==3.20
joblib==1.6.0
kiwisolver==1.5.1
lazy-loader==0.6
librosa==0.11.0
llvmlite==0.50.0
matplotlib==3.11.2
msgpack==1.2.4
narwhals==2.29.0
munch==4.0.0
numba==0.68.1
numpy==1.26.4
packaging==26.4
pillow==13.0.0
platformdirs==4.14.9
pooch==1.9.0
pycparser==3.12
pydub==0.25.1
pyparsing==3.3.3
python-dateutil==4.0.0
PyYAML==6.0.4
regex==2026.11.19
requests==2.34.2
safetensors==0.8.0
scikit-learn==1.9.1
scipy==1.17.1
soundfile==0.14.0
soxr==1.1.0
threadpoolctl==3.8.0
tokenizers==0.22.2
torchaudio==2.11.1
tqdm==4.70.1
transformers==4.57.3
typing_extensions==4.16.0
tzdata==2026.6
urllib3==2.8.0
PINS
rm -f "$VENV"/lib/python3.11/site-packages/torchaudio/lib/*.so
ATEN_CPU_CAPABILITY=avx2 "$VENV/bin/python" -c "import os, sys, seed_vc; sys.path.insert(0, os.path.dirname(seed_vc.__file__)); \
from modules.campplus.DTDNN import CAMPPlus; from modules.bigvgan.bigvgan import BigVGAN; \
from modules.hifigan.generator import HiFTGenerator; from modules.flow_matching import CFM; \
import torchaudio.compliance.kaldi; from transformers import WhisperModel, WhisperFeatureExtractor; \
from seed_vc.seed_vc_wrapper import SeedVCWrapper; print('seed-vc env ok')"
