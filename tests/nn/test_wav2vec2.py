"""The wav2vec 2.0 / HuBERT encoder (mizuoto.nn.wav2vec2) and the feature extractor's normalisation
(mizuoto.audio.wav2vec2_features) against transformers 4.57.3 live in this process (a test extra), bit for bit.

- tiny random `Wav2Vec2Model` / `HubertModel`s (every parameter and norm statistic moved off its initial
  constant, the positional conv's weight-norm g included), loaded into ours from their state dicts, give
  equal `last_hidden_state`, `hidden_states` and `extract_features` in float32 and float16 (upstream runs
  `.half()` on the CPU): both encoder layouts, group and layer feature norms, conv_bias on and off, odd and
  even positional kernels, HuBERT's options (no projection LayerNorm, a BatchNorm at the positional conv), a
  batch of one without a mask and with an all-ones one, a padded batch of two with the feature extractor's
  attention mask, layers truncated as Seed-VC does and the final LayerNorm replaced as Seed-VC v2 does; the
  head size is 24 (hidden 48, 2 heads) so a misplaced query scale shows;
- one XLS-R-shaped model (the real widths and conv stack, 2 layers, seeded random weights) in both dtypes;
- `input_values` equals `Wav2Vec2FeatureExtractor(...)(...)` on odd lengths, padded or not, with and
  without the attention mask;
- checkpoints load as `Wav2Vec2Model.from_pretrained` takes them (task-model prefixes, both weight-norm
  spellings, extra keys ignored) and bad ones are one-line CheckpointErrors; bad input is an InputError.
"""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from mizuoto.audio import wav2vec2_features  # noqa: E402
from mizuoto.core.errors import CheckpointError, InputError  # noqa: E402
from mizuoto.nn import wav2vec2  # noqa: E402

TINY = dict(hidden_size=48, num_hidden_layers=3, num_attention_heads=2, intermediate_size=80,
            conv_dim=(16, 16, 24), conv_kernel=(10, 3, 3), conv_stride=(5, 2, 2), num_conv_pos_embedding_groups=4,
            hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0,
            layerdrop=0.0, attn_implementation="sdpa")

# name -> (transformers class names, config overrides)
CASES = {
    "wav2vec2-post-group-even": ("Wav2Vec2", dict(feat_extract_norm="group", do_stable_layer_norm=False,
                                                  conv_bias=False, num_conv_pos_embeddings=8)),
    "wav2vec2-stable-layer-odd": ("Wav2Vec2", dict(feat_extract_norm="layer", do_stable_layer_norm=True,
                                                   conv_bias=True, num_conv_pos_embeddings=7)),
    "wav2vec2-post-layer-odd": ("Wav2Vec2", dict(feat_extract_norm="layer", do_stable_layer_norm=False,
                                                 conv_bias=True, num_conv_pos_embeddings=5)),
    "hubert-post-group-even": ("Hubert", dict(feat_extract_norm="group", do_stable_layer_norm=False,
                                              conv_bias=False, num_conv_pos_embeddings=8)),
    "hubert-stable-layer-even": ("Hubert", dict(feat_extract_norm="layer", do_stable_layer_norm=True,
                                                conv_bias=True, num_conv_pos_embeddings=6)),
    "hubert-batchnorm-noprojnorm": ("Hubert", dict(feat_extract_norm="group", do_stable_layer_norm=False,
                                                   conv_bias=False, num_conv_pos_embeddings=7,
                                                   feat_proj_layer_norm=False, conv_pos_batch_norm=True)),
}


