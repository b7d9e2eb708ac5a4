#!/usr/bin/env bash
# Creates a venv (default .venv-cosyvoice-upstream, or the first argument) in which CosyVoice's writers
# (scripts/parity/cosyvoice_*_references.py) run upstream's own modules. CosyVoice is GitHub-only
# (FunAudioLLM/CosyVoice, not installable): the writers put a checkout and its third_party/Matcha-TTS submodule on
# sys.path and take the checkout's path as --checkout. The shared parts that are on PyPI (s3tokenizer 0.3.0, the
# torch port of the S3 speech tokenizers) are installed here and need no checkout.
# CPU only, Python 3.11, torch 2.13.0; CosyVoice's requirements.txt pins for what carries numerics: transformers
# 4.51.3 (Qwen2), diffusers 0.29.0 (the Matcha U-Net's BasicTransformerBlock), x-transformers 2.11.24 (the CV3
# DiT's rotary embedding), conformer 0.3.2, inflect 7.3.1, HyperPyYAML 1.2.3 (the yaml), omegaconf 2.3.0, wetext
# 0.0.4 (the text normaliser without ttsfrd) over kaldifst, numpy 1.26.4. torchaudio 2.11.1 is imported by
# upstream's modules but its compiled libraries do not load beside this torch: they are removed, which leaves
# its pure-Python parts (compliance.kaldi.fbank) working (ENGINES.md §1). The frontend's whisper.log_mel_spectrogram
# comes from openai-whisper 20250625 (CosyVoice pins 20231117, whose sdist no longer builds; the function is the
# same code in both).
set -euo pipefail
VENV=${1:-${VENV:-.venv-cosyvoice-upstream}}
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q --no-deps -r /dev/stdin <<'PINS'
antlr4-python3-runtime==4.9.3
audioread==3.1.0
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
cloudpickle==3.1.3
conformer==0.3.2
decorator==5.3.2
diffusers==0.29.0
einops==0.8.2
einx==0.4.3
filelock==4.3.2
flatbuffers==25.12.19
frozendict==2.5.1
fsspec==2026.9.0
hf-xet==1.8.0
huggingface_hub==0.36.2
HyperPyYAML==1.2.3
idna==3.21
importlib_metadata==10.2.0
inflect==7.3.1
joblib==1.6.0
kaldifst==1.8.3
lazy-importer==0.1.0
lazy-loader==0.6
librosa==0.11.0
llvmlite==0.50.0
loguru==0.7.3
ml_dtypes==0.5.4
more-itertools==11.2.1
msgpack==1.2.4
narwhals==2.29.0
numba==0.68.1
numpy==1.26.4
omegaconf==2.3.0
onnx==1.23.2
onnxruntime==1.32.0
openai-whisper==20250625
packaging==26.4
pillow==13.0.0
platformdirs==4.14.9
pooch==1.9.0
protobuf==7.36.2
pycparser==3.12
PyYAML==6.0.4
regex==2026.12.2
requests==2.34.2
ruamel.yaml==0.18.17
ruamel.yaml.clib==0.2.15
s3tokenizer==0.3.0
safetensors==0.8.0
scikit-learn==1.9.1
scipy==1.17.1
soundfile==0.14.0
soxr==1.1.0
threadpoolctl==3.8.0
tiktoken==0.14.0
tokenizers==0.21.4
torchaudio==2.11.1
tqdm==4.70.1
transformers==4.51.3
typeguard==4.6.1
typing_extensions==4.16.0
urllib3==2.8.0
wetext==0.0.4
x-transformers==2.11.24
zipp==4.1.2
PINS
rm -f "$VENV"/lib/python3*/site-packages/torchaudio/lib/*.so
"$VENV/bin/python" -c "import transformers, diffusers.models.attention, x_transformers, conformer, s3tokenizer, torchaudio.compliance.kaldi, whisper"
