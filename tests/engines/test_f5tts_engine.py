"""F5-TTS as a Mizuoto engine, around the core the parity tests check against upstream: loading (folders,
files, upstream's checkpoint layouts, architecture detection, the vocoder), speaking through the host
(seeds, chunks, speed, fixed durations, references at other rates), one-line errors, CUDA-graph segments
emulated on the CPU, cancellation and progress, attention policies, the CLI and the generated nodes.

The tiny random models of tests/parity/data/f5tts stand in for the released ones (same layouts and
config files); at 8 solver steps one request takes a fraction of a second.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("pypinyin")
pytest.importorskip("rjieba")

from mizuoto import cli  # noqa: E402
from mizuoto.audio import files  # noqa: E402
from mizuoto.core.errors import Cancelled, CheckpointError, InputError, SettingsError  # noqa: E402
from mizuoto.engines.f5tts import engine, text  # noqa: E402
from mizuoto.host import load_model, speak  # noqa: E402
from mizuoto.runtime.context import RequestContext  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "parity" / "data" / "f5tts"
RATE = 24000
HOP = 256
REF_TEXT = "A short reference."
TEXT = "Hello world, this is a test."
# Three sentences of 26 to 29 bytes: with the chunk budget made small (see short_chunks), one chunk each.
LONG = "The first sentence is here. The second one follows it. And a third sentence ends it."


def voice(seconds=1.0, rate=RATE, channels=1, seed=0):
    """A test recording: three harmonics of a gliding pitch at a syllable rate, plus noise (different
    on every channel), at 0.05 RMS: below F5-TTS's 0.1 target, so the loudness round trip runs."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(int(seconds * rate), dtype=torch.float64) / rate
    phase = 2 * torch.pi * (140 * t + 20 * t**2)
    wave = sum(torch.sin(k * phase) / k for k in (1, 2, 3)) * (0.6 + 0.4 * torch.sin(2 * torch.pi * 4 * t))
    wave = wave.float()[None].repeat(channels, 1) + 0.05 * torch.randn(channels, t.numel(), generator=g)
    return wave * 0.05 / wave.pow(2).mean().sqrt(), rate


def say(loaded, words=TEXT, seed=1, reference=None, reference_text=REF_TEXT, ctx=None, **params):
    """Speech with the reference as given (trim_reference off: lengths are then known from it; the
    trimming has its own tests and the parity suite runs upstream's whole path with it)."""
    params.setdefault("nfe_step", 8)
    params.setdefault("trim_reference", False)
    return speak(loaded, words, seed=seed, params=params, ctx=ctx, reference=reference or voice(),
                 reference_text=reference_text)


def assert_speech(speech):
    wave = speech.waveform
    assert speech.sample_rate == RATE and wave.dtype == torch.float32 and wave.dim() == 2 and wave.shape[0] == 1
    assert bool(wave.isfinite().all()) and 1e-3 < float(wave.std()) and float(wave.abs().max()) < 1


def one_line(exc_info):
    assert "\n" not in str(exc_info.value)


def copy_model(tmp_path, model="v1", folder="model", yaml=True, vocoder=True, name="model.safetensors"):
    """A model folder of tmp_path with the weights of DATA/<model> (and its YAML, and ../vocos)."""
    target = tmp_path / folder
    target.mkdir(parents=True)
    shutil.copy(DATA / model / "model.safetensors", target / name)
    if yaml:
        for config in (DATA / model).glob("*.yaml"):
            shutil.copy(config, target)
    if vocoder and not (tmp_path / "vocos").exists():
        shutil.copytree(DATA / "vocos", tmp_path / "vocos")
    return target


def expected_samples(words, reference_text=REF_TEXT, reference_samples=RATE):
    """Upstream's length for a one-chunk text: its estimated frames less the reference's, less the one
    frame Vocos's centred inverse STFT does not give."""
    (chunk,) = text.plan_chunks(reference_text, words, ref_samples=reference_samples, sample_rate=RATE,
                                ref_samples_24k=reference_samples)
    return (chunk.frames - text.reference_frames(reference_samples) - 1) * HOP


def switches(loaded):
    config = loaded.state.model.config
    return config.text_mask_padding, config.pe_attn_head


@pytest.fixture(scope="module")
def v1():
    return load_model("f5tts", DATA / "v1", device="cpu")


@pytest.fixture
def short_chunks(monkeypatch):
    """A chunk budget of (3 s - reference) of the reference's bytes per second instead of upstream's 22 s:
    LONG splits into three chunks of about two seconds (at 22 s each chunk would take seconds to generate)."""
    monkeypatch.setattr(text, "MAX_TOTAL_SECONDS", 3)


