"""GPT-SoVITS's declaration (no torch import).

A voice is a pair of weights files trained together: a SoVITS `.pth` (the model) and a GPT `.ckpt` (the
companion). Both are listed from models/tts/gpt_sovits/ and one folder down, as upstream keeps them
(SoVITS_weights_v2/, GPT_weights_v2/). The shared pretrained parts (chinese-roberta-wwm-ext-large, chinese-hubert-base,
G2PWModel) are found in one assets folder. The speak parameters are api_v2's (TTS_Request at 48b1a01) with its
defaults; the languages default to the web UI's ("中文": all_zh), since api_v2 has no default for them.
"""

from mizuoto.core.settings import Option
from mizuoto.engines.spec import Companion, EngineSpec, Param, Reference, Variant

# TTS_Config.languages for the v2 family: one language, upstream's mixed modes (the language with English), and
# auto (every language detected); *_yue reads Chinese as Cantonese.
LANGUAGES = ("all_zh", "zh", "en", "auto", "all_ja", "ja", "all_ko", "ko", "all_yue", "yue", "auto_yue")
SPLIT_METHODS = ("cut0", "cut1", "cut2", "cut3", "cut4", "cut5")
# the pretrained v2 pair and the shared assets, in upstream's pretrained_models layout
RELEASED_V2 = "lj1995/GPT-SoVITS"
SHARED_FILES = ("chinese-roberta-wwm-ext-large/*", "chinese-hubert-base/*")
RELEASED_V2_FILES = ("gsv-v2final-pretrained/s1bert25hz-5kh-longer-epoch=12-step=369668.ckpt",
                     "gsv-v2final-pretrained/s2G2333k.pth", *SHARED_FILES)
# v2Pro and v2ProPlus: their SoVITS files under v2Pro/, the GPT they share (s1v3.ckpt) above them, and ERes2NetV2
PRO_FILES = ("s1v3.ckpt", "sv/pretrained_eres2netv2w24s4ep4.ckpt", *SHARED_FILES)
# v3 and v4: their SoVITS models beside (v4: below) the same s1v3.ckpt, each with its vocoder
V3_FILES = ("s1v3.ckpt", "s2Gv3.pth", "models--nvidia--bigvgan_v2_24khz_100band_256x/*", *SHARED_FILES)
V4_FILES = ("s1v3.ckpt", "gsv-v4-pretrained/s2Gv4.pth", "gsv-v4-pretrained/vocoder.pth", *SHARED_FILES)
# v5 (the cuda_graph_accel_v5 branch, ac846f5): its SoVITS models and its vocoder under gsv-v5-pretrained/ (where
# the branch's TTS reads them), beside the s1v3.ckpt above them
V5_FILES = {version: ("s1v3.ckpt", f"gsv-v5-pretrained/s2G{version}.pth", "gsv-v5-pretrained/vocoder.pth",
                      *SHARED_FILES) for version in ("v5turbo", "v5dev")}

