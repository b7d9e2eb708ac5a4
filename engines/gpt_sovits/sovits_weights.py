"""Reading a SoVITS weights file (upstream's `SoVITS_weights_*/*.pth`, the pretrained `s2G*.pth`): a torch pickle
of {"weight": {name: tensor (float16 as savee writes them)}, "config": hps, "info": ...}, and its version, told
as upstream's `get_sovits_version_from_path_fast` tells it:
- newer files overwrite the zip's "PK" magic with a version tag (my_save2: b"05" v2Pro, b"06" v2ProPlus, ...),
  which is put back before reading;
- otherwise the md5 of the first 8 KiB names a released pretrained file, else the size does (v1 under
  82978 KiB, v2 under 700 MiB, larger files v3/v4);
- v5's branch (cuda_graph_accel_v5 at ac846f5) adds the tags b"07" v5dev and b"08" v5turbo, the released files'
  checksums, and for untagged files their names (s2Gv5dev.pth, s2Gv5turbo.pth), then, for a file of 700 MiB or
  more, a CFM without a step embedding (v5dev);
- then TTS.init_vits_weights: unless that said v3, v4, v5 or a Pro version, the text embedding decides (322 rows,
  v1's symbols: v1; else v2), so the size rule's "v1" for a small file is v2 with v2's symbols.
A v3/v4 voice trained by upstream's web UI is a LoRA file (tags b"03", b"04"): the CFM's attention projections as
LoRA pairs, plus the parts trained whole (ref_enc, bridge, wns1, ...), over the pretrained s2Gv3.pth / s2Gv4.pth
(`merge_lora`, what peft's merge_and_unload computes after TTS loads the base and then the file).
`config` is upstream's `utils.HParams` object when the file came from its trainer: it is read as plain dicts by a
stand-in class allowed for that one name (the load stays weights-only).
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import torch

from mizuoto.core.errors import CheckpointError

from .cfm import cfm_from_state
from .cfm_v5 import CFMV5
from .checkpoint import load_exactly
from .sovits import SoVITSConfig, SynthesizerV2
from .sovits_v3 import SynthesizerV3, wns1_layers

SUPPORTED = ("v2", "v2Pro", "v2ProPlus", "v3", "v4", "v5dev", "v5turbo")
V5 = ("v5dev", "v5turbo")
CFM_VERSIONS = ("v3", "v4", *V5)  # SynthesizerTrnV3: features, then the CFM and a vocoder
LORA_TAGS = (b"03", b"04")  # head2version's "v3lora", "v4lora"
LORA_PREFIX = "cfm.base_model.model."  # where peft's wrapper puts the CFM's entries
LORA_A, LORA_B = ".lora_A.default.weight", ".lora_B.default.weight"
HEAD_VERSIONS = {b"00": "v1", b"01": "v2", b"02": "v3", b"03": "v3", b"04": "v4", b"05": "v2Pro",
                 b"06": "v2ProPlus", b"07": "v5dev", b"08": "v5turbo"}
PRETRAINED_MD5 = {  # process_ckpt.hash_pretrained_dict
    "dc3c97e17592963677a4a1681f30c653": "v2",  # s2G488k.pth (v1 pretrained, read with v2 symbols)
    "43797be674a37c1c83ee81081941ed0f": "v3",  # s2Gv3.pth
    "6642b37f3dbb1f76882b69937c95a5f3": "v2",  # s2G2333K.pth
    "4f26b9476d0c5033e04162c486074374": "v4",  # s2Gv4.pth
    "c7e9fce2223f3db685cdfa1e6368728a": "v2Pro",  # s2Gv2Pro.pth
    "66b313e39455b57ab1b0bc0b239c9d0a": "v2ProPlus",  # s2Gv2ProPlus.pth
    "0e6e00af4104438346bda5344e6260e3": "v5dev",  # s2Gv5dev.pth (ac846f5)
    "695048a8e361076a54e6f32a21b949a3": "v5turbo",  # s2Gv5turbo.pth (ac846f5)
}
V5_NAMES = {"s2gv5dev.pth": "v5dev", "s2gv5turbo.pth": "v5turbo"}  # untagged v5 files, by their lowercased name
SMALL, LARGE = 82978 * 1024, 700 * 1024 * 1024  # the size rule: v1 below SMALL, v2 below LARGE, else v3
V1_SYMBOLS = 322
# where upstream's default configs keep the pretrained v3 / v4 SoVITS models (in pretrained_models/)
PRETRAINED = {"v3": "s2Gv3.pth", "v4": "gsv-v4-pretrained/s2Gv4.pth"}


class _HParams:
    """Stands in for upstream's utils.HParams while unpickling (its attributes are the config's entries)."""


_HParams.__module__, _HParams.__qualname__, _HParams.__name__ = "utils", "HParams", "HParams"


def _plain(value):
    if isinstance(value, _HParams):
        return {k: _plain(v) for k, v in vars(value).items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def sovits_version(path: Path, head: bytes, size: int) -> str:
    """The version upstream tells from the file's first bytes and size (before reading its entries)."""
    if head[:2] != b"PK":
        version = HEAD_VERSIONS.get(head[:2])
        if version is None:
            raise CheckpointError(f"{path.name} starts with neither a zip header nor a GPT-SoVITS version tag; it "
                                  f"is not a SoVITS weights file")
        return version
    known = PRETRAINED_MD5.get(hashlib.md5(head).hexdigest()) or V5_NAMES.get(path.name.lower())
    if known:
        return known
    if size < SMALL:
        return "v1"
    return "v2" if size < LARGE else "v3"


