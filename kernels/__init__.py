"""The paged-attention CUDA kernels (*.cu), package data that calibration/kernel.py compiles.

Imports: nothing.
"""
