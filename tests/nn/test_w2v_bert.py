"""w2v-BERT 2.0 (mizuoto/nn/w2v_bert.py) and its SeamlessM4T features (mizuoto/audio/seamless_features.py), without
transformers installed.

Against upstream (transformers 4.52.1, the set indextts/w2vbert written by
scripts/parity/indextts_w2vbert_references.py): a subprocess under the parity pins loads the tiny random model from
its published layout with our loader, computes the features of every recorded waveform, and runs the encoder on
upstream's features and on ours; every output must be upstream's bit for bit (features, masks, hidden_states 0, 1,
17 and 18, last_hidden_state, the normalised hidden_states[17] of get_emb), and the LayerDrop draws must advance
a generator as upstream's forward advanced the global one. Then, in process: the checkpoint and input errors,
the layer cut and the stats file.
"""

import json
import sys
from pathlib import Path

import pytest
import torch

from mizuoto.audio import seamless_features
from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn import w2v_bert

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import bit_diff, reference_dir, run_pinned  # noqa: E402

REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "indextts" / "w2vbert"


# ---------------------------------------------------------------------------------------------------
# Against upstream's references (run in the pinned subprocess)


def reference_diffs(root: Path) -> dict:
    """Each compared output -> 0.0 when bitwise upstream's, else the max |diff| (None: shape or dtype differ)."""
    from safetensors.torch import load_file

    info = json.loads((root / "references.json").read_text())
    refs = load_file(str(root / "references.safetensors"))
    model = w2v_bert.load_folder(root / "model")
    cut = w2v_bert.load_folder(root / "model", layers=w2v_bert.INDEXTTS_LAYER)
    stats = w2v_bert.SemanticStats.load(root / "stats.pt", model.config.hidden_size)
    diffs = {}
    for case in info["cases"]:
        name = case["name"]
        waves = [refs[a] for a in case["audio"]]
        audio = waves if case["kind"] == "batch" else waves[0]  # (1, samples), as IndexTTS passes it
        features, mask = seamless_features.features(audio, padding_value=info["padding_value"])
        diffs[case["features"]] = bit_diff(features, refs[case["features"]])
        up_mask = refs[case["mask"]]
        diffs[case["mask"]] = 0.0 if mask.dtype == up_mask.dtype and torch.equal(mask, up_mask) else None
        up_features = refs[case["features"]]
        with torch.no_grad():
            states = model.hidden_states(up_features, up_mask)
            for index, ref in case["hidden_states"].items():
                diffs[ref] = bit_diff(states[int(index)], refs[ref])
            diffs[case["last_hidden_state"]] = bit_diff(model(up_features, up_mask), refs[case["last_hidden_state"]])
            h17 = cut.hidden_state(features, mask)  # our features, 17 layers only
            diffs[f"{name}/emb (ours end to end, 17 layers)"] = bit_diff(stats.normalise(h17), refs[case["emb"]])
            diffs[case["emb"]] = bit_diff(stats.normalise(states[17]), refs[case["emb"]])
    layerdrop = info["layerdrop"]
    generator = torch.Generator().manual_seed(layerdrop["seed"])
    w2v_bert.draw_layerdrop(generator, model.config)
    diffs["layerdrop/rand8_after"] = bit_diff(torch.rand(8, generator=generator), refs["layerdrop/rand8_after"])
    diffs["layerdrop/draws"] = 0.0 if w2v_bert.layerdrop_draws(model.config) == layerdrop["draws_in_eval"] else 1.0
    return diffs


def _reference_names() -> list[str]:
    path = REFERENCES / "references.json"
    if not path.is_file():
        return []
    names = ["layerdrop/rand8_after", "layerdrop/draws"]
    for case in json.loads(path.read_text())["cases"]:
        names += [case["features"], case["mask"], *case["hidden_states"].values(), case["last_hidden_state"],
                  case["emb"], f"{case['name']}/emb (ours end to end, 17 layers)"]
    return names


@pytest.fixture(scope="module")
def ours_pinned():
    return run_pinned(__file__, reference_dir("indextts/w2vbert"), timeout=300)


