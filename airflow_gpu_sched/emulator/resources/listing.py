"""List pages, one rule for every collection: AIP-158 paging (``paging.py``), AIP-160 filters
(``filters.py``), read masks (``fieldmask.py``), and the ``listPages`` variant.

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from airflow_gpu_sched.emulator.api_errors import ApiError
from airflow_gpu_sched.emulator.fieldmask import FieldMaskError, parse_read_mask
from airflow_gpu_sched.emulator.fieldmask import project as project_mask
from airflow_gpu_sched.emulator.filters import FilterError, parse_filter
from airflow_gpu_sched.emulator.paging import coerce_page_size, decode_token, encode_token, offset_page, short_window

DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE = 100, 1000


@lru_cache(maxsize=256)
def _cached_filter(text: str, collection: str):
    return parse_filter(text, collection)


def list_page(records: Any, key: str, project: str, location: str, list_pages: str, filter_text: str = "",
              page_size: int | None = None, page_token: str = "", wire: Any = None,
              read_mask: str = "", order_by: str = "") -> dict:
    """One page of ``records`` (in creation order; each with seq, project, location,
    filter_record() and wire()) newest first, filtered by the collection ``key``'s filter
    fields, projected to ``read_mask``, under ``key``. Paging as AIP-158 (``paging.py``):
    the token holds the last seq returned and is bound to every argument but the page size;
    under ``list_pages`` "short" (variant ``listPages``) pages come short or empty, with a token,
    until the end."""
    try:
        predicate = _cached_filter(filter_text or "", key)
    except FilterError as exc:
        raise ApiError("INVALID_ARGUMENT", f"Invalid filter: {exc}") from None
    try:
        mask = parse_read_mask(key, read_mask)
    except FieldMaskError as exc:
        raise ApiError("INVALID_ARGUMENT", f"Invalid readMask: {exc}") from None
    size = coerce_page_size(page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
    binding = (key, project, location, filter_text or "", read_mask or "", order_by or "")
    before = decode_token(page_token, *binding) if page_token else None
    short = list_pages == "short"
    mine = [r for r in reversed(list(records)) if r.project == project and r.location == location
            and (before is None or r.seq < before)]
    if short and before is None and mine:  # a first page with nothing on it, and a token
        return {"nextPageToken": encode_token(mine[0].seq + 1, *binding)}
    # Newest first; the token is the seq to continue below, so inserts never shift pages.
    looked_at = mine[:short_window(size)] if short else mine
    page, last = [], None
    for record in looked_at:
        if not predicate(record.filter_record()):
            last = record
            continue
        if len(page) == size:
            break
        page.append(record)
        last = record
    body: dict[str, Any] = {key: [project_mask((wire or (lambda r: r.wire()))(r), mask) for r in page]} \
        if page else {}
    if last is not None and last is not mine[-1]:
        body["nextPageToken"] = encode_token(last.seq, *binding)
    return body


def offset_list(items: Sequence[Any], key: str, binding: tuple, page_size: int | None, page_token: str,
                list_pages: str, wire: Callable[[Any], dict]) -> dict:
    """A page of a collection listed in a fixed order with no filter (persistent resources,
    quota infos): the token holds the offset."""
    size = coerce_page_size(page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
    start, end = offset_page(page_token, binding, size, len(items), list_pages)
    page = items[start:end]
    body: dict[str, Any] = {key: [wire(item) for item in page]} if page else {}
    if end < len(items):
        body["nextPageToken"] = encode_token(end, *binding)
    return body
