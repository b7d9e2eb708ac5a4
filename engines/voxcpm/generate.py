"""VoxCPM's autoregressive loop: upstream's `_inference` (voxcpm 2.0.3), one latent patch per step.

    prefill   base LM over [text | audio] embeddings -> FSQ at audio positions -> residual LM
    per step  mu = DiT condition(base state, residual state)
              patch = flow sampler(mu, previous patch)          <- the step's only random draw
              stop? (from the base state before this patch)    <- the step's only device read
              base LM step(patch embedding) -> FSQ -> residual LM step(fused input)

Exact to upstream on the CPU: the same ops in the same order and dtypes, the noise from the request's
generator in upstream's shape and order. Two things are done differently without changing any value:
the KV caches hold only the positions this request can reach (rounded up so that SDPA reduces the same
way as over upstream's 4096 / 8192: minicpm.KVCache), and the LM steps after the last patch are not
run (upstream runs them when max_len ends the loop; nothing reads them).

The LM steps and the DiT solve run through `Steps`: runtime.graphs segments (CUDA graphs where
usable) for the two LMs, one graph per patch for the sampler; eagerly on the CPU, with the same bits.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from mizuoto.core.errors import InputError
from mizuoto.runtime.context import RequestContext

from .cfm import FlowOptions, GraphedSampler
from .heads import stop_flags
from .minicpm import DecodeSteps, capacity_for
from .model import VoxCPMNet
from .prompt import Prefill


class Steps:
    """The graph-ready step functions of one loaded network and one Graphs (None: eager)."""

    def __init__(self, net: VoxCPMNet, graphs=None, estimator=None):
        """`estimator`: the DiT the sampler calls (default the network's own; compute.compile passes its
        compiled form)."""
        self.net, self.graphs = net, graphs
        self.estimator = net.feat_decoder.estimator if estimator is None else estimator
        # the base LM's step ends in the FSQ bottleneck (upstream quantises every generated state)
        self.base = DecodeSteps(net.base_lm, graphs, head=net.fsq_layer)
        self.residual = DecodeSteps(net.residual_lm, graphs, embed=net.residual_input)
        self._samplers: dict[FlowOptions, GraphedSampler] = {}

    def sampler(self, options: FlowOptions) -> GraphedSampler:
        sampler = self._samplers.get(options)
        if sampler is None:
            sampler = self._samplers[options] = GraphedSampler(self.estimator, self.graphs,
                                                               self.net.config.patch_size, options)
        return sampler


@dataclass
class Attempt:
    patches: list[torch.Tensor]  # (1, 1, patch, feat_dim) each: the context patches, then the generated ones
    context: int  # how many of them came from the prompt

    @property
    def generated(self) -> int:
        return len(self.patches) - self.context

    def latents(self) -> torch.Tensor:
        """(1, feat_dim, patches * patch) float32: upstream's rearrange "b t p d -> b d (t p)"."""
        seq = torch.cat(self.patches, dim=1)
        b, t, p, d = seq.shape
        return seq.permute(0, 3, 1, 2).reshape(b, d, t * p).float()


def _prefill(net: VoxCPMNet, prefill: Prefill, capacity: int):
    device, dtype = net.device, net.dtype
    tokens = prefill.tokens.to(device)
    text_mask = prefill.text_mask.to(device).unsqueeze(-1)
    audio_mask = prefill.audio_mask.to(device).unsqueeze(-1)
    feats = prefill.feats.to(device=device, dtype=dtype)
    patch_embeds = net.embed_patches(feats)
    combined = text_mask * net.base_lm.embed(tokens) + audio_mask * patch_embeds
    states, keys_values = net.base_lm(combined, causal=True)
    base_cache = net.base_lm.new_cache(1, capacity)
    base_cache.fill(keys_values)
    states = net.fsq_layer(states) * audio_mask + states * text_mask
    residual_states, keys_values = net.residual_lm(net.residual_input(states, audio_mask * patch_embeds), causal=True)
    residual_cache = net.residual_lm.new_cache(1, capacity)
    residual_cache.fill(keys_values)
    return states[:, -1, :], residual_states[:, -1, :], feats[:, -1], base_cache, residual_cache


