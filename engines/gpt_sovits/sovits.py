"""GPT-SoVITS's SoVITS synthesizer for v2, v2Pro and v2ProPlus (32 kHz): `module/models.py::SynthesizerTrn` at
48b1a01, the inference path TTS.run takes (`decode`), and `extract_latent` (the reference's prompt tokens).

    semantic tokens (1, 1, T) -> codebook (768) -> nearest x2 (25 Hz -> 50 Hz)
      -> TextEncoder: ssl_proj 1x1 -> Encoder (n_layers // 2) ; phones -> embedding -> Encoder (n_layers)
         -> MRTE (content attends to the phones, + timbre) -> Encoder (n_layers // 2) [-> linear resampling for
         speed != 1] -> proj -> m, logs
      -> z_p = m + randn * exp(logs) * noise_scale -> the coupling flow, reversed -> HiFi-GAN -> waveform
    timbre ge: MelStyleEncoder(reference spectrogram[:704]) per reference, averaged over the references;
      v2Pro/ProPlus add the ERes2NetV2 embedding (sv_emb Linear 20480 -> gin), then PReLU, and MRTE takes
      ge_to512(ge).

The one draw is `randn_like(m_p)` (from the request's generator here). Weight-normed convolutions are folded
at load (torch._weight_norm, the op upstream's hook runs before each call).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.wavenet import WaveNet

from .style_encoder import STYLE_BINS, MelStyleEncoder
from .vits_attention import Encoder, MultiHeadAttention

SSL_DIM = 768  # chinese-hubert-base's hidden size, hard-coded upstream
CODEBOOK = 1024
MRTE_CHANNELS = 192  # MRTE() with upstream's defaults: content 192 -> hidden 512 -> 192
MRTE_HIDDEN = 512
SV_DIM = 20480  # ERes2NetV2's embedding (v2Pro, v2ProPlus)
LRELU_SLOPE = 0.1
V2PRO = ("v2Pro", "v2ProPlus")
# The released v2 SoVITS' `model` config (configs/s2.json; v2Pro's differs in gin_channels 1024): benchmarks and the
# GPU check build it
RELEASED_V2 = {"inter_channels": 192, "hidden_channels": 192, "filter_channels": 768, "n_heads": 2, "n_layers": 6,
               "kernel_size": 3, "p_dropout": 0.1, "resblock": "1", "resblock_kernel_sizes": [3, 7, 11],
               "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "upsample_rates": [10, 8, 2, 2, 2],
               "upsample_initial_channel": 512, "upsample_kernel_sizes": [16, 16, 8, 2, 2], "n_layers_q": 3,
               "use_spectral_norm": False, "gin_channels": 512, "semantic_frame_rate": "25hz",
               "freeze_quantizer": True}
# v2ProPlus (configs/s2v2ProPlus.json): a wider vocoder input and the speaker embedding's 1024 conditioning channels
RELEASED_V2PRO_PLUS = {**RELEASED_V2, "upsample_initial_channel": 768, "upsample_kernel_sizes": [20, 16, 8, 2, 2],
                       "gin_channels": 1024}


@dataclass(frozen=True)
class SoVITSConfig:
    """The `model` section of a SoVITS weights file's config (upstream's s2*.json) and the version."""

    version: str
    inter_channels: int
    hidden_channels: int
    filter_channels: int
    n_heads: int
    n_layers: int
    kernel_size: int
    resblock_kernel_sizes: tuple[int, ...]
    resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    upsample_rates: tuple[int, ...]
    upsample_initial_channel: int
    upsample_kernel_sizes: tuple[int, ...]
    gin_channels: int
    symbols: int  # the phone vocabulary (text_embedding's rows)

    @property
    def is_pro(self) -> bool:
        return self.version in V2PRO

    @property
    def hop(self) -> int:
        """Waveform samples per 50 Hz frame (twice per semantic token)."""
        product = 1
        for rate in self.upsample_rates:
            product *= rate
        return product

    @classmethod
    def from_checkpoint(cls, version: str, model: dict, symbols: int) -> "SoVITSConfig":
        try:
            made = cls(version=version, inter_channels=int(model["inter_channels"]),
                       hidden_channels=int(model["hidden_channels"]), filter_channels=int(model["filter_channels"]),
                       n_heads=int(model["n_heads"]), n_layers=int(model["n_layers"]),
                       kernel_size=int(model["kernel_size"]),
                       resblock_kernel_sizes=tuple(int(k) for k in model["resblock_kernel_sizes"]),
                       resblock_dilation_sizes=tuple(tuple(int(d) for d in ds)
                                                     for ds in model["resblock_dilation_sizes"]),
                       upsample_rates=tuple(int(u) for u in model["upsample_rates"]),
                       upsample_initial_channel=int(model["upsample_initial_channel"]),
                       upsample_kernel_sizes=tuple(int(k) for k in model["upsample_kernel_sizes"]),
                       gin_channels=int(model["gin_channels"]), symbols=int(symbols))
            resblock, rate = str(model.get("resblock", "1")), model.get("semantic_frame_rate", "25hz")
        except (KeyError, TypeError, ValueError):
            raise CheckpointError("the SoVITS weights file has no readable model config (inter_channels, "
                                  "hidden_channels, upsample_rates, ...); use a GPT-SoVITS s2 .pth") from None
        if resblock != "1" or rate != "25hz":
            raise CheckpointError(f"the SoVITS config asks for resblock {resblock!r} at {rate}; GPT-SoVITS v2 models "
                                  f"use resblock '1' at 25hz, and no other kind is supported")
        if made.hidden_channels != MRTE_CHANNELS or (not made.is_pro and made.gin_channels != MRTE_HIDDEN):
            raise CheckpointError(f"the SoVITS config has hidden_channels {made.hidden_channels} and gin_channels "
                                  f"{made.gin_channels}; upstream's MRTE needs 192 and (before v2Pro) 512")
        return made


class TextEncoder(nn.Module):
    """models.TextEncoder (the decode path: no streaming options)."""

    def __init__(self, config: SoVITSConfig):
        super().__init__()
        hidden, filters, heads, layers, k = (config.hidden_channels, config.filter_channels, config.n_heads,
                                             config.n_layers, config.kernel_size)
        self.out_channels = config.inter_channels
        self.ssl_proj = nn.Conv1d(SSL_DIM, hidden, 1)
        self.encoder_ssl = Encoder(hidden, filters, heads, layers // 2, k)
        self.encoder_text = Encoder(hidden, filters, heads, layers, k)
        self.text_embedding = nn.Embedding(config.symbols, hidden)
        self.mrte = MRTE()
        self.encoder2 = Encoder(hidden, filters, heads, layers // 2, k)
        self.proj = nn.Conv1d(hidden, config.inter_channels * 2, 1)

    def forward(self, y, y_mask, text, text_mask, ge, speed: float = 1.0):
        """-> m, logs, the mask and the hidden content before `proj` (v3/v4 take that, not m and logs)."""
        y = self.ssl_proj(y * y_mask) * y_mask
        y = self.encoder_ssl(y * y_mask, y_mask)
        text = self.text_embedding(text).transpose(1, 2)
        text = self.encoder_text(text * text_mask, text_mask)
        y = self.mrte(y, y_mask, text, text_mask, ge)
        y = self.encoder2(y * y_mask, y_mask)
        if speed != 1:
            y = F.interpolate(y, size=int(y.shape[-1] / speed) + 1, mode="linear")
            y_mask = F.interpolate(y_mask, size=y.shape[-1], mode="nearest")
        m, logs = torch.split(self.proj(y) * y_mask, self.out_channels, dim=1)
        return m, logs, y_mask, y


class MRTE(nn.Module):
    """mrte_model.MRTE: the content attends to the phones (4 heads over 512 channels), plus itself and ge."""

    def __init__(self):
        super().__init__()
        self.cross_attention = MultiHeadAttention(MRTE_HIDDEN, MRTE_HIDDEN, 4)
        self.c_pre = nn.Conv1d(MRTE_CHANNELS, MRTE_HIDDEN, 1)
        self.text_pre = nn.Conv1d(MRTE_CHANNELS, MRTE_HIDDEN, 1)
        self.c_post = nn.Conv1d(MRTE_HIDDEN, MRTE_CHANNELS, 1)

    def forward(self, ssl, ssl_mask, text, text_mask, ge):
        mask = text_mask.unsqueeze(2) * ssl_mask.unsqueeze(-1)
        ssl = self.c_pre(ssl * ssl_mask)
        text = self.text_pre(text * text_mask)
        x = self.cross_attention(ssl * ssl_mask, text * text_mask, mask) + ssl + ge
        return self.c_post(x * ssl_mask)


class CouplingLayer(nn.Module):
    """modules.ResidualCouplingLayer (mean only), reversed: x1 <- (x1 - m(x0)) * exp(-0) * mask."""

    def __init__(self, channels: int, hidden: int, gin: int):
        super().__init__()
        self.half = channels // 2
        self.pre = nn.Conv1d(self.half, hidden, 1)
        self.enc = WaveNet(hidden, 5, 1, 4, gin_channels=gin, padding="zeros")
        self.post = nn.Conv1d(hidden, self.half, 1)

    def reverse(self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        x0, x1 = torch.split(x, [self.half] * 2, 1)
        h = self.enc(self.pre(x0) * mask, mask, g=g)
        m = self.post(h) * mask
        logs = torch.zeros_like(m)
        return torch.cat([x0, (x1 - m) * torch.exp(-logs) * mask], 1)


class Flow(nn.Module):
    """ResidualCouplingBlock: 4 x (coupling layer, channel flip); inference runs it backwards."""

    def __init__(self, channels: int, hidden: int, gin: int):
        super().__init__()
        # upstream's ModuleList alternates layer, Flip: the layers sit at the even indices
        self.flows = nn.ModuleList()
        for _ in range(4):
            self.flows.append(CouplingLayer(channels, hidden, gin))
            self.flows.append(nn.Identity())

    def reverse(self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        for flow in reversed(self.flows):
            x = torch.flip(x, [1]) if isinstance(flow, nn.Identity) else flow.reverse(x, mask, g)
        return x


def _padding(kernel_size: int, dilation: int = 1) -> int:
    return int((kernel_size * dilation - dilation) / 2)


class ResBlock1(nn.Module):
    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...]):
        super().__init__()
        self.convs1 = nn.ModuleList(nn.Conv1d(channels, channels, kernel_size, 1, dilation=d,
                                              padding=_padding(kernel_size, d)) for d in dilations)
        self.convs2 = nn.ModuleList(nn.Conv1d(channels, channels, kernel_size, 1, dilation=1,
                                              padding=_padding(kernel_size)) for _ in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for c1, c2 in zip(self.convs1, self.convs2, strict=True):
            x = c2(F.leaky_relu(c1(F.leaky_relu(x, LRELU_SLOPE)), LRELU_SLOPE)) + x
        return x


class Generator(nn.Module):
    """models.Generator: HiFi-GAN with resblock "1". SoVITS' decoder is conditioned on ge (`cond`, gin_channels > 0)
    and has a conv_post without bias; v4's vocoder (TTS.init_vocoder: gin_channels 0, is_bias=True) has neither
    `cond` nor an unbiased conv_post."""

    def __init__(self, in_channels: int, initial: int, resblock_kernel_sizes, resblock_dilation_sizes,
                 upsample_rates, upsample_kernel_sizes, gin_channels: int = 0, post_bias: bool = False):
        super().__init__()
        self.kernels = len(resblock_kernel_sizes)
        self.conv_pre = nn.Conv1d(in_channels, initial, 7, 1, padding=3)
        self.ups = nn.ModuleList(
            nn.ConvTranspose1d(initial // 2 ** i, initial // 2 ** (i + 1), k, u, padding=(k - u) // 2)
            for i, (u, k) in enumerate(zip(upsample_rates, upsample_kernel_sizes, strict=True)))
        self.resblocks = nn.ModuleList(
            ResBlock1(initial // 2 ** (i + 1), k, d) for i in range(len(self.ups))
            for k, d in zip(resblock_kernel_sizes, resblock_dilation_sizes, strict=True))
        self.conv_post = nn.Conv1d(initial // 2 ** len(self.ups), 1, 7, 1, padding=3, bias=post_bias)
        if gin_channels:
            self.cond = nn.Conv1d(gin_channels, initial, 1)

    @classmethod
    def decoder(cls, config: SoVITSConfig) -> "Generator":
        """SoVITS' `dec`, from its config."""
        return cls(config.inter_channels, config.upsample_initial_channel, config.resblock_kernel_sizes,
                   config.resblock_dilation_sizes, config.upsample_rates, config.upsample_kernel_sizes,
                   config.gin_channels)

    def forward(self, x: torch.Tensor, g: torch.Tensor | None = None) -> torch.Tensor:
        x = self.conv_pre(x)
        if g is not None:
            x = x + self.cond(g)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, LRELU_SLOPE))
            xs = self.resblocks[i * self.kernels](x)
            for j in range(1, self.kernels):
                xs += self.resblocks[i * self.kernels + j](x)
            x = xs / self.kernels
        return torch.tanh(self.conv_post(F.leaky_relu(x)))


