"""How a data-prep stage runs its per-item work (a slide, a session, a sub-dataset of a pool).

A stage function takes `map_chunks(fn, items, **kwargs)`, which calls `fn(chunk, **kwargs)` on
contiguous chunks of `items` and returns the results concatenated in item order. `map_serially`
(one chunk, in this process) is the default; the flows pass `tasks.runners.chunk_mapper`'s, which
runs each chunk as a Prefect task on the configured task runner. The stage's logic is the same
either way, so both write the same outputs.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")
ChunkMap = Callable[..., list]


def map_serially(fn: Callable[..., Sequence[Any]], items: Sequence[Any], **kwargs: Any) -> list:
    return list(fn(list(items), **kwargs))


def split_chunks(items: Sequence[T], chunks: int) -> list[list[T]]:
    """`items` as at most `chunks` contiguous chunks whose sizes differ by at most one (none empty)."""
    items = list(items)
    count = max(1, min(chunks, len(items)))
    size, extra = divmod(len(items), count)
    out, start = [], 0
    for i in range(count):
        stop = start + size + (i < extra)
        out.append(items[start:stop])
        start = stop
    return [c for c in out if c]
