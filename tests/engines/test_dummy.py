import pytest
import torch

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.engines.dummy import engine, model, text
from mizuoto.engines.dummy.config import small
from mizuoto.host import load_model, speak

TEXT = "The quick brown fox."


@pytest.fixture(scope="module")
def loaded():
    return load_model("dummy", device="cpu")


def test_same_seed_same_samples_bit_for_bit(loaded):
    a = speak(loaded, TEXT, seed=7).waveform
    b = speak(loaded, TEXT, seed=7).waveform
    assert a.dtype == torch.float32 and a.dim() == 2 and a.shape[0] == 1
    assert torch.equal(a, b)


def test_other_seed_other_audio(loaded):
    a = speak(loaded, TEXT, seed=7).waveform
    b = speak(loaded, TEXT, seed=8).waveform
    assert a.shape != b.shape or (a - b).abs().max() > 1e-3


def test_codes_are_drawn_from_the_request_generator(loaded):
    from mizuoto.runtime.context import RequestContext

    (states,) = engine.text_states(loaded.state, [TEXT], RequestContext(0))
    params = loaded.spec.speak_defaults()
    a = engine.decode_codes(loaded.state, states, RequestContext(3), params)
    b = engine.decode_codes(loaded.state, states, RequestContext(3), params)
    c = engine.decode_codes(loaded.state, states, RequestContext(4), params)
    n_bytes = states.shape[0]
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert n_bytes - 1 <= a.numel() <= 3 * n_bytes  # min_new_tokens and the length limit
    assert int(a.max()) < loaded.state.config.codes  # no EOS or start code left in


def test_greedy_decoding_ignores_the_seed(loaded):
    greedy = {"temperature": 1.0, "top_k": 1}
    a = speak(loaded, TEXT, seed=1, params=greedy)
    b = speak(loaded, TEXT, seed=2, params=greedy)
    assert a.waveform.shape == b.waveform.shape  # same codes; only phases and breath differ


def test_two_loads_give_identical_weights_and_audio():
    a = speak(load_model("dummy", device="cpu"), TEXT, seed=3).waveform
    b = speak(load_model("dummy", device="cpu"), TEXT, seed=3).waveform
    assert torch.equal(a, b)


def test_audio_is_real_sound(loaded):
    speech = speak(loaded, TEXT, seed=1)
    wave = speech.waveform[0]
    assert wave.abs().max() <= 0.9 and wave.abs().max() > 0.05
    assert wave.std() > 0.01
    # Lead-in and lead-out silence come from the BOS and EOS tokens' zero energy.
    assert wave[:20].abs().max() < 1e-2 and wave[-20:].abs().max() < 1e-2
    # Longer text, longer audio.
    assert speak(loaded, TEXT * 3, seed=1).waveform.shape[-1] > 2 * wave.shape[-1]


def test_text_changes_the_sound(loaded):
    a = speak(loaded, "aaaa", seed=1).waveform
    b = speak(loaded, "zzzz", seed=1).waveform
    assert a.shape != b.shape or not torch.equal(a, b)


def test_speed_parameter(loaded):
    normal = speak(loaded, TEXT, seed=1).waveform.shape[-1]
    fast = speak(loaded, TEXT, seed=1, params={"speed": 2.0}).waveform.shape[-1]
    assert fast < 0.65 * normal
    with pytest.raises(InputError, match="speed must be between 0.25 and 4.0"):
        speak(loaded, TEXT, params={"speed": 9})
    with pytest.raises(InputError, match="has no parameter 'pitch'"):
        speak(loaded, TEXT, params={"pitch": 1})


def test_sample_rate_load_option():
    slow = load_model("dummy", device="cpu", overrides={"engines.dummy.load_options.sample_rate": 16000})
    speech = speak(slow, TEXT, seed=1)
    assert speech.sample_rate == 16000 and speech.report["params"]["load_options"] == {"sample_rate": 16000}
    default = speak(load_model("dummy", device="cpu"), TEXT, seed=1)
    assert default.sample_rate == 24000
    assert abs(speech.waveform.shape[-1] / 16000 - default.waveform.shape[-1] / 24000) < 1e-9


def test_empty_or_blank_text(loaded):
    for bad in ("", "   \n\t"):
        with pytest.raises(InputError, match="text is empty"):
            speak(loaded, bad, seed=1)


def test_too_long_text(loaded):
    with pytest.raises(InputError, match="too long"):
        speak(loaded, "a" * 5000, seed=1)


def test_text_is_normalised():
    config = small()
    assert text.encode("e\u0301  x", config) == text.encode("\u00e9 x", config)


def test_weights_never_touch_the_global_generator():
    before = torch.get_rng_state()
    engine.build(weights_seed=5)
    speak(load_model("dummy", device="cpu"), TEXT, seed=1)
    assert torch.equal(torch.get_rng_state(), before)


