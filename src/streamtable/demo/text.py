"""Text for the word-count demo and benchmark, split exactly as Kafka's WordCountDemo does."""

from __future__ import annotations

import itertools
import random
import re

__all__ = ["java_split_words", "wordcount_demo_sentences", "generate_text"]

# Java's \W without UNICODE_CHARACTER_CLASS is [^a-zA-Z_0-9].
_JAVA_NON_WORD = re.compile(r"[^a-zA-Z0-9_]+")


def java_split_words(line: str) -> list[str]:
    r"""Split a line as ``line.toLowerCase(Locale.ROOT).split("\\W+")`` does in Java.

    This is the tokenizer of Kafka's ``WordCountDemo``. Java's rules are kept exactly:
    ``\W`` is ``[^a-zA-Z0-9_]`` (so accented letters separate words), a leading separator gives
    a leading ``""``, trailing empty strings are removed, a line of only separators gives
    ``[]``, and an empty line gives ``[""]`` (no match: the input itself).

    Examples
    --------
    >>> java_split_words("Hello Kafka  Streams!")
    ['hello', 'kafka', 'streams']
    >>> java_split_words(" leading")
    ['', 'leading']
    >>> java_split_words("Héllo")
    ['h', 'llo']
    >>> java_split_words(""), java_split_words("!!!")
    ([''], [])
    """
    lower = line.lower()
    parts = _JAVA_NON_WORD.split(lower)
    if len(parts) == 1:  # no separator found: Java returns the input itself
        return parts
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def wordcount_demo_sentences() -> list[str]:
    """Return the input lines of Kafka's WordCountDemo test and quickstart.

    Examples
    --------
    >>> wordcount_demo_sentences()
    ['all streams lead to kafka', 'hello kafka streams', 'join kafka summit']
    """
    return ["all streams lead to kafka", "hello kafka streams", "join kafka summit"]


_VOCABULARY = (
    "the of and to a in is it you that he was for on are with as his they be at one have this "
    "from or had by hot word but what some we can out other were all there when up use your how "
    "said an each she which do their time if will way about many then them write would like so "
    "these her long make thing see him two has look more day could go come did number sound no "
    "most people my over know water than call first who may down side been now find any new work "
    "part take get place made live where after back little only round man year came show every "
    "good me give our under name very through just form sentence great think say help low line "
    "differ turn cause much mean before move right boy old too same tell does set three want air "
    "well also play small end put home read hand port large spell add even land here must big "
    "high such follow act why ask men change went light kind off need house picture try us again "
    "animal point mother world near build self earth father head stand own page should country "
    "found answer school grow study still learn plant cover food sun four between state keep eye "
    "never last let thought city tree cross farm hard start might story saw far sea draw left "
    "late run while press close night real life few north open seem together next white children "
    "begin got walk example ease paper group always music those both mark often letter until mile "
    "river car feet care second book carry took science eat room friend began idea fish mountain "
    "stop once base hear horse cut sure watch color face wood main enough plain girl usual young "
    "ready above ever red list though feel talk bird soon body dog family direct pose leave song "
    "measure door product black short numeral class wind question happen complete ship area half "
    "rock order fire south problem piece told knew pass since top whole king space heard best hour "
    "better true during hundred five remember step early hold west ground interest reach fast verb "
    "sing listen six table travel less morning ten simple several vowel toward war lay against "
    "pattern slow center love person money serve appear road map rain rule govern pull cold notice "
    "voice unit power town fine certain fly fall lead cry dark machine note wait plan figure star "
    "box noun field rest correct able pound done beauty drive stood contain front teach week final "
    "gave green oh quick develop ocean warm free minute strong special mind behind clear tail "
    "produce fact street inch multiply nothing course stay wheel full force blue object decide "
    "surface deep moon island foot system busy test record boat common gold possible plane stead "
    "dry wonder laugh thousand ago ran check game shape equate miss brought heat snow tire bring "
    "yes distant fill east paint language among kafka streams stream table join window topic "
    "partition offset broker consumer producer state store spark query batch"
).split()
_VOCABULARY = tuple(dict.fromkeys(_VOCABULARY))


def generate_text(n_bytes: int, seed: int = 0) -> list[str]:
    """Generate SYNTHETIC text: lines of real English words, for load tests and benchmarks.

    Words are drawn from a fixed vocabulary of about 500 common English words with Zipf-like
    frequencies (weight ``1 / rank``); lines have 4 to 16 words, an occasional capitalised
    first word and punctuation, so :func:`java_split_words` has separators to handle. The
    output is deterministic for a given ``seed``.

    Parameters
    ----------
    n_bytes : int
        Target size: lines are generated until the total UTF-8 size of the lines (without
        newlines) reaches at least ``n_bytes``.
    seed : int
        Seed of the pseudo-random generator.

    Returns
    -------
    list of str
        The lines (ASCII only).

    Examples
    --------
    >>> lines = generate_text(200, seed=1)
    >>> sum(len(s) for s in lines) >= 200
    True
    >>> generate_text(200, seed=1) == lines
    True
    """
    if isinstance(n_bytes, bool) or not isinstance(n_bytes, int) or n_bytes < 0:
        raise ValueError(f"generate_text(): n_bytes must be an int >= 0, got {n_bytes!r}")
    rng = random.Random(seed)
    vocab = _VOCABULARY
    cum_weights = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(vocab))))
    punctuation = (".", ".", ".", "!", "?", ",", ";")
    lines: list[str] = []
    total = 0
    while total < n_bytes:
        # draw words in bulk for speed
        words = rng.choices(vocab, cum_weights=cum_weights, k=4096)
        pos = 0
        while pos < len(words) - 16 and total < n_bytes:
            n = rng.randint(4, 16)
            chunk = words[pos : pos + n]
            pos += n
            if rng.random() < 0.3:
                chunk[0] = chunk[0].capitalize()
            line = " ".join(chunk)
            if rng.random() < 0.5:
                line += rng.choice(punctuation)
            lines.append(line)
            total += len(line)
    return lines
