"""Notebook 07's GPU paths checked on the CPU, and the command that measures them on a GPU.

Mixed precision: CPU autocast (bfloat16, and float16 as a T4 computes) stands in for CUDA's, whose
rules for these layers are the same: matrix products in 16 bits, norms, embeddings, the residual
stream and the loss in float32. benchmarks/course/gpu_figures.py: everything but the GPU itself.
"""
import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/ is not installed
from benchmarks.course import gpu_figures  # noqa: E402
from benchmarks import machine
from benchmarks.course import nanogpt_side
from benchmarks.course import transformer
from utils import training  # noqa: E402

LOW = {"bf16": torch.bfloat16, "fp16": torch.float16}


@pytest.fixture(scope="module")
def ns():
    """The solution notebook's classes and functions (GPT, Transformer, LayerNorm, ...)."""
    return transformer.course_namespace()


def output_dtypes(model, run) -> dict:
    """{module name: dtype of its output} while run() calls the model (the first output of a tuple)."""
    seen, hooks = {}, []
    for name, module in model.named_modules():
        def hook(m, args, out, name=name):
            seen[name] = (out[0] if isinstance(out, tuple) else out).dtype
        hooks.append(module.register_forward_hook(hook))
    try:
        loss = run()
    finally:
        for h in hooks:
            h.remove()
    return seen, loss


def expected_dtype(module, ns, low):
    """What a layer must compute in under autocast: 16 bits for matrix products, float32 elsewhere."""
    if isinstance(module, (nn.Linear, nn.MultiheadAttention, ns["GPTAttention"], ns["FeedForward"])):
        return low
    if isinstance(module, (ns["LayerNorm"], nn.Embedding, ns["GPTBlock"], ns["EncoderLayer"], ns["DecoderLayer"])):
        return torch.float32  # the residual stream: fp32 + a 16-bit branch stays fp32
    return None  # containers, dropout, the whole model: not checked here


def check_layers(model, dtypes, ns, low) -> int:
    """Assert each layer that ran computed in its expected dtype; how many were checked."""
    checked = 0
    for name, module in model.named_modules():
        want = expected_dtype(module, ns, low)
        if want is not None and name in dtypes:
            assert dtypes[name] == want, f"{name} ({type(module).__name__}) computed in {dtypes[name]}, not {want}"
            checked += 1
    return checked


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_gpt_layers_compute_in_the_autocast_dtype_and_the_loss_in_float32(ns, precision):
    torch.manual_seed(0)
    model = ns["GPT"](20, 16, 32, 4, 2, 64, 0.1)
    x, y = torch.randint(0, 20, (2, 2, 16))

    def run():
        with training.autocast("cpu", precision):
            return F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())  # the notebook's char_loss

    dtypes, loss = output_dtypes(model, run)
    assert check_layers(model, dtypes, ns, LOW[precision]) == 3 + 2 * 9 + 1 and dtypes["lm_head"] == LOW[precision] and dtypes["blocks.1.attn"] == LOW[precision]
    loss.backward()
    assert loss.dtype == torch.float32 and math.isfinite(loss.item())
    assert all(p.dtype == p.grad.dtype == torch.float32 for p in model.parameters())  # weights and gradients stay fp32


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_translation_transformer_layers_under_autocast(ns, precision):
    torch.manual_seed(0)
    model = ns["Transformer"](30, 40, 32, 4, 2, 64, max_len=16, dropout=0.1, norm_first=True)
    src, tgt = torch.randint(1, 30, (3, 9)), torch.randint(1, 40, (3, 8))
    src_pad = torch.arange(9) < torch.tensor([[9], [6], [4]])

    def run():
        with training.autocast("cpu", precision):
            logits = model(src, tgt[:, :-1], src_pad=src_pad)
            return ns["label_smoothed_loss"](logits, tgt[:, 1:], 0, 0.1)

    dtypes, loss = output_dtypes(model, run)
    assert check_layers(model, dtypes, ns, LOW[precision]) > 30
    assert dtypes["decoder_layers.0.cross_attn"] == LOW[precision] and dtypes["dec_norm"] == torch.float32
    assert loss.dtype == torch.float32 and math.isfinite(loss.item())