class Codebook(nn.Module):
    """quantizer.vq.layers.0._codebook: the one 1024 x 768 codebook of the residual VQ."""

    def __init__(self):
        super().__init__()
        self.register_buffer("embed", torch.zeros(CODEBOOK, SSL_DIM))


class SemanticCodec(nn.Module):
    """What every SoVITS version shares around its content: the SSL projection and the residual VQ's one codebook
    (upstream's names `ssl_proj`, `quantizer.vq.layers.0._codebook.embed`)."""

    def __init__(self):
        super().__init__()
        self.ssl_proj = nn.Conv1d(SSL_DIM, SSL_DIM, 2, stride=2)
        self.quantizer = nn.Module()
        self.quantizer.vq = nn.Module()
        self.quantizer.vq.layers = nn.ModuleList([nn.Module()])
        self.quantizer.vq.layers[0]._codebook = Codebook()

    @property
    def codebook(self) -> torch.Tensor:
        return self.quantizer.vq.layers[0]._codebook.embed

    def extract_latent(self, ssl: torch.Tensor) -> torch.Tensor:
        """CN-HuBERT features (1, 768, T) -> the prompt's semantic tokens (1, 1, T // 2) (nearest codeword)."""
        x = self.ssl_proj(ssl)
        flat = x.permute(0, 2, 1).reshape(-1, SSL_DIM)  # upstream's rearranges: a view, not a copy
        embed = self.codebook.t()
        dist = -(flat.pow(2).sum(1, keepdim=True) - 2 * flat @ embed + embed.pow(2).sum(0, keepdim=True))
        return dist.max(dim=-1).indices.view(1, 1, -1)

    def content(self, codes: torch.Tensor) -> torch.Tensor:
        """quantizer.decode then nearest x2 (25 Hz -> 50 Hz): semantic tokens (1, 1, T) -> (1, 768, 2T). The VQ sums
        its layers onto a 0-d zero; kept for the same bits."""
        quantized = torch.tensor(0.0, device=codes.device) + F.embedding(codes[0], self.codebook).transpose(1, 2)
        return F.interpolate(quantized, size=int(quantized.shape[-1] * 2), mode="nearest")


