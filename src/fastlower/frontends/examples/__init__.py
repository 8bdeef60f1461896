"""Example models used by fastlower's differential tests and benchmarks."""

from fastlower.frontends.examples.llama import (  # noqa: F401
    LlamaConfig, TinyLlama, edge_llama, export_llama,
)
