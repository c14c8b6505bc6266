"""Shared helpers for the course notebooks.

The locked setup cell of every notebook starts the session::

    import utils
    device = utils.setup(seed=0)        # or: from utils.runtime import setup

Every other name is imported from its submodule, one style in every notebook::

    from utils.checks import check_close
    from utils.data import load_text

Submodules, by concern (each lists its public names in `__all__`):
  utils.runtime     setup(), seeding, device choice, Colab detection (in_colab), fast mode
  utils.data        the dataset registry and loaders (download, checksum, offline mirror)
  utils.text        character-level data for language models (codec, random windows)
  utils.translation sentence pairs for translation (Tatoeba loader that skips bad lines)
  utils.lexicon     tokens, a vocabulary (notebook 01's special tokens) and padded batches
  utils.purple_cats the purple-cats grammar: English-French pairs with their alignments
  utils.synthetic   long-range toy tasks (adding problem, copy memory) and a small trainer
  utils.training    the shared training loop (progress bar, evaluation, clipping, mixed precision, checkpoints)
  utils.checks      self-check helpers that turn a wrong answer into an actionable message
  utils.plotting    small matplotlib helpers (curves, heatmaps, 2-D embeddings)
  utils.attention_plots  attention weights as bars and heatmaps, a head/query explorer
  utils.widgets     ipywidgets explorers with a static fallback
  utils.colab       what the setup cell does in Google Colab (missing packages, widgets, GPU)
  utils.submission  check_submission(): is the saved notebook ready to hand in?

`import utils` loads only utils.runtime (no torch until setup() runs), so the Colab
bootstrap can import utils.colab before the packages Colab lacks are installed.
"""
from utils.runtime import setup

__all__ = ["setup"]
