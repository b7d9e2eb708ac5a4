"""Architecture rules, checked on the source text (AST) without importing it or torch.

Each `check_<rule>(root)` scans the shipped code under `root` (the Python files of `mizuoto/`,
`engines/`, `nodes/` and the pack's top-level `__init__.py`) and returns findings such as

    mizuoto/x.py:12: F.scaled_dot_product_attention (torch.nn.functional.scaled_dot_product_attention)
    outside mizuoto/runtime/accel/

An empty list means the rule holds. The rules come from DESIGN.md, principles 1 and 2 and sections 2-3.

How names are recognised: each file's imports are turned into an alias map (`import torch.nn.functional
as F` makes `F` mean `torch.nn.functional`), and every attribute chain (`F.scaled_dot_product_attention`,
`getattr(torch.ops.aten, "_fused_sdp_choice")`) is resolved through it to a fully dotted name. A chain
that starts from anything else (a local variable, a parameter, the result of a call such as
`torch.Generator()`) does not resolve, so `g.manual_seed(3)` on a local generator is never flagged.
The analysis is per file and ignores scopes and control flow: it errs towards flagging a name that an
import made suspicious, never towards missing one.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

# ---------------------------------------------------------------------------------------------------
# Which files are scanned, and under which module name each one is imported.

SCANNED_DIRS = ("mizuoto", "engines", "nodes")

# The pack's root folder is imported by ComfyUI under whatever name the folder has; relative imports in
# its __init__.py resolve against this placeholder.
PACK = "<pack>"


@dataclass(frozen=True)
class Source:
    rel: str  # path relative to the root, with forward slashes: what findings print
    module: str  # the dotted name the file is imported under
    is_package: bool  # an __init__.py
    tree: ast.Module | None  # None when the file does not parse
    error: str | None = None

    @property
    def package(self) -> str:
        """The package relative imports in this file are resolved against."""
        return self.module if self.is_package else self.module.rpartition(".")[0]

    def under(self, prefix: str) -> bool:
        """True when this file is `prefix` or lies in the folder `prefix/`."""
        return self.rel == prefix or self.rel.startswith(prefix.rstrip("/") + "/")


def module_name(rel_parts: tuple[str, ...]) -> tuple[str, bool]:
    """Dotted import name of a file, as the installed package lays it out.

    `mizuoto/...` keeps its name; `engines/<id>/...` is `mizuoto.engines.<id>...` (the registry extends
    `mizuoto.engines.__path__` in a clone, a wheel installs it there) and `nodes/...` is `mizuoto.nodes...`
    (pyproject's package-dir). Both layouts therefore resolve relative imports the same way.
    """
    *folders, filename = rel_parts
    stem = filename[: -len(".py")]
    is_package = stem == "__init__"
    parts = folders if is_package else [*folders, stem]
    if parts and parts[0] in ("engines", "nodes"):
        parts = ["mizuoto", *parts]
    return (".".join(parts) if parts else PACK), is_package


def python_files(root: Path) -> list[Path]:
    files = [root / "__init__.py"] if (root / "__init__.py").is_file() else []
    for folder in SCANNED_DIRS:
        base = root / folder
        if base.is_dir():
            files += sorted(p for p in base.rglob("*.py")
                            if not any(part.startswith(".") or part == "__pycache__"
                                       for part in p.relative_to(root).parts))
    return files


def load(root: Path, path: Path) -> Source:
    rel_parts = path.relative_to(root).parts
    module, is_package = module_name(rel_parts)
    rel = "/".join(rel_parts)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
    except SyntaxError as exc:
        return Source(rel, module, is_package, None, f"{rel}:{exc.lineno}: cannot parse: {exc.msg}")
    return Source(rel, module, is_package, tree)


def sources(root: Path) -> list[Source]:
    return [load(root, path) for path in python_files(root)]


# ---------------------------------------------------------------------------------------------------
# Imports: resolving relative ones, and telling import-time ones from deferred ones.

def absolute_module(package: str, level: int, module: str | None) -> str | None:
    """The absolute name `from <level dots><module> import ...` refers to; None when it climbs out of
    the top-level package (Python would raise "attempted relative import beyond top-level package",
    but a pack loaded under another parent could make it reach an outside name)."""
    if level == 0:
        return module
    parts = package.split(".") if package else []
    if level - 1 >= len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def walk_scoped(tree: ast.AST) -> Iterator[tuple[ast.AST, bool]]:
    """Every node with a flag: True when it runs when the module is imported.

    Function and lambda bodies run later, so nothing in them runs at import time (decorators and
    default values do, but they never hold imports). Class bodies and module-level `if`/`try`/`with`
    blocks do run. The body of `if TYPE_CHECKING:` never runs.
    """
    stack: list[tuple[ast.AST, bool]] = [(tree, True)]
    while stack:
        node, at_import = stack.pop()
        yield node, at_import
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            children = [(child, False) for child in ast.iter_child_nodes(node)]
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            children = ([(node.test, at_import)] + [(child, False) for child in node.body]
                        + [(child, at_import) for child in node.orelse])
        else:
            children = [(child, at_import) for child in ast.iter_child_nodes(node)]
        stack.extend(reversed(children))


@dataclass(frozen=True)
class ImportRef:
    """One imported name: `import a.b` -> module "a.b"; `from a import b` -> module "a", name "b"."""

    line: int
    module: str | None  # absolute; None for a relative import that climbs out of the top package
    name: str | None  # the name after `import` in a from-import
    level: int  # dots of a relative import
    at_import: bool  # runs when the module is imported
    text: str  # the statement, for messages

    @property
    def full(self) -> str | None:
        """What is imported, as a dotted name (`from a import b` may import the submodule `a.b`)."""
        if self.module is None:
            return None
        return f"{self.module}.{self.name}" if self.name else self.module


def _dynamic_import_target(call: ast.Call, aliases: dict[str, str]) -> str | None:
    """`importlib.import_module("x")` or `__import__("x")` with a constant absolute name."""
    func = resolve(call.func, aliases)
    builtin = isinstance(call.func, ast.Name) and call.func.id == "__import__" and "__import__" not in aliases
    if (func == "importlib.import_module" or builtin) and call.args:
        arg = call.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and not arg.value.startswith("."):
            return arg.value
    return None


def imports(source: Source) -> list[ImportRef]:
    """Every import of a file, static or by constant name, with whether it runs at import time."""
    aliases = alias_map(source)
    found = []
    for node, at_import in walk_scoped(source.tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(ImportRef(line, alias.name, None, 0, at_import, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom):
            module = absolute_module(source.package, node.level, node.module)
            written = "." * node.level + (node.module or "")
            for alias in node.names:
                found.append(ImportRef(line, module, alias.name, node.level, at_import,
                                       f"from {written} import {alias.name}"))
        elif isinstance(node, ast.Call):
            target = _dynamic_import_target(node, aliases)
            if target is not None:
                text = f"{ast.unparse(node.func)}({target!r})"
                found.append(ImportRef(line, target, None, 0, at_import, text))
    return found


# ---------------------------------------------------------------------------------------------------
# Names: the alias map and the dotted-name resolver.

def alias_map(source: Source) -> dict[str, str]:
    """Local name -> the fully dotted name it stands for, from every import in the file.

    Imports inside functions count too: this code base imports torch lazily (`def f(): import torch`).
    Then simple assignments whose value is already an alias chain (`aten = torch.ops.aten`) are added,
    but only when every assignment to that name agrees, so that a name reused for a local object
    (`gen = torch.cuda; ...; gen = torch.Generator()`) is not taken for a module.
    """
    aliases: dict[str, str] = {}
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:  # `import torch.nn.functional` binds `torch`
                    top = alias.name.partition(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom):
            module = absolute_module(source.package, node.level, node.module)
            if module is None:
                continue
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{module}.{alias.name}"

    imported = set(aliases)
    assignments: dict[str, list[ast.expr]] = {}
    for node in ast.walk(source.tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id not in imported:
                    assignments.setdefault(target.id, []).append(node.value)
    # Chains of assignments (`F = torch.nn.functional; sdpa = F.scaled_dot_product_attention`) need
    # several rounds; each round adds at least one name or stops.
    changed = True
    while changed:
        changed = False
        for name, values in assignments.items():
            if name in aliases:
                continue
            resolved = {resolve(value, aliases) for value in values}
            if len(resolved) == 1 and None not in resolved:
                aliases[name] = resolved.pop()
                changed = True
    return aliases


def _is_builtin_call(node: ast.AST, name: str, aliases: dict[str, str]) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
            and name not in aliases)


def _constant_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def resolve(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The fully dotted name an expression stands for, or None when it is not built from an import.

    Handles names, attribute chains, subscripts (`default_generators[0]` becomes `default_generators[]`)
    and `getattr(obj, "constant")`. A call anywhere else in the chain (`torch.Generator().manual_seed`)
    makes it a method of a fresh object, which is not resolved.
    """
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = resolve(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    if isinstance(node, ast.Subscript):
        base = resolve(node.value, aliases)
        return f"{base}[]" if base else None
    if _is_builtin_call(node, "getattr", aliases) and len(node.args) >= 2:
        attr = _constant_str(node.args[1])
        base = resolve(node.args[0], aliases)
        return f"{base}.{attr}" if base and attr else None
    return None


@dataclass(frozen=True)
class Ref:
    """A use of a resolved name somewhere in a file."""

    line: int
    name: str  # fully dotted
    kind: str  # "load", "store" (assignment, del, setattr/delattr) or "import"
    text: str  # the source as written, for messages
    call_args: int | None = None  # number of arguments when the name is called, else None

    def describe(self) -> str:
        if self.kind == "import" or self.text == self.name:
            return self.text
        return f"{self.text} ({self.name})"


def _chain_parent(node: ast.AST, parent: ast.AST | None, aliases: dict[str, str]) -> bool:
    """True when `node` is an inner link of a longer chain, so only the whole chain is reported."""
    if isinstance(parent, (ast.Attribute, ast.Subscript)) and parent.value is node:
        return True
    return _is_builtin_call(parent, "getattr", aliases) and bool(parent.args) and parent.args[0] is node


def references(source: Source) -> list[Ref]:
    """Every resolvable name a file imports, reads, calls or assigns to."""
    aliases = alias_map(source)
    parents = {child: node for node in ast.walk(source.tree) for child in ast.iter_child_nodes(node)}
    refs = []
    for node in ast.walk(source.tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            refs += [Ref(line, a.name, "import", f"import of {a.name}") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = absolute_module(source.package, node.level, node.module)
            if module is not None:
                refs += [Ref(line, f"{module}.{a.name}", "import", f"import of {module}.{a.name}")
                         for a in node.names if a.name != "*"]
        if any(_is_builtin_call(node, f, aliases) for f in ("setattr", "delattr")):
            # setattr(torch.backends.cudnn, "benchmark", True) assigns as surely as `=` does.
            base = resolve(node.args[0], aliases) if node.args else None
            if base:
                attr = (_constant_str(node.args[1]) if len(node.args) > 1 else None) or "*"
                refs.append(Ref(line, f"{base}.{attr}", "store", ast.unparse(node)))
        if not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
            continue
        parent = parents.get(node)
        if _chain_parent(node, parent, aliases):
            continue
        name = resolve(node, aliases)
        if name is None:
            continue
        ctx = getattr(node, "ctx", ast.Load())
        if isinstance(ctx, (ast.Store, ast.Del)):
            if isinstance(node, ast.Name):
                continue  # rebinding a local name changes nothing outside this module
            kind = "store"
        else:
            kind = "load"
        call_args = None
        if isinstance(parent, ast.Call) and parent.func is node:
            call_args = len(parent.args) + len(parent.keywords)
        refs.append(Ref(line, name, kind, ast.unparse(node), call_args))
    return refs


def _report(findings: list[str]) -> list[str]:
    """Findings sorted by file and line, each once."""
    def key(finding: str):
        path, line, _ = finding.split(":", 2)
        return path, int(line), finding
    return sorted(set(findings), key=key)


def _parse_errors(all_sources: list[Source]) -> list[str]:
    return [s.error for s in all_sources if s.error]


# ---------------------------------------------------------------------------------------------------
# Rule 1: SDPA only inside mizuoto/runtime/accel/ (DESIGN 3.1, 3.3). Every attention computation goes
# through accel.attention; fused kernels are called only by its backends.

ACCEL_DIR = "mizuoto/runtime/accel"

# torch.nn.functional / torch._C._nn / torch.ops.aten / torch.* names of SDPA and its aten kernels.
SDPA_NAMES = frozenset({"scaled_dot_product_attention", "_fused_sdp_choice"})
SDPA_PREFIXES = ("_scaled_dot_product_", "_flash_attention_", "_efficient_attention_", "_cudnn_attention_")


def is_sdpa(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "torch" and any(p in SDPA_NAMES or p.startswith(SDPA_PREFIXES) for p in parts[1:])


def check_sdpa_outside_accel(root: Path) -> list[str]:
    all_sources = sources(root)
    findings = _parse_errors(all_sources)
    for source in all_sources:
        if source.tree is None or source.under(ACCEL_DIR):
            continue
        # Any reference counts, not only calls: passing the function around or replacing it
        # (`F.scaled_dot_product_attention = ...`) bypasses the dispatcher just the same.
        findings += [f"{source.rel}:{ref.line}: {ref.describe()} outside {ACCEL_DIR}/"
                     for ref in references(source) if is_sdpa(ref.name)]
    return _report(findings)


# ---------------------------------------------------------------------------------------------------
# Rule 2: process-wide switches only in mizuoto/runtime/accel/features.py (principle 2). They change
# results for every model and every thread in the process, so only host start-up may flip them.

FEATURES = "mizuoto/runtime/accel/features.py"

PROCESS_SWITCHES = frozenset({
    "torch.set_float32_matmul_precision",
    "torch.use_deterministic_algorithms",
    "torch.set_default_dtype",
    "torch.set_default_device",
    "torch.set_default_tensor_type",
    "torch.set_deterministic_debug_mode",
    "torch.set_flush_denormal",
    "torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp",
    "torch.backends.cuda.sdp_kernel",  # the deprecated predecessor of sdpa_kernel
})
# Functions under torch.backends.<x> that switch (rather than report) global state.
BACKEND_SWITCH_NAMES = frozenset({"flags", "set_flags"})
BACKEND_SWITCH_PREFIXES = ("enable_",)
# `preferred_linalg_library()` reads the setting; `preferred_linalg_library("magma")` changes it.
BACKEND_SETTER_WITH_ARGS = ("preferred_",)


def switch_reason(ref: Ref) -> str | None:
    """Why this reference changes process-wide state, or None when it does not."""
    name = ref.name
    last = name.rpartition(".")[2]
    if ref.kind == "store" and _under(name, "torch.backends"):
        return f"assignment to {ref.describe()}"
    if ref.kind == "store":
        return None
    parts = name.split(".")
    if parts[0] == "torch" and any(p.lstrip("_").startswith("sdpa_kernel") for p in parts):
        # torch.nn.attention.sdpa_kernel switches kernels for every thread, not just the caller's.
        return f"{ref.describe()} switches attention kernels for the whole process"
    if name in PROCESS_SWITCHES:
        return f"{ref.describe()} is a process-wide switch"
    if name.startswith("torch.backends.") and (last in BACKEND_SWITCH_NAMES
                                               or last.startswith(BACKEND_SWITCH_PREFIXES)):
        return f"{ref.describe()} is a process-wide switch"
    if name.startswith("torch.backends.") and last.startswith(BACKEND_SETTER_WITH_ARGS) and ref.call_args:
        return f"{ref.describe()} called with arguments is a process-wide switch"
    return None


def check_process_wide_switches(root: Path) -> list[str]:
    all_sources = sources(root)
    findings = _parse_errors(all_sources)
    for source in all_sources:
        if source.tree is None or source.rel == FEATURES:
            continue
        for ref in references(source):
            reason = switch_reason(ref)
            if reason:
                findings.append(f"{source.rel}:{ref.line}: {reason} outside {FEATURES}")
    return _report(findings)


# ---------------------------------------------------------------------------------------------------
# Rule 3: no seeding of a global random generator (principle 2). A request draws from its own
# generators (RequestContext.generator), so two requests never disturb each other's numbers.

TORCH_SEEDING = frozenset({"manual_seed", "manual_seed_all", "seed", "seed_all", "set_rng_state",
                           "set_rng_state_all"})
OTHER_SEEDING = frozenset({"numpy.random.seed", "numpy.random.set_state", "numpy.random.mtrand.seed",
                           "random.seed", "random.setstate"})


def is_global_seeding(name: str) -> bool:
    parts = name.split(".")
    if parts[0] == "torch":
        # torch.manual_seed, torch.cuda.manual_seed_all, torch.default_generator.manual_seed, ...
        # but not the unbound method torch.Generator.manual_seed (called on a generator of one's own).
        return parts[-1] in TORCH_SEEDING and "Generator" not in parts
    return name in OTHER_SEEDING


def check_global_seeding(root: Path) -> list[str]:
    all_sources = sources(root)
    findings = _parse_errors(all_sources)
    for source in all_sources:
        if source.tree is None:
            continue
        findings += [f"{source.rel}:{ref.line}: {ref.describe()} seeds a global random generator"
                     for ref in references(source) if ref.kind != "store" and is_global_seeding(ref.name)]
    return _report(findings)


# ---------------------------------------------------------------------------------------------------
# Rule 4: mizuoto/core/ is standard library only (DESIGN 2), and compute/cpu.py strictly so: it runs
# before torch is imported and is copied into child-process set-up, so it may not even import the rest
# of mizuoto (whose package __init__ files could grow heavier imports).

CORE_DIR = "mizuoto/core"
CPU_MODULE = "mizuoto/core/compute/cpu.py"


def is_stdlib(module: str) -> bool:
    return module.partition(".")[0] in sys.stdlib_module_names


def _under(name: str | None, package: str) -> bool:
    return name is not None and (name == package or name.startswith(package + "."))


def check_core_stdlib_only(root: Path) -> list[str]:
    all_sources = sources(root)
    findings = _parse_errors(all_sources)
    for source in all_sources:
        if source.tree is None or not source.under(CORE_DIR):
            continue
        strict = source.rel == CPU_MODULE
        # Every import counts, deferred ones too: "stdlib only" is about what the module needs.
        for ref in imports(source):
            if ref.level == 0 and is_stdlib(ref.module):
                continue
            if strict:
                findings.append(f"{source.rel}:{ref.line}: {ref.text}: {CPU_MODULE} imports only the "
                                "standard library")
            elif not (_under(ref.module, "mizuoto.core") or _under(ref.full, "mizuoto.core")):
                findings.append(f"{source.rel}:{ref.line}: {ref.text}: {CORE_DIR}/ imports only the "
                                "standard library and mizuoto.core")
    return _report(findings)


# ---------------------------------------------------------------------------------------------------
# Rule 5: the library never imports the node layer or ComfyUI at import time (DESIGN 2), so it imports
# without a host and a ComfyUI process never sees our `nodes` or its own modules imported early.
# `engines/` is checked too: it is imported as mizuoto.engines.<id>, part of the library.

HOST_MODULES = frozenset({"nodes", "comfy", "comfy_extras", "comfy_api", "comfy_execution", "folder_paths",
                          "server", "execution"})
LIBRARY_DIRS = ("mizuoto", "engines")


def is_host_module(name: str) -> bool:
    top = name.partition(".")[0]
    return top in HOST_MODULES or top.startswith("comfy_") or _under(name, "mizuoto.nodes")


def check_library_independent_of_host(root: Path) -> list[str]:
    all_sources = sources(root)
    findings = _parse_errors(all_sources)
    for source in all_sources:
        if source.tree is None or not any(source.under(d) for d in LIBRARY_DIRS):
            continue
        for ref in imports(source):
            if not ref.at_import:
                continue  # imported inside a function: only when a host calls it
            if ref.full is None:
                findings.append(f"{source.rel}:{ref.line}: {ref.text} climbs out of the mizuoto package")
            elif is_host_module(ref.full):
                findings.append(f"{source.rel}:{ref.line}: {ref.text} imports {ref.full} at import time")
    return _report(findings)


# ---------------------------------------------------------------------------------------------------
# Rule 6: audio files are read and written, and resampled with an audio library, in mizuoto/audio/ only
# (issue 15): one reader that refuses damaged files in one line, one writer that is atomic, and each
# library resampler reproduced in one place. Nothing else opens an audio file by hand.

AUDIO_DIR = "mizuoto/audio"
AUDIO_LIBRARIES = frozenset({"soundfile", "soxr", "librosa", "torchaudio", "wave", "aifc", "sunau", "audioop",
                             "scipy.io.wavfile", "audioread", "pydub", "av", "torchcodec"})


def check_audio_io_in_audio(root: Path) -> list[str]:
    all_sources = sources(root)
    findings = _parse_errors(all_sources)
    for source in all_sources:
        if source.tree is None or source.under(AUDIO_DIR):
            continue
        for ref in imports(source):
            names = {n for n in (ref.module, ref.full) if n}
            if any(_under(name, library) for name in names for library in AUDIO_LIBRARIES):
                findings.append(f"{source.rel}:{ref.line}: {ref.text}: audio files and audio libraries are used in "
                                f"{AUDIO_DIR}/ only")
    return _report(findings)


# ---------------------------------------------------------------------------------------------------
# Rule 7: an engine stands on the runtime, the shared blocks, audio, core and the declaration types only
# (issue 23, DESIGN 2): never on the host layer above it, the registry, the node layer or another engine.

ENGINES_DIR = "engines"
ENGINE_MAY_IMPORT = ("mizuoto.runtime", "mizuoto.nn", "mizuoto.audio", "mizuoto.text", "mizuoto.core",
                     "mizuoto.engines.spec")


def check_engines_stand_on_the_runtime(root: Path) -> list[str]:
    all_sources = sources(root)
    findings = _parse_errors(all_sources)
    for source in all_sources:
        if source.tree is None or not source.under(ENGINES_DIR):
            continue
        own = ".".join(source.module.split(".")[:3])  # mizuoto.engines.<id>
        for ref in imports(source):
            if ref.full is None:
                findings.append(f"{source.rel}:{ref.line}: {ref.text} climbs out of the mizuoto package")
                continue
            if not _under(ref.module, "mizuoto"):
                continue  # the standard library, torch, numpy, ...
            if any(_under(ref.module, p) or _under(ref.full, p) for p in (*ENGINE_MAY_IMPORT, own)):
                continue
            findings.append(f"{source.rel}:{ref.line}: {ref.text}: engines import only "
                            f"{', '.join(ENGINE_MAY_IMPORT)} and their own package")
    return _report(findings)


ALL_CHECKS = (check_sdpa_outside_accel, check_process_wide_switches, check_global_seeding,
              check_core_stdlib_only, check_library_independent_of_host, check_audio_io_in_audio,
              check_engines_stand_on_the_runtime)
