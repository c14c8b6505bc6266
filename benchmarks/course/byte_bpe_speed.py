"""Byte-level BPE training: notebook 01's two trainers, timed, on Tiny Shakespeare and on CS336's corpus.

    python benchmarks/course/byte_bpe_speed.py [--corpus tinyshakespeare|cs336|both] [--merges 1000] [--chars N] [--repeat 1]

Both trainers are the solution notebook's own: `train_byte_bpe` (every round recounts the pairs of
every distinct chunk and rewrites every chunk) and `train_byte_bpe_fast`, the exercise of issue 55
(pair counts and the chunks of each pair kept between rounds, the best pair from a heap whose stale
entries are skipped). Their cells run in this process (benchmarks.course.solution_cells); the script exits
non-zero if the two learn different merges or vocabularies.

--corpus tinyshakespeare: `--merges` merges on Tiny Shakespeare (utils.data.load_text; --chars cuts it).
--corpus cs336: CS336 (Stanford, spring 2025) assignment 1's speed test, `test_train_bpe_speed`: 243
  merges (vocab_size 500 = 256 bytes + 243 merges + "<|endoftext|>") on its fixture `corpus.en`
  (133 kB), under 1.5 s, the time taken from reading the file to the trained merges. The fixture is
  read from a bare git mirror of stanford-cs336/assignment1-basics (CS336_MIRROR, default
  /work/.mirror/stanford-cs336+assignment1-basics/repo) and never stored in this repository; without
  the mirror the row says so and is skipped. The learned merges are also compared, as byte pairs,
  with the fixture's reference merges (train-bpe-reference-merges.txt): CS336 breaks ties by the
  greatest pair of bytes, the course by the smallest pair of ids, so a few merges differ.
Writes benchmarks/results/byte_bpe_speed.json.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.machine import save  # noqa: E402
from benchmarks.course.solution_cells import solution_namespace  # noqa: E402
from utils.data import load_text  # noqa: E402

NAME = "01_tokenization_embeddings"
CELLS = ("setup", "byte_basics", "train_byte_bpe", "train_byte_bpe_fast")
CS336 = Path(os.environ.get("CS336_MIRROR", "/work/.mirror/stanford-cs336+assignment1-basics/repo"))
CS336_BAR_S = 1.5       # test_train_bpe_speed's bound
CS336_MERGES = 243      # vocab_size=500 with one special token


def timed(function, repeat: int):
    """(result of the last run, seconds of each run)."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return result, times


def printable_bytes() -> dict[str, int]:
    """GPT-2's stand-in character of each byte (as its merges files print them) -> the byte."""
    kept = [*range(33, 127), *range(161, 173), *range(174, 256)]
    shifted = [b for b in range(256) if b not in kept]
    table = {chr(b): b for b in kept}
    table.update({chr(256 + k): b for k, b in enumerate(shifted)})
    return table


def cs336_file(path: str) -> str | None:
    """A file of the CS336 mirror at HEAD, or None when the mirror is absent."""
    if not CS336.is_dir():
        return None
    done = subprocess.run(["git", "-C", str(CS336), "show", f"HEAD:{path}"], capture_output=True, check=False)
    return done.stdout.decode("utf-8") if done.returncode == 0 else None