def randomise(model, seed: int):
    """Move every parameter off transformers' init (zero biases, unit norms, g = ||v||) and the BatchNorm
    statistics off 0 and 1, from a seeded generator."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if "norm" in name and name.endswith("weight"):  # LayerNorm, GroupNorm, BatchNorm scales
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            elif name.endswith("original0") or name.endswith("weight_g"):  # weight norm's g
                p.mul_(1.0 + 0.3 * noise)
            else:
                p.add_(0.1 * p.std() * noise)
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))
            elif name.endswith("running_var"):
                b.copy_(1.0 + 0.5 * torch.rand(b.shape, generator=g))
    return model


def upstream(kind: str, overrides: dict, seed: int, **extra):
    config = getattr(transformers, f"{kind}Config")(**{**TINY, **overrides, **extra})
    torch.manual_seed(seed)
    return randomise(getattr(transformers, f"{kind}Model")(config), seed + 1).eval()


def ours_from(model, dtype=torch.float32) -> wav2vec2.Wav2Vec2:
    return wav2vec2.from_state(model.config.to_dict(), model.state_dict(), dtype)


def utterances(seed: int, lengths):
    g = torch.Generator().manual_seed(seed)
    return [0.2 * torch.randn(n, generator=g) + 0.01 for n in lengths]


def extract(waves, with_mask=True):
    extractor = transformers.Wav2Vec2FeatureExtractor(return_attention_mask=with_mask)
    out = extractor([w.numpy() for w in waves], return_tensors="pt", padding=True, sampling_rate=16000)
    return out.input_values, out.get("attention_mask")


def compare(model, ours, values, mask, dtype, label):
    with torch.inference_mode():
        theirs = model(values.to(dtype), attention_mask=mask, output_hidden_states=True)
        got = ours(values.to(dtype), attention_mask=mask, output_hidden_states=True)
    assert got.last_hidden_state.dtype == dtype
    pairs = [("last", got.last_hidden_state, theirs.last_hidden_state)]
    pairs += [(f"hidden {i}", a, b) for i, (a, b) in enumerate(zip(got.hidden_states, theirs.hidden_states,
                                                                     strict=True))]
    if hasattr(theirs, "extract_features"):  # wav2vec 2.0 returns the normalised conv features too
        pairs.append(("features", got.extract_features, theirs.extract_features))
    assert len(got.hidden_states) == len(model.encoder.layers) + 1
    for what, a, b in pairs:
        assert a.shape == b.shape, (label, what)
        assert torch.equal(a, b), (label, what, (a.float() - b.float()).abs().max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("case", list(CASES))
def test_the_encoder_is_transformers(case, dtype):
    kind, overrides = CASES[case]
    model = upstream(kind, overrides, seed=len(case)).to(dtype)
    ours = ours_from(model, dtype)
    one = utterances(1, [1601])
    values, mask = extract(one)
    compare(model, ours, values, None, dtype, f"{case} one, no mask")
    compare(model, ours, values, mask, dtype, f"{case} one, all-ones mask")
    values, mask = extract(utterances(2, [2403, 1777]))
    assert mask[1].sum() == 1777
    compare(model, ours, values, mask, dtype, f"{case} padded two")
    compare(model, ours, values, None, dtype, f"{case} padded two, no mask")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_float32_checkpoint_loaded_in_float16_is_upstreams_half(dtype):
    """Seed-VC's path: from_pretrained in float32, then `.half()`; ours loads the float32 state in float16
    and folds the weight norm there, from the float16 g and v."""
    kind, overrides = CASES["wav2vec2-stable-layer-odd"]
    model = upstream(kind, overrides, seed=11)
    ours = wav2vec2.from_state(model.config.to_dict(), model.state_dict(), dtype)
    model = model.to(dtype)
    values, mask = extract(utterances(3, [1999, 2400]))
    compare(model, ours, values, mask, dtype, "float32 checkpoint")


def test_layers_truncated_and_the_final_norm_replaced_as_seed_vc_does():
    for case in ("wav2vec2-stable-layer-odd", "hubert-post-group-even"):
        kind, overrides = CASES[case]
        model = upstream(kind, overrides, seed=5)
        ours = ours_from(model)
        model.encoder.layers = model.encoder.layers[:2]  # Seed-VC v1: XLS-R cut to output_layer
        ours.keep_layers(2)
        values, mask = extract(utterances(4, [1800, 2222]))
        compare(model, ours, values, mask, torch.float32, f"{case} truncated")
        model.encoder.layer_norm = torch.nn.Identity()  # Seed-VC v2 drops the final LayerNorm
        ours.encoder.layer_norm = torch.nn.Identity()
        compare(model, ours, values, mask, torch.float32, f"{case} without the final norm")
        ours.encoder.layers = ours.encoder.layers[:1]  # upstream's own spelling works on ours as well
        assert len(ours.encoder.layers) == 1
    with pytest.raises(InputError, match="cannot keep 5 layers of an encoder with 1"):
        ours.keep_layers(5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_an_xls_r_shaped_encoder_is_transformers(dtype):
    """facebook/wav2vec2-xls-r-300m's widths and conv stack (1024 hidden, 16 heads, 4096 inner, a 128-tap
    positional conv in 16 groups, layer norms, conv bias, stable layer norm) with 2 of its 24 layers."""
    config = transformers.Wav2Vec2Config(
        hidden_size=1024, num_hidden_layers=2, num_attention_heads=16, intermediate_size=4096,
        feat_extract_norm="layer", do_stable_layer_norm=True, conv_bias=True, hidden_dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0,
        attn_implementation="sdpa")
    torch.manual_seed(21)
    model = randomise(transformers.Wav2Vec2Model(config), 22).eval()
    ours = wav2vec2.from_state(config.to_dict(), model.state_dict(), dtype)
    model = model.to(dtype)
    values, mask = extract(utterances(6, [16000, 12345]))
    compare(model, ours, values, mask, dtype, "xls-r shaped")
    assert ours(values[:1].to(dtype)).last_hidden_state.shape == (1, 49, 1024)


# -- the feature extractor ------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_mask", [True, False])
@pytest.mark.parametrize("padding", [True, False])
def test_features_are_the_feature_extractors(with_mask, padding):
    extractor = transformers.Wav2Vec2FeatureExtractor(return_attention_mask=with_mask)
    lengths = [4001, 333, 2777] if padding else [1235]
    waves = utterances(7, lengths)
    theirs = extractor([w.numpy() for w in waves], return_tensors="pt", padding=padding, sampling_rate=16000)
    values, mask = wav2vec2_features.input_values(
        waves, wav2vec2_features.FeatureConfig(return_attention_mask=with_mask), padding=padding)
    assert values.dtype == torch.float32 and values.shape == theirs.input_values.shape
    assert torch.equal(values, theirs.input_values), (values - theirs.input_values).abs().max()
    if with_mask:
        assert mask.dtype == theirs.attention_mask.dtype and torch.equal(mask, theirs.attention_mask)
    else:
        assert mask is None and "attention_mask" not in theirs


def test_features_of_one_tensor_of_float64_and_without_normalising():
    wave = utterances(8, [3001])[0].double()
    extractor = transformers.Wav2Vec2FeatureExtractor(return_attention_mask=True)
    theirs = extractor(wave.numpy(), return_tensors="pt", padding=True, sampling_rate=16000)
    values, mask = wav2vec2_features.input_values(wave, return_attention_mask=True)
    assert torch.equal(values, theirs.input_values) and torch.equal(mask, theirs.attention_mask)
    plain = transformers.Wav2Vec2FeatureExtractor(do_normalize=False)
    theirs = plain([w.numpy() for w in utterances(9, [100, 77])], return_tensors="pt", padding=True,
                   sampling_rate=16000)
    values, _ = wav2vec2_features.input_values(utterances(9, [100, 77]), wav2vec2_features.FeatureConfig(
        do_normalize=False))
    assert torch.equal(values, theirs.input_values)


def test_feature_config_reads_preprocessor_config():
    config = wav2vec2_features.FeatureConfig.from_dict(
        {"do_normalize": True, "feature_extractor_type": "Wav2Vec2FeatureExtractor", "feature_size": 1,
         "padding_side": "right", "padding_value": 0, "return_attention_mask": True, "sampling_rate": 16000})
    assert config == wav2vec2_features.FeatureConfig(return_attention_mask=True)


def test_bad_audio_is_refused():
    with pytest.raises(InputError, match="takes 16000 Hz audio; got 22050 Hz"):
        wav2vec2_features.input_values(torch.zeros(100), sampling_rate=22050)
    with pytest.raises(InputError, match="mono audio"):
        wav2vec2_features.input_values([torch.zeros(2, 100)])
    with pytest.raises(InputError, match="empty"):
        wav2vec2_features.input_values([torch.zeros(0)])
    with pytest.raises(InputError, match="need padding=True"):
        wav2vec2_features.input_values([torch.zeros(10), torch.zeros(12)], padding=False)


# -- checkpoints ------------------------------------------------------------------------------------------------


def test_task_checkpoints_load_as_from_pretrained_takes_them(tmp_path):
    """A ForPreTraining / ForCTC checkpoint's base model under its prefix: the heads and the quantizer are
    ignored, as `Wav2Vec2Model.from_pretrained` ignores them; both give the same features."""
    for kind, head, case in (("Wav2Vec2", "ForPreTraining", "wav2vec2-stable-layer-odd"),
                             ("Hubert", "ForCTC", "hubert-post-group-even")):
        config = getattr(transformers, f"{kind}Config")(**{**TINY, **CASES[case][1]}, vocab_size=12)
        torch.manual_seed(3)
        task = randomise(getattr(transformers, f"{kind}{head}")(config), 4).eval()
        task.save_pretrained(tmp_path / kind)
        state = task.state_dict()
        prefix = kind.lower()
        assert any(not k.startswith(prefix) for k in state)  # a head beside the base model
        base = getattr(transformers, f"{kind}Model").from_pretrained(tmp_path / kind,
                                                                     attn_implementation="sdpa").eval()
        ours = wav2vec2.load_folder(tmp_path / kind)
        values, mask = extract(utterances(10, [1700, 2100]))
        compare(base, ours, values, mask, torch.float32, f"{kind}{head} folder")
        plain = wav2vec2.from_state(config.to_dict(), {k[len(prefix) + 1:]: v for k, v in state.items()
                                                       if k.startswith(prefix + ".")})
        assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), ours.state_dict().values(),
                                                     strict=True))


def test_both_weight_norm_spellings_fold_alike():
    model = upstream(*CASES["wav2vec2-post-group-even"], seed=12)
    state = model.state_dict()
    legacy = {k.replace("parametrizations.weight.original0", "weight_g")
               .replace("parametrizations.weight.original1", "weight_v"): v for k, v in state.items()}
    assert "encoder.pos_conv_embed.conv.weight_g" in legacy
    a = ours_from(model)
    b = wav2vec2.from_state(model.config.to_dict(), legacy)
    assert torch.equal(a.encoder.pos_conv_embed.conv.weight, b.encoder.pos_conv_embed.conv.weight)
    assert torch.equal(a.encoder.pos_conv_embed.conv.weight, model.encoder.pos_conv_embed.conv.weight)


def test_the_float16_fold_is_not_the_rounded_float32_fold():
    """Why load_state folds in the run dtype: rounding the float32 fold gives other float16 weights."""
    model = upstream(*CASES["wav2vec2-post-group-even"], seed=13)
    rounded = ours_from(model).encoder.pos_conv_embed.conv.weight.half()
    folded_in_half = wav2vec2.from_state(model.config.to_dict(), model.state_dict(), torch.float16)
    half = model.to(torch.float16).encoder.pos_conv_embed.conv.weight
    assert torch.equal(folded_in_half.encoder.pos_conv_embed.conv.weight, half)
    assert not torch.equal(half, rounded)


def test_bad_checkpoints_are_one_line_errors(tmp_path):
    model = upstream(*CASES["hubert-stable-layer-even"], seed=14)
    config, state = model.config.to_dict(), model.state_dict()
    short = {k: v for k, v in state.items() if not k.startswith("encoder.layers.2.")}
    with pytest.raises(CheckpointError, match=r"lacks 16 tensors of this hubert encoder \(encoder.layers.2"):
        wav2vec2.from_state(config, short)
    with pytest.raises(CheckpointError, match="has shape"):
        wav2vec2.from_state({**config, "intermediate_size": 64}, state)
    half = {k: v for k, v in state.items() if not k.endswith("original1")}
    with pytest.raises(CheckpointError, match="only half of its weight norm"):
        wav2vec2.from_state(config, half)
    for bad, message in (({"model_type": "wavlm"}, "model_type 'wavlm'"),
                         ({"add_adapter": True}, "adapter layers"),
                         ({"hidden_act": "gelu_new"}, "hidden_act 'gelu_new' is not supported"),
                         ({"feat_extract_norm": "batch"}, "feat_extract_norm 'batch'"),
                         ({"num_attention_heads": 5}, "not a multiple")):
        with pytest.raises(CheckpointError, match=message) as error:
            wav2vec2.Wav2Vec2Config.from_dict({**config, **bad})
        assert "\n" not in str(error.value)
    with pytest.raises(CheckpointError, match="has no config.json"):
        wav2vec2.load_folder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="neither model.safetensors nor pytorch_model.bin"):
        wav2vec2.load_folder(tmp_path)


def test_config_defaults_are_transformers():
    for kind in ("Wav2Vec2", "Hubert"):
        theirs = getattr(transformers, f"{kind}Config")().to_dict()
        ours = wav2vec2.Wav2Vec2Config.from_dict(theirs)
        for name, value in ours.to_dict().items():
            if name in theirs:
                assert tuple(theirs[name]) == value if isinstance(value, tuple) else theirs[name] == value, name
        assert ours.model_type == kind.lower()
    assert wav2vec2.Wav2Vec2Config() == wav2vec2.Wav2Vec2Config.from_dict(transformers.Wav2Vec2Config().to_dict())


def test_bad_input_is_refused():
    model = upstream(*CASES["wav2vec2-post-group-even"], seed=15)
    ours = ours_from(model)
    assert ours.shortest_input() == 40  # (((1 - 1) * 2 + 3 - 1) * 2 + 3 - 1) * 5 + 10
    assert ours.frames_for(1601).item() == model._get_feat_extract_output_lengths(torch.tensor(1601)).item()
    with pytest.raises(InputError, match="takes \\(batch, samples\\) audio"):
        ours(torch.zeros(100))
    with pytest.raises(InputError, match="39 samples are too few"):
        ours(torch.zeros(1, 39))
    with pytest.raises(InputError, match="attention mask has shape"):
        ours(torch.zeros(1, 100), attention_mask=torch.ones(1, 99, dtype=torch.int32))
    mask = torch.ones(2, 100, dtype=torch.int32)
    mask[1, 20:] = 0
    with pytest.raises(InputError, match="an utterance of 20 samples is too short"):
        ours(torch.zeros(2, 100), attention_mask=mask)


def test_the_padded_batch_describes_its_mask_to_the_dispatcher(monkeypatch):
    """With DEBUG on, every attention call checks that its MaskInfo (right padding, the real frames) says
    what the dense additive mask says; a batch without padding passes neither."""
    from mizuoto.runtime.accel import dispatch

    calls = []
    reference = wav2vec2.ENCODER.reference
    monkeypatch.setattr(wav2vec2.ENCODER, "reference", lambda *a: calls.append(a[3]) or reference(*a))
    monkeypatch.setattr(dispatch, "DEBUG", True)
    model = upstream(*CASES["hubert-stable-layer-even"], seed=16)
    ours = ours_from(model)
    values, mask = extract(utterances(17, [2500, 1301]))
    with torch.inference_mode():
        ours(values, attention_mask=mask)
        frames = int(ours.frames_for(2500))
        assert len(calls) == 3 and all(m is not None and m.shape == (2, 1, frames, frames) for m in calls)
        calls.clear()
        ours(values[:1], attention_mask=mask[:1])
        assert len(calls) == 3 and all(m is None for m in calls)
