"""CosyVoice 3's vocoder: upstream's CausalHiFTGenerator with its CausalConvRNNF0Predictor.

Exact to FunAudioLLM/CosyVoice ace7c47 `cosyvoice/hifigan/generator.py` (CausalHiFTGenerator),
`cosyvoice/hifigan/f0_predictor.py` (CausalConvRNNF0Predictor) and `cosyvoice/transformer/convolution.py`
(CausalConv1d, CausalConv1dDownSample, CausalConv1dUpsample); Apache-2.0, read, not copied. It is hift.py's HiFT
with every convolution made causal:

- causal convs are plain convs over the input padded on one side by dilation * (kernel - 1) zeros: on the left
  (ResBlocks, conv_post, the F0 predictor's later layers), or on the right (conv_pre: kernel
  conv_pre_look_right + 1, reading that many frames ahead; the F0 predictor's first layer: kernel 4, 3 ahead);
  upsampling is nearest repetition then a left-padded stride-1 conv; the source's downsampling a left-padded
  (stride - 1) strided conv;
- the F0 predictor runs in float64 (upstream moves it there before every inference: its weight norm is folded in
  float64 here, from the checkpoint's float32 g and v), its f0 cast back to the mel's dtype;
- the source is hift_sine2's causal SineGen2: no draw at run time, fixed noise tables (hift_sine2.CausalNoise)
  that upstream drew in its constructor; `cosyvoice3_noise` reproduces the ones CosyVoice 3's yaml gives it.

Streaming (`finalize=False`), as CosyVoice3Model.token2wav runs it: the whole mel so far is vocoded again on every
chunk; the last 3 frames are only the F0 predictor's look-ahead and the next conv_pre_look_right only conv_pre's,
so a chunk's wave stops (3 + conv_pre_look_right + 1) frames before its mel ends (the last frame's samples still
wait for the inverse STFT's overlap); the caller keeps the samples past what it already has (`CausalHiFTStream`).
`finalize=True` pads with zeros instead and returns every frame.

Checkpoints (hift.pt): upstream's names, weight norm as `parametrizations.weight.original0/1` (or legacy, or
folded), `source_downs.*` and `m_source.l_linear` plain; the noise tables are not in the file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.hift import HiFTConfig, Snake, load_weights, periodic_hann
from mizuoto.nn.hift_f0 import CONV_LAYERS, F0PredictorConfig
from mizuoto.nn.hift_sine2 import TABLE_WIDTH, CausalNoise, SineGen2Source

F0_LOOK_AHEAD = 3  # the F0 predictor's first conv: kernel 4, padded on the right by 3 (upstream's fixed sizes)

# CosyVoice 3's yaml (examples/libritts/cosyvoice3/conf/cosyvoice3.yaml at ace7c47): what its flow builds after
# CausalConditionalCFM reseeds the global generator with 0 and draws its fixed noise, before the HiFT.
CFM_NOISE_SHAPE = (1, 80, 50 * 300)  # CausalConditionalCFM.rand_noise
FLOW_SIZES = {"vocab_size": 6561, "input_size": 80, "spk_embed_dim": 192, "output_size": 80}


@dataclass(frozen=True)
class CausalHiFTConfig(HiFTConfig):
    """The `hift:` arguments of cosyvoice3.yaml (CausalHiFTGenerator); upstream's defaults, SineGen2 source."""

    conv_pre_look_right: int = 4
    source: str = "SineGen2"

    def _check(self) -> None:
        super()._check()

        def need(ok: bool, message: str) -> None:
            if not ok:
                raise CheckpointError(f"causal hift config: {message}")

        look = self.conv_pre_look_right
        need(isinstance(look, int) and not isinstance(look, bool) and look >= 1,
             f"conv_pre_look_right must be a positive integer, got {look!r}")
        need(self.source == "SineGen2", f"CosyVoice 3's causal HiFT runs SineGen2 (upstream takes SineGen only at "
                                        f"22050 Hz, without its causal tables), got source {self.source!r}")
        need(self.nb_harmonics + 1 == TABLE_WIDTH, f"nb_harmonics must be {TABLE_WIDTH - 1}: upstream's causal "
                                                   f"noise tables have {TABLE_WIDTH} columns, got {self.nb_harmonics}")
        for name in ("resblock", "source_resblock"):
            for k, dilations in zip(getattr(self, f"{name}_kernel_sizes"), getattr(self, f"{name}_dilation_sizes"),
                                    strict=False):
                need(k % 2 == 1 or all(d % 2 == 1 for d in dilations),
                     f"{name}_kernel_sizes {k} with an even dilation: upstream's causal padding is one off there")

    @classmethod
    def from_cosyvoice(cls, hift_section) -> CausalHiFTConfig:
        """From the arguments of cosyvoice3.yaml's `hift:` entry (f0_predictor nested, sampling_rate resolved)."""
        if not isinstance(hift_section, Mapping):
            raise CheckpointError(f"a CosyVoice hift config must be a mapping, got {type(hift_section).__name__}")
        if hift_section.get("sampling_rate", 22050) == 22050:
            raise CheckpointError("CosyVoice 3's causal HiFT at 22050 Hz would take the non-causal SineGen: "
                                  "not supported (CosyVoice 3 runs at 24000)")
        return cls.from_dict({"hift": dict(hift_section)})


