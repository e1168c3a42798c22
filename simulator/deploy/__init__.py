"""Deploying what pagesim found: the `vllm serve` and benchmark command lines of a system."""
