"""CosyVoice's S3 speech tokenizers v2 / v3 (mizuoto/nn/s3_tokenizer.py, s3_tokenizer_weights.py), without upstream.

Against tests/parity/data/nn/s3tokenizer (scripts/parity/s3tokenizer_references.py: s3tokenizer 0.3.0's
S3TokenizerV2 / S3TokenizerV3 and log_mel_spectrogram, torch 2.13), compared bitwise in a pinned subprocess (one
thread, avx2, MKL_CBWR, oneDNN off):
- the 128-band log-mel of four waveforms (1 s and 3 s speech-like, odd-length noise, 0.05 s), of (1, samples) as
  CosyVoice calls it, and of a batch of two sharing one maximum;
- per tiny model (v2: 128 wide, 2 heads, 2 blocks; v3: 64 wide, 1 head, 3 blocks), loaded from s3tokenizer's state
  dict: quantize's tokens and lengths (values and dtypes) and the encoder's output for each clip alone, for padded
  batches of two and three, and the long-audio path (30 s windows merged: a clip of 3123 frames beside a short one,
  5300 frames, 3001 beside 2999);
- the same models read from ONNX files in the released files' naming (v2: LayerNormalization nodes, onnx::Conv_2216..
  2219, onnx::MatMul_2536; v3: decomposed LayerNorms, biases as Constant nodes): the parameters bitwise the state
  dict's, the tokens upstream's, and onnxruntime's recorded tokens (the writer measured its encoder output within
  5.5e-6 of torch's; the tokens all agree).
In process: names, sizes read from the tensors, one-line errors for bad files and bad input, padding frames that
change nothing, no host reads on the short path, building without touching the global generator.
"""

import functools
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn import s3_tokenizer as s3
from mizuoto.nn import s3_tokenizer_weights as weights
from mizuoto.nn.onnx_weights import read_onnx

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import HostReads, reference_dir, run_pinned  # noqa: E402

SET = "nn/s3tokenizer"
REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "nn" / "s3tokenizer"
KINDS = ("v2", "v3")


def diff(ours: torch.Tensor, theirs: torch.Tensor):
    """0.0 when bitwise equal (same shape and dtype); the max abs difference otherwise; None when shape or dtype
    differ."""
    ours = ours.detach()
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return None
    return 0.0 if torch.equal(ours, theirs) else (ours.double() - theirs.double()).abs().max().item()


def load_references(folder: Path):
    from mizuoto.nn.tensor_files import read_safetensors

    return read_safetensors(folder / "references.safetensors"), json.loads((folder / "references.json").read_text())


