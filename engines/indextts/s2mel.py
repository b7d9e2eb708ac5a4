"""IndexTTS 2's acoustic back half: GPT latents and codes -> mel (s2mel) -> waveform (BigVGAN) in int16 range.

Matches index-tts/index-tts ee40fa7 `indextts/infer_v2.py` (infer_generator's s2mel and BigVGAN calls, the
prompt_condition of the reference) and `indextts/s2mel/modules/commons.py` (`MyModel(use_gpt_latent=True)`,
`load_checkpoint2`). The nets are Seed-VC v1's, shared in mizuoto/nn (s2mel_cfm, s2mel_dit, length_regulator,
wavenet): IndexTTS's copies differ from seed-vc's only in comments, a split instead of two slices in the WaveNet
gate (the same values) and setup_caches' KV-cache default (the DiT passes use_kv_cache=False). What IndexTTS adds:

    latent (1, T, 1280) -> gpt_layer: Linear 1280->256 -> Linear 256->128 -> Linear 128->1024 (no activations)
      + codec.vq2emb(codes.unsqueeze(1)).transpose(1, 2)     -> S_infer (1, T, 1024)
    target_lengths = (code_lens * 1.72).long()               (float32 arithmetic: the tensor times a Python float)
    cond = length_regulator(S_infer, ylens=target_lengths)[0]; the prompt's from S_ref and the ref mel's frames
    cfm.inference([prompt_condition, cond], [frames], ref_mel, style, 25 steps, cfg 0.7) -> drop the prompt frames
    BigVGAN(mel) -> clamp(32767 * wave, -32767, 32767)

The DiT's attention goes through the shared site "s2mel.dit" (mizuoto/nn/s2mel_dit.py). The sampler's noise is one
randn(1, 80, frames) from the caller's generator, upstream's one draw from the global generator.

Loading differs on purpose: load_checkpoint2 keeps only tensors whose name and shape fit and leaves the rest at
their random init; here every tensor the nets read must be there with its shape (a one-line CheckpointError
otherwise), after the same "module." stripping; keys inference never reads are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn import s2mel_cfm
from mizuoto.nn.ops import Linear
from mizuoto.runtime.graphs import Graphs

from .reference import MelSettings

GPT_WIDTH = 1280  # hard-coded in MyModel's gpt_layer
CONTENT_WIDTH = 1024  # the codec's and the regulator's input width
GPT_LAYER_WIDTHS = (GPT_WIDTH, 256, 128, CONTENT_WIDTH)
LENGTH_RATIO = 1.72  # mel frames per GPT code
STEPS, CFG_RATE = 25, 0.7  # infer_generator's diffusion_steps, inference_cfg_rate
INT16_PEAK = 32767.0
NETS = ("cfm", "length_regulator", "gpt_layer")


@dataclass(frozen=True)
class S2MelConfig:
    """config.yaml's s2mel section: the nets (Seed-VC v1's model_params layout) and the mel settings."""

    nets: s2mel_cfm.S2MelConfig
    mel: MelSettings

    @classmethod
    def from_section(cls, section) -> "S2MelConfig":
        if not isinstance(section, dict):
            raise CheckpointError("config.yaml has no s2mel section; check the model's config")
        config = cls(s2mel_cfm.S2MelConfig.from_model_params(section), MelSettings.from_section(section))
        if config.nets.regulator.is_discrete or config.nets.regulator.in_channels != CONTENT_WIDTH:
            raise CheckpointError(f"config.yaml s2mel.length_regulator must take {CONTENT_WIDTH}-wide continuous "
                                  f"features (in_channels {CONTENT_WIDTH}, is_discrete false); check the config")
        return config


def gpt_layer() -> nn.Sequential:
    """MyModel's gpt_layer: three Linears, keys 0.*, 1.*, 2.*."""
    widths = GPT_LAYER_WIDTHS
    return nn.Sequential(*(Linear(a, b) for a, b in zip(widths[:-1], widths[1:], strict=True)))


def target_lengths(code_lens: torch.Tensor) -> torch.Tensor:
    """(code_lens * 1.72).long(): the product in the default float dtype (float32), as upstream computes it."""
    return (code_lens * LENGTH_RATIO).long()


def _strip(state: dict) -> dict:
    return {(k[len("module."):] if k.startswith("module.") else k): v for k, v in state.items()}


