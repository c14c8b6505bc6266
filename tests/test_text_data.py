"""utils.text (character data for language models) and utils.translation (sentence pairs)."""
import random

import pytest
import torch

from utils.data import DatasetUnavailable, dataset_path
from utils.text import CharCodec, random_windows, split_ids, stream_chunks
from utils.translation import load_translation_pairs, parse_translation_pairs, split_pairs


def test_char_codec_round_trip_and_sorted_ids():
    codec = CharCodec.from_text("I love purple cats.")
    assert codec.itos == tuple(sorted(set("I love purple cats.")))
    ids = codec.encode("purple cats")
    assert ids.dtype == torch.long and codec.decode(ids) == "purple cats"
    assert codec.decode(ids.tolist()) == "purple cats"


def test_char_codec_names_unknown_characters():
    with pytest.raises(KeyError, match="'z'"):
        CharCodec.from_text("abc").encode("abz")
    with pytest.raises(ValueError):
        CharCodec.from_text("")


def test_random_windows_targets_are_inputs_shifted_by_one():
    ids = torch.arange(100)
    x, y = random_windows(ids, batch_size=8, block_size=5, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (8, 5)
    assert torch.equal(y, x + 1)  # ids are consecutive integers, so the next one is +1
    assert int(x.max()) <= 98 and int(y.max()) <= 99
    x2, _ = random_windows(ids, 8, 5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)


def test_random_windows_refuses_a_text_shorter_than_a_window():
    with pytest.raises(ValueError, match="at least 6"):
        random_windows(torch.arange(5), 2, 5)


def test_stream_chunks_continue_each_row_where_the_last_chunk_stopped():
    ids = torch.arange(23)                      # 2 streams of 11 ids (and the one that follows each)
    chunks = list(stream_chunks(ids, batch_size=2, chunk_len=4))
    assert len(chunks) == 2                     # 11 // 4 whole chunks per row; the rest is left out
    (x0, y0), (x1, y1) = chunks
    assert x0.tolist() == [[0, 1, 2, 3], [11, 12, 13, 14]]
    assert x1.tolist() == [[4, 5, 6, 7], [15, 16, 17, 18]]
    assert torch.equal(y0, x0 + 1) and torch.equal(y1, x1 + 1)
    with pytest.raises(ValueError, match="at least 9"):
        list(stream_chunks(torch.arange(8), 2, 4))


def test_split_ids_keeps_order():
    train, val = split_ids(torch.arange(10), 0.2)
    assert train.tolist() == list(range(8)) and val.tolist() == [8, 9]
    with pytest.raises(ValueError):
        split_ids(torch.arange(10), 1.0)


def test_parse_translation_pairs_skips_and_reports_malformed_lines():
    text = ("Go.\tVa !\n"
            "I love purple cats.\tJ'aime les chats violets.\n"
            "no tab here\n"
            "\tQuoi ?\n"
            "They did it again.\tIls l'ont ")
    data = parse_translation_pairs(text)
    assert data.pairs == [("Go.", "Va !"), ("I love purple cats.", "J'aime les chats violets.")]
    assert [n for n, _ in data.skipped] == [3, 4, 5]
    assert "cut off" in data.skipped[2][1]
    assert "3 malformed line(s)" in data.report()


def test_parse_translation_pairs_normalizes_french_spaces():
    data = parse_translation_pairs("Really?\tVraiment\u202f?\n")
    assert data.pairs == [("Really?", "Vraiment ?")]


def test_tatoeba_mirror_loads_and_drops_its_truncated_last_line():
    try:
        dataset_path("eng-fra-tatoeba")
    except DatasetUnavailable:
        pytest.skip("the Tatoeba mirror is not available (set COURSE_DATA_DIR)")
    data = load_translation_pairs()
    assert len(data) == 18065
    assert [n for n, _ in data.skipped] == [18066]
    assert data.pairs[0] == ("Go.", "Va !")
    assert len(load_translation_pairs(max_pairs=100)) == 100


def test_split_pairs_is_a_seeded_partition_with_the_test_sentences_first():
    pairs = [(f"en {i}", f"fr {i}") for i in range(50)]
    train, valid, test = split_pairs(pairs, n_test=5, n_valid=7, seed=3)
    assert (len(train), len(valid), len(test)) == (38, 7, 5)
    assert sorted(train + valid + test) == sorted(pairs)        # every pair once, none lost
    shuffled = list(pairs)
    random.Random(3).shuffle(shuffled)
    assert test == shuffled[:5] and valid == shuffled[5:12]      # notebook 04's order: held out first
    assert split_pairs(pairs, 5, 7, seed=3) == (train, valid, test) and pairs[0] == ("en 0", "fr 0")
    assert split_pairs(pairs, 5, 7, seed=4)[2] != test
    with pytest.raises(ValueError, match="none for training"):
        split_pairs(pairs, n_test=25, n_valid=25)