def test_the_command_parses_its_stages_and_rejects_unknown_ones():
    args = gpu_figures.parse_args([])
    assert args.stages == ["train", "nanogpt", "fp16", "notebook"] and args.config == "shakespeare_char"
    assert args.compile == "both" and args.copy_to is None and args.full_length is False and args.nanogpt is None
    args = gpu_figures.parse_args(["--stages", "fp16", "--fp16-steps", "200", "--copy-to", "/tmp/out"])
    assert args.stages == ["fp16"] and args.fp16_steps == 200 and str(args.copy_to) == "/tmp/out"
    with pytest.raises(SystemExit):
        gpu_figures.parse_args(["--stages", "everything"])


def test_the_command_refuses_without_a_cuda_device(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(machine, "RESULTS_DIR", tmp_path / "results")
    assert gpu_figures.main(["--stages", "train"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_a_tiny_train_stage_writes_the_figures_and_the_machine(monkeypatch, tmp_path, ns):
    """The train stage of the 'fast' configuration, 20 steps on the CPU, on random characters."""
    monkeypatch.setattr(machine, "RESULTS_DIR", tmp_path / "results")
    ids = torch.randint(0, 12, (3000,), generator=torch.Generator().manual_seed(0))
    args = gpu_figures.parse_args(["--config", "fast", "--max-steps", "20", "--eval-batches", "2", "--compile", "off",
                                   "--copy-to", str(tmp_path / "out")])
    path = gpu_figures.stage_train(args, torch.device("cpu"), ns, (12, ids[:2700], ids[2700:]))
    written = json.loads(path.read_text())
    assert path.name == "gpu_train_fast.json" and (tmp_path / "out" / path.name).read_text() == path.read_text()
    assert {"gpu", "gpu_driver", "torch", "cuda"} <= set(written["machine"])
    course, builtin, ratio = written["rows"]
    assert (course["model"], builtin["model"], ratio["model"]) == ("course", "builtin", "course / builtin")
    for row in (course, builtin):
        assert row["steps"] == 20 and row["eval_steps"] == [0, 20] and row["precision"] == "fp32"
        assert row["eval_batches"] == 2 and row["overflow_steps"] == 0 and row["compile"] is False
        assert row["final_val_loss"] == row["eval_val_loss"][-1] and row["tokens_per_s"] > 0
    assert ratio["train_time"] == round(course["train_time_s"] / builtin["train_time_s"], 3)
    assert ratio["compile"] is False


NANOGPT_LOG = """tokens per iteration will be: 16,384
step 0: train loss 4.2874, val loss 4.2823
iter 0: loss 4.2648, time 9000.00ms, mfu -100.00%
iter 1: loss 3.9, time 30.00ms, mfu -100.00%
iter 2: loss 3.5, time 32.00ms, mfu -100.00%
step 3: train loss 2.0, val loss 1.60
iter 3: loss 3.1, time 500.00ms, mfu 20.00%
iter 4: loss 2.9, time 30.00ms, mfu 21.00%
iter 5: loss 2.7, time 31.00ms, mfu 22.00%
step 6: train loss 1.3, val loss 1.46
iter 6: loss 2.5, time 400.00ms, mfu 22.50%
step 9: train loss 1.2, val loss 1.48"""


def test_nanogpt_output_is_read_into_a_row_with_evaluations_left_out_of_training_time():
    lines = [(float(i), line) for i, line in enumerate(NANOGPT_LOG.splitlines())]
    row = nanogpt_side.parse_log(lines, tokens_per_iter=16384, eval_interval=3)
    assert row["eval_steps"] == [0, 3, 6, 9] and row["eval_val_loss"] == [4.2823, 1.60, 1.46, 1.48]
    assert row["best_val_loss"] == 1.46 and row["final_val_loss"] == 1.48 and row["steps"] == 7
    # iterations 0, 3 and 6 follow an evaluation (the first also a start-up): timed as the others' median, 30.5 ms
    assert row["train_time_s"] == pytest.approx(0.0305 * 3 + 0.030 + 0.032 + 0.030 + 0.031, abs=1e-3)
    assert row["time_to_val_1.47_s"] == pytest.approx(0.0305 * 2 + 0.030 + 0.032 + 0.030 + 0.031, abs=1e-3)
    assert row["wall_to_val_1.47_s"] == 9.0 and row["tokens_per_s"] == round(16384 / 0.0305)
    assert row["mfu_percent_median"] == 21.5
    with pytest.raises(ValueError, match="no evaluation"):
        nanogpt_side.parse_log([(0.0, "compiling the model...")], 16384, 250)


def test_nanogpt_runs_its_own_configuration_with_only_the_comparison_changed(tmp_path):
    cmd = nanogpt_side.command(tmp_path, None, "cuda", False, 50)
    assert cmd[1:3] == ["train.py", "config/train_shakespeare_char.py"]
    assert "--log_interval=1" in cmd and "--eval_iters=50" in cmd and "--compile=False" in cmd
    assert not any(a.startswith(("--max_iters", "--dtype", "--batch_size")) for a in cmd)  # its own 5000 steps, bf16
    tiny = nanogpt_side.command(tmp_path, 20, "cpu", False, 2, nanogpt_side.TINY)
    assert "--dtype=float32" in tiny and "--max_iters=20" in tiny and "--n_layer=1" in tiny
    with pytest.raises(FileNotFoundError, match="not a nanoGPT checkout"):
        nanogpt_side.run(tmp_path, tmp_path / "input.txt")


def test_the_nanogpt_stage_asks_for_a_checkout_and_puts_the_course_over_nanogpt(monkeypatch, tmp_path):
    monkeypatch.setattr(machine, "RESULTS_DIR", tmp_path / "results")
    args = gpu_figures.parse_args(["--stages", "nanogpt"])
    with pytest.raises(RuntimeError, match="--nanogpt DIR"):
        gpu_figures.stage_nanogpt(args, torch.device("cpu"), [])
    theirs = {"model": "nanoGPT", "train_time_s": 100.0, "tokens_per_s": 800000, "time_to_val_1.47_s": 90.0}
    monkeypatch.setattr(nanogpt_side, "run", lambda *a, **k: dict(theirs))
    monkeypatch.setattr("utils.data.dataset_path", lambda name: tmp_path / "input.txt")
    course = {"model": "course", "compile": False, "train_time_s": 120.0, "tokens_per_s": 640000,
              "time_to_val_1.47_s": 99.0, "peak_gpu_mib": 900}
    path = gpu_figures.stage_nanogpt(gpu_figures.parse_args(["--nanogpt", str(tmp_path)]), torch.device("cpu"), [course])
    written = json.loads(path.read_text())["rows"]
    assert written[0] == theirs
    assert written[1] == {"model": "course / nanoGPT", "train_time": 1.2, "tokens_per_s": 0.8, "time_to_val_1.47": 1.1}


def test_ratios_of_runs_too_short_to_time_are_none_not_an_error():
    """On a fast machine a 20-step stage can take under a millisecond (issue 40, defect 13)."""
    row = {"train_time_s": 0.0, "tokens_per_s": 0, "time_to_val_1.47_s": None, "peak_gpu_mib": None}
    ratio = transformer.ratios({**row, "train_time_s": 0.0004, "tokens_per_s": 9000}, row)
    assert ratio["train_time"] is None and ratio["tokens_per_s"] is None
    timed = {**row, "train_time_s": 0.0123, "tokens_per_s": 1000}
    assert transformer.ratios(timed, {**timed, "train_time_s": 0.0041})["train_time"] == round(0.0123 / 0.0041, 3)


def test_precisions_are_compared_on_their_validation_curves():
    bf16 = {"precision": "bf16", "eval_steps": [0, 250, 500], "eval_val_loss": [4.2, 2.0, 1.6], "final_val_loss": 1.6,
            "overflow_steps": 0}
    close = {**bf16, "precision": "fp16", "eval_val_loss": [4.2, 2.03, 1.61], "final_val_loss": 1.61, "overflow_steps": 3}
    row = gpu_figures.compare_precisions(bf16, close)
    assert row["max_val_loss_gap"] == pytest.approx(0.03) and row["final_val_loss_gap"] == pytest.approx(0.01)
    assert row["within_tolerance"] and row["overflow_steps"] == 3 and row["model"] == "fp16 against bf16"
    assert not gpu_figures.compare_precisions(bf16, {**close, "final_val_loss": 1.65})["within_tolerance"]
    with pytest.raises(ValueError, match="different steps"):
        gpu_figures.compare_precisions(bf16, {**close, "eval_steps": [0, 250, 400]})


def test_the_notebook_stage_names_the_packages_it_lacks(monkeypatch):
    real = gpu_figures.importlib.util.find_spec
    monkeypatch.setattr(gpu_figures.importlib.util, "find_spec",
                        lambda name: None if name in ("nbclient", "nbgrader") else real(name))
    with pytest.raises(RuntimeError, match="needs nbclient, nbgrader: carry their wheels"):
        gpu_figures.stage_notebook(gpu_figures.parse_args(["--stages", "notebook"]))


def test_the_gpu_driver_is_read_from_nvidia_smi(monkeypatch, tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 580.159.04\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert machine.gpu_driver() == "580.159.04"
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert machine.gpu_driver() is None
