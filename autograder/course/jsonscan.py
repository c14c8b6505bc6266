"""Bounds on JSON text that the grader checks before it parses it.

`json.loads` builds every value of a text before anyone can count them: a few megabytes of
tiny nested lists become gigabytes of Python objects. What a kernel or a hand-in sends is
therefore measured first, on its bytes: its size, the number of values (containers and
items) and how deep its brackets nest, counted with the strings taken out (a bracket
inside a string is text). Only a text within all three bounds is parsed.

    check(raw, JsonBounds(...), what)   raises TooLarge with the reason in words
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# A JSON string (escapes included); an unterminated one stays in the text and json.loads refuses it.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class TooLarge(ValueError):
    """A JSON text past one of its bounds (the reason in words)."""


@dataclass(frozen=True)
class JsonBounds:
    bytes: int
    values: int         # containers and items, counted as brackets and commas
    depth: int          # how deep brackets nest
    scan_from: int = 0  # a text of at most this many bytes is not measured: parsed, it cannot build
    #                     more than about 70 bytes of objects a byte (and the measure costs 2-6 times the parse)


def check(raw: bytes, bounds: JsonBounds, what: str) -> None:
    """Raise TooLarge when `raw` (JSON text) is past `bounds`; `what` names it in the reason."""
    if len(raw) > bounds.bytes:
        raise TooLarge(f"{what} is {len(raw):,} bytes, more than the limit of {bounds.bytes:,}")
    if len(raw) <= bounds.scan_from:
        return
    import numpy  # here: the grade command imports it for nothing else

    bare = _STRING.sub(b'""', raw)
    values = bare.count(b",") + bare.count(b"[") + bare.count(b"{")
    if values > bounds.values:
        raise TooLarge(f"{what} holds about {values:,} values, more than the limit of {bounds.values:,}")
    brackets = numpy.frombuffer(bare.translate(None, _NOT_BRACKETS), dtype=numpy.uint8)
    if len(brackets):
        opening = (brackets == ord("[")) | (brackets == ord("{"))
        depth = int(numpy.cumsum(numpy.where(opening, 1, -1), dtype=numpy.int64).max())
        if depth > bounds.depth:
            raise TooLarge(f"{what} nests {depth:,} deep, more than the limit of {bounds.depth:,}")
