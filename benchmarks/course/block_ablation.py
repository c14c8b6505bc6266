"""The 2017 GPT block against today's (RMSNorm, SwiGLU, rotary positions) on Tiny Shakespeare.

    python benchmarks/course/block_ablation.py [--steps N] [--seeds 0 1 ...]

Notebook 07's section 10.4 experiment with a larger budget: the solution's own GPT, blocks and
training loop (its cells are executed here: the graded parts, section 8's data and helpers,
and the ablation cell's model builder `char_model`), at section 8's size for the device (the GPU
size on CUDA, the laptop size on a CPU). Both blocks get the same steps, learning-rate schedule,
batches, seed and validation batches; each seed (the weights and the training batches) is a pair of runs. Reports validation bits per
character (nats / ln 2) at every evaluation, trainable parameters, tokens per second and wall time,
and writes benchmarks/results/block_ablation.json (block_ablation_cuda.json on a GPU).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.machine import save  # noqa: E402
from benchmarks.course.solution_cells import solution_namespace  # noqa: E402

NAME = "07_transformer"
CELLS = ["setup", "LayerNorm", "FeedForward", "GPTBlock", "sample_logits", "GPT", "lr_at", "adamw_param_groups",
         "train_step", "RMSNorm", "SwiGLU", "apply_rope", "c8-settings", "exp_char_data", "exp_char_train",
         "exp_modern_blocks"]
STOP_AT = {"exp_char_train": "torch.manual_seed(0)\nchar_gpt", "exp_modern_blocks": "# The same budget for both"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=0, help="default: section 8's max_steps for the device")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    ns = solution_namespace(NAME, CELLS, STOP_AT)
    cfg = dict(ns["char_cfg"])
    cfg["max_steps"] = args.steps or cfg["max_steps"]
    cfg["eval_every"] = max(1, cfg["max_steps"] // 10)
    device = ns["device"]
    print(f"{cfg['max_steps']} steps a run on {device}; size: {cfg}")
    rows = []
    for seed in args.seeds:
        for block in ("2017", "today"):
            model = ns["char_model"](block, cfg, seed)
            config = ns["TrainConfig"](max_steps=cfg["max_steps"], eval_every=cfg["eval_every"],
                                       eval_batches=cfg["eval_batches"], grad_clip=1.0, seed=seed, progress=False)
            history = ns["train"](model, ns["adamw"](model, cfg["max_lr"]), ns["char_batch"], ns["char_loss"], config,
                                  step_fn=ns["train_step"], lr_schedule=lambda s: ns["lr_at"](s, cfg["warmup_steps"], cfg["max_steps"],
                                                                    cfg["max_lr"], cfg["min_lr"]))
            bits = [loss / math.log(2) for loss in history.eval_val_loss]
            trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            rows.append({"block": block, "seed": seed, "steps": cfg["max_steps"], "device": str(device),
                         "size": {k: cfg[k] for k in ("block_size", "d_model", "num_heads", "num_layers", "d_ff",
                                                      "dropout", "batch_size")},
                         "trainable_parameters": trainable, "eval_steps": history.eval_steps,
                         "val_bits_per_char": [round(b, 4) for b in bits], "final_val_bits_per_char": round(bits[-1], 4),
                         "tokens_per_s": round(history.tokens_per_s), "train_time_s": round(history.train_time, 1)})
            print(f"seed {seed}, {block:>5} block: {trainable / 1e6:.3f} M trainable, validation {bits[-1]:.4f} bits/char, "
                  f"{history.tokens_per_s:,.0f} tokens/s, {history.train_time:.0f} s")
    print(f"saved {save('block_ablation' if device.type == 'cpu' else f'block_ablation_{device.type}', rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
