"""The only way values cross between the student's kernel and the trusted runner.

A value becomes a message of two parts, the shape Jupyter's comm messages carry: a tree of
JSON lists (`tree`) and a list of raw byte buffers (`buffers`) for tensors, arrays and bytes.
Nothing is pickled and no class is named by the sender: `decode` builds only the types below,
from the builtin types' and torch's own constructors, and refuses anything else with a
`CodecError` that says what was wrong.

    None, bool, int, float, complex, str, bytes
    list, tuple, dict, set, frozenset, collections.Counter, collections.OrderedDict
    numpy.ndarray and NumPy scalars (numeric and bool dtypes)
    torch.Tensor and nn.Parameter (dense, CPU or CUDA; dtype, shape, requires_grad, and the
        gradient of a leaf), torch.Generator (its state, on the CPU)
    a reference to an object held on the other side (`Ref`), which each side resolves in its
        own table and never turns into an object of the sender's choosing

Every node is a list whose first item is its tag. Floats travel as `float.hex` (exact, and
NaN and infinities survive JSON); ints as decimal strings. Limits (`Limits`) bound the depth,
the number of nodes and the bytes, so a forged header ("10**12 elements", nesting a million
deep) is refused before anything is allocated. `parse` reads a tree from its JSON bytes only
after it has measured them (size, values, nesting: autograder.course.jsonscan), so no tree is built
past the limits either. A value past a limit raises `OverLimit`, a kind of CodecError.
"""
from __future__ import annotations

import json
import math
from collections import Counter, OrderedDict
from dataclasses import dataclass

import numpy
import torch

from autograder.course.jsonscan import JsonBounds, TooLarge, check
from autograder.isolation.kernel_text import valid

TARGET = "course.boundary"  # the Jupyter comm target the kernel's agent answers on
TENSOR_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)
}
ARRAY_DTYPES = {name: numpy.dtype(name) for name in (
    "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128")}
_SIMPLE_TAGS = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}
_PAIR_TAGS = {"dict": dict, "counter": Counter, "odict": OrderedDict}


class CodecError(ValueError):
    """A message that is not valid data (the reason in words)."""


class OverLimit(CodecError):
    """A message past one of the limits (size, parts, nesting, bytes)."""


@dataclass(frozen=True)
class Ref:
    """An object held on the other side, named by its number in that side's table."""

    side: str   # "kernel" or "runner": whose table
    number: int


@dataclass(frozen=True)
class Limits:
    """The largest honest reply of the seven solutions (benchmarks/README.md, "What a kernel may
    send") has a tree of 10,441 bytes and 934 nodes, and 165,056 bytes of buffers: each limit
    leaves two hundred times that or more."""

    depth: int = 64
    nodes: int = 200_000
    bytes: int = 256 << 20        # all buffers of one message together
    frame: int = 4 << 20          # the tree's JSON text
    scan_from: int = 64 << 10     # a smaller tree is parsed at once: it cannot build more than a few MB
    int_digits: int = 4000        # Python's own limit for int("...") is 4300
    str_chars: int = 4 << 20
    same_hash: int = 16           # items of one set, or keys of one dict, that share one hash (see _few_collisions)


def encode(value, limits: Limits = Limits(), other=None) -> tuple[list, list[bytes]]:
    """(tree, buffers) for `value`. `other(value)` is asked for a `Ref` for anything that is
    not data (it raises CodecError when that side keeps no such objects)."""
    buffers: list[bytes] = []
    count = [0]

    def buffer(data: bytes) -> int:
        buffers.append(data)
        return len(buffers) - 1

    def walk(v, depth: int):
        count[0] += 1
        if depth > limits.depth or count[0] > limits.nodes:
            raise OverLimit(f"the value is nested more than {limits.depth} deep or has more than {limits.nodes} parts")
        t = type(v)
        if v is None:
            return ["none"]
        if t is bool:
            return ["bool", v]
        if t is int:
            return ["int", str(v)]
        if t is float:
            return ["float", v.hex()]
        if t is complex:
            return ["complex", v.real.hex(), v.imag.hex()]
        if t is str:
            return ["str", v]
        if t is bytes:
            return ["bytes", buffer(v)]
        if t is Ref:
            return ["ref", v.side, v.number]
        if t in (list, tuple, set, frozenset):
            return [t.__name__, [walk(x, depth + 1) for x in v]]
        if t in (dict, Counter, OrderedDict):
            tag = {dict: "dict", Counter: "counter", OrderedDict: "odict"}[t]
            return [tag, [[walk(k, depth + 1), walk(x, depth + 1)] for k, x in v.items()]]
        if t is torch.Generator:
            return ["generator", buffer(v.get_state().numpy().tobytes())]
        if isinstance(v, torch.Tensor) and t in (torch.Tensor, torch.nn.Parameter):
            return _encode_tensor(v, buffer, walk, depth)
        if t is numpy.ndarray and v.dtype.name in ARRAY_DTYPES:
            return ["ndarray", v.dtype.name, list(v.shape), buffer(numpy.ascontiguousarray(v).tobytes())]
        if isinstance(v, numpy.generic) and type(v).__module__ == "numpy" and v.dtype.name in ARRAY_DTYPES:
            return ["npscalar", v.dtype.name, buffer(v.tobytes())]
        if other is None:
            raise CodecError(f"a {t.__name__} is not data and cannot cross")
        return walk(other(v), depth)

    return walk(value, 0), buffers


