"""Notebook 07 side by side: attention (math vs fused kernel) and GPT training (course vs built-ins).

    python benchmarks/course/transformer.py attention                 # time (and GPU memory) against L
    python benchmarks/course/transformer.py train --config fast       # a few seconds on a CPU
    python benchmarks/course/transformer.py train --config shakespeare_char   # the GPU comparison (about 2 x 3-15 min)
    python benchmarks/course/transformer.py kv                        # generate against generate_cached (KV cache)
    python benchmarks/course/transformer.py translate [--variant max_steps=2400]   # English->French BLEU (section 9)

`train` trains the course's GPT (the solution notebook's LayerNorm, FeedForward, GPT and lr_at,
executed from solutions/07_transformer) and the same model built only from PyTorch's modules
(nn.TransformerEncoder of pre-norm GELU layers with a causal mask, tied embeddings), with the
same data, schedule, initialisation and loop (utils.training), one after the other on the same
device. It records wall time to a validation loss of 1.47, the final validation loss, tokens per
second and peak GPU memory, and the ratios. `kv` times the solution's GPT.generate against its
generate_cached for growing numbers of new tokens. `translate` runs the solution notebook's section 9
(its own cells: the Tatoeba split of notebook 04's GRU, the configuration for this device, training
with label_smoothed_loss, greedy decoding) and scores greedy decoding on the validation and held-out
sentences and beam_translate on the held-out ones with sacrebleu.
Results go to results/transformer_*.json.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.machine import save  # noqa: E402
from benchmarks.course.solution_cells import solution_namespace  # noqa: E402

NAME = "07_transformer"
TARGET_LOSS = 1.47

CONFIGS = {
    # nanoGPT's config/train_shakespeare_char.py (it reports val loss 1.4697 after 5000 iterations)
    "shakespeare_char": dict(block_size=256, d_model=384, num_heads=6, num_layers=6, d_ff=1536, dropout=0.2,
                             batch_size=64, max_steps=5000, warmup_steps=100, max_lr=1e-3, min_lr=1e-4,
                             eval_every=250, eval_batches=200),
    "laptop": dict(block_size=64, d_model=96, num_heads=4, num_layers=3, d_ff=384, dropout=0.1,
                   batch_size=32, max_steps=1000, warmup_steps=50, max_lr=2e-3, min_lr=2e-4,
                   eval_every=100, eval_batches=10),
    "fast": dict(block_size=32, d_model=32, num_heads=2, num_layers=1, d_ff=64, dropout=0.0,
                 batch_size=16, max_steps=40, warmup_steps=5, max_lr=3e-3, min_lr=3e-4,
                 eval_every=20, eval_batches=2),
}


COURSE_CELLS = ("LayerNorm", "FeedForward", "EncoderLayer", "DecoderLayer", "Transformer", "GPTBlock", "sample_logits",
                "GPT", "generate_cached", "lr_at", "train_step", "label_smoothed_loss", "exp_mt_beam_search")


def course_namespace() -> dict:
    """The solution notebook's graded classes and functions (and its given beam search), from its cells."""
    return solution_namespace(NAME, list(COURSE_CELLS), namespace={"torch": torch, "nn": nn, "F": F, "math": math})


class BuiltinGPT(nn.Module):
    """The same GPT from PyTorch's own modules: nn.TransformerEncoder with a causal mask."""

    def __init__(self, vocab_size, block_size, d_model, num_heads, num_layers, d_ff, dropout=0.0):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(block_size, d_model)
        self.drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(d_model, num_heads, d_ff, dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, norm=nn.LayerNorm(d_model), enable_nested_tensor=False)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.drop(self.tok_emb(idx) + self.pos_emb(torch.arange(T, device=idx.device)))
        mask = nn.Transformer.generate_square_subsequent_mask(T, device=idx.device)
        return self.lm_head(self.encoder(x, mask=mask, is_causal=True))


