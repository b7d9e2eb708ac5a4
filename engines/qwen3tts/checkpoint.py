"""Loading the talker, its code predictor and their embeddings from a Qwen3-TTS model folder.

The folder is upstream's: `config.json`, `model.safetensors` (or shards listed in
`model.safetensors.index.json`), `generation_config.json`. Only `talker.*` tensors are read here
(`speaker_encoder.*` belongs to the speaker encoder). The module is built on the meta device and each
tensor is taken from the memory-mapped file, converted to the requested device and dtype where it
differs, and assigned as the parameter itself: at no point does a second full copy of the weights
exist (a tensor already in the requested dtype on the CPU stays a view of the file, see load_talker).

Upstream's names map to ours by prefix (RENAMES); everything else is named as upstream names it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from mizuoto.core.errors import CheckpointError

from .config import ModelConfig, model_config_from_dict, read_model_config
from .talker import Talker

WEIGHTS, INDEX = "model.safetensors", "model.safetensors.index.json"

# upstream prefix -> ours, first match wins
RENAMES = (
    ("talker.model.codec_embedding.", "codec_embedding."),
    ("talker.model.text_embedding.", "text_embedding."),
    ("talker.model.", "decoder."),
    ("talker.code_predictor.model.codec_embedding.", "code_predictor.codec_embedding."),
    ("talker.code_predictor.model.", "code_predictor.decoder."),
    ("talker.", ""),
)


def our_name(key: str) -> str | None:
    """Our parameter name for an upstream tensor name; None for tensors the talker does not use."""
    for prefix, ours in RENAMES:
        if key.startswith(prefix):
            return ours + key[len(prefix):]
    return None


def upstream_name(name: str) -> str:
    """The inverse of our_name (for messages and for writing upstream's layout)."""
    for prefix, ours in RENAMES:
        if ours and name.startswith(ours):
            return prefix + name[len(ours):]
    return "talker." + name


def weight_files(folder: Path) -> dict[str, Path]:
    """Each upstream tensor name that the talker uses -> the file holding it."""
    single, index = folder / WEIGHTS, folder / INDEX
    if single.is_file():
        return {"": single}
    if not index.is_file():
        raise CheckpointError(f"{folder} holds neither {WEIGHTS} nor {INDEX}; point at a Qwen3-TTS model folder")
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        files = {key: folder / str(name) for key, name in weight_map.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"{index} is not a usable safetensors index ({type(exc).__name__})") from None
    for path in set(files.values()):
        if not path.is_file():
            raise CheckpointError(f"{index} lists {path.name}, which is not in {folder}")
    return files


def _read(files: dict[str, Path], device, dtype, fresh: bool) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError, safe_open

    state: dict[str, torch.Tensor] = {}
    for path in sorted(set(files.values())):
        try:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                for key in f.keys():
                    name = our_name(key)
                    if name is None:
                        continue
                    mapped = f.get_tensor(key)  # a view of the memory-mapped file
                    tensor = mapped.to(device=device, dtype=dtype if mapped.is_floating_point() else None)
                    if fresh and tensor.data_ptr() == mapped.data_ptr():
                        tensor = tensor.clone()
                    state[name] = tensor
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"{path} is not a readable safetensors file ({' '.join(str(exc).split())[:120]})") \
                from None
    return state


def empty_talker(config: ModelConfig) -> Talker:
    """The talker with parameters on the meta device (nothing allocated, nothing drawn)."""
    with torch.device("meta"):
        return Talker(config.talker)


def check_state(talker: Talker, state: dict[str, torch.Tensor], where) -> None:
    expected = talker.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        detail = f"missing {upstream_name(missing[0])}" if missing else f"unexpected {upstream_name(unexpected[0])}"
        raise CheckpointError(f"{where} does not fit its config.json ({detail}; {len(missing)} missing, "
                              f"{len(unexpected)} unexpected talker tensors)")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(f"{where}: {upstream_name(name)} has shape {tuple(tensor.shape)}, config.json "
                                  f"implies {tuple(expected[name].shape)}")


def load_talker(folder: str | Path, device="cpu", dtype: torch.dtype = torch.float32,
                config: ModelConfig | None = None, fresh: bool = False) -> tuple[ModelConfig, Talker]:
    """The model folder's config and its talker (with the code predictor), on `device` in `dtype`.

    Tensors stored in `dtype` and loaded onto the CPU stay views of the memory-mapped file, as
    transformers' from_pretrained leaves them: the CPU's matrix kernels round differently for data at
    different alignments, so an upstream model loaded from the same file computes the same bits only
    with weights at the same addresses (modulo the page size). `fresh=True` copies them into new
    (64-byte aligned) memory instead, as in a model built in memory."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder; point at a Qwen3-TTS model folder")
    config = config or read_model_config(folder)
    talker = empty_talker(config)
    state = _read(weight_files(folder), torch.device(device), dtype, fresh)
    check_state(talker, state, folder)
    talker.load_state_dict(state, assign=True)
    talker.reset_buffers()
    return config, talker.eval()


def talker_state(talker: Talker) -> dict[str, torch.Tensor]:
    """The talker's tensors under upstream's names (for writing a checkpoint in upstream's layout)."""
    return {upstream_name(name): t for name, t in talker.state_dict().items()}


def write_folder(folder: str | Path, config_json: dict, talker: Talker) -> Path:
    """A model folder in upstream's layout (config.json, model.safetensors with upstream's names) holding
    `talker`: what tests build, and what upstream's from_pretrained reads back."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config_json, indent=2), encoding="utf-8")
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in talker_state(talker).items()}
    save_file(tensors, str(folder / WEIGHTS), metadata={"format": "pt"})
    return folder


def random_talker(config_json: dict, seed: int) -> Talker:
    """A talker with weights drawn from a private generator (the global one is never touched): linear
    weights N(0, 0.02) as upstream initialises them, embeddings and heads N(0, 0.2) so that scores
    spread, norm gains 1 + N(0, 0.2) and biases N(0, 0.1) (upstream's one and zero would hide a wrong
    norm or a missing bias), and the codec EOS row scaled so that utterances end by themselves."""
    config = model_config_from_dict(config_json, "config")
    talker = empty_talker(config).to_empty(device="cpu")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in talker.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if "norm" in name:
                param.copy_(1 + 0.2 * noise)
            elif name.endswith("bias"):
                param.copy_(0.1 * noise)
            elif "embedding" in name or "head" in name:
                param.copy_(0.2 * noise)
            else:
                param.copy_(0.02 * noise)
        talker.codec_head.weight[config.talker.codec_eos_token_id] *= 1.3
    talker.reset_buffers()
    return talker.eval()
