import pytest

from streamtable.demo.text import generate_text, java_split_words, wordcount_demo_sentences

pytestmark = pytest.mark.unit

# Printed by tests/vectors/KafkaVectors.java: line.toLowerCase(Locale.ROOT).split("\\W+") (JDK 17).
JAVA_SPLIT = [
    ("", [""]),
    (" ", []),
    ("   ", []),
    ("!!!", []),
    ("a", ["a"]),
    ("Hello World", ["hello", "world"]),
    (" leading space", ["", "leading", "space"]),
    ("trailing space  ", ["trailing", "space"]),
    ("a,,b", ["a", "b"]),
    ("all streams lead to kafka", ["all", "streams", "lead", "to", "kafka"]),
    ("H\u00e9llo W\u00f6rld", ["h", "llo", "w", "rld"]),
    ("don't stop", ["don", "t", "stop"]),
    ("__init__ x_y", ["__init__", "x_y"]),
    ("\u0130stanbul \u00c9COLE", ["i", "stanbul", "cole"]),
    ("Stra\u00dfe \u03a3\u039f\u03a6\u039f\u03a3", ["stra", "e"]),
    ("tab\u0009sep\u000anl\u000d\u000aend", ["tab", "sep", "nl", "end"]),
    ("123 456abc", ["123", "456abc"]),
    ("emoji\U0001f600here", ["emoji", "here"]),
    ("\u212aelvin", ["kelvin"]),
    ("-a-b-", ["", "a", "b"]),
    ("x\u00a0y", ["x", "y"]),
]


@pytest.mark.parametrize(("line", "expected"), JAVA_SPLIT)
def test_split_matches_java(line, expected):
    assert java_split_words(line) == expected


def test_wordcount_demo_sentences():
    assert wordcount_demo_sentences() == [
        "all streams lead to kafka",
        "hello kafka streams",
        "join kafka summit",
    ]
    words = [w for s in wordcount_demo_sentences() for w in java_split_words(s)]
    assert words.count("kafka") == 3 and words.count("streams") == 2


@pytest.mark.parametrize("n_bytes", [0, 1, 1000, 100_000])
def test_generate_text_size_and_determinism(n_bytes):
    lines = generate_text(n_bytes, seed=7)
    total = sum(len(s.encode()) for s in lines)
    assert total >= n_bytes
    if lines:
        assert total - len(lines[-1]) < n_bytes  # stops as soon as the target is reached
    assert generate_text(n_bytes, seed=7) == lines
    assert all(line.isascii() and line.strip() for line in lines)


def test_generate_text_seed_changes_output_and_words_look_real():
    a, b = generate_text(5000, seed=1), generate_text(5000, seed=2)
    assert a != b
    words = [w for line in a for w in java_split_words(line) if w]
    assert "the" in words and len(set(words)) > 50


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_generate_text_errors(bad):
    with pytest.raises(ValueError, match="n_bytes must be an int >= 0"):
        generate_text(bad)
