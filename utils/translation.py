"""Sentence pairs for translation (notebooks 04 and 07).

`load_translation_pairs()` reads the Tatoeba English–French list through the dataset
registry: one pair per line, `English<TAB>French`. Real files have defects (the mirror's
last line is cut off mid-sentence), so every line that is not a clean pair is skipped and
reported, never silently kept or allowed to crash the notebook.
"""
from __future__ import annotations

import random
import unicodedata
from dataclasses import dataclass, field

from utils.data import load_text

__all__ = ["TranslationPairs", "normalize_sentence", "parse_translation_pairs", "load_translation_pairs", "split_pairs"]


# Characters that French typography puts before ? ! : ; and that look like spaces.
_SPACE_LIKE = {"\u00a0": " ", "\u202f": " ", "\u2009": " "}


@dataclass
class TranslationPairs:
    """Clean (source, target) pairs and the skipped lines as (line number, reason)."""

    pairs: list[tuple[str, str]]
    skipped: list[tuple[int, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.pairs)

    def report(self) -> str:
        """One line for the reader: how many pairs were kept and which lines were skipped."""
        text = f"{len(self.pairs)} sentence pairs"
        if self.skipped:
            shown = "; ".join(f"line {n}: {why}" for n, why in self.skipped[:3])
            more = f" (and {len(self.skipped) - 3} more)" if len(self.skipped) > 3 else ""
            text += f", {len(self.skipped)} malformed line(s) skipped: {shown}{more}"
        return text


def normalize_sentence(sentence: str) -> str:
    """NFC form, with the space-like characters of French typography made plain spaces."""
    sentence = unicodedata.normalize("NFC", sentence)
    for odd, plain in _SPACE_LIKE.items():
        sentence = sentence.replace(odd, plain)
    return sentence


def parse_translation_pairs(text: str) -> TranslationPairs:
    """Parse `source<TAB>target` lines. Skips (and records) lines with a wrong number of
    fields, an empty side, or a side that ends in whitespace (a sentence cut off mid-way)."""
    result = TranslationPairs(pairs=[])
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            result.skipped.append((number, f"{len(fields)} tab-separated fields, expected 2"))
            continue
        source, target = (normalize_sentence(f) for f in fields)
        if not source.strip() or not target.strip():
            result.skipped.append((number, "an empty side"))
        elif source != source.rstrip() or target != target.rstrip():
            result.skipped.append((number, f"cut off mid-sentence: {line.strip()!r}"))
        else:
            result.pairs.append((source.strip(), target.strip()))
    return result


def load_translation_pairs(name: str = "eng-fra-tatoeba", max_pairs: int | None = None) -> TranslationPairs:
    """The clean pairs of dataset `name` (first `max_pairs` if given; the file runs short to long)."""
    data = parse_translation_pairs(load_text(name))
    if max_pairs is not None:
        data.pairs = data.pairs[:max_pairs]
    return data


def split_pairs(pairs: list, n_test: int, n_valid: int, seed: int = 0) -> tuple[list, list, list]:
    """(train, valid, test): the pairs shuffled by random.Random(seed), then the first n_test held out
    for testing and the next n_valid for validation. Notebooks 04 and 07 and their benchmarks split the
    Tatoeba pairs with this, so their BLEU scores are on the same sentences."""
    shuffled = list(pairs)
    random.Random(seed).shuffle(shuffled)
    if n_test + n_valid >= len(shuffled):
        raise ValueError(f"{len(shuffled)} pairs leave none for training after {n_test} test and {n_valid} validation pairs")
    return shuffled[n_test + n_valid:], shuffled[n_test:n_test + n_valid], shuffled[:n_test]