@pytest.fixture
def recorded_chunks(monkeypatch):
    """The chunks each request generated and the waves they gave, as engine.speak handed them over."""
    seen = []
    original = engine.generate

    def recording(loaded, ref_24k, rms, chunks, ctx, params):
        waves = original(loaded, ref_24k, rms, chunks, ctx, params)
        seen.append((list(chunks), waves))
        return waves

    monkeypatch.setattr(engine, "generate", recording)
    return seen


# --- speaking ---------------------------------------------------------------------------------------------


def test_speaks_24khz_audio_of_the_estimated_length(v1):
    speech = say(v1)
    assert_speech(speech)
    # One chunk, as long as upstream estimates from the reference's frames per transcript byte.
    assert speech.waveform.shape[-1] == expected_samples(TEXT)
    report = speech.report
    assert report["engine"] == "f5tts" and report["seed"] == 1 and report["sample_rate"] == RATE
    assert report["speak"]["nfe_step"] == 8 and report["speak"]["cfg_strength"] == 2.0
    assert report["attention"] == {"policy": "auto"} and report["warnings"] == []


def test_same_seed_same_samples_other_seed_other_samples(v1):
    a, b, c = (say(v1, seed=s).waveform for s in (7, 7, 8))
    assert torch.equal(a, b)
    assert a.shape == c.shape and (a - c).abs().max() > 1e-3  # the length comes from the text, the noise from the seed


@pytest.mark.parametrize("words", ["你好，世界。今天天气很好。", "我们用 F5-TTS 说 hello world。"],
                         ids=["Chinese", "mixed"])
def test_chinese_and_mixed_text(v1, words):
    speech = say(v1, words, reference_text="这是参考音频。")
    assert_speech(speech)
    assert speech.waveform.shape[-1] == expected_samples(words, "这是参考音频。")  # timed by UTF-8 bytes


def test_long_text_is_split_into_chunks_and_cross_faded(v1, short_chunks, recorded_chunks):
    progress = []
    ctx = RequestContext(2, progress=lambda done, total: progress.append((done, total)))
    speech = say(v1, LONG, ctx=ctx)
    assert_speech(speech)
    ((chunks, waves),) = recorded_chunks
    assert [c.gen_text for c in chunks] == ["The first sentence is here.", "The second one follows it.",
                                            "And a third sentence ends it."]
    # Neighbours overlap by the cross-fade (0.15 s): the joined wave is that much shorter than its parts.
    overlap = int(0.15 * RATE)
    assert speech.waveform.shape[-1] == sum(w.shape[-1] for w in waves) - 2 * overlap
    assert speech.waveform.shape[-1] > 2 * say(v1, "The first sentence is here.").waveform.shape[-1]
    # Progress before every solver step of every chunk, then once at the end.
    steps = 8 * len(chunks)
    assert progress == [(i, steps) for i in range(steps + 1)]
    # Without cross-fade the chunks are put end to end (and they are the same chunks: same seed).
    joined = say(v1, LONG, seed=2, cross_fade_duration=0.0).waveform
    assert joined.shape[-1] == sum(w.shape[-1] for w in waves)
    assert torch.equal(joined[0, : waves[0].shape[-1]], waves[0])


def test_speed_changes_the_length(v1):
    normal = say(v1).waveform.shape[-1]
    fast = say(v1, speed=2.0).waveform.shape[-1]
    slow = say(v1, speed=0.5).waveform.shape[-1]
    assert 0.45 < fast / normal < 0.55 and 1.9 < slow / normal < 2.1


def test_solver_steps(v1):
    epss, uniform = say(v1, nfe_step=16), say(v1, nfe_step=8)  # 16: an EPSS grid; 8: a uniform one
    for speech in (epss, uniform):
        assert_speech(speech)
    assert epss.waveform.shape == uniform.waveform.shape and not torch.equal(epss.waveform, uniform.waveform)


@pytest.mark.parametrize("seconds", [3.0, 3.7])
def test_fix_duration_sets_the_total_length_reference_included(v1, seconds):
    reference = voice(1.0)
    speech = say(v1, reference=reference, fix_duration=seconds)
    assert_speech(speech)
    # Total frames truncated, reference frames truncated, one frame less out of the vocoder: as upstream,
    # the result is within two hops of the request.
    frames = int(seconds * RATE / HOP) - reference[0].shape[-1] // HOP
    assert speech.waveform.shape[-1] == (frames - 1) * HOP
    assert abs(speech.waveform.shape[-1] + reference[0].shape[-1] - seconds * RATE) < 2 * HOP


