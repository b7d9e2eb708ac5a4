"""Reading an ONNX model file without the onnx package: its initializers (the weights) as arrays, its nodes
(op type, inputs, outputs, attributes) and its input and output names, which is what a loader needs to map the
weights of an exported network onto a module of ours.

Shared by the engines whose upstream runs an ONNX file through onnxruntime where we run our own module: GPT-SoVITS
(RVC-Boss/GPT-SoVITS @48b1a01, text/g2pw/onnx_api.py: G2PW's `g2pW.onnx`) and CosyVoice (its speech tokenizers
`speech_tokenizer_v2.onnx` / `_v3.onnx`: mizuoto/nn/s3_tokenizer_weights.py). We only read the file. An ONNX
file is a protobuf `ModelProto` (onnx/onnx.proto, read, not copied: the field numbers below are the format's).
Protobuf is a list of (field number, wire type, value) records; this reader decodes the few messages it needs and
skips every other field, so newer files with fields it does not know still read.

Weights are read from `raw_data` (what every exporter writes for large tensors) or the typed fields (`float_data`,
`int64_data`, ...: small constants). Weights kept in external files are refused in one line.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mizuoto.core.errors import CheckpointError

# wire types
VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5

# TensorProto.DataType -> numpy dtype (little-endian, as raw_data is stored); BFLOAT16 is widened to float32
DTYPES = {1: np.dtype("<f4"), 2: np.dtype("u1"), 3: np.dtype("i1"), 4: np.dtype("<u2"), 5: np.dtype("<i2"),
          6: np.dtype("<i4"), 7: np.dtype("<i8"), 9: np.dtype("?"), 10: np.dtype("<f2"), 11: np.dtype("<f8"),
          12: np.dtype("<u4"), 13: np.dtype("<u8"), 16: np.dtype("<u2")}
BFLOAT16 = 16
# which typed field holds each data type when raw_data is absent (onnx.proto's comments on TensorProto)
INT32_FIELD_TYPES = {2, 3, 4, 5, 6, 9, 10, 16}  # stored one per int32 (float16 / bfloat16 as their bits)


class FormatError(ValueError):
    """The bytes are not the protobuf message expected (internal: read_onnx turns it into a CheckpointError)."""


class Unsupported(FormatError):
    """A well-formed ONNX file holding something this reader does not read (external data, strings, ...)."""


@dataclass(frozen=True)
class Node:
    op_type: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: dict = field(default_factory=dict)  # name -> int, float, bytes, array, or a list of them


@dataclass
class OnnxModel:
    """A graph's weights and structure. `inputs` are the graph inputs that are not initializers (what a caller
    feeds); `aliases` maps the output of an Identity of a weight to that weight (torch's exporter merges equal
    weights into one initializer and names the others through Identity nodes)."""

    initializers: dict[str, np.ndarray]
    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    opset: int | None
    producer_name: str  # the exporter ("pytorch")
    aliases: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        self._producers = {o: n for n in self.nodes for o in n.outputs}
        self._consumers: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node.inputs:
                self._consumers.setdefault(name, []).append(node)
        for node in self.nodes:  # Identity chains of weights, in graph order (an alias of an alias resolves too)
            if node.op_type == "Identity" and node.inputs and self.resolve(node.inputs[0]) in self.initializers:
                self.aliases[node.outputs[0]] = self.resolve(node.inputs[0])

    def resolve(self, name: str) -> str:
        """The initializer `name` stands for (itself when it is one)."""
        return self.aliases.get(name, name)

    def weight(self, name: str) -> np.ndarray | None:
        """The initializer `name` names, through Identity aliases; None when it is computed."""
        return self.initializers.get(self.resolve(name))

    def constant(self, name: str) -> np.ndarray | None:
        """A weight, or the value of a Constant node: None when `name` is computed at run time."""
        found = self.weight(name)
        if found is not None:
            return found
        node = self._producers.get(name)
        if node is not None and node.op_type == "Constant":
            value = node.attributes.get("value")
            if isinstance(value, np.ndarray):
                return value
            for key in ("value_int", "value_float"):
                if key in node.attributes:
                    return np.array(node.attributes[key])
            if "value_ints" in node.attributes:
                return np.array(node.attributes["value_ints"], dtype=np.int64)
        return None

    def producer(self, name: str) -> Node | None:
        return self._producers.get(name)

    def consumers(self, name: str) -> list[Node]:
        return self._consumers.get(name, [])


# ---------------------------------------------------------------------------------------------------
# protobuf decoding


def varint(buf, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise FormatError("a number runs past the end of its message")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise FormatError("a number is longer than 10 bytes")


def signed(value: int) -> int:
    """An int64 / int32 field's value (negative ones are sent as 64-bit two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def records(buf, start: int, end: int):
    """(field number, wire type, value) of each record of the message in buf[start:end]; a length-delimited
    value is its (start, end) span, so large payloads are never copied here."""
    pos = start
    while pos < end:
        key, pos = varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise FormatError("a field number 0")
        if wire == VARINT:
            value, pos = varint(buf, pos, end)
        elif wire == FIXED64:
            value, pos = (pos, pos + 8), pos + 8
        elif wire == LENGTH:
            length, pos = varint(buf, pos, end)
            value, pos = (pos, pos + length), pos + length
        elif wire == FIXED32:
            value, pos = (pos, pos + 4), pos + 4
        else:
            raise FormatError(f"wire type {wire} (field {number})")
        if pos > end:
            raise FormatError(f"field {number} runs past the end of its message")
        yield number, wire, value


