"""NumPy's BLAS thread count, set for a block of code.

On small CPUs shared with other work, OpenBLAS's spinning threads make small GEMMs several times
slower and noisier; the CPU executor and the CPU calibration run their GEMMs on one thread.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

_BLAS_SYMBOLS = (  # (get, set) pairs of OpenBLAS builds NumPy ships or links
    ("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
    ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
    ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
    ("openblas_get_num_threads", "openblas_set_num_threads"),
)


@cache
def _openblas() -> tuple[Any, Any] | None:
    """(get, set) thread-count functions of the OpenBLAS loaded in this process, if any."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower()}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for get, put in _BLAS_SYMBOLS:
            if hasattr(library, get) and hasattr(library, put):
                return getattr(library, get), getattr(library, put)
    return None


@contextmanager
def blas_threads(num_threads: int | None) -> Iterator[int | None]:
    """Run NumPy's BLAS on `num_threads` threads inside the block; yields the count in force
    (None where it cannot be set: another BLAS, or no /proc). On small CPUs shared with other
    work, OpenBLAS's spinning threads make small GEMMs several times slower and noisier."""
    functions = _openblas() if num_threads is not None else None
    if functions is None:
        yield None
        return
    get, put = functions
    before = int(get())
    put(num_threads)
    try:
        yield num_threads
    finally:
        put(before)
