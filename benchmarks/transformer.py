"""Notebook 07 side by side: attention (math vs fused kernel) and GPT training (course vs built-ins).

    python benchmarks/transformer.py attention                 # time (and GPU memory) against L
    python benchmarks/transformer.py train --config fast       # a few seconds on a CPU
    python benchmarks/transformer.py train --config shakespeare_char   # the GPU comparison (about 2 x 3-15 min)
    python benchmarks/transformer.py kv                        # generate against generate_cached (KV cache)
    python benchmarks/transformer.py translate                 # English->French: BLEU greedy against beam search

`train` trains the course's GPT (the solution notebook's LayerNorm, FeedForward, GPT and lr_at,
executed from solutions/07_transformer) and the same model built only from PyTorch's modules
(nn.TransformerEncoder of pre-norm GELU layers with a causal mask, tied embeddings), with the
same data, schedule, initialisation and loop (utils.training), one after the other on the same
device. It records wall time to a validation loss of 1.47, the final validation loss, tokens per
second and peak GPU memory, and the ratios. `kv` times the solution's GPT.generate against its
generate_cached for growing numbers of new tokens. `translate` trains the solution's Transformer with
its label_smoothed_loss on the Tatoeba pairs (the notebook's CPU configuration) and scores greedy
decoding and the notebook's beam_translate with sacrebleu on the same held-out sentences.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.machine import save  # noqa: E402

SOLUTION = Path(__file__).resolve().parent.parent / "solutions" / "07_transformer" / "07_transformer.ipynb"
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
                "GPT", "generate_cached", "lr_at", "label_smoothed_loss", "exp_mt_beam_search")


def course_namespace() -> dict:
    """The solution notebook's graded classes and functions (and its given beam search), from its cells."""
    import nbformat

    nb = nbformat.read(SOLUTION, as_version=4)
    namespace = {"torch": torch, "nn": nn, "F": F, "math": math}
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") in COURSE_CELLS:
            exec(compile(cell.source, f"<{SOLUTION.name}>", "exec"), namespace)
    return namespace


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
              progress=False) -> dict:
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
                         compile=compile, progress=progress)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    lr_at = ns["lr_at"]
    start = time.perf_counter()
    history = train(model, optimizer, get_batch, loss_fn, config,
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
        "train_time_s": round(history.train_time, 1),
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


def ratios(course: dict, builtin: dict) -> dict:
    """The course GPT's figures over the built-ins' (below 1: the course GPT takes less)."""
    row = {"model": "course / builtin",
           "train_time": round(course["train_time_s"] / builtin["train_time_s"], 3),
           "tokens_per_s": round(course["tokens_per_s"] / builtin["tokens_per_s"], 3)}
    if course["time_to_val_1.47_s"] and builtin["time_to_val_1.47_s"]:
        row["time_to_val_1.47"] = round(course["time_to_val_1.47_s"] / builtin["time_to_val_1.47_s"], 3)
    if course["peak_gpu_mib"]:
        row["peak_gpu_memory"] = round(course["peak_gpu_mib"] / builtin["peak_gpu_mib"], 3)
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


def translation(args, device) -> None:
    """Train the course Transformer (label smoothing 0.1) and compare greedy and beam-search BLEU."""
    import sacrebleu

    from utils.lexicon import Lexicon, collate_pairs, join_tokens, split_sentence
    from utils.training import TrainConfig, train
    from utils.translation import load_translation_pairs

    ns = course_namespace()
    cfg = dict(d_model=96, num_heads=4, num_layers=2, d_ff=384, dropout=0.1, batch_size=64,
               max_steps=args.max_steps, warmup_steps=50, max_lr=2e-3, min_lr=2e-4, eval_every=100, n_test=args.n_test)
    # the notebook's data preparation (section 9, CPU configuration)
    pairs = [(split_sentence(en), split_sentence(fr)) for en, fr in load_translation_pairs("eng-fra-tatoeba").pairs]
    pairs = [p for p in pairs if 0 < len(p[0]) <= 20 and 0 < len(p[1]) <= 20]
    order = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(0)).tolist()
    pairs = [pairs[i] for i in order]
    n = cfg["n_test"]
    test_pairs, val_pairs, train_pairs = pairs[:n], pairs[n:2 * n], pairs[2 * n:]
    src_lex = Lexicon([en for en, _ in train_pairs], min_count=2)
    tgt_lex = Lexicon([fr for _, fr in train_pairs], min_count=2)

    def batch(split, generator):
        pool = train_pairs if split == "train" else val_pairs
        chosen = torch.randint(len(pool), (cfg["batch_size"],), generator=generator).tolist()
        b = collate_pairs([pool[i] for i in chosen], src_lex, tgt_lex).to(device)
        return b.src, b.tgt_in, b.tgt_out

    def loss_fn(model, b):
        src, tgt_in, tgt_out = b
        logits = model(src, tgt_in, src_pad=src != src_lex.pad_id, tgt_pad=tgt_in != tgt_lex.pad_id)
        return ns["label_smoothed_loss"](logits, tgt_out, tgt_lex.pad_id, args.smoothing)

    torch.manual_seed(0)
    model = ns["Transformer"](len(src_lex), len(tgt_lex), cfg["d_model"], cfg["num_heads"], cfg["num_layers"], cfg["d_ff"],
                              max_len=32, dropout=cfg["dropout"], norm_first=True).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                  lr=cfg["max_lr"], betas=(0.9, 0.99))
    lr_at = ns["lr_at"]
    history = train(model, optimizer, batch, loss_fn,
                    TrainConfig(max_steps=cfg["max_steps"], eval_every=cfg["eval_every"], eval_batches=10, grad_clip=1.0,
                                progress=args.progress),
                    lr_schedule=lambda s: lr_at(s, cfg["warmup_steps"], cfg["max_steps"], cfg["max_lr"], cfg["min_lr"]))
    model.eval()
    references = [[join_tokens(fr) for _, fr in test_pairs]]
    results = {}
    for beam in args.beams:
        start = time.perf_counter()
        outputs = []
        with torch.no_grad():
            for en, _ in test_pairs:
                ids = torch.tensor(src_lex.to_ids(en), device=device)
                outputs.append(tgt_lex.to_tokens(ns["beam_translate"](model, ids, tgt_lex.bos_id, tgt_lex.eos_id,
                                                                      max_len=24, beam_size=beam)))
        bleu = sacrebleu.corpus_bleu([join_tokens(o) for o in outputs], references)
        results[beam] = {"beam_size": beam, "bleu": round(bleu.score, 2), "bleu_detail": str(bleu),
                         "decode_s": round(time.perf_counter() - start, 1)}
        print(results[beam])
    rows = [{"config": {k: v for k, v in cfg.items()}, "label_smoothing": args.smoothing, "train_pairs": len(train_pairs),
             "test_sentences": n, "final_val_loss": round(history.eval_val_loss[-1], 4),
             "train_time_s": round(history.train_time, 1),
             "note": "beam_size 1 is greedy decoding (beam_translate with one beam equals the argmax loop)"}]
    rows += list(results.values())
    print("saved", save("transformer_translation", rows))


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
    tr = sub.add_parser("translate", help="English->French Transformer: BLEU greedy against beam search")
    tr.add_argument("--max-steps", type=int, default=800)
    tr.add_argument("--n-test", type=int, default=500)
    tr.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    tr.add_argument("--smoothing", type=float, default=0.1)
    tr.add_argument("--progress", action="store_true")
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
