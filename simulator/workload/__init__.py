"""Workloads: length and arrival samplers, the built-in traces and their loading, and the stream
of requests a simulation consumes.

Imports: core alone (pandas only where a trace file is read).
"""
