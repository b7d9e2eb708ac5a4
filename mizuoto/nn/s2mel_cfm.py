"""The s2mel flow-matching sampler, and the whole s2mel model (CFM + length regulator) with its checkpoint loading.

Exact to seed-vc 0.4.3 `modules/flow_matching.py` (`BASECFM.inference` / `solve_euler`, `CFM`) and
`modules/commons.py` (`build_model(stage='DiT')`, `load_checkpoint`'s key handling); GPL-3.0 code, read not copied.
IndexTTS 2's s2mel runs the same sampler (25 steps, rate 0.7).

Sampling (`sample`): noise z = randn(B, C, T) · temperature (the caller's generator in place of upstream's global
one: the same draw); t runs 0 -> 1 over `steps` Euler steps of a linear grid, t accumulated by adding each step
as upstream does (on the CPU the sums equal the grid's values for every step count up to 200: measured, kept
anyway); the prompt mel (B, C, P) fills the first P frames of prompt_x and
those frames of x are zeroed at the start and after every step (the output's too). With guidance (cfg_rate > 0)
each step evaluates one batch of two: [x, x] with [prompt_x, 0], [style, 0], [mu, 0], and mixes
(1 + rate)·v_cond - rate·v_uncond.

The estimator is called as `estimator(x, prompt_x, x_lens, t, style, mu)` once per step with tensors of fixed
shapes (the guidance halves are built once), so a later CUDA-graph wrapper can capture one step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.length_regulator import LengthRegulator, RegulatorConfig
from mizuoto.nn.s2mel_dit import DiT, DiTConfig
from mizuoto.nn.wavenet import fold_weight_norm
from mizuoto.runtime.graphs import GraphedCall, Graphs

# ---------------------------------------------------------------------------------------------------
# The sampler


@dataclass(frozen=True)
class GuidanceBatch:
    """What the estimator gets besides x and t, the same at every step: the conditional inputs, followed by the
    unconditional (zeroed) ones when guiding."""

    prompt_x: torch.Tensor
    x_lens: torch.Tensor
    style: torch.Tensor
    mu: torch.Tensor
    guided: bool


def guidance_batch(prompt_x, x_lens, style, mu, guided: bool) -> GuidanceBatch:
    if not guided:
        return GuidanceBatch(prompt_x, x_lens, style, mu, False)
    # Upstream passes x_lens un-doubled (its mask then broadcasts over a batch of 1, the only batch its guided
    # path runs); a larger batch gets the lengths doubled with the rows.
    lens = x_lens if mu.shape[0] == 1 else torch.cat([x_lens, x_lens])
    return GuidanceBatch(torch.cat([prompt_x, torch.zeros_like(prompt_x)]), lens,
                         torch.cat([style, torch.zeros_like(style)]), torch.cat([mu, torch.zeros_like(mu)]), True)


def velocity(estimator, x: torch.Tensor, t: torch.Tensor, batch: GuidanceBatch, cfg_rate: float) -> torch.Tensor:
    """One estimator call at time t (a 0-dim tensor): the (guided) velocity of x."""
    if not batch.guided:
        return estimator(x, batch.prompt_x, batch.x_lens, t.unsqueeze(0), batch.style, batch.mu)
    # Upstream's t is (2,) for its batch of 1; one time per row for a larger batch.
    times = t.unsqueeze(0).expand(2 * x.shape[0]).contiguous()
    both = estimator(torch.cat([x, x]), batch.prompt_x, batch.x_lens, times, batch.style, batch.mu)
    conditional, unconditional = both.chunk(2, dim=0)
    return (1.0 + cfg_rate) * conditional - cfg_rate * unconditional


def time_steps(steps: int, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(t, dt) of each Euler step, 0-dim float32 tensors: dt from the linear grid, t the running sum of the
    previous dts (upstream's accumulation; another device's linspace may round so that it differs from the grid)."""
    grid = torch.linspace(0, 1, steps + 1, device=device)
    t, out = grid[0], []
    for step in range(1, steps + 1):
        dt = grid[step] - grid[step - 1]
        out.append((t, dt))
        t = t + dt
    return out


