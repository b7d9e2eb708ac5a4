"""The F5-TTS solver step as graph segments: the same bits as the model's eager forward (DiT, and
E2-TTS's UNetT whose skips ride along the segments), with graphs emulated on the CPU, and with real
CUDA graphs where a GPU is present."""

import pytest
import torch
from helpers import EmulatedGraphs

from mizuoto.engines.f5tts import flow
from mizuoto.engines.f5tts.dit import DiT, DiTConfig
from mizuoto.engines.f5tts.steps import solver_step
from mizuoto.engines.f5tts.unett import UNetT, UNetTConfig

CONFIGS = {
    "v1": DiTConfig(dim=64, depth=2, heads=4, dim_head=16, ff_mult=2, text_dim=32, conv_layers=2, text_num_embeds=100),
    "base": DiTConfig(dim=64, depth=3, heads=4, dim_head=16, ff_mult=2, text_dim=32, conv_layers=2,
                      text_num_embeds=100, text_mask_padding=False, pe_attn_head=1),
    "e2": UNetTConfig(dim=64, depth=4, heads=4, dim_head=16, ff_mult=2, text_num_embeds=100),
    "e2-add": UNetTConfig(dim=64, depth=4, heads=4, dim_head=16, ff_mult=2, text_num_embeds=100, conv_layers=2,
                          text_dim=32, skip_connect_type="add"),
}


def random_dit(name: str, device="cpu") -> DiT:
    torch.manual_seed(0)
    config = CONFIGS[name]
    model = (UNetT(config) if isinstance(config, UNetTConfig) else DiT(config)).eval()
    with torch.no_grad():
        for p in model.parameters():  # upstream zero-initialises the modulations and the output
            p.copy_(torch.randn_like(p) * 0.2)
    return model.to(device)


def generate(model, step_fn=None, cfg=2.0, steps=8, device="cpu"):
    g = torch.Generator().manual_seed(5)
    cond = torch.randn(30, 100, generator=g).to(device)
    ids = torch.randint(-1, 100, (24,), generator=g).to(device)
    return flow.sample(model, cond, ids, 75, torch.Generator(device).manual_seed(3), steps=steps, cfg_strength=cfg,
                       step_fn=step_fn)


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("cfg", [2.0, 0.0], ids=["guided", "unguided"])
def test_segments_with_emulated_graphs_are_the_eager_forward(name, cfg):
    model = random_dit(name)
    want = generate(model, cfg=cfg)
    graphs = EmulatedGraphs()
    got = generate(model, solver_step(model, cfg, graphs), cfg=cfg)
    assert torch.equal(got, want)
    assert graphs.captures == CONFIGS[name].depth + 1  # captured at the first step, replayed after


def test_a_failed_capture_finishes_eagerly_with_the_same_bits():
    model = random_dit("v1")
    want = generate(model)
    got = generate(model, solver_step(model, 2.0, EmulatedGraphs(fail={2})))
    assert torch.equal(got, want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", list(CONFIGS))
def test_real_cuda_graphs_give_the_eager_bits(name):
    from mizuoto.runtime.graphs import Graphs

    model = random_dit(name, "cuda")
    want = generate(model, device="cuda")
    got = generate(model, solver_step(model, 2.0, Graphs("cuda")), device="cuda")
    assert torch.equal(got, want)
