#!/usr/bin/env python
"""Reference outputs of IndexTTS 2's reference-audio path and acoustic back half (s2mel, BigVGAN), written by
upstream's own code from an index-tts/index-tts checkout (GitHub only: tests/fallback.py compares on a machine whose
floats differ).

    python scripts/parity/indextts_s2mel_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/indextts_s2mel_references.py OUTDIR --checkout PATH --spread   # how far it moves

The interpreter: scripts/parity/indextts_upstream_env.sh (torch 2.13.0, librosa 0.10.2.post1 with soxr, omegaconf,
munch, huggingface_hub, torchaudio's pure-Python parts). indextts/infer_v2.py is imported for its
IndexTTS2._load_and_cut_audio, called unbound on WAV files (float32 samples: soundfile reads back the stored
values); the modules imported only for other work are stubbed: modelscope (QwenEmotion), matplotlib (BigVGAN's
plotting helpers), indextts.utils.tokenizer (IndexTTS 2.5) and indextts.s2mel.dac.nn.quantize (the regulator's
VectorQuantize, built only with vector_quantize; its package imports descript-audiotools).

What infer_v2.py's infer_generator does, called as it calls it:
- the reference: `_load_and_cut_audio(path, 15)` (librosa.load at its default 22050 Hz: to mono, soxr_hq, then
  the first 15 s), `torchaudio.transforms.Resample(sr, 22050)` and `(sr, 16000)` of that, and the emotion prompt's
  `_load_and_cut_audio(path, 15, sr=16000)`; for clips at 44.1 kHz stereo, 48, 24, 22.05, 16 kHz and 8 kHz with
  three channels, and one 15.5 s clip (cut; stored as its sha256 with head and tail); the Resample transforms
  alone at 44.1, 48, 24, 16 and 22.05 kHz (identity) to 22.05 and 16 kHz;
- `mel_fn` as IndexTTS2.__init__ builds it from the s2mel section (mel_spectrogram, n_fft 1024, hop 256, 80 mels,
  center False), also with a config fmax other than "None" (upstream then takes 8000 whatever the value);
- `kaldi.fbank(audio_16k, num_mel_bins=80, dither=0, sample_frequency=16000)` minus its mean, CAM++'s style,
  the codec's S_ref (quantize of given w2v-BERT features) and
  `prompt_condition = length_regulator(S_ref, ylens=[ref mel frames], n_quantizers=3, f0=None)[0]`;
- the back half on a given GPT latent (1, T, 1280) and codes: gpt_layer, `vq2emb(codes.unsqueeze(1))` + latent,
  `target_lengths = (code_lens * 1.72).long()` (also for every length 1..2000: float32 arithmetic), the length
  regulator, the concatenation, `cfm.inference(cat, [len], ref_mel, style, None, 25, inference_cfg_rate=0.7)` right
  after torch.manual_seed(SEED) (its one draw: randn(1, 80, len) from the global generator), the prompt cut off,
  BigVGAN (`.squeeze().unsqueeze(0)`, `.squeeze(1)`) and `clamp(32767 * wav, -32767, 32767)`.

The tiny models, built with upstream's classes: MyModel(s2mel section, use_gpt_latent=True) (DiT 32 wide, 2 heads,
3 blocks, U-ViT and long skips, WaveNet tail 32 x 2; regulator 32 channels from 1024; gpt_layer 1280-256-128-1024 as
hard-coded) with every parameter from seedvc_weights.s2mel_fill (seed + index in sorted name order per net), saved
as s2mel.pth ({"net": ...}, half the keys prefixed "module.") and read back by upstream's load_checkpoint2 into a
fresh MyModel, as infer_v2 loads it; CAMPPlus(feat_dim=80, embedding_size=192, growth_rate 4, bn_size 2,
init_channels 8) filled by seedvc_weights.campplus_state; BigVGAN.from_pretrained on a folder with the vendored
config.json shrunk (upsample 8-8-4 from 32 channels, hop 256) and bigvgan_generator.pt from
seedvc_weights.bigvgan_state, then remove_weight_norm(); the semantic codec by build_semantic_codec on a tiny
section (hidden 1024 as released) filled by cosyvoice_weights.state.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
import tempfile
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cosyvoice_weights import state  # noqa: E402
from pinned import (  # noqa: E402
    checkout_writer_main,
    is_spread_child,
    lifted_runs,
    pin_process,
    save_spread,
    write_checkout_tensors,
)
from seedvc_weights import bigvgan_state, campplus_state, s2mel_fill, shapes_of  # noqa: E402

# Pinned when run; the test imports this module (for `clip`, INTEGERS and floats) without re-executing itself.
if __name__ == "__main__" and "--spread" not in sys.argv and not is_spread_child():
    pin_process()

import torch  # noqa: E402

# config.yaml's s2mel section, shrunk (every flag as released)
S2MEL = {
    "preprocess_params": {"sr": 22050, "spect_params": {"n_fft": 1024, "win_length": 1024, "hop_length": 256,
                                                        "n_mels": 80, "fmin": 0, "fmax": "None"}},
    "dit_type": "DiT", "reg_loss_type": "l1", "style_encoder": {"dim": 192},
    "length_regulator": {"channels": 32, "is_discrete": False, "in_channels": 1024, "content_codebook_size": 2048,
                         "sampling_ratios": [1, 1, 1, 1], "vector_quantize": False, "n_codebooks": 1,
                         "quantizer_dropout": 0.0, "f0_condition": False, "n_f0_bins": 512},
    "DiT": {"hidden_dim": 32, "num_heads": 2, "depth": 3, "class_dropout_prob": 0.1, "block_size": 8192,
            "in_channels": 80, "style_condition": True, "final_layer_type": "wavenet", "target": "mel",
            "content_dim": 32, "content_codebook_size": 1024, "content_type": "discrete", "f0_condition": False,
            "n_f0_bins": 512, "content_codebooks": 1, "is_causal": False, "long_skip_connection": True,
            "zero_prompt_speech_token": False, "time_as_token": False, "style_as_token": False,
            "uvit_skip_connection": True, "add_resblock_in_transformer": False},
    "wavenet": {"hidden_dim": 32, "num_layers": 2, "kernel_size": 5, "dilation_rate": 1, "p_dropout": 0.2,
                "style_condition": True},
}
CODEC = {"codebook_size": 66, "hidden_size": 1024, "codebook_dim": 8, "vocos_dim": 32, "vocos_intermediate_dim": 64,
         "vocos_num_layers": 1}
CAMPPLUS = {"feat_dim": 80, "embedding_size": 192, "growth_rate": 4, "bn_size": 2, "init_channels": 8}
BIGVGAN_SIZES = {"upsample_rates": [8, 8, 4], "upsample_kernel_sizes": [16, 16, 8], "upsample_initial_channel": 32}
SEEDS = {"cfm": 5100, "length_regulator": 5300, "gpt_layer": 5500, "campplus": 5700, "bigvgan": 5900, "codec": 6100,
         "inputs": 6300, "sampler": 1234}
NETS = ("cfm", "length_regulator", "gpt_layer")
# the reference clips: name -> (rate, seconds, channels)
CLIPS = {"44k_stereo": (44100, 0.3, 2), "48k": (48000, 0.25, 1), "24k": (24000, 0.3, 1), "22k": (22050, 0.35, 1),
         "16k": (16000, 0.3, 1), "8k_3ch": (8000, 0.3, 3)}
LONG = (16000, 15.5, 1)  # longer than the 15 s cut
EDGE = 1000  # the long clip's outputs are stored as sha256, first and last EDGE samples
RESAMPLED = (44100, 48000, 24000, 16000, 22050)  # the transforms alone, from these rates to 22050 and 16000
PROMPT_CLIP = "22k"  # the clip whose mel, fbank, style and prompt condition are recorded
W2V_FRAMES, CODES = 9, 23  # the given w2v-BERT features (1, 9, 1024); the GPT's codes (1, 23)
MAX_LENGTH = 2000  # target_lengths for every code length 1..MAX_LENGTH
STEPS, CFG_RATE = 25, 0.7  # infer_generator's diffusion_steps and inference_cfg_rate
ABSENT = ("assets/IndexTTS2.mp4", "indextts/utils/maskgct/models/codec/facodec/modules/JDC/bst.t7")


def clip(rate: int, seconds: float, channels: int, seed: int) -> torch.Tensor:
    """(channels, samples) float32: a tone per channel, a sweep and noise, within +-0.9 (the test rebuilds it)."""
    g = torch.Generator().manual_seed(seed)
    n = int(rate * seconds)
    t = torch.arange(n, dtype=torch.float64) / rate
    rows = []
    for c in range(channels):
        tone = 0.35 * torch.sin(2 * torch.pi * (180.0 + 70 * c) * t) + 0.2 * torch.sin(2 * torch.pi * 2300.0 * t * t)
        rows.append(tone + 0.08 * torch.randn(n, generator=g, dtype=torch.float64))
    return torch.stack(rows).clamp(-0.9, 0.9).float()


def upstream(checkout: Path):
    sys.path.insert(0, str(checkout))
    stubs = {"modelscope": {"AutoModelForCausalLM": None}, "matplotlib": {"use": lambda *a, **k: None},
             "matplotlib.pylab": {}, "indextts.utils.tokenizer": {"LANGUAGE_DICT": {}},
             # never built (vector_quantize is False); its package imports descript-audiotools
             "indextts.s2mel.dac.nn.quantize": {"VectorQuantize": type("VectorQuantize", (), {})}}
    for name, attributes in stubs.items():
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        sys.modules[name] = module
    import torchaudio
    from indextts.codec.maskgct_codec import build_semantic_codec
    from indextts.infer_v2 import IndexTTS2
    from indextts.s2mel.modules.audio import mel_spectrogram
    from indextts.s2mel.modules.bigvgan import bigvgan
    from indextts.s2mel.modules.campplus.DTDNN import CAMPPlus
    from indextts.s2mel.modules.commons import MyModel, load_checkpoint2
    from omegaconf import OmegaConf

    return types.SimpleNamespace(torchaudio=torchaudio, build_semantic_codec=build_semantic_codec,
                                 load_and_cut=IndexTTS2._load_and_cut_audio, mel_spectrogram=mel_spectrogram,
                                 BigVGAN=bigvgan.BigVGAN,
                                 bigvgan_config=Path(bigvgan.__file__).with_name("config.json"),
                                 CAMPPlus=CAMPPlus, MyModel=MyModel, load_checkpoint2=load_checkpoint2,
                                 OmegaConf=OmegaConf)


def mel_fn(up, cfg):
    """IndexTTS2.__init__'s mel_fn, from the s2mel section `cfg` (an OmegaConf node), line for line."""
    spect = cfg["preprocess_params"]["spect_params"]
    args = {"n_fft": spect["n_fft"], "win_size": spect["win_length"], "hop_size": spect["hop_length"],
            "num_mels": spect["n_mels"], "sampling_rate": cfg["preprocess_params"]["sr"],
            "fmin": spect.get("fmin", 0), "fmax": None if spect.get("fmax", "None") == "None" else 8000,
            "center": False}
    return lambda x: up.mel_spectrogram(x, **args)


