"""utils.lexicon (tokens, Lexicon, padded batches) and utils.purple_cats (the synthetic task)."""
import pytest
import torch

from utils.purple_cats import PurpleCatsPair, purple_cats_pairs, translate_purple_cats
from utils.lexicon import Lexicon, collate_pairs, iterate_batches, join_tokens, split_sentence


@pytest.mark.parametrize("sentence, tokens", [
    ("J'aime les chats violets !", ["j'", "aime", "les", "chats", "violets", "!"]),
    ("They can't see me.", ["they", "can't", "see", "me", "."]),
    ("Ils l’ont fait aujourd'hui...", ["ils", "l'", "ont", "fait", "aujourd'", "hui", "..."]),
    ("Peut-être, est-ce vrai\u202f?", ["peut-être", ",", "est-ce", "vrai", "?"]),
])
def test_split_sentence_keeps_elisions_contractions_and_hyphens(sentence, tokens):
    assert split_sentence(sentence) == tokens


def test_split_sentence_can_keep_case_and_join_tokens_inverts_it():
    assert split_sentence("I love Purple cats", lower=False) == ["I", "love", "Purple", "cats"]
    assert join_tokens(["j'", "aime", "les", "chats", "violets"]) == "j'aime les chats violets"
    assert join_tokens([]) == ""


def test_lexicon_orders_specials_then_alphabetically_and_maps_unknowns():
    lex = Lexicon([["purple", "cats", "are", "great"], ["purple", "cats"]])
    assert lex.itos == ["[PAD]", "[UNK]", "[START]", "[STOP]", "are", "cats", "great", "purple"]
    assert (lex.pad_id, lex.unk_id, lex.bos_id, lex.eos_id) == (0, 1, 2, 3)
    assert len(lex) == 8 and lex.stoi["purple"] == 7
    assert lex.to_ids(["purple", "dogs"]) == [7, 1]
    assert lex.to_tokens([2, 7, 5, 3, 6, 0]) == ["purple", "cats"]  # bos skipped, stops at eos
    assert Lexicon([["a", "b", "a"]], min_count=2).itos[4:] == ["a"]


def test_collate_pairs_pads_and_shifts_targets():
    src_lex = Lexicon([["i", "love", "cats"]])
    tgt_lex = Lexicon([["j'", "aime", "les", "chats"]])
    batch = collate_pairs([(["i", "love", "cats"], ["j'", "aime", "les", "chats"]),
                           (["cats"], ["chats"])], src_lex, tgt_lex)
    assert batch.src.tolist() == [src_lex.to_ids(["i", "love", "cats"]), [src_lex.stoi["cats"], 0, 0]]
    assert batch.src_valid_lens.tolist() == [3, 1] and batch.tgt_valid_lens.tolist() == [5, 2]
    aime, les, chats, j = (tgt_lex.stoi[w] for w in ("aime", "les", "chats", "j'"))
    assert batch.tgt_in.tolist() == [[2, j, aime, les, chats], [2, chats, 0, 0, 0]]
    assert batch.tgt_out.tolist() == [[j, aime, les, chats, 3], [chats, 3, 0, 0, 0]]
    assert batch.src.dtype == torch.long and len(batch) == 2
    assert batch.to("cpu").tgt_out.equal(batch.tgt_out)
    with pytest.raises(ValueError):
        collate_pairs([([], ["x"])], src_lex, tgt_lex)


def test_iterate_batches_covers_every_pair_once_and_is_seeded():
    pairs = purple_cats_pairs(50, seed=1)
    src_lex, tgt_lex = Lexicon(p.source for p in pairs), Lexicon(p.target for p in pairs)
    batches = list(iterate_batches(pairs, src_lex, tgt_lex, 16, generator=torch.Generator().manual_seed(0)))
    assert [len(b) for b in batches] == [16, 16, 16, 2]
    assert sorted(int(n) for b in batches for n in b.src_valid_lens) == sorted(len(p.source) for p in pairs)
    again = list(iterate_batches(pairs, src_lex, tgt_lex, 16, generator=torch.Generator().manual_seed(0)))
    assert all(a.src.equal(b.src) for a, b in zip(batches, again))
    ordered = next(iterate_batches(pairs, src_lex, tgt_lex, 3, shuffle=False))
    assert ordered.src_valid_lens.tolist() == [len(p.source) for p in pairs[:3]]