@pytest.mark.skipif(not _reference_names(), reason="no w2v-BERT references in tests/parity/data/indextts/w2vbert")
@pytest.mark.parametrize("name", _reference_names())
def test_identical_to_upstreams_references(ours_pinned, name):
    assert ours_pinned[name] == 0.0


def test_references_cover_the_cases():
    info = json.loads((REFERENCES / "references.json").read_text())
    kinds = {c["kind"] for c in info["cases"]}
    assert kinds == {"single", "batch"}
    assert info["config"]["num_hidden_layers"] >= 18 and info["config"]["position_embeddings_type"] == "relative_key"
    assert info["layerdrop"]["draws_in_eval"] == info["config"]["num_hidden_layers"]
    assert info["environment"]["ATEN_CPU_CAPABILITY"] == "avx2" and info["environment"]["num_threads"] == 1
    assert info["environment"]["versions"]["transformers"] == "4.52.1"
    size = sum(f.stat().st_size for f in REFERENCES.rglob("*") if f.is_file())
    assert size < 2_500_000


# ---------------------------------------------------------------------------------------------------
# In process


TINY = w2v_bert.W2vBertConfig(hidden_size=16, num_hidden_layers=4, num_attention_heads=2, intermediate_size=24,
                              conv_depthwise_kernel_size=3, left_max_position_embeddings=3,
                              right_max_position_embeddings=2)


def random_state(config: w2v_bert.W2vBertConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(shape, generator=g) * 0.3 for k, shape in w2v_bert.checkpoint_layout(config).items()}


def save_folder(folder: Path, config: w2v_bert.W2vBertConfig, state: dict) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    data = {"model_type": "wav2vec2-bert", **{k: getattr(config, k) for k in config.__dataclass_fields__}}
    (folder / "config.json").write_text(json.dumps(data))
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    return folder


def test_the_published_layout_names():
    layout = w2v_bert.checkpoint_layout(w2v_bert.W2vBertConfig())
    assert layout["feature_projection.projection.weight"] == (1024, 160)
    assert layout["encoder.layers.23.self_attn.distance_embedding.weight"] == (73, 64)
    assert layout["encoder.layers.0.conv_module.depthwise_conv.weight"] == (1024, 1, 31)
    assert layout["encoder.layers.0.conv_module.pointwise_conv1.weight"] == (2048, 1024, 1)
    assert layout["masked_spec_embed"] == (1024,)
    assert len([k for k in layout if k.startswith("encoder.layers.0.")]) == 32
    assert w2v_bert.layerdrop_draws(w2v_bert.W2vBertConfig()) == 24


def test_cut_model_equals_the_full_one_at_its_layer(tmp_path):
    folder = save_folder(tmp_path / "m", TINY, random_state(TINY))
    full, cut = w2v_bert.load_folder(folder), w2v_bert.load_folder(folder, layers=2)
    assert len(cut.encoder.layers) == 2
    x = torch.randn(2, 9, 160)
    mask = torch.tensor([[1] * 9, [1] * 6 + [0] * 3], dtype=torch.int32)
    with torch.no_grad():
        states = full.hidden_states(x, mask)
        assert len(states) == 5 and torch.equal(full(x, mask), states[-1])
        assert torch.equal(cut.hidden_state(x, mask, 2), states[2])
        assert torch.equal(full.hidden_state(x, mask, 2), states[2])
        # padded frames never reach a real one (masked keys, causal convolution): the real frames are the unpadded
        # run's, up to the roundings of other shapes
        torch.testing.assert_close(full(x[1:, :6], mask[1:, :6]), states[-1][1:, :6], rtol=1e-5, atol=1e-5)
    with pytest.raises(InputError, match="2 layers loaded"):
        cut.hidden_state(x, mask, 3)