class CausalConv(nn.Conv1d):
    """Upstream's CausalConv1d: a stride-1 conv over the input padded by dilation * (kernel - 1) on one side, with
    zeros, or with the given `context` frames (what upstream's `cache` argument holds)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1, side: str = "left"):
        super().__init__(in_channels, out_channels, kernel_size, dilation=dilation)
        self.side = side
        self.pad = dilation * (kernel_size - 1)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        if context is None:
            context = torch.zeros(x.shape[0], x.shape[1], self.pad).to(x)
        x = torch.cat([context, x] if self.side == "left" else [x, context], dim=2)
        return super().forward(x)


class CausalUpsample(nn.Conv1d):
    """Upstream's CausalConv1dUpsample: nearest repetition by `stride`, then a stride-1 conv left-padded by k - 1."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__(in_channels, out_channels, kernel_size)
        self.stride_up = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.interpolate(x, scale_factor=float(self.stride_up), mode="nearest")
        return super().forward(F.pad(x, (self.kernel_size[0] - 1, 0), value=0.0))


class CausalDownsample(nn.Conv1d):
    """Upstream's CausalConv1dDownSample: a strided conv over the input left-padded by stride - 1 zeros."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__(in_channels, out_channels, kernel_size, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (self.stride[0] - 1, 0), value=0.0))


class CausalResBlock(nn.Module):
    """hift.ResBlock with left-causal convs (upstream's ResBlock(causal=True))."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...]):
        super().__init__()
        self.convs1 = nn.ModuleList(CausalConv(channels, channels, kernel_size, d) for d in dilations)
        self.convs2 = nn.ModuleList(CausalConv(channels, channels, kernel_size) for _ in dilations)
        self.activations1 = nn.ModuleList(Snake(channels) for _ in dilations)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for act1, conv1, act2, conv2 in zip(self.activations1, self.convs1, self.activations2, self.convs2,
                                            strict=True):
            x = conv2(act2(conv1(act1(x)))) + x
        return x


class CausalF0Predictor(nn.Module):
    """Upstream's CausalConvRNNF0Predictor (run in float64 by the generator): five causal convs with ELU, the
    first reading F0_LOOK_AHEAD frames ahead, then a per-frame Linear and |.|."""

    def __init__(self, config: F0PredictorConfig | None = None):
        super().__init__()
        config = config or F0PredictorConfig()
        self.config = config
        layers: list[nn.Module] = []
        for index in range(CONV_LAYERS):
            width_in = config.in_channels if index == 0 else config.cond_channels
            conv = CausalConv(width_in, config.cond_channels, F0_LOOK_AHEAD + 1, side="right") if index == 0 else \
                CausalConv(width_in, config.cond_channels, 3)
            layers += [conv, nn.ELU()]
        self.condnet = nn.Sequential(*layers)  # convs at 0, 2, 4, 6, 8, as upstream's state dict
        # nn.Linear, not ops.Linear: upstream moves the predictor to float64 inside its inference_mode, which
        # makes its parameters inference tensors, and F.linear over the transposed view then takes the route it
        # takes for parameters without gradients (measured: ops.Linear's folded mm differs there by 1 ulp).
        self.classifier = nn.Linear(config.cond_channels, config.num_class)

    def forward(self, mel: torch.Tensor, finalize: bool = True) -> torch.Tensor:
        """mel (B, in_channels, T) -> f0 (B, T) Hz; without `finalize`, (B, T - 3): the last 3 frames are the first
        conv's look-ahead instead of zeros."""
        if finalize:
            x = self.condnet[0](mel)
        else:
            x = self.condnet[0](mel[:, :, :-F0_LOOK_AHEAD], mel[:, :, -F0_LOOK_AHEAD:])
        for layer in self.condnet[1:]:
            x = layer(x)
        return torch.abs(self.classifier(x.transpose(1, 2)).squeeze(-1))


class CausalHiFTGenerator(nn.Module):
    """Upstream's CausalHiFTGenerator, plain convolution weights (load_causal_hift folds weight norm)."""

    def __init__(self, config: CausalHiFTConfig = CausalHiFTConfig(), noise: CausalNoise | None = None):
        super().__init__()
        self.config = config
        base, stages, n_fft = config.base_channels, len(config.upsample_rates), config.n_fft
        self.num_kernels = len(config.resblock_kernel_sizes)
        self.m_source = SineGen2Source(config, causal=True, noise=noise)
        self.conv_pre = CausalConv(config.in_channels, base, config.conv_pre_look_right + 1, side="right")
        self.ups = nn.ModuleList(
            CausalUpsample(base >> i, base >> (i + 1), k, u)
            for i, (u, k) in enumerate(zip(config.upsample_rates, config.upsample_kernel_sizes, strict=True)))
        self.source_downs = nn.ModuleList()
        self.source_resblocks = nn.ModuleList()
        for i in range(stages):
            width, stride = base >> (i + 1), math.prod(config.upsample_rates[i + 1:])
            self.source_downs.append(CausalConv(n_fft + 2, width, 1) if stride == 1 else
                                     CausalDownsample(n_fft + 2, width, stride * 2, stride))
            self.source_resblocks.append(CausalResBlock(width, config.source_resblock_kernel_sizes[i],
                                                        config.source_resblock_dilation_sizes[i]))
        self.resblocks = nn.ModuleList(
            CausalResBlock(base >> (i + 1), k, d) for i in range(stages)
            for k, d in zip(config.resblock_kernel_sizes, config.resblock_dilation_sizes, strict=True))
        self.conv_post = CausalConv(base >> stages, n_fft + 2, 7)
        self.register_buffer("stft_window", periodic_hann(n_fft), persistent=False)
        self.f0_predictor = CausalF0Predictor(config.f0_predictor)

    @property
    def noise(self) -> CausalNoise | None:
        return self.m_source.noise

    def predict_f0(self, mel: torch.Tensor, finalize: bool = True) -> torch.Tensor:
        """mel (B, in_channels, T) -> f0 (B, T) Hz (T - 3 without `finalize`), computed in float64 and returned in
        the mel's dtype, as upstream's inference does."""
        self._check_mel(mel, 1 if finalize else F0_LOOK_AHEAD + 1)
        predictor = self.f0_predictor
        return predictor(mel.to(predictor.classifier.weight.dtype), finalize=finalize).to(mel)

    def source(self, f0: torch.Tensor) -> torch.Tensor:
        """f0 per frame (B, T) Hz -> the excitation (B, 1, T * samples_per_frame); deterministic."""
        if f0.dim() != 2:
            raise InputError(f"HiFT takes f0 of shape (batch, frames), got {tuple(f0.shape)}")
        per_sample = F.interpolate(f0[:, None], scale_factor=float(self.config.samples_per_frame), mode="nearest")
        return self.m_source(per_sample.transpose(1, 2))

    def decode(self, mel: torch.Tensor, source: torch.Tensor, finalize: bool = True) -> torch.Tensor:
        """mel (B, in_channels, T) and its excitation (B, 1, T * samples_per_frame) -> wave: T * samples_per_frame
        samples, or without `finalize` (T - conv_pre_look_right - 1) * samples_per_frame (conv_pre reads the last
        conv_pre_look_right frames as its look-ahead, and the last frame's samples are left to the next call)."""
        config = self.config
        look = config.conv_pre_look_right
        self._check_mel(mel, 1 if finalize else look + 1)
        if source.dim() != 3 or source.shape[1] != 1 or source.shape[0] != mel.shape[0]:
            raise InputError(f"HiFT's source must be (batch {mel.shape[0]}, 1, samples), got {tuple(source.shape)}")
        window = self.stft_window
        spectrum = torch.view_as_real(torch.stft(source[:, 0], config.n_fft, config.hop_len, config.n_fft,
                                                 window=window, return_complex=True))
        real, imag = spectrum[..., 0], spectrum[..., 1]
        if finalize:
            x = self.conv_pre(mel)
        else:
            x = self.conv_pre(mel[:, :, :-look], mel[:, :, -look:])
            cut = math.prod(config.upsample_rates) * look  # the look-ahead frames' share of the source's frames
            real, imag = real[:, :, :-cut], imag[:, :, :-cut]
        source_spec = torch.cat([real, imag], dim=1)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, config.lrelu_slope))
            if i == len(self.ups) - 1:
                x = F.pad(x, (1, 0), mode="reflect")
            x = x + self.source_resblocks[i](self.source_downs[i](source_spec))
            blocks = self.resblocks[i * self.num_kernels:(i + 1) * self.num_kernels]
            total = blocks[0](x)
            for block in blocks[1:]:
                total += block(x)
            x = total / self.num_kernels
        x = self.conv_post(F.leaky_relu(x))
        half = config.n_fft // 2 + 1
        magnitude = torch.exp(x[:, :half]).clamp(max=1e2)
        phase = torch.sin(x[:, half:])
        wave = torch.istft(torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase)),
                           config.n_fft, config.hop_len, config.n_fft, window=window)
        if not finalize:
            wave = wave[:, :-config.samples_per_frame]
        return wave.clamp(-config.audio_limit, config.audio_limit)

    def forward(self, mel: torch.Tensor, finalize: bool = True, decode=None) -> torch.Tensor:
        """Upstream's `inference(speech_feat, finalize)` -> the wave (its source: `inference`)."""
        return self.inference(mel, finalize, decode)[0]

    def inference(self, mel: torch.Tensor, finalize: bool = True, decode=None) -> tuple[torch.Tensor, torch.Tensor]:
        """mel (B, in_channels, T) -> (wave, source): T * samples_per_frame samples with `finalize`, else
        (T - 3 - conv_pre_look_right - 1) * samples_per_frame (see the module's docstring). `decode`: this model's
        hift.compile_decode, else its eager decode."""
        source = self.source(self.predict_f0(mel, finalize))
        if not finalize:
            self._check_mel(mel, F0_LOOK_AHEAD + self.config.conv_pre_look_right + 1)
            mel = mel[:, :, :-F0_LOOK_AHEAD]
        return (decode or self.decode)(mel, source, finalize), source

    def _check_mel(self, mel: torch.Tensor, frames: int = 1) -> None:
        if not isinstance(mel, torch.Tensor) or mel.dim() != 3 or mel.shape[1] != self.config.in_channels \
                or mel.shape[-1] < frames:
            got = tuple(mel.shape) if isinstance(mel, torch.Tensor) else type(mel).__name__
            raise InputError(f"HiFT takes a mel of shape (batch, {self.config.in_channels}, frames >= {frames}), "
                             f"got {got}")


