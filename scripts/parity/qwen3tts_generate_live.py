"""Live parity of Mizuoto's Qwen3-TTS generation (text ids -> codes) against qwen-tts 0.1.1 (dev only).

Run it with the Python of the upstream environment (qwen-tts, transformers 4.57.3); our modules come
from the clone given by --ours (default: this clone):

    .venv-qwen3tts-upstream/bin/python scripts/parity/qwen3tts_generate_live.py [--ours /path/to/clone] [--frames 24]

One intra-op thread and ATEN_CPU_CAPABILITY=avx2 on both sides (the script re-executes itself with the
variable set; ENGINES.md section 1 says why).

For each model kind (CustomVoice, VoiceDesign, Base) a tiny random upstream
`Qwen3TTSForConditionalGeneration` is built (RMSNorm gains and biases re-randomised: upstream starts
them at one and zero, where a wrong norm or a missing bias would pass unnoticed; the EOS row of the
codec head scaled up so that rows stop by themselves) and saved with `save_pretrained`. Two pairs run:

- upstream loaded back with transformers' `from_pretrained` (its weights stay views of the memory-mapped
  file) against our `checkpoint.load_talker` of the same folder (views of the same file too);
- the upstream model as built in memory against our loader with `fresh=True` (weights copied to
  aligned memory): the CPU's matrix kernels round by alignment, so each side must match its twin.

Both sides generate from the same token ids and seed: upstream `model.generate(...)` after
`torch.manual_seed(seed)`, ours `generate_codes` with a request generator of that seed. Compared: the
talker's prefill logits (bit for bit) and every code of every frame of every row (all codebooks),
for single requests and a left-padded batch of two. Exit status 1 when anything differs.

--cross also pairs each upstream model with the other loading of ours: prefill logits then differ in
the last bits (the alignment trap).

`--golden DIR` instead writes DIR/golden/generate.json: upstream on tests/engines/test_qwen3tts_generate.py's
own model folders and cases (its definitions are read from its source, without its tests), per case each
row's codes and the first four prefill scores of each row, which that test compares with. DIR is the
qwen3tts reference set being written: `python scripts/parity/reference_sets.py write qwen3tts` runs this so;
the test reads the file through `reference_dir("qwen3tts")`. Exit status 0 once upstream's values are
written; where ours differs from them, a warning on stderr says which cases.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import sys
import tempfile
import types
from pathlib import Path

from pinned import add_ours_argument, pin_process, write_golden  # beside this script


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_ours_argument(parser)
    parser.add_argument("--frames", type=int, default=60, help="max_new_tokens of each generation")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per case")
    parser.add_argument("--golden", type=Path, metavar="DIR",
                        help="instead: write the golden codes of tests/engines/test_qwen3tts_generate.py, recorded "
                             "from upstream on that file's model folders, to DIR/golden/generate.json (DIR: the "
                             "qwen3tts reference set being written; ours is checked against them, a warning)")
    parser.add_argument("--cross", action="store_true",
                        help="also pair each upstream model with the other loading of ours (shows the alignment trap)")
    parser.add_argument("--threads", type=int, default=1)
    return parser.parse_args()


pin_process()
ARGS = _parse()
sys.path.insert(0, str(ARGS.ours.resolve()))

import torch  # noqa: E402
from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig  # noqa: E402
from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration  # noqa: E402

from mizuoto.engines.qwen3tts import checkpoint, generate, prompt  # noqa: E402
from mizuoto.engines.qwen3tts.config import GenerationSettings, small_config  # noqa: E402
from mizuoto.runtime.context import RequestContext  # noqa: E402

IM_START, IM_END, NL, ASSISTANT, USER = 193, 194, 10, 21, 22  # the tiny text vocabulary's template ids
EOS = 1070  # small_config's codec EOS


# per kind: codebooks per frame, predictor width (48 = the talker's: no projection), attention bias
KINDS = {"custom_voice": (16, 32, False), "voice_design": (4, 48, True), "base": (4, 32, False)}


def tiny_upstream(kind: str, seed: int) -> Qwen3TTSForConditionalGeneration:
    groups, predictor_hidden, bias = KINDS[kind]
    data = small_config(kind, groups, predictor_hidden, bias)
    config = Qwen3TTSConfig(**{k: v for k, v in data.items() if k != "model_type"})
    torch.manual_seed(seed)  # a dev script may seed the global generator; library code never does
    model = Qwen3TTSForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, param in model.talker.named_parameters():
            if "norm" in name:
                param.copy_(1 + 0.2 * torch.randn_like(param))
            elif name.endswith("bias"):
                param.copy_(0.1 * torch.randn_like(param))
            elif "embedding" in name or "head" in name:
                param.mul_(10)  # std 0.2: scores spread enough that top-k and the penalty matter
        model.talker.codec_head.weight[EOS] *= 2.5  # rows end by themselves within a few dozen frames
    return model


def template(body: list[int], role: int = ASSISTANT, tail: tuple = (IM_END, NL, IM_START, ASSISTANT, NL)):
    return torch.tensor([[IM_START, role, NL, *body, *tail]])


def text_ids(n: int, g: torch.Generator) -> torch.Tensor:
    return template(torch.randint(0, 190, (n,), generator=g).tolist())


# --------------------------------------------------------------------------------------------------


def upstream_run(model, requests: list[dict], kind: str, seed: int, settings: dict):
    """Upstream's codes per row and its talker prefill logits (last position)."""
    prefill = []
    hook = model.talker.codec_head.register_forward_hook(
        lambda module, args, out: prefill.append(out[:, -1].float().clone()) if not prefill else None)
    kwargs = dict(input_ids=[r["text"] for r in requests], languages=[r["language"] for r in requests],
                  non_streaming_mode=requests[0]["non_streaming"], **settings)
    if kind == "custom_voice":
        kwargs.update(speakers=[r["speaker"] for r in requests], instruct_ids=[r.get("instruct") for r in requests])
    elif kind == "voice_design":
        kwargs.update(instruct_ids=[r.get("instruct") for r in requests])
    else:
        kwargs.update(ref_ids=[r.get("ref_text") for r in requests], voice_clone_prompt=dict(
            ref_code=[r.get("ref_codes") for r in requests], ref_spk_embedding=[r["xvec"] for r in requests],
            x_vector_only_mode=[r.get("ref_codes") is None for r in requests],
            icl_mode=[r.get("ref_codes") is not None for r in requests]))
    torch.manual_seed(seed)
    try:
        codes, _ = model.generate(**kwargs)
    finally:
        hook.remove()
    return codes, prefill[0]


