"""The model step's boundary (``agent.conversation.untrusted``): a reply made safe to store and to send back."""

from __future__ import annotations

from agent.conversation.live import unrunnable
from agent.conversation.untrusted import REPLACED_ID_PREFIX, ids_used, reply_content


def call(id: object, name: str = "get_ticket") -> dict:
    block = {"type": "tool_use", "name": name, "input": {"reference": "NW-1"}}
    return block if id is None else {**block, "id": id}


def test_ids_the_api_would_refuse_or_that_repeat_are_replaced_and_the_originals_kept() -> None:
    used = ids_used(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [call("toolu_old"), {"type": "text", "text": "x"}]},
        ]
    )
    assert used == {"toolu_old"}
    content = [
        call("toolu_ok"),
        call(None),  # no id at all
        call(7),  # not a string
        call("toolu_é 1"),  # characters the API refuses
        call("toolu_\x00"),  # a NUL (replaced first, then refused by the pattern)
        call("toolu_ok"),  # repeats this reply's
        call("toolu_old"),  # repeats an earlier turn's
    ]
    safe, replaced = reply_content(content, used=used, seq=5)

    ids = [b["id"] for b in safe]
    assert ids[0] == "toolu_ok"
    assert all(i.startswith(REPLACED_ID_PREFIX) for i in ids[1:])
    assert len(set(ids)) == len(ids) and not set(ids) & used
    assert list(replaced.values()) == [
        "(none)",
        "7",
        "toolu_é 1",
        "toolu_\ufffd",
        "toolu_ok",
        "toolu_old",
    ]
    assert set(replaced) == set(ids[1:])
    # Same inputs, same answer: a rebuild from the row agrees with the live loop.
    assert reply_content(content, used=used, seq=5) == (safe, replaced)
    # A replaced call is answered, not run; the first, well-formed one runs.
    assert unrunnable(safe[0], safe, "tool_use") == ""
    assert all("was replaced" in unrunnable(b, safe, "tool_use") for b in safe[1:])


def test_a_replacement_never_collides_with_an_id_the_model_chose() -> None:
    guessed = f"{REPLACED_ID_PREFIX}3_1"
    safe, replaced = reply_content([call(guessed), call(None)], used=set(), seq=3)
    assert safe[0]["id"] == guessed and safe[1]["id"] != guessed
    assert list(replaced) == [safe[1]["id"]]


def test_blank_and_broken_blocks_are_dropped_and_nul_replaced_everywhere() -> None:
    content = [
        {"type": "text", "text": ""},
        {"type": "text", "text": "  \n"},
        {"type": "text", "text": None},
        {"type": "text", "text": 5},
        "not a block",
        None,
        {"type": "text", "text": "ok\x00\ud800"},
        {"type": "thinking", "thinking": "hmm", "signature": "s"},
        {"type": "tool_use", "id": "toolu_a", "name": "get\x00ticket", "input": {"k\x00": "v\x00"}},
    ]
    safe, replaced = reply_content(content, used=set(), seq=1)
    assert safe == [
        {"type": "text", "text": "ok\ufffd\ufffd"},
        {"type": "thinking", "thinking": "hmm", "signature": "s"},
        {
            "type": "tool_use",
            "id": "toolu_a",
            "name": "get\ufffdticket",
            "input": {"k\ufffd": "v\ufffd"},
        },
    ]
    assert replaced == {}
    assert reply_content("not a list", used=set(), seq=1) == ([], {})
