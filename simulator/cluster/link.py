"""KV transfers between a prefill replica and a decode replica: their size, their time, and the
ports they contend for.

Size. A decode replica with tensor-parallel degree t_d keeps max(1, kv_heads / t_d) KV heads per
GPU (docs/facts.md), so each of its GPUs must receive that shard of every layer, for every token:

    bytes = tokens x t_d x kv_bytes_per_token(t_d)      (= tokens x layers x 2 x heads x dim x dtype
                                                           when t_d divides the KV heads)

Block padding is not sent (a connector moving whole blocks sends up to block_size - 1 tokens
more per request). With t_d > kv_heads the replicated heads are each sent. A system with a model
draft (eagle, mtp, draft-model) sends the draft's KV of the prompt too, computed by the prefill
replica's draft pass (execution/speculative.py): its layers join the target's in the sum
(vLLM's NIXL connector moves every KV cache group of the instance, the drafter's among them:
vllm-project/vllm PR #49230). Layer-wise, those bytes leave after the target's: the draft pass
that writes them runs after the target's last layer, so they overlap nothing (`tail_bytes`).

Time. The shards travel in parallel over min(t_p, t_d) lanes, one per GPU port on the side
with fewer GPUs (each of its ports carries the shards of the other side's GPUs it serves):

    seconds = latency_s + bytes / (lanes x bandwidth_bytes_s)

Layer-wise (`LinkConfig.layerwise`): layer l's KV leaves while layers > l compute. With L KV
layers and a prefill step of P seconds, sending finishes max(X / L, X - P (L - 1) / L) + D after
the step's end (X = the target's bytes' time, D = the draft's, 0 without one): the last layer's
share, or what did not fit under the compute, then the draft's KV. This assumes layers of equal
cost over the whole step (with a draft, P includes its pass, which the target's last layer could
overlap: a little conservative), and the ports free at the step's end; a transfer that had to
wait for a port overlaps nothing (an approximation: the ports are taken at the step's end).

Contention. Each replica has one port (its GPUs' links together, one transfer at a time, FIFO):
a transfer holds its prefill replica's port and its decode replica's port, taken in that order
(so no cycle: nobody holds a decode port while waiting for a prefill one). With one prefill and
one decode replica that is exactly one link: two transfers take twice as long as one.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import simpy

from pagesim.simulator.core.link import LinkConfig
from pagesim.simulator.core.model_spec import KVDtype, ModelSpec


def transfer_bytes(
    model: ModelSpec,
    dtype: KVDtype,
    num_tokens: int,
    decode_tp: int,
    drafter: ModelSpec | None = None,
) -> int:
    """Bytes the decode replica's GPUs receive for `num_tokens` prompt tokens (the target's KV
    and, with a model draft, the drafter's)."""
    per_token = model.kv_bytes_per_token(dtype, decode_tp)
    if drafter is not None:
        per_token += drafter.kv_bytes_per_token(dtype, decode_tp)
    return num_tokens * decode_tp * per_token


def transfer_s(
    link: LinkConfig,
    num_bytes: int,
    lanes: int,
    *,
    num_layers: int = 1,
    overlap_step_s: float = 0.0,
    tail_bytes: int = 0,
) -> float:
    """Seconds from taking the ports to the last byte's arrival. `overlap_step_s`: the
    prefill step the transfer may overlap layer by layer (only with `link.layerwise`);
    `tail_bytes` of `num_bytes` are written after the `num_layers` layers (a draft's KV) and
    overlap nothing."""
    wire_s = num_bytes / (lanes * link.bandwidth_bytes_s)
    if not link.layerwise or num_layers <= 1:
        return link.latency_s + wire_s
    tail_s = tail_bytes / (lanes * link.bandwidth_bytes_s)
    body_s = wire_s - tail_s
    hidden_s = overlap_step_s * (num_layers - 1) / num_layers
    return link.latency_s + max(body_s / num_layers, body_s - hidden_s) + tail_s


class Ports:
    """One FIFO port per replica (prefill replicas first, then decode replicas); `busy_s[i]`
    accumulates the time port i carried data, `intervals` every transfer's (start, end)."""

    def __init__(self, env: simpy.Environment, num_ports: int) -> None:
        self.env = env
        self.ports = [simpy.Resource(env, capacity=1) for _ in range(num_ports)]
        self.busy_s = [0.0] * num_ports
        self.intervals: list[tuple[float, float]] = []

    def hold(
        self, sender: int, receiver: int, seconds_after: Callable[[float], float]
    ) -> Generator[simpy.Event, None, tuple[float, float]]:
        """Take the sender's then the receiver's port, hold both for `seconds_after(wait)`;
        returns (when it took them, the seconds held)."""
        ready = self.env.now
        with self.ports[sender].request() as out:
            yield out
            with self.ports[receiver].request() as into:
                yield into
                waited = self.env.now - ready
                seconds = seconds_after(waited)
                start = self.env.now
                yield self.env.timeout(seconds)
        self.busy_s[sender] += seconds
        self.busy_s[receiver] += seconds
        self.intervals.append((start, start + seconds))
        return start, seconds