def ours_run(config, talker, requests: list[dict], seed: int, settings: dict):
    prompts = [prompt.build_prompt(talker, config, r["text"], language=r["language"], speaker=r.get("speaker"),
                                   x_vector=r.get("xvec"), instruct_ids=r.get("instruct"),
                                   reference_ids=r.get("ref_text"), reference_codes=r.get("ref_codes"),
                                   non_streaming=r["non_streaming"]) for r in requests]
    _, _, pad = prompt.tts_specials(talker, config)
    batch = prompt.batch_prompts(prompts, pad)
    gen = GenerationSettings().with_overrides(**settings)
    with torch.inference_mode():
        logits, _ = generate.prefill(talker, batch)
    codes = generate.generate_codes(talker, batch, gen, RequestContext(seed))
    return codes, logits


def cases(kind: str):
    """(name, requests, seed, sampling overrides) for one model kind."""
    g = torch.Generator().manual_seed(100 + len(kind))
    short, mid, long = (text_ids(n, g) for n in (3, 9, 17))
    instruct = template(torch.randint(0, 190, (6,), generator=g).tolist(), role=USER, tail=(IM_END, NL))
    out = []
    if kind == "custom_voice":
        a = dict(text=mid, language="english", speaker="alice", non_streaming=False)
        b = dict(text=long, language="auto", speaker="bob", non_streaming=False)  # bob speaks a dialect
        c = dict(text=short, language="chinese", speaker="Alice", instruct=instruct, non_streaming=True)
        out += [("streaming text", [a], 1, {}), ("dialect speaker", [b], 2, {}), ("instruct, whole text", [c], 3, {}),
                ("batch of two", [a, b], 4, {}), ("top-p, greedy predictor", [b], 5,
                                                  dict(top_p=0.8, subtalker_dosample=False))]
    elif kind == "voice_design":
        a = dict(text=long, language="english", instruct=instruct, non_streaming=True)
        b = dict(text=short, language="auto", non_streaming=True)
        s = dict(text=mid, language="chinese", instruct=instruct, non_streaming=False)
        out += [("instruct", [a], 11, {}), ("no instruct", [b], 12, {}), ("batch of two", [a, b], 13, {}),
                ("streaming text", [s], 14, dict(temperature=1.3, subtalker_top_k=7)),
                ("greedy talker", [b], 15, dict(do_sample=False))]
    else:
        groups = KINDS["base"][0]
        xvec = torch.randn(48, generator=g)
        ref_text = template(torch.randint(0, 190, (7,), generator=g).tolist(), tail=(IM_END, NL))
        ref_long = template(torch.randint(0, 190, (30,), generator=g).tolist(), tail=(IM_END, NL))
        codes = torch.randint(0, 64, (12, groups), generator=g)
        x = dict(text=mid, language="english", xvec=xvec, non_streaming=False)
        icl = dict(text=long, language="auto", xvec=xvec, ref_text=ref_text, ref_codes=codes, non_streaming=False)
        icl_text = dict(text=short, language="english", xvec=-xvec, ref_text=ref_long, ref_codes=codes,
                        non_streaming=False)  # the text outlasts the reference codes
        icl_whole = dict(icl, non_streaming=True)
        out += [("x-vector only", [x], 21, {}), ("in-context clone", [icl], 22, {}),
                ("clone, text longer than codes", [icl_text], 23, {}), ("clone, whole text", [icl_whole], 24, {}),
                ("batch of two", [icl, icl_text], 25, {})]
    return out