class CausalHiFTStream:
    """CosyVoice3Model.token2wav's HiFT part for one utterance: each chunk's mel is appended to the mel so far, the
    whole is vocoded again (`finalize` on the last chunk) and the samples not returned before are returned."""

    def __init__(self, model: CausalHiFTGenerator, decode=None):
        self.model, self.decode = model, decode
        self.mel: torch.Tensor | None = None
        self.offset = 0

    def push(self, mel: torch.Tensor, finalize: bool) -> torch.Tensor:
        self.mel = mel if self.mel is None else torch.cat([self.mel, mel], dim=2)
        wave = self.model(self.mel, finalize=finalize, decode=self.decode)[:, self.offset:]
        self.offset += wave.shape[1]
        return wave


# ---------------------------------------------------------------------------------------------------------
# The noise tables upstream's constructor draws, and loading


def _module_init_draws(generator: torch.Generator, weight_shape: tuple[int, ...], bias: int) -> None:
    """The draws of nn.Conv1d / nn.Linear's reset_parameters: kaiming_uniform_ over the weight, then the bias."""
    torch.empty(weight_shape).uniform_(-1.0, 1.0, generator=generator)
    torch.empty(bias).uniform_(-1.0, 1.0, generator=generator)


def predictor_init_draws(generator: torch.Generator, config: F0PredictorConfig) -> None:
    """Advance `generator` as constructing upstream's CausalConvRNNF0Predictor advances the global one (its five
    convs' and its Linear's default init; weight_norm draws nothing). HyperPyYAML builds it before the HiFT."""
    for index in range(CONV_LAYERS):
        width_in = config.in_channels if index == 0 else config.cond_channels
        kernel = F0_LOOK_AHEAD + 1 if index == 0 else 3
        _module_init_draws(generator, (config.cond_channels, width_in, kernel), config.cond_channels)
    _module_init_draws(generator, (config.num_class, config.cond_channels), config.num_class)