def s2mel_nets(up, folder: Path) -> tuple:
    """MyModel filled, saved as s2mel.pth and loaded back by load_checkpoint2 into a fresh MyModel (infer_v2's
    call); -> (the loaded model, the recipe: per net its seed, parameter names and shapes, state keys, buffers'
    sha256)."""
    cfg = up.OmegaConf.create(S2MEL)
    made = up.MyModel(cfg, use_gpt_latent=True)
    recipe = {}
    for name in NETS:
        net = made.models[name]
        params = dict(net.named_parameters())
        names = sorted(params)
        with torch.no_grad():
            for index, key in enumerate(names):
                params[key].copy_(s2mel_fill(key, tuple(params[key].shape), SEEDS[name] + index))
        recipe[name] = {"seed": SEEDS[name], "params": [[k, list(params[k].shape)] for k in names],
                        "state_keys": list(net.state_dict()),
                        "buffers": {k: hashlib.sha256(b.contiguous().numpy().tobytes()).hexdigest()
                                    for k, b in net.named_buffers()}}
    nets = {}
    for name in NETS:  # DDP's prefix on every other key: load_checkpoint2 strips it
        nets[name] = {("module." + k if i % 2 else k): v.clone() for i, (k, v) in
                      enumerate(made.models[name].state_dict().items())}
    torch.save({"net": nets}, folder / "s2mel.pth")
    torch.manual_seed(0)  # the constructors draw from the global generator; every draw is overwritten
    model = up.MyModel(cfg, use_gpt_latent=True)
    model, _, _, _ = up.load_checkpoint2(model, None, str(folder / "s2mel.pth"), load_only_params=True,
                                         ignore_modules=[], is_distributed=False)
    for name in NETS:
        loaded, want = model.models[name].state_dict(), made.models[name].state_dict()
        assert loaded.keys() == want.keys() and all(torch.equal(loaded[k], want[k]) for k in want), name
    model.models["cfm"].estimator.setup_caches(max_batch_size=1, max_seq_length=8192)
    return model.eval(), recipe


