import re

from hypothesis import given
from hypothesis import strategies as st

from prunestore import count_tokens, normalize
from prunestore.text import content_hash, marker_defines, marker_refs


def test_normalize_lowers_and_collapses_whitespace():
    assert normalize("  Hello\tWORLD \n again ") == "hello world again"


def test_count_tokens_counts_word_pieces():
    assert count_tokens("") == 0
    assert count_tokens("hello world") == 2
    assert count_tokens("DEFINE:fmt") == 3  # DEFINE, :, fmt
    assert count_tokens("a,b") == 3
    assert count_tokens("  ") == 0
    assert count_tokens("é") == 1  # a non-ASCII letter is a piece of its own
    assert count_tokens("naïve") == 3  # na, ï, ve


def count_tokens_by_word(text: str) -> int:
    """The heuristic as the reference article states it, word by word."""
    return sum(max(1, len(re.findall(r"[A-Za-z0-9]+|[^\sA-Za-z0-9]", word))) for word in text.split())


@given(
    st.text(st.characters(codec="utf-8"))
    | st.text("ab1 \t\n\x1c\x1f\x85\xa0\u2028\u3000.,é-")
    | st.text(st.characters(max_codepoint=127))  # ASCII takes a path of its own
)
def test_count_tokens_equals_the_word_by_word_definition(text):
    assert count_tokens(text) == count_tokens_by_word(text)
    assert count_tokens(text) >= len(text.split())


def test_markers():
    text = "DEFINE:a-1 REF:b_2 DEFINE:c REF:b_2 xREF:d DEFINE:"
    assert marker_defines(text) == ["a-1", "c"]
    assert marker_refs(text) == ["b_2", "b_2", "d"]


@given(st.text(), st.text())
def test_hash_equality_follows_normalized_equality(a, b):
    assert (content_hash(a) == content_hash(b)) == (normalize(a) == normalize(b))
