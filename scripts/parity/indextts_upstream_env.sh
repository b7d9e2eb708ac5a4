#!/usr/bin/env bash
# Creates a venv (default .venv-indextts-upstream, or the first argument) in which IndexTTS's writers
# (scripts/parity/indextts_*_references.py) run upstream's own modules. IndexTTS is GitHub-only (index-tts/index-tts,
# not installable as a package): the writers put a checkout on sys.path and take its path as --checkout; the parts that
# come from transformers (w2v-BERT 2.0 and its SeamlessM4T feature extractor, GPT-2, the beam search) run from PyPI.
# CPU only, Python 3.11, torch 2.13.0; transformers 4.52.1 (upstream's pin: its vendored beam-search utilities import
# only there), tokenizers 0.21.4, einops, munch, omegaconf, sentencepiece, scipy, numpy 1.26.4. The text front end
# (utils/front.py) imports only sentencepiece and its normaliser: wetext 0.1.0 over kaldifst 1.7.17 (upstream's uv.lock;
# the FSTs ship in the wheel), the normaliser upstream loads off Linux. On Linux it loads WeTextProcessing, which needs
# pynini; indextts_text_references.py runs the wetext branch. torchaudio 2.11.1 is
# imported at the top of upstream's utils/common.py and codec modules but its compiled libraries do not load beside this
# torch: they are removed, which leaves its pure-Python parts working (ENGINES.md §1).
set -euo pipefail
VENV=${1:-${VENV:-.venv-indextts-upstream}}
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q --no-deps -r /dev/stdin <<'PINS'
antlr4-python3-runtime==4.9.3
certifi==2026.10.19.post1
charset-normalizer==3.5.3
einops==0.8.2
filelock==4.3.2
fsspec==2026.9.0
hf-xet==1.8.0
huggingface_hub==0.36.2
idna==3.21
kaldifst==1.7.17
munch==4.0.0
numpy==1.26.4
omegaconf==2.3.0
packaging==26.4
PyYAML==6.0.4
regex==2026.12.2
requests==2.34.2
safetensors==0.8.0
scipy==1.17.1
sentencepiece==0.2.1
tokenizers==0.21.4
torchaudio==2.11.1
tqdm==4.70.1
transformers==4.52.1
typing_extensions==4.16.0
urllib3==2.8.0
wetext==0.1.0
PINS
rm -f "$VENV"/lib/python3*/site-packages/torchaudio/lib/*.so
"$VENV/bin/python" -c "import transformers, einops, omegaconf, munch, sentencepiece, scipy, torchaudio.functional
from transformers import Wav2Vec2BertModel, SeamlessM4TFeatureExtractor, GPT2Model
from wetext import Normalizer"
