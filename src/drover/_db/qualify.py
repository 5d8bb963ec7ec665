"""Rewrites drover's SQL text for an installation in a schema of its own (ADR 0043).

The rule is token by token, never a search over the raw text: the SQL is
split into string literals, quoted identifiers, comments, dollar-quoted
bodies, psycopg placeholders and words, and only these change:

1. a word naming one of drover's objects (``relations`` and ``routines``:
   the tables, sequences, types and functions drover's own SQL creates),
   not already qualified (no ``.`` before it), becomes ``"<schema>".<word>``;
2. a string literal whose whole content names one of drover's relations
   (``'drover_jobs_id_seq'`` in ``nextval``, ``'drover_limits'::regclass``)
   becomes ``'"<schema>".<name>'``;
3. a string literal naming a channel as the first argument of
   ``pg_notify(``, or a word naming a channel after ``LISTEN``/``UNLISTEN``,
   becomes the schema's channel;
4. dollar-quoted bodies are rewritten by the same rules.

Everything else (comments, other literals, index and constraint names,
columns, temporary tables, placeholders) is left exactly as written. With
no objects (``channels_only``) only rule 3 applies: that is how migrations
are rendered, since they run with ``search_path`` set to the schema.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

__all__ = ["CHANNEL_BASES", "qualify"]

CHANNEL_BASES = frozenset({"drover", "drover_cancel", "drover_done"})
"""drover's notification channels in the default schema."""

_TOKEN = re.compile(
    r"""
      (?P<str>'(?:[^']|'')*')
    | (?P<qid>"(?:[^"]|"")*")
    | (?P<comment>--[^\n]*|/\*.*?\*/)
    | (?P<dollar>\$(?P<tag>[A-Za-z_][A-Za-z0-9_]*)?\$)
    | (?P<param>%\([^)]*\)s|%s|%%)
    | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
    | (?P<space>\s+)
    | (?P<other>.)
    """,
    re.S | re.X,
)


def qualify(
    sql: str,
    schema: str,
    channel: Callable[[str], str],
    relations: Iterable[str] = (),
    routines: Iterable[str] = (),
) -> str:
    """``sql`` rewritten for ``schema`` by the module's rules; ``channel(base)`` names
    the schema's channel. ``schema`` must already be checked (plain lowercase)."""
    rels = frozenset(relations)
    words = rels | frozenset(routines)
    prefix = f'"{schema}".'
    out: list[str] = []
    significant: list[str] = []  # the last two significant tokens, lowercased
    pos = 0
    listen_next = False
    while pos < len(sql):
        match = _TOKEN.match(sql, pos)
        assert match is not None  # the last alternative matches any character
        kind = match.lastgroup if match.lastgroup != "tag" else "dollar"
        text = match.group(0)
        pos = match.end()
        if match.group("dollar") is not None:
            # A dollar-quoted body: find its end and rewrite what is inside.
            end = sql.find(text, pos)
            if end < 0:
                out.append(text)
                continue
            out.append(text + qualify(sql[pos:end], schema, channel, rels, words - rels) + text)
            pos = end + len(text)
            significant = ([*significant, "$body$"])[-2:]
            continue
        if kind in ("space", "comment"):
            out.append(text)
            continue
        previous = significant[-1] if significant else ""
        if kind == "word":
            lowered = text.lower()
            if listen_next and lowered in CHANNEL_BASES:
                text = '"' + channel(lowered) + '"'
            elif lowered in words and previous != ".":
                text = prefix + text
            listen_next = lowered in ("listen", "unlisten")
        elif kind == "str":
            content = text[1:-1]
            if content in rels:
                text = f"'{prefix}{content}'"
            elif content in CHANNEL_BASES and significant[-2:] == ["pg_notify", "("]:
                text = f"'{channel(content)}'"
            listen_next = False
        else:
            listen_next = False
        out.append(text)
        significant = ([*significant, text.lower()])[-2:]
    return "".join(out)
