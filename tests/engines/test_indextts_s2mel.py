"""IndexTTS 2's reference audio and acoustic back half (engines/indextts/reference.py, s2mel.py).

Against tests/parity/data/indextts/s2mel (scripts/parity/indextts_s2mel_references.py: upstream's own infer_v2
calls at index-tts/index-tts ee40fa7 under the parity pins, tiny s2mel nets, CAM++, BigVGAN and codec from seeded
values). In a pinned subprocess: `_load_and_cut_audio` and the two Resample transforms for six clips (stereo, three
channels, 8 to 48 kHz) and a 15.5 s clip (cut), the transforms alone at five rates, mel_fn (and its fmax quirk),
the fbank, CAM++'s style, the codec's S_ref, the prompt condition, gpt_layer, vq2emb, S_infer, target_lengths (and
for every length to 2000), the length regulator, the 25-step CFM at rate 0.7, BigVGAN and the int16-range clamp.
Bitwise where the set's fingerprint is this machine's; elsewhere (tests/fallback.py) within TOLERANCE. In process:
every DiT attention call goes through the shared site with upstream's mask, the buffers are upstream's, the loader
strips "module." and refuses what does not fit in one line, bad inputs are one-line errors.
"""

import functools
import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fallback import Comparison  # noqa: E402
from helpers import parity_module, reference_sets, run_pinned  # noqa: E402

from mizuoto.core.errors import CheckpointError, InputError  # noqa: E402
from mizuoto.engines.indextts import reference, s2mel  # noqa: E402
from mizuoto.nn import bigvgan, campplus, maskgct_codec, s2mel_dit  # noqa: E402

SET = "indextts/s2mel"
TOLERANCE = 1e-3  # the 25-step sampler and BigVGAN in int16 units are the widest; see test_the_set_covers...
INT_TOLERANCE = 0.5  # wav/int_range is 32767 x wav
weights = parity_module("seedvc_weights")
cosyvoice_weights = parity_module("cosyvoice_weights")
writer = parity_module("indextts_s2mel_references")


def committed() -> Path:
    return reference_sets().SETS[SET].committed


@functools.cache
def info() -> dict:
    return json.loads((committed() / "references.json").read_text())


@functools.cache
def inputs() -> dict:
    from safetensors.torch import load_file

    return load_file(str(committed() / "references.safetensors"))


def net_states(recorded: dict, model: s2mel.S2Mel, prefixed: bool = True) -> dict:
    """s2mel.pth's {"net": ...} rebuilt from the recipe: the seeded parameters, the buffers as we build them (their
    sha256 is checked against upstream's elsewhere), upstream's input_pos, "module." on every other key."""
    built = {"cfm": model.nets.cfm.state_dict(), "length_regulator": model.nets.length_regulator.state_dict(),
             "gpt_layer": model.gpt_layer.state_dict()}
    nets = {}
    for name, recipe in recorded["nets"].items():
        values = {k: weights.s2mel_fill(k, tuple(shape), recipe["seed"] + i) for i, (k, shape) in
                  enumerate(recipe["params"])}
        for key in recipe["buffers"]:
            values[key] = torch.arange(16384) if key.endswith("input_pos") else built[name][key].clone()
        ordered = {k: values[k] for k in recipe["state_keys"]}
        nets[name] = {("module." + k if prefixed and i % 2 else k): v for i, (k, v) in enumerate(ordered.items())}
    return {"net": nets}


