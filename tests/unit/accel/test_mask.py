"""MaskInfo semantics, the DEBUG check against dense masks, and count mode."""

import json
import subprocess
import sys

import pytest
import torch

from mizuoto.runtime import accel
from mizuoto.runtime.accel import dispatch, mask
from mizuoto.runtime.accel.mask import MaskInfo

SITE = accel.Site("tests.mask.site")


def test_right_and_left_padding_keys():
    right = MaskInfo.from_lengths(torch.tensor([3, 5]), 5, "right")
    left = MaskInfo.from_lengths(torch.tensor([3, 5]), 5, "left")
    assert right.keys.tolist() == [[True, True, True, False, False], [True] * 5]
    assert left.keys.tolist() == [[False, False, True, True, True], [True] * 5]
    assert right.seqlens().tolist() == [3, 5] and right.seqlens().dtype == torch.int32
    assert left.leftpad().tolist() == [2, 0] and left.leftpad().dtype == torch.int32
    assert right.structure() == ("right", False, False)


def test_bottom_right_causal_and_window():
    # 2 new queries against 5 keys: query i sits at position i + 3.
    info = MaskInfo.full(1, 5, causal=True)
    assert info.dense(2)[0, 0].int().tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    windowed = MaskInfo.full(1, 5, causal=True, window=2)
    assert windowed.dense(2)[0, 0].int().tolist() == [[0, 0, 1, 1, 0], [0, 0, 0, 1, 1]]
    assert windowed.structure() == ("left", True, True)


def test_bad_construction():
    with pytest.raises(ValueError, match="padding"):
        MaskInfo(torch.ones(1, 2, dtype=torch.bool), padding="middle")
    with pytest.raises(ValueError, match="window"):
        MaskInfo(torch.ones(1, 2, dtype=torch.bool), window=0)


def qkv(b=2, lq=2, lk=5):
    return torch.randn(b, 2, lq, 8), torch.randn(b, 2, lk, 8), torch.randn(b, 2, lk, 8)


def test_check_accepts_the_dense_mask_it_describes():
    info = MaskInfo.from_lengths(torch.tensor([4, 5]), 5, "left", causal=True)
    q, k, _ = qkv()
    dense = info.dense(2)
    mask.check(info, dense, False, q, k)
    additive = torch.zeros(dense.shape).masked_fill(~dense, torch.finfo(torch.float32).min)
    mask.check(info, additive, False, q, k)
    # Top-left causal with equal lengths is the same as bottom-right.
    q5 = torch.randn(2, 2, 5, 8)
    mask.check(MaskInfo.full(2, 5, causal=True), None, True, q5, k)


@pytest.mark.parametrize("change", ["wrong key", "not causal", "not contiguous"])
def test_check_rejects_a_mismatch(change):
    info = MaskInfo.from_lengths(torch.tensor([4, 5]), 5, "right", causal=True)
    q, k, _ = qkv()
    dense = info.dense(2).clone()
    if change == "wrong key":
        dense[0, 0, 0, 0] = False
    elif change == "not causal":
        info = MaskInfo.from_lengths(torch.tensor([4, 5]), 5, "right")
    else:
        keys = info.keys.clone()
        keys[1, 1] = False
        info = MaskInfo(keys, causal=True, padding="right")
        dense = info.dense(2)
    with pytest.raises(AssertionError, match="mask_info"):
        mask.check(info, dense, False, q, k)


def test_debug_mode_checks_every_call(monkeypatch):
    info = MaskInfo.from_lengths(torch.tensor([4, 5]), 5, "right")
    q, k, v = qkv()
    monkeypatch.setattr(dispatch, "DEBUG", True)
    accel.attention(q, k, v, site=SITE, mask=info.dense(2), mask_info=info)
    with pytest.raises(AssertionError, match="does not describe"):
        accel.attention(q, k, v, site=SITE, mask=None, mask_info=info)
    monkeypatch.setattr(dispatch, "DEBUG", False)
    accel.attention(q, k, v, site=SITE, mask=None, mask_info=info)  # unchecked when off


def test_count_mode_records_sites():
    code = ("import json; from mizuoto.host import load_model, speak; from mizuoto.runtime.accel import dispatch; "
            "speak(load_model('dummy', device='cpu'), 'hi', seed=1); print(json.dumps(sorted(dispatch.SEEN)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "MIZUOTO_TEST_ACCEL": "count"})
    assert json.loads(out.stdout) == ["dummy.attn", "qwen.attn"]