def tiled_mel(mel: torch.Tensor, frames: int) -> torch.Tensor:
    """The writer's long log-mel: a stored one repeated along time and cut."""
    return mel.repeat(1, -(-frames // mel.shape[1]))[:, :frames].contiguous()


def case_input(refs, case: dict):
    """The (mel, lengths) a model case fed quantize: a stored clip's log-mel alone, or the stored ones padded."""
    if case.get("mel"):
        return refs[case["mel"]][None], refs[case["mel_len"]]
    if "frames" in case:
        return s3.pad_mels([tiled_mel(refs[f"mel/{w}"], n) for w, n in zip(case["rows"], case["frames"], strict=True)])
    return s3.pad_mels([refs[f"mel/{w}"] for w in case["rows"]])


def model_diffs(model, refs, cases, kind, prefix) -> dict:
    out = {}
    for name, case in cases.items():
        if not name.startswith(f"{kind}/") or "codes" not in case:
            continue
        mel, lengths = case_input(refs, case)
        out[f"{prefix}{name}/mel_len"] = diff(lengths, refs[case["mel_len"]])
        codes, code_len = model.quantize(mel, lengths)
        out[f"{prefix}{name}/codes"] = diff(codes, refs[case["codes"]])
        out[f"{prefix}{name}/code_len"] = diff(code_len, refs[case["code_len"]])
        if "hidden" in case:
            with torch.inference_mode():
                hidden, hidden_len = model.encode(mel, lengths)
            out[f"{prefix}{name}/hidden"] = diff(hidden, refs[case["hidden"]])
            out[f"{prefix}{name}/hidden_len"] = diff(hidden_len, refs[case["hidden_len"]])
    return out


def reference_diffs(folder: Path) -> dict:
    """Every stored comparison, ours against upstream's: name -> diff()."""
    refs, info = load_references(folder)
    cases = info["cases"]
    out = {}
    for name, case in cases.items():
        if not name.startswith("mel/"):
            continue
        if name == "mel/batch":
            rows = zip(case["waves"], case["gain"], strict=True)
            waves = [refs[f"wave/{w}"][:case["stop"]] * gain for w, gain in rows]
            out[name] = diff(s3.log_mel(torch.stack(waves)), refs[case["out"]])
        elif name.endswith("/2d"):
            out[name] = diff(s3.log_mel(refs[case["wave"]][None]), refs[case["out"]])
        else:
            out[name] = diff(s3.log_mel(refs[case["wave"]]), refs[case["out"]])
    for kind in KINDS:
        model = weights.load_s3_tokenizer(folder / cases[kind]["weights"])
        out.update(model_diffs(model, refs, cases, kind, ""))
        onnx = cases[f"onnx/{kind}"]
        from_onnx = weights.load_s3_tokenizer(folder / onnx["file"])
        state = from_onnx.state_dict()
        out[f"onnx/{kind}/parameters"] = 0.0 if state.keys() == model.state_dict().keys() and all(
            torch.equal(v, model.state_dict()[k]) for k, v in state.items()) else None
        out.update(model_diffs(from_onnx, refs, cases, kind, "onnx/"))
        for name, entry in onnx["cases"].items():  # onnxruntime's tokens, within each item's length
            mel, lengths = case_input(refs, cases[name])
            codes, code_len = from_onnx.quantize(mel, lengths)
            valid = torch.arange(codes.shape[1])[None, :] < code_len[:, None]
            ort = refs[entry["indices"]]
            same = ort.shape == codes.shape and bool(((ort == codes) | ~valid).all())
            out[f"ort/{name}"] = 0.0 if same else None
    return out


# ---------------------------------------------------------------------------------------------------------
# Against upstream's references (pinned subprocess)


@functools.cache
def pinned_diffs() -> dict:
    return run_pinned(__file__, reference_dir(SET), timeout=600)


def test_references_are_reproduced_bit_for_bit():
    got = pinned_diffs()
    cases = json.loads((REFERENCES / "references.json").read_text())["cases"]
    assert sum(n.startswith("mel/") for n in got) == 6
    for kind in KINDS:
        for prefix in ("", "onnx/"):
            for clip in ("speech_1s", "speech_3s", "noise_11713", "short_801"):
                assert {f"{prefix}{kind}/one/{clip}/{k}" for k in ("codes", "code_len", "hidden")} <= set(got)
            for batch in ("batch2", "batch3"):
                assert f"{prefix}{kind}/{batch}/hidden" in got
        assert got[f"onnx/{kind}/parameters"] == 0.0
        assert sum(n.startswith(f"ort/{kind}/") for n in got) == 6
        assert cases[kind]["distinct_codes"] >= 100  # diverse codes, not one id
    assert {"v2/long_mixed/codes", "v3/long_three/codes", "v3/long_two/codes"} <= set(got)
    bad = {name: value for name, value in got.items() if value != 0.0}
    assert not bad, bad


# ---------------------------------------------------------------------------------------------------------
# In process


@functools.cache
def stored_state(kind: str) -> dict:
    from mizuoto.nn.tensor_files import read_safetensors

    return read_safetensors(REFERENCES / f"weights_{kind}.safetensors")


def small_model(kind: str = "v2") -> s3.S3Tokenizer:
    return weights.build_s3_tokenizer(stored_state(kind))


def test_parameter_names_are_upstreams_and_the_sizes_come_from_the_tensors():
    with torch.device("meta"):
        keys = list(s3.S3Tokenizer(s3.V3).state_dict())
    assert len(keys) == 4 + 12 * 16 + 2
    for key in ("encoder.conv1.weight", "encoder.conv2.bias", "encoder.blocks.11.attn.query.bias",
                "encoder.blocks.0.attn.key.weight", "encoder.blocks.3.attn.fsmn_block.weight",
                "encoder.blocks.5.attn_ln.bias", "encoder.blocks.0.mlp.2.weight", "encoder.blocks.7.mlp_ln.weight",
                "quantizer._codebook.project_down.weight"):
        assert key in keys, key
    assert "encoder.blocks.0.attn.key.bias" not in keys
    assert weights.config_from_state(stored_state("v2")) == s3.S3TokenizerConfig(128, 128, 2, 2)
    assert weights.config_from_state(stored_state("v3")) == s3.S3TokenizerConfig(128, 64, 1, 3)
    for config in (s3.V2, s3.V3):
        with torch.device("meta"):
            assert weights.config_from_state(s3.S3Tokenizer(config).state_dict()) == config
    assert (s3.V2.n_state, s3.V2.n_head, s3.V2.n_layer, s3.V3.n_layer) == (1280, 20, 6, 12)


def test_both_onnx_namings_read_the_stored_weights_bitwise():
    for kind in KINDS:
        graph = read_onnx(REFERENCES / f"speech_tokenizer_{kind}_tiny.onnx")
        state, naming = weights.onnx_state(graph)
        assert naming == kind
        stored = stored_state(kind)
        assert state.keys() == stored.keys() and all(torch.equal(state[k], stored[k]) for k in stored)
        other = "v3" if kind == "v2" else "v2"
        with pytest.raises(CheckpointError, match=f"speech_tokenizer_{other}.onnx's naming") as error:
            weights.onnx_state(graph, other)
        assert "\n" not in str(error.value)
    v2 = read_onnx(REFERENCES / "speech_tokenizer_v2_tiny.onnx")
    assert {"onnx::Conv_2216", "onnx::Conv_2219", "onnx::MatMul_2536", "quantizer.project_in.bias"} <= set(
        v2.initializers)
    assert any(n.op_type == "LayerNormalization" and n.name == "/blocks.1/mlp_ln/LayerNormalization" for n in v2.nodes)
    v3 = read_onnx(REFERENCES / "speech_tokenizer_v3_tiny.onnx")
    assert "blocks.2.attn.fsmn_block.weight" in v3.initializers
    assert not any(n.op_type == "LayerNormalization" for n in v3.nodes)
    bias = next(n for n in v3.nodes if n.name == "/blocks.0/attn/query/Add")
    assert not any(i in v3.initializers for i in bias.inputs)  # the bias is a Constant node's
    assert any(v3.producer(i) is not None and v3.producer(i).op_type == "Constant" for i in bias.inputs)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("change", ["missing", "shape"])
def test_an_onnx_file_without_a_tensor_or_with_a_wrong_one_is_one_line(kind, change):
    graph = read_onnx(REFERENCES / f"speech_tokenizer_{kind}_tiny.onnx")
    target = "blocks.1.attn.fsmn_block.weight"
    if change == "missing":
        del graph.initializers[target]
    else:
        graph.initializers[target] = np.zeros((3, 1, 31), dtype=np.float32)
    with pytest.raises(CheckpointError) as error:
        weights.onnx_state(graph, kind, where="tiny.onnx")
    message = str(error.value)
    assert "\n" not in message and "tiny.onnx" in message and "encoder.blocks.1.attn.fsmn_block.weight" in message
    assert ("lacks" if change == "missing" else "has shape (3, 1, 31), expected (") in message


def test_the_loader_takes_onnx_files_and_state_dicts(tmp_path):
    torch.save(stored_state("v3"), tmp_path / "v3.pt")
    a = weights.load_s3_tokenizer(tmp_path / "v3.pt")
    (tmp_path / "speech_tokenizer_v2.onnx").write_bytes((REFERENCES / "speech_tokenizer_v2_tiny.onnx").read_bytes())
    b = weights.load_s3_tokenizer(tmp_path / "speech_tokenizer_v2.onnx")  # the naming from the file name
    assert a.config.n_layer == 3 and b.config.n_layer == 2
    assert not b.training and not any(p.requires_grad for p in b.parameters())
    (tmp_path / "speech_tokenizer_v3.onnx").write_bytes((REFERENCES / "speech_tokenizer_v2_tiny.onnx").read_bytes())
    with pytest.raises(CheckpointError, match="speech_tokenizer_v3.onnx's naming"):
        weights.load_s3_tokenizer(tmp_path / "speech_tokenizer_v3.onnx")
    with pytest.raises(CheckpointError, match="not a file"):
        weights.load_s3_tokenizer(tmp_path / "absent.onnx")
    with pytest.raises(InputError, match="'v4'"):
        weights.onnx_state(read_onnx(REFERENCES / "speech_tokenizer_v3_tiny.onnx"), "v4")


@pytest.mark.parametrize("change", ["missing", "unexpected", "shape", "no conv1", "heads"])
def test_a_wrong_state_dict_is_one_line(change):
    state = dict(stored_state("v2"))
    if change == "missing":
        del state["encoder.blocks.1.attn.value.bias"]
    elif change == "unexpected":
        state["encoder.blocks.0.attn.key.bias"] = torch.zeros(128)
    elif change == "shape":
        state["encoder.blocks.0.mlp.0.weight"] = torch.zeros(500, 128)
    elif change == "no conv1":
        del state["encoder.conv1.weight"]
    else:
        state["encoder.conv1.weight"] = torch.zeros(96, 128, 3)
    with pytest.raises(CheckpointError) as error:
        weights.build_s3_tokenizer(state)
    assert "\n" not in str(error.value)


def test_building_draws_nothing_from_the_global_generator():
    before = torch.random.get_rng_state()
    small_model("v3")
    assert torch.equal(torch.random.get_rng_state(), before)


@pytest.mark.parametrize("bad", [dict(n_state=96, n_head=2), dict(n_layer=0), dict(n_mels=True)])
def test_bad_configs_are_one_line(bad):
    with pytest.raises(InputError):
        s3.S3TokenizerConfig(**{"n_state": 128, "n_head": 2, **bad})


def test_padding_frames_change_nothing_and_lengths_follow_the_convolutions():
    model = small_model("v2")
    g = torch.Generator().manual_seed(3)
    mels = [torch.randn(128, n, generator=g) for n in (37, 20, 1)]
    mel, lengths = s3.pad_mels(mels)
    assert mel.shape == (3, 128, 37) and lengths.tolist() == [37, 20, 1] and lengths.dtype == torch.int32
    noisy = mel.clone()
    for i, n in enumerate(lengths.tolist()):
        noisy[i, :, n:] = 7.0
    codes, code_len = model.quantize(mel, lengths)
    again, again_len = model.quantize(noisy, lengths)
    assert codes.shape == (3, 10) and codes.dtype == torch.int32 and code_len.tolist() == [10, 5, 1]
    assert torch.equal(codes, again) and torch.equal(code_len, again_len)
    assert int(codes.min()) >= 0 and int(codes.max()) < s3.CODEBOOK_SIZE
    with torch.inference_mode():
        hidden, _ = model.encode(mel, lengths.long())
    assert hidden.shape == (3, 10, 128)


def test_no_host_reads_on_the_short_path():
    model = small_model("v3")
    mel, lengths = s3.pad_mels([torch.randn(128, n) for n in (64, 41)])
    with torch.inference_mode(), HostReads() as mode:
        model.quantize(mel, lengths)
    assert mode.reads == []


def test_the_long_path_merges_windows_at_their_seams():
    windows = [list(range(750)), list(range(1000, 1750)), list(range(2000, 2025))]
    merged = s3.merge_windows(windows)
    assert merged == list(range(700)) + list(range(1050, 1700)) + []  # the last is shorter than a seam
    assert s3.merge_windows([[1, 2, 3]]) == [1, 2, 3]
    assert (s3.WINDOW_FRAMES, s3.STRIDE_FRAMES, s3.SEAM_TOKENS) == (3000, 2600, 50)


def test_the_log_mel_and_speech_tokens():
    wave = torch.randn(16000, generator=torch.Generator().manual_seed(1)) * 0.1
    mel = s3.log_mel(wave)
    assert mel.shape == (128, 100) and torch.equal(s3.log_mel(wave[None])[0], mel)
    assert s3.log_mel(wave, padding=160).shape == (128, 101)
    tokens = s3.speech_tokens(small_model("v2"), wave)
    assert tokens.shape == (1, 25) and tokens.dtype == torch.int32  # 25 tokens a second


@pytest.mark.parametrize(("call", "words"), [
    (lambda m: m.quantize(torch.zeros(1, 80, 10), torch.tensor([10])), "128, frames"),
    (lambda m: m.quantize(torch.zeros(1, 128, 10), torch.tensor([10.0])), "integer lengths"),
    (lambda m: m.quantize(torch.zeros(2, 128, 10), torch.tensor([10])), "integer lengths"),
    (lambda m: m.quantize(torch.zeros(1, 128, 0), torch.tensor([0])), "at least one"),
    (lambda m: m.encode(torch.zeros(1, 128, 9000), torch.tensor([9000])), "8192 frames"),
    (lambda m: s3.log_mel(torch.zeros(100)), "more than 200"),
    (lambda m: s3.log_mel(torch.zeros(1000, dtype=torch.int16)), "float"),
    (lambda m: s3.log_mel(torch.zeros(1000), n_mels=64), "80 and 128"),
    (lambda m: s3.speech_tokens(m, torch.zeros(2, 1000)), "one mono clip"),
    (lambda m: s3.pad_mels([]), "non-empty"),
])
def test_bad_input_is_one_line(call, words):
    with pytest.raises(InputError, match=words) as error:
        call(small_model("v2"))
    assert "\n" not in str(error.value)


if __name__ == "__main__":  # the pinned subprocess of the reference test
    torch.set_num_threads(1)
    print(json.dumps(reference_diffs(Path(sys.argv[1]))))