def save(model, folder: Path) -> None:
    model.save_pretrained(folder)
    # save_pretrained writes the speaker encoder's model_type, which upstream's own config then refuses
    # (released config.json files have none)
    path = folder / "config.json"
    data = json.loads(path.read_text())
    data["speaker_encoder_config"].pop("model_type", None)
    path.write_text(json.dumps(data, indent=2))


def from_pretrained(folder: Path):
    """transformers' from_pretrained without qwen-tts' additions (the codec and generation_config.json)."""
    cls = Qwen3TTSForConditionalGeneration
    return super(cls, cls).from_pretrained(str(folder)).eval()


def load_test_definitions(path: Path) -> types.ModuleType:
    """The CI test's definitions (its cases, model folders and `run_cases`) as a module, taken from its
    source without its tests, fixtures, the pinned-script block and its pytest and tests/helpers.py imports
    (this environment has no pytest)."""
    def kept(node) -> bool:
        if isinstance(node, ast.Import | ast.ImportFrom):
            return not ({a.name for a in node.names} & {"pytest"} or getattr(node, "module", None) == "helpers")
        if isinstance(node, ast.If):  # the `if __name__ == "__main__":` blocks
            return False
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            return not node.name.startswith("test_") and not any("pytest" in ast.unparse(d)
                                                                  for d in node.decorator_list)
        return True

    tree = ast.parse(path.read_text())
    module = types.ModuleType("qwen3tts_generate_cases")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module
    exec(compile(ast.Module(body=[n for n in tree.body if kept(n)], type_ignores=[]), str(path), "exec"),
         module.__dict__)
    return module


def golden(folder: Path) -> int:
    """Upstream on the CI test's cases and model folders -> folder/golden/generate.json; then ours on the
    same cases, only to warn where it differs (a reference writer's status is upstream's)."""
    cases_module = load_test_definitions(ARGS.ours.resolve() / "tests" / "engines" / "test_qwen3tts_generate.py")
    torch.set_num_threads(1)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        models = {kind: from_pretrained(cases_module.model_folder(kind, Path(tmp) / "upstream"))
                  for kind in cases_module.KINDS}
        for name, (kind, requests, non_streaming, seed, overrides) in cases_module.CASES.items():
            inputs = [dict(cases_module.request_inputs(r), non_streaming=non_streaming) for r in requests]
            settings = dict(max_new_tokens=cases_module.MAX_NEW_TOKENS, **overrides)
            codes, logits = upstream_run(models[kind], inputs, kind, seed, settings)
            results[name] = dict(codes=[c.tolist() for c in codes], logits=logits[:, :4].tolist())
        print(f"wrote {write_golden(folder, 'generate', results)}")
        try:
            ours = cases_module.run_cases(Path(tmp) / "ours")
        except Exception as exc:  # noqa: BLE001  (upstream's values are written: ours failing is a warning)
            print(f"warning: ours failed on the golden cases: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 0
    differ = [name for name in results if ours.get(name) != results[name]]
    if differ:
        print(f"warning: ours differs from upstream on {len(differ)} of {len(results)} golden cases: "
              f"{', '.join(differ)}", file=sys.stderr)
    else:
        print(f"ours identical to upstream on all {len(results)} golden cases")
    return 0


def main() -> int:
    torch.set_num_threads(ARGS.threads)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for kind in KINDS:
            built = tiny_upstream(kind, seed=len(kind))
            folder = Path(tmp) / kind
            save(built, folder)
            file_model, mapped, fresh = from_pretrained(folder), checkpoint.load_talker(folder), \
                checkpoint.load_talker(folder, fresh=True)
            pairs = [("file", file_model, mapped), ("memory", built, fresh)]
            if ARGS.cross:
                pairs += [("file/fresh", file_model, fresh), ("memory/mapped", built, mapped)]
            for (name, requests, first, overrides), (weights, model, (config, talker)), seed in itertools.product(
                    cases(kind), pairs, range(ARGS.seeds)):
                seed += 10 * first
                settings = dict(max_new_tokens=ARGS.frames, **overrides)
                theirs, their_logits = upstream_run(model, requests, kind, seed, settings)
                ours, our_logits = ours_run(config, talker, requests, seed, settings)
                same_logits = torch.equal(their_logits, our_logits)
                same_codes = len(theirs) == len(ours) and all(
                    a.shape == b.shape and torch.equal(a, b) for a, b in zip(theirs, ours, strict=True))
                frames = "/".join(str(c.shape[0]) for c in theirs)
                ok = same_logits and same_codes
                failures += not ok
                print(f"{'ok ' if ok else 'BAD'} {kind:12s} {name:30s} {weights:13s} seed {seed:4d} frames {frames:7s} "
                      f"prefill logits {'identical' if same_logits else 'DIFFER'}, codes "
                      f"{'identical' if same_codes else 'DIFFER'}", flush=True)
                if not same_codes:
                    for a, b in zip(theirs, ours, strict=False):
                        print("   upstream", a[:6].tolist(), "\n   ours    ", b[:6].tolist())
    print("all identical" if not failures else f"{failures} case(s) differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(golden(ARGS.golden.resolve()) if ARGS.golden is not None else main())