def vocoder(up, folder: Path) -> tuple:
    """BigVGAN.from_pretrained(folder) on the shrunk vendored config and seeded weights, weight norm removed."""
    config = dict(json.loads(up.bigvgan_config.read_text()), **copy.deepcopy(BIGVGAN_SIZES))
    (folder / "bigvgan").mkdir()
    (folder / "bigvgan" / "config.json").write_text(json.dumps(config))
    from indextts.s2mel.modules.bigvgan.env import AttrDict

    made = up.BigVGAN(AttrDict(config), use_cuda_kernel=False)
    layout = {k: list(p.shape) for k, p in made.named_parameters()}
    values = bigvgan_state(layout, SEEDS["bigvgan"], config["snake_logscale"])
    generator = {**made.state_dict(), **values}  # the filters as built
    torch.save({"generator": generator}, folder / "bigvgan" / "bigvgan_generator.pt")
    model = up.BigVGAN.from_pretrained(str(folder / "bigvgan"), use_cuda_kernel=False)
    model.remove_weight_norm()
    return model.eval(), config, layout


def codec(up) -> tuple:
    model = up.build_semantic_codec(up.OmegaConf.create(CODEC))
    entries = [[k, list(p.shape)] for k, p in model.named_parameters()]
    model.load_state_dict(state(entries, SEEDS["codec"]), strict=True)  # (no buffers)
    return model.eval(), entries


