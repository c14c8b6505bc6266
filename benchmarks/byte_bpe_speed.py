"""Byte-level BPE training: the naive recount of notebook 01 against incremental pair counts.

    python benchmarks/byte_bpe_speed.py [--merges 1000] [--chars N] [--repeat 1]

The naive trainer is the solution notebook's own `train_byte_bpe` (its setup cell and the cells
of byte_pretokenize and train_byte_bpe are executed): every round recounts the pairs of every
distinct chunk and rewrites every chunk. The incremental trainer below keeps the pair counts
between rounds: a round touches only the chunks that hold the merged pair (subtracting their old
pairs and adding their new ones) and takes the best pair from a heap of (-count, pair) entries,
stale entries skipped, so a tie still goes to the smallest pair. Both start from the same chunks
(the notebook's byte_pretokenize) and must learn identical merges and vocabularies; the script
exits non-zero if they do not. Trains `--merges` merges on Tiny Shakespeare (utils.data.load_text,
the whole text unless --chars cuts it), times each trainer (median of --repeat runs) and writes
benchmarks/results/byte_bpe_speed.json.
"""
from __future__ import annotations

import argparse
import heapq
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.machine import save  # noqa: E402
from benchmarks.solution_cells import solution_namespace  # noqa: E402
from utils.data import load_text  # noqa: E402

NAME = "01_tokenization_embeddings"
CELLS = ("setup", "byte_basics", "byte_pretokenize", "train_byte_bpe")


def _merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Every non-overlapping occurrence of `pair`, left to right, replaced by `new_id`."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def train_incremental(text: str, num_merges: int, special_tokens, pretokenize) -> tuple[list, dict]:
    """train_byte_bpe's rules (see the notebook), with pair counts kept up to date between rounds."""
    longest_first = sorted(special_tokens, key=len, reverse=True)  # of two specials at one position, the longest
    pieces = re.split("|".join(map(re.escape, longest_first)), text) if special_tokens else [text]
    chunk_counts = Counter(tuple(chunk.encode("utf-8")) for piece in pieces for chunk in pretokenize(piece))
    chunks = [list(ids) for ids in chunk_counts]
    weights = list(chunk_counts.values())
    counts: dict[tuple[int, int], int] = defaultdict(int)
    holders: dict[tuple[int, int], set[int]] = defaultdict(set)  # chunks that hold (or once held) a pair
    for n, ids in enumerate(chunks):
        for pair in zip(ids, ids[1:]):
            counts[pair] += weights[n]
            holders[pair].add(n)
    heap = [(-c, pair) for pair, c in counts.items()]
    heapq.heapify(heap)
    vocab = {i: bytes([i]) for i in range(256)}
    merges = []
    for new_id in range(256, 256 + num_merges):
        while heap and counts.get(heap[0][1], 0) != -heap[0][0]:
            heapq.heappop(heap)  # stale: the pair's count changed since this entry was pushed
        if not heap:
            break
        best = heap[0][1]
        changed = set()
        for n in holders.pop(best):
            ids, w = chunks[n], weights[n]
            for pair in zip(ids, ids[1:]):
                counts[pair] -= w
                changed.add(pair)
            ids = chunks[n] = _merge(ids, best, new_id)
            for pair in zip(ids, ids[1:]):
                counts[pair] += w
                holders[pair].add(n)
                changed.add(pair)
        for pair in changed:
            if counts[pair] > 0:
                heapq.heappush(heap, (-counts[pair], pair))
            else:
                del counts[pair]
        merges.append(best)
        vocab[new_id] = vocab[best[0]] + vocab[best[1]]
    for j, token in enumerate(special_tokens):
        vocab[256 + len(merges) + j] = token.encode("utf-8")
    return merges, vocab


def timed(function, repeat: int):
    """(result of the last run, seconds of each run)."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return result, times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--merges", type=int, default=1000)
    parser.add_argument("--chars", type=int, default=0, help="train on the first N characters (default: all)")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()

    ns = solution_namespace(NAME, list(CELLS))
    text = load_text("tinyshakespeare")
    if args.chars:
        text = text[: args.chars]
    specials = ["<|endoftext|>"]
    pretokenize = ns["byte_pretokenize"]
    chunks, pretokenize_times = timed(lambda: pretokenize(text), args.repeat)
    print(f"{len(text):,} characters, {len(chunks):,} chunks ({len(set(chunks)):,} distinct); "
          f"pre-tokenizing takes {statistics.median(pretokenize_times):.2f} s", flush=True)

    (naive_merges, naive_vocab), naive_times = timed(lambda: ns["train_byte_bpe"](text, args.merges, specials), args.repeat)
    print(f"naive recount (the notebook's train_byte_bpe): {statistics.median(naive_times):.1f} s", flush=True)
    (inc_merges, inc_vocab), inc_times = timed(lambda: train_incremental(text, args.merges, specials, pretokenize),
                                               args.repeat)
    print(f"incremental pair counts:                       {statistics.median(inc_times):.1f} s", flush=True)

    identical = [tuple(p) for p in naive_merges] == [tuple(p) for p in inc_merges] and naive_vocab == inc_vocab
    first_difference = next((k for k, (a, b) in enumerate(zip(naive_merges, inc_merges)) if tuple(a) != tuple(b)), None)
    naive_s, inc_s = statistics.median(naive_times), statistics.median(inc_times)
    print(f"identical merges and vocabularies: {identical}"
          + ("" if identical else f" (first difference at merge {first_difference})")
          + f"; speed-up {naive_s / inc_s:.1f}x")
    rows = [{
        "text": "tinyshakespeare" + (f"[:{args.chars}]" if args.chars else ""),
        "characters": len(text),
        "chunks": len(chunks),
        "distinct_chunks": len(set(chunks)),
        "merges_requested": args.merges,
        "merges_learned": len(naive_merges),
        "special_tokens": specials,
        "repeat": args.repeat,
        "pretokenize_s": round(statistics.median(pretokenize_times), 3),
        "naive_recount_s": round(naive_s, 3),
        "naive_recount_runs_s": [round(t, 3) for t in naive_times],
        "incremental_s": round(inc_s, 3),
        "incremental_runs_s": [round(t, 3) for t in inc_times],
        "speedup": round(naive_s / inc_s, 2),
        "identical_merges": identical,
        "first_difference": first_difference,
        "first_merges": [naive_vocab[256 + k].decode("utf-8", errors="replace") for k in range(min(20, len(naive_merges)))],
    }]
    print(f"saved {save('byte_bpe_speed', rows)}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
