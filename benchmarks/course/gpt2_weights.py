"""Notebook 07's GPT-2 section and its FLOPs by component, measured on the solution's own code (issue 56).

    python benchmarks/course/gpt2_weights.py

1. load_gpt2_weights (the solution's) fills the solution's GPT from transformers' GPT2LMHeadModel with random
   weights, at GPT-2 small's exact shape (124,439,808 parameters, random: the published weights need
   huggingface.co, which this machine cannot reach) and two small shapes: the largest logit difference
   against GPT2LMHeadModel with the exact GELU, and against the published form (the tanh GELU).
2. flops_by_component (the solution's) against torch.utils.flop_counter's count, module by module, of one
   training step of GPT-2 small, medium, large and XL built on the meta device (shapes only).
Writes benchmarks/results/gpt2_weights.json.
"""
from __future__ import annotations

import math
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
from transformers import logging as transformers_logging  # noqa: E402

from benchmarks.course.solution_cells import solution_namespace  # noqa: E402
from benchmarks.machine import save  # noqa: E402

CELLS = ["LayerNorm", "FeedForward", "GPTBlock", "sample_logits", "GPT", "load_gpt2_weights", "flops_by_component"]
GPT2_SIZES = {"small": (12, 768, 12), "medium": (24, 1024, 16), "large": (36, 1280, 20), "XL": (48, 1600, 25)}


def logit_gaps(ns: dict, vocab: int, positions: int, layers: int, width: int, heads: int, tokens: int) -> dict:
    """Largest |logit difference| of the solution's GPT filled from a random GPT2LMHeadModel, against it with the
    exact GELU and with the tanh GELU, on one sequence of `tokens` random ids."""
    torch.manual_seed(0)
    config = dict(vocab_size=vocab, n_positions=positions, n_embd=width, n_layer=layers, n_head=heads,
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    exact = GPT2LMHeadModel(GPT2Config(activation_function="gelu", **config)).eval()
    with torch.no_grad():  # GPT-2's initialisation leaves biases at 0 and norms at 1: move every weight off it
        for p in exact.parameters():
            p.add_(0.02 * torch.randn_like(p))
    tanh = GPT2LMHeadModel(GPT2Config(**config)).eval()
    tanh.load_state_dict(exact.state_dict())
    mine = ns["GPT"](vocab, positions, width, heads, layers, 4 * width).eval()
    start = time.perf_counter()
    ns["load_gpt2_weights"](mine, exact.state_dict())
    load_s = time.perf_counter() - start
    ids = torch.randint(0, vocab, (1, tokens))
    with torch.no_grad():
        ours, against_exact, against_tanh = mine(ids), exact(ids).logits, tanh(ids).logits
    return {"shape": dict(vocab=vocab, positions=positions, layers=layers, width=width, heads=heads),
            "parameters": sum(p.numel() for p in exact.parameters()), "tokens": tokens, "load_s": round(load_s, 3),
            "largest_logit": float(against_exact.abs().max()),
            "gap_exact_gelu": float((ours - against_exact).abs().max()),
            "gap_tanh_gelu": float((ours - against_tanh).abs().max()),
            "same_argmax_as_tanh": float((ours.argmax(-1) == against_tanh.argmax(-1)).float().mean())}


def counted(ns: dict, layers: int, width: int, heads: int, context: int, vocab: int = 50257) -> dict:
    """flops_by_component against FlopCounterMode's per-module count of one training step on the meta device."""
    with torch.device("meta"):
        model = ns["GPT"](vocab, context, width, heads, layers, 4 * width)
        ids = torch.randint(0, vocab, (1, context))
    start = time.perf_counter()
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(ids).logsumexp(-1).mean().backward()
    by_module = {name: sum(c.values()) for name, c in counter.get_flop_counts().items()}
    blocks = [f"GPT.blocks.{i}" for i in range(layers)]
    projections = sum(by_module.get(f"{b}.attn.{p}", 0) for b in blocks for p in ("qkv", "proj"))
    torch_count = {"attention_projections": projections,
                   "attention_products": sum(by_module.get(f"{b}.attn", 0) for b in blocks) - projections,
                   "feed_forward": sum(by_module.get(f"{b}.ff", 0) for b in blocks),
                   "output": by_module.get("GPT.lm_head", 0)}
    torch_count = {k: v // context for k, v in torch_count.items()}
    ours = ns["flops_by_component"](vocab, layers, width, 4 * width, context)
    return {"context": context, "torch": torch_count, "flops_by_component": ours, "equal": ours == torch_count,
            "count_s": round(time.perf_counter() - start, 2)}


def main() -> None:
    transformers_logging.set_verbosity_error()
    ns = solution_namespace("07_transformer", CELLS, namespace={"torch": torch, "nn": nn, "F": F, "math": math, "re": re})
    weights = [logit_gaps(ns, 29, 12, 2, 24, 3, 12), logit_gaps(ns, 101, 64, 4, 64, 4, 64),
               logit_gaps(ns, 50257, 1024, 12, 768, 12, 64)]
    for row in weights:
        print(f"{row['parameters']:>11,} parameters: logits up to {row['largest_logit']:.2f}; against the exact GELU "
              f"{row['gap_exact_gelu']:.1e}, against the tanh GELU {row['gap_tanh_gelu']:.1e} "
              f"(same argmax {row['same_argmax_as_tanh']:.0%}); loaded in {row['load_s']} s")
    flops = {size: counted(ns, layers, width, heads, 1024) for size, (layers, width, heads) in GPT2_SIZES.items()}
    for size, row in flops.items():
        print(f"GPT-2 {size}: flops_by_component equals PyTorch's count module by module: {row['equal']} "
              f"({sum(row['torch'].values()):,} FLOPs a token; counted in {row['count_s']} s)")
    save("gpt2_weights", {"load_gpt2_weights": weights, "flops_by_component_at_1024": flops})


if __name__ == "__main__":
    main()
