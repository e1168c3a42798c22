"""The scenario reproducers of the second round (repro2: bad inputs that got through),
one test each: `validate` sees every replica a run builds (each pool's GPU, degree and system)
and refuses, with `run`'s own reason, what `run` would refuse; keys that do nothing are refused;
a draft model must fit its target; a fleet is bounded by the simulator's memory. Each refusal
is one `error:` line naming the file and key, exit 2, no traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_helpers import refused, run_cli

BASE = """name = "s"
seed = 1
[model]
preset = "llama-3-8b"
[gpu]
preset = "h100-sxm"
[workload]
num_requests = 6
[workload.arrival]
kind = "poisson"
rate_per_s = 8.0
[workload.prompt]
kind = "fixed"
value = 100
[workload.output]
kind = "fixed"
value = 10
[[systems]]
name = "v1"
policy = "vllm-v1"
"""
POOLS = """[[cluster.pools]]
name = "a"
count = 2
[[cluster.pools]]
name = "b"
count = 1
gpu = "a100-80gb"
"""
PD = """[cluster.link]
preset = "ib-ndr"
[[cluster.pools]]
name = "p"
role = "prefill"
count = 1
[[cluster.pools]]
name = "d"
role = "decode"
count = 2
"""


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def both_refuse(capsys: pytest.CaptureFixture[str], text: str, *needles: str) -> None:
    """`validate` and `run` refuse `text` with the same line."""
    Path("s.toml").write_text(text)
    line = refused(run_cli(capsys, "validate", "s.toml"), *needles)
    ran = run_cli(capsys, "run", "s.toml", "--out", "out", "--no-report")
    assert refused(ran, *needles) == line
    assert not Path("out").exists()


def test_01_a_fleet_beyond_the_simulators_memory_is_refused_by_validate_and_run(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """4,096 replicas of 29,760 blocks each died of MemoryError after `validate` said valid."""
    text = BASE + '[[cluster.pools]]\nname = "a"\ncount = 4096\n'
    both_refuse(
        capsys,
        text,
        "s.toml: cluster.pools: the fleet of system 'v1' would hold 121,896,960 KV blocks",
        "(4,096 replicas of pool 'a' hold 29,760 GPU and CPU blocks each)",
        "limit of 33,554,432",
        "give pool 'a' at most 1,127 replicas",
    )


def test_01_a_fleet_search_that_would_grow_beyond_it_is_refused_before_it_starts(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = BASE + '[slo]\nttft_s = 1e-6\n[[cluster.pools]]\nname = "a"\ncount = 1\n'
    Path("s.toml").write_text(text + "[capacity]\nmax_replicas = 4096\n")
    needles = (
        "capacity.max_replicas: 4,096 replicas of system 'v1' on h100-sxm at tensor_parallel 1 "
        "would hold 121,896,960 KV blocks",
        "search at most 1,127 replicas",
    )
    refused(run_cli(capsys, "validate", "s.toml"), *needles)
    refused(run_cli(capsys, "capacity", "s.toml", "--out", "cap", "--jobs", "1"), *needles)
    Path("s.toml").write_text(text + "[capacity]\nmax_replicas = 1127\n")
    assert run_cli(capsys, "validate", "s.toml").exit_code == 0


def test_01_a_disaggregated_search_is_bounded_by_its_largest_candidate(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Path("s.toml").write_text(
        BASE + "[slo]\nttft_s = 1e-6\n" + PD + "[capacity]\nmax_replicas = 2000\nmax_gpus = 4000\n"
    )
    refused(
        run_cli(capsys, "validate", "s.toml"),
        "capacity.max_gpus: the largest fleet searched, 2,000 prefill (TP 1) + 2,000 decode "
        "(TP 1) replicas of system 'v1'",
        "lower max_gpus or max_replicas",
    )


def test_09_a_profile_never_prices_a_pool_on_another_gpu(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The A100 profile priced the H100 pool at A100 speed, without a word."""
    profile = '[execution]\nprofile = "builtin:vidur-llama-2-7b-a100-80gb-tp1"\n'
    text = BASE.replace("llama-3-8b", "llama-2-7b").replace("h100-sxm", "a100-80gb") + profile
    pools = '[[cluster.pools]]\nname = "a100"\ncount = 1\n[[cluster.pools]]\nname = "h100"\n'
    both_refuse(
        capsys,
        text + pools + 'count = 1\ngpu = "h100-sxm"\n',
        "s.toml: execution.profile:",
        "measured on 'a100-80gb', but the replicas run on 'h100-sxm'",
        "(on cluster pool 'h100': 1 x h100-sxm at tensor_parallel 1)",
    )
    both_refuse(
        capsys,
        text + pools + "count = 1\ntensor_parallel = 2\n",
        "execution.profile:",
        "measured at tensor_parallel 1, the scenario uses 2",
        "(on cluster pool 'h100': 1 x a100-80gb at tensor_parallel 2)",
    )


