"""Reading a SoVITS weights file (upstream's `SoVITS_weights_*/*.pth`, the pretrained `s2G*.pth`): a torch pickle
of {"weight": {name: tensor (float16 as savee writes them)}, "config": hps, "info": ...}, and its version, told
as upstream's `get_sovits_version_from_path_fast` tells it:
- newer files overwrite the zip's "PK" magic with a version tag (my_save2: b"05" v2Pro, b"06" v2ProPlus, ...),
  which is put back before reading;
- otherwise the md5 of the first 8 KiB names a released pretrained file, else the size does (v1 under
  82978 KiB, v2 under 700 MiB, larger files v3/v4);
- then TTS.init_vits_weights: unless that said v3, v4 or a Pro version, the text embedding decides (322 rows,
  v1's symbols: v1; else v2), so the size rule's "v1" for a small file is v2 with v2's symbols.
`config` is upstream's `utils.HParams` object when the file came from its trainer: it is read as plain dicts by a
stand-in class allowed for that one name (the load stays weights-only).
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import torch

from mizuoto.core.errors import CheckpointError

from .checkpoint import load_exactly
from .sovits import SoVITSConfig, SynthesizerV2

SUPPORTED = ("v2", "v2Pro", "v2ProPlus")
HEAD_VERSIONS = {b"00": "v1", b"01": "v2", b"02": "v3", b"03": "v3", b"04": "v4", b"05": "v2Pro",
                 b"06": "v2ProPlus"}
PRETRAINED_MD5 = {  # process_ckpt.hash_pretrained_dict
    "dc3c97e17592963677a4a1681f30c653": "v2",  # s2G488k.pth (v1 pretrained, read with v2 symbols)
    "43797be674a37c1c83ee81081941ed0f": "v3",  # s2Gv3.pth
    "6642b37f3dbb1f76882b69937c95a5f3": "v2",  # s2G2333K.pth
    "4f26b9476d0c5033e04162c486074374": "v4",  # s2Gv4.pth
    "c7e9fce2223f3db685cdfa1e6368728a": "v2Pro",  # s2Gv2Pro.pth
    "66b313e39455b57ab1b0bc0b239c9d0a": "v2ProPlus",  # s2Gv2ProPlus.pth
}
V1_SYMBOLS = 322


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
    known = PRETRAINED_MD5.get(hashlib.md5(head).hexdigest())
    if known:
        return known
    if size < 82978 * 1024:
        return "v1"
    return "v2" if size < 700 * 1024 * 1024 else "v3"


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
    embedding = state.get("enc_p.text_embedding.weight")
    if told not in ("v3", "v4") and "Pro" not in told:  # TTS.init_vits_weights: the symbols decide v1 or v2
        told = "v1" if embedding is not None and embedding.shape[0] == V1_SYMBOLS else "v2"
    version = version or told
    if version not in SUPPORTED:
        raise CheckpointError(f"{path.name} is a GPT-SoVITS {version} model; this loader reads "
                              f"{', '.join(SUPPORTED)} (v1 is retired upstream; v3/v4 are not supported yet)")
    return version, _plain(loaded["config"]), state


def load_sovits(path: str | Path, device="cpu", dtype: torch.dtype = torch.float32,
                version: str | None = None) -> SynthesizerV2:
    """The SoVITS synthesizer of a weights file, weight norms folded, in eval mode on `device`."""
    version, config, state = read_sovits_weights(path, version)
    return build_sovits(version, config, state, Path(path).name, device, dtype)


def build_sovits(version: str, config: dict, state: dict, name: str, device="cpu",
                 dtype: torch.dtype = torch.float32) -> SynthesizerV2:
    """read_sovits_weights' result as the synthesizer (the caller keeps `config`'s data section)."""
    from mizuoto.nn.wavenet import fold_weight_norm

    path = Path(name)
    embedding = state.get("enc_p.text_embedding.weight")
    if embedding is None or not isinstance(config.get("model"), dict):
        raise CheckpointError(f"{Path(path).name} lacks its model config or its text embedding; the file is damaged")
    model = SynthesizerV2(SoVITSConfig.from_checkpoint(version, config["model"], embedding.shape[0]))
    load_exactly(model, fold_weight_norm(state, dtype), f"{Path(path).name} does not match its config as a {version} "
                 "model", "the file is damaged, or pass the version it is")
    return model.to(device=device, dtype=dtype).eval()
