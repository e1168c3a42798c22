"""Mooncake (FAST'25) traces: rows of arrival time, lengths and `hash_ids`, replayed as requests
whose prompt content is the trace's blocks, so prefix caching and prefix-aware routing see the
trace's real sharing.

A row: {"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]}.
`hash_ids` holds one id per 512-token block of the input (the Mooncake repository's
FAST25-release/traces README; every row of the shipped traces has exactly
ceil(input_length / 512) ids), and equal ids mean equal content (ids are remapped prefix hashes:
equal id at block k implies equal blocks 0..k). Block k of a row becomes the content segment
(TRACE_BLOCK_SEGMENT, id) of 512 tokens (the last one what is left of the input), so at any KV
block size two requests share exactly the blocks their ids say they share.

Rows longer than the model's maximum are fit as simulator/workload/stream.py fits trace rows
(Vidur's rule: the prompt loses the excess, the answer keeps its length), the content cut with
the prompt.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pagesim.simulator.core.config import MooncakeTrace
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.core.limits import TOKENS
from pagesim.simulator.core.numbers import Range, short_repr
from pagesim.simulator.core.request import TRACE_BLOCK_SEGMENT, Request
from pagesim.simulator.workload.counts import StreamCounts
from pagesim.simulator.workload.number_checks import check_arrival
from pagesim.simulator.workload.trace_files import DATA_DIR

BLOCK_TOKENS = 512  # tokens per hash id (Mooncake FAST25-release/traces README)
BUILTIN_MOONCAKE: dict[str, Path] = {
    "mooncake-conversation": DATA_DIR / "mooncake_conversation.jsonl",
    "mooncake-synthetic": DATA_DIR / "mooncake_synthetic.jsonl",
}
MAX_TRACE_BYTES = 256 * 2**20
_TIMESTAMP = Range(0, math.inf, unit="milliseconds")


@dataclass(frozen=True, slots=True)
class MooncakeRows:
    timestamps_ms: tuple[float, ...]
    input_lengths: tuple[int, ...]
    output_lengths: tuple[int, ...]
    hash_ids: tuple[tuple[int, ...], ...]

    def __len__(self) -> int:
        return len(self.input_lengths)


def _count(row: dict[str, object], key: str, where: str) -> int:
    """A token count: a JSON integer in a request trace's range (simulator/core/limits.py)."""
    value = row.get(key)
    if not isinstance(value, int) or TOKENS.take(value) is None:
        raise InputError(
            f"{where}: {key}: expected {TOKENS.describe()}, got {short_repr(value)}; fix the row "
            "or remove it"
        )
    return value


def _row(line: str, where: str) -> tuple[float, int, int, tuple[int, ...]]:
    try:
        row = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{where}: not a JSON object ({exc}); one JSON object per line") from None
    if not isinstance(row, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(row).__name__}")
    missing = [
        k for k in ("timestamp", "input_length", "output_length", "hash_ids") if k not in row
    ]
    if missing:
        raise InputError(f"{where}: missing {choices_text(missing)}; every row needs all four")
    stamp = row["timestamp"]
    if isinstance(stamp, str) or _TIMESTAMP.take(stamp) is None:
        raise InputError(
            f"{where}: timestamp: expected {_TIMESTAMP.describe()}, got {short_repr(stamp)}"
        )
    input_len = _count(row, "input_length", where)
    output_len = _count(row, "output_length", where)
    ids = row["hash_ids"]
    expected = math.ceil(input_len / BLOCK_TOKENS)
    shown = json.dumps(ids)[:60]
    if not isinstance(ids, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
    ):
        raise InputError(
            f"{where}: hash_ids: expected a list of integers >= 0, got {shown}; write one id per "
            f"{BLOCK_TOKENS}-token block of the input ({expected} for input_length {input_len})"
        )
    if len(ids) != expected:
        raise InputError(
            f"{where}: hash_ids: {len(ids)} ids for input_length {input_len}, which spans "
            f"{expected} blocks of {BLOCK_TOKENS} tokens; give one id per block"
        )
    return float(stamp), input_len, output_len, tuple(ids)