def test_10_validate_and_show_resolved_see_every_pools_gpu(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """They looked at [gpu] only: one set of knobs and one capacity for H100 and A100 pools."""
    Path("s.toml").write_text(BASE + POOLS)
    checked = run_cli(capsys, "validate", "s.toml")
    assert checked.exit_code == 0, checked.err
    lines = checked.out.splitlines()
    assert lines[:3] == [
        "v1 [cluster pool 'a': 2 x h100-sxm at tensor_parallel 1]: vllm-v1, 27,712 KV blocks "
        "of 16 tokens",
        "v1 [cluster pool 'b': 1 x a100-80gb at tensor_parallel 1]: vllm-v1, 28,364 KV blocks "
        "of 16 tokens",
        "v1's fleet: 3 replicas on 3 GPUs, router round-robin; 89,932 KV blocks in all (the "
        "simulator builds at most 33,554,432 in one run)",
    ]
    ran = run_cli(capsys, "run", "s.toml", "--out", "out", "--no-report")
    assert ran.exit_code == 0, ran.err
    shown = run_cli(capsys, "scenarios", "show", "s.toml", "--resolved").out
    sections = shown.split("\n[")[1:]
    assert [s.splitlines()[0].split(";")[0] for s in sections] == [
        "v1]  # cluster pool 'a': 2 x h100-sxm at tensor_parallel 1",
        "v1]  # cluster pool 'b': 1 x a100-80gb at tensor_parallel 1",
    ]
    h100, a100 = sections
    # vLLM V1's larger defaults need a GPU of >= 70 GiB that is not an A100
    assert re.search(r"max_num_seqs +=  *1024\b", h100) and re.search(
        r"max_num_seqs +=  *256\b", a100
    )
    assert "# KV cache: 27,712 blocks" in h100 and "# KV cache: 28,364 blocks" in a100


def test_10_a_pool_that_cannot_run_is_refused_by_validate_naming_the_pool(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        BASE.replace("llama-3-8b", "llama-2-13b") + '[[cluster.pools]]\nname = "big"\ncount = 1\n'
    )
    both_refuse(
        capsys,
        text + '[[cluster.pools]]\nname = "small"\ncount = 1\ngpu = "l4"\n',
        "systems[0].gpu_memory_utilization: no memory left for the KV cache",
        "(on cluster pool 'small': 1 x l4 at tensor_parallel 1)",
    )
    one_token_blocks = BASE.replace('policy = "vllm-v1"', 'policy = "vllm-v1"\nblock_size = 1')
    one_token_blocks = one_token_blocks.replace("h100-sxm", "a100-40gb")
    # a 4-layer model of 4 kB of fp8 KV a token: an H200 holds 3.3 x 10^7 blocks of one token
    Path("tiny.json").write_text(
        '{"num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8, '
        '"intermediate_size": 1376, "vocab_size": 32000}'
    )
    one_token_blocks = one_token_blocks.replace(
        'preset = "llama-3-8b"', 'config = "tiny.json"\nkv_dtype = "fp8"'
    )
    both_refuse(
        capsys,
        one_token_blocks + '[[cluster.pools]]\nname = "a"\ncount = 1\n[[cluster.pools]]\n'
        'name = "h200"\ncount = 1\ngpu = "h200-sxm"\n',
        "systems[0].block_size: the GPU pool would hold",
        "more than the simulator's limit of 16,777,216",
        "(on cluster pool 'h200': 1 x h200-sxm at tensor_parallel 1)",
    )


@pytest.mark.parametrize(
    ("workload", "needles"),
    [
        (
            "[workload.sessions]\nnum_sessions = 3\nthink_time_s = 1.0\n"
            '[workload.sessions.turns]\nkind = "fixed"\nvalue = 2\n'
            '[workload.sessions.new_tokens]\nkind = "fixed"\nvalue = 10\n',
            ("workload.sessions: multi-turn sessions are not simulated on a disaggregated",),
        ),
        (
            None,
            (
                "workload.num_seqs: 3 sequences per request (parallel sampling); a "
                "disaggregated fleet serves single-sequence requests",
            ),
        ),
    ],
)
def test_11_pd_refusals_are_validates_too(
    here: Path, capsys: pytest.CaptureFixture[str], workload: str | None, needles: tuple[str]
) -> None:
    """Both passed validate; the run then refused (sessions) or rejected every request."""
    if workload is None:
        text = BASE.replace(
            "num_requests = 6", 'num_requests = 6\nsampling = "parallel"\nnum_seqs = 3'
        )
    else:
        text = BASE.replace("num_requests = 6\n", "") + workload
    both_refuse(capsys, text + PD, *needles)


def test_11_a_contiguous_policy_in_a_pd_pool_is_refused_by_validate(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = BASE.replace('policy = "vllm-v1"', 'policy = "orca"') + PD
    both_refuse(
        capsys,
        text,
        "systems[0].policy: disaggregated pools need a paged vLLM policy (vllm-v0 or vllm-v1); "
        "system 'v1' is 'orca', in cluster pool 'p'",
    )


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        (
            POOLS + '[cluster.decode_router]\nkind = "least-kv"\n',
            ("cluster.decode_router: a router per phase needs prefill and decode pools",),
        ),
        (
            POOLS + '[cluster.prefill_router]\nkind = "least-kv"\n',
            ("cluster.prefill_router: a router per phase needs prefill and decode pools",),
        ),
        (
            POOLS + "[cluster.router]\ncache_threshold = 0.7\n",
            (
                "cluster.router.cache_threshold: only read by the prefix-aware router; the "
                "routers here: round-robin",
            ),
        ),
        (
            POOLS + '[cluster.router]\nkind = "least-kv"\nring_points = 40\n',
            ("cluster.router.ring_points: only read by the session-affinity router",),
        ),
        (
            "[execution]\nrouting_skew = 1.2\n",
            ("execution.routing_skew: only used by a mixture of experts", "llama-3-8b"),
        ),
    ],
)
def test_12_keys_that_do_nothing_where_they_are_set_are_refused(
    here: Path, capsys: pytest.CaptureFixture[str], change: str, needles: tuple[str]
) -> None:
    both_refuse(capsys, BASE + change, *needles)


