"""Run as a script (``python tests/cli/exporter.py FOLDER CASE...``): exports each case,
saves it as ``FOLDER/CASE.pt2`` and lowers the in-memory program with fastlower
(``to_edge_transform_and_lower`` + XNNPACK) into ``FOLDER/CASE.ref.pte``.

The types below live in this script's ``__main__``, as in a user's export
script: a new process cannot import them. Hugging Face models are built from
small configs (no download) and return a ``ModelOutput``.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
from pathlib import Path

import torch
from torch.utils import _pytree as pytree

Pair = collections.namedtuple("Pair", ["a", "b"])
pytree._register_namedtuple(Pair, serialized_type_name="__main__.Pair")


@dataclasses.dataclass
class Result:
    hidden: torch.Tensor
    scores: torch.Tensor
    extra: object = None  # None at export: saved among the context's absent fields


torch.export.register_dataclass(Result, serialized_type_name="__main__.Result")


class NamedTupleInput(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, pair: Pair, scale: torch.Tensor):
        return self.proj(pair.a) * scale + pair.b


class DataclassOutput(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        hidden = torch.relu(self.l1(x))
        return Result(hidden=hidden, scores=self.l2(hidden).softmax(-1))


class NestedDictOutput(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.l1(x)
        return {"main": y, "aux": {"relu": torch.relu(y), "parts": [y.sum(-1), y.cumsum(-1)]}}


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=96, n_positions=32,
                        use_cache=False, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config), (torch.randint(0, 96, (1, 8)),)


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=96,
                         max_position_embeddings=32, use_cache=False, bos_token_id=0,
                         eos_token_id=0, pad_token_id=0)
    return LlamaForCausalLM(config), (torch.randint(0, 96, (1, 8)),)


def boxed():
    from tests.cli.box_types import BoxOutput

    return BoxOutput(), (torch.randn(2, 8),)


CASES = {
    "gpt2": gpt2,
    "llama": llama,
    "namedtuple_input": lambda: (NamedTupleInput(), (Pair(torch.randn(2, 8), torch.randn(2, 8)),
                                                     torch.randn(2, 8))),
    "dataclass_output": lambda: (DataclassOutput(), (torch.randn(2, 8),)),
    "nested_dict_output": lambda: (NestedDictOutput(), (torch.randn(2, 8),)),
    "boxed": boxed,
}


def export_and_lower(folder: Path, case: str) -> None:
    import fastlower.patch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    torch.manual_seed(0)
    model, args = CASES[case]()
    program = torch.export.export(model.eval(), args, strict=False)
    torch.export.save(program, folder / f"{case}.pt2")
    with fastlower.patch.installed():
        edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    (folder / f"{case}.ref.pte").write_bytes(bytes(edge.to_executorch().buffer))


if __name__ == "__main__":
    out = Path(sys.argv[1])
    for name in sys.argv[2:]:
        export_and_lower(out, name)
