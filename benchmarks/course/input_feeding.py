"""Notebook 04's input feeding (issue 49, item 6), longer than the notebook can afford: Luong's decoder
(general score) with and without input feeding beside the additive attention decoder of section 4, on
purple cats, each trained to the notebook's criterion (validation loss, at most --max-epochs epochs)
from several seeds; validation loss, BLEU (greedy and beam 4) and gold-alignment mass on the test pairs.

    python benchmarks/course/input_feeding.py [--seeds 0 1 2] [--max-epochs N] [--test-pairs N] [--threads N]

The models are the solution notebook's own code (benchmarks.course.seq2seq_bleu.notebook_namespace) and
the attention-map helper of its heatmap cell. Writes benchmarks/results/input_feeding.json.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.machine import save  # noqa: E402
from benchmarks.course.seq2seq_bleu import NAME, notebook_namespace  # noqa: E402
from benchmarks.course.solution_cells import solution_namespace  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-epochs", type=int, default=40)
    parser.add_argument("--test-pairs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    ns = notebook_namespace()
    solution_namespace(NAME, ["exp_heatmap_purple_cats"], stop_at={"exp_heatmap_purple_cats": "fig, axes"}, namespace=ns)
    torch = ns["torch"]
    torch.set_num_threads(args.threads)
    ns["device"] = torch.device("cpu")
    EncoderDecoder, Seq2SeqEncoder, Lexicon = ns["EncoderDecoder"], ns["Seq2SeqEncoder"], ns["Lexicon"]
    train = [(p.source, p.target) for p in ns["purple_cats_pairs"](3000, seed=0)]
    valid = [(p.source, p.target) for p in ns["purple_cats_pairs"](300, seed=2)]
    test = ns["purple_cats_pairs"](400, seed=1)[:args.test_pairs]
    src_lex, tgt_lex = Lexicon(s for s, _ in train), Lexicon(t for _, t in train)
    E, H = 32, 64
    decoders = {
        "additive (section 4)": lambda: ns["AttentionDecoder"](len(tgt_lex), E, H),
        "Luong, general": lambda: ns["LuongDecoder"](len(tgt_lex), E, H, "general"),
        "Luong, general, input feeding": lambda: ns["LuongDecoder"](len(tgt_lex), E, H, "general", input_feeding=True),
    }
    rows = []
    for seed in args.seeds:
        for name, decoder in decoders.items():
            torch.manual_seed(seed)
            model = EncoderDecoder(Seq2SeqEncoder(len(src_lex), E, H), decoder())
            losses, seconds, valid_losses = ns["train_seq2seq"](model, train, src_lex, tgt_lex, epochs=args.max_epochs,
                                                                batch_size=128, lr=0.01, seed=seed, valid_pairs=valid)
            refs = [p.target for p in test]
            greedy = [ns["translate"](model, p.source, src_lex, tgt_lex) for p in test]
            beam = [ns["translate"](model, p.source, src_lex, tgt_lex, beam_size=4) for p in test]
            row = {"model": name, "seed": seed, "parameters": sum(p.numel() for p in model.parameters()),
                   "epochs": len(valid_losses), "kept_epoch": valid_losses.index(min(valid_losses)) + 1,
                   "train_s": round(seconds, 1), "valid_loss": round(min(valid_losses), 4),
                   "bleu_greedy": round(100 * ns["corpus_bleu"](greedy, refs), 1),
                   "bleu_beam4": round(100 * ns["corpus_bleu"](beam, refs), 1),
                   "gold_mass": round(ns["gold_attention_mass"](model, test, src_lex, tgt_lex), 3)}
            rows.append(row)
            print(row, flush=True)
    print(f"saved {save('input_feeding', rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
