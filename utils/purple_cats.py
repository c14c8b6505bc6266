"""A synthetic English -> French translation task: "I love purple cats" -> "j'aime les chats violets".

A tiny, deterministic grammar that a seq2seq model learns on a CPU in seconds, and whose
French differs from its English in the ways that make attention interesting:
  * colour adjectives move AFTER the noun ("purple cats" -> "chats violets"): crossing alignments;
  * size adjectives stay before it ("the small cats" -> "les petits chats");
  * determiners and adjectives agree in gender and number (violet/violette/violets/violettes);
  * verbs are conjugated for the subject (j'aime, tu aimes, nous aimons, ils aiment);
  * elision and contraction (j'aime, l'oiseau, près du chien, près d'un arbre);
  * an English bare plural takes "les" when generic and "des" otherwise ("I see cats" -> "je vois des chats").

    purple_cats_pairs(n, seed)      n random pairs (PurpleCatsPair: source, target, alignment)
    translate_purple_cats(english)  the reference translation of one sentence of the grammar

Tokens are lowercase and split like utils.lexicon.split_sentence ("j'", "aime").
`alignment` lists (source index, target index) links: which English word each French word
translates, the ground truth that attention weights can be compared with.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["VERBS", "PurpleCatsPair", "NounPhrase", "purple_cats_pairs", "translate_purple_cats"]


# english singular -> (english plural, french singular, french plural, gender)
NOUNS = {
    "cat": ("cats", "chat", "chats", "m"),
    "dog": ("dogs", "chien", "chiens", "m"),
    "bird": ("birds", "oiseau", "oiseaux", "m"),
    "horse": ("horses", "cheval", "chevaux", "m"),
    "friend": ("friends", "ami", "amis", "m"),
    "tree": ("trees", "arbre", "arbres", "m"),
    "hat": ("hats", "chapeau", "chapeaux", "m"),
    "mouse": ("mice", "souris", "souris", "f"),
    "apple": ("apples", "pomme", "pommes", "f"),
    "house": ("houses", "maison", "maisons", "f"),
    "car": ("cars", "voiture", "voitures", "f"),
    "flower": ("flowers", "fleur", "fleurs", "f"),
}
# adjectives that follow the noun in French: (m sg, f sg, m pl, f pl)
POST_ADJECTIVES = {
    "purple": ("violet", "violette", "violets", "violettes"),
    "black": ("noir", "noire", "noirs", "noires"),
    "green": ("vert", "verte", "verts", "vertes"),
    "blue": ("bleu", "bleue", "bleus", "bleues"),
    "white": ("blanc", "blanche", "blancs", "blanches"),
    "happy": ("heureux", "heureuse", "heureux", "heureuses"),
}
# adjectives that stay before the noun
PRE_ADJECTIVES = {
    "small": ("petit", "petite", "petits", "petites"),
    "big": ("grand", "grande", "grands", "grandes"),
}
# english determiner -> (m sg, f sg, plural); "a" has no plural
DETERMINERS = {
    "the": ("le", "la", "les"),
    "a": ("un", "une", None),
    "my": ("mon", "ma", "mes"),
    "your": ("ton", "ta", "tes"),
}
# persons: 0 = I, 1 = you (singular), 2 = he/she/it, 3 = we, 4 = they
PRONOUNS = {"i": ("je", 0), "you": ("tu", 1), "he": ("il", 2), "she": ("elle", 2),
            "we": ("nous", 3), "they": ("ils", 4)}
# english base form -> (english 3rd person singular, french forms by person)
VERBS = {
    "love": ("loves", ("aime", "aimes", "aime", "aimons", "aiment")),
    "see": ("sees", ("vois", "vois", "voit", "voyons", "voient")),
    "eat": ("eats", ("mange", "manges", "mange", "mangeons", "mangent")),
    "have": ("has", ("ai", "as", "a", "avons", "ont")),
    "want": ("wants", ("veux", "veux", "veut", "voulons", "veulent")),
}
PREPOSITIONS = {"with": ("avec",), "in": ("dans",), "near": ("près", "de")}
GENERIC_VERBS = {"love"}  # "I love cats" = cats in general -> "les"
_VOWELS = tuple("aeiouhéèêàâîôû")


class PurpleCatsPair(NamedTuple):
    source: list[str]                     # English tokens
    target: list[str]                     # French tokens
    alignment: list[tuple[int, int]]      # (source index, target index) links


@dataclass
class NounPhrase:
    det: str | None          # a key of DETERMINERS, or None for a bare plural
    pre: str | None          # a key of PRE_ADJECTIVES
    post: str | None         # a key of POST_ADJECTIVES
    noun: str                # a key of NOUNS (singular)
    plural: bool

    def english(self) -> list[str]:
        words = [w for w in (self.det, self.pre, self.post) if w]
        return words + [NOUNS[self.noun][0] if self.plural else self.noun]


def _form(forms: tuple, gender: str, plural: bool) -> str:
    return forms[(2 if plural else 0) + (gender == "f")]


def _french_np(np: NounPhrase, first: int, generic: bool, after_de: bool) -> list[tuple[str, list[int]]]:
    """French words of a noun phrase whose English starts at source index `first`, each with
    the English positions it translates. `after_de`: the phrase follows "près de", which
    merges with the determiner (du, des, d'un, de l', de la, de mon, "de" alone for "des")."""
    english = np.english()
    pos = {w: first + i for i, w in enumerate(english)}
    noun_pos = first + len(english) - 1
    gender = NOUNS[np.noun][3]
    if np.det is None:  # English bare plural
        det, det_src = ("les" if generic else "des"), [noun_pos]
    else:
        sg_m, sg_f, pl = DETERMINERS[np.det]
        det = pl if np.plural else (sg_f if gender == "f" else sg_m)
        det_src = [pos[np.det]]
    words: list[tuple[str, list[int]]] = []
    if np.pre:
        words.append((_form(PRE_ADJECTIVES[np.pre], gender, np.plural), [pos[np.pre]]))
    words.append((NOUNS[np.noun][2 if np.plural else 1], [noun_pos]))
    if np.post:
        words.append((_form(POST_ADJECTIVES[np.post], gender, np.plural), [pos[np.post]]))
    if det in ("le", "la") and words[0][0].startswith(_VOWELS):
        det = "l'"
    if not after_de:
        return [(det, det_src)] + words
    if det in ("le", "les", "des"):
        return [({"le": "du", "les": "des", "des": "de"}[det], det_src)] + words
    return [("d'" if det.startswith(_VOWELS) else "de", det_src), (det, det_src)] + words


def _realize(subject, verb: str, objects: list[NounPhrase], pp: tuple[str, NounPhrase] | None) -> PurpleCatsPair:
    source: list[str] = []
    target: list[str] = []
    links: list[tuple[int, int]] = []

    def add_french(tokens, local_links):
        links.extend((s, len(target) + j) for s, j in local_links)
        target.extend(tokens)

    # subject
    if isinstance(subject, str):
        pronoun_fr, person = PRONOUNS[subject]
        source.append(subject)
        subject_fr = [(pronoun_fr, [0])]
    else:
        person = 4 if subject.plural else 2
        subject_fr = _french_np(subject, 0, generic=True, after_de=False)
        source.extend(subject.english())
    # verb
    verb_pos = len(source)
    source.append(VERBS[verb][0] if person == 2 else verb)
    verb_fr = VERBS[verb][1][person]
    if subject_fr[0][0] == "je" and verb_fr.startswith(_VOWELS):
        subject_fr = [("j'", [0])]
    words = subject_fr + [(verb_fr, [verb_pos])]
    # objects, joined by "and" / "et"
    for k, obj in enumerate(objects):
        if k:
            words.append(("et", [len(source)]))
            source.append("and")
        words += _french_np(obj, len(source), generic=verb in GENERIC_VERBS, after_de=False)
        source.extend(obj.english())
    # prepositional phrase
    if pp is not None:
        prep, np = pp
        prep_pos = len(source)
        source.append(prep)
        near = prep == "near"
        words.append((PREPOSITIONS[prep][0], [prep_pos]))
        np_words = _french_np(np, len(source), generic=False, after_de=near)
        if near:  # "de"/"du"/"des"/"d'" also translates "near"
            np_words[0] = (np_words[0][0], [prep_pos] + np_words[0][1])
        words += np_words
        source.extend(np.english())
    target = [w for w, _ in words]
    alignment = sorted({(s, j) for j, (_, srcs) in enumerate(words) for s in srcs})
    return PurpleCatsPair(source, target, alignment)


def _sample_np(rng: random.Random, allow_bare: bool, p_pre: float, p_post: float) -> NounPhrase:
    plural = rng.random() < 0.5
    dets = ["the", "my", "your"] + ([] if plural else ["a"]) + ([None, None] if plural and allow_bare else [])
    return NounPhrase(det=rng.choice(dets),
                      pre=rng.choice(sorted(PRE_ADJECTIVES)) if rng.random() < p_pre else None,
                      post=rng.choice(sorted(POST_ADJECTIVES)) if rng.random() < p_post else None,
                      noun=rng.choice(sorted(NOUNS)), plural=plural)


def purple_cats_pairs(num_pairs: int, seed: int = 0, min_len: int = 1, max_len: int | None = None,
                      max_objects: int = 3, p_pp: float = 0.4, p_pre: float = 0.25,
                      p_post: float = 0.6) -> list[PurpleCatsPair]:
    """`num_pairs` random sentence pairs, the same for the same arguments.

    Source lengths run from 3 ("i love cats") to about 25 tokens; keep only sources with
    min_len <= length <= max_len. A sentence is: a pronoun or a noun phrase, a verb, 1 to
    `max_objects` noun phrases joined by "and", and with probability `p_pp` a prepositional
    phrase (with/in/near). Each noun phrase has a size adjective with probability `p_pre`
    and a colour adjective with probability `p_post`.
    """
    rng = random.Random(seed)
    pairs: list[PurpleCatsPair] = []
    tries = 0
    while len(pairs) < num_pairs:
        tries += 1
        if tries > 1000 * num_pairs + 1000:
            raise ValueError(f"no sentences of length {min_len}..{max_len} with these settings")
        subject = rng.choice(sorted(PRONOUNS)) if rng.random() < 0.5 else _sample_np(rng, True, p_pre, p_post)
        verb = rng.choice(sorted(VERBS))
        objects = [_sample_np(rng, True, p_pre, p_post) for _ in range(rng.randint(1, max_objects))]
        pp = (rng.choice(sorted(PREPOSITIONS)), _sample_np(rng, False, p_pre, p_post)) if rng.random() < p_pp else None
        pair = _realize(subject, verb, objects, pp)
        if min_len <= len(pair.source) <= (max_len if max_len is not None else len(pair.source)):
            pairs.append(pair)
    return pairs


def _parse_np(words: list[str], i: int) -> tuple[NounPhrase, int]:
    det = words[i] if i < len(words) and words[i] in DETERMINERS else None
    i += det is not None
    pre = words[i] if i < len(words) and words[i] in PRE_ADJECTIVES else None
    i += pre is not None
    post = words[i] if i < len(words) and words[i] in POST_ADJECTIVES else None
    i += post is not None
    plurals = {v[0]: k for k, v in NOUNS.items()}
    if i >= len(words) or (words[i] not in NOUNS and words[i] not in plurals):
        raise ValueError(f"expected a noun at word {i + 1} of {' '.join(words)!r}")
    plural = words[i] in plurals
    if (det is None and not plural) or (det == "a" and plural):
        raise ValueError(f"{' '.join(words)!r} is not in the grammar (determiner and number)")
    return NounPhrase(det, pre, post, plurals.get(words[i], words[i]), plural), i + 1


def translate_purple_cats(english: str) -> PurpleCatsPair:
    """The grammar's translation of one English sentence (case and a final '.' ignored).

    >>> " ".join(translate_purple_cats("I love purple cats").target)
    "j' aime les chats violets"
    Raises ValueError for a sentence outside the grammar.
    """
    words = english.lower().replace(".", " ").split()
    if words and words[0] in PRONOUNS:
        subject, i = words[0], 1
    else:
        subject, i = _parse_np(words, 0)
    third_singular = {v[0]: k for k, v in VERBS.items()}
    if i >= len(words) or (words[i] not in VERBS and words[i] not in third_singular):
        raise ValueError(f"expected a verb at word {i + 1} of {english!r}")
    verb = third_singular.get(words[i], words[i])
    i += 1
    objects = []
    while True:
        obj, i = _parse_np(words, i)
        objects.append(obj)
        if i < len(words) and words[i] == "and":
            i += 1
            continue
        break
    pp = None
    if i < len(words) and words[i] in PREPOSITIONS:
        prep = words[i]
        np, i = _parse_np(words, i + 1)
        pp = (prep, np)
    if i != len(words):
        raise ValueError(f"unexpected {words[i]!r} at word {i + 1} of {english!r}")
    pair = _realize(subject, verb, objects, pp)
    if pair.source != words:
        raise ValueError(f"{english!r} is not in the grammar (agreement): expected {' '.join(pair.source)!r}")
    return pair