def test_weights_seed_matters():
    a, b = engine.build(weights_seed=0), engine.build(weights_seed=1)
    assert not torch.equal(a.code_head.weight, b.code_head.weight)
    assert torch.equal(a.code_head.weight, engine.build(weights_seed=0).code_head.weight)


def test_save_and_load_round_trip(tmp_path):
    built = engine.build(weights_seed=4)
    path = engine.save(built, tmp_path / "w.safetensors")
    loaded = load_model("dummy", path, device="cpu")
    assert loaded.info.source == str(path)
    for name, tensor in built.state_dict().items():
        assert torch.equal(loaded.state.model.state_dict()[name], tensor)
    fresh_from_builtin = load_model("dummy", device="cpu")
    assert not torch.equal(speak(loaded, TEXT, seed=1).waveform, speak(fresh_from_builtin, TEXT, seed=1).waveform)


def test_checkpoint_errors(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_model("dummy", tmp_path / "missing.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        load_model("dummy", junk)
    wrong_suffix = tmp_path / "w.bin"
    wrong_suffix.write_bytes(b"x")
    with pytest.raises(CheckpointError, match="ending in .safetensors"):
        load_model("dummy", wrong_suffix)


def test_checkpoint_of_another_engine(tmp_path):
    from safetensors.torch import save_file

    other = tmp_path / "other.safetensors"
    save_file({"w": torch.zeros(2)}, str(other), metadata={"mizuoto.engine": "qwen3tts"})
    with pytest.raises(CheckpointError, match="belongs to engine 'qwen3tts'"):
        load_model("dummy", other)
    plain = tmp_path / "plain.safetensors"
    save_file({"w": torch.zeros(2)}, str(plain))
    with pytest.raises(CheckpointError, match="not a Mizuoto dummy checkpoint"):
        load_model("dummy", plain)


def test_checkpoint_with_wrong_tensors(tmp_path):
    from safetensors.torch import save_file

    built = engine.build()
    state = {k: v.contiguous() for k, v in built.state_dict().items()}
    meta = {"mizuoto.engine": "dummy", "mizuoto.format": "2", "mizuoto.config": built.config.to_json()}
    del state["code_head.bias"]
    save_file(state, str(tmp_path / "a.safetensors"), metadata=meta)
    with pytest.raises(CheckpointError, match="missing \\['code_head.bias'\\]"):
        load_model("dummy", tmp_path / "a.safetensors")


def test_failed_save_leaves_nothing(tmp_path, monkeypatch):
    import safetensors.torch

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", broken)
    with pytest.raises(OSError):
        engine.save(engine.build(), tmp_path / "w.safetensors")
    assert list(tmp_path.iterdir()) == []


def test_attention_goes_through_the_dispatcher(loaded, monkeypatch):
    from mizuoto.nn import qwen

    calls = {"dummy.attn": [], "qwen.attn": []}
    for site in (model.ATTN, qwen.ATTN):
        reference = site.reference
        monkeypatch.setattr(site, "reference",
                            lambda *args, r=reference, n=site.name: calls[n].append(args[3] is None) or r(*args))
    speech = speak(loaded, TEXT, seed=1)
    config = loaded.state.config
    assert calls["dummy.attn"] == [True] * config.layers  # one text, no padding: no mask
    assert len(calls["qwen.attn"]) % config.decoder_layers == 0 and len(calls["qwen.attn"]) > config.decoder_layers
    assert speech.report["attention"] == {"policy": "auto"}


def test_batch_with_padding_matches_single_texts(loaded):
    from mizuoto.runtime.context import RequestContext

    texts = ["short", "a considerably longer sentence"]
    batched = engine.text_states(loaded.state, texts, RequestContext(0))
    for t, states in zip(texts, batched, strict=True):
        (single,) = engine.text_states(loaded.state, [t], RequestContext(0))
        torch.testing.assert_close(states, single, rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_runs(dtype):
    speech = speak(load_model("dummy", device="cpu", dtype=dtype), TEXT, seed=1)
    assert speech.waveform.dtype == torch.float32 and speech.report["dtype"] == dtype


def test_report(loaded):
    report = speak(loaded, TEXT, seed=11).report
    assert report["engine"] == "dummy" and report["seed"] == 11 and report["device"] == "cpu"
    assert report["attention"] == {"policy": "auto"}
    assert report["params"]["fast"] == [] and report["params"]["compile"] is False
    assert report["samples"] / report["sample_rate"] == pytest.approx(report["audio_seconds"], abs=1e-3)
    assert report["real_time_factor"] > 0 and report["warnings"] == []


def test_options_are_read_at_each_load(monkeypatch):
    first = load_model("dummy", device="cpu")
    monkeypatch.setenv("MIZUOTO_ENGINES__DUMMY__LOAD_OPTIONS__SAMPLE_RATE", "16000")
    second = load_model("dummy", device="cpu")
    assert (first.info.load_options, second.info.load_options) == ({"sample_rate": 24000}, {"sample_rate": 16000})
    # A model already loaded keeps what it was loaded with.
    assert speak(first, TEXT, seed=1).sample_rate == 24000
    assert speak(second, TEXT, seed=1).sample_rate == 16000


def test_one_device_wait_per_decode_step(loaded, monkeypatch):
    from helpers import HostReads

    from mizuoto.runtime import decode
    from mizuoto.runtime.accel import dispatch
    from mizuoto.runtime.context import RequestContext

    monkeypatch.setattr(dispatch, "DEBUG", False)  # DEBUG's mask check reads tensors on purpose
    seen = {}
    original = decode.generate_tokens

    def counted(*args, **kwargs):
        with HostReads() as mode:
            tokens, n = original(*args, **kwargs)
        seen.update(reads=mode.reads, steps=n)
        return tokens, n

    monkeypatch.setattr(decode, "generate_tokens", counted)
    (states,) = engine.text_states(loaded.state, [TEXT], RequestContext(0))
    engine.decode_codes(loaded.state, states, RequestContext(5), loaded.spec.speak_defaults())
    # bool(tensor) dispatches as is_nonzero under inference_mode and as _local_scalar_dense otherwise:
    # either way one read of one value.
    assert seen["steps"] > 5 and len(seen["reads"]) == seen["steps"]


@pytest.mark.parametrize("fail", [(), (2,)], ids=["captured", "a capture fails"])
def test_decoding_through_graphs_gives_the_eager_codes(fail, monkeypatch):
    """The dummy's decoder step through DecoderSteps with graphs emulated on the CPU (each 'graph'
    re-runs its segment into its static outputs, as a replay does): the same codes as eager."""
    from helpers import EmulatedGraphs

    from mizuoto.runtime.context import RequestContext

    loaded = load_model("dummy", device="cpu")
    (states,) = engine.text_states(loaded.state, [TEXT], RequestContext(0))
    params = loaded.spec.speak_defaults()
    eager = engine.decode_codes(loaded.state, states, RequestContext(9), params)
    emulated = EmulatedGraphs(fail=fail)
    monkeypatch.setattr(loaded.state.handle, "graphs_for", lambda option: emulated)
    first = engine.decode_codes(loaded.state, states, RequestContext(9), params)
    again = engine.decode_codes(loaded.state, states, RequestContext(9), params)  # replays only
    assert torch.equal(first, eager) and torch.equal(again, eager)
    assert emulated.captures == (loaded.state.config.decoder_layers + 1 if not fail else 2)


def hum(freq, seconds=1.0, rate=16000):
    t = torch.arange(int(seconds * rate)) / rate
    return (0.5 * torch.sin(2 * torch.pi * freq * t))[None], rate


def test_reference_voice_sets_the_pitch(loaded):
    from mizuoto.engines.dummy.engine import reference_pitch

    assert abs(reference_pitch(hum(120)[0][0], 16000) - 120) < 2
    low = speak(loaded, TEXT, seed=1, reference=hum(80)).waveform
    high = speak(loaded, TEXT, seed=1, reference=hum(300)).waveform
    plain = speak(loaded, TEXT, seed=1).waveform
    assert low.shape == high.shape == plain.shape  # same codes: the reference changes the pitch only

    def crossings(w):
        return int(((w[0, :-1] < 0) != (w[0, 1:] < 0)).sum())

    assert crossings(low) < crossings(plain) < crossings(high)


@pytest.mark.parametrize("reference,message", [
    (hum(100, seconds=0.2), "reference audio is 0.20 s long; give one between 0.5 and 30 seconds"),
    (hum(100, seconds=31), "reference audio is 31.00 s long"),
    ((torch.zeros(2, 1, 16000), 16000), "reference audio holds 2 clips; give exactly one"),
    ((torch.full((1, 16000), float("nan")), 16000), "NaN or infinite"),
])
def test_bad_reference_audio(loaded, reference, message):
    with pytest.raises(InputError, match=message.replace("(", "\\(")):
        speak(loaded, TEXT, seed=1, reference=reference)


def test_cpu_steps_run_the_lean_decoder_and_give_the_modules_bits(monkeypatch):
    """On the CPU the dummy decodes with mizuoto.nn.qwen_lean (the shared decoder's kernels without module
    plumbing): the same waveform as DecoderSteps' module path, bit for bit, under auto and a bound policy."""
    from mizuoto.nn import qwen_lean

    calls = []
    original = qwen_lean.LeanDecoder.__call__
    monkeypatch.setattr(qwen_lean.LeanDecoder, "__call__", lambda self, *a: calls.append(1) or original(self, *a))
    for policy in ("auto", "cpu_flash"):
        loaded = load_model("dummy", device="cpu", policy=policy)
        loaded.state.lean = True  # (loads of the same weights share one state)
        lean = speak(loaded, TEXT, seed=4).waveform
        steps = len(calls)
        loaded.state.lean = False
        modules = speak(loaded, TEXT, seed=4).waveform
        assert steps > 10 and len(calls) == steps  # the lean decoder ran every step, then not at all
        assert torch.equal(lean, modules)
        loaded.state.lean = True
        calls.clear()