@pytest.mark.parametrize("english, french", [
    ("I love purple cats", "j'aime les chats violets"),
    ("I see purple cats.", "je vois des chats violets"),
    ("Purple cats eat the small green apples", "les chats violets mangent les petites pommes vertes"),
    ("she has a white mouse near the bird", "elle a une souris blanche près de l'oiseau"),
    ("we want my dogs and your hat near the houses", "nous voulons mes chiens et ton chapeau près des maisons"),
    ("the horses love the tree in a house", "les chevaux aiment l'arbre dans une maison"),
    ("he sees a horse near a small tree", "il voit un cheval près d'un petit arbre"),
])
def test_translate_purple_cats_examples(english, french):
    assert join_tokens(translate_purple_cats(english).target) == french


def test_translate_purple_cats_rejects_sentences_outside_the_grammar():
    for bad in ("I love cat", "he love cats", "I love a cats", "I love purple cats quickly", "cats"):
        with pytest.raises(ValueError):
            translate_purple_cats(bad)


def test_purple_cats_alignment_crosses_for_moved_adjectives():
    pair = translate_purple_cats("I love purple cats")
    # purple (2) -> violets (4), cats (3) -> chats (3): the links cross
    assert (2, 4) in pair.alignment and (3, 3) in pair.alignment
    assert pair.source == ["i", "love", "purple", "cats"]


def test_purple_cats_pairs_are_deterministic_consistent_and_length_filtered():
    pairs = purple_cats_pairs(300, seed=7)
    assert pairs == purple_cats_pairs(300, seed=7) and pairs != purple_cats_pairs(300, seed=8)
    assert all(isinstance(p, PurpleCatsPair) for p in pairs)
    for p in pairs:  # every sampled sentence parses back to the same pair, tokens round-trip
        assert translate_purple_cats(" ".join(p.source)) == p
        assert split_sentence(join_tokens(p.target)) == p.target
        assert {j for _, j in p.alignment} == set(range(len(p.target)))  # every French word aligned
        assert all(0 <= i < len(p.source) for i, _ in p.alignment)
    lengths = {len(p.source) for p in pairs}
    assert min(lengths) <= 5 and max(lengths) >= 15
    short = purple_cats_pairs(40, seed=0, min_len=4, max_len=6)
    assert all(4 <= len(p.source) <= 6 for p in short)
    with pytest.raises(ValueError):
        purple_cats_pairs(1, min_len=40)


def test_notebook_04s_subword_experiment_inverts_its_pieces_and_leaves_nothing_unknown():
    """04's optional cell (exp_subword) with notebook 01's solution pasted, as a student would: the pieces of
    a sentence decode to its words exactly, a word never seen in training still gets known pieces, and
    unk_share counts the word lexicon's [UNK] tokens. The solution notebook itself never runs this path."""
    from benchmarks.course.solution_cells import solution_namespace

    bpe = solution_namespace("01_tokenization_embeddings", ["setup", "byte_basics", "train_byte_bpe", "byte_encode"])
    ns = solution_namespace("04_seq2seq_attention", ["exp_subword"], stop_at={"exp_subword": "if real is not None:"},
                            namespace={"Lexicon": Lexicon})
    train = [split_sentence(s) for s in ["J'aime les chats violets.", "Les chats dorment.", "J'aime dormir."]]
    to_pieces, to_words, every_piece = ns["bpe_pieces"](train, 20, bpe["train_byte_bpe"], bpe["byte_encode"],
                                                        bpe["byte_decode"])
    assert len(every_piece) == 256 + 20 and len(set(every_piece)) == len(every_piece)
    for words in train + [split_sentence("Les éléphants dégueulasses dorment !")]:
        pieces = to_pieces(words)
        assert set(pieces) <= set(every_piece) and to_words(pieces) == words
    pieces_lex = Lexicon([every_piece] + [to_pieces(s) for s in train])
    assert pieces_lex.unk_id not in pieces_lex.to_ids(to_pieces(split_sentence("Des éléphants !")))
    words_lex = Lexicon(train, min_count=2)   # "j'", "aime", "les", "chats", "." seen twice
    assert ns["unk_share"]([["les", "chats", "zèbres", "."]], words_lex) == 0.25
    assert ns["unk_share"]([], words_lex) == 0
