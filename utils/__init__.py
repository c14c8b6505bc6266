"""Shared helpers for the course notebooks.

Import once at the top of a notebook::

    import utils
    device = utils.setup(seed=0)

Submodules, by concern:
  utils.runtime   setup(), seeding, device choice, Colab detection, fast mode
  utils.data      the dataset registry and loaders (download, checksum, offline mirror)
  utils.text      character-level data for language models (codec, random windows)
  utils.translation  sentence pairs for translation (Tatoeba loader that skips bad lines)
  utils.lexicon   tokens, a vocabulary and padded batches for translation models
  utils.synthetic long-range toy tasks (adding problem, copy memory) and a small trainer
  utils.checks    self-check helpers that turn a wrong answer into an actionable message
  utils.plotting  small matplotlib helpers (curves, heatmaps, 2-D embeddings)
  utils.widgets   ipywidgets explorers with a static fallback
  utils.colab     what the setup cell does in Google Colab (missing packages, widgets, GPU)
  utils.submission  check_submission(): is the saved notebook ready to hand in?
  utils.attention_plots  attention weights as bars and heatmaps, a head/query explorer
  utils.training  the shared training loop (progress bar, evaluation, clipping, mixed precision, checkpoints)
"""
from utils.attention_plots import attention_explorer
from utils.data import DatasetUnavailable, dataset_path, load_text
from utils.runtime import fast_mode, get_device, in_colab, seed_everything, setup
from utils.submission import check_submission
from utils.synthetic import adding_problem, copy_memory
from utils.training import History, TrainConfig, plot_history, train

__all__ = [
    "adding_problem",
    "attention_explorer",
    "check_submission",
    "copy_memory",
    "dataset_path",
    "DatasetUnavailable",
    "fast_mode",
    "get_device",
    "History",
    "in_colab",
    "load_text",
    "plot_history",
    "seed_everything",
    "setup",
    "train",
    "TrainConfig",
]
