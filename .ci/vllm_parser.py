"""Check pagesim's vLLM command lines with vLLM's own argument parsers (run by hand, not in CI).

vLLM cannot be installed where CI runs (it needs CUDA and weighs gigabytes), so pagesim keeps a
table of each release's flags (simulator/deploy/vllm_flags.json) and a test checks every flag
it writes against it. This script makes that table, and parses the command lines for real:

    python3 -m venv /tmp/v034 && /tmp/v034/bin/pip install --no-deps vllm==0.34.0
    /tmp/v034/bin/pip install pydantic transformers fastapi openai ...   # pure-Python deps
    /tmp/v034/bin/python .ci/vllm_parser.py flags > flags.json
    /tmp/v034/bin/python .ci/vllm_parser.py parse lines.json   # [["serve", MODEL, ...], ...]

Without torch installed, the modules vLLM's CLI imports but parsing never uses (torch, kernels,
the model executor's layers) are replaced by permissive mocks, as vLLM's own documentation build
does to render its CLI reference (docs/mkdocs/hooks/generate_argparse.py); the parsers are then
built by vLLM's code: `vllm serve` by EngineArgs.add_cli_args and make_arg_parser, `vllm bench
serve` by the benchmark's add_cli_args. `parse` also runs `vllm serve`'s own validation of the
parsed arguments (validate_parsed_serve_args). Choices a release checks only when it builds the
engine configuration (pydantic Literal fields, e.g. --kv-cache-dtype from v0.33) are not checked.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import sys
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from types import SimpleNamespace
from typing import Any
from unittest.mock import MagicMock

_real_version = importlib.metadata.version
VLLM = _real_version("vllm")
HAVE_TORCH = importlib.util.find_spec("torch") is not None
# torch's versions as the releases' requirements pin them: vLLM checks them at import.
TORCH_VERSIONS = {"torch": "2.14.0", "torchvision": "0.29.0", "torchaudio": "2.11.0"}
# vLLM's runtime packages that its CLI modules import (they register kernels with torch at
# import) but parsing never uses; the v0.3x CLI imports them, v0.6 and v0.11 do not.
RUNTIME = (
    "vllm.ir",
    "vllm.ir.ops",
    "vllm.ir.op",
    "vllm.lora.utils",
    "vllm.lora.layers",
    "vllm.model_executor.layers.fused_moe",
)


class Mocked(MagicMock):
    """A module that answers every attribute, with a spec and a path (so submodules import)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.__spec__ = ModuleSpec(kwargs.get("name"), None)
        self.__path__: list[str] = []

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.any_schema()


class CustomOp:
    """vLLM's custom-op registry, as a no-op decorator."""

    @staticmethod
    def register(name: str) -> Callable[[type], type]:
        return lambda cls: cls

    @staticmethod
    def register_oot(*args: Any, **kwargs: Any) -> Callable[[type], type]:
        return lambda cls: cls


def _version(name: str) -> str:
    """torch's version for vLLM's own checks only (transformers must see no torch)."""
    try:
        return _real_version(name)
    except importlib.metadata.PackageNotFoundError:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if name in TORCH_VERSIONS and caller.startswith("vllm"):
            return TORCH_VERSIONS[name]
        raise


def _mock_heavy_modules() -> None:
    importlib.metadata.version = _version
    sys.modules.setdefault("vllm._C", Mocked(name="vllm._C"))
    if HAVE_TORCH:
        return
    torch = Mocked(name="torch")
    torch.iinfo = lambda dtype: SimpleNamespace(min=-(2**63), max=2**63 - 1)  # read by v0.6
    sys.modules["torch"] = torch
    sys.modules["torch.nn"] = Mocked(name="torch.nn", Parameter=object, Module=object)
    if not VLLM.startswith(("0.6", "0.11")):
        for name in RUNTIME:
            sys.modules[name] = Mocked(name=name)
    sys.modules["vllm.utils.torch_utils"] = Mocked(name="vllm.utils.torch_utils")
    custom_op = Mocked(name="vllm.model_executor.custom_op", CustomOp=CustomOp)
    sys.modules["vllm.model_executor.custom_op"] = custom_op