def short(name: str, tensor: torch.Tensor, refs: dict, info: dict) -> None:
    """The long clip's output: sha256 of the whole, the first and last EDGE samples, the shape."""
    flat = tensor.contiguous()
    info["long"][name] = {"shape": list(flat.shape), "sha256": hashlib.sha256(flat.numpy().tobytes()).hexdigest()}
    refs[f"long/{name}/head"] = flat[..., :EDGE].clone()
    refs[f"long/{name}/tail"] = flat[..., -EDGE:].clone()


def outputs(checkout: Path) -> tuple[dict, dict]:
    import soundfile

    up = upstream(checkout)
    refs, info = {}, {"s2mel": S2MEL, "codec": CODEC, "campplus": CAMPPLUS, "seeds": SEEDS, "clips": CLIPS,
                      "long_clip": LONG, "edge": EDGE, "resampled": RESAMPLED, "prompt_clip": PROMPT_CLIP,
                      "frames": {"w2v": W2V_FRAMES, "codes": CODES}, "max_length": MAX_LENGTH,
                      "steps": STEPS, "cfg_rate": CFG_RATE, "absent_from_checkout": list(ABSENT), "long": {},
                      "randn": "torch.manual_seed(seeds['sampler']) right before cfm.inference; its one draw is "
                               "randn([1, 80, prompt frames + target frames])"}
    Resample = up.torchaudio.transforms.Resample
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model, info["nets"] = s2mel_nets(up, folder)
        big, info["bigvgan_config"], info["bigvgan_params"] = vocoder(up, folder)
        vq, info["codec_params"] = codec(up)
        torch.manual_seed(0)
        campplus = up.CAMPPlus(**CAMPPLUS)
        shapes = shapes_of(campplus)
        campplus.load_state_dict(campplus_state(shapes, SEEDS["campplus"]))
        campplus.eval()
        info["campplus_shapes"] = shapes

        with torch.inference_mode():
            prepared = {}
            for index, (name, (rate, seconds, channels)) in enumerate(CLIPS.items()):
                wave = clip(rate, seconds, channels, SEEDS["inputs"] + index)
                refs[f"in/{name}"] = wave
                path = folder / f"{name}.wav"
                soundfile.write(str(path), wave.T.numpy(), rate, subtype="FLOAT")
                audio, sr = up.load_and_cut(None, str(path), 15)
                audio_22k = Resample(sr, 22050)(audio)
                audio_16k = Resample(sr, 16000)(audio)
                emotion, _ = up.load_and_cut(None, str(path), 15, sr=16000)
                assert sr == 22050 and torch.equal(audio_22k, audio)
                refs[f"load/{name}/audio_22k"], refs[f"load/{name}/audio_16k"] = audio_22k, audio_16k
                refs[f"load/{name}/emotion_16k"] = emotion
                prepared[name] = (audio_22k, audio_16k)
            rate, seconds, channels = LONG
            wave = clip(rate, seconds, channels, SEEDS["inputs"] + len(CLIPS))
            soundfile.write(str(folder / "long.wav"), wave.T.numpy(), rate, subtype="FLOAT")
            audio, sr = up.load_and_cut(None, str(folder / "long.wav"), 15)
            short("audio_22k", Resample(sr, 22050)(audio), refs, info)
            short("audio_16k", Resample(sr, 16000)(audio), refs, info)
            short("emotion_16k", up.load_and_cut(None, str(folder / "long.wav"), 15, sr=16000)[0], refs, info)
            for rate in RESAMPLED:
                name = next(n for n, c in CLIPS.items() if c[0] == rate)
                mono = refs[f"in/{name}"][:1]
                for new in (22050, 16000):
                    refs[f"resample/{rate}/{new}"] = Resample(rate, new)(mono)

            audio_22k, audio_16k = prepared[PROMPT_CLIP]
            cfg = up.OmegaConf.create(S2MEL)
            ref_mel = mel_fn(up, cfg)(audio_22k.float())
            refs["mel/ref"] = ref_mel
            quirk = copy.deepcopy(S2MEL)
            quirk["preprocess_params"]["spect_params"]["fmax"] = 11025  # upstream takes 8000 for any value
            info["fmax_quirk"] = 11025
            refs["mel/fmax_quirk"] = mel_fn(up, up.OmegaConf.create(quirk))(audio_22k.float())
            feat = up.torchaudio.compliance.kaldi.fbank(audio_16k, num_mel_bins=80, dither=0, sample_frequency=16000)
            feat = feat - feat.mean(dim=0, keepdim=True)
            refs["fbank"] = feat
            style = campplus(feat.unsqueeze(0))
            refs["style"] = style
            g = torch.Generator().manual_seed(SEEDS["inputs"] + 100)
            features = torch.randn(1, W2V_FRAMES, 1024, generator=g)
            refs["in/w2v_features"] = features
            _, s_ref = vq.quantize(features)
            refs["codec/S_ref"] = s_ref
            ref_target_lengths = torch.LongTensor([ref_mel.size(2)])
            regulator = model.models["length_regulator"]
            prompt_condition = regulator(s_ref, ylens=ref_target_lengths, n_quantizers=3, f0=None)[0]
            refs["prompt_condition"] = prompt_condition

            latent = torch.randn(1, CODES, 1280, generator=g)
            codes = torch.randint(0, CODEC["codebook_size"], (1, CODES), generator=g)
            code_lens = torch.tensor([CODES])
            refs["in/latent"], refs["in/codes"] = latent, codes
            latent = model.models["gpt_layer"](latent)
            refs["gpt_layer"] = latent
            s_infer = vq.quantizer.vq2emb(codes.unsqueeze(1)).transpose(1, 2)
            refs["vq2emb"] = s_infer
            s_infer = s_infer + latent
            refs["S_infer"] = s_infer
            target_lengths = (code_lens * 1.72).long()
            refs["target_lengths"] = target_lengths
            refs["target_lengths/all"] = (torch.arange(1, MAX_LENGTH + 1) * 1.72).long()
            cond = regulator(s_infer, ylens=target_lengths, n_quantizers=3, f0=None)[0]
            refs["cond"] = cond
            cat_condition = torch.cat([prompt_condition, cond], dim=1)
            refs["cat_condition"] = cat_condition
            torch.manual_seed(SEEDS["sampler"])
            vc_target = model.models["cfm"].inference(cat_condition, torch.LongTensor([cat_condition.size(1)]),
                                                      ref_mel, style, None, STEPS, inference_cfg_rate=CFG_RATE)
            refs["cfm/full"] = vc_target
            vc_target = vc_target[:, :, ref_mel.size(-1):]
            refs["mel/target"] = vc_target
            wav = big(vc_target.float()).squeeze().unsqueeze(0)
            wav = wav.squeeze(1)
            refs["wav"] = wav
            refs["wav/int_range"] = torch.clamp(32767 * wav, -32767.0, 32767.0)
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