class SynthesizerV2(SemanticCodec):
    """SynthesizerTrn's inference for v2 / v2Pro / v2ProPlus, with upstream's parameter names."""

    def __init__(self, config: SoVITSConfig):
        super().__init__()
        self.config = config
        gin = config.gin_channels
        self.enc_p = TextEncoder(config)
        self.dec = Generator.decoder(config)
        self.flow = Flow(config.inter_channels, config.hidden_channels, gin)
        self.ref_enc = MelStyleEncoder(STYLE_BINS, out=gin)
        if config.is_pro:
            self.sv_emb = nn.Linear(SV_DIM, gin)
            self.ge_to512 = nn.Linear(gin, MRTE_HIDDEN)
            self.prelu = nn.PReLU(num_parameters=gin)

    def timbre(self, spec: torch.Tensor, sv: torch.Tensor | None) -> torch.Tensor:
        """get_ge: one reference's spectrogram (1, bins, T) [and its ERes2NetV2 embedding (1, 20480)] -> ge."""
        mask = torch.ones(1, 1, spec.shape[2], dtype=spec.dtype, device=spec.device)
        ge = self.ref_enc(spec[:, :STYLE_BINS] * mask, mask)
        if self.config.is_pro:
            ge += self.sv_emb(sv).unsqueeze(-1)
            ge = self.prelu(ge)
        return ge

    def decode(self, codes: torch.Tensor, text: torch.Tensor, refers: list[torch.Tensor], generator: torch.Generator,
               noise_scale: float = 0.5, speed: float = 1.0, sv: list[torch.Tensor] | None = None) -> torch.Tensor:
        """Semantic tokens (1, 1, T), phone ids (1, L) and the references' spectrograms [(1, bins, Ti)] (their
        timbres averaged) -> the waveform (1, 1, samples)."""
        _check_decode(self.config, codes, text, refers, sv, speed)
        ges = [self.timbre(spec, sv[i] if self.config.is_pro else None) for i, spec in enumerate(refers)]
        ge = torch.stack(ges, 0).mean(0)
        quantized = self.content(codes)
        y_mask = torch.ones(1, 1, quantized.shape[-1], dtype=quantized.dtype, device=codes.device)
        text_mask = torch.ones(1, 1, text.shape[-1], dtype=quantized.dtype, device=codes.device)
        mrte_ge = self.ge_to512(ge.transpose(2, 1)).transpose(2, 1) if self.config.is_pro else ge
        m_p, logs_p, y_mask, _ = self.enc_p(quantized, y_mask, text, text_mask, mrte_ge, speed)
        noise = torch.randn(m_p.shape, generator=generator, device=m_p.device, dtype=m_p.dtype)
        z_p = m_p + noise * torch.exp(logs_p) * noise_scale
        z = self.flow.reverse(z_p, y_mask, ge)
        return self.dec((z * y_mask)[:, :, :], ge)