def build(recorded: dict) -> dict:
    config = s2mel.S2MelConfig.from_section(recorded["s2mel"])
    model = s2mel.S2Mel.from_state(net_states(recorded, s2mel.S2Mel(config)), config)
    codec = maskgct_codec.build_from_state(cosyvoice_weights.state(recorded["codec_params"],
                                                                   recorded["seeds"]["codec"]), "codec")
    shapes = {k: tuple(v) for k, v in recorded["campplus_shapes"].items()}
    cam = campplus.build_campplus(weights.campplus_state(shapes, recorded["seeds"]["campplus"]),
                                  campplus.CampplusConfig(**recorded["campplus"]))
    h = recorded["bigvgan_config"]
    vconfig = bigvgan.BigVGANConfig.from_dict(h)
    layout = {k: tuple(v) for k, v in recorded["bigvgan_params"].items()}
    values = weights.bigvgan_state(layout, recorded["seeds"]["bigvgan"], h["snake_logscale"])
    filters = {k: v for k, v in bigvgan.BigVGAN(vconfig).state_dict().items() if k.endswith(".filter")}
    vocoder = bigvgan.load_bigvgan({"generator": {**values, **filters}}, vconfig)
    return {"s2mel": model, "codec": codec, "campplus": cam, "bigvgan": vocoder, "config": config}


def long_outputs(name: str, tensor: torch.Tensor, edge: int, results: dict, digests: dict) -> None:
    flat = tensor.contiguous()
    digests[name] = {"shape": list(flat.shape), "sha256": hashlib.sha256(flat.numpy().tobytes()).hexdigest()}
    results[f"long/{name}/head"], results[f"long/{name}/tail"] = flat[..., :edge], flat[..., -edge:]


def compute(models: dict, refs: dict, recorded: dict) -> tuple[dict, dict]:
    from mizuoto.audio import torchaudio_sinc

    results, digests = {}, {}
    clips = recorded["clips"]
    for name, (rate, _, _) in clips.items():
        speaker = reference.speaker_audio(refs[f"in/{name}"], rate)
        results[f"load/{name}/audio_22k"], results[f"load/{name}/audio_16k"] = speaker.audio_22k, speaker.audio_16k
        results[f"load/{name}/emotion_16k"] = reference.emotion_audio(refs[f"in/{name}"], rate)
    rate, seconds, channels = recorded["long_clip"]
    wave = writer.clip(rate, seconds, channels, recorded["seeds"]["inputs"] + len(clips))
    speaker = reference.speaker_audio(wave, rate)
    edge = recorded["edge"]
    long_outputs("audio_22k", speaker.audio_22k, edge, results, digests)
    long_outputs("audio_16k", speaker.audio_16k, edge, results, digests)
    long_outputs("emotion_16k", reference.emotion_audio(wave, rate), edge, results, digests)
    for rate in recorded["resampled"]:
        name = next(n for n, c in clips.items() if c[0] == rate)
        for new in (22050, 16000):
            results[f"resample/{rate}/{new}"] = torchaudio_sinc.resample(refs[f"in/{name}"][:1], rate, new)

    config, model = models["config"], models["s2mel"]
    prompt = reference.speaker_audio(refs[f"in/{recorded['prompt_clip']}"], clips[recorded["prompt_clip"]][0])
    ref_mel = config.mel.mel(prompt.audio_22k)
    results["mel/ref"] = ref_mel
    section = json.loads(json.dumps(recorded["s2mel"]))
    section["preprocess_params"]["spect_params"]["fmax"] = recorded["fmax_quirk"]
    results["mel/fmax_quirk"] = reference.MelSettings.from_section(section).mel(prompt.audio_22k)
    results["fbank"] = reference.fbank(prompt.audio_16k)
    style = reference.style(models["campplus"], prompt.audio_16k)
    results["style"] = style
    codec = models["codec"]
    s_ref = codec.quantize(refs["in/w2v_features"])[1]
    results["codec/S_ref"] = s_ref
    prompt_condition = model.prompt(s_ref, ref_mel)
    results["prompt_condition"] = prompt_condition
    latent, codes = refs["in/latent"], refs["in/codes"]
    code_lens = torch.tensor([codes.shape[1]])
    results["gpt_layer"] = model.gpt_layer(latent)
    results["vq2emb"] = codec.embed(codes)
    results["S_infer"] = model.content(latent, codes, codec)
    results["target_lengths"] = s2mel.target_lengths(code_lens)
    results["target_lengths/all"] = s2mel.target_lengths(torch.arange(1, recorded["max_length"] + 1))
    cond = model.condition(latent, codes, code_lens, codec)
    results["cond"] = cond
    both = torch.cat([prompt_condition, cond], dim=1)
    results["cat_condition"] = both
    generator = torch.Generator().manual_seed(recorded["seeds"]["sampler"])
    results["cfm/full"] = model.nets.cfm.inference(both, torch.tensor([both.shape[1]]), ref_mel, style, generator,
                                                   steps=recorded["steps"], cfg_rate=recorded["cfg_rate"])
    generator = torch.Generator().manual_seed(recorded["seeds"]["sampler"])
    target = model.mel(latent, codes, code_lens, prompt_condition, ref_mel, style, codec, steps=recorded["steps"],
                       cfg_rate=recorded["cfg_rate"], generator=generator)
    results["mel/target"] = target
    results["wav"] = models["bigvgan"](target.float()).reshape(1, -1)
    results["wav/int_range"] = s2mel.vocode(models["bigvgan"], target)
    return results, digests


