"""CosyVoice's tiny parts as the reference sets record them, built on our side: the flows of cosyvoice_flow, the
LMs of cosyvoice_llm and the HiFTs of cosyvoice_hift (and of cosyvoice_model, which reuses all three recipes).
Shared by the sets' tests so that each part is rebuilt one way."""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from helpers import parity_module

from mizuoto.engines.cosyvoice import dit, flow, llm, unet
from mizuoto.engines.cosyvoice.conformer import EncoderConfig
from mizuoto.nn import hift, hift_causal, hift_sine2
from mizuoto.nn.qwen import QwenConfig

weights = parity_module("cosyvoice_weights")
hift_state = parity_module("seedvc_weights").hift_state  # cosyvoice_hift's writer fills HiFT with these


def unet_config(c: dict) -> unet.UNetConfig:
    return unet.UNetConfig(c["in_channels"], c["out_channels"], tuple(c["channels"]), c["attention_head_dim"],
                           c["n_blocks"], c["num_mid_blocks"], c["num_heads"], c["static_chunk_size"])


def flow_configs(configs: dict) -> dict:
    """cosyvoice_flow's recorded constructor arguments -> {"cv2", "cv3"}: FlowConfig."""
    e, d, look = configs["encoder"], configs["dit"], configs["lookahead"]
    encoder = EncoderConfig(e["output_size"], e["attention_heads"], e["linear_units"], e["num_blocks"],
                            static_chunk_size=e["static_chunk_size"])
    return {
        "cv2": flow.FlowConfig(2, encoder=encoder, unet=unet_config(configs["unet"])),
        "cv3": flow.FlowConfig(3, input_size=look["in_channels"], pre_lookahead_channels=look["channels"],
                               dit=dit.DiTConfig(d["dim"], d["depth"], d["heads"], d["dim_head"], d["ff_mult"],
                                                 d["mel_dim"], d["mu_dim"], d["spk_dim"], d["static_chunk_size"])),
    }


def flows(recorded: dict, refs: dict) -> dict:
    """cosyvoice_flow's models with its parameters and upstream's buffers (a flow.pt carries the DiT's inv_freq):
    {"cv2", "cv3": Flow, "unet2": the two-level U-Net}."""
    cfg = flow_configs(recorded["configs"])
    models = {"cv2": flow.Flow(cfg["cv2"]), "cv3": flow.Flow(cfg["cv3"]),
              "unet2": unet.CausalConditionalDecoder(unet_config(recorded["configs"]["unet_two_levels"]))}
    for name, model in models.items():
        state = weights.state(recorded["entries"][name], recorded["seeds"][name])
        state.update({b: refs[f"{name}/buffer/{b}"] for b in recorded["buffers"][name]})
        model.load_state_dict(state)
        model.eval()
    return models


def qwen_config(q: dict) -> QwenConfig:
    return QwenConfig(q["hidden_size"], q["intermediate_size"], q["num_hidden_layers"], q["num_attention_heads"],
                      q["num_key_value_heads"], q["hidden_size"] // q["num_attention_heads"], q["rope_theta"],
                      q["rms_norm_eps"], qk_norm=False, qkv_bias=True, vocab_size=q["vocab_size"])


def lm(recorded: dict, version: str) -> llm.CosyVoiceLM:
    """cosyvoice_llm's LM of `version` ("cv2" / "cv3") with its parameters."""
    model = llm.CosyVoiceLM(llm.LMConfig(int(version[2]), qwen_config(recorded["qwen"]))).eval()
    model.load_state_dict(weights.lm_state(recorded["entries"][version], recorded["seeds"][version],
                                           recorded["speech_tokens"]))
    return model


def hift_config(entry: dict):
    section = {**entry["hift"], "f0_predictor": entry["f0_predictor"]}
    if entry["class"] == "CausalHiFTGenerator":
        return hift_causal.CausalHiFTConfig.from_cosyvoice(section)
    return hift.HiFTConfig.from_cosyvoice(section)


def vocoder(entry: dict):
    """A recorded HiFT recipe -> (model, three draws once the causal source module is built, or None)."""
    config = hift_config(entry)
    layout = {k: tuple(v) for k, v in entry["layout"].items()}
    state = hift_state(layout, entry["weights_seed"], entry["post_gain"])
    if entry["class"] != "CausalHiFTGenerator":
        return hift.load_hift(state, config), None
    g = torch.Generator().manual_seed(entry["seed"])
    hift_causal.predictor_init_draws(g, config.f0_predictor)
    noise = hift_sine2.CausalNoise.capture(g)
    return hift_causal.load_causal_hift(state, config, noise=noise), torch.rand(3, generator=g)


def release_parts(sets: Path, version: str) -> dict:
    """The tiny release of `version` ("cv2" / "cv3") from the committed sets under `sets`, as
    scripts/parity/cosyvoice_release.py writes it for upstream."""
    return parity_module("cosyvoice_release").parts_from_sets(sets, version)


# ---------------------------------------------------------------------------------------------------------
# The tiny release of cosyvoice_e2e (and cosyvoice_stream, which runs on it), rebuilt as its writer built it

E2E_S3_ONNX = {"cv2": "speech_tokenizer_v2_tiny.onnx", "cv3": "speech_tokenizer_v3_tiny.onnx"}  # the writer's S3_ONNX


@functools.cache
def e2e_committed(root: Path) -> tuple[dict, dict]:
    """cosyvoice_e2e's references.json and tensors (the set folder `root`)."""
    import json

    from safetensors.torch import load_file

    return json.loads((root / "references.json").read_text()), load_file(str(root / "references.safetensors"))


def e2e_speakers(refs: dict) -> dict:
    """spk2info.pt as the writer left it: the zero-shot speaker add_zero_shot_spk saved and a trained one."""
    saved = {k: refs[f"speaker/saved/{k}"] for k in ("prompt_text", "llm_prompt_speech_token", "prompt_speech_feat",
                                                      "flow_embedding")}
    saved["flow_prompt_speech_token"] = saved["llm_prompt_speech_token"]  # the same tokens, as upstream stores them
    saved["llm_embedding"] = saved["flow_embedding"]
    return {"saved": saved, "trained": {"embedding": refs["speaker/trained/embedding"]}}


def e2e_release(root: Path, out: Path, version: str) -> Path:
    """The release folder of `version` that cosyvoice_e2e's writer gave upstream, under `out`."""
    release = parity_module("cosyvoice_release")
    sets = root.parent
    parts = release.parts_from_sets(sets, version)
    tokenizer = release.tokenizer_folder(sets, out / f"tokenizer_{version}")
    _, refs = e2e_committed(root)
    return release.write_release(out / version, version, tokenizer_files=tokenizer,
                                 speech_tokenizer=sets / "nn" / "s3tokenizer" / E2E_S3_ONNX[version],
                                 campplus=root / "campplus.onnx", spk2info=e2e_speakers(refs), **parts)


def e2e_recording(refs: dict, info: dict, name: str) -> tuple[torch.Tensor, int]:
    """A recording as upstream's load_wav has it before resampling: int16 / 32768, the channels' mean."""
    rate = info["recordings"][name][0]
    samples = refs[f"recording/{name}"].to(torch.float32) / 32768.0
    return samples.T.contiguous().mean(dim=0), rate
