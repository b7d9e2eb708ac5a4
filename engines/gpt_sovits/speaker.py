"""v2Pro / v2ProPlus's speaker embedding: 3D-Speaker's ERes2NetV2 as GPT-SoVITS's `sv.SV.compute_embedding3` runs it
(RVC-Boss/GPT-SoVITS 48b1a01, eres2net/ERes2NetV2.py with baseWidth 24, scale 4, expansion 4, the released
pretrained_eres2netv2w24s4ep4.ckpt).

    reference at 16 kHz (the timbre audio after its peak rule, torchaudio's resampler) -> Kaldi fbank (80 bins,
    dither 0, one recording at a time) -> (1, frames, 80) -> ERes2NetV2 trunk -> the fused last stage's
    (channels x frequency) features averaged over time: (1, 20480) for SoVITS' sv_emb

`forward3` ends before the statistics pooling and the embedding layer: their weights are in the checkpoint and are
read (so a file of another architecture is refused), but never used. The activations are upstream's: Hardtanh(0, 20)
inside the blocks, a plain ReLU after the stem; AFF fuses two inputs with 1 + tanh(attention) weights.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.audio.kaldi_fbank import fbank
from mizuoto.core.errors import CheckpointError

from .checkpoint import load_exactly

RELEASED = {"base_width": 24, "scale": 4, "expansion": 4, "m_channels": 64, "blocks": (3, 4, 6, 3), "feat_dim": 80,
            "embedding_size": 192}
CHECKPOINT = ("sv", "pretrained_eres2netv2w24s4ep4.ckpt")  # in the assets folder, as upstream's pretrained_models


def relu20(x: torch.Tensor) -> torch.Tensor:
    """The blocks' ReLU: a Hardtanh clipped to [0, 20]."""
    return F.hardtanh(x, 0.0, 20.0)


class AFF(nn.Module):
    """Attentional feature fusion of x with y: weights 1 + tanh(local attention of [x, y]) and 2 minus them."""

    def __init__(self, channels: int, r: int = 4):
        super().__init__()
        inner = channels // r
        self.local_att = nn.Sequential(nn.Conv2d(channels * 2, inner, 1), nn.BatchNorm2d(inner), nn.SiLU(),
                                       nn.Conv2d(inner, channels, 1), nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        weight = 1.0 + torch.tanh(self.local_att(torch.cat((x, y), dim=1)))
        return torch.mul(x, weight) + torch.mul(y, 2.0 - weight)


class Block(nn.Module):
    """A Res2Net bottleneck: 1x1 to `scale` groups of `width`, each group a 3x3 conv of itself plus the previous
    group's output (added, or fused by AFF in the last two stages), then 1x1 back, plus the shortcut."""

    def __init__(self, in_planes: int, planes: int, stride: int, base_width: int, scale: int, expansion: int,
                 fuse: bool):
        super().__init__()
        width = int(math.floor(planes * (base_width / 64.0)))
        self.width, self.scale = width, scale
        self.conv1 = nn.Conv2d(in_planes, width * scale, 1, stride=stride, bias=False)
        self.bn1 = nn.BatchNorm2d(width * scale)
        self.convs = nn.ModuleList(nn.Conv2d(width, width, 3, padding=1, bias=False) for _ in range(scale))
        self.bns = nn.ModuleList(nn.BatchNorm2d(width) for _ in range(scale))
        self.fuse_models = nn.ModuleList(AFF(width) for _ in range(scale - 1)) if fuse else None
        self.conv3 = nn.Conv2d(width * scale, planes * expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * expansion)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes * expansion:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes * expansion, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(planes * expansion))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        groups = torch.split(relu20(self.bn1(self.conv1(x))), self.width, 1)
        outputs = []
        for i in range(self.scale):
            if i == 0:
                current = groups[0]
            elif self.fuse_models is None:
                current = current + groups[i]
            else:
                current = self.fuse_models[i - 1](current, groups[i])
            current = relu20(self.bns[i](self.convs[i](current)))
            outputs.append(current)
        out = self.bn3(self.conv3(torch.cat(outputs, 1)))
        out += self.shortcut(x)
        return relu20(out)


class ERes2NetV2(nn.Module):
    def __init__(self, base_width: int = 24, scale: int = 4, expansion: int = 4, m_channels: int = 64,
                 blocks: tuple[int, ...] = (3, 4, 6, 3), feat_dim: int = 80, embedding_size: int = 192):
        super().__init__()
        self.conv1 = nn.Conv2d(1, m_channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(m_channels)
        in_planes = m_channels
        for stage, (count, stride) in enumerate(zip(blocks, (1, 2, 2, 2), strict=True)):
            planes, layer = m_channels * 2 ** stage, []
            for i in range(count):
                layer.append(Block(in_planes, planes, stride if i == 0 else 1, base_width, scale, expansion,
                                   fuse=stage >= 2))
                in_planes = planes * expansion
            setattr(self, f"layer{stage + 1}", nn.Sequential(*layer))
        self.layer3_ds = nn.Conv2d(m_channels * 4 * expansion, m_channels * 8 * expansion, 3, padding=1, stride=2,
                                   bias=False)
        self.fuse34 = AFF(m_channels * 8 * expansion)
        stats = int(feat_dim / 8) * m_channels * 8 * expansion * 2  # mean and std of TSTP pooling
        self.seg_1 = nn.Linear(stats, embedding_size)  # read from the checkpoint, unused by forward3

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """forward3: fbank features (batch, frames, bins) -> (batch, channels x bins / 8)."""
        x = F.relu(self.bn1(self.conv1(features.permute(0, 2, 1).unsqueeze(1))))
        out3 = self.layer3(self.layer2(self.layer1(x)))
        fused = self.fuse34(self.layer4(out3), self.layer3_ds(out3))
        return fused.flatten(start_dim=1, end_dim=2).mean(-1)


def embedding(model: ERes2NetV2, wave_16k: torch.Tensor) -> torch.Tensor:
    """compute_embedding3 for one recording (1, samples) at 16 kHz -> (1, 20480)."""
    dtype = model.conv1.weight.dtype
    features = fbank(wave_16k.to(dtype), num_mel_bins=80, sample_frequency=16000, dither=0.0)
    return model(features.unsqueeze(0))


def load_speaker_encoder(path: str | Path, device="cpu", dtype: torch.dtype = torch.float32) -> ERes2NetV2:
    """The released ERes2NetV2 checkpoint (a plain state dict) in eval mode."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"v2Pro / v2ProPlus need the speaker encoder {'/'.join(CHECKPOINT)} from "
                              f"lj1995/GPT-SoVITS; {path} is missing")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated file, or not a torch file
        raise CheckpointError(f"cannot read {path.name} ({type(error).__name__}); download it again") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path.name} is not an ERes2NetV2 state dict; download it again")
    model = ERes2NetV2(**RELEASED)
    load_exactly(model, state, f"{path.name} is not the ERes2NetV2 (w24 s4) GPT-SoVITS uses",
                 "download sv/pretrained_eres2netv2w24s4ep4.ckpt again")
    return model.to(device=device, dtype=dtype).eval()