def check_tokens(config: SoVITSConfig, codes: torch.Tensor, text: torch.Tensor, speed: float) -> None:
    """Semantic tokens (1, 1, T), phone ids (1, L) and the speed, as every SoVITS version takes them."""
    if codes.dim() != 3 or codes.shape[:2] != (1, 1) or codes.is_floating_point() or codes.shape[2] == 0:
        raise InputError(f"SoVITS decodes semantic tokens (1, 1, T) with T > 0, got {tuple(codes.shape)}")
    if int(codes.max()) >= CODEBOOK or int(codes.min()) < 0:
        raise InputError(f"a semantic token is outside SoVITS's {CODEBOOK}-entry codebook")
    if text.dim() != 2 or text.shape[0] != 1 or text.is_floating_point() or text.shape[1] == 0:
        raise InputError(f"SoVITS takes phone ids (1, L) with L > 0, got {tuple(text.shape)}")
    if int(text.max()) >= config.symbols or int(text.min()) < 0:
        raise InputError(f"a phone id is outside the SoVITS model's {config.symbols} phones; the text front end "
                         f"and the SoVITS weights are of different versions")
    if not speed > 0:
        raise InputError(f"speed must be above 0, got {speed}")


def _check_decode(config: SoVITSConfig, codes, text, refers, sv, speed) -> None:
    check_tokens(config, codes, text, speed)
    if not refers or any(r.dim() != 3 or r.shape[0] != 1 or r.shape[1] < STYLE_BINS for r in refers):
        raise InputError(f"SoVITS takes one or more reference spectrograms (1, >= {STYLE_BINS} bins, frames)")
    if config.is_pro and (sv is None or len(sv) != len(refers)
                          or any(s.shape != (1, SV_DIM) for s in sv)):
        raise InputError(f"{config.version} takes one ERes2NetV2 embedding (1, {SV_DIM}) per reference")