def attention(args, device) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"math": [SDPBackend.MATH], "fused": [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]}
    rows = []
    for L in args.lengths:
        q, k, v = (torch.randn(args.batch, args.heads, L, 64, device=device) for _ in range(3))
        row = {"L": L, "batch": args.batch, "heads": args.heads, "head_dim": 64, "causal": False}
        for name, chosen in backends.items():
            def call():
                with sdpa_kernel(chosen):
                    return F.scaled_dot_product_attention(q, k, v)  # the call notebook 07 section 6 times
            call()
            times = []
            for _ in range(args.repeat):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated() if device.type == "cuda" else 0
                start = time.perf_counter()
                call()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            row[f"{name}_ms"] = round(1000 * sorted(times)[len(times) // 2], 3)
            if device.type == "cuda":
                row[f"{name}_peak_mib"] = round((torch.cuda.max_memory_allocated() - before) / 2**20, 1)
        row["math_scores_mib_computed"] = round(2 * args.batch * args.heads * L * L * 4 / 2**20, 1)
        rows.append(row)
        print(row)
    print("saved", save("transformer_attention", rows))


def char_data() -> tuple[int, torch.Tensor, torch.Tensor]:
    """Tiny Shakespeare as characters: (vocabulary size, train ids (N,), validation ids (M,))."""
    from utils.data import load_text
    from utils.text import CharCodec, split_ids

    text = load_text("tinyshakespeare")
    codec = CharCodec.from_text(text)
    train_ids, val_ids = split_ids(codec.encode(text), 0.1)
    return len(codec), train_ids, val_ids


def build_model(name: str, ns: dict, cfg: dict, vocab_size: int, device) -> nn.Module:
    """The course's GPT ("course") or BuiltinGPT ("builtin") of configuration cfg, seeded alike."""
    sizes = (vocab_size, cfg["block_size"], cfg["d_model"], cfg["num_heads"], cfg["num_layers"], cfg["d_ff"], cfg["dropout"])
    torch.manual_seed(0)
    return (ns["GPT"](*sizes) if name == "course" else BuiltinGPT(*sizes)).to(device)


def train_one(name, cfg, ns, device, data, max_steps=None, compile=False, precision="auto", eval_batches=None,
              progress=False, stop_at=None) -> dict:
    """Train one model of cfg on data = char_data(); its figures (and its validation curve) as a row."""
    from utils.text import random_windows
    from utils.training import TrainConfig, device_precision, train

    vocab_size, train_ids, val_ids = data
    model = build_model(name, ns, cfg, vocab_size, device)

    def get_batch(split, generator):
        ids = train_ids if split == "train" else val_ids
        return random_windows(ids, cfg["batch_size"], cfg["block_size"], generator=generator, device=device)

    def loss_fn(m, batch):
        x, y = batch
        return F.cross_entropy(m(x).flatten(0, 1).float(), y.flatten())

    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                  lr=cfg["max_lr"], betas=(0.9, 0.99), fused=device.type == "cuda")
    config = TrainConfig(max_steps=max_steps or cfg["max_steps"], eval_every=cfg["eval_every"],
                         eval_batches=eval_batches or cfg["eval_batches"], grad_clip=1.0, precision=precision,
                         compile=compile, progress=progress, stop_at_val_loss=stop_at)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    lr_at = ns["lr_at"]
    start = time.perf_counter()
    history = train(model, optimizer, get_batch, loss_fn, config, step_fn=ns["train_step"],
                    lr_schedule=lambda s: lr_at(s, cfg["warmup_steps"], config.max_steps, cfg["max_lr"], cfg["min_lr"]))
    wall = time.perf_counter() - start
    reached = [t for t, loss in zip(history.eval_time, history.eval_val_loss) if loss <= TARGET_LOSS]
    row = {
        "model": name,
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": config.max_steps,
        "precision": device_precision(device, precision),
        "compile": compile,
        "eval_batches": config.eval_batches,
        "final_val_loss": round(history.eval_val_loss[-1], 4),
        "best_val_loss": round(history.best_val_loss, 4),
        "train_time_s": round(history.train_time, 4),  # kept fine: ratios divide by it
        "wall_time_s_with_eval": round(wall, 1),
        "time_to_val_1.47_s": round(reached[0], 1) if reached else None,
        "tokens_per_s": round(history.tokens_per_s),
        "peak_gpu_mib": round(torch.cuda.max_memory_allocated() / 2**20) if device.type == "cuda" else None,
        "overflow_steps": sum(not math.isfinite(g) for g in history.grad_norm),  # fp16: steps the scaler skipped
        "eval_steps": history.eval_steps,
        "eval_val_loss": [round(v, 4) for v in history.eval_val_loss],
    }
    print({k: v for k, v in row.items() if not k.startswith("eval_")})
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def _ratio(numerator, denominator) -> float | None:
    """numerator / denominator to 3 decimals; None when either is missing or the denominator is 0
    (a run too short to time on a fast machine has no ratio, rather than a ZeroDivisionError)."""
    if not numerator or not denominator:
        return None
    return round(numerator / denominator, 3)


def ratios(course: dict, other: dict, name: str = "course / builtin") -> dict:
    """The course GPT's figures over another model's row (below 1: the course GPT takes less); a figure
    either row lacks is left out."""
    row = {"model": name, "train_time": _ratio(course["train_time_s"], other["train_time_s"]),
           "tokens_per_s": _ratio(course["tokens_per_s"], other["tokens_per_s"])}
    for key, ratio_key in (("time_to_val_1.47_s", "time_to_val_1.47"), ("peak_gpu_mib", "peak_gpu_memory")):
        if course.get(key) and other.get(key):
            row[ratio_key] = _ratio(course[key], other[key])
    return row


def training(args, device) -> None:
    cfg = CONFIGS[args.config]
    ns, data = course_namespace(), char_data()
    rows = [train_one(name, cfg, ns, device, data, args.max_steps, args.compile, args.precision, args.eval_batches,
                      args.progress) for name in args.models]
    if len(rows) == 2:
        rows.append(ratios(*rows))
        print(rows[-1])
    print("saved", save(f"transformer_train_{args.config}", rows))


def kv_cache(args, device) -> None:
    """Wall time of GPT.generate (whole context every step) against generate_cached, same seed."""
    ns = course_namespace()
    torch.manual_seed(0)
    model = ns["GPT"](65, max(args.new_tokens) + 1, args.d_model, 4, args.layers, 4 * args.d_model).to(device).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long, device=device)
    rows = []
    for n in args.new_tokens:
        row = {"new_tokens": n, "d_model": args.d_model, "layers": args.layers, "batch": 1}
        outputs = {}
        for name, fn in [("no_cache", lambda: model.generate(prompt, n)),
                         ("cache", lambda: ns["generate_cached"](model, prompt, n))]:
            times = []
            for _ in range(args.repeat):
                torch.manual_seed(1)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                outputs[name] = fn()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            row[f"{name}_s"] = round(sorted(times)[len(times) // 2], 3)
        row["speedup"] = round(row["no_cache_s"] / row["cache_s"], 2)
        row["same_tokens"] = bool(torch.equal(outputs["no_cache"], outputs["cache"]))
        rows.append(row)
        print(row)
    print("saved", save("transformer_kv_cache", rows))


MT_CELLS = ["setup", "LayerNorm", "FeedForward", "EncoderLayer", "DecoderLayer", "Transformer", "lr_at",
            "adamw_param_groups", "train_step", "checkpoints", "count_parameters", "c8-settings", "exp_char_data",
            "exp_char_train", "exp_mt_data", "label_smoothed_loss"]
MT_RUN = ["exp_mt_train", "exp_mt_bleu", "exp_mt_beam_search"]


def parse_variant(text: str) -> dict:
    """'max_steps=1000,dropout=0.3' -> {'max_steps': 1000, 'dropout': 0.3} (ints stay ints)."""
    variant = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        variant[key] = int(value) if value.lstrip("-").isdigit() else float(value)
    return variant


def translation(args, device) -> None:
    """Section 9 of the solution notebook, its own cells: the Tatoeba split of utils.translation.split_pairs
    (notebook 04's), the configuration for this device, training, greedy BLEU on the held-out sentences;
    then validation BLEU and beam search on every held-out sentence. Each --variant changes the
    configuration (mt_cfg) and trains again from the same seed."""
    import sacrebleu

    torch.set_num_threads(args.threads)
    ns = solution_namespace(NAME, MT_CELLS, stop_at={"exp_char_train": "torch.manual_seed(0)\nchar_gpt"})
    ns.update(USE_MY_PARTS=False, checkpoints=False)   # section 7.5 off; no checkpoints to resume from
    base, join = dict(ns["mt_cfg"]), ns["join_tokens"]

    def bleu(outputs, pairs):
        return sacrebleu.corpus_bleu([join(o) for o in outputs], [[join(fr) for _, fr in pairs]])

    rows = []
    for variant in map(parse_variant, args.variant or [""]):
        if set(variant) - set(base) or "n_test" in variant:
            raise SystemExit(f"--variant may change {sorted(set(base) - {'n_test'})}, not {sorted(set(variant) - set(base))}")
        ns["mt_cfg"] = {**base, **variant}
        solution_namespace(NAME, MT_RUN, namespace=ns)
        translate, test_pairs, val_pairs = ns["translate"], ns["test_pairs"], ns["val_pairs"]
        src_lex, tgt_lex, model = ns["src_lex"], ns["tgt_lex"], ns["mt_model"]
        valid = [h for start in range(0, len(val_pairs), 200) for h in translate(model, [en for en, _ in val_pairs[start:start + 200]])]
        history = ns["mt_history"]
        row = {"device": str(device), "threads": args.threads, "config": ns["mt_cfg"], "variant": variant,
               "parameters": sum(p.numel() for p in model.parameters()), "train_pairs": len(ns["train_pairs"]),
               "valid_sentences": len(val_pairs), "test_sentences": len(test_pairs),
               "lexicons": [len(src_lex), len(tgt_lex)], "final_val_loss": round(history.eval_val_loss[-1], 4),
               "best_val_loss": round(history.best_val_loss, 4), "train_time_s": round(history.train_time, 1),
               "valid_bleu_greedy": round(bleu(valid, val_pairs).score, 2),
               "test_bleu_greedy": round(ns["bleu"].score, 2), "test_bleu_greedy_detail": str(ns["bleu"])}
        for beam in args.beams:
            start = time.perf_counter()   # beam_translate runs under torch.no_grad
            outputs = [tgt_lex.to_tokens(ns["beam_translate"](model, torch.tensor(src_lex.to_ids(en), device=device),
                                                              tgt_lex.bos_id, tgt_lex.eos_id, beam_size=beam))
                       for en, _ in test_pairs]
            row[f"test_bleu_beam{beam}"] = round(bleu(outputs, test_pairs).score, 2)
            row[f"beam{beam}_decode_s"] = round(time.perf_counter() - start, 1)
        rows.append(row)
        print({k: v for k, v in row.items() if k != "config"}, flush=True)
        print("saved", save(args.out or f"transformer_translation_{device.type}", rows), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    a = sub.add_parser("attention", help="math against fused attention as L grows")
    a.add_argument("--lengths", type=int, nargs="+", default=None)
    a.add_argument("--batch", type=int, default=1)
    a.add_argument("--heads", type=int, default=8)
    a.add_argument("--repeat", type=int, default=5)
    t = sub.add_parser("train", help="course GPT against the built-ins GPT")
    t.add_argument("--config", choices=sorted(CONFIGS), default="fast")
    t.add_argument("--models", nargs="+", choices=["course", "builtin"], default=["course", "builtin"])
    t.add_argument("--max-steps", type=int, default=None, help="override the configuration's step count")
    t.add_argument("--compile", action="store_true", help="torch.compile both models")
    t.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default="auto",
                   help="auto: utils.training.device_precision; fp16 forces a T4's path (CUDA only)")
    t.add_argument("--eval-batches", type=int, default=None, help="override the configuration's evaluation batches")
    t.add_argument("--progress", action="store_true", help="show the progress bar")
    k = sub.add_parser("kv", help="generate against generate_cached")
    k.add_argument("--new-tokens", type=int, nargs="+", default=[64, 128, 256, 512])
    k.add_argument("--d-model", type=int, default=128)
    k.add_argument("--layers", type=int, default=4)
    k.add_argument("--repeat", type=int, default=3)
    tr = sub.add_parser("translate", help="notebook 07 section 9: the English->French Transformer's BLEU")
    tr.add_argument("--variant", action="append", help="configuration changes, e.g. max_steps=1000,dropout=0.3 (repeatable)")
    tr.add_argument("--beams", type=int, nargs="*", default=[4], help="beam sizes to score on the held-out sentences")
    tr.add_argument("--threads", type=int, default=1, help="torch threads (04's GRU benchmark uses 1)")
    tr.add_argument("--out", default=None, help="results name (default transformer_translation_<device type>)")
    args = parser.parse_args()
    from utils.runtime import get_device, setup

    setup(seed=0, verbose=False)
    device = get_device()
    if args.what == "attention":
        if args.lengths is None:
            args.lengths = [256, 512, 1024, 2048, 4096, 8192] if device.type == "cuda" else [128, 256, 512, 1024, 2048]
        attention(args, device)
    elif args.what == "kv":
        kv_cache(args, device)
    elif args.what == "translate":
        translation(args, device)
    else:
        training(args, device)


if __name__ == "__main__":
    main()
