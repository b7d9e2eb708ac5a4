"""The VoxCPM network (everything but the AudioVAE) and its loading from a model folder.

Upstream's `VoxCPMModel` (v1) / `VoxCPM2Model` (v2), as modules with the checkpoint's names:

    base_lm          MiniCPM-4, causal, token embeddings: text and audio patches -> semantic states
    fsq_layer        the scalar-quantised bottleneck on the base LM's states at audio positions
    residual_lm      MiniCPM-4, causal, no embeddings: the acoustic detail the bottleneck dropped
    feat_encoder     local encoder: one latent patch -> one vector (enc_to_lm_proj to the LM width)
    feat_decoder     .estimator: the local DiT the flow sampler (cfm.py) calls
    lm_to_dit_proj, res_to_dit_proj     the two states -> the DiT's condition (v1: summed, v2: joined)
    fusion_concat_proj                  v2 only: [quantised state, patch embedding] -> residual LM input
    stop_proj, stop_head                the stop predictor

Loading builds on the meta device and assigns the file's tensors, each read into a fresh allocation
(nn/tensor_files.py: upstream copies into parameters it allocated, and a CPU matmul on an unaligned
memory-mapped weight can round differently), so the weights are in memory once, with no model built
first and no memory map beside them. Upstream loads with strict=False; here every tensor the model needs must be
there (a missing one would silently keep a random value upstream), and tensors it does not read are
counted and ignored as upstream ignores them.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError
from mizuoto.nn.ops import Linear
from mizuoto.nn.tensor_files import read_checkpoint

from .config import VoxCPMConfig
from .heads import ScalarQuantizer, stop_layers
from .local import LocalDiT, LocalEncoder
from .minicpm import LM_SITE, MiniCPM, MiniCPMConfig

log = logging.getLogger("mizuoto.voxcpm")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # upstream's order of preference
# the local stacks see a few positions: [mu (1 or 2), time, previous patch, noisy patch] at most
LOCAL_ROPE_MARGIN = 8


class FeatDecoder(nn.Module):
    """Holds the DiT under upstream's name (`feat_decoder.estimator.*`); the sampler is cfm.py."""

    def __init__(self, estimator: LocalDiT):
        super().__init__()
        self.estimator = estimator


class VoxCPMNet(nn.Module):
    def __init__(self, config: VoxCPMConfig):
        super().__init__()
        self.config = config
        lm = MiniCPMConfig.from_dict(config.lm)
        self.lm_config = lm
        hidden, local_positions = lm.hidden_size, 2 * config.patch_size + LOCAL_ROPE_MARGIN
        self.base_lm = MiniCPM(lm, LM_SITE)
        no_rope = config.residual_lm_no_rope if config.version == 2 else None
        self.residual_lm = MiniCPM(lm.residual(config.residual_lm_num_layers, no_rope), LM_SITE)
        enc, dit = config.encoder, config.dit
        self.feat_encoder = LocalEncoder(lm.local(enc.hidden_dim, enc.ffn_dim, enc.num_heads, enc.num_layers,
                                                  enc.kv_channels, source="encoder_config"),
                                         config.feat_dim, local_positions)
        self.feat_decoder = FeatDecoder(LocalDiT(lm.local(dit.hidden_dim, dit.ffn_dim, dit.num_heads, dit.num_layers,
                                                          dit.kv_channels, source="dit_config"),
                                                 config.feat_dim, config.version, local_positions))
        self.fsq_layer = ScalarQuantizer(hidden, hidden, config.fsq_latent_dim, config.fsq_scale)
        self.enc_to_lm_proj = Linear(enc.hidden_dim, hidden, bias=True)
        self.lm_to_dit_proj = Linear(hidden, dit.hidden_dim, bias=True)
        self.res_to_dit_proj = Linear(hidden, dit.hidden_dim, bias=True)
        if config.version == 2:
            self.fusion_concat_proj = Linear(2 * hidden, hidden, bias=True)
        self.stop_proj, self.stop_head = stop_layers(hidden)

    @property
    def device(self) -> torch.device:
        return self.stop_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.stop_head.weight.dtype

    def reset_buffers(self) -> None:
        for stack in (self.base_lm, self.residual_lm, self.feat_encoder.encoder, self.feat_decoder.estimator.decoder):
            stack.reset_buffers()

    # -- the pieces of a generation step that are not a transformer ------------------------------------

    def dit_condition(self, lm_hidden: torch.Tensor, residual_hidden: torch.Tensor) -> torch.Tensor:
        """The DiT's mu: v1 sums the two projections, v2 concatenates them (two positions in the DiT)."""
        a, b = self.lm_to_dit_proj(lm_hidden), self.res_to_dit_proj(residual_hidden)
        return torch.cat((a, b), dim=-1) if self.config.version == 2 else a + b

    def residual_input(self, lm_states: torch.Tensor, patch_embeds: torch.Tensor) -> torch.Tensor:
        """The residual LM's input from the base LM's (quantised) states and the patch embeddings (already
        zeroed at text positions): v1 adds them, v2 fuses their concatenation."""
        if self.config.version == 2:
            return self.fusion_concat_proj(torch.cat((lm_states, patch_embeds), dim=-1))
        return lm_states + patch_embeds

    def embed_patches(self, patches: torch.Tensor) -> torch.Tensor:
        """(B, T, patch, feat_dim) -> (B, T, hidden): the local encoder, then to the LM's width."""
        return self.enc_to_lm_proj(self.feat_encoder(patches))


def _read_weights(folder: Path) -> tuple[dict[str, torch.Tensor], Path]:
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return read_checkpoint(folder / name), folder / name
    raise CheckpointError(f"{folder} holds neither {' nor '.join(WEIGHT_FILES)}; download the whole VoxCPM folder")


def load_net(folder: Path, config: VoxCPMConfig, device: torch.device, dtype: torch.dtype) -> VoxCPMNet:
    """The network of `folder` on `device` in `dtype`."""
    state, path = _read_weights(folder)
    with torch.device("meta"):
        net = VoxCPMNet(config)
    wanted = net.state_dict(keep_vars=True)
    tensors, missing = {}, []
    for key, meta in wanted.items():
        value = state.get(key)
        if value is None:
            missing.append(key)
            continue
        if tuple(value.shape) != tuple(meta.shape):
            raise CheckpointError(f"{path.name}: {key} has shape {tuple(value.shape)}, config.json implies "
                                  f"{tuple(meta.shape)}; the config and the weights are of different models")
        tensors[key] = value.to(device=device, dtype=dtype if value.is_floating_point() else value.dtype)
    if missing:
        raise CheckpointError(f"{path.name} lacks {len(missing)} tensors this config needs (first: {missing[0]}); "
                              f"the file is incomplete or of another model")
    ignored = [k for k in state if k not in wanted and not k.startswith("audio_vae.")]
    if ignored:
        log.info("%s: %d tensors not read (first: %s), as upstream ignores them", path.name, len(ignored), ignored[0])
    net.load_state_dict(tensors, assign=True)
    net.reset_buffers()
    return net.eval().requires_grad_(False)