def _encode_tensor(v: torch.Tensor, buffer, walk, depth: int) -> list:
    if v.layout != torch.strided or v.is_meta or str(v.dtype).removeprefix("torch.") not in TENSOR_DTYPES:
        raise CodecError(f"a {v.layout} tensor of {v.dtype} on {v.device} cannot cross")
    data = v.detach().to("cpu").reshape(-1)
    if data.numel() and data.stride(0) != 1:  # an expanded scalar of one element (autograd hands
        data = data.clone(memory_format=torch.contiguous_format)  # these out) has stride 0
    raw = data.view(torch.uint8).numpy().tobytes() if data.numel() else b""
    grad = v.grad if v.is_leaf and v.grad is not None else None
    return ["parameter" if type(v) is torch.nn.Parameter else "tensor", str(v.dtype).removeprefix("torch."),
            list(v.shape), bool(v.requires_grad), v.device.type, buffer(raw),
            None if grad is None else walk(grad, depth + 1)]


def parse(raw: bytes, limits: Limits = Limits()):
    """The tree of a message from its JSON text, read only when the text is within the limits:
    `limits.frame` bytes, and the values and nesting that `limits.nodes` and `limits.depth` allow
    (a node is one list with a few items; each level of a value nests at most three lists deep).
    A tree of at most `limits.scan_from` bytes (every honest one: benchmarks/README.md) is parsed
    without the measure, which costs five times the parse; `decode` counts its nodes."""
    try:
        check(raw, JsonBounds(limits.frame, 8 * limits.nodes, 3 * limits.depth + 8, limits.scan_from), "the message's tree")
    except TooLarge as exc:
        raise OverLimit(str(exc)) from None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise CodecError("the message's tree is not JSON") from None


def decode(tree, buffers: list, limits: Limits = Limits(), resolve=None):
    """The value that `tree` and `buffers` describe, built only from the types above.
    `resolve(ref)` turns a `Ref` into this side's object (or raises CodecError)."""
    if not isinstance(buffers, list) or not all(isinstance(b, (bytes, bytearray, memoryview)) for b in buffers):
        raise CodecError("the buffers are not a list of bytes")
    total = sum(len(memoryview(b)) for b in buffers)
    if total > limits.bytes:
        raise OverLimit(f"the message carries {total} bytes, more than the limit of {limits.bytes}")
    count = [0]

    def take(index) -> memoryview:
        if type(index) is not int or not 0 <= index < len(buffers):
            raise CodecError(f"a buffer index {index!r} that the message does not hold")
        return memoryview(buffers[index]).cast("B")

    def walk(node, depth: int):
        count[0] += 1
        if depth > limits.depth or count[0] > limits.nodes:
            raise OverLimit(f"the value is nested more than {limits.depth} deep or has more than {limits.nodes} parts")
        if type(node) is not list or not node or type(node[0]) is not str:
            raise CodecError("a node that is not a tagged list")
        tag, args = node[0], node[1:]
        if tag not in _DECODERS:
            raise CodecError(f"an unknown tag {tag[:40]!r}")
        try:
            return _DECODERS[tag](args, walk, take, depth, limits, resolve)
        # RuntimeError: what torch raises on data it cannot take (a stride that overflows, a generator
        # state it does not accept, a gradient of another dtype); RecursionError is one
        except (TypeError, ValueError, OverflowError, RuntimeError) as exc:
            if isinstance(exc, CodecError):  # OverLimit too
                raise
            raise CodecError(f"a malformed {tag} node ({exc})") from None

    return walk(tree, 0)