def certain_steps(max_len: int, min_len: int) -> int:
    """The LM steps an attempt of at most `max_len` patches runs whatever the stop head says: one after
    every patch but the last, and the stop head is heeded only after `min_len`."""
    return max(min(min_len + 1, max_len - 1), 0)


def check_positions(length: int, max_len: int, min_len: int, max_length: int, name: str = "max_length") -> None:
    """A one-line InputError when a prefill of `length` positions cannot be generated from within the model's
    `max_length` positions (upstream fails there: its cache or its RoPE table is too short)."""
    certain = certain_steps(max_len, min_len)
    if length + certain > max_length:
        steps = f" and its first {certain} patches {certain} more" if length <= max_length else ""
        raise InputError(f"the text and audio prompts take {length:,} positions{steps}, more than this model's "
                         f"{name} {max_length:,}; shorten the text or the reference audio, or split the text")


def iterate_patches(net: VoxCPMNet, steps: Steps, prefill: Prefill, options: FlowOptions, ctx: RequestContext,
                    max_len: int, min_len: int, max_length: int,
                    name: str = "max_length") -> Iterator[tuple[torch.Tensor, Attempt]]:
    """Generate one attempt: yields (new patch (1, patch, feat_dim), the attempt so far) per patch. At
    most `max_len` patches; the stop head may end it after `min_len`. `max_length` is the model's
    positions (upstream's static cache size, or its RoPE table when shorter, `name` says which): a prefill
    that cannot start within them is refused before it runs, a generation that reaches their end stops
    with an error (upstream's cache raises there)."""
    needed = prefill.length + max_len - 1  # positions written: the prefill and every step but the last
    check_positions(prefill.length, max_len, min_len, max_length, name)
    capacity = min(capacity_for(needed), max(max_length, capacity_for(prefill.length)))
    if name != "max_length":  # a RoPE table holds no row past its end, rounded or not
        capacity = min(capacity, max_length)
    generator = ctx.generator_for(net.device)
    sampler = steps.sampler(options)
    with ctx.step(), torch.inference_mode():
        lm_hidden, residual_hidden, previous, base_cache, residual_cache = _prefill(net, prefill, capacity)
        stop = stop_flags(net.stop_proj, net.stop_head, lm_hidden)[0]
    # the prompt's patches in the model's dtype, as upstream keeps them (they lead the decoded latents)
    attempt = Attempt([p.to(device=net.device, dtype=net.dtype) for p in prefill.context], len(prefill.context))
    for i in range(max_len):
        with ctx.step(), torch.inference_mode():
            mu = net.dit_condition(lm_hidden, residual_hidden)
            patch = sampler(mu, previous.transpose(1, 2).contiguous(), generator).transpose(1, 2)
            embed = net.embed_patches(patch.unsqueeze(1))[:, 0]
            attempt.patches.append(patch.unsqueeze(1))
            previous = patch
        yield patch, attempt
        ctx.progress(i + 1, max_len)
        if i == max_len - 1 or (i > min_len and bool(stop)):  # the one device read of the step
            return
        if base_cache.length >= min(base_cache.capacity, max_length):
            raise InputError(f"the speech reached this model's {name} ({max_length:,} positions) before it "
                             f"ended; shorten the text or the reference audio, or lower max_len")
        with ctx.step(), torch.inference_mode():
            lm_hidden = steps.base(embed, base_cache.position(), base_cache).clone()
            base_cache.advance()
            stop = stop_flags(net.stop_proj, net.stop_head, lm_hidden)[0]
            residual_hidden = steps.residual((lm_hidden, embed), residual_cache.position(), residual_cache).clone()
            residual_cache.advance()
