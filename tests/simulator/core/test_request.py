"""A request's lifecycle flags (core/request.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pagesim.simulator.core.request import _LEGAL, Request, RequestStatus


def test_a_request_is_done_once_finished_or_rejected_and_only_then() -> None:
    """`is_done` is an attribute `transition` keeps (read for every request after every step):
    it turns true on the move to FINISHED or REJECTED, never before, and a copy made by
    `dataclasses.replace` (a disaggregated prompt's clone) reads its status again."""
    served = Request(0, 0.0, 8, 2)
    assert not served.is_done
    for status in (RequestStatus.RUNNING, RequestStatus.PREEMPTED, RequestStatus.RUNNING):
        served.transition(status, 1.0)
        assert not served.is_done
    served.transition(RequestStatus.FINISHED, 2.0)
    assert served.is_done and served.finish_s == 2.0
    with pytest.raises(RuntimeError, match="illegal transition"):
        served.transition(RequestStatus.RUNNING, 3.0)
    assert served.is_done

    turned_away = Request(1, 0.0, 8, 2)
    turned_away.reject("too long", 0.5)
    assert turned_away.is_done and turned_away.rejection_reason == "too long"

    assert replace(served, output_len=1).is_done
    assert not replace(Request(2, 0.0, 8, 2), output_len=1).is_done
    assert Request(3, 0.0, 8, 2, status=RequestStatus.FINISHED).is_done


@pytest.mark.parametrize("old", list(RequestStatus))
@pytest.mark.parametrize("new", list(RequestStatus))
def test_every_move_is_allowed_exactly_when_the_lifecycle_lists_it(
    old: RequestStatus, new: RequestStatus
) -> None:
    """`transition` checks a move by the statuses its status may move to (by name, then
    identity): exactly the moves `_LEGAL` lists pass, with their counts; every other raises and
    changes nothing."""
    request = Request(0, 0.0, 8, 2, status=old)
    if new in _LEGAL[old]:
        request.transition(new, 1.0)
        assert request.status is new and request.history == [(new, 1.0)]
        assert request.num_preemptions == (new in (RequestStatus.SWAPPED, RequestStatus.PREEMPTED))
        assert request.num_swaps == (new is RequestStatus.SWAPPED)
        assert request.is_done == (new in (RequestStatus.FINISHED, RequestStatus.REJECTED))
    else:
        with pytest.raises(RuntimeError, match="illegal transition"):
            request.transition(new, 1.0)
        assert request.status is old and not request.history


@pytest.mark.parametrize("group", [None, 3])
def test_a_streamed_request_has_every_field_the_class_would_give_it(group: int | None) -> None:
    """`streamed_request` sets a request's fields one by one (no class call a request): each
    field, every one of `Request`'s, holds what the class call with the same arguments gives
    it. A field added to `Request` and not set there fails here."""
    from dataclasses import fields

    from pagesim.simulator.core.request import SamplingKind, streamed_request

    args = (7, 1.5, 40, 9, group, 16 if group else 0, SamplingKind.PARALLEL, 2, 1)
    made = streamed_request(*args, (9, 4))
    built = Request(*args, None, (9, 4))
    for f in fields(Request):
        assert getattr(made, f.name) == getattr(built, f.name), f.name
    assert made.history is not built.history  # a list of its own
