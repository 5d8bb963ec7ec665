"""The batch encoder's list-at-a-time path (issue 41) against its item-by-item loop.

``encode_batch`` encodes a list of bare args of one class a list at a time
and hands anything else, or any batch a check fails on, to the item-by-item
loop: the two must agree on every batch, and a bad item must still be named.
No database: these are the client's Python only.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import drover
from drover._db.rows import decode_sent_json, decode_sent_list
from drover._insert.encode import _encode_items, encode_batch
from drover._records import UniformBatch


class Note(drover.JobArgs, kind="bulk_note", queue="notes", max_attempts=4, priority=3):
    text: str = ""
    value: Any = None


class Other(drover.JobArgs, kind="bulk_other"):
    n: int = 0


class SubNote(Note):
    pass


AWKWARD = [
    "plain",
    "tab\there",
    "new\nline",
    "back\\slash",
    'quote"d',
    "ünïcødé ✓",
    "NaN as a word",
    "Infinity as a word",
]


def _same(batch: list[Any]) -> None:
    fast, slow = encode_batch(batch), _encode_items(batch)
    assert list(fast.params) == list(slow.params)
    assert (fast.queues, fast.unique, fast.timed, fast.decorated) == (
        slow.queues,
        slow.unique,
        slow.timed,
        slow.decorated,
    )


def test_a_list_of_one_class_is_encoded_as_the_loop_encodes_it() -> None:
    batch = [Note(text=t, value=v) for t in AWKWARD for v in (1, 1.5, 1e23, None, [1, "x"])]
    encoded = encode_batch(batch)
    assert isinstance(encoded.params, UniformBatch)
    assert (encoded.params.kind, encoded.params.queue) == ("bulk_note", "notes")
    assert (encoded.params.max_attempts, encoded.params.priority) == (4, 3)
    _same(batch)


@pytest.mark.parametrize(
    "batch",
    [
        [Note(), Other()],
        [Note(), SubNote()],
        [Note(), (Note(), drover.InsertOpts(queue="q"))],
        [(Note(), None)],
    ],
    ids=["two-classes", "subclass", "with-options", "pair-only"],
)
def test_other_batches_take_the_loop_and_agree(batch: list[Any]) -> None:
    _same(batch)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (Note(value=float("nan")), "NaN or infinite"),
        (Note(value=float("inf")), "NaN or infinite"),
        (Note(text="nul\x00"), "NUL"),
        (Note(value=object()), 'cannot encode args for kind "bulk_note"'),
    ],
    ids=["nan", "inf", "nul", "unserialisable"],
)
def test_a_bad_item_in_a_uniform_list_is_named(bad: Note, message: str) -> None:
    batch = [Note(text="ok") for _ in range(10)]
    batch[7] = bad
    with pytest.raises(drover.InvalidJobArgs, match="item 7: ") as caught:
        encode_batch(batch)
    assert message in str(caught.value)


def test_words_that_look_like_refused_values_are_kept() -> None:
    # The batch-wide substring scan hands these to the exact checks, which pass them.
    batch = [Note(text=t) for t in AWKWARD]
    assert [json.loads(p.args_json)["text"] for p in encode_batch(batch).params] == AWKWARD


@pytest.mark.parametrize(
    "texts",
    [
        [],
        ['{"a":1}', '{"b":[1,2.5,1e23,1.5e-3]}', "null", '"s"', "[]"],
        ["1,2", "3"],  # two values in one text: decoded one by one, as alone
    ],
    ids=["empty", "documents", "two-in-one"],
)
def test_a_list_decodes_as_each_text_alone(texts: list[str]) -> None:
    if texts == ["1,2", "3"]:
        with pytest.raises(ValueError, match="Extra data"):
            decode_sent_list(texts)
        return
    assert decode_sent_list(texts) == [decode_sent_json(t) for t in texts]
    assert [type(v) for v in decode_sent_list(texts)] == [type(decode_sent_json(t)) for t in texts]