def read_sovits_weights(path: str | Path, version: str | None = None) -> tuple[str, dict, dict]:
    """(version, config, state dict) of a SoVITS weights file; `version` overrides what the file says."""
    path = Path(path)
    try:
        with path.open("rb") as file:
            head = file.read(8192)
        size = path.stat().st_size
    except OSError as error:
        raise CheckpointError(f"cannot read the SoVITS weights {path}: {error.strerror}") from None
    told = sovits_version(path, head, size)
    # a plain zip is read from the file; a tagged one needs its magic back, in memory (load_sovits_new's way)
    source = str(path) if head[:2] == b"PK" else io.BytesIO(b"PK" + path.read_bytes()[2:])
    try:
        with torch.serialization.safe_globals([_HParams]):
            loaded = torch.load(source, map_location="cpu", weights_only=True)
    except Exception as error:  # any reader failure is a bad file, said in one line
        raise CheckpointError(f"{path} is not a readable SoVITS weights file "
                              f"({' '.join(str(error).split())[:160]}); export it again or download it again") from None
    if not isinstance(loaded, dict) or not isinstance(loaded.get("weight"), dict) or "config" not in loaded:
        raise CheckpointError(f"{path.name} has no 'weight' and 'config' entries: it is not a SoVITS weights file "
                              f"(a GPT .ckpt goes in the other slot)")
    state = {k: v for k, v in loaded["weight"].items() if isinstance(v, torch.Tensor)}
    if any(k.startswith("model.ar_") for k in state):
        raise CheckpointError(f"{path.name} is a GPT weights file, not a SoVITS weights file: it goes in the GPT slot")
    if told == "v3" and head[:2] == b"PK" and size >= LARGE and cfm_without_step_embedding(state):
        told = "v5dev"  # the size rule's v3, read whole: a DiT without d_embed is v5's
    embedding = state.get("enc_p.text_embedding.weight")
    if told not in CFM_VERSIONS and "Pro" not in told:  # TTS.init_vits_weights: the symbols decide v1 or v2
        told = "v1" if embedding is not None and embedding.shape[0] == V1_SYMBOLS else "v2"
    version = version or told
    if version not in SUPPORTED:
        raise CheckpointError(f"{path.name} is a GPT-SoVITS {version} model; this loader reads "
                              f"{', '.join(SUPPORTED)} (v1 is retired upstream)")
    if (head[:2] in LORA_TAGS) != is_lora(state):
        raise CheckpointError(f"{path.name}'s tag says {'a' if head[:2] in LORA_TAGS else 'no'} LoRA, its entries "
                              f"say otherwise; the file is damaged")
    return version, _plain(loaded["config"]), state


def cfm_without_step_embedding(state: dict) -> bool:
    """get_sovits_version_from_path_fast's v5 test of a large untagged file: a CFM time embedding and no d_embed."""
    return ("cfm.estimator.time_embed.time_mlp.0.weight" in state
            and "cfm.estimator.d_embed.time_mlp.0.weight" not in state)


def is_lora(state: dict) -> bool:
    """Whether a SoVITS state is a v3/v4 LoRA voice (over a pretrained base) rather than a whole model."""
    return any(key.endswith(LORA_A) for key in state)


