"""The "Deploy on vLLM" section: each configuration's `vllm serve` and benchmark command lines
(simulator/deploy/), the knobs no flag sets, and vllm_commands.sh beside the report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from pagesim.reports.folder_names import COMMANDS_FILE
from pagesim.reports.html import esc
from pagesim.simulator.deploy.commands import Deployment

INTRO = (
    "<p>The command lines that run each configuration on vLLM with the knobs simulated, and "
    "replay the scenario's traffic against it, so the prediction can be checked on real GPUs. "
    "Flags are those of the vLLM release named (read from its <code>vllm/engine/arg_utils.py"
    "</code> and benchmark; pagesim checks every flag against that release's list). Knobs "
    f'vLLM has no flag for are listed, not invented. All of them: <a href="{COMMANDS_FILE}">'
    f"{COMMANDS_FILE}</a>.</p>"
)


def deploy_entries(deployments: Sequence[Deployment]) -> list[dict[str, object]]:
    """What report.json keeps of each deployment (and the section renders)."""
    return [d.to_dict() | {"text": d.text()} for d in deployments]


def write_commands(entries: Sequence[Mapping[str, object]], out: Path) -> None:
    """vllm_commands.sh: every configuration's commands, one block each."""
    if not entries:
        return
    blocks = "\n\n".join(str(entry["text"]) for entry in entries)
    header = "# vLLM command lines of the configurations pagesim simulated (pagesim report)\n"
    (out / COMMANDS_FILE).write_text(header + "\n" + blocks + "\n", encoding="utf-8")


def deploy_html(entries: Sequence[Mapping[str, object]]) -> str:
    """The section's HTML: per configuration its release and commands, then the lists."""
    parts = [INTRO]
    for entry in entries:
        parts.append(
            f"<h3>{esc(entry['system'])}: {esc(entry['release'])}</h3>"
            f"<pre>{esc(entry['text'])}</pre>"
        )
    return "".join(parts)
