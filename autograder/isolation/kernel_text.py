"""Text that came from a kernel, made valid UTF-8 once, where a grader process takes it in.

JSON lets a kernel send a lone surrogate (the escape "\\udcff", as Python writes a path's byte that
is not UTF-8), which Python decodes into a str that no UTF-8 file can hold: writing it raises, and
an executed notebook, a report, a feedback page or an export would be left cut short. Text of a
kernel enters the grader's processes in three ways, and each goes through here:
- the kernel's Jupyter messages: every Session that reads a kernel is a `session()`, whose unpacker
  is `loads` (nbgrader's client, autograder.isolation.boundary.execute; the runner's, autograder.isolation.boundary.runner);
- the strings of the replies to the test cells' calls (`valid`, in autograder.isolation.boundary.codec);
- the guard's log (`loads`, autograder.handins.integrity).
A lone surrogate becomes its escape written out ("\\udcff"): the instructor still sees what was sent.
"""
from __future__ import annotations

import json
import re

SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # JSON's escape of a surrogate, the only way to one


def valid(text: str) -> str:
    """`text` with each lone surrogate written as its escape (every other character as it is)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def session(**traits):
    """A jupyter_client Session that reads a kernel's messages with `loads`."""
    from jupyter_client.session import Session

    return Session(unpack=loads, **traits)


def loads(raw: bytes):
    """The JSON value of `raw` (bytes decoded as UTF-8, an invalid byte replaced), each str in it
    (keys too) valid."""
    raw = bytes(raw)
    value = json.loads(raw.decode("utf-8", "replace"))
    return _made_valid(value) if SURROGATE_ESCAPE.search(raw) else value


def _made_valid(value):
    """`value`, a JSON value, with each str made valid in place; iterative, at any depth."""
    if isinstance(value, str):
        return valid(value)
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key in [k for k in node if valid(k) != k]:
                node[valid(key)] = node.pop(key)
            places = list(node)
        elif isinstance(node, list):
            places = range(len(node))
        else:
            continue
        for place in places:
            if isinstance(node[place], str):
                node[place] = valid(node[place])
            else:
                stack.append(node[place])
    return value
