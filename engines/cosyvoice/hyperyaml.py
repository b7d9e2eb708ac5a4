"""CosyVoice's yaml (cosyvoice2.yaml, cosyvoice3.yaml: HyperPyYAML) read as data, without HyperPyYAML and without
running anything it names.

HyperPyYAML builds objects while it parses: `!new:pkg.Class` calls the class with the mapping's keys, `!name:f`
binds a function's arguments, `!apply:f [args]` calls f at load time, `!ref <key>` (or `!ref <a> * <b>`) reads
other keys. Here each tag becomes a plain value: `!new:` / `!name:` mappings become `Node(kind, target, fields)`,
`!apply:` becomes `Node("apply", target, {"args": [...]})` and is never called, and `!ref` is resolved against the
document (references, then + - * / and parentheses over numbers; anything else is refused). The sizes a loader
needs are then `doc["flow"].fields["encoder"].fields["output_size"]` and so on.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field

import yaml

from mizuoto.core.errors import CheckpointError


@dataclass
class Node:
    kind: str  # "new", "name" or "apply"
    target: str  # the dotted Python name upstream would import
    fields: dict = field(default_factory=dict)

    def get(self, key, default=None):
        return self.fields.get(key, default)

    def __getitem__(self, key):
        return self.fields[key]


@dataclass
class _Ref:
    expression: str


class _Loader(yaml.SafeLoader):
    pass


def _tagged(kind: str):
    def construct(loader: _Loader, suffix: str, node: yaml.Node):
        if isinstance(node, yaml.MappingNode):
            fields = loader.construct_mapping(node, deep=True)
        elif isinstance(node, yaml.SequenceNode):
            fields = {"args": loader.construct_sequence(node, deep=True)}
        else:
            value = loader.construct_scalar(node)
            fields = {"args": [value]} if value not in ("", None) else {}
        return Node(kind, suffix, dict(fields))

    return construct


for _kind in ("new", "name", "apply"):
    _Loader.add_multi_constructor(f"!{_kind}:", _tagged(_kind))
_Loader.add_constructor("!ref", lambda loader, node: _Ref(loader.construct_scalar(node)))

_REFERENCE = re.compile(r"<([A-Za-z0-9_.\[\]]+)>")
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.USub: operator.neg}


def _arithmetic(node: ast.AST, names: dict):
    if isinstance(node, ast.Expression):
        return _arithmetic(node.body, names)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_arithmetic(node.left, names), _arithmetic(node.right, names))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_arithmetic(node.operand, names))
    raise ValueError("only numbers, references and + - * / are read")


def load(text: str, what: str = "the CosyVoice yaml") -> dict:
    """The document with every tag as a Node and every !ref resolved."""
    try:
        doc = yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader with data-only constructors)
    except yaml.YAMLError as exc:
        raise CheckpointError(f"{what} is not valid YAML ({exc.__class__.__name__}): use the file the model "
                              "was released with") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"{what} is not a mapping of settings: use the file the model was released with")

    def lookup(path: str, seen: tuple):
        value = doc
        for part in path.split("."):
            if not isinstance(value, dict) or part not in value:
                raise CheckpointError(f"{what} refers to <{path}>, which it does not define")
            value = value[part]
        return resolve(value, seen + (path,))

    def resolve(value, seen: tuple = ()):
        if isinstance(value, _Ref):
            refs = _REFERENCE.findall(value.expression)
            if any(r in seen for r in refs):
                raise CheckpointError(f"{what} has a circular reference through <{refs[0]}>")
            if len(refs) == 1 and value.expression.strip() == f"<{refs[0]}>":
                return lookup(refs[0], seen)
            names = {f"r{i}": lookup(r, seen) for i, r in enumerate(refs)}
            expression = value.expression
            for i, r in enumerate(refs):
                expression = expression.replace(f"<{r}>", f"r{i}")
            try:
                return _arithmetic(ast.parse(expression, mode="eval"), names)
            except (ValueError, SyntaxError, TypeError):
                raise CheckpointError(f"{what}: cannot read `!ref {value.expression}` as data") from None
        if isinstance(value, Node):
            return Node(value.kind, value.target, {k: resolve(v, seen) for k, v in value.fields.items()})
        if isinstance(value, dict):
            return {k: resolve(v, seen) for k, v in value.items()}
        if isinstance(value, list):
            return [resolve(v, seen) for v in value]
        return value

    return {k: resolve(v) for k, v in doc.items()}
