"""BLEU of notebook 04's models: with and without attention on purple cats, by source length,
each trained until its validation loss stops improving (the notebook's criterion); an attention
model on a held-out split of the Tatoeba pairs, with training time; and both models on that
split, trained to the same criterion, with BLEU by source length. The Tatoeba split is
utils.translation.split_pairs's, the one notebook 07's Transformer is scored on.

    python benchmarks/course/seq2seq_bleu.py [--tatoeba-epochs N] [--max-epochs N] [--patience N] [--min-delta X] [--threads N]
    python benchmarks/course/seq2seq_bleu.py --subword     # the attention model on byte-level BPE pieces instead of words

The models are the solution notebook's own code: its setup, solution and given cells are
executed (experiment cells skipped), so the figures are those of the classes students
write. Writes benchmarks/results/seq2seq_bleu.json.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autograder.course.layout import grade_id, read_notebook, solution_path  # noqa: E402
from benchmarks.machine import save  # noqa: E402
from benchmarks.course.solution_cells import solution_namespace  # noqa: E402
from utils.translation import load_translation_pairs, split_pairs  # noqa: E402

NAME = "04_seq2seq_attention"
BUCKETS = [(3, 6), (7, 9), (10, 12), (13, 15), (16, 25)]
TATOEBA_BUCKETS = [(2, 3), (4, 4), (5, 5), (6, 8)]  # source tokens, punctuation included: the pairs have 2 to 8


def notebook_namespace() -> dict:
    """The globals of the solution notebook after its setup, given and solution cells (not its
    experiments, tests or the check_submission cell), run in notebook order."""
    cells = [grade_id(cell) for cell in read_notebook(solution_path(NAME)).cells if cell.cell_type == "code"]
    return solution_namespace(NAME, [gid for gid in cells if gid and not gid.startswith(("exp_", "test_"))
                                     and gid != "check_submission"])


def subword_row(ns, to_the_criterion, train, valid, test, src_lex, tgt_lex) -> dict:
    """Notebook 04's optional experiment on the whole split: the attention model on byte-level BPE pieces (notebook
    01's solution, with merges learned by its incremental trainer train_byte_bpe_fast, which learns the naive
    trainer's merges faster), as many merges as make each piece vocabulary the size of its word lexicon, trained to the
    criterion and scored on words."""
    bpe = solution_namespace("01_tokenization_embeddings", ["setup", "byte_basics", "train_byte_bpe", "train_byte_bpe_fast",
                                                           "byte_encode"])
    solution_namespace(NAME, ["exp_subword"], stop_at={"exp_subword": "if real is not None:"}, namespace=ns)
    Lexicon = ns["Lexicon"]

    def train_bpe(text, num_merges):
        return bpe["train_byte_bpe_fast"](text, num_merges)

    def codec(side, lex):
        merges = len(lex) - len(Lexicon.SPECIALS) - 256
        return ns["bpe_pieces"]([pair[side] for pair in train], merges, train_bpe, bpe["byte_encode"], bpe["byte_decode"]), merges

    (en_pieces, _, en_all), en_merges = codec(0, src_lex)
    (fr_pieces, fr_words, fr_all), fr_merges = codec(1, tgt_lex)
    piece_train, piece_valid = ([(en_pieces(s), fr_pieces(t)) for s, t in pairs] for pairs in (train, valid))
    lexicons = Lexicon([en_all] + [s for s, _ in piece_train]), Lexicon([fr_all] + [t for _, t in piece_train])
    row = to_the_criterion("tatoeba eng-fra, to the criterion, byte-level BPE pieces", "attention", ns["AttentionDecoder"],
                           piece_train, piece_valid, test, lexicons, (64, 128), TATOEBA_BUCKETS, source=en_pieces,
                           output=fr_words, batch_size=64, lr=0.005)
    unk_share = ns["unk_share"]
    row.update({"merges": [en_merges, fr_merges], "lexicons": [len(lex) for lex in lexicons],
                "word_lexicons": [len(src_lex), len(tgt_lex)],
                "pieces_per_sentence": [round(sum(len(p[side]) for p in piece_train) / len(piece_train), 2) for side in (0, 1)],
                "words_per_sentence": [round(sum(len(p[side]) for p in train) / len(train), 2) for side in (0, 1)],
                "test_unk_share_words": [round(unk_share([p[side] for p in test], lex), 4)
                                         for side, lex in ((0, src_lex), (1, tgt_lex))],
                "note": "valid_losses are nats per French piece, not per word: compare BLEU, not losses, with the word rows"})
    print({k: v for k, v in row.items() if k not in ("valid_losses", "bleu_by_source_length")})
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tatoeba-epochs", type=int, default=3)
    parser.add_argument("--max-epochs", type=int, default=40, help="the criterion runs: at most this many epochs")
    parser.add_argument("--patience", type=int, default=1, help="the criterion: epochs without enough progress")
    parser.add_argument("--min-delta", type=float, default=0.01, help="the criterion: progress, in nats per token")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--subword", action="store_true",
                        help="only the Tatoeba attention model on notebook 01's byte-level BPE pieces (seq2seq_subword.json)")
    args = parser.parse_args()
    ns = notebook_namespace()
    torch = ns["torch"]
    torch.set_num_threads(args.threads)
    ns["device"] = torch.device("cpu")
    EncoderDecoder, Seq2SeqEncoder = ns["EncoderDecoder"], ns["Seq2SeqEncoder"]
    train_seq2seq, translate, corpus_bleu = ns["train_seq2seq"], ns["translate"], ns["corpus_bleu"]
    bleu_by_length = ns["bleu_by_length"]
    Lexicon, split_sentence = ns["Lexicon"], ns["split_sentence"]

    def to_the_criterion(task, name, decoder_class, train, valid, test, lexicons, size, buckets, source=None, output=None,
                         **training):
        """One model trained to the notebook's criterion; its row (BLEU overall and by source length). The test
        pairs are word tokens; a model trained on other units gets source(words) and gives output(units) -> words."""
        src_lex, tgt_lex = lexicons
        torch.manual_seed(0)
        model = EncoderDecoder(Seq2SeqEncoder(len(src_lex), *size), decoder_class(len(tgt_lex), *size))
        losses, seconds, valid_losses = train_seq2seq(model, train, src_lex, tgt_lex, epochs=args.max_epochs,
                                                      valid_pairs=valid, patience=args.patience,
                                                      min_delta=args.min_delta, **training)
        hyps = [(output or list)(translate(model, (source or list)(s), src_lex, tgt_lex)) for s, _ in test]
        refs = [t for _, t in test]
        scores, counts = bleu_by_length(hyps, refs, [len(s) for s, _ in test], buckets)
        row = {"task": task, "model": name, "train_pairs": len(train), "valid_pairs": len(valid), "test_pairs": len(test),
               "patience": args.patience, "min_delta": args.min_delta, "epochs": len(valid_losses),
               "best_epoch": valid_losses.index(min(valid_losses)) + 1, "valid_losses": [round(v, 3) for v in valid_losses],
               "steps": len(losses), "train_s": round(seconds, 1), "final_loss": round(losses[-1], 3),
               "bleu_greedy": round(100 * corpus_bleu(hyps, refs), 1),
               "bleu_by_source_length": {f"{lo}-{hi}": {"sentences": n, "bleu": round(b, 1)}
                                         for (lo, hi), n, b in zip(buckets, counts, scores)}}
        print(f"{task}, {name:>12}: {row['epochs']} epochs (best {row['best_epoch']}) in {row['train_s']} s, "
              f"validation {row['valid_losses']}, BLEU {row['bleu_greedy']}, by length {[round(b, 1) for b in scores]}")
        return row

    models = [("no attention", ns["PlainDecoder"]), ("attention", ns["AttentionDecoder"])]
    # Tatoeba, split as notebook 07 splits it (utils.translation.split_pairs): 500 held out, 500 for validation
    data = load_translation_pairs()
    pairs = [(split_sentence(en), split_sentence(fr)) for en, fr in data.pairs]
    train_real, valid_real, held_out = split_pairs(pairs, n_test=500, n_valid=500, seed=0)
    src_lex, tgt_lex = Lexicon((s for s, _ in train_real), min_count=2), Lexicon((t for _, t in train_real), min_count=2)
    if args.subword:
        row = subword_row(ns, to_the_criterion, train_real, valid_real, held_out, src_lex, tgt_lex)
        print(f"saved {save('seq2seq_subword', [row])}")
        return 0

    # purple cats: the notebook's full-mode configuration (both models trained to the criterion)
    train = [(p.source, p.target) for p in ns["purple_cats_pairs"](3000, seed=0)]
    test = [(p.source, p.target) for p in ns["purple_cats_pairs"](400, seed=1)]
    valid = [(p.source, p.target) for p in ns["purple_cats_pairs"](300, seed=2)]
    lexicons = Lexicon(s for s, _ in train), Lexicon(t for _, t in train)
    rows = [to_the_criterion("purple cats, to the criterion", name, decoder_class, train, valid, test, lexicons, (32, 64),
                             BUCKETS, batch_size=128, lr=0.01) for name, decoder_class in models]

    # an attention model trained a fixed 3 epochs, greedy and beam search
    torch.manual_seed(0)
    model = EncoderDecoder(Seq2SeqEncoder(len(src_lex), 64, 128), ns["AttentionDecoder"](len(tgt_lex), 64, 128))
    losses, seconds, _ = train_seq2seq(model, train_real, src_lex, tgt_lex, epochs=args.tatoeba_epochs, batch_size=64,
                                       lr=0.005)
    refs = [t for _, t in held_out]
    greedy = [translate(model, s, src_lex, tgt_lex) for s, _ in held_out]
    start = time.perf_counter()
    beam = [translate(model, s, src_lex, tgt_lex, beam_size=4) for s, _ in held_out]
    beam_s = time.perf_counter() - start
    row = {"task": "tatoeba eng-fra", "model": "attention", "train_pairs": len(train_real), "test_pairs": len(held_out),
           "skipped_lines": len(data.skipped), "lexicons": [len(src_lex), len(tgt_lex)], "epochs": args.tatoeba_epochs,
           "steps": len(losses), "train_s": round(seconds, 1), "final_loss": round(losses[-1], 3),
           "bleu_greedy": round(100 * corpus_bleu(greedy, refs), 1), "bleu_beam4": round(100 * corpus_bleu(beam, refs), 1),
           "beam4_decode_s": round(beam_s, 1),
           "examples": [[" ".join(s), " ".join(g), " ".join(t)] for (s, t), g in list(zip(held_out, greedy))[:5]]}
    rows.append(row)
    print(f"tatoeba: {row['steps']} steps in {row['train_s']} s, held-out BLEU greedy {row['bleu_greedy']}, beam 4 {row['bleu_beam4']}")

    # both models trained to the criterion on the validation pairs
    rows += [to_the_criterion("tatoeba eng-fra, to the criterion", name, decoder_class, train_real, valid_real,
                              held_out, (src_lex, tgt_lex), (64, 128), TATOEBA_BUCKETS, batch_size=64, lr=0.005)
             for name, decoder_class in models]
    print(f"saved {save('seq2seq_bleu', rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
