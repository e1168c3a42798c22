"""Fuzzing the scenario loader: whatever the input, the result is a Scenario or an InputError with
a one-line message naming the file; never another exception (the CLI turns InputError into exit
code 2 and a clean message, so no input can end in a traceback)."""

from __future__ import annotations

import copy
import math
import os
import tomllib
from collections.abc import Iterator
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pagesim.simulator.core import config
from pagesim.simulator.core.catalog import GPUS, MODELS, KVDtype
from pagesim.simulator.core.config import Scenario
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.scenario.load import (
    BUILTIN_DIR,
    BUILTIN_TRACES,
    SCHEMA,
    describe_scenario,
    expand_sweep,
    list_builtin,
    load_scenario,
    parse_param,
    parse_scenario,
)

BUILTINS = [name for name, _ in list_builtin()]
TEXTS = {name: (BUILTIN_DIR / f"{name}.toml").read_text() for name in BUILTINS}
RAWS = {name: tomllib.loads(text) for name, text in TEXTS.items()}
FUZZ = settings(  # PAGESIM_FUZZ_EXAMPLES=5000 for a longer hunt than CI's
    max_examples=int(os.environ.get("PAGESIM_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def schema_keys(node: Any) -> Iterator[str]:
    if isinstance(node, list):
        yield from schema_keys(node[0])
    elif isinstance(node, dict):
        for key, child in node.items():
            yield key
            yield from schema_keys(child)


def dotted_paths(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, list):
        yield from dotted_paths(node[0], prefix)
        return
    for key, child in node.items():
        path = f"{prefix}.{key}" if prefix else key
        yield path
        if child is not None:
            yield from dotted_paths(child, path)


KEYS = sorted(set(schema_keys(SCHEMA)))
PATHS = sorted(set(dotted_paths(SCHEMA)))
ENUM_VALUES = [
    m.value
    for e in (*vars(config).values(), KVDtype, SamplingKind)
    if isinstance(e, type) and issubclass(e, Enum)
    for m in e
]
WORDS = [*ENUM_VALUES, *MODELS, *GPUS, *BUILTIN_TRACES, *KEYS, "", " ", "../x.csv", "a\x00b"]
WORDS += ["~nosuchuser/x", "x" * 300, "__init__.py", "/", ".", "README.md", "num_prefill_tokens"]

scalars = (
    st.booleans()
    | st.integers()
    | st.sampled_from([0, -1, 1, 2**63, -(2**63), 10**40])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(WORDS)
    | st.dates()
    | st.datetimes()
    | st.times()
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)


def slots(node: Any) -> Iterator[tuple[Any, Any]]:
    """(container, key or index) of every value inside a TOML table, nested ones included."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, child in list(items):
        yield node, key
        if isinstance(child, dict | list):
            yield from slots(child)


def check(call: Any, *args: Any, **kwargs: Any) -> None:
    try:
        result = call(*args, **kwargs)
    except InputError as exc:
        message = str(exc)
        assert message and "\n" not in message and "Traceback" not in message
        event("input error")  # pytest --hypothesis-show-statistics shows the mix
    else:
        event("accepted")
        assert isinstance(result, Scenario | list)
        if isinstance(result, Scenario):
            assert_round_trip(result)


def assert_round_trip(scenario: Scenario) -> None:
    """What a report shows as "the scenario as run" loads back as the same scenario."""
    if MODELS.get(scenario.model.name) != scenario.model:
        return  # a config.json model is rendered as a comment, not re-loadable
    text = describe_scenario(scenario)
    again = parse_scenario(tomllib.loads(text), scenario.source)
    gpu, gpu_again = scenario.gpu, again.gpu  # custom figures go through GB/s and back
    assert replace(again, gpu=gpu) == scenario
    assert gpu_again.name == gpu.name and gpu_again.memory_bytes == gpu.memory_bytes
    for field in ("mem_bandwidth_bps", "fp16_flops", "host_link_bps"):
        assert math.isclose(getattr(gpu_again, field), getattr(gpu, field), rel_tol=1e-12)


@FUZZ
@given(st.sampled_from(BUILTINS), st.data())
def test_mutated_builtin_tables_give_a_scenario_or_an_input_error(name: str, data: Any) -> None:
    raw = copy.deepcopy(RAWS[name])
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        places = list(slots(raw))
        action = data.draw(st.sampled_from(["delete", "replace", "add", "word"]), label="action")
        if not places or action == "add":
            targets = [raw] + [c[k] for c, k in places if isinstance(c[k], dict)]
            target = data.draw(st.sampled_from(targets), label="table")
            key = data.draw(st.sampled_from(KEYS) | st.text(max_size=8), label="new key")
            target[key] = data.draw(values, label="new value")
            continue
        container, key = data.draw(st.sampled_from(places), label="place")
        if action == "delete":
            del container[key]
        elif action == "replace":
            container[key] = data.draw(values, label="value")
        else:  # a plausible word, to get past the type checks into deeper validation
            container[key] = data.draw(st.sampled_from(WORDS), label="word")
    check(parse_scenario, raw, BUILTIN_DIR / f"{name}.toml")


@FUZZ
@given(
    st.sampled_from(BUILTINS),
    st.lists(
        st.tuples(
            st.sampled_from(PATHS) | st.text(max_size=12),
            st.sampled_from(["[0]", "[1]", "[7]", ""]),
            st.text(max_size=10) | st.sampled_from(WORDS) | st.integers().map(str),
        ).map(lambda t: f"{t[0]}{t[1]}={t[2]}"),
        max_size=3,
    ),
)
def test_random_overrides_give_a_scenario_or_an_input_error(
    name: str, overrides: list[str]
) -> None:
    check(load_scenario, name, overrides)


@FUZZ
@given(st.text(max_size=40))
def test_random_sweep_parameters_give_an_axis_or_an_input_error(text: str) -> None:
    try:
        axis = parse_param(text)
    except InputError:
        return
    check(expand_sweep, "textbook_static_vs_continuous", axes=[axis])


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@FUZZ
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_random_bytes_give_only_input_errors(folder: Path, data: bytes) -> None:
    path = folder / "random.toml"
    path.write_bytes(data)
    check(load_scenario, path)


@FUZZ
@given(st.sampled_from(BUILTINS), st.data())
def test_spliced_builtin_files_give_a_scenario_or_an_input_error(
    folder: Path, name: str, data: Any
) -> None:
    text = TEXTS[name]
    for _ in range(data.draw(st.integers(1, 3), label="splices")):
        start = data.draw(st.integers(0, len(text)), label="start")
        end = data.draw(st.integers(start, min(len(text), start + 40)), label="end")
        insert = data.draw(st.text(max_size=20) | st.sampled_from(WORDS), label="insert")
        text = text[:start] + insert + text[end:]
    path = folder / f"{name}.toml"  # same name: relative paths and messages as for the built-in
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    check(load_scenario, path)
