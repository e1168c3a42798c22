"""Why GPU tests skip here: the one check every `gpu`-marked test module shares."""

from __future__ import annotations


def gpu_skip_reason() -> str | None:
    """None when CuPy sees a CUDA GPU, else a sentence saying what is missing."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed (pip install 'pagesim[gpu]')"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA GPU"
    except Exception as exc:  # no driver
        return f"no usable CUDA GPU: {exc}"
    return None
