"""Progress, metadata and tags: their limits, their checks, and one execution's progress slot.

A model module (no I/O). ``InsertOpts`` checks tags and metadata with
``check_tags`` and ``encode_meta`` before anything is written;
``Job.set_progress`` and ``Job.update_meta`` put what a handler reports in
the execution's ``ProgressSlot``, which the engine's progress writer reads
and writes for every running job in one statement (ADR 0032).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "MAX_META_BYTES",
    "MAX_PROGRESS_MESSAGE",
    "MAX_TAGS",
    "MAX_TAG_LENGTH",
    "ProgressSlot",
    "check_progress",
    "check_tags",
    "encode_meta",
]

MAX_TAGS = 20
"""The most tags one job may carry."""
MAX_TAG_LENGTH = 64
"""The longest a tag may be, in characters."""
MAX_META_BYTES = 64 * 1024
"""The largest a job's metadata may be, as compact JSON (UTF-8 bytes)."""
MAX_PROGRESS_MESSAGE = 1000
"""The longest a progress message may be, in characters."""


def check_tags(value: object, what: str) -> tuple[str, ...]:
    """``value`` as a tuple of tags, repeats dropped, in the order given; or ``ValueError``.

    A tag is a short label: a ``str`` of 1 to 64 characters, without commas
    (the CLI splits ``--tag a,b`` on them), control characters or leading and
    trailing spaces. At most 20 per job.
    """
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(f"{what} must be a list of strings, not {type(value).__name__}")
    tags: dict[str, None] = {}
    for tag in value:
        if not isinstance(tag, str):
            raise TypeError(f"{what}: a tag must be a str, not {type(tag).__name__} ({tag!r})")
        if not tag or tag.strip() != tag:
            raise ValueError(f"{what}: tag {tag!r} is empty or has leading or trailing spaces")
        if len(tag) > MAX_TAG_LENGTH:
            raise ValueError(
                f"{what}: tag {tag[:20]!r}... is {len(tag)} characters long; "
                f"the maximum is {MAX_TAG_LENGTH}"
            )
        if "," in tag or any(ord(c) < 32 or ord(c) == 127 for c in tag):
            raise ValueError(f"{what}: tag {tag!r} holds a comma or a control character")
        try:
            tag.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{what}: tag {tag!r} is not valid UTF-8 text") from None
        tags[tag] = None
    if len(tags) > MAX_TAGS:
        raise ValueError(f"{what} holds {len(tags)} tags; the most is {MAX_TAGS}")
    return tuple(tags)


def encode_meta(value: object, what: str, *, max_bytes: int = MAX_META_BYTES) -> str:
    """``value`` (a mapping with string keys) as compact JSON text; or ``ValueError``.

    Refused: anything but a mapping, a key that is not a string, a value JSON
    cannot hold (a set, a datetime, NaN or an infinity), a NUL character
    (PostgreSQL's jsonb cannot store one) and JSON longer than ``max_bytes``.
    """
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a dict, not {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise TypeError(f"{what}: keys must be str, not {type(key).__name__} ({key!r})")
    try:
        text = json.dumps(dict(value), separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON: {exc}") from None
    if "\\u0000" in text:
        raise ValueError(f"{what} holds a NUL character, which PostgreSQL's jsonb cannot store")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid UTF-8 text (it holds a lone surrogate)") from None
    if size > max_bytes:
        raise ValueError(f"{what} is {size} bytes as JSON; the maximum is {max_bytes}")
    return text


def check_progress(fraction: object, message: object) -> float:
    """``fraction`` as a float from 0 to 1 once ``message`` is checked too; or ``ValueError``."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise TypeError(f"progress must be a number from 0 to 1, not {type(fraction).__name__}")
    value = float(fraction)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"progress must be from 0 to 1, not {fraction!r}")
    if message is not None:
        if not isinstance(message, str):
            raise TypeError(f"a progress message must be a str, not {type(message).__name__}")
        if len(message) > MAX_PROGRESS_MESSAGE:
            raise ValueError(
                f"a progress message is {len(message)} characters long; "
                f"the maximum is {MAX_PROGRESS_MESSAGE}"
            )
        if "\x00" in message:
            raise ValueError("a progress message must not contain NUL characters")
        try:
            message.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a progress message is not valid UTF-8 text") from None
    return value


class ProgressSlot:
    """What one execution last reported, until the engine's progress writer has written it.

    The handler's thread sets ``latest`` (one attribute store: a
    ``(fraction, message)`` tuple), so ``Job.set_progress`` takes no lock
    and a tight loop costs one small tuple per call. The writer reads it
    every interval and writes it if it is not the value it wrote last
    (``flushed``), so however often a handler reports, its row is written at
    most once per interval (and once more with its outcome). Metadata
    patches are merged under a lock (``update_meta`` is rare) and taken by
    the writer whole. ``meta`` is the job's metadata as this execution knows
    it (the claimed row's, with every patch merged), for the size check.
    """

    __slots__ = ("attempt", "flushed", "job_id", "latest", "meta", "patch")

    def __init__(
        self, job_id: int | None, attempt: int, meta: Mapping[str, Any] | None = None
    ) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.latest: tuple[float, str | None] | None = None
        self.flushed: tuple[float, str | None] | None = None
        self.meta: dict[str, Any] = dict(meta) if meta else {}
        self.patch: dict[str, Any] | None = None

    @property
    def dirty(self) -> bool:
        """Something was reported that the writer has not written yet."""
        return self.latest is not self.flushed or self.patch is not None

    def merge(self, patch: Mapping[str, Any]) -> None:
        """Merge ``patch`` (top-level keys replace) into the pending patch, checking the size.

        ``ValueError`` (nothing merged) when the patch is not JSON or the
        job's metadata would grow past ``MAX_META_BYTES``.
        """
        encode_meta(patch, "update_meta")
        with _MERGE_LOCK:
            merged = {**self.meta, **patch}
            encode_meta(merged, "the job's metadata after update_meta")
            self.meta = merged
            self.patch = {**(self.patch or {}), **patch}

    def take(self) -> tuple[tuple[float, str | None] | None, dict[str, Any] | None]:
        """The progress to write (``None`` if unchanged) and the metadata patch (or ``None``).

        Marks both written: call it when the write is about to be sent, and
        ``give_back`` what it returned if the write failed.
        """
        latest = self.latest
        progress = latest if latest is not self.flushed else None
        self.flushed = latest
        if self.patch is None:
            return progress, None
        with _MERGE_LOCK:
            patch, self.patch = self.patch, None
        return progress, patch

    def give_back(
        self, progress: tuple[float, str | None] | None, patch: dict[str, Any] | None
    ) -> None:
        """Undo a ``take`` whose write failed, so the next round writes it again."""
        if progress is not None and self.flushed is progress:
            self.flushed = None
        if patch is not None:
            with _MERGE_LOCK:
                self.patch = {**patch, **(self.patch or {})}


# update_meta is rare: one lock for every slot, rather than one made per execution.
_MERGE_LOCK = threading.Lock()