def _arity(args: list, n: int, tag: str) -> list:
    if len(args) != n:
        raise CodecError(f"a {tag} node with {len(args)} fields, expected {n}")
    return args


def _decode_int(args, walk, take, depth, limits, resolve):
    (text,) = _arity(args, 1, "int")
    if type(text) is not str:
        raise CodecError("an int that is not a decimal string")
    if len(text) > limits.int_digits:
        raise OverLimit(f"an int of more than {limits.int_digits} digits")
    return int(text, 10)


def _decode_float(args, walk, take, depth, limits, resolve):
    (text,) = _arity(args, 1, "float")
    return _hex(text)


def _hex(text) -> float:
    if type(text) is not str or len(text) > 40:
        raise CodecError("a float that is not a hex string")
    return float.fromhex(text)


def _decode_str(args, walk, take, depth, limits, resolve):
    (text,) = _arity(args, 1, "str")
    if type(text) is not str:
        raise CodecError("a str node without a string")
    if len(text) > limits.str_chars:
        raise OverLimit(f"a str of more than {limits.str_chars} characters")
    return valid(text)  # a lone surrogate (JSON lets one through) as its escape: autograder.isolation.kernel_text


def _decode_bool(args, walk, take, depth, limits, resolve):
    (value,) = _arity(args, 1, "bool")
    if type(value) is not bool:
        raise CodecError("a bool node without true or false")
    return value


def _decode_simple(tag):
    def decode_items(args, walk, take, depth, limits, resolve):
        (items,) = _arity(args, 1, tag)
        if type(items) is not list:
            raise CodecError(f"a {tag} node without a list of items")
        values = [walk(x, depth + 1) for x in items]
        if tag in ("set", "frozenset"):
            _few_collisions(values, limits, tag)
        return _SIMPLE_TAGS[tag](values)
    return decode_items


def _decode_pairs(tag):
    def decode_pairs(args, walk, take, depth, limits, resolve):
        (pairs,) = _arity(args, 1, tag)
        if type(pairs) is not list or not all(type(p) is list and len(p) == 2 for p in pairs):
            raise CodecError(f"a {tag} node without a list of [key, value] pairs")
        decoded = [(walk(key, depth + 1), walk(value, depth + 1)) for key, value in pairs]
        _few_collisions([key for key, _ in decoded], limits, tag)
        result = _PAIR_TAGS[tag]()
        for key, value in decoded:
            result[key] = value
        return result
    return decode_pairs


def _few_collisions(keys: list, limits: Limits, tag: str) -> None:
    """Refuse keys of which more than `limits.same_hash` share one hash. A set or dict compares a
    new key with every key of the same hash it holds, so n such keys cost n²/2 comparisons, in one
    C call for a set that no alarm interrupts (45,000 multiples of 2**61 - 1, 1.3 MB of JSON, took
    82 s). With the cap, building costs at most `same_hash` comparisons a key: linear in the reply.
    Honest data never comes near it (-1 and -2 are the usual pair)."""
    if not keys:
        return
    _, count = Counter(map(hash, keys)).most_common(1)[0]
    if count > limits.same_hash:
        raise OverLimit(f"a {tag} with {count} keys of one hash, more than the limit of {limits.same_hash}")


def _shape(shape, limits: Limits) -> tuple[int, ...]:
    if type(shape) is not list or len(shape) > 32 or not all(type(n) is int and 0 <= n for n in shape):
        raise CodecError("a shape that is not a list of at most 32 sizes >= 0")
    if math.prod(shape) > limits.bytes:
        raise OverLimit(f"a shape {shape} with more elements than the limit allows")
    return tuple(shape)