@pytest.mark.parametrize(
    ("policy", "knob", "reader"),
    [
        ("vllm-v1", 'reservation = "pow2"', "the contiguous policies (static, orca)"),
        ("orca", "static_batch_size = 4", "static batching"),
        ("orca", "watermark = 0.01", "the paged policies (vllm-v0, vllm-v1)"),
        ("static", 'victim = "most-generated"', "the paged policies"),
        ("orca", 'preemption = "swap"', "the paged policies (vllm-v0, vllm-v1), which preempt"),
    ],
)
def test_12_a_knob_its_policy_does_not_read(
    here: Path, capsys: pytest.CaptureFixture[str], policy: str, knob: str, reader: str
) -> None:
    text = BASE.replace('policy = "vllm-v1"', f'policy = "{policy}"\n{knob}')
    key = knob.split(" = ")[0]
    both_refuse(capsys, text, f"systems[0].{key}: only used by {reader}", f"'{policy}'")


def test_12_defaults_is_read_by_every_policy(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Served or offline sets the front end's time for every policy (execution/frontend.py), so
    `defaults` on vllm-v0 is no inert key."""
    for mode in ("server", "offline"):
        text = BASE.replace('policy = "vllm-v1"', f'policy = "vllm-v0"\ndefaults = "{mode}"')
        Path("s.toml").write_text(text)
        assert run_cli(capsys, "validate", "s.toml").exit_code == 0


def test_12_a_router_key_serves_every_router_that_starts_from_the_table(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """cache_threshold in [cluster.router] is read by the prefix-aware router one system runs."""
    two = BASE + '[[systems]]\nname = "p"\npolicy = "vllm-v1"\n' + POOLS
    router = '[cluster.router]\ncache_threshold = 0.7\nby_system = { p = "prefix-aware" }\n'
    Path("s.toml").write_text(two + router)
    assert run_cli(capsys, "validate", "s.toml").exit_code == 0


def test_12_a_defaults_key_serves_the_systems_that_read_it_and_no_other(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two = BASE + '[[systems]]\nname = "orca"\npolicy = "orca"\n'
    Path("s.toml").write_text(
        two.replace("[[systems]]", '[defaults]\nreservation = "pow2"\n\n[[systems]]', 1)
    )
    assert run_cli(capsys, "validate", "s.toml").exit_code == 0  # orca reads it
    only_v1 = BASE.replace("[[systems]]", '[defaults]\nreservation = "pow2"\n\n[[systems]]', 1)
    both_refuse(
        capsys,
        only_v1,
        "defaults.reservation: no system reads it: only used by the contiguous policies",
        "the systems are vllm-v1",
    )


@pytest.mark.parametrize(
    ("spec", "needles"),
    [
        (
            'method = "draft-model", draft_model = "opt-13b"',
            (
                "systems[0].speculative.draft_model: 'opt-13b' has a vocabulary of 50,272 "
                "tokens, the target 'llama-3-8b' 128,256",
                "llama-3-70b",
            ),
        ),
        (
            'method = "draft-model", draft_model = "gemma-3-27b"',
            ("speculative.draft_model: 'gemma-3-27b' has a vocabulary of 262,208",),
        ),
        (
            'method = "mtp"',
            (
                "systems[0].speculative.method: 'mtp' drafts with the multi-token-prediction "
                "module a checkpoint ships",
                "model 'llama-3-8b' ships none",
            ),
        ),
    ],
)
def test_14_a_draft_must_fit_its_target(
    here: Path, capsys: pytest.CaptureFixture[str], spec: str, needles: tuple[str]
) -> None:
    table = f"speculative = {{ {spec}, num_speculative_tokens = 3, acceptance_rate = 0.6 }}"
    text = BASE.replace('policy = "vllm-v1"', f'policy = "vllm-v1"\n{table}')
    both_refuse(capsys, text, *needles)


def test_14_a_window_layer_draft_of_the_same_vocabulary_is_refused(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Gemma 3 drafting for Gemma 3: one vocabulary, but window layers in the draft."""
    table = (
        'speculative = { method = "draft-model", draft_model = "gemma-3-27b", '
        "num_speculative_tokens = 3, acceptance_rate = 0.6 }"
    )
    text = BASE.replace('policy = "vllm-v1"', f'policy = "vllm-v1"\n{table}')
    text = text.replace('preset = "llama-3-8b"', 'preset = "gemma-3-27b"\ntensor_parallel = 4')
    both_refuse(
        capsys,
        text.replace("h100-sxm", "h200-sxm"),
        "speculative.draft_model: 'gemma-3-27b' has sliding-window or state layers",
    )