def test_reference_at_16khz_stereo(v1):
    stereo = voice(1.5, rate=16000, channels=2)
    speech = say(v1, reference=stereo)
    assert_speech(speech)
    # The host mixes the channels down; the engine resamples to 24 kHz and times the speech by it.
    mono = say(v1, reference=(stereo[0].mean(dim=0, keepdim=True), 16000))
    assert torch.equal(speech.waveform, mono.waveform)
    at_24k = say(v1, reference=voice(1.5))
    assert speech.waveform.shape == at_24k.waveform.shape and not torch.equal(speech.waveform, at_24k.waveform)


def test_half_precision_runs(v1):
    speech = say(load_model("f5tts", DATA / "v1", device="cpu", dtype="bfloat16"))
    assert_speech(speech)
    assert speech.report["dtype"] == "bfloat16" and speech.waveform.shape == say(v1).waveform.shape


# --- errors -----------------------------------------------------------------------------------------------


def test_input_errors(v1):
    cases = [
        (dict(reference=None), "F5-TTS clones a voice: give reference audio and its transcript"),
        (dict(reference_text=""), "F5-TTS needs the reference audio's transcript: type it, or connect a Whisper "
                                  "model to transcribe it"),
        (dict(reference_text=" \n"), "F5-TTS needs the reference audio's transcript"),
        (dict(text=""), "the text is empty; give some words to speak"),
        (dict(text="  \t\n"), "the text is empty"),
        (dict(reference=(torch.zeros(1, RATE), RATE)), "reference audio is silent \\(no 10 ms reaches -42 dBFS\\)"),
        (dict(reference=voice(0.3)), "reference audio is 0.30 s long; give one between 0.5 and 30 seconds"),
        (dict(params={"nfe_step": 0}), "nfe_step must be between 1 and 128, got 0"),
        (dict(params={"temperature": 0.7}), "engine f5tts has no parameter 'temperature'"),
    ]
    for change, message in cases:
        request = {"text": TEXT, "reference": voice(), "reference_text": REF_TEXT, "params": {"nfe_step": 8}}
        request.update(change)
        with pytest.raises(InputError, match=message) as caught:
            speak(v1, request.pop("text"), seed=1, **request)
        one_line(caught)


def test_model_path_errors(tmp_path):
    with pytest.raises(InputError, match="engine f5tts needs a model file"):
        load_model("f5tts", None, device="cpu")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_model("f5tts", tmp_path / "missing", device="cpu")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="holds no F5-TTS checkpoint \\(a .safetensors, .pt") as caught:
        load_model("f5tts", tmp_path / "empty", device="cpu")
    one_line(caught)


def test_two_checkpoints_in_a_folder(tmp_path):
    folder = copy_model(tmp_path)
    shutil.copy(folder / "model.safetensors", folder / "model_2.safetensors")
    with pytest.raises(CheckpointError, match="holds several checkpoints \\(model.safetensors, model_2.safetensors\\); "
                                              "keep one, or pass the file itself") as caught:
        load_model("f5tts", folder, device="cpu")
    one_line(caught)
    chosen = folder / "model_2.safetensors"
    assert load_model("f5tts", chosen, device="cpu").info.source == str(chosen)  # as the message advises


def test_checkpoints_that_are_not_f5tts(tmp_path):
    from safetensors.torch import load_file, save_file

    weights = load_file(str(DATA / "v1" / "model.safetensors"))
    cases = [
        ({"w": torch.zeros(2)}, "has a weight 'w' outside the transformer: not an F5-TTS checkpoint"),
        ({k: v for k, v in weights.items() if "proj_out" not in k},
         "is neither an F5-TTS \\(DiT\\) nor an E2-TTS \\(UNetT\\) checkpoint"),
        ({k: v for k, v in weights.items() if k != "ema_model.transformer.transformer_blocks.1.ff.ff.2.weight"},
         "does not fit the DiT it describes \\(missing transformer_blocks.1.ff.ff.2.weight; 1 missing"),
    ]
    for i, (state, message) in enumerate(cases):
        save_file(state, str(tmp_path / f"bad{i}.safetensors"))
        with pytest.raises(CheckpointError, match=message) as caught:
            load_model("f5tts", tmp_path / f"bad{i}.safetensors", device="cpu")
        one_line(caught)
    torch.save({"state_dict": {}}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="has neither ema_model_state_dict nor model_state_dict"):
        load_model("f5tts", tmp_path / "other.pt", device="cpu")
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(CheckpointError, match="junk.pt is not a readable torch checkpoint"):
        load_model("f5tts", tmp_path / "junk.pt", device="cpu")


