"""The Hugging Face repository of each catalog model: what `vllm serve` is given to load it.

Repository names as their makers publish them on huggingface.co (the base checkpoints, whose
config.json the catalog's shapes come from; simulator/core/model_presets.py). OPT-175B was
never published there (Meta released its weights on request): it has no repository, and its
command names a local folder to fill in. A model read from a config.json is named by its
`_name_or_path` (usually the repository) or, failing that, its folder.
"""

from __future__ import annotations

from pagesim.simulator.core.catalog import MODELS, ModelSpec

HF_REPOS: dict[str, str] = {
    "llama-2-7b": "meta-llama/Llama-2-7b-hf",
    "llama-2-13b": "meta-llama/Llama-2-13b-hf",
    "llama-2-70b": "meta-llama/Llama-2-70b-hf",
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B",
    "mistral-7b-v0.1": "mistralai/Mistral-7B-v0.1",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B",
    "qwen2.5-72b": "Qwen/Qwen2.5-72B",
    "opt-13b": "facebook/opt-13b",
    "opt-66b": "facebook/opt-66b",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B",
    "llama-3.1-405b": "meta-llama/Llama-3.1-405B",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "gpt-oss-20b": "openai/gpt-oss-20b",
    "gpt-oss-120b": "openai/gpt-oss-120b",
    "gemma-3-27b": "google/gemma-3-27b-pt",
    "qwen3-next-80b-a3b": "Qwen/Qwen3-Next-80B-A3B-Instruct",
}
UNPUBLISHED = {"opt-175b": "/path/to/opt-175b"}  # weights by request only: a folder to fill in


def model_reference(model: ModelSpec) -> tuple[str, str | None]:
    """(what `vllm serve` loads, a note for the user or None)."""
    if model.name in HF_REPOS:
        return HF_REPOS[model.name], None
    if model.name in UNPUBLISHED:
        return UNPUBLISHED[model.name], (
            f"{model.name} has no public Hugging Face repository: replace the path with the "
            "folder of its weights"
        )
    return model.name, (
        f"model {model.name!r} came from a config.json: give vLLM its repository or the folder "
        "of its weights"
    )


def native_weight_dtype(model: ModelSpec) -> str | None:
    """The weight dtype of the model's published checkpoint (None: not a catalog model)."""
    preset = MODELS.get(model.name)
    return None if preset is None else str(preset.weight_dtype)