def merge_lora(base: dict, lora: dict) -> dict:
    """The whole state of a LoRA voice: the base's entries, overwritten by the voice's own, and each LoRA pair merged
    into its projection as merge_and_unload merges it, in float32 (the model's dtype on the CPU, where upstream loads
    and merges): W + (B @ A) * (alpha / rank), alpha = rank (s2_train_v3_lora's LoraConfig), so the scale is 1."""
    merged = dict(base)
    for key, value in lora.items():
        if LORA_A in key or LORA_B in key:
            continue
        merged["cfm." + key[len(LORA_PREFIX):] if key.startswith(LORA_PREFIX) else key] = value
    for key in (k for k in lora if k.endswith(LORA_A)):
        module = key[:-len(LORA_A)]
        target = ("cfm." + module[len(LORA_PREFIX):] if module.startswith(LORA_PREFIX) else module) + ".weight"
        down, up = lora[key].float(), lora.get(module + LORA_B)
        if up is None or target not in base:
            raise CheckpointError(f"the LoRA voice's {module} has no {'B matrix' if up is None else 'base weight'}; "
                                  f"the file or its base model is damaged")
        merged[target] = base[target].float() + (up.float() @ down) * 1.0
    return merged


def load_sovits(path: str | Path, device="cpu", dtype: torch.dtype = torch.float32, version: str | None = None,
                base: str | Path | None = None) -> SynthesizerV2 | SynthesizerV3:
    """The SoVITS synthesizer of a weights file, weight norms folded, in eval mode on `device`; a v3/v4 LoRA voice is
    merged with `base`, its pretrained s2Gv3.pth / s2Gv4.pth."""
    version, config, state = read_sovits_weights(path, version)
    if is_lora(state):
        state = merge_lora(read_lora_base(base, version, Path(path).name), state)
    return build_sovits(version, config, state, Path(path).name, device, dtype)


def read_lora_base(base: str | Path | None, version: str, voice: str) -> dict:
    """The pretrained state a LoRA voice of `version` is trained over."""
    if base is None or not Path(base).is_file():
        raise CheckpointError(f"{voice} is a {version} LoRA voice and needs the pretrained {version} SoVITS model "
                              f"{PRETRAINED[version]} from lj1995/GPT-SoVITS in the assets folder")
    # upstream loads whatever file its config names; a base that has no CFM, or that a released file's checksum
    # names as the other version, cannot be the one the voice was trained over
    _, _, state = read_sovits_weights(base, version)
    with Path(base).open("rb") as file:
        released = PRETRAINED_MD5.get(hashlib.md5(file.read(8192)).hexdigest())
    if released not in (None, version) or not any(key.startswith("cfm.") for key in state):
        raise CheckpointError(f"{voice} is a {version} LoRA voice but {Path(base).name} is not a pretrained {version} "
                              f"SoVITS model; put {PRETRAINED[version]} in the assets folder")
    return state


def build_sovits(version: str, config: dict, state: dict, name: str, device="cpu",
                 dtype: torch.dtype = torch.float32) -> SynthesizerV2 | SynthesizerV3:
    """read_sovits_weights' result as the synthesizer (the caller keeps `config`'s data section; a LoRA voice's
    state merged with its base first)."""
    from mizuoto.nn.wavenet import fold_weight_norm

    path = Path(name)
    embedding = state.get("enc_p.text_embedding.weight")
    if embedding is None or not isinstance(config.get("model"), dict):
        raise CheckpointError(f"{Path(path).name} lacks its model config or its text embedding; the file is damaged")
    if is_lora(state):
        raise CheckpointError(f"{path.name} is a LoRA voice; merge it with its pretrained base first (merge_lora)")
    sovits_config = SoVITSConfig.from_checkpoint(version, config["model"], embedding.shape[0])
    if version in CFM_VERSIONS:
        cfm = cfm_from_state(state, f"{path.name} as a {version} model")
        if (version in V5) == cfm.config.step_embedding:
            raise CheckpointError(f"{path.name}'s CFM {'has' if cfm.config.step_embedding else 'lacks'} a step "
                                  f"embedding, so it is not a {version} model; pass the version it is")
        if version in V5:
            cfm = CFMV5(cfm.config)
        model = SynthesizerV3(sovits_config, cfm, wns1_layers(state))
    else:
        model = SynthesizerV2(sovits_config)
    load_exactly(model, fold_weight_norm(state, dtype), f"{Path(path).name} does not match its config as a {version} "
                 "model", "the file is damaged, or pass the version it is")
    return model.to(device=device, dtype=dtype).eval()