def test_unreadable_safetensors_is_a_checkpoint_error(tmp_path):
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="junk.safetensors is not a readable"):
        load_model("f5tts", tmp_path / "junk.safetensors", device="cpu")


def test_unreadable_config_file_is_a_checkpoint_error(tmp_path):
    folder = copy_model(tmp_path, yaml=False)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json"):
        load_model("f5tts", folder, device="cpu")


def test_config_for_another_vocoder_is_refused(tmp_path):
    folder = copy_model(tmp_path, folder="F5TTS_Base_bigvgan", yaml=False)
    config = (DATA / "v1" / "F5TTS_tiny_v1.yaml").read_text()
    (folder / "F5TTS_Base_bigvgan.yaml").write_text(config.replace("mel_spec_type: vocos", "mel_spec_type: bigvgan"))
    with pytest.raises(CheckpointError, match="bigvgan"):
        load_model("f5tts", folder, device="cpu")


def test_vocabulary_beside_the_checkpoint(tmp_path):
    folder = copy_model(tmp_path)
    (folder / "vocab.txt").write_text("".join(f"{c}\n" for c in " abcdefghi"))
    with pytest.raises(CheckpointError, match="the vocabulary has 10 entries but the model embeds 2545; put the "
                                              "model's own vocab.txt beside it") as caught:
        load_model("f5tts", folder, device="cpu")
    one_line(caught)
    shutil.copy(text.VOCAB_PATH, folder / "vocab.txt")  # the right size: used
    assert len(load_model("f5tts", folder, device="cpu").state.vocab) == 2545


def test_vocoder_is_found_or_named(tmp_path, v1):
    lone = copy_model(tmp_path / "a", vocoder=False)
    with pytest.raises(CheckpointError, match="F5-TTS needs the Vocos vocoder: put charactr/vocos-mel-24khz "
                                              "\\(config.yaml \\+ pytorch_model.bin\\) in .*a/model/vocos, or set "
                                              "engines.f5tts.load_options.vocoder") as caught:
        load_model("f5tts", lone, device="cpu")
    one_line(caught)
    key = "engines.f5tts.load_options.vocoder"
    with pytest.raises(CheckpointError, match="vocoder folder .*nowhere does not exist; set "
                                              "engines.f5tts.load_options.vocoder") as caught:
        load_model("f5tts", lone, device="cpu", overrides={key: str(tmp_path / "nowhere")})
    one_line(caught)
    # The option pointing at a vocoder elsewhere: the same model as DATA/v1 with ../vocos.
    named = load_model("f5tts", lone, device="cpu", overrides={key: str(DATA / "vocos")})
    assert torch.equal(say(named).waveform, say(v1).waveform)
    # Beside the checkpoint, in vocos/, is found as well.
    shutil.copytree(DATA / "vocos", lone / "vocos")
    assert torch.equal(say(load_model("f5tts", lone, device="cpu")).waveform, say(v1).waveform)


# --- checkpoint layouts and architecture ------------------------------------------------------------------


def test_upstream_pt_layouts_give_the_same_speech(tmp_path, v1):
    from safetensors.torch import load_file

    weights = load_file(str(DATA / "v1" / "model.safetensors"))
    transformer = {k: v for k, v in weights.items() if k.startswith("ema_model.transformer.")}
    # What upstream's trainer saves: the EMA copy with its bookkeeping, or the model with its mel buffers.
    ema = copy_model(tmp_path, folder="ema", name="model_1250000.pt")
    torch.save({"ema_model_state_dict": {"initted": torch.tensor(True), "step": torch.tensor(1250000),
                                         **transformer}}, ema / "model_1250000.pt")
    plain = copy_model(tmp_path, folder="plain", name="model_last.pt")
    torch.save({"model_state_dict": {**{k.removeprefix("ema_model."): v for k, v in transformer.items()},
                                     "mel_spec.mel_stft.mel_scale.fb": torch.zeros(513, 100),
                                     "mel_spec.mel_stft.spectrogram.window": torch.ones(1024)}},
               plain / "model_last.pt")
    want = say(v1).waveform
    for folder in (ema, plain):
        loaded = load_model("f5tts", folder, device="cpu")
        for name, tensor in v1.state.model.state_dict().items():
            assert torch.equal(loaded.state.model.state_dict()[name], tensor), name
        assert torch.equal(say(loaded).waveform, want)


