"""Reading a GPT weights file (upstream's `GPT_weights_*/*.ckpt`, the pretrained `s1*.ckpt`): a torch pickle of
{"weight": {"model.<name>": tensor}, "config": {...}, "info": ...}, as TTS.init_t2s_weights loads it."""

from __future__ import annotations

from pathlib import Path

import torch

from mizuoto.core.errors import CheckpointError

from .checkpoint import load_exactly
from .t2s import T2SConfig, Text2Semantic


def read_gpt_weights(path: str | Path) -> tuple[T2SConfig, dict[str, torch.Tensor]]:
    """The config and the model's state dict (the `model.` prefix removed) of a GPT weights file."""
    path = Path(path)
    try:
        data = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as error:  # any reader failure is a bad file, said in one line
        raise CheckpointError(f"{path} is not a readable GPT weights file ({' '.join(str(error).split())[:160]}); "
                              f"export it again from GPT-SoVITS or download it again") from None
    if not isinstance(data, dict) or not isinstance(data.get("weight"), dict) or "config" not in data:
        raise CheckpointError(f"{path} has no 'weight' and 'config' entries: it is not a GPT-SoVITS GPT weights "
                              f"file (a SoVITS .pth goes in the other slot)")
    config = T2SConfig.from_checkpoint(data["config"])
    state = {k.removeprefix("model."): v for k, v in data["weight"].items() if isinstance(v, torch.Tensor)}
    return config, state


def load_gpt(path: str | Path, device="cpu", dtype: torch.dtype = torch.float32) -> Text2Semantic:
    """The T2S model of a GPT weights file, in eval mode on `device`; a file that does not fit its own config is
    a one-line error naming the first entries that differ."""
    config, state = read_gpt_weights(path)
    model = load_exactly(Text2Semantic(config), state, f"{Path(path).name} does not match its own config",
                         "the file is damaged or not a GPT-SoVITS GPT weights file")
    return model.to(device=device, dtype=dtype).eval()
