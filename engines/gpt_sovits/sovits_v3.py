"""GPT-SoVITS v3, v4 and v5's SoVITS: `module/models.py::SynthesizerTrnV3` at 48b1a01, its inference half
(`decode_encp`, whose features the CFM turns into mels) and `extract_latent`.

    semantic tokens (1, 1, T) -> codebook -> nearest x2 -> TextEncoder (v2's, with MRTE and the speed) -> its
    hidden content (before `proj`) -> bridge (1x1 conv to 512, leaky ReLU) -> nearest x1.875 (v3: 24 kHz mels at
    hop 256 are 93.75 per second) or x2 (v4: 32 kHz at hop 320, 100 per second) -> wns1 (a WN encoder
    conditioned on ge) -> features (1, 512, frames) for the CFM
    v5 (v5dev, v5turbo) is v4's, with v5's CFM (cfm_v5.py).
    timbre ge: MelStyleEncoder(reference spectrogram[:704]); v3/v4/v5 take the first reference only (TTS.run's
    refer_spec[0]) and have no speaker embedding.

The CFM (`cfm.*`, cfm.py) and the vocoder (vocoder.py: BigVGAN for v3, a HiFi-GAN for v4) run in
vocoder_synthesis.py. `linear_mel`, trained and never used at inference, is kept so that files load whole.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.nn.wavenet import WaveNet

from .cfm import CFM
from .sovits import SemanticCodec, SoVITSConfig, TextEncoder, check_tokens
from .style_encoder import STYLE_BINS, MelStyleEncoder

FEATURES = 512  # SynthesizerTrnV3's inter_channels2: the CFM's condition
MELS = 100
WNS1_LAYERS = 8  # upstream's; read from the file (the tests' tiny models have fewer)
# frames of the CFM's mels per 50 Hz content frame, and per semantic token (the y_lengths1 sizes decode_encp masks)
# (decode_encp: "3.875 if self.version == 'v3' else 4", so v5 is v4's)
CONTENT_TO_MEL = {"v3": 1.875, "v4": 2.0, "v5dev": 2.0, "v5turbo": 2.0}
TOKEN_TO_MEL = {"v3": 3.875, "v4": 4.0, "v5dev": 4.0, "v5turbo": 4.0}


class MelFeatureEncoder(nn.Module):
    """models.Encoder (pre 1x1 -> WN -> proj 1x1, masked): wns1, the "more WN parameters to learn mel" stage."""

    def __init__(self, channels: int, kernel_size: int, layers: int, gin: int):
        super().__init__()
        self.pre = nn.Conv1d(channels, channels, 1)
        self.enc = WaveNet(channels, kernel_size, 1, layers, gin_channels=gin, padding="zeros")
        self.proj = nn.Conv1d(channels, channels, 1)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        # commons.sequence_mask: positions below the length
        mask = (torch.arange(x.shape[2], device=x.device)[None] < lengths[:, None]).unsqueeze(1).to(x.dtype)
        x = self.pre(x) * mask
        x = self.enc(x, mask, g=g)
        return self.proj(x) * mask


class SynthesizerV3(SemanticCodec):
    """SynthesizerTrnV3's inference for v3, v4 and v5, with upstream's parameter names."""

    def __init__(self, config: SoVITSConfig, cfm: CFM, wns1_layers: int = WNS1_LAYERS):
        super().__init__()
        if config.version not in CONTENT_TO_MEL:
            raise ValueError(f"SynthesizerV3 is v3's, v4's and v5's, not {config.version}'s")
        self.config = config
        gin = config.gin_channels
        self.enc_p = TextEncoder(config)
        self.ref_enc = MelStyleEncoder(STYLE_BINS, out=gin)
        self.bridge = nn.Sequential(nn.Conv1d(config.inter_channels, FEATURES, 1), nn.LeakyReLU())
        self.wns1 = MelFeatureEncoder(FEATURES, 5, wns1_layers, gin)
        self.linear_mel = nn.Conv1d(FEATURES, MELS, 1)
        self.cfm = cfm

    def timbre(self, spec: torch.Tensor) -> torch.Tensor:
        """ge of one reference's spectrogram (1, bins, T)."""
        mask = torch.ones(1, 1, spec.shape[2], dtype=spec.dtype, device=spec.device)
        return self.ref_enc(spec[:, :STYLE_BINS] * mask, mask)

    def features(self, codes: torch.Tensor, text: torch.Tensor, ge: torch.Tensor, speed: float = 1.0) -> torch.Tensor:
        """decode_encp: semantic tokens (1, 1, T), phone ids (1, L) and ge -> the CFM's features (1, 512, frames)."""
        check_tokens(self.config, codes, text, speed)
        version, tokens = self.config.version, codes.shape[2]
        ratio = TOKEN_TO_MEL[version]
        mel_frames = int(tokens * ratio) if speed == 1 else int(tokens * ratio / speed) + 1
        quantized = self.content(codes)
        y_mask = torch.ones(1, 1, quantized.shape[-1], dtype=quantized.dtype, device=codes.device)
        text_mask = torch.ones(1, 1, text.shape[-1], dtype=quantized.dtype, device=codes.device)
        _, _, _, hidden = self.enc_p(quantized, y_mask, text, text_mask, ge, speed)
        fea = F.interpolate(self.bridge(hidden), scale_factor=CONTENT_TO_MEL[version], mode="nearest")
        return self.wns1(fea, torch.tensor([mel_frames], device=codes.device), ge)


def wns1_layers(state: dict) -> int:
    """How many WN layers a SynthesizerTrnV3 state's wns1 has (upstream builds 8)."""
    return len({key.split(".")[3] for key in state if key.startswith("wns1.enc.in_layers.")})