def test_architecture_from_config_name_or_option(tmp_path):
    def load(folder, architecture=None):
        overrides = {"engines.f5tts.load_options.architecture": architecture} if architecture else None
        return load_model("f5tts", folder, device="cpu", overrides=overrides)

    old = (False, 1)  # F5TTS_Base: filler text positions unmasked, RoPE on the first head only
    new = (True, None)  # F5TTS_v1_Base
    assert switches(load(DATA / "base")) == old and switches(load(DATA / "v1")) == new  # their YAMLs
    # Without a config file, by the folder's name as upstream's releases name it, else v1.
    named_old = copy_model(tmp_path, "base", folder="F5TTS_Base", yaml=False)
    assert switches(load(named_old)) == old
    assert torch.equal(say(load(named_old)).waveform, say(load(DATA / "base")).waveform)
    assert switches(load(copy_model(tmp_path, "v1", folder="tiny_v1", yaml=False))) == new
    # The option overrides the name; the YAML wins over the name.
    unnamed_old = copy_model(tmp_path, "base", folder="tiny_base", yaml=False)
    assert switches(load(unnamed_old)) == new
    assert switches(load(unnamed_old, "F5TTS_Base")) == old
    assert switches(load(named_old, "F5TTS_v1_Base")) == new
    assert switches(load(copy_model(tmp_path / "x", "v1", folder="F5TTS_Base"))) == new


def test_e2tts_unett_loads_and_speaks(tmp_path):
    """E2-TTS's UNetT is told by its weights; its YAML or E2TTS_Base's defaults give the rest."""
    from mizuoto.engines.f5tts.unett import UNetT

    with_yaml = load_model("f5tts", DATA / "e2", device="cpu")
    assert isinstance(with_yaml.state.model, UNetT) and switches(with_yaml) == (False, 1)
    bare = load_model("f5tts", copy_model(tmp_path, "e2", folder="e2_bare", yaml=False), device="cpu")
    assert switches(bare) == (False, 1) and bare.state.model.config.skip_connect_type == "concat"
    speech = say(with_yaml)
    assert speech.waveform.shape[0] == 1 and bool(speech.waveform.abs().max() > 0)
    assert torch.equal(say(bare).waveform, speech.waveform)
    with pytest.raises(CheckpointError, match="holds a UNetT model, not F5TTS_v1_Base; set architecture to auto"):
        load_model("f5tts", DATA / "e2", device="cpu",
                   overrides={"engines.f5tts.load_options.architecture": "F5TTS_v1_Base"})


def test_unknown_architecture_option():
    with pytest.raises(SettingsError, match="engines.f5tts.load_options.architecture from arguments: expected one "
                                            "of auto, F5TTS_v1_Base, F5TTS_Base, E2TTS_Base, got 'E2TTS'") as caught:
        load_model("f5tts", DATA / "v1", device="cpu", overrides={"engines.f5tts.load_options.architecture": "E2TTS"})
    one_line(caught)


# --- runtime: graphs, cancellation, policies ----------------------------------------------------------------


@pytest.mark.parametrize("fail", [(), (2,)], ids=["captured", "a capture fails"])
def test_graph_segments_give_the_eager_samples(v1, short_chunks, recorded_chunks, monkeypatch, fail):
    """The solver step through LayerSteps with graphs emulated on the CPU (each 'graph' re-runs its
    segment into its static outputs, as a replay does): bit for bit the eager samples. Each chunk has
    its own length, so its own graphs: depth + 1 segments captured per chunk; after a failed capture
    the rest of that chunk runs eagerly and the next chunk captures again."""
    from helpers import EmulatedGraphs

    eager = say(v1, LONG, seed=4).waveform
    emulated = EmulatedGraphs(fail=fail)
    monkeypatch.setattr(v1.state.handle, "graphs_for", lambda option: emulated)
    graphed = say(v1, LONG, seed=4).waveform
    assert torch.equal(graphed, eager)
    chunks, segments = len(recorded_chunks[-1][0]), v1.state.model.config.depth + 1
    assert chunks == 3
    assert emulated.captures == (chunks * segments if not fail else 2 + (chunks - 1) * segments)


