import pytest

from prunestore import InvalidMessageError, InvalidPolicyError, Message, Policy, PruneStoreError


def test_message_is_immutable_and_hashable():
    m = Message("a", "user", "hi", 0, defines=["k"], metadata={"x": [1, 2]})
    assert m.defines == ("k",)
    with pytest.raises(AttributeError):
        m.content = "x"
    assert hash(m) == hash(Message("a", "user", "hi", 0, defines=("k",), metadata={"y": 1}))


BAD = [
    (dict(id=""), "id=''"),
    (dict(id=5), "id=5"),
    (dict(role="bot"), "role='bot'"),
    (dict(turn=-1), "turn=-1"),
    (dict(turn=1.5), "turn=1.5"),
    (dict(turn=True), "turn=True"),
    (dict(turn=2**63), "turn="),
    (dict(content=b"bytes"), "content=b'bytes'"),
    (dict(content="bad \ud800 surrogate"), "content="),
    (dict(tool_key=""), "tool_key=''"),
    (dict(expires_after_turn=2, turn=3), "expires_after_turn=2"),
    (dict(defines=("ok", "not ok")), "defines='not ok'"),
    (dict(refs=("é",)), "refs='é'"),
    (dict(refs="k1"), "refs='k1'"),
    (dict(metadata={"x": object()}), "metadata="),
    (dict(metadata={"x": float("nan")}), "metadata="),
    (dict(metadata={1: "int key"}), "metadata="),
    (dict(metadata=["not", "an", "object"]), "metadata="),
    (dict(id="nul\x00id"), "id="),
]


@pytest.mark.parametrize("change, named", BAD)
def test_bad_fields_name_field_and_value(change, named):
    fields = dict(id="a", role="user", content="hi", turn=3) | change
    with pytest.raises(InvalidMessageError) as info:
        Message(**fields)
    assert isinstance(info.value, PruneStoreError)
    assert named in str(info.value)


def test_long_values_are_shortened_in_errors():
    with pytest.raises(InvalidMessageError) as info:
        Message("a", "nope" * 1000, "x", 0)
    assert len(str(info.value)) < 200


def test_content_may_hold_nul_and_any_unicode():
    Message("a", "user", "nul \x00 emoji 😀 e\u0301", 0)


def test_policy_validation():
    assert Policy().dedupe_roles == frozenset({"retrieved_doc"})
    assert Policy(dedupe_roles=["user"]).dedupe_roles == frozenset({"user"})
    with pytest.raises(InvalidPolicyError, match="restore='sideways'"):
        Policy(restore="sideways")
    with pytest.raises(InvalidPolicyError, match="dedupe_roles"):
        Policy(dedupe_roles={"robot"})
    assert Policy.from_json(Policy(restore="direct").to_json()) == Policy(restore="direct")
    with pytest.raises(InvalidPolicyError, match="evict='newest'"):
        Policy(evict="newest")
    definers_last = Policy(budget=9, evict="definers_last")
    assert Policy.from_json(definers_last.to_json()) == definers_last
    stored_before_the_field = '{"budget": 9, "clear_at_least": 0, "dedupe_roles": [], "restore": "direct"}'
    assert Policy.from_json(stored_before_the_field).evict == "oldest"
