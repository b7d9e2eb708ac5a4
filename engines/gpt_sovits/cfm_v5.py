"""GPT-SoVITS v5's flow matching (v5dev, 32 steps with guidance; v5turbo, distilled to 4 steps without): upstream's
`module/v5_inference.py` (CFMV5.inference, synthesize_v5_mel, the sampling defaults and checks) over the DiT's
static cache (`f5_tts/model/backbones/dit.py::prepare_static_cache`), on the cuda_graph_accel_v5 branch at
RVC-Boss/GPT-SoVITS ac846f5 (MIT).

What differs from v3/v4's solver (cfm.py):
- the DiT has no step embedding (use_step_embedding=False): the conditioning is the time's embedding alone, and
  t = i / steps is computed per step, not accumulated;
- the noise is randn * 0.875 whatever temperature is asked for;
- the input projection is split: the prompt's mel and the text embedding go through proj's later columns once per
  chunk (with the bias), the noisy mel through its first 100 columns every step, and the two are added (a split
  product rounds differently from v4's single linear);
- guidance, v + cfg (v - v_neg), drops the prompt's mel only (the text stays): cfg 1.3 for v5dev, 0 for v5turbo
  (no second forward at 0); steps are 4, 8, 16 or 32, cfg within [0, 2];
- long targets roll (synthesize): the reference is its last 500 frames, each chunk holds at most
  min(1000 - reference, 640) target frames, and every chunk after the first is prompted by the reference with its
  last 32 frames replaced by the previous chunk's last mels and features. The mels are laid end to end (no
  cross-fade); upstream renders v5 this way with parallel_infer on and off.

With `graphs`, the DiT's segments replay as CUDA graphs (runtime.graphs.LayerSteps), as v3/v4's do.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from mizuoto.core.errors import InputError
from mizuoto.runtime.graphs import Graphs, LayerSteps

from .cfm import CFG_THRESHOLD, CFM

NOISE_SCALE = 0.875  # V5_TEMPERATURE: the solver's starting noise, fixed
STEPS = (4, 8, 16, 32)  # validate_v5_sampling's Euler steps
MAX_CFG = 2.0
DEFAULTS = {"v5dev": (32, 1.3), "v5turbo": (4, 0.0)}  # sampling_defaults: (steps, cfg) when a request names none
REFERENCE_FRAMES = 500  # the prompt's last frames kept
TOTAL_CHUNK_FRAMES = 1000  # prompt + target frames per CFM call
MAX_TARGET_CHUNK_FRAMES = 640
ROLLING_TAIL_FRAMES = 32  # of the previous chunk, in the next one's prompt


def v5_sampling(version: str, steps: int | None, cfg: float | None) -> tuple[int, float]:
    """resolve_sampling then validate_v5_sampling: the version's defaults for what is None, then the checks (an
    InputError that names the setting)."""
    default_steps, default_cfg = DEFAULTS[version]
    return check_sampling(default_steps if steps is None else steps, default_cfg if cfg is None else cfg, version)


def check_sampling(steps: int, cfg: float, who: str = "v5") -> tuple[int, float]:
    """validate_v5_sampling: steps 4, 8, 16 or 32, cfg finite within [0, 2]; `who` names the model in errors."""
    cfg = float(cfg)
    if steps not in STEPS:
        raise InputError(f"{who} takes sample_steps of {', '.join(map(str, STEPS))} (it was distilled for "
                         f"them), got {steps}")
    if not math.isfinite(cfg) or not 0 <= cfg <= MAX_CFG:
        raise InputError(f"cfg_rate must be between 0 and {MAX_CFG:g} for {who}, got {cfg}")
    return steps, cfg


class CFMV5(CFM):
    """CFMV5: v3/v4's CFM module (the same DiT without d_embed) with v5's solver."""

    @torch.inference_mode()
    def inference(self, mu: torch.Tensor, x_lens: torch.Tensor, prompt: torch.Tensor, n_timesteps: int,
                  temperature: float = NOISE_SCALE, inference_cfg_rate: float = 1.3, *,
                  generator: torch.Generator | None = None, graphs: Graphs | None = None,
                  before_step: Callable[[], None] | None = None) -> torch.Tensor:
        """Features mu (B, T, text_dim), x_lens (B,) or (1,), the prompt's mel (1 or B, mel, P) -> the mel
        (B, mel, T), its first P frames zero. `temperature` is ignored, as upstream ignores it (the noise is always
        scaled by 0.875)."""
        est = self.estimator
        if est.d_embed is not None:
            raise InputError("this CFM has a step embedding: it is a v3/v4 model, not a v5 one")
        n_timesteps, cfg = check_sampling(n_timesteps, inference_cfg_rate, "v5's CFM")
        if mu.ndim != 3 or mu.shape[2] != self.config.text_dim:
            raise InputError(f"the CFM's features must be (B, T, {self.config.text_dim}), got {tuple(mu.shape)}")
        batch, frames = mu.shape[:2]
        prompt_len = prompt.shape[-1]
        if prompt_len > frames:
            raise InputError(f"the CFM's prompt has {prompt_len} frames, more than the {frames} it generates")
        device, dtype = mu.device, mu.dtype
        x = torch.randn(batch, self.in_channels, frames, device=device, dtype=dtype, generator=generator) \
            * NOISE_SCALE
        x[..., :prompt_len] = 0
        prompt_x = torch.zeros_like(x)
        prompt_x[..., :prompt_len] = prompt.to(dtype)
        text = est.text_embed(mu, frames)
        static = est.static_condition(prompt_x, text)  # prepare_static_cache's condition
        guided = cfg > CFG_THRESHOLD
        if guided:  # and its negative_condition: the prompt's mel dropped, the text kept
            negative = est.static_condition(torch.zeros_like(prompt_x), text)
        pos, index = est.positions(x_lens, batch, frames, device)
        layers = LayerSteps(est.segments(), est.embed_static, est.finish, graphs)
        step = 1.0 / n_timesteps
        for i in range(n_timesteps):
            if before_step is not None:
                before_step()
            time = torch.full((batch,), i * step, device=device, dtype=dtype)
            velocity = layers((x, static, time), pos, index)
            if guided:
                velocity = velocity.clone()  # with graphs, the next call rewrites its static output
                velocity = velocity + cfg * (velocity - layers((x, negative, time), pos, index))
            x = x + step * velocity.transpose(2, 1)
            x[..., :prompt_len] = 0
        return x


def synthesize(cfm: CFMV5, reference_features: torch.Tensor, target_features: torch.Tensor,
               reference_mel: torch.Tensor, steps: int, cfg: float, generator: torch.Generator | None = None,
               graphs: Graphs | None = None, before_step: Callable[[], None] | None = None) -> torch.Tensor:
    """synthesize_v5_mel after its sampling checks: the reference's features (B, 512, R) and mel (B, 100, R'), the
    target's features (B, 512, T) -> the target's mel (B, 100, T), chunk after chunk."""
    frames = min(reference_mel.shape[-1], reference_features.shape[-1])
    if frames < 1:
        raise InputError("v5 needs a reference with at least one mel frame and one feature frame")
    if target_features.shape[-1] < 1:
        raise InputError("v5 needs at least one target frame to render")
    original_mel = reference_mel[..., :frames][..., -REFERENCE_FRAMES:]
    original_features = reference_features[..., :frames][..., -REFERENCE_FRAMES:]
    frames = original_mel.shape[-1]
    chunk = min(TOTAL_CHUNK_FRAMES - frames, MAX_TARGET_CHUNK_FRAMES)
    rolling_mel, rolling_features = original_mel, original_features
    mels = []
    for index, start in enumerate(range(0, target_features.shape[-1], chunk)):
        target = target_features[..., start:start + chunk]
        if index == 0:
            prompt, features = original_mel, original_features
        else:
            tail = min(ROLLING_TAIL_FRAMES, frames, rolling_mel.shape[-1], rolling_features.shape[-1])
            prompt = torch.cat((original_mel[..., :frames - tail], rolling_mel[..., -tail:]), dim=-1)
            features = torch.cat((original_features[..., :frames - tail], rolling_features[..., -tail:]), dim=-1)
        mu = torch.cat((features, target), dim=-1).transpose(2, 1)
        lengths = torch.full((mu.shape[0],), mu.shape[1], dtype=torch.long, device=mu.device)
        generated = cfm.inference(mu, lengths, prompt, steps, inference_cfg_rate=cfg, generator=generator,
                                  graphs=graphs, before_step=before_step)[..., prompt.shape[-1]:]
        mels.append(generated)
        rolling_mel = generated[..., -frames:].to(original_mel.dtype)
        rolling_features = target[..., -frames:]
    return torch.cat(mels, dim=-1)