def compare(ns, text: str, merges: int, repeat: int, label: str, from_file: Path | None = None) -> dict:
    specials = ["<|endoftext|>"]

    def run(trainer):
        if from_file is None:
            return trainer(text, merges, specials)
        return trainer(from_file.read_text(encoding="utf-8"), merges, specials)  # CS336 times the reading too

    (naive_merges, naive_vocab), naive_times = timed(lambda: run(ns["train_byte_bpe"]), repeat)
    (fast_merges, fast_vocab), fast_times = timed(lambda: run(ns["train_byte_bpe_fast"]), repeat)
    naive_s, fast_s = statistics.median(naive_times), statistics.median(fast_times)
    identical = naive_merges == fast_merges and naive_vocab == fast_vocab
    print(f"{label}: {len(text):,} characters, {len(naive_merges)} merges; naive {naive_s:.2f} s, "
          f"incremental {fast_s:.2f} s ({naive_s / fast_s:.1f}x); identical: {identical}", flush=True)
    return {
        "text": label, "characters": len(text), "merges_requested": merges, "merges_learned": len(naive_merges),
        "special_tokens": specials, "repeat": repeat, "load_average_before": os.getloadavg()[0],
        "naive_recount_s": round(naive_s, 3), "naive_recount_runs_s": [round(t, 3) for t in naive_times],
        "incremental_s": round(fast_s, 3), "incremental_runs_s": [round(t, 3) for t in fast_times],
        "speedup": round(naive_s / fast_s, 2), "identical_merges": identical,
        "first_merges": [fast_vocab[256 + k].decode("utf-8", errors="replace") for k in range(min(20, len(fast_merges)))],
        "_merges": fast_merges, "_vocab": fast_vocab,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=("tinyshakespeare", "cs336", "both"), default="both")
    parser.add_argument("--merges", type=int, default=1000)
    parser.add_argument("--chars", type=int, default=0, help="train on the first N characters of Tiny Shakespeare")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    ns = solution_namespace(NAME, list(CELLS))
    rows = []
    if args.corpus in ("tinyshakespeare", "both"):
        text = load_text("tinyshakespeare")
        text = text[: args.chars] if args.chars else text
        rows.append(compare(ns, text, args.merges, args.repeat,
                            "tinyshakespeare" + (f"[:{args.chars}]" if args.chars else "")))
    if args.corpus in ("cs336", "both"):
        corpus = cs336_file("tests/fixtures/corpus.en")
        if corpus is None:
            print(f"CS336's corpus is not here (no mirror at {CS336}): its row is skipped.")
            rows.append({"text": "cs336 corpus.en", "skipped": f"no mirror at {CS336}"})
        else:
            scratch = Path(os.environ.get("TMPDIR", "/tmp")) / "cs336-corpus.en"  # a file, read inside the timing
            scratch.write_text(corpus, encoding="utf-8")
            try:
                row = compare(ns, corpus, CS336_MERGES, args.repeat, "cs336 corpus.en", from_file=scratch)
            finally:
                scratch.unlink()
            decode = printable_bytes()
            reference = [tuple(bytes(decode[c] for c in part) for part in line.split(" "))
                         for line in cs336_file("tests/fixtures/train-bpe-reference-merges.txt").splitlines() if line]
            ours = [(row["_vocab"][a], row["_vocab"][b]) for a, b in row["_merges"]]
            same_place = sum(x == y for x, y in zip(ours, reference))
            row.update({"cs336_bar_s": CS336_BAR_S, "incremental_under_bar": row["incremental_s"] < CS336_BAR_S,
                        "naive_under_bar": row["naive_recount_s"] < CS336_BAR_S,
                        "reference_merges": len(reference), "same_merge_same_place": same_place,
                        "same_merge_set": len(set(ours) & set(reference)),
                        "first_difference": next((k for k, (x, y) in enumerate(zip(ours, reference)) if x != y), None),
                        "cs336_commit": subprocess.run(["git", "-C", str(CS336), "rev-parse", "HEAD"], capture_output=True,
                                                       text=True, check=False).stdout.strip()})
            print(f"  against CS336's bar of {CS336_BAR_S} s: incremental {row['incremental_s']:.2f} s, naive "
                  f"{row['naive_recount_s']:.2f} s; {same_place} of {len(reference)} merges equal to CS336's reference "
                  f"at the same place, {row['same_merge_set']} in common as a set")
            rows.append(row)
    identical = all(r.get("identical_merges", True) for r in rows)
    for r in rows:
        r.pop("_merges", None), r.pop("_vocab", None)
    print(f"saved {save('byte_bpe_speed', rows)}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
