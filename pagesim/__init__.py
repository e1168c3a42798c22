"""pagesim: what your GPUs will do serving an LLM, before you buy or configure them.

This package is the `pagesim` command (cli.py and its cli_*.py parts, app.py, console.py).
Imports: simulator, calibration, reports.
"""

__version__ = "0.1.0"