def ours(folder: Path, out: Path) -> dict:
    from safetensors.torch import load_file, save_file

    refs = load_file(str(folder / "references.safetensors"))
    recorded = json.loads((folder / "references.json").read_text())
    with torch.inference_mode():
        results, digests = compute(build(recorded), refs, recorded)
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out), "long": digests}


def test_upstreams_reference_path_s2mel_and_vocoder(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    reply = run_pinned(__file__, committed(), out)
    comparison = Comparison.for_set(SET)
    theirs, mine = inputs(), load_file(str(out))
    assert set(mine) == {k for k in theirs if not k.startswith("in/") and k != "in/codes"}
    for name in writer.INTEGERS:  # integers: the same on every machine
        if name in mine:
            assert torch.equal(mine[name], theirs[name]), name
    for name, want in info()["long"].items():
        assert reply["long"][name]["shape"] == want["shape"], name
        if comparison.exact:
            assert reply["long"][name]["sha256"] == want["sha256"], name
    for name in writer.floats(theirs):
        comparison.deterministic(name, mine[name], theirs[name],
                                 INT_TOLERANCE if name == "wav/int_range" else TOLERANCE)
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_covers_every_case_and_parameter():
    recorded, refs = info(), inputs()
    assert recorded["upstream"]["commit"].startswith("ee40fa7")
    assert sorted(line.split()[-1] for line in recorded["checkout_changes"]) == sorted(recorded["absent_from_checkout"])
    assert recorded["long"]["audio_22k"]["shape"] == [1, 15 * 22050]  # the cut bites
    assert recorded["long"]["emotion_16k"]["shape"] == [1, 15 * 16000]
    assert refs["in/44k_stereo"].shape[0] == 2 and refs["in/8k_3ch"].shape[0] == 3
    assert not torch.equal(refs["mel/ref"], refs["mel/fmax_quirk"])
    assert torch.equal(refs["resample/22050/22050"], refs["in/22k"])
    # upstream's float32 product truncates as float64 would for every length a GPT can give (max_mel_tokens 1815)
    lengths = torch.arange(1, recorded["max_length"] + 1)
    assert torch.equal(refs["target_lengths/all"], torch.tensor([int(n * 1.72) for n in lengths.tolist()]))
    assert refs["cfm/full"][:, :, : refs["mel/ref"].shape[-1]].abs().max() == 0  # the prompt frames, zeroed
    for recipe in recorded["nets"].values():  # nothing left at upstream's zero or one init
        for name, shape in recipe["params"]:
            value = weights.s2mel_fill(name, tuple(shape), 0)
            assert value.abs().max() > 0 and not torch.all(value == 1), name
    assert max(v for k, v in recorded["spread"]["max"].items() if k != "wav/int_range") * 5 < TOLERANCE
    assert recorded["spread"]["max"]["wav/int_range"] * 5 < INT_TOLERANCE


# ---------------------------------------------------------------------------------------------------
# In process


@pytest.fixture(scope="module")
def models():
    return build(info())


def test_the_buffers_are_upstreams(models):
    model = models["s2mel"]
    built = {"cfm": model.nets.cfm.state_dict(), "length_regulator": model.nets.length_regulator.state_dict(),
             "gpt_layer": model.gpt_layer.state_dict()}
    for name, recipe in info()["nets"].items():
        for key, digest in recipe["buffers"].items():
            value = torch.arange(16384) if key.endswith("input_pos") else built[name][key]
            assert hashlib.sha256(value.contiguous().numpy().tobytes()).hexdigest() == digest, key


def test_every_dit_attention_call_is_the_shared_sites(models, monkeypatch):
    from mizuoto.runtime.accel import dispatch

    calls = []
    site = s2mel_dit.ATTENTION
    original = site.reference
    monkeypatch.setattr(site, "reference", lambda q, k, v, mask, *rest: calls.append((q.shape, mask)) or
                        original(q, k, v, mask, *rest))
    refs, model = inputs(), models["s2mel"]
    mu = refs["cat_condition"]
    with torch.inference_mode():
        got = model.nets.cfm.inference(mu, torch.tensor([mu.shape[1]]), refs["mel/ref"], refs["style"],
                                       torch.Generator().manual_seed(info()["seeds"]["sampler"]), steps=2,
                                       cfg_rate=0.7)
    depth = models["config"].nets.dit.depth
    assert got.shape == refs["cfm/full"].shape and len(calls) == 2 * depth
    for shape, mask in calls:  # the guided batch of two, upstream's dense (1, 1, L, L) key mask, every key real
        assert shape == (2, 2, mu.shape[1], 16)
        assert mask.dtype == torch.bool and mask.shape == (1, 1, mu.shape[1], mu.shape[1]) and mask.all()
    assert site.name == "s2mel.dit" and site.approx_ok
    if dispatch.COUNT:
        assert site.name in dispatch.SEEN


def test_a_state_without_prefixes_loads_the_same(models):
    config = models["config"]
    plain = s2mel.S2Mel.from_state(net_states(info(), s2mel.S2Mel(config), prefixed=False), config)
    for a, b in zip(plain.state_dict().values(), models["s2mel"].state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_loader_errors_are_one_line(models, tmp_path):
    config = models["config"]
    good = net_states(info(), s2mel.S2Mel(config), prefixed=False)
    no_layer = {"net": {k: v for k, v in good["net"].items() if k != "gpt_layer"}}
    narrow = {"net": {**good["net"], "gpt_layer": {**good["net"]["gpt_layer"], "0.weight": torch.zeros(256, 1024)}}}
    missing = {"net": {**good["net"], "cfm": {k: v for k, v in good["net"]["cfm"].items()
                                              if not k.startswith("estimator.cond_projection")}}}
    bad_file = tmp_path / "s2mel.pth"
    bad_file.write_bytes(b"not a checkpoint")
    section = json.loads(json.dumps(info()["s2mel"]))
    section["length_regulator"]["in_channels"] = 512
    cases = [(lambda: s2mel.S2Mel.from_state({}, config), "no IndexTTS 2 s2mel nets"),
             (lambda: s2mel.S2Mel.from_state(no_layer, config), "gpt_layer"),
             (lambda: s2mel.S2Mel.from_state(narrow, config), "gpt_layer is not Linear 1280->256->128->1024"),
             (lambda: s2mel.S2Mel.from_state(missing, config), "cfm does not match"),
             (lambda: s2mel.S2Mel.from_checkpoint(bad_file, config), "not a readable checkpoint"),
             (lambda: s2mel.S2MelConfig.from_section(section), "1024-wide"),
             (lambda: s2mel.S2MelConfig.from_section(None), "no s2mel section"),
             (lambda: reference.MelSettings.from_section({"preprocess_params": {}}), "preprocess_params")]
    for call, match in cases:
        with pytest.raises(CheckpointError, match=match) as raised:
            call()
        assert "\n" not in str(raised.value)


def test_the_fmax_reading_is_upstreams():
    section = json.loads(json.dumps(info()["s2mel"]))
    assert reference.MelSettings.from_section(section).f_max is None  # the string "None"
    for value in (None, 11025, 7600):  # YAML null too: upstream compares with the string
        section["preprocess_params"]["spect_params"]["fmax"] = value
        assert reference.MelSettings.from_section(section).f_max == 8000


def test_bad_inputs_are_one_line_errors(models):
    model, codec, refs = models["s2mel"], models["codec"], inputs()
    latent, codes, lens = refs["in/latent"], refs["in/codes"], torch.tensor([refs["in/codes"].shape[1]])
    g = torch.Generator().manual_seed(0)
    cases = [
        (lambda: reference.speaker_audio(torch.zeros(2, 3, 100), 22050), "float waveform"),
        (lambda: reference.speaker_audio(torch.zeros(100, dtype=torch.int16), 22050), "float waveform"),
        (lambda: reference.speaker_audio(torch.zeros(0), 22050), "empty"),
        (lambda: reference.speaker_audio(torch.zeros(100), 0), "sample rate"),
        (lambda: reference.style(models["campplus"], torch.zeros(1, 300)), "too short"),
        (lambda: model.content(latent[..., :1024], codes, codec), "GPT latent"),
        (lambda: model.content(latent, codes[:, :5], codec), "one code per latent frame"),
        (lambda: model.condition(latent, codes, lens.float(), codec), "code_lens"),
        (lambda: model.mel(latent, codes, lens, refs["prompt_condition"], refs["mel/ref"], refs["style"], codec),
         "torch.Generator"),
        (lambda: model.mel(latent, codes, lens, refs["prompt_condition"][..., :8], refs["mel/ref"], refs["style"],
                           codec, generator=g), "prompt_condition"),
        (lambda: model.prompt(refs["codec/S_ref"], refs["mel/ref"][0]), "S_ref"),
        (lambda: s2mel.vocode(models["bigvgan"], refs["mel/target"][0]), "one mel"),
    ]
    for call, match in cases:
        with torch.inference_mode(), pytest.raises(InputError, match=match) as raised:
            call()
        assert "\n" not in str(raised.value)


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))


