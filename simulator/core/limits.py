"""Bounds on what a person may ask for, shared by every edge that reads numbers (scenario files,
trace CSVs, `pagesim kv` flags): big enough for any real deployment, small enough that the
arithmetic stays exact and the simulator's own memory stays bounded."""

from __future__ import annotations

from pagesim.simulator.core.numbers import Range

MAX_COUNT = 10**9  # counts and token lengths
MAX_GIB = 1e6  # a memory figure in GiB: a million GiB is beyond any GPU or host
# KV blocks of one pool (GPU or CPU swap space). The block pool keeps a few Python list entries
# per block (about 80 bytes of host memory): 2^24 blocks is about 1.3 GB, which is as far as a
# laptop can go, and far more than any GPU holds at a sensible block size (an H200's 141 GiB
# of a 7B model's KV is 270 k tokens).
MAX_KV_BLOCKS = 1 << 24
# KV blocks of one run, every replica's GPU and CPU pools together (a fleet builds each of its
# replicas' pools up front): what one replica at the limit above may hold in its GPU and CPU
# pools. Measured: 1,127 replicas of 29,760 blocks (3.4 x 10^7 in all) took 2.8 GB of host
# memory and 6 s to build and run ten requests; 4,096 such replicas ran out of memory.
MAX_FLEET_KV_BLOCKS = 2 * MAX_KV_BLOCKS
MAX_TENSOR_PARALLEL = 1024  # GPUs a model is split over ([[fleet.pools]] tensor_parallel's bound)
MAX_BLOCK_SIZE = 1 << 20  # tokens per KV block (the systems' block_size bound)
# The latest a request may arrive, in seconds into the run (a trace's first replayed row arrives
# at 0): the simulated clock's range.
# The clock is a float64, so at t seconds its adjacent values are t x 2^-52 apart: 0.12 us at
# 10^9 s (32 years), a ten-thousandth of the ~1 ms host step the cost models price at the least
# (simulator/execution/overhead.py). Near 10^17 s a millisecond step no longer moves the clock at
# all, and requests would finish the instant they arrive. `stop.max_time_s` has the same bound.
MAX_ARRIVAL_S = 1e9

# The ranges file readers check cells against (simulator/core/numbers.py).
TOKENS = Range(1, MAX_COUNT, whole=True, unit="tokens")