def text(buf, span) -> str:
    try:
        return bytes(buf[span[0]:span[1]]).decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError("a name is not UTF-8") from None


def packed_varints(buf, wire: int, value) -> list[int]:
    """A repeated integer field's values from one record (packed: a span of varints; unpacked: one varint)."""
    if wire == VARINT:
        return [signed(value)]
    if wire != LENGTH:
        raise FormatError("an integer list of the wrong wire type")
    out, pos = [], value[0]
    while pos < value[1]:
        number, pos = varint(buf, pos, value[1])
        out.append(signed(number))
    return out


def packed_fixed(buf, wire: int, value, fmt: str, size: int) -> list:
    """A repeated float / double / fixed field's values from one record."""
    start, end = value
    if wire == LENGTH and (end - start) % size:
        raise FormatError("a packed list of fixed-size numbers of a wrong length")
    if wire not in (LENGTH, FIXED32 if size == 4 else FIXED64):
        raise FormatError("a float list of the wrong wire type")
    return list(struct.unpack(f"<{(end - start) // size}{fmt}", bytes(buf[start:end])))


def tensor(buf, start: int, end: int) -> tuple[str, np.ndarray]:
    """A TensorProto -> (its name, a numpy array that owns its data)."""
    dims, dtype, name, raw = [], None, "", None
    typed: dict[str, list] = {"int32": [], "int64": [], "float": [], "double": [], "uint64": []}
    external = False
    for number, wire, value in records(buf, start, end):
        if number == 1:
            dims += packed_varints(buf, wire, value)
        elif number == 2 and wire == VARINT:
            dtype = value
        elif number == 8 and wire == LENGTH:
            name = text(buf, value)
        elif number == 9 and wire == LENGTH:
            raw = value
        elif number == 4:
            typed["float"] += packed_fixed(buf, wire, value, "f", 4)
        elif number == 5:
            typed["int32"] += packed_varints(buf, wire, value)
        elif number == 7:
            typed["int64"] += packed_varints(buf, wire, value)
        elif number == 10:
            typed["double"] += packed_fixed(buf, wire, value, "d", 8)
        elif number == 11:
            typed["uint64"] += [v & ((1 << 64) - 1) for v in packed_varints(buf, wire, value)]
        elif number == 13 or (number == 14 and wire == VARINT and value == 1):
            external = True  # external_data entries / data_location EXTERNAL
    if external:
        raise Unsupported(f"tensor {name!r} keeps its data in an external file; this reader takes a single-file "
                          f"ONNX model (save it again with all its weights inside)")
    if dtype not in DTYPES:
        raise Unsupported(f"tensor {name!r} has ONNX data type {dtype}, which this reader does not read")
    np_dtype = DTYPES[dtype]
    count = int(np.prod(dims)) if dims else 1
    if raw is not None:
        if raw[1] - raw[0] != count * np_dtype.itemsize:
            raise FormatError(f"tensor {name!r} has {raw[1] - raw[0]} bytes for shape {dims}")
        array = np.frombuffer(buf, dtype=np_dtype, count=count, offset=raw[0]).copy()
    else:
        source = ("int32" if dtype in INT32_FIELD_TYPES else "int64" if dtype == 7 else "float" if dtype == 1
                  else "double" if dtype == 11 else "uint64")
        values = typed[source]
        if len(values) != count:
            raise FormatError(f"tensor {name!r} has {len(values)} values for shape {dims}")
        if dtype in (10, BFLOAT16):  # 16-bit floats travel as their bit patterns in int32_data
            array = np.array(values, dtype=np.uint32).astype(np.uint16).view(np_dtype)
        else:
            array = np.array(values).astype(np_dtype)
    if dtype == BFLOAT16:  # numpy has no bfloat16: its bits are the top half of a float32
        array = (array.astype(np.uint32) << 16).view(np.float32)
    return name, array.reshape(dims)


