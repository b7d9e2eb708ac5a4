"""The vocoders of GPT-SoVITS v3 and v4, as TTS.init_vocoder (TTS_infer_pack/TTS.py) builds them at 48b1a01: mel
spectrograms (B, 100, T), in the CFM's log range, to waveforms (B, 1, T * upsample) in [-1, 1].

- v3: NVIDIA's BigVGAN v2 24 kHz, 100 bands, 256x (upstream's vendored GPT_SoVITS/BigVGAN, torch path), read with
  BigVGAN.from_pretrained from pretrained_models/models--nvidia--bigvgan_v2_24khz_100band_256x/ (config.json and
  bigvgan_generator.pt, weight norm as weight_g / weight_v) and then remove_weight_norm(): mizuoto.nn.bigvgan, whose
  load folds each weight-norm pair once with the same op. 24 kHz, 256 samples per frame.
- v4: module/models.py's HiFi-GAN `Generator` at upstream's hard-coded size (100 mels in, 512 channels, upsample
  rates 10, 6, 2, 2, 2 with kernels 20, 12, 4, 4, 4, resblock "1" with kernels 3, 7, 11 at dilations 1, 3, 5, no
  speaker conditioning, conv_post with a bias), weight norm removed, then pretrained_models/gsv-v4-pretrained/
  vocoder.pth: a plain state dict of the weight-norm-free names (conv_pre.weight, ups.0.weight,
  resblocks.0.convs1.0.weight, conv_post.bias, ...) loaded strictly. 48 kHz, 480 samples per frame.

    v4: conv_pre (k7) -> per stage: leaky ReLU 0.1 -> transposed conv (halves the channels) -> mean of the three
        ResBlock1s -> leaky ReLU (slope 0.01, torch's default, as upstream calls it) -> conv_post (k7, bias) -> tanh

The v4 file's width is read from its conv_pre (upstream hard-codes 512): the released file is 512 wide, and a
narrower file, which upstream could not load, builds the same network narrower (the tests' tiny vocoders).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn import bigvgan

from .sovits import Generator

MELS = 100
V3_FOLDER = "models--nvidia--bigvgan_v2_24khz_100band_256x"  # in the assets folder (upstream's pretrained_models)
V4_FILE = ("gsv-v4-pretrained", "vocoder.pth")
V5_FILE = ("gsv-v5-pretrained", "vocoder.pth")  # v5's release of v4's vocoder (TTS.init_vocoder at ac846f5)
V3_SAMPLING_RATE, V3_UPSAMPLE = 24000, 256  # what the vocoders make: vocoder_synthesis.LAYOUTS reads them
V4_SAMPLING_RATE, V4_UPSAMPLE = 48000, 480


@dataclass(frozen=True)
class HiFiGANConfig:
    """The v4 vocoder's shape: upstream's Generator arguments in TTS.init_vocoder (the defaults)."""

    upsample_initial_channel: int = 512
    mels: int = MELS  # initial_channel
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5),) * 3
    upsample_rates: tuple[int, ...] = (10, 6, 2, 2, 2)
    upsample_kernel_sizes: tuple[int, ...] = (20, 12, 4, 4, 4)

    @property
    def upsample_factor(self) -> int:
        """Waveform samples per mel frame."""
        return math.prod(self.upsample_rates)


V4_RELEASED = HiFiGANConfig()


class HiFiGANVocoder(Generator):
    """module/models.py Generator(gin_channels=0, is_bias=True) for inference, with upstream's parameter names."""

    def __init__(self, config: HiFiGANConfig = V4_RELEASED):
        super().__init__(config.mels, config.upsample_initial_channel, config.resblock_kernel_sizes,
                         config.resblock_dilation_sizes, config.upsample_rates, config.upsample_kernel_sizes,
                         post_bias=True)
        self.config = config

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """mel (B, 100, T) -> waveform (B, 1, T * 480) in [-1, 1]."""
        check_mel(mel, self.config.mels, "the v4 vocoder")
        return super().forward(mel)


def check_mel(mel, mels: int, what: str) -> None:
    """InputError, in one line, for anything but a float (B, mels, T >= 1) tensor."""
    if not isinstance(mel, torch.Tensor) or not mel.is_floating_point():
        kind = f"a {mel.dtype} tensor" if isinstance(mel, torch.Tensor) else f"a {type(mel).__name__}"
        raise InputError(f"{what} takes a float mel spectrogram tensor, got {kind}")
    if mel.dim() != 3 or mel.shape[1] != mels or mel.shape[2] < 1:
        raise InputError(f"{what} takes a mel of shape (batch, {mels}, frames >= 1), got {tuple(mel.shape)}")


