"""pagesim: what your GPUs will do serving an LLM, before you buy or configure them."""

__version__ = "0.1.0"