def mock_missing(call: Callable[[], Any], tries: int = 400) -> Any:
    """call() until it no longer fails on a missing module outside vLLM, mocking each one."""
    for _ in range(tries):
        try:
            return call()
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] == "vllm":
                raise
            sys.modules[exc.name] = Mocked(name=exc.name)
    raise RuntimeError("too many missing modules")


def _module(name: str) -> Any:
    return mock_missing(lambda: importlib.import_module(name))


def cli_parser() -> tuple[Any, dict[str, Any]]:
    """vLLM's top-level CLI parser with `serve` (and, from v0.11, `bench`), as
    vllm/entrypoints/cli/main.py builds it (v0.6: vllm/scripts.py's `serve` only)."""
    if VLLM.startswith("0.6"):
        parser = _module("vllm.utils").FlexibleArgumentParser(description="vLLM CLI")
        subparsers = parser.add_subparsers(required=True, dest="subparser")
        serve = subparsers.add_parser("serve", usage="vllm serve <model_tag> [options]")
        serve.add_argument("model_tag", type=str)
        make = _module("vllm.entrypoints.openai.cli_args").make_arg_parser
        mock_missing(lambda: make(serve))
        return parser, {}
    # No GPU: the device is not inferred (vLLM's docs build patches the same method).
    _module("vllm.config").DeviceConfig.__post_init__ = lambda self: None
    modules = [
        _module("vllm.entrypoints.cli.serve"),
        _module("vllm.entrypoints.cli.benchmark.main"),
    ]
    lazy = getattr(modules[1], "_import_bench_subcommand_modules", None)  # from v0.3x
    if lazy is not None:
        mock_missing(lazy)
    try:
        parser_class = _module("vllm.utils.argparse_utils").FlexibleArgumentParser
    except ModuleNotFoundError:
        parser_class = _module("vllm.utils").FlexibleArgumentParser
    parser = parser_class(description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    commands = {}
    for module in modules:
        for command in mock_missing(module.cmd_init):
            command.subparser_init(subparsers).set_defaults(dispatch_function=command.cmd)
            commands[command.name] = command
    return parser, commands


def _subparsers(parser: Any) -> dict[str, Any]:
    found = {}
    for action in parser._actions:
        if isinstance(getattr(action, "choices", None), dict):
            for name, sub in action.choices.items():
                found[name] = sub
                found |= {f"{name} {k}": v for k, v in _subparsers(sub).items()}
    return found


def main() -> None:
    mode = sys.argv[1:]
    _mock_heavy_modules()
    sys.argv = ["vllm", "bench", "serve"]  # `vllm bench` builds its subcommands only when asked
    parser, commands = cli_parser()
    if mode[:1] == ["flags"]:
        table: dict[str, object] = {"vllm": VLLM}
        for name, sub in _subparsers(parser).items():
            table[name] = sorted({flag for a in sub._actions for flag in a.option_strings})
        print("\n" + json.dumps(table))
        return
    with open(mode[1], encoding="utf-8") as file:
        lines = json.load(file)
    results = []
    for argv in lines:
        try:
            args = parser.parse_args(argv)
            checked = "parsed"
            if argv[0] == "serve" and args.subparser in commands:
                commands[args.subparser].validate(args)
                checked = "parsed and validated"
            results.append({"argv": argv, "ok": True, "checked": checked})
        except SystemExit as exc:
            results.append({"argv": argv, "ok": False, "exit": str(exc)})
        except Exception as exc:
            results.append({"argv": argv, "ok": False, "error": repr(exc)})
    print("\n" + json.dumps(results))


if __name__ == "__main__":
    main()