def check_steps(steps, cfg_rate, temperature) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError(f"s2mel steps must be a whole number of at least 1, got {steps!r}")
    for name, value in (("cfg_rate", cfg_rate), ("temperature", temperature)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(f"s2mel {name} must be a finite number, got {value!r}")
    if cfg_rate < 0:
        raise InputError(f"s2mel cfg_rate must be 0 (no guidance) or more, got {cfg_rate!r}")


def check_condition(mu: torch.Tensor, x_lens: torch.Tensor, prompt: torch.Tensor, style: torch.Tensor,
                    generator, channels: int, who: str) -> None:
    """What a CFM sampler (s2mel's here, Seed-VC v2's) checks of its condition: mu (B, T, D), x_lens (B,) integer,
    a prompt mel (B, channels, P <= T), a style (B, S) and a torch.Generator; each a one-line InputError naming
    `who`."""
    if not isinstance(generator, torch.Generator):
        raise InputError(f"{who} sampling needs a torch.Generator for its noise (seeded by the request)")
    if mu.dim() != 3 or prompt.dim() != 3 or prompt.shape[1] != channels or prompt.shape[0] != mu.shape[0]:
        raise InputError(f"{who} takes mu (batch, frames, features) and a prompt mel (batch, {channels}, frames), "
                         f"got {tuple(mu.shape)} and {tuple(prompt.shape)}")
    batch, frames = mu.shape[0], mu.shape[1]
    if x_lens.shape != (batch,) or x_lens.is_floating_point():
        raise InputError(f"{who} x_lens must be one integer length per batch row ({batch}), got shape "
                         f"{tuple(x_lens.shape)} of {x_lens.dtype}")
    if style.dim() != 2 or style.shape[0] != batch:
        raise InputError(f"{who} takes one style vector per batch row, (batch {batch}, features), got "
                         f"{tuple(style.shape)}")
    if prompt.shape[-1] > frames:
        raise InputError(f"the {who} prompt ({prompt.shape[-1]} frames) is longer than the whole condition "
                         f"({frames} frames); the condition must hold the prompt's frames and the target's")


def euler_step(estimator, x, t, dt, prompt_x, x_lens, style, mu, *, cfg_rate: float, prompt_len: int,
               guided: bool) -> torch.Tensor:
    """One step of the solve: x + dt · the (guided) velocity at t, the prompt's frames zeroed again."""
    x = x + dt * velocity(estimator, x, t, GuidanceBatch(prompt_x, x_lens, style, mu, guided), cfg_rate)
    x[:, :, :prompt_len] = 0
    return x


class StepGraphs:
    """`sample`'s Euler step as one CUDA graph per input shape (runtime.graphs.GraphedCall), replayed at every step
    of every solve of that shape: a request whose frame count is new pays one eager warm-up and one capture, then
    replays, where a graph of the whole solve would pay two whole solves first. A step reads nothing back and draws
    nothing, so a replay runs the eager step's kernels: the same mel. Eager where `graphs` is None. Keep it with the
    loaded model: its graphs hold the weights' addresses."""

    def __init__(self, estimator, graphs: Graphs | None):
        self.graphs = graphs
        self.call = GraphedCall(lambda x, t, dt, prompt_x, x_lens, style, mu, generator, **options:
                                euler_step(estimator, x, t, dt, prompt_x, x_lens, style, mu, **options), graphs)

    def __call__(self, x, t, dt, batch: GuidanceBatch, generator: torch.Generator, *, cfg_rate: float,
                 prompt_len: int) -> torch.Tensor:
        return self.call((x, t, dt, batch.prompt_x, batch.x_lens, batch.style, batch.mu), generator,
                         cfg_rate=cfg_rate, prompt_len=prompt_len, guided=batch.guided)


def sample(estimator, mu: torch.Tensor, x_lens: torch.Tensor, prompt: torch.Tensor, style: torch.Tensor,
           generator: torch.Generator, *, steps: int, cfg_rate: float, temperature: float = 1.0,
           channels: int = 80, zero_prompt_speech_token: bool = False,
           step_graphs: StepGraphs | None = None) -> torch.Tensor:
    """The mel (B, channels, T) for content mu (B, T, D) and lengths x_lens (B,), a prompt mel (B, channels, P)
    (P may be 0) and a style (B, S): seed-vc's `CFM.inference(mu, x_lens, prompt, style, None, steps,
    temperature, cfg_rate)` with the noise drawn from `generator`. The first P frames of the result are zero.
    With `step_graphs` each step replays its CUDA graph (the same values)."""
    check_steps(steps, cfg_rate, temperature)
    check_condition(mu, x_lens, prompt, style, generator, channels, "s2mel")
    batch, frames, prompt_len = mu.shape[0], mu.shape[1], prompt.shape[-1]
    with torch.inference_mode():
        x = torch.randn([batch, channels, frames], device=mu.device, generator=generator) * temperature
        prompt_x = torch.zeros_like(x)
        prompt_x[..., :prompt_len] = prompt
        x[..., :prompt_len] = 0
        if zero_prompt_speech_token:
            # Upstream zeroes mu[..., :P] on its (B, T, D) layout, that is the first P *feature channels* (no
            # released preset sets the flag); kept as it is, on a copy (upstream writes into the caller's mu).
            mu = mu.clone()
            mu[..., :prompt_len] = 0
        inputs = guidance_batch(prompt_x, x_lens, style, mu, cfg_rate > 0)
        for t, dt in time_steps(steps, mu.device):
            if step_graphs is None:
                x = euler_step(estimator, x, t, dt, inputs.prompt_x, inputs.x_lens, inputs.style, inputs.mu,
                               cfg_rate=cfg_rate, prompt_len=prompt_len, guided=inputs.guided)
            else:
                x = step_graphs(x, t, dt, inputs, generator, cfg_rate=cfg_rate, prompt_len=prompt_len)
        return x


class FlowMatching(nn.Module):
    """seed-vc's `CFM` at inference: the DiT as `estimator` (keys `estimator.*`) and the sampler."""

    def __init__(self, config: DiTConfig, zero_prompt_speech_token: bool = False):
        super().__init__()
        self.estimator = DiT(config)
        self.zero_prompt_speech_token = zero_prompt_speech_token

    def inference(self, mu, x_lens, prompt, style, generator, *, steps: int, cfg_rate: float,
                  temperature: float = 1.0, step_graphs: StepGraphs | None = None) -> torch.Tensor:
        return sample(self.estimator, mu, x_lens, prompt, style, generator, steps=steps, cfg_rate=cfg_rate,
                      temperature=temperature, channels=self.estimator.config.in_channels,
                      zero_prompt_speech_token=self.zero_prompt_speech_token, step_graphs=step_graphs)


# ---------------------------------------------------------------------------------------------------
# The whole model and its checkpoint


@dataclass(frozen=True)
class S2MelConfig:
    """A preset's model_params as the s2mel stage reads them."""

    dit: DiTConfig
    regulator: RegulatorConfig
    zero_prompt_speech_token: bool = False

    @classmethod
    def from_model_params(cls, model_params: dict) -> "S2MelConfig":
        if not isinstance(model_params, dict):
            raise CheckpointError("s2mel config: model_params is not a mapping; check the model's config")
        if model_params.get("dit_type", "DiT") != "DiT":
            raise CheckpointError(f"s2mel config: dit_type {model_params.get('dit_type')!r} is not 'DiT' "
                                  f"(the only one upstream builds); check the model's config")
        dit = model_params.get("DiT") if isinstance(model_params.get("DiT"), dict) else {}
        return cls(DiTConfig.from_model_params(model_params), RegulatorConfig.from_model_params(model_params),
                   bool(dit.get("zero_prompt_speech_token", False)))

    @classmethod
    def from_yaml(cls, path) -> "S2MelConfig":
        """From a preset file (its `model_params`)."""
        import yaml

        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as error:
            raise CheckpointError(f"cannot read the s2mel config {path} ({' '.join(str(error).split())[:120]})") \
                from None
        if not isinstance(data, dict) or not isinstance(data.get("model_params"), dict):
            raise CheckpointError(f"{path} has no model_params section; check the model's config")
        return cls.from_model_params(data["model_params"])


class S2Mel(nn.Module):
    """`cfm` and `length_regulator`, as build_model's nets: keys `cfm.estimator.*` and `length_regulator.*`."""

    NETS = ("cfm", "length_regulator")

    def __init__(self, config: S2MelConfig):
        super().__init__()
        self.config = config
        self.cfm = FlowMatching(config.dit, config.zero_prompt_speech_token)
        self.length_regulator = LengthRegulator(config.regulator)

    def load_nets(self, nets: dict, source: str = "the checkpoint") -> None:
        """Load upstream's `state["net"]` (net name -> state dict): `module.` prefixes stripped as
        load_checkpoint does, weight norms folded, the keys inference never reads dropped, the rest strict.
        Other nets (IndexTTS 2's gpt_layer) are left to their owners."""
        if not isinstance(nets, dict) or any(name not in nets for name in self.NETS):
            raise CheckpointError(f"{source} holds no s2mel nets ({', '.join(self.NETS)} under 'net'); "
                                  f"check that it is a Seed-VC v1 / IndexTTS 2 s2mel checkpoint")
        unused = {"cfm": tuple("estimator." + k for k in self.cfm.estimator.unused_checkpoint_keys()),
                  "length_regulator": self.length_regulator.unused_checkpoint_keys()}
        for name in self.NETS:
            state = {(k[len("module."):] if k.startswith("module.") else k): v for k, v in nets[name].items()}
            module = getattr(self, name)
            state = fold_weight_norm(state, next(module.parameters()).dtype)
            state = {k: v for k, v in state.items() if not k.startswith(unused[name])}
            expected = module.state_dict()
            missing = sorted(set(expected) - set(state))
            unexpected = sorted(set(state) - set(expected))
            wrong = sorted(k for k in set(expected) & set(state) if expected[k].shape != state[k].shape)
            if missing or unexpected or wrong:
                problems = [f"missing {missing[:3]}" if missing else "", f"unexpected {unexpected[:3]}"
                            if unexpected else "", f"shapes differ for {wrong[:3]}" if wrong else ""]
                raise CheckpointError(f"{source}: its {name} does not match the config "
                                      f"({'; '.join(p for p in problems if p)}); check that config and checkpoint "
                                      f"belong together")
            module.load_state_dict(state, strict=True)

    @classmethod
    def from_checkpoint(cls, path, config: S2MelConfig) -> "S2Mel":
        """A model for `config` with the weights of upstream's .pth (`{"net": {"cfm": ..., "length_regulator":
        ...}}`), in eval mode on the CPU."""
        path = Path(path)
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as error:  # any reader failure is a bad file, said in one line
            raise CheckpointError(f"{path} is not a readable checkpoint ({' '.join(str(error).split())[:160]}); "
                                  f"download it again") from None
        model = cls(config)
        model.load_nets(state.get("net") if isinstance(state, dict) else None, source=str(path))
        return model.eval()