def _decode_tensor(tag):
    def decode_tensor(args, walk, take, depth, limits, resolve):
        dtype_name, shape, requires_grad, device, index, grad = _arity(args, 6, tag)
        if dtype_name not in TENSOR_DTYPES or type(requires_grad) is not bool or device not in ("cpu", "cuda"):
            raise CodecError(f"a tensor of dtype {str(dtype_name)[:20]!r} on {str(device)[:20]!r}")
        dtype, shape = TENSOR_DTYPES[dtype_name], _shape(shape, limits)
        raw = take(index)
        expected = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if len(raw) != expected:
            raise CodecError(f"a tensor of shape {list(shape)} and dtype {dtype_name} needs {expected} bytes, "
                             f"the message holds {len(raw)}")
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if expected else torch.empty(0, dtype=torch.uint8)
        tensor = flat.view(dtype).reshape(shape) if expected else torch.empty(shape, dtype=dtype)
        if device == "cuda" and torch.cuda.is_available():
            tensor = tensor.to("cuda")
        if requires_grad and not (dtype.is_floating_point or dtype.is_complex):
            raise CodecError(f"a tensor of {dtype_name} that requires grad")
        if tag == "parameter":
            tensor = torch.nn.Parameter(tensor, requires_grad=requires_grad)
        else:
            tensor.requires_grad_(requires_grad)
        if grad is not None:
            value = walk(grad, depth + 1)
            if type(value) is not torch.Tensor or value.shape != tensor.shape or not tensor.requires_grad:
                raise CodecError("a gradient that does not fit its tensor")
            tensor.grad = value
        return tensor
    return decode_tensor


def _decode_ndarray(args, walk, take, depth, limits, resolve):
    dtype_name, shape, index = _arity(args, 3, "ndarray")
    if dtype_name not in ARRAY_DTYPES:
        raise CodecError(f"an array of dtype {str(dtype_name)[:20]!r}")
    dtype, shape, raw = ARRAY_DTYPES[dtype_name], _shape(shape, limits), take(index)
    if len(raw) != math.prod(shape) * dtype.itemsize:
        raise CodecError(f"an array of shape {list(shape)} and dtype {dtype_name} with {len(raw)} bytes")
    return numpy.frombuffer(bytes(raw), dtype=dtype).reshape(shape).copy()


def _decode_npscalar(args, walk, take, depth, limits, resolve):
    dtype_name, index = _arity(args, 2, "npscalar")
    if dtype_name not in ARRAY_DTYPES:
        raise CodecError(f"a NumPy scalar of dtype {str(dtype_name)[:20]!r}")
    raw = take(index)
    if len(raw) != ARRAY_DTYPES[dtype_name].itemsize:
        raise CodecError("a NumPy scalar of the wrong size")
    return numpy.frombuffer(bytes(raw), dtype=ARRAY_DTYPES[dtype_name])[0]


def _decode_generator(args, walk, take, depth, limits, resolve):
    (index,) = _arity(args, 1, "generator")
    raw = take(index)
    if len(raw) != len(torch.Generator().get_state()):
        raise CodecError("a generator state of the wrong size")
    generator = torch.Generator()
    generator.set_state(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
    return generator


def _decode_ref(args, walk, take, depth, limits, resolve):
    side, number = _arity(args, 2, "ref")
    if side not in ("kernel", "runner") or type(number) is not int or resolve is None:
        raise CodecError("a reference this side does not accept")
    return resolve(Ref(side, number))


_DECODERS = {
    "none": lambda args, *rest: None if not _arity(args, 0, "none") else None,
    "bool": _decode_bool,
    "int": _decode_int,
    "float": _decode_float,
    "complex": lambda args, *rest: complex(*(_hex(x) for x in _arity(args, 2, "complex"))),
    "str": _decode_str,
    "bytes": lambda args, walk, take, *rest: bytes(take(_arity(args, 1, "bytes")[0])),
    **{tag: _decode_simple(tag) for tag in _SIMPLE_TAGS},
    **{tag: _decode_pairs(tag) for tag in _PAIR_TAGS},
    "tensor": _decode_tensor("tensor"),
    "parameter": _decode_tensor("parameter"),
    "ndarray": _decode_ndarray,
    "npscalar": _decode_npscalar,
    "generator": _decode_generator,
    "ref": _decode_ref,
}


def tensors_in(value) -> list[torch.Tensor]:
    """The tensors in `value`, depth first, in the order `encode` writes them (both sides number a
    call's inputs and outputs so)."""
    found: list[torch.Tensor] = []

    def walk(v, depth):
        if depth > 64:
            return
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif type(v) in (list, tuple, set, frozenset):
            for x in v:
                walk(x, depth + 1)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x, depth + 1)
    walk(value, 0)
    return found
