"""Tokens, a vocabulary and padded batches for translation models (notebooks 04 and 07).

These are deliberately plain, and differ from the tokenizer and vocabulary that notebook 01
asks students to write: words are lowercased, French elisions keep their apostrophe
("J'aime" -> "j'", "aime"), English contractions stay whole ("can't"), hyphenated words stay
whole ("peut-être"), and the vocabulary lists its words in alphabetical order.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

import torch

from utils.translation import normalize_sentence

__all__ = ["split_sentence", "join_tokens", "Lexicon", "TranslationBatch", "collate_pairs", "iterate_batches"]


_TOKEN = re.compile(
    r"\w+'(?:t|s|re|ll|ve|d|m)\b"  # English contraction, one token: can't, it's, we'll
    r"|\w+'"                       # French elision, apostrophe kept: j' l' qu' aujourd'
    r"|\w+(?:-\w+)*"               # a word, hyphens inside allowed: peut-être, est-ce
    r"|\.\.\.|[^\w\s]"             # an ellipsis, or any other single symbol
)
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'", "`": "'"})


def split_sentence(sentence: str, lower: bool = True) -> list[str]:
    """Split one sentence into translation tokens (lowercased unless `lower=False`).

    >>> split_sentence("J'aime les chats violets !")
    ["j'", 'aime', 'les', 'chats', 'violets', '!']
    """
    sentence = normalize_sentence(sentence).translate(_APOSTROPHES)
    if lower:
        sentence = sentence.lower()
    return _TOKEN.findall(sentence)


def join_tokens(tokens: Sequence[str]) -> str:
    """Tokens back to readable text: spaces between tokens, none after an elision ("j'aime")."""
    text = ""
    for token in tokens:
        text += token if (not text or text.endswith("'")) else " " + token
    return text


class Lexicon:
    """Token <-> id table: the specials first, with notebook 01's names and order ([PAD], [UNK],
    [START] = the decoder's bos, [STOP] = eos), then every token seen at least `min_count` times,
    in ALPHABETICAL order (so ids are easy to find by eye).

    Attributes: `itos` (list of str), `stoi` (dict), `pad_id`, `bos_id`, `eos_id`, `unk_id`.
    """

    SPECIALS = ("[PAD]", "[UNK]", "[START]", "[STOP]")

    def __init__(self, token_lists: Iterable[Sequence[str]], min_count: int = 1):
        counts = Counter(token for tokens in token_lists for token in tokens)
        words = sorted(t for t, c in counts.items() if c >= min_count and t not in self.SPECIALS)
        self.itos: list[str] = list(self.SPECIALS) + words
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = range(4)

    def __len__(self) -> int:
        return len(self.itos)

    def to_ids(self, tokens: Sequence[str]) -> list[int]:
        """Ids of `tokens`; an unseen token becomes `unk_id`. Adds no bos/eos."""
        return [self.stoi.get(t, self.unk_id) for t in tokens]

    def to_tokens(self, ids: Iterable[int]) -> list[str]:
        """Tokens of `ids`, skipping pad and bos and stopping at the first eos."""
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i not in (self.pad_id, self.bos_id):
                out.append(self.itos[i])
        return out


@dataclass
class TranslationBatch:
    """A padded batch. B sentences, S = longest source, T = longest target + 1.

    src (B,S) long, padded with pad_id; src_valid_lens (B,) long, the real source lengths;
    tgt_in (B,T) long = [bos, y1, ..., yn] (the decoder's input under teacher forcing);
    tgt_out (B,T) long = [y1, ..., yn, eos] (what it must predict), both padded with pad_id;
    tgt_valid_lens (B,) long = n + 1.
    """

    src: torch.Tensor
    src_valid_lens: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    tgt_valid_lens: torch.Tensor

    def to(self, device) -> "TranslationBatch":
        return TranslationBatch(*(getattr(self, f).to(device) for f in
                                  ("src", "src_valid_lens", "tgt_in", "tgt_out", "tgt_valid_lens")))

    def __len__(self) -> int:
        return self.src.shape[0]


def _pad(rows: list[list[int]], pad_id: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], dtype=torch.long)


def collate_pairs(pairs: Sequence[tuple[Sequence[str], Sequence[str]]],
                  src_lex: Lexicon, tgt_lex: Lexicon) -> TranslationBatch:
    """Tokenized (source, target, ...) pairs -> a padded TranslationBatch (see its docstring).
    Only items 0 and 1 of each pair are used. Every source must have at least one token."""
    if not pairs:
        raise ValueError("collate_pairs needs at least one pair")
    src = [src_lex.to_ids(pair[0]) for pair in pairs]
    if min(len(s) for s in src) == 0:
        raise ValueError("a source sentence has no tokens")
    tgt = [tgt_lex.to_ids(pair[1]) for pair in pairs]
    return TranslationBatch(
        src=_pad(src, src_lex.pad_id),
        src_valid_lens=torch.tensor([len(s) for s in src], dtype=torch.long),
        tgt_in=_pad([[tgt_lex.bos_id] + t for t in tgt], tgt_lex.pad_id),
        tgt_out=_pad([t + [tgt_lex.eos_id] for t in tgt], tgt_lex.pad_id),
        tgt_valid_lens=torch.tensor([len(t) + 1 for t in tgt], dtype=torch.long),
    )


def iterate_batches(pairs: Sequence[tuple[Sequence[str], Sequence[str]]], src_lex: Lexicon,
                    tgt_lex: Lexicon, batch_size: int, shuffle: bool = True,
                    generator: torch.Generator | None = None) -> Iterator[TranslationBatch]:
    """One pass over `pairs` in padded batches (shuffled with `generator` if `shuffle`)."""
    order = torch.randperm(len(pairs), generator=generator).tolist() if shuffle else range(len(pairs))
    order = list(order)
    for start in range(0, len(order), batch_size):
        yield collate_pairs([pairs[i] for i in order[start:start + batch_size]], src_lex, tgt_lex)