# ---------------------------------------------------------------------------------------------------
# Loading


def load_v4_vocoder(path: str | Path, device="cpu", dtype: torch.dtype = torch.float32,
                    release: tuple[str, str] = V4_FILE) -> HiFiGANVocoder:
    """pretrained_models/gsv-v4-pretrained/vocoder.pth, or v5's gsv-v5-pretrained/vocoder.pth (a plain state dict,
    weight norm removed) as upstream loads it: every name of the network at its shape and nothing else
    (load_state_dict's strict default). In eval mode on `device` in `dtype`. `release`: where the assets folder keeps
    it (V5_FILE for v5), named in errors."""
    path = Path(path)
    where = "/".join(release)
    if not path.is_file():
        raise CheckpointError(f"GPT-SoVITS needs its vocoder {where} (lj1995/GPT-SoVITS) in the assets folder; "
                              f"{path} is missing")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated file, or not a torch file
        raise CheckpointError(f"cannot read {path} ({type(error).__name__}); download {where} again") from None
    hint = f"download {where} from lj1995/GPT-SoVITS again"
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) and v.is_floating_point()
                                              for v in state.values()):
        raise CheckpointError(f"{path} is not a state dict of float tensors (the v4 vocoder's); {hint}")
    pre = state.get("conv_pre.weight")
    if pre is None or pre.dim() != 3 or pre.shape[0] < 2 ** len(V4_RELEASED.upsample_rates):
        raise CheckpointError(f"{path} is not GPT-SoVITS v4's vocoder (no conv_pre.weight of the HiFi-GAN); {hint}")
    with torch.device("meta"):
        model = HiFiGANVocoder(HiFiGANConfig(upsample_initial_channel=int(pre.shape[0])))
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(k for k in expected if k in state and state[k].shape != expected[k].shape)
    problem = (f"missing {missing[:3]}" if missing else f"unexpected {unexpected[:3]}" if unexpected
               else f"shapes differ for {wrong[:3]}" if wrong else None)
    if problem:
        raise CheckpointError(f"{path} is not GPT-SoVITS v4's vocoder ({problem}); {hint}")
    # float32 first, as upstream's load_state_dict copies into its float32 model, then the requested dtype
    model.load_state_dict({k: state[k].to(device=device, dtype=torch.float32).to(dtype) for k in expected},
                          assign=True)
    return model.eval().requires_grad_(False)


def load_v3_vocoder(folder: str | Path, device="cpu", dtype: torch.dtype = torch.float32) -> bigvgan.BigVGAN:
    """pretrained_models/models--nvidia--bigvgan_v2_24khz_100band_256x/ (config.json, bigvgan_generator.pt) as
    BigVGAN.from_pretrained and remove_weight_norm() leave it, in eval mode on `device` in `dtype`. The config must
    describe a 100-band, 256x generator: the mels v3's CFM makes, at the hop its synthesis assumes."""
    folder = Path(folder)
    hint = f"download {V3_FOLDER}/ from lj1995/GPT-SoVITS into the assets folder"
    for name in ("config.json", "bigvgan_generator.pt"):
        if not (folder / name).is_file():
            raise CheckpointError(f"GPT-SoVITS v3 needs the BigVGAN vocoder {V3_FOLDER}/{name}; {folder / name} is "
                                  f"missing: {hint}")
    try:
        config = bigvgan.BigVGANConfig.from_dict(json.loads((folder / "config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot read {folder / 'config.json'} ({type(error).__name__}); {hint}") from None
    except CheckpointError as error:  # a field missing or out of range, said by BigVGANConfig
        raise CheckpointError(f"{folder}: {error}; {hint}") from None
    if config.num_mels != MELS or config.upsample_factor != V3_UPSAMPLE:
        raise CheckpointError(f"{folder} holds a {config.num_mels}-band, {config.upsample_factor}x BigVGAN; GPT-SoVITS "
                              f"v3 uses the {MELS}-band, {V3_UPSAMPLE}x one ({V3_FOLDER}): {hint}")
    return bigvgan.load_folder(folder, device).to(dtype)


__all__ = ["HiFiGANConfig", "HiFiGANVocoder", "V3_FOLDER", "V3_SAMPLING_RATE", "V3_UPSAMPLE", "V4_FILE", "V5_FILE",
           "V4_RELEASED", "V4_SAMPLING_RATE", "V4_UPSAMPLE", "check_mel", "load_v3_vocoder", "load_v4_vocoder"]