def test_cancel_from_progress_then_the_same_audio(v1):
    params = {**v1.spec.speak_defaults(), "nfe_step": 8}
    reference = (v1.spec.reference.check(*voice()), RATE)
    uninterrupted = say(v1, seed=6).waveform
    seen = []

    def progress(done, total):
        seen.append(done)
        if done == 3:
            ctx.cancel()

    ctx = RequestContext(6, progress=progress)
    with pytest.raises(Cancelled, match="generation was cancelled"):
        engine.speak(v1.state, TEXT, ctx, params, reference=reference, reference_text=REF_TEXT)
    assert seen == [0, 1, 2, 3]  # stopped before the step after the one that cancelled
    assert torch.equal(say(v1, seed=6).waveform, uninterrupted)


def test_math_policy_runs_the_dit_site(v1, monkeypatch):
    from mizuoto.engines.f5tts import dit
    from mizuoto.runtime import accel

    steps, depth = 8, v1.state.model.config.depth
    calls, sites = [], []
    reference, attention = dit.ATTENTION.reference, accel.attention
    monkeypatch.setattr(dit.ATTENTION, "reference", lambda *args: calls.append(args[0].shape) or reference(*args))
    monkeypatch.setattr(accel, "attention", lambda *args, site, **kw: sites.append(site.name)
                        or attention(*args, site=site, **kw))
    auto = say(v1)
    # Under auto the site's reference runs once per layer and step, on the packed guided batch.
    assert len(calls) == depth * steps and calls[0][0] == 2 and auto.report["attention"] == {"policy": "auto"}
    auto_model = load_model("f5tts", DATA / "v1", device="cpu")
    math_model = load_model("f5tts", DATA / "v1", device="cpu", policy="math")
    assert math_model.state.model is auto_model.state.model  # same weights: a policy change does not reload
    speech = say(math_model)
    assert_speech(speech)
    assert speech.report["attention"] == {"policy": "math", "used": {"math": depth * steps}, "fallbacks": {}}
    # every call came through the dispatcher at the DiT's site, and math ran them, not the reference
    assert sites == ["f5tts.dit"] * (2 * depth * steps) and len(calls) == depth * steps
    torch.testing.assert_close(speech.waveform, auto.waveform, rtol=0, atol=1e-5)


# --- command line --------------------------------------------------------------------------------------------