def cosyvoice3_noise(config: CausalHiFTConfig = CausalHiFTConfig(), flow_sizes: Mapping[str, int] = FLOW_SIZES,
                     ) -> CausalNoise:
    """The noise tables of the HiFT that CosyVoice 3's yaml builds (the model CosyVoice3Model vocodes with):
    CausalConditionalCFM reseeds the global generator with 0 and draws its fixed noise randn(1, 80, 15000); the
    flow then builds its input_embedding (normal_) and spk_embed_affine_layer (Linear); the HiFT's F0 predictor is
    built; then the tables are drawn. Only the generator's state there is computed (milliseconds)."""
    generator = torch.Generator().manual_seed(0)
    torch.randn(CFM_NOISE_SHAPE, generator=generator)
    torch.empty(flow_sizes["vocab_size"], flow_sizes["input_size"]).normal_(generator=generator)
    _module_init_draws(generator, (flow_sizes["output_size"], flow_sizes["spk_embed_dim"]), flow_sizes["output_size"])
    predictor_init_draws(generator, config.f0_predictor)
    return CausalNoise.capture(generator, advance=False)


def load_causal_hift(state: Mapping[str, torch.Tensor], config: CausalHiFTConfig = CausalHiFTConfig(),
                     device="cpu", dtype: torch.dtype = torch.float32, source: str = "hift.pt",
                     noise: CausalNoise | None = None) -> CausalHiFTGenerator:
    """CosyVoice 3's HiFT of `config` with the tensors of its hift.pt, on `device` in `dtype` (the F0 predictor in
    float64), eval mode, no gradients. `noise`: the causal tables (default: `cosyvoice3_noise(config)`, those of
    upstream's CosyVoice 3 built from its yaml). Bad checkpoints are one CheckpointError naming the first tensor."""
    if not isinstance(config, CausalHiFTConfig):
        raise CheckpointError(f"load_causal_hift takes a CausalHiFTConfig, got {type(config).__name__} "
                              f"(a non-causal HiFT: hift.load_hift)")
    if noise is not None and not isinstance(noise, CausalNoise):
        raise InputError(f"noise must be a hift_sine2.CausalNoise, got {type(noise).__name__}")
    with torch.device("meta"):
        model = CausalHiFTGenerator(config)
    model = load_weights(model, state, device, dtype, source, float64="f0_predictor.")
    model.m_source.noise = noise if noise is not None else cosyvoice3_noise(config)
    return model
