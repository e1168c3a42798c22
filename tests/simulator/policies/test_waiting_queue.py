"""The waiting queue of each admission order (policies/pieces.py): FCFS a deque whose head a
preempted request rejoins, PRIORITY a heap by (priority, arrival, id) where a preempted request
falls back into its place. Both answer the same questions the policies ask."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from pagesim.simulator.core.config import AdmissionOrder, Policy
from pagesim.simulator.policies.pieces import FcfsQueue, PriorityQueue, waiting_queue
from tests.sim_helpers import system


@dataclass(frozen=True)
class Waiter:
    request_id: int
    priority: int
    arrival_s: float


def _self(w: Waiter) -> Waiter:
    return w


def test_fcfs_rejoins_at_the_head() -> None:
    queue = waiting_queue(system(Policy.VLLM_V1), _self)
    assert isinstance(queue, FcfsQueue)
    a, b, c = (Waiter(i, 0, float(i)) for i in range(3))
    queue.push(a)
    queue.push(b)
    assert queue.pop() is a  # the head, not a deque's tail
    queue.push(c)
    queue.push_front(a)  # preempted: ahead of later arrivals
    assert [queue[0], *queue] == [a, a, b, c]
    queue.remove(b)
    assert len(queue) == 2 and list(queue) == [a, c]


def test_priority_puts_a_preempted_request_back_in_its_place() -> None:
    queue = waiting_queue(system(Policy.VLLM_V1, admission=AdmissionOrder.PRIORITY), _self)
    assert isinstance(queue, PriorityQueue)
    late_urgent, early, later = Waiter(2, 0, 2.0), Waiter(0, 1, 0.0), Waiter(1, 1, 1.0)
    for w in (early, later, late_urgent):
        queue.push(w)
    assert queue[0] is late_urgent and list(queue) == [late_urgent, early, later]
    assert queue.pop() is late_urgent
    queue.push_front(late_urgent)  # not the head by arrival: back where its key puts it
    assert queue[1] is early and queue[2] is later
    queue.remove(early)
    assert [queue.pop(), queue.pop()] == [late_urgent, later] and len(queue) == 0


@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), max_size=30))
def test_the_head_is_what_pop_returns(ops: list[tuple[int, bool]]) -> None:
    # a priority queue's [0] and iteration agree with the order pop takes
    queue: PriorityQueue[Waiter] = PriorityQueue(_self)
    for i, (priority, front) in enumerate(ops):
        (queue.push_front if front else queue.push)(Waiter(i, priority, float(i)))
    listed = list(queue)
    assert [queue[i] for i in range(len(queue))] == listed
    popped = []
    while len(queue):
        head = queue[0]
        popped.append(queue.pop())
        assert popped[-1] is head
    assert popped == listed == sorted(listed, key=lambda w: (w.priority, w.arrival_s))