class S2Mel(nn.Module):
    """The s2mel nets of IndexTTS 2: `nets` (Seed-VC's cfm and length_regulator) and `gpt_layer`."""

    def __init__(self, config: S2MelConfig):
        super().__init__()
        self.config = config
        self.nets = s2mel_cfm.S2Mel(config.nets)
        self.gpt_layer = gpt_layer()
        self._steps: tuple | None = None  # (graphs, StepGraphs): step_graphs'

    @classmethod
    def from_state(cls, state, config: S2MelConfig, source: str = "s2mel.pth") -> "S2Mel":
        """From what s2mel.pth holds ({"net": {"cfm", "length_regulator", "gpt_layer"}}), eval mode, on the CPU."""
        nets = state.get("net") if isinstance(state, dict) else None
        if not isinstance(nets, dict) or any(not isinstance(nets.get(name), dict) for name in NETS):
            raise CheckpointError(f"{source} holds no IndexTTS 2 s2mel nets ({', '.join(NETS)} under 'net'); "
                                  f"check that it is IndexTTS 2's s2mel.pth")
        model = cls(config)
        model.nets.load_nets({name: nets[name] for name in s2mel_cfm.S2Mel.NETS}, source=source)
        layer = _strip(nets["gpt_layer"])
        expected = model.gpt_layer.state_dict()
        wrong = sorted(set(expected) ^ set(layer)) or sorted(k for k in expected if layer[k].shape != expected[k].shape)
        if wrong:
            raise CheckpointError(f"{source}: its gpt_layer is not Linear {'->'.join(map(str, GPT_LAYER_WIDTHS))} "
                                  f"(at {wrong[0]}); check that it is IndexTTS 2's s2mel.pth")
        model.gpt_layer.load_state_dict(layer, strict=True)
        return model.eval()

    @classmethod
    def from_checkpoint(cls, path, config: S2MelConfig) -> "S2Mel":
        path = Path(path)
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as error:  # any reader failure is a bad file, said in one line
            raise CheckpointError(f"{path} is not a readable checkpoint ({' '.join(str(error).split())[:160]}); "
                                  f"download it again") from None
        return cls.from_state(state, config, source=str(path))

    @property
    def regulator(self):
        return self.nets.length_regulator

    def prompt(self, s_ref: torch.Tensor, ref_mel: torch.Tensor) -> torch.Tensor:
        """prompt_condition = length_regulator(S_ref (1, T, 1024), ylens=[ref mel frames])[0]: (1, frames, C)."""
        if ref_mel.dim() != 3 or ref_mel.shape[0] != s_ref.shape[0]:
            raise InputError(f"the prompt takes S_ref (batch, frames, {CONTENT_WIDTH}) and its mel (batch, mels, "
                             f"frames), got {tuple(s_ref.shape)} and {tuple(ref_mel.shape)}")
        lengths = torch.full((s_ref.shape[0],), ref_mel.shape[2], dtype=torch.long, device=s_ref.device)
        return self.regulator(s_ref, lengths)[0]

    def content(self, latent: torch.Tensor, codes: torch.Tensor, codec) -> torch.Tensor:
        """S_infer = codec.vq2emb(codes.unsqueeze(1)).transpose(1, 2) + gpt_layer(latent): (1, T, 1024)."""
        if latent.dim() != 3 or latent.shape[0] != 1 or latent.shape[-1] != GPT_WIDTH:
            raise InputError(f"s2mel takes one request's GPT latent (1, codes, {GPT_WIDTH}), got "
                             f"{tuple(latent.shape)}")
        if codes.dim() != 2 or codes.shape != latent.shape[:2]:
            raise InputError(f"s2mel takes one code per latent frame, codes (1, {latent.shape[1]}), got "
                             f"{tuple(codes.shape)}")
        return codec.embed(codes) + self.gpt_layer(latent)

    def condition(self, latent, codes, code_lens, codec) -> torch.Tensor:
        """The target's condition: length_regulator(S_infer, ylens=(code_lens * 1.72).long())[0]."""
        if not isinstance(code_lens, torch.Tensor) or code_lens.shape != (1,) or code_lens.is_floating_point():
            raise InputError(f"code_lens must be one integer length, a (1,) tensor, got {code_lens!r}")
        return self.regulator(self.content(latent, codes, codec), target_lengths(code_lens))[0]

    def step_graphs(self, graphs: Graphs | None) -> s2mel_cfm.StepGraphs | None:
        """The CFM's Euler step as CUDA graphs (one per frame count; None: eager), kept while the graphs object is,
        so a frame count seen before replays at once."""
        if graphs is None:
            return None
        if self._steps is None or self._steps[0] is not graphs:
            self._steps = (graphs, s2mel_cfm.StepGraphs(self.nets.cfm.estimator, graphs))
        return self._steps[1]

    def mel(self, latent, codes, code_lens, prompt_condition, ref_mel, style, codec, *, steps: int = STEPS,
            cfg_rate: float = CFG_RATE, generator: torch.Generator | None = None,
            graphs: Graphs | None = None) -> torch.Tensor:
        """The target mel (1, 80, frames): the condition after the prompt's, the CFM from `generator`'s noise, the
        prompt frames cut off. With `graphs` each of the 25 steps replays one CUDA graph (the same values)."""
        if generator is None:
            raise InputError("s2mel sampling needs a torch.Generator for its noise (seeded by the request)")
        with torch.inference_mode():
            cond = self.condition(latent, codes, code_lens, codec)
            if prompt_condition.dim() != 3 or prompt_condition.shape[0] != 1 \
                    or prompt_condition.shape[2] != cond.shape[2]:
                raise InputError(f"prompt_condition must be (1, frames, {cond.shape[2]}) (S2Mel.prompt's), got "
                                 f"{tuple(prompt_condition.shape)}")
            both = torch.cat([prompt_condition, cond], dim=1)
            lengths = torch.tensor([both.shape[1]], dtype=torch.long, device=both.device)
            out = self.nets.cfm.inference(both, lengths, ref_mel, style, generator, steps=steps, cfg_rate=cfg_rate,
                                          step_graphs=self.step_graphs(graphs))
            return out[:, :, ref_mel.shape[-1]:]


def vocode(vocoder, mel: torch.Tensor) -> torch.Tensor:
    """BigVGAN's waveform of one mel (1, 80, frames) in int16 range: clamp(32767 * wave, -32767, 32767), (1, samples)
    float32."""
    if mel.dim() != 3 or mel.shape[0] != 1:
        raise InputError(f"vocode takes one mel (1, mels, frames), got shape {tuple(mel.shape)}")
    with torch.inference_mode():
        wave = vocoder(mel.float()).reshape(1, -1)
        return torch.clamp(INT16_PEAK * wave, -INT16_PEAK, INT16_PEAK)