def test_cli_say(tmp_path, capsys, v1):
    reference = voice(1.2)
    ref_file = files.write(tmp_path / "ref.wav", reference[0], RATE, "float32")
    out = tmp_path / "out.wav"
    argv = ["say", "Hello from the command line.", "--engine", "f5tts", "--model", str(DATA / "v1"), "--device",
            "cpu", "--ref-audio", str(ref_file), "--ref-text", REF_TEXT, "--seed", "3", "--nfe-step", "8",
            "--accept-license", "-o", str(out)]
    assert cli.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["engine"] == "f5tts" and report["seed"] == 3 and report["output"] == str(out)
    assert report["speak"]["nfe_step"] == 8 and report["sample_rate"] == RATE
    waveform, rate = files.read(out)
    want = say(v1, "Hello from the command line.", seed=3, reference=reference, trim_reference=True).waveform
    assert rate == RATE and waveform.shape == want.shape == (1, report["samples"])
    torch.testing.assert_close(waveform, want, rtol=0, atol=1.5 / 32768)  # pcm16
    # No transcript: one line, exit status 2, no file.
    missing = tmp_path / "none.wav"
    assert cli.main([*argv[:10], "--seed", "3", "--accept-license", "-o", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mizuoto: error: F5-TTS needs the reference audio's transcript") and err.count("\n") == 1
    assert not missing.exists()


def test_cli_say_refuses_the_weights_until_their_licence_is_accepted(tmp_path, capsys, monkeypatch):
    """As the loader node: F5-TTS's CC-BY-NC-4.0 weights load only with --accept-license, and without it the
    refusal is one line, before anything loads."""
    from mizuoto import host

    monkeypatch.setattr(host, "load_model", lambda *a, **k: pytest.fail("loaded before the licence was accepted"))
    out = tmp_path / "o.wav"
    assert cli.main(["say", "Hello.", "--engine", "f5tts", "--model", str(DATA / "v1"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == ("mizuoto: error: F5-TTS weights are licensed under CC-BY-NC-4.0; read the licence and add "
                   "--accept-license to accept it\n")
    assert not out.exists()


def test_cli_engines_lists_f5tts_and_its_licence(capsys):
    assert cli.main(["engines"]) == 0
    out = capsys.readouterr().out
    assert "f5tts: F5-TTS - Voice cloning by flow matching" in out
    assert "  weights licence: CC-BY-NC-4.0  (must be accepted before loading)" in out
    assert "  --nfe-step int (default 32): flow-matching steps" in out


def test_cli_say_help_lists_the_f5tts_parameters(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["say", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--nfe-step", "--cfg-strength", "--sway-sampling-coef", "--speed", "--fix-duration",
                 "--cross-fade-duration", "--ref-audio", "--ref-text"):
        assert flag in out, flag
    assert "f5tts" in out


# --- nodes -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pack():
    """The pack's entry module, loaded the way ComfyUI loads a custom_nodes folder."""
    from helpers import load_pack

    return load_pack("mizuoto_pack_f5tts")


def node(pack, role):
    """A fresh instance of the f5tts node for `role`, by the id the pack generates (saved in workflows)."""
    import sys

    from mizuoto import engines

    name = sys.modules[f"{pack.__name__}.nodes.engine_nodes"]._class_name(engines.get("f5tts"), role)
    assert pack.NODE_DISPLAY_NAME_MAPPINGS[name] == f"Mizuoto F5-TTS {role}"
    return pack.NODE_CLASS_MAPPINGS[name]()


def test_loader_node_asks_for_the_licence(pack):
    loader = node(pack, "Loader")
    inputs = type(loader).INPUT_TYPES()
    required = inputs["required"]
    assert required["accept_license"][0] == "BOOLEAN" and required["accept_license"][1]["default"] is False
    assert "CC-BY-NC-4.0" in required["accept_license"][1]["tooltip"]
    assert required["architecture"][0] == ["auto", "F5TTS_v1_Base", "F5TTS_Base", "E2TTS_Base"]
    assert required["vocoder"][0] == "STRING" and required["vocoder"][1]["default"] == ""
    assert "policy" in inputs["optional"]
    with pytest.raises(InputError, match="F5-TTS weights are licensed under CC-BY-NC-4.0; turn on accept_license"):
        loader.load(str(DATA / "v1"), "cpu", "float32", architecture="auto", vocoder="")
    (model,) = loader.load(str(DATA / "v1"), "cpu", "float32", accept_license=True, architecture="auto", vocoder="")
    assert model.info.engine == "f5tts" and model.info.load_options == {"architecture": "auto", "vocoder": ""}
    (old,) = loader.load(str(DATA / "v1"), "cpu", "float32", accept_license=True, architecture="F5TTS_Base",
                         vocoder="")
    assert switches(old) == (False, 1)
    with pytest.raises(InputError, match="not found in .*models/tts/f5tts"):
        loader.load("f5tts/model.safetensors", "cpu", "float32", accept_license=True, architecture="auto", vocoder="")


def test_speak_node_with_reference_audio(pack, v1):
    loader, speaker = node(pack, "Loader"), node(pack, "Speak")
    inputs = type(speaker).INPUT_TYPES()
    assert inputs["optional"]["reference_audio"][0] == "AUDIO" and inputs["optional"]["reference_text"][0] == "STRING"
    assert inputs["optional"]["transcriber"][0] == "MIZUOTO_MODEL"
    defaults = {name: spec[1]["default"] for name, spec in inputs["required"].items()
                if name not in ("model", "text", "seed")}
    assert defaults == {"speed": 1.0, "nfe_step": 32, "cfg_strength": 2.0, "sway_sampling_coef": -1.0,
                        "fix_duration": 0.0, "trim_reference": True, "cross_fade_duration": 0.15}
    (model,) = loader.load(str(DATA / "v1"), "cpu", "float32", accept_license=True, architecture="auto", vocoder="")
    wave, rate = voice(1.0, rate=16000, channels=2)
    audio = {"waveform": wave[None], "sample_rate": rate}  # ComfyUI's AUDIO: (batch, channels, samples)
    params = {**defaults, "nfe_step": 8}
    out = speaker.generate(model, TEXT, 5, reference_audio=audio, reference_text=REF_TEXT, **params)
    result, report = out["result"]
    assert result["sample_rate"] == RATE and result["waveform"].dim() == 3 and result["waveform"].shape[:2] == (1, 1)
    want = speak(v1, TEXT, seed=5, params=params, reference=(wave, rate), reference_text=REF_TEXT).waveform
    assert torch.equal(result["waveform"][0], want)
    assert json.loads(report)["engine"] == "f5tts" and out["ui"]["report"] == [report]
    with pytest.raises(InputError, match="F5-TTS clones a voice"):
        speaker.generate(model, TEXT, 5, **params)
    with pytest.raises(InputError, match="F5-TTS needs the reference audio's transcript"):
        speaker.generate(model, TEXT, 5, reference_audio=audio, reference_text="", **params)
    with pytest.raises(InputError, match="this F5-TTS Speak node got a Dummy model; connect a F5-TTS Loader"):
        speaker.generate(load_model("dummy", device="cpu"), TEXT, 5, **params)


def test_example_workflow_runs_on_the_node_classes(pack, v1):
    """workflows/api/f5tts.json on the node classes: its model choice pointed at the tiny model, LoadAudio
    standing in with a recording, 8 solver steps instead of its 32 for time. SaveAudio gets what the
    library gives for the same request."""
    graph = json.loads((Path(__file__).resolve().parents[2] / "workflows" / "api" / "f5tts.json").read_text())
    loader = next(n for n in graph.values() if n["class_type"] == "MizuotoF5TTSLoader")
    speaker = next(n for n in graph.values() if n["class_type"] == "MizuotoF5TTSSpeak")
    assert loader["inputs"]["accept_license"] is False  # the user accepts CC-BY-NC-4.0, not the example
    assert {k: speaker["inputs"][k] for k in ("nfe_step", "cfg_strength", "sway_sampling_coef", "speed")} == {
        "nfe_step": 32, "cfg_strength": 2.0, "sway_sampling_coef": -1.0, "speed": 1.0}
    loader["inputs"].update(model=str(DATA / "v1"), device="cpu")
    loader_class = pack.NODE_CLASS_MAPPINGS["MizuotoF5TTSLoader"]
    with pytest.raises(InputError, match="turn on accept_license"):  # as shipped: refused, in one line
        getattr(loader_class(), loader_class.FUNCTION)(**{**loader["inputs"], "policy": None})
    loader["inputs"]["accept_license"] = True  # what the user does after reading the licence
    speaker["inputs"]["nfe_step"] = 8
    wave, rate = voice(1.0, rate=16000)
    from helpers import saved_audio

    saved = saved_audio(pack, graph, lambda name: (wave, rate))
    params = {k: v for k, v in speaker["inputs"].items() if k in {p.name for p in v1.spec.speak_params}}
    want = speak(v1, speaker["inputs"]["text"], seed=speaker["inputs"]["seed"], params=params, reference=(wave, rate),
                 reference_text=speaker["inputs"]["reference_text"]).waveform
    assert saved["sample_rate"] == RATE and torch.equal(saved["waveform"][0], want)


def test_compile_runs_the_dit_and_the_vocoder_through_compiled_modules(monkeypatch):
    """compute.compile: each solver step calls the compiled DiT, each chunk the compiled vocoder (here a
    recording stand-in for torch.compile; the benchmark measures the real one), and turning it off on
    the same weights (a rebind) goes back to the exact path."""
    made = []

    def fake_compile(module, dynamic=None):
        calls = []

        def run(*args, **kwargs):
            calls.append(type(module).__name__)
            return module(*args, **kwargs)

        made.append(calls)
        return run

    monkeypatch.setattr(torch, "compile", fake_compile)
    compiled = load_model("f5tts", DATA / "v1", device="cpu", overrides={"compute.compile": True})
    speech = say(compiled, nfe_step=8)
    assert sorted(calls[0] for calls in made) == ["DiT", "Vocos"]
    assert sorted(len(calls) for calls in made) == [1, 8]  # one vocoder call, one DiT call per step
    exact = load_model("f5tts", DATA / "v1", device="cpu")
    assert exact.state.model is compiled.state.model and exact.state.compiled_model is None
    assert torch.equal(say(exact, nfe_step=8).waveform, speech.waveform)  # the stand-in runs the same modules


def test_the_reference_is_trimmed_as_upstream_preprocesses_it_by_default(v1):
    """Silence around a reference goes (upstream's pydub steps, silence.py): a voice padded with a
    second of silence on each side speaks exactly as the voice itself; untrimmed, it does not."""
    wave, rate = voice()
    padded = torch.nn.functional.pad(wave, (rate, rate))
    trimmed = say(v1, reference=(padded, rate), trim_reference=True).waveform
    assert torch.equal(trimmed, say(v1, reference=(wave, rate), trim_reference=True).waveform)
    assert not torch.equal(trimmed, say(v1, reference=(padded, rate)).waveform)
    assert v1.spec.speak_defaults()["trim_reference"] is True
    with pytest.raises(InputError, match="silent") as caught:
        say(v1, reference=(torch.zeros(1, rate), rate), trim_reference=True)
    one_line(caught)
