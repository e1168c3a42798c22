"""Bounds on what a person may ask for, shared by every edge that reads numbers (scenario files,
trace CSVs, `pagesim kv` flags): big enough for any real deployment, small enough that the
arithmetic stays exact and the simulator's own memory stays bounded."""

from __future__ import annotations

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
