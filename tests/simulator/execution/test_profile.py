"""The `profile` execution model: exact prices from a synthetic profile, errors a person can act on,
one warning per run when extrapolating, and the CPU pipeline calibrate -> profile -> price.

The synthetic profile below is test data written to a temporary folder: its numbers are chosen
for easy arithmetic, not measured, and its device says so.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path

import profile_helpers
import pytest

from pagesim.calibration.run import calibrate
from pagesim.simulator.core.catalog import KVDtype, ModelSpec, count_params, get_gpu
from pagesim.simulator.core.config import ExecutionConfig, ExecutionKind
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.plan import BlockCopy, SeqWork, StepPlan
from pagesim.simulator.execution.profile import (
    ProfileExtrapolationWarning,
    ProfileModel,
    piecewise_linear,
)
from pagesim.simulator.execution.profile_file import ProfileReader, load_profile, read_terms
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.scenario.load import PROFILE_DIR

MODEL = ModelSpec(
    "tiny-llama",
    2,
    4,
    2,
    64,
    256,
    512,
    1000,
    True,
    2048,
    count_params(2, 4, 2, 64, 256, 512, 1000, True),
)
GPU = get_gpu("h100-sxm")
DECODE, PREFILL = profile_helpers.DECODE, profile_helpers.PREFILL


def synthetic_profile(model: ModelSpec = MODEL) -> dict:
    return profile_helpers.synthetic_profile(model)


def make_model(tmp_path: Path, profile: dict | None = None, **kwargs) -> ProfileModel:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile if profile is not None else synthetic_profile()))
    config = ExecutionConfig(kind=ExecutionKind.PROFILE, profile_path=path)
    return ProfileModel(kwargs.pop("model", MODEL), GPU, config, **kwargs)


def decode_plan(num_seqs: int, context: int) -> StepPlan:
    return StepPlan.build([SeqWork(i, i, 1, context, False) for i in range(num_seqs)])


def prefill_plan(new_tokens: int, context: int) -> StepPlan:
    return StepPlan.build([SeqWork(0, 0, new_tokens, context, True)])


def gemm(tokens: float) -> float:
    return piecewise_linear([1, 64, 1024], [1e-4, 1.2e-4, 1e-3], tokens)


def lm_head(seqs: float) -> float:
    return piecewise_linear([1, 64, 1024], [2e-4, 2.1e-4, 1e-3], seqs)


# ---------------------------------------------------------------- prices


def test_decode_step_price_is_the_fits_times_layers(tmp_path: Path) -> None:
    model = make_model(tmp_path)
    cost = model.price(decode_plan(8, 500))
    layers = MODEL.num_layers
    attention = DECODE["a_s"] + DECODE["b_s_per_kv_token"] * 8 * 500 + DECODE["c_s_per_seq"] * 8
    assert cost.compute_s == pytest.approx(layers * (gemm(8) + attention) + lm_head(8))
    assert cost.swap_s == 0 and cost.copy_s == 0


def test_prefill_uses_the_squared_length_and_its_chunked_generalisation(tmp_path: Path) -> None:
    model = make_model(tmp_path)
    layers = MODEL.num_layers

    def expected(n: int, sq: int) -> float:
        attention = PREFILL["a_s"] + PREFILL["b_s_per_token_sq"] * sq + PREFILL["c_s_per_token"] * n
        return layers * (gemm(n) + attention) + lm_head(1)

    whole = model.price(prefill_plan(300, 300))
    assert whole.compute_s == pytest.approx(expected(300, 300**2))
    chunk = model.price(prefill_plan(100, 300))  # 100 new tokens over 200 cached ones
    assert chunk.compute_s == pytest.approx(expected(100, 100 * (2 * 300 - 100)))


def test_mixed_step_adds_decode_and_prefill(tmp_path: Path) -> None:
    model = make_model(tmp_path)
    work = [SeqWork(0, 0, 64, 64, True), SeqWork(1, 1, 1, 1000, False), SeqWork(2, 2, 1, 24, False)]
    layers = MODEL.num_layers
    decode = DECODE["a_s"] + DECODE["b_s_per_kv_token"] * 1024 + DECODE["c_s_per_seq"] * 2
    prefill = PREFILL["a_s"] + PREFILL["b_s_per_token_sq"] * 64**2 + PREFILL["c_s_per_token"] * 64
    expected = layers * (gemm(66) + decode + prefill) + lm_head(3)
    assert model.price(StepPlan.build(work)).compute_s == pytest.approx(expected)


def test_a_step_never_beats_the_empty_step(tmp_path: Path) -> None:
    profile = synthetic_profile()
    profile["overhead"]["empty_step_s"] = 0.05
    model = make_model(tmp_path, profile)
    assert model.price(decode_plan(1, 20)).compute_s == pytest.approx(0.05)


def test_swap_and_copy_costs(tmp_path: Path) -> None:
    model = make_model(tmp_path, block_size=16)
    block_bytes = 16 * MODEL.kv_bytes_per_token()
    assert model.block_bytes == block_bytes
    plan = StepPlan.build(
        [], num_swap_in_blocks=3, num_swap_out_blocks=2, copies=[BlockCopy(1, 2), BlockCopy(3, 4)]
    )
    cost = model.price(plan)
    assert cost.compute_s == 0
    copies = 2 * MODEL.num_layers * 3e-6  # K and V of every layer, 3 us each (estimate)
    assert cost.swap_s == pytest.approx(5 * (block_bytes / GPU.host_link_bps + copies))
    assert cost.copy_s == pytest.approx(2 * 2 * block_bytes / 4e12)
    assert model.price(StepPlan.build([])) == (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def test_flops_and_bytes_are_the_roofline_counts(tmp_path: Path) -> None:
    model = make_model(tmp_path)
    roof = RooflineModel(MODEL, GPU, ExecutionConfig())
    for plan in (
        decode_plan(16, 700),
        prefill_plan(128, 400),
        StepPlan.build([SeqWork(0, 0, 50, 50, True), SeqWork(1, 1, 1, 9, False)]),
    ):
        mine, theirs = model.price(plan), roof.price(plan)
        assert mine.flops == pytest.approx(theirs.flops)
        assert mine.bytes_moved == pytest.approx(theirs.bytes_moved)


@pytest.mark.filterwarnings(
    "ignore::pagesim.simulator.execution.profile.ProfileExtrapolationWarning"
)
def test_prices_grow_with_work(tmp_path: Path) -> None:
    model = make_model(tmp_path)
    decode = [model.price(decode_plan(n, 300)).compute_s for n in (1, 2, 8, 32, 128, 256)]
    assert decode == sorted(decode) and decode[0] > 0
    longer = [model.price(decode_plan(4, c)).compute_s for c in (16, 256, 4096, 16384)]
    assert longer == sorted(longer)
    prefill = [model.price(prefill_plan(n, n)).compute_s for n in (16, 128, 1024, 4096)]
    assert prefill == sorted(prefill)


# ---------------------------------------------------------------- extrapolation


def test_extrapolation_warns_once_and_is_counted(tmp_path: Path) -> None:
    model = make_model(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.price(decode_plan(64, 1000))  # inside: no warning
    with pytest.warns(ProfileExtrapolationWarning, match="decoding sequences 300 > 256") as seen:
        for _ in range(5):
            model.price(decode_plan(300, 10))
        model.price(prefill_plan(9000, 9000))
    assert len(seen) == 1
    info = model.describe()
    assert info["num_steps_extrapolated"] == 6 and info["num_steps_priced"] == 7


def test_gemm_extrapolates_with_the_last_slope() -> None:
    xs, ys = [1.0, 64.0, 1024.0], [1e-4, 1.2e-4, 1e-3]
    slope = (1e-3 - 1.2e-4) / 960
    assert piecewise_linear(xs, ys, 2048) == pytest.approx(1e-3 + slope * 1024)
    assert piecewise_linear(xs, ys, 0.5) == 1e-4
    assert piecewise_linear(xs, ys, 32.5) == pytest.approx(1e-4 + 2e-5 * 31.5 / 63)
    assert piecewise_linear([4.0], [3.0], 100) == 3.0


# ---------------------------------------------------------------- errors and provenance


def _expect_error(tmp_path: Path, profile: dict | str, match: str, **kwargs) -> None:
    path = tmp_path / "bad.json"
    path.write_text(profile if isinstance(profile, str) else json.dumps(profile))
    config = ExecutionConfig(kind=ExecutionKind.PROFILE, profile_path=path)
    with pytest.raises(InputError, match=match) as info:
        ProfileModel(kwargs.pop("model", MODEL), GPU, config, **kwargs)
    assert str(path) in str(info.value)


def test_missing_path_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"needs execution\.profile_path"):
        ProfileModel(MODEL, GPU, ExecutionConfig(kind=ExecutionKind.PROFILE))
    missing = tmp_path / "nope.json"
    config = ExecutionConfig(kind=ExecutionKind.PROFILE, profile_path=missing)
    with pytest.raises(InputError, match="no such profile file"):
        ProfileModel(MODEL, GPU, config)


def test_malformed_files(tmp_path: Path) -> None:
    _expect_error(tmp_path, "{not json", "not valid JSON")
    _expect_error(tmp_path, {"hello": 1}, "not a pagesim profile")
    old = synthetic_profile()
    old["schema_version"] = 0
    _expect_error(tmp_path, old, "schema version 0, this pagesim reads version 1")
    broken = synthetic_profile()
    del broken["gemm"]["tokens"]
    _expect_error(tmp_path, broken, "missing field 'gemm.tokens'")
    unsorted = synthetic_profile()
    unsorted["lm_head"]["tokens"] = [1, 64, 32]
    _expect_error(tmp_path, unsorted, "strictly increasing")
    negative = synthetic_profile()
    negative["decode_attention"]["coef"]["b_s_per_kv_token"] = -1.0
    _expect_error(tmp_path, negative, "must be a finite number from 0 to 1")


def test_profile_for_other_shapes_is_refused(tmp_path: Path) -> None:
    other = replace(MODEL, name="other", num_kv_heads=4)
    _expect_error(tmp_path, synthetic_profile(), "num_kv_heads 2 \\(model has 4\\)", model=other)
    renamed = replace(MODEL, name="same-shapes-other-name")
    make_model(tmp_path, model=renamed)  # the name alone does not matter
    _expect_error(tmp_path, synthetic_profile(), "tensor_parallel 1", tensor_parallel=2)
    _expect_error(tmp_path, synthetic_profile(), "fp8 KV was not measured", kv_dtype=KVDtype.FP8)


def test_describe_reports_provenance_grid_and_errors(tmp_path: Path) -> None:
    info = make_model(tmp_path, block_size=32, kv_dtype=KVDtype.BF16).describe()
    assert info["kind"] == "profile" and info["device"] == "synthetic-test-device"
    assert info["kernel_sha256"] == "0" * 64 and info["versions"] == {"cupy": "test"}
    assert info["grid"]["tokens"] == [1.0, 1024.0] and info["grid"]["decode_seqs_max"] == 256
    assert info["held_out_error"]["decode_attention"]["mean_abs_rel_err"] == 0.03
    notes = " ".join(info["notes"])
    assert "block size 16, priced for 32" in notes and "bf16" in notes


# ---------------------------------------------------------------- the CPU pipeline


@pytest.fixture(scope="module")
def cpu_profile(tmp_path_factory) -> Path:
    return calibrate(MODEL, "numpy", True, tmp_path_factory.mktemp("cpu") / "tiny.json")


def test_cpu_pipeline_prices_plans_sanely(cpu_profile: Path) -> None:
    config = ExecutionConfig(kind=ExecutionKind.PROFILE, profile_path=cpu_profile)
    model = ProfileModel(MODEL, GPU, config)
    decode = [model.price(decode_plan(n, 64)).compute_s for n in (1, 2, 4, 8)]
    assert all(t > 0 for t in decode) and decode == sorted(decode)
    prefill = [model.price(prefill_plan(n, n)).compute_s for n in (16, 32, 64)]
    assert prefill == sorted(prefill)
    info = model.describe()
    assert info["device"] == "cpu" and "does not predict any GPU" in " ".join(info["notes"])
    assert info["num_steps_extrapolated"] == 0
    with pytest.warns(ProfileExtrapolationWarning) as seen:
        for n in (100, 200, 400):
            assert model.price(decode_plan(n, 512)).compute_s > decode[-1]
    assert len(seen) == 1 and model.describe()["num_steps_extrapolated"] == 3


def test_priced_at_another_block_size_the_roofline_block_term_difference_is_added(
    tmp_path: Path,
) -> None:
    """Measured at block 16, priced at 8: twice the block lookups of the paged kernel, priced as
    the roofline prices them (an estimate, said in the notes)."""
    at_16 = make_model(tmp_path, block_size=16)
    at_8 = make_model(tmp_path, block_size=8)
    roof_16 = RooflineModel(MODEL, GPU, ExecutionConfig(), block_size=16)
    roof_8 = RooflineModel(MODEL, GPU, ExecutionConfig(), block_size=8)
    plan = decode_plan(8, 500)
    expected = (roof_8.block_s_per_context - roof_16.block_s_per_context) * 8 * 500 + (
        roof_8.block_s_per_seq - roof_16.block_s_per_seq
    ) * 8
    assert expected > 0
    delta = at_8.price(plan).compute_s - at_16.price(plan).compute_s
    assert delta == pytest.approx(expected, rel=1e-9)
    assert "block term" in " ".join(at_8.describe()["notes"])  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(p.name for p in PROFILE_DIR.glob("*.json")))
def test_every_shipped_profile_passes_the_readers_checks(name: str) -> None:
    """The bounds a profile's fields are read against hold every profile the package ships (a
    term taken from the roofline writes 1e30 as the top of its range: no bound)."""
    path = PROFILE_DIR / name
    terms = read_terms(ProfileReader(path, load_profile(path)))
    assert terms.max_prefill_sq > 0 and len(terms.gemm.xs) > 0
