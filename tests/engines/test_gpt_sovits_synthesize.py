"""GPT-SoVITS v2 synthesis from prepared fragments (engines/gpt_sovits/synthesize.py), on the tiny GPT and SoVITS
of the parity sets (each exact to upstream in its own test). What is checked here is TTS.run's composition at
48b1a01 at batch_size 1, restated step by step (TTS.py itself imports torchaudio, librosa, ffmpeg, transformers
and peft at the top, so it is not run here): split_bucket's processing order and with it the order of the draws,
the prompt's phones and BERT features in front of each fragment's, SoVITS on the fragment's phones only, and
audio_postprocess (peak rule, silences, the text's order, numpy's int16 cast)."""

import functools
import json

import numpy as np
import pytest
import torch
from helpers import parity_module, reference_sets

from mizuoto.core.errors import InputError
from mizuoto.engines.gpt_sovits import synthesize as synth
from mizuoto.engines.gpt_sovits import t2s
from mizuoto.engines.gpt_sovits.gpt_weights import load_gpt
from mizuoto.engines.gpt_sovits.sovits_weights import load_sovits

weights = parity_module("gpt_sovits_weights")


@functools.cache
def models(tmp="/tmp/mizuoto-gsv-synth"):
    from pathlib import Path

    folder = Path(tmp)
    folder.mkdir(exist_ok=True)
    sovits_set = reference_sets().SETS["gpt_sovits_sovits"].committed
    record = json.loads((sovits_set / "references.json").read_text())["models"]["v2"]
    path = folder / "v2.pth"
    path.write_bytes(weights.sovits_file_bytes(weights.sovits_state(record["entries"], record["seed"]),
                                               record["config"], "v2"))
    return load_gpt(reference_sets().SETS["gpt_sovits_t2s"].committed / "gpt.ckpt"), load_sovits(path)


def fragment(seed: int, phones: int, text: str) -> synth.Fragment:
    g = torch.Generator().manual_seed(seed)
    return synth.Fragment(tuple(torch.randint(0, 80, (phones,), generator=g).tolist()),
                          torch.randn(1024, phones, generator=g), text)


def prompt(with_text: bool = True) -> synth.Prompt:
    g = torch.Generator().manual_seed(99)
    return synth.Prompt(tuple(torch.randint(0, 80, (6,), generator=g).tolist()) if with_text else None,
                        torch.randn(1024, 6, generator=g) if with_text else None,
                        torch.randint(0, 128, (15,), generator=g))


def refer() -> torch.Tensor:
    return torch.randn(1, 720, 20, generator=torch.Generator().manual_seed(5)).abs()


FRAGMENTS = [fragment(1, 7, "五个字符号"), fragment(2, 4, "两字"), fragment(3, 9, "九个字的一句话吧。")]


def by_hand(order, speed, sampling, seed, parallel=True, with_text=True, interval=0.3):
    """TTS.run's steps for batch_size 1: fragment after fragment in `order`, one generator."""
    gpt, sovits = models()
    g = torch.Generator().manual_seed(seed)
    p = prompt(with_text)
    pieces = {}
    with torch.inference_mode():
        for i in order:
            f = FRAGMENTS[i]
            phones = torch.tensor((p.phones or ()) + f.phones)
            bert = torch.cat([p.bert, f.bert], 1) if with_text else f.bert
            tokens = gpt.generate(phones, bert, p.semantic if with_text else None, sampling, g,
                                  parallel_infer=parallel).tokens
            pieces[i] = sovits.decode(tokens.view(1, 1, -1), torch.tensor([f.phones]), [refer()], g,
                                      speed=speed)[0, 0]
    return synth.postprocess([pieces[i] for i in range(3)], 32000, interval)


def run(speed=1.0, split_bucket=True, seed=7, **kwargs):
    gpt, sovits = models()
    with torch.inference_mode():
        return synth.synthesize(gpt, sovits, FRAGMENTS, prompt(kwargs.pop("with_text", True)), [refer()],
                                kwargs.pop("sampling", t2s.T2SSampling()), torch.Generator().manual_seed(seed),
                                speed=speed, split_bucket=split_bucket, **kwargs)


def test_split_bucket_processes_by_text_length_and_joins_in_the_texts_order():
    assert synth.processing_order(FRAGMENTS, True, 1.0) == [1, 0, 2]
    assert synth.processing_order(FRAGMENTS, True, 1.25) == [0, 1, 2]  # upstream turns bucketing off then
    assert synth.processing_order(FRAGMENTS, False, 1.0) == [0, 1, 2]
    got = run()
    assert torch.equal(got, by_hand([1, 0, 2], 1.0, t2s.T2SSampling(), 7))
    assert not torch.equal(got, by_hand([0, 1, 2], 1.0, t2s.T2SSampling(), 7))  # the draws' order shows
    assert got.dtype == torch.float32 and bool((got * 32768 == (got * 32768).round()).all())


def test_another_speed_other_sampling_and_the_prompt_free_mode():
    sampling = t2s.T2SSampling(top_k=30, top_p=0.8, temperature=0.9)
    assert torch.equal(run(speed=1.25, sampling=sampling, seed=3), by_hand([0, 1, 2], 1.25, sampling, 3))
    free = run(seed=4, with_text=False, parallel_infer=False)
    assert torch.equal(free, by_hand([1, 0, 2], 1.0, t2s.T2SSampling(), 4, parallel=False, with_text=False))


def test_postprocess_is_audio_postprocess():
    loud = torch.tensor([0.5, -2.0, 1.0])
    quiet = torch.tensor([0.25, -0.5])
    out = synth.postprocess([loud.clone(), quiet.clone()], 10, 0.3)
    joined = np.concatenate([(loud / 2.0).numpy(), np.zeros(3, np.float32), quiet.numpy(), np.zeros(3, np.float32)])
    want = (joined * 32768).astype(np.int16).astype(np.float32) / 32768  # numpy's cast is upstream's
    assert out.shape == (11,) and torch.equal(out, torch.from_numpy(want))
    assert torch.equal(synth.postprocess([quiet], 10, 0.0), torch.from_numpy(
        (quiet.numpy() * 32768).astype(np.int16).astype(np.float32) / 32768))


def test_bad_requests_are_one_line_errors():
    gpt, sovits = models()
    with pytest.raises(InputError, match="no text to speak"):
        synth.synthesize(gpt, sovits, [], prompt(), [refer()], t2s.T2SSampling(), torch.Generator())
    with pytest.raises(InputError, match="fragment_interval must be 0 or more"):
        synth.synthesize(gpt, sovits, FRAGMENTS, prompt(), [refer()], t2s.T2SSampling(), torch.Generator(),
                         fragment_interval=-1)