INTEGERS = ("target_lengths", "target_lengths/all", "in/codes")


def floats(refs: dict) -> list:
    return sorted(k for k in refs if not k.startswith("in/") and k not in INTEGERS)


def write(out: Path, checkout: Path) -> None:
    import subprocess

    refs, info = outputs(checkout)
    changes = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    info["checkout_changes"] = changes  # expected: the two absent binaries, deleted in the snapshot
    write_checkout_tensors(out, refs, info, checkout,
                           "indextts/infer_v2.py IndexTTS2._load_and_cut_audio and infer_generator's reference and "
                           "s2mel/BigVGAN calls, s2mel/modules/commons.py MyModel and load_checkpoint2, "
                           "flow_matching.py CFM, diffusion_transformer.py DiT, gpt_fast/model.py, wavenet.py, "
                           "length_regulator.py, audio.py mel_spectrogram, campplus/DTDNN.py CAMPPlus, "
                           "bigvgan/bigvgan.py BigVGAN.from_pretrained, codec/maskgct_codec.py",
                           ["torch", "torchaudio", "librosa", "soxr", "soundfile", "numpy", "omegaconf", "munch"],
                           repository="index-tts/index-tts")


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of each output between the pinned run and runs with a pin lifted: OUTDIR/spread.json."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    names = floats(pinned)
    report = {label: {k: float((r[k].double() - pinned[k].double()).abs().max()) for k in names}
              for label, r in runs.items()}
    save_spread(out, report, names)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
