"""What a pipeline stage's activations cost to reach the next stage: measured NCCL send/recv.

After stage s computes a batch of T tokens, each of its tensor-parallel ranks sends its share of
the batch's intermediate tensors to the same rank of stage s + 1, all ranks at once over their
own links, and the receivers all-gather them (vllm/distributed/parallel_state.py
`GroupCoordinator.isend_tensor_dict` with `all_gather_group` = the TP group, v0.34.0). A
Llama-family layer stack hands over two tensors, `hidden_states` and `residual`
(vllm/model_executor/models/llama.py `LlamaModel.forward`), of T x hidden 16-bit values each, so
one rank sends two messages of

    T x hidden x 2 bytes / tensor_parallel

timed by the measured send/recv medians (execution/data/README.md: Vidur's DGX H100 and DGX
A100 tables), linear between measured sizes and along the last two points' slope above 64 MiB.
The all-gather on the receiving side (within one node, NVLink) is not priced.

A stage boundary crosses nodes when the last GPU of stage s and the first of stage s + 1 lie in
different scale-up domains (stage s holds GPUs s t .. (s + 1) t - 1 of the replica; a domain is
the GPU's `scale_up_gpus`: 8 in a DGX/HGX node, 72 in a GB200 NVL72 rack, whose hand-offs
within the rack go over NVLink as inside a DGX): on H100s TP 8 x PP 2 crosses between its nodes,
TP 4 x PP 2 stays in one node. Measured on DGX H100 (H100, H200) and DGX A100 (A100) nodes; any
other GPU takes DGX H100's table, an estimate said so in the execution model's description.
"""

from __future__ import annotations

import csv
from bisect import bisect_left
from dataclasses import dataclass
from functools import cache
from importlib import resources

ACTIVATION_BYTES = 2  # 16-bit activations whatever the weights' dtype
TENSORS_PER_HANDOFF = 2  # hidden_states and residual

_TABLE_OF_GPU = {
    "a100-40gb": "a100_dgx",
    "a100-80gb": "a100_dgx",
    "h100-sxm": "h100_dgx",
    "h200-sxm": "h100_dgx",
}
_FALLBACK = "h100_dgx"


@dataclass(frozen=True, slots=True)
class SendRecvTable:
    """Median seconds of one send/recv by message size, inside a node and across nodes."""

    name: str
    sizes_bytes: tuple[int, ...]
    intra_node_s: tuple[float, ...]
    inter_node_s: tuple[float, ...]

    def seconds(self, num_bytes: float, crosses_nodes: bool) -> float:
        """One send of `num_bytes`: interpolated between measured sizes (the smallest's time
        below them, the last two points' slope above them)."""
        times = self.inter_node_s if crosses_nodes else self.intra_node_s
        sizes = self.sizes_bytes
        i = bisect_left(sizes, num_bytes)
        if i == 0:
            return times[0]
        i = min(i, len(sizes) - 1)
        x0, x1, y0, y1 = sizes[i - 1], sizes[i], times[i - 1], times[i]
        return y0 + (y1 - y0) * (num_bytes - x0) / (x1 - x0)


@cache
def send_recv_table(name: str) -> SendRecvTable:
    """The packaged table `name` (execution/data/send_recv_<name>.csv; ms in the file)."""
    text = resources.files("pagesim.simulator.execution").joinpath(f"data/send_recv_{name}.csv")
    sizes: list[int] = []
    intra: list[float] = []
    inter: list[float] = []
    with text.open() as handle:
        for row in csv.DictReader(handle):
            sizes.append(int(row["size_bytes"]))
            intra.append(float(row["intra_node_median_ms"]) / 1e3)
            inter.append(float(row["inter_node_median_ms"]) / 1e3)
    return SendRecvTable(name, tuple(sizes), tuple(intra), tuple(inter))


def table_for_gpu(gpu_name: str) -> tuple[SendRecvTable, bool]:
    """The table for `gpu_name`, and whether it was measured on that GPU's kind of node."""
    name = _TABLE_OF_GPU.get(gpu_name)
    return send_recv_table(name or _FALLBACK), name is not None


def crosses_nodes(boundary: int, tensor_parallel: int, domain_gpus: int) -> bool:
    """Whether the hand-off from stage `boundary` to `boundary + 1` leaves the scale-up domain
    of `domain_gpus` GPUs (8: a DGX/HGX node, the nodes Vidur measured)."""
    last_gpu = (boundary + 1) * tensor_parallel - 1
    return last_gpu // domain_gpus != (last_gpu + 1) // domain_gpus


def handoff_bytes_per_rank(num_tokens: int, hidden_size: int, tensor_parallel: int) -> float:
    """Bytes of one of the two messages each rank sends for a batch of `num_tokens`."""
    return num_tokens * hidden_size * ACTIVATION_BYTES / tensor_parallel


@dataclass(frozen=True, slots=True)
class StageLinks:
    """The hand-offs of one pipeline: which boundaries cross nodes, and their table."""

    table: SendRecvTable
    is_measured: bool  # the table was measured on this GPU's kind of node
    crossing: tuple[bool, ...]  # one per stage boundary
    hidden_size: int
    tensor_parallel: int

    @classmethod
    def of(
        cls, gpu_name: str, num_stages: int, hidden_size: int, tp: int, domain_gpus: int
    ) -> StageLinks:
        table, measured = table_for_gpu(gpu_name)
        crossing = tuple(crosses_nodes(b, tp, domain_gpus) for b in range(num_stages - 1))
        return cls(table, measured, crossing, hidden_size, tp)

    def transfer_s(self, num_tokens: int) -> tuple[float, ...]:
        """Seconds from each stage's end to the next stage's having the batch's activations."""
        size = handoff_bytes_per_rank(num_tokens, self.hidden_size, self.tensor_parallel)
        return tuple(
            TENSORS_PER_HANDOFF * self.table.seconds(size, crosses) for crosses in self.crossing
        )

    def describe(self) -> str:
        where = ", ".join("inter-node" if c else "intra-node" for c in self.crossing)
        basis = (
            f"measured send/recv of {self.table.name} (Vidur profiling data)"
            if self.is_measured
            else f"{self.table.name}'s measured send/recv, an estimate for this GPU"
        )
        return f"stage hand-offs {where}: {basis}"