@functools.lru_cache(maxsize=4)
def _read(path: str, label: str, mtime_ns: int, size: int) -> MooncakeRows:
    del mtime_ns  # with size, the cache key: a changed file is read again
    if size > MAX_TRACE_BYTES:
        raise InputError(f"{label}: larger than {MAX_TRACE_BYTES >> 20} MiB: not a trace")
    stamps: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    ids: list[tuple[int, ...]] = []
    with open(path, encoding="utf-8-sig") as lines:  # a BOM first, as CSV readers accept
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            stamp, input_len, output_len, hashes = _row(line, f"{label} line {number}")
            if stamps and stamp < stamps[-1]:
                raise InputError(
                    f"{label} line {number}: timestamp: {stamp:g} ms is before the previous "
                    f"row's {stamps[-1]:g} ms; sort the rows by timestamp"
                )
            stamps.append(stamp)
            inputs.append(input_len)
            outputs.append(output_len)
            ids.append(hashes)
    if not stamps:
        raise InputError(f"{label}: no rows; a Mooncake trace holds one JSON object per line")
    return MooncakeRows(tuple(stamps), tuple(inputs), tuple(outputs), tuple(ids))


def read_mooncake(path: Path, label: str | None = None) -> MooncakeRows:
    """The validated rows of a Mooncake trace file; InputError naming the file (as `label`
    says, default its path), line and field."""
    label = str(path) if label is None else label
    try:
        stat = path.stat()
        return _read(str(path), label, stat.st_mtime_ns, stat.st_size)
    except OSError as exc:
        raise InputError(f"{label}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"{label}: not UTF-8 text; a Mooncake trace is JSON lines") from None


def content(hash_ids: tuple[int, ...], prompt_len: int) -> tuple[tuple[tuple[int, ...], int], ...]:
    """The prompt's content segments: block k of the row is (TRACE_BLOCK_SEGMENT, id_k)."""
    segments = []
    for k, block in enumerate(hash_ids):
        tokens = min(BLOCK_TOKENS, prompt_len - k * BLOCK_TOKENS)
        if tokens <= 0:
            break
        segments.append(((TRACE_BLOCK_SEGMENT, block), tokens))
    return tuple(segments)


def mooncake_requests(
    trace: MooncakeTrace, max_seq_len: int, stats: StreamCounts
) -> Iterator[Request]:
    """Requests of rows offset.. in order, ids 0, 1, ...; arrival times start at 0 (seconds)."""
    rows = read_mooncake(trace.path)
    total = len(rows)
    if not 0 <= trace.offset < total:
        raise InputError(
            f"workload.mooncake.offset: {trace.offset} is not a row (0 to {total - 1})"
        )
    count = total - trace.offset if trace.num_requests is None else trace.num_requests
    if count > total - trace.offset:
        raise InputError(
            f"workload.mooncake.num_requests: {count} from row {trace.offset} but the trace has "
            f"{total} rows; lower one of them"
        )
    return _stream(rows, trace, count, max_seq_len, stats)


def _stream(
    rows: MooncakeRows, trace: MooncakeTrace, count: int, max_seq_len: int, stats: StreamCounts
) -> Iterator[Request]:
    first_ms = rows.timestamps_ms[trace.offset]
    for request_id in range(count):
        row = trace.offset + request_id
        input_len, output_len = rows.input_lengths[row], rows.output_lengths[row]
        # Vidur's rule, as stream.py applies it to trace rows: the prompt loses the excess.
        cut = min(max(input_len + output_len - max_seq_len, 0), input_len - 1)
        prompt_len = input_len - cut
        room = max_seq_len - prompt_len
        capped = 0 < room < output_len
        if capped:
            output_len = room
        arrival_s = check_arrival(
            "workload.mooncake.time_scale",
            request_id,
            (rows.timestamps_ms[row] - first_ms) / 1000.0 / trace.time_scale,
            "raise time_scale, or replay fewer rows",
        )
        yield Request(
            request_id=request_id,
            arrival_s=arrival_s,
            prompt_len=prompt_len,
            output_len=output_len,
            content=content(rows.hash_ids[row], prompt_len),
        )
        # Counted once the consumer comes back for the next one (as stream.py counts).
        stats.num_requests += 1
        stats.num_prompt_clipped += cut > 0
        stats.num_output_capped += capped