ENGINE = EngineSpec(
    id="gpt_sovits",
    display_name="GPT-SoVITS",
    description="Few-shot voice cloning from a GPT + SoVITS pair (v2, v2Pro, v2ProPlus, v3, v4, v5dev, v5turbo), "
                "exact to RVC-Boss/GPT-SoVITS at 48b1a01 (v5: its cuda_graph_accel_v5 branch at ac846f5).",
    implementation="engine",
    weights_license="MIT (upstream's code; the released weights state no other licence)",
    checkpoint_suffixes=(".pth",),  # the SoVITS weights (or a download of lj1995/GPT-SoVITS: its pretrained v2 pair)
    repos=(RELEASED_V2,),
    repo_files=RELEASED_V2_FILES,
    variants=(
        Variant("v2ProPlus", RELEASED_V2, ("v2Pro/s2Gv2ProPlus.pth", *PRO_FILES), "v2Pro/s2Gv2ProPlus.pth",
                description="the pretrained v2ProPlus pair (the v2 family's best; a speaker embedding from the "
                            "reference)"),
        Variant("v2Pro", RELEASED_V2, ("v2Pro/s2Gv2Pro.pth", *PRO_FILES), "v2Pro/s2Gv2Pro.pth",
                description="the pretrained v2Pro pair"),
        Variant("v5turbo", RELEASED_V2, V5_FILES["v5turbo"], "gsv-v5-pretrained/s2Gv5turbo.pth",
                description="the pretrained v5turbo pair: 48 kHz, its CFM distilled to 4 steps"),
        Variant("v5dev", RELEASED_V2, V5_FILES["v5dev"], "gsv-v5-pretrained/s2Gv5dev.pth",
                description="the pretrained v5dev pair: 48 kHz, 32 CFM steps with guidance"),
        Variant("v4", RELEASED_V2, V4_FILES, "gsv-v4-pretrained/s2Gv4.pth",
                description="the pretrained v4 pair: 48 kHz through a CFM and its own HiFi-GAN vocoder"),
        Variant("v3", RELEASED_V2, V3_FILES, "s2Gv3.pth",
                description="the pretrained v3 pair: 24 kHz through a CFM and BigVGAN"),
    ),
    companion=Companion("gpt_weights", (".ckpt",),
                        "the voice's GPT weights (.ckpt), trained with its SoVITS weights; by default the one .ckpt "
                        "beside the SoVITS file (or in the folder above it)"),
    load_options=(
        Option("gpt_weights", str, "", None, "the GPT weights file (.ckpt); empty: the one beside the SoVITS file"),
        Option("assets", str, "", None, "folder holding chinese-roberta-wwm-ext-large, chinese-hubert-base and "
               "G2PWModel (upstream's pretrained_models); empty: searched beside the model and in "
               "models/tts/gpt_sovits/"),
        Option("version", str, "auto", ("auto", "v2", "v2Pro", "v2ProPlus", "v3", "v4", "v5dev", "v5turbo"),
               "the SoVITS model's version (auto: told from the file, as upstream tells it)"),
    ),
    # TTS._set_prompt_semantic refuses references outside 3-10 s (at 16 kHz); both channels are read: the timbre
    # averages two channels itself
    # extra: api_v2's aux_ref_audio_paths, further recordings whose timbres are averaged with the reference's
    reference=Reference(3.0, 10.0, transcript=True, channels=True, transcript_unused_with="ref_free", extra=3,
                        help="a 3-10 s recording of the voice, with its transcript"),
    speak_params=(
        Param("text_lang", str, "all_zh", "the text's language: all_zh (Chinese, English words read as English), "
              "zh/ja/ko/yue (that language mixed with English), en, auto (detected per piece), all_ja, all_ko, "
              "all_yue, auto_yue", choices=LANGUAGES),
        Param("prompt_lang", str, "all_zh", "the reference transcript's language (as text_lang)", choices=LANGUAGES),
        Param("ref_free", bool, False, "ignore the reference's transcript: only its voice is used (upstream's "
              "prompt-free mode, weaker likeness; v2 family only)"),
        Param("top_k", int, 15, "the GPT samples among the k most likely tokens", min=1, max=100, step=1),
        Param("top_p", float, 1.0, "then within this probability mass (1: off)", min=0.01, max=1.0, step=0.05),
        Param("temperature", float, 1.0, "sampling temperature of the GPT", min=0.01, max=2.0, step=0.05),
        Param("repetition_penalty", float, 1.35, "discourages repeating semantic tokens (1: off)", min=0.01, max=5.0,
              step=0.05),
        Param("text_split_method", str, "cut5", "how the text is cut into fragments: cut0 none, cut1 every four "
              "sentences, cut2 every 50 characters, cut3 at 。, cut4 at '.', cut5 at every mark",
              choices=SPLIT_METHODS),
        Param("speed_factor", float, 1.0, "speaking rate (1: as trained)", min=0.5, max=2.0, step=0.05),
        Param("fragment_interval", float, 0.3, "seconds of silence after each fragment (counted at 32 kHz as "
              "upstream counts it: 4/3 as long after v3's 24 kHz vocoder, 2/3 after v4's 48 kHz one)",
              min=0.0, max=5.0, step=0.01),
        Param("split_bucket", bool, True, "process fragments shortest first (upstream's bucketing; changes which "
              "draws each fragment gets, not the order of the audio)"),
        Param("parallel_infer", bool, True, "upstream's parallel_infer: decides how a fragment that never stops is "
              "cut; v3/v4: the CFM renders a fragment's chunks as one batch joined by cross-fades (off: one after "
              "another, each continuing the last; v5 always rolls)"),
        Param("sample_steps", int, 0, "v3/v4/v5: the CFM's Euler steps per chunk (fewer: faster, rougher); 0: the "
              "version's (32; v5turbo 4); v5 takes 4, 8, 16 or 32", min=0, max=128, step=1),
        Param("cfg_rate", float, -1.0, "v5: classifier-free guidance of the CFM (0: none, one forward per step); "
              "negative: the version's (v5dev 1.3, v5turbo 0)", min=-1.0, max=2.0, step=0.05),
    ),
)
