"""CosyVoice's yaml read as data (engines/cosyvoice/hyperyaml.py) and turned into our configs (config.py).

The yaml below is written here in HyperPyYAML's dialect with the released models' sizes (ENGINES.md §3): the
tags a released file uses (!apply, !new, !name, !ref with arithmetic), nothing of it run.
"""

import pytest

from mizuoto.core.errors import CheckpointError
from mizuoto.engines.cosyvoice import config, hyperyaml

COMMON = """
__set_seed1: !apply:random.seed [1986]
sample_rate: 24000
llm_input_size: 896
spk_embed_dim: 192
token_frame_rate: 25
token_mel_ratio: 2
chunk_size: 25
num_decoding_left_chunks: -1
cfm: &cfm
    sigma_min: 1e-06
    solver: 'euler'
    t_scheduler: 'cosine'
    training_cfg_rate: 0.2
    inference_cfg_rate: 0.7
"""
LLM = """
llm: !new:cosyvoice.llm.llm.{cls}
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_input_size>
    speech_token_size: 6561
    llm: !new:cosyvoice.llm.llm.Qwen2Encoder
        pretrain_path: ''
    sampling: !name:cosyvoice.utils.common.ras_sampling
        top_p: 0.8
        top_k: 25
        win_size: 10
        tau_r: 0.1
"""
CV2_FLOW = """
flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithXvec
    input_size: 512
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    vocab_size: 6561
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
    encoder: !new:cosyvoice.transformer.upsample_encoder.UpsampleConformerEncoder
        output_size: 512
        attention_heads: 8
        linear_units: 2048
        num_blocks: 6
        static_chunk_size: !ref <chunk_size>
    decoder: !new:cosyvoice.flow.flow_matching.CausalConditionalCFM
        in_channels: 240
        cfm_params: !new:omegaconf.DictConfig
            content: *cfm
        estimator: !new:cosyvoice.flow.decoder.CausalConditionalDecoder
            in_channels: 320
            out_channels: 80
            channels: [256]
            attention_head_dim: 64
            n_blocks: 4
            num_mid_blocks: 12
            num_heads: 8
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
"""
CV3_FLOW = """
flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithDiT
    input_size: 80
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    vocab_size: 6561
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
    pre_lookahead_layer: !new:cosyvoice.transformer.upsample_encoder.PreLookaheadLayer
        in_channels: 80
        channels: 1024
        pre_lookahead_len: 3
    decoder: !new:cosyvoice.flow.flow_matching.CausalConditionalCFM
        cfm_params: !new:omegaconf.DictConfig
            content: *cfm
        estimator: !new:cosyvoice.flow.DiT.dit.DiT
            dim: 1024
            depth: 22
            heads: 16
            dim_head: 64
            ff_mult: 2
            mel_dim: 80
            mu_dim: 80
            spk_dim: 80
            static_chunk_size: !ref (<chunk_size>) * <token_mel_ratio>
"""
CV2 = COMMON + LLM.format(cls="Qwen2LM") + CV2_FLOW
CV3 = COMMON + LLM.format(cls="CosyVoice3LM") + CV3_FLOW


def test_the_released_sizes_of_cosyvoice_2():
    doc = hyperyaml.load(CV2)
    assert config.version(doc) == 2
    flow = config.flow_config(doc)
    assert flow.encoder.size == 512 and flow.encoder.blocks == 6 and flow.encoder.static_chunk_size == 25
    assert flow.unet.channels == (256,) and flow.unet.num_mid_blocks == 12 and flow.unet.static_chunk_size == 50
    assert flow.cfg_rate == 0.7 and flow.input_size == 512
    assert config.ras_params(doc) == config.RasParams(0.8, 25, 10, 0.1)
    assert doc["__set_seed1"] == hyperyaml.Node("apply", "random.seed", {"args": [1986]})  # read, never called


def test_the_released_sizes_of_cosyvoice_3():
    doc = hyperyaml.load(CV3)
    assert config.version(doc) == 3
    flow = config.flow_config(doc)
    assert flow.dit.depth == 22 and flow.dit.dim == 1024 and flow.dit.static_chunk_size == 50
    assert flow.pre_lookahead_channels == 1024 and flow.input_size == 80 and flow.unet is None


@pytest.mark.parametrize("text,match", [
    ("a: [", "not valid YAML"),
    ("- 1\n- 2", "not a mapping"),
    ("x: !ref <missing>", "does not define"),
    ("a: !ref <b>\nb: !ref <a>", "circular"),
    ("a: 2\nb: !ref <a>.__class__", "as data"),
    ("a: 2\nb: !ref __import__('os') * <a>", "as data"),
])
def test_what_cannot_be_read_as_data_is_a_one_line_error(text, match):
    with pytest.raises(CheckpointError, match=match) as caught:
        hyperyaml.load(text)
    assert "\n" not in str(caught.value)


def test_a_yaml_of_another_model_or_mixed_versions_is_refused():
    with pytest.raises(CheckpointError, match="CosyVoice2-0.5B and Fun-CosyVoice3-0.5B"):
        config.version(hyperyaml.load(CV2.replace("CausalMaskedDiffWithXvec", "MaskedDiffWithXvec")))
    with pytest.raises(CheckpointError, match="mixes CosyVoice 3's LM with CosyVoice 2's"):
        config.version(hyperyaml.load(COMMON + LLM.format(cls="CosyVoice3LM") + CV2_FLOW))
    with pytest.raises(CheckpointError, match="no `flow:`"):
        config.version(hyperyaml.load(COMMON + LLM.format(cls="Qwen2LM")))
    with pytest.raises(CheckpointError, match="lacks 'num_blocks'"):
        config.flow_config(hyperyaml.load(CV2.replace("        num_blocks: 6\n", "")))