def test_checkpoint_errors_are_one_line(tmp_path):
    state = random_state(TINY)
    with pytest.raises(CheckpointError, match="lacks 1 tensors"):
        w2v_bert.load_state(TINY, {k: v for k, v in state.items() if k != "encoder.layers.1.ffn2.output_dense.bias"})
    with pytest.raises(CheckpointError, match="has 1 tensors this w2v-BERT does not"):
        w2v_bert.load_state(TINY, {**state, "adapter.proj.weight": torch.zeros(2)})
    bad = dict(state)
    bad["encoder.layers.0.self_attn.linear_q.weight"] = torch.zeros(16, 15)
    with pytest.raises(CheckpointError, match=r"linear_q.weight has shape \(16, 15\)"):
        w2v_bert.load_state(TINY, bad)
    assert "masked_spec_embed" in state  # unused: a file without it loads, one with it misshapen does not
    w2v_bert.load_state(TINY, {k: v for k, v in state.items() if k != "masked_spec_embed"})
    with pytest.raises(CheckpointError, match="masked_spec_embed has shape"):
        w2v_bert.load_state(TINY, {**state, "masked_spec_embed": torch.zeros(3)})
    with pytest.raises(CheckpointError, match="no config.json"):
        w2v_bert.load_folder(tmp_path)
    with pytest.raises(CheckpointError, match="'rotary' is not supported"):
        w2v_bert.W2vBertConfig.from_dict({"position_embeddings_type": "rotary"})
    with pytest.raises(CheckpointError, match="model_type 'wav2vec2'"):
        w2v_bert.W2vBertConfig.from_dict({"model_type": "wav2vec2"})
    with pytest.raises(CheckpointError, match="adapter"):
        w2v_bert.W2vBertConfig.from_dict({"add_adapter": True})
    (tmp_path / "stats.pt").write_bytes(b"not a torch file")
    with pytest.raises(CheckpointError, match="cannot read"):
        w2v_bert.SemanticStats.load(tmp_path / "stats.pt")
    torch.save({"mean": torch.zeros(16)}, tmp_path / "half.pt")
    with pytest.raises(CheckpointError, match="must hold"):
        w2v_bert.SemanticStats.load(tmp_path / "half.pt")
    torch.save({"mean": torch.zeros(8), "var": torch.ones(8)}, tmp_path / "narrow.pt")
    with pytest.raises(CheckpointError, match=r"mean must be a \(16,\) tensor"):
        w2v_bert.SemanticStats.load(tmp_path / "narrow.pt", 16)
    for error in (CheckpointError, InputError):
        assert error.__module__ == "mizuoto.core.errors"


def test_input_errors_are_one_line():
    model = w2v_bert.load_state(TINY, random_state(TINY))
    with pytest.raises(InputError, match=r"must be \(batch, frames, 160\)"):
        model(torch.zeros(1, 5, 80))
    with pytest.raises(InputError, match="no frames"):
        model(torch.zeros(1, 0, 160))
    with pytest.raises(InputError, match="does not match"):
        model(torch.zeros(1, 5, 160), torch.ones(1, 4, dtype=torch.int32))
    with pytest.raises(InputError, match="at least 560 samples"):
        seamless_features.features(torch.zeros(1, 559))
    with pytest.raises(InputError, match="16000 Hz"):
        seamless_features.features(torch.zeros(16000), sample_rate=22050)
    with pytest.raises(InputError, match="mono"):
        seamless_features.features(torch.zeros(2, 16000))
    with pytest.raises(InputError, match="NaN"):
        seamless_features.features(torch.full((16000,), float("nan")))
    with pytest.raises(InputError, match="empty batch"):
        seamless_features.features([])


def test_layerdrop_draws_advance_only_the_given_generator():
    g = torch.Generator().manual_seed(5)
    before = torch.random.get_rng_state()
    w2v_bert.draw_layerdrop(g, TINY)
    assert torch.equal(torch.random.get_rng_state(), before)
    expected = torch.Generator().manual_seed(5)
    for _ in range(4):
        torch.rand((), generator=expected)
    assert torch.equal(torch.rand(3, generator=g), torch.rand(3, generator=expected))


def test_the_encoder_draws_nothing():
    model = w2v_bert.load_state(TINY, random_state(TINY))
    before = torch.random.get_rng_state()
    with torch.no_grad():
        model(torch.randn(1, 7, 160, generator=torch.Generator().manual_seed(1)))
    assert torch.equal(torch.random.get_rng_state(), before)


if __name__ == "__main__":  # the pinned subprocess of the tests against upstream
    folder = Path(sys.argv[1])  # the set valid on this machine (helpers.reference_dir)
    print(json.dumps(reference_diffs(folder) if (folder / "references.json").is_file() else {}))