def test_the_cfm_steps_replay_one_graph_per_frame_count_with_the_eager_mel(models):
    """With (emulated) CUDA graphs each Euler step replays the graph of its frame count: the eager mel; a new code
    count captures once, a count seen before captures nothing; the graphs stay with the model."""
    from helpers import EmulatedGraphs

    recorded, refs = info(), inputs()
    config, model, codec = models["config"], models["s2mel"], models["codec"]
    clip = recorded["prompt_clip"]
    prompt = reference.speaker_audio(refs[f"in/{clip}"], recorded["clips"][clip][0])
    ref_mel = config.mel.mel(prompt.audio_22k)
    style = reference.style(models["campplus"], prompt.audio_16k)
    prompt_condition = model.prompt(codec.quantize(refs["in/w2v_features"])[1], ref_mel)

    def mel(length, graphs=None):
        latent, codes = refs["in/latent"][:, :length], refs["in/codes"][:, :length]
        return model.mel(latent, codes, torch.tensor([length]), prompt_condition, ref_mel, style, codec, steps=3,
                         cfg_rate=0.7, generator=torch.Generator().manual_seed(5), graphs=graphs)

    full = refs["in/codes"].shape[1]
    eager = {length: mel(length) for length in (full, full - 2)}
    graphs, counts = EmulatedGraphs(), []
    for length in (full, full - 2, full):
        assert torch.equal(mel(length, graphs), eager[length])
        counts.append(graphs.captures)
    assert counts == [1, 2, 2] and model.step_graphs(graphs) is model.step_graphs(graphs)
    assert model.step_graphs(None) is None
