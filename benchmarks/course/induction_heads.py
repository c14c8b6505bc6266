"""When notebook 05's two-layer attention-only model learns its induction heads, seed by seed.

    python benchmarks/course/induction_heads.py [--steps N] [--seeds 0 1 ...]

Runs the solution's own parts (MultiHeadAttention, positional encoding, ablate_heads, AttentionOnlyTransformer,
head_scores, repeated_batch) and section 8's losses (the experiment cell up to its training), then trains the
notebook's model (2 layers of 2 heads, d_model 32, Adam 1e-2, batches of 64) for each seed with one thread. Reports
the first evaluation step at which the loss on the copy's tokens is below 2 nats (the phase change), the final
losses, the heads' scores, the copy's loss with the best previous-token head removed, and the one-thread CPU
seconds; writes benchmarks/results/induction_heads.json.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.machine import save  # noqa: E402
from benchmarks.course.solution_cells import solution_namespace  # noqa: E402

NAME = "05_self_attention"
CELLS = ["setup", "scaled_dot_product_attention", "heads", "MultiHeadAttention", "sinusoidal_positional_encoding",
         "ablate_heads", "AttentionOnlyTransformer", "head_scores", "repeated_batch", "exp_induction"]
STOP_AT = {"exp_induction": "test_rep, test_predictable ="}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    ns = solution_namespace(NAME, CELLS, STOP_AT)
    torch, F = ns["torch"], ns["F"]
    torch.set_num_threads(1)
    batch = lambda n, gen: ns["repeated_batch"](n, ns["V_rep"], ns["L_rep"], 8, 16, gen)
    test_ids, predictable = batch(512, torch.Generator().manual_seed(1))
    rows = []
    for seed in args.seeds:
        torch.manual_seed(seed)
        model = ns["AttentionOnlyTransformer"](ns["V_rep"], ns["L_rep"], 32, 2)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        gen = torch.Generator().manual_seed(seed)
        turned, start = None, time.process_time()
        for step in range(args.steps + 1):
            if step % 20 == 0 and turned is None:
                with torch.no_grad():
                    if ns["split_losses"](model, test_ids, predictable)[0] < 2.0:
                        turned = step
            ids = batch(64, gen)[0]
            loss = F.cross_entropy(model(ids)[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        seconds = time.process_time() - start
        with torch.no_grad():
            copy, other = ns["split_losses"](model, test_ids, predictable)
            model(test_ids)
            scores = [ns["head_scores"](layer.attn_weights, test_ids) for layer in model.layers]
            previous_head = int(scores[0][0].argmax())
            ablated = ns["split_losses"](model, test_ids, predictable, [(0, previous_head)])
        row = dict(seed=seed, steps=args.steps, phase_change_step=turned, copy_loss=round(copy, 3),
                   other_loss=round(other, 3), previous_scores=[round(float(s), 3) for s in scores[0][0]],
                   induction_scores_layer1=[round(float(s), 3) for s in scores[1][1]],
                   copy_loss_previous_head_removed=round(ablated[0], 3), cpu_seconds_one_thread=round(seconds, 1))
        print(row, flush=True)
        rows.append(row)
    print("wrote", save("induction_heads", rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