def attribute(buf, start: int, end: int) -> tuple[str, object]:
    """An AttributeProto -> (name, value): an int, float, bytes, array, or a list of ints / floats / bytes."""
    name, single, many = "", None, []
    for number, wire, value in records(buf, start, end):
        if number == 1 and wire == LENGTH:
            name = text(buf, value)
        elif number == 2 and wire == FIXED32:
            single = struct.unpack("<f", bytes(buf[value[0]:value[1]]))[0]
        elif number == 3 and wire == VARINT:
            single = signed(value)
        elif number == 4 and wire == LENGTH:
            single = bytes(buf[value[0]:value[1]])
        elif number == 5 and wire == LENGTH:
            single = tensor(buf, *value)[1]
        elif number == 7:
            many += packed_fixed(buf, wire, value, "f", 4)
        elif number == 8:
            many += packed_varints(buf, wire, value)
        elif number == 9 and wire == LENGTH:
            many.append(bytes(buf[value[0]:value[1]]))
        # subgraphs (If / Loop bodies) and sparse tensors are not read: no network mapped here has them
    return name, single if single is not None else many


def node(buf, start: int, end: int) -> Node:
    inputs, outputs, name, op_type, attributes = [], [], "", "", {}
    for number, wire, value in records(buf, start, end):
        if wire != LENGTH:
            continue
        if number == 1:
            inputs.append(text(buf, value))
        elif number == 2:
            outputs.append(text(buf, value))
        elif number == 3:
            name = text(buf, value)
        elif number == 4:
            op_type = text(buf, value)
        elif number == 5:
            key, attr = attribute(buf, *value)
            attributes[key] = attr
    if not op_type:
        raise FormatError("a node without an op type")
    return Node(op_type, name, tuple(inputs), tuple(outputs), attributes)


def value_name(buf, span) -> str:
    """A ValueInfoProto's name (its type is not needed)."""
    for number, wire, value in records(buf, *span):
        if number == 1 and wire == LENGTH:
            return text(buf, value)
    return ""


def graph(buf, start: int, end: int) -> tuple[dict, list, list, list]:
    initializers, nodes, inputs, outputs = {}, [], [], []
    for number, wire, value in records(buf, start, end):
        if wire != LENGTH:
            continue
        if number == 1:
            nodes.append(node(buf, *value))
        elif number == 5:
            name, array = tensor(buf, *value)
            initializers[name] = array
        elif number == 11:
            inputs.append(value_name(buf, value))
        elif number == 12:
            outputs.append(value_name(buf, value))
        elif number == 15:
            raise Unsupported("it holds sparse initializers, which this reader does not read")
    return initializers, nodes, inputs, outputs


def parse_model(buf) -> OnnxModel:
    """A ModelProto from a buffer (bytes, or a memory map of the file)."""
    span, ir_version, opset, producer_name = None, None, None, ""
    for number, wire, value in records(buf, 0, len(buf)):
        if number == 1 and wire == VARINT:
            ir_version = value
        elif number == 2 and wire == LENGTH:
            producer_name = text(buf, value)
        elif number == 7 and wire == LENGTH:
            span = value
        elif number == 8 and wire == LENGTH:  # an OperatorSetIdProto: the default domain's is the opset
            domain, version = "", None
            for n, w, v in records(buf, *value):
                if n == 1 and w == LENGTH:
                    domain = text(buf, v)
                elif n == 2 and w == VARINT:
                    version = v
            if domain in ("", "ai.onnx"):
                opset = version
    if ir_version is None or span is None:
        raise FormatError("no ir_version or no graph")
    initializers, nodes, inputs, outputs = graph(buf, *span)
    fed = [name for name in inputs if name not in initializers]  # old exporters list weights as inputs too
    return OnnxModel(initializers, nodes, fed, outputs, opset, producer_name)


def read_onnx(path: str | Path) -> OnnxModel:
    """The ONNX model in `path`; a file that is not one (or keeps its weights elsewhere) is a one-line
    CheckpointError."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist; download the model folder again")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path} is empty, not an ONNX model; download it again")
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        try:
            return parse_model(buf)
        except Unsupported as error:
            raise CheckpointError(f"{path}: {error}") from None
        except FormatError as error:
            raise CheckpointError(f"{path} is not an ONNX model file ({error}); download it again") from None
