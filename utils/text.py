"""Character-level text data for language models (notebooks 02, 03, 06, 07).

A `CharCodec` maps each distinct character of a text to an id (sorted order, no special
tokens: a language model over a fixed text needs none). `random_windows` cuts training
examples out of one long id tensor: inputs `x` and the same window shifted by one, `y`;
`stream_chunks` cuts it into consecutive chunks instead, for a recurrent model that carries its
state from one chunk to the next (truncated backpropagation through time).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["CharCodec", "split_ids", "random_windows", "stream_chunks"]


@dataclass(frozen=True)
class CharCodec:
    """Characters ↔ ids; `itos[i]` is the character with id i."""

    itos: tuple[str, ...]

    @classmethod
    def from_text(cls, text: str) -> "CharCodec":
        if not text:
            raise ValueError("CharCodec.from_text needs a non-empty text")
        return cls(tuple(sorted(set(text))))

    @property
    def stoi(self) -> dict[str, int]:
        return {ch: i for i, ch in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> torch.Tensor:
        """text → LongTensor (len(text),). Unknown characters raise a KeyError naming them."""
        stoi = self.stoi
        unknown = sorted(set(text) - stoi.keys())
        if unknown:
            raise KeyError(f"characters not in the vocabulary: {unknown!r}")
        return torch.tensor([stoi[ch] for ch in text], dtype=torch.long)

    def decode(self, ids) -> str:
        """ids (a 1-D tensor or a list of ints) → text."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return "".join(self.itos[i] for i in ids)


def split_ids(ids: torch.Tensor, val_fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a 1-D id tensor into (train, validation): the last `val_fraction` is validation."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    cut = int(len(ids) * (1 - val_fraction))
    return ids[:cut], ids[cut:]


def random_windows(
    ids: torch.Tensor,
    batch_size: int,
    block_size: int,
    generator: torch.Generator | None = None,
    device=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch_size` random windows of a 1-D id tensor → (x, y), both LongTensor (B, block_size).

    y is x shifted left by one position: y[b, t] is the character that follows x[b, t].
    """
    if len(ids) <= block_size:
        raise ValueError(f"the text has {len(ids)} ids; a window needs at least {block_size + 1}")
    starts = torch.randint(len(ids) - block_size, (batch_size,), generator=generator)
    offsets = torch.arange(block_size + 1)
    windows = ids[starts[:, None] + offsets]
    x, y = windows[:, :-1], windows[:, 1:]
    if device is not None:
        x, y = x.to(device), y.to(device)
    return x, y


def stream_chunks(ids: torch.Tensor, batch_size: int, chunk_len: int):
    """Yield (x, y), both LongTensor (batch_size, chunk_len), that read a 1-D id tensor as
    `batch_size` parallel streams: row b reads the b-th of batch_size equal consecutive parts
    of the text, and each chunk continues the previous one where it stopped, so the state a
    recurrent model ends one chunk with is the right start for the next. y is x shifted left by
    one position. The ids that do not fill a whole chunk at the end are left out.
    """
    if batch_size < 1 or chunk_len < 1:
        raise ValueError(f"batch_size and chunk_len must be at least 1, got {batch_size} and {chunk_len}")
    per_row = (len(ids) - 1) // batch_size
    if per_row < chunk_len:
        raise ValueError(f"the text has {len(ids)} ids: {batch_size} streams of one chunk of {chunk_len} "
                         f"need at least {batch_size * chunk_len + 1}")
    rows = torch.stack([ids[b * per_row:(b + 1) * per_row + 1] for b in range(batch_size)])
    for start in range(0, per_row - chunk_len + 1, chunk_len):
        yield rows[:, start:start + chunk_len], rows[:, start + 1:start + chunk_len + 1]
