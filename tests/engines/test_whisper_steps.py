"""The Whisper decoder's one-token step as graph segments: the same logits as the decoder's forward,
the same decoding results with (emulated) CUDA graphs as without, graphs kept with the loaded model,
and the host's scope entered around every decoder call (its policy binding and cancellation point)."""

from contextlib import contextmanager

import pytest
import torch
from helpers import EmulatedGraphs

from mizuoto.engines.whisper import decoding
from mizuoto.engines.whisper.model import Dims, Whisper
from mizuoto.engines.whisper.steps import DecoderSteps
from mizuoto.runtime.context import Cancelled

DIMS = Dims(n_mels=80, n_audio_ctx=24, n_audio_state=32, n_audio_head=2, n_audio_layer=1, n_vocab=51865,
            n_text_ctx=448, n_text_state=32, n_text_head=2, n_text_layer=2)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    model = Whisper(DIMS).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "ln" in name or name.endswith("positional_embedding"):
                param.copy_(torch.randn_like(param) * 0.3 + (1.0 if name.endswith("ln.weight") else 0.0))
        # likely end of text and timestamps, so decodes end and take the timestamp rules' branches
        model.decoder.token_embedding.weight[50257] *= 4
        model.decoder.token_embedding.weight[50364:50600] *= 2
    return model


def features(n_audio: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(n_audio, DIMS.n_audio_ctx, DIMS.n_audio_state, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("graphs", [None, "emulated"])
@torch.no_grad()
def test_step_logits_are_the_forward_logits(model, graphs):
    """What upstream's decode runs: the initial tokens at once, then one token per call."""
    decoder = model.decoder
    audio = features(3)
    tokens = torch.randint(0, 50000, (3, 12), generator=torch.Generator().manual_seed(2))
    steps = DecoderSteps(decoder, EmulatedGraphs() if graphs else None)
    forward_cache, step_cache = decoder.new_cache(3), decoder.new_cache(3)
    decoder(tokens[:, :4], audio, forward_cache)
    decoder(tokens[:, :4], audio, step_cache)
    for i in range(4, 12):
        want = decoder(tokens[:, i:i + 1], audio, forward_cache)
        assert torch.equal(steps(tokens[:, i:i + 1], step_cache), want), f"step {i}"
    assert step_cache.length == 12
    for got, want in zip(step_cache.k + step_cache.v, forward_cache.k + forward_cache.v, strict=True):
        assert torch.equal(got, want)


def test_the_step_needs_the_audio_keys(model):
    with pytest.raises(RuntimeError, match="audio's keys"):
        DecoderSteps(model.decoder)(torch.zeros(1, 1, dtype=torch.long), model.decoder.new_cache(1))


CASES = {
    "greedy": ({"language": "en"}, 2, None),
    "beam": ({"language": "en", "beam_size": 3, "patience": 1.5}, 1, None),
    "best_of": ({"language": "de", "temperature": 0.8, "best_of": 3}, 1, 11),
    "greedy-no-timestamps": ({"language": "en", "without_timestamps": True, "sample_len": 40}, 3, None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_decoding_with_graphs_is_decoding_without(model, case):
    options, n_audio, seed = CASES[case]
    audio = features(n_audio)

    def run(steps):
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        return decoding.decode(model, audio, decoding.DecodingOptions(**options), generator, steps=steps)

    want = run(None)
    graphs = EmulatedGraphs()
    steps = DecoderSteps(model.decoder, graphs)
    got = run(steps)
    assert [(r.tokens, r.text, r.avg_logprob, r.no_speech_prob) for r in got] == \
        [(r.tokens, r.text, r.avg_logprob, r.no_speech_prob) for r in want]
    segments = 2 * DIMS.n_text_layer + 1  # two attention calls per block
    assert graphs.captures == segments  # one set of graphs for the fixed batch, captured at the first step
    assert [r.tokens for r in run(steps)] == [r.tokens for r in got]
    assert graphs.captures == segments  # the next decode replays them


def test_scope_is_entered_around_every_decoder_call_and_can_stop_it(model):
    audio = features(1)
    entered = []

    @contextmanager
    def scope():
        entered.append(len(entered))
        yield

    (result,) = decoding.decode(model, audio, decoding.DecodingOptions(language="en", sample_len=30),
                                step_scope=scope)
    assert len(entered) == min(len(result.tokens) + 1, 30)  # one call per sampled token, the end of text too

    @contextmanager
    def cancelled_at_third():
        if len(entered) == 2:
            raise Cancelled("generation was cancelled")
        entered.append(0)
        yield

    entered.clear()
    with pytest.raises(Cancelled):
        decoding.decode(model, audio, decoding.DecodingOptions(language="en", sample_len=30),
                        step_scope=cancelled_at_third)
    assert len(entered) == 2


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("case", list(CASES))
def test_real_cuda_graphs_decode_the_same(model, case):
    from mizuoto.runtime.graphs import Graphs

    options, n_audio, seed = CASES[case]
    cuda = Whisper(DIMS).eval().cuda()
    cuda.load_state_dict(model.state_dict())
    audio = features(n_audio).cuda()

    def run(steps):
        generator = None if seed is None else torch.Generator("cuda").manual_seed(seed)
        return [r.tokens for r in decoding.decode(cuda, audio, decoding.DecodingOptions(**options), generator,
                                                  steps=steps)]

    steps = DecoderSteps(cuda.decoder, Graphs("cuda"))
    want = run(None)
    assert run(steps) == want
    assert run(steps) == want  # replayed
