"""A stand-in for Colab's `google.colab`, for tests only.

Put tests/colab_standin on PYTHONPATH and a kernel looks like a Colab runtime to the
course's code: the setup cell's bootstrap takes its Colab branch, `utils.colab` turns
on the "custom widget manager" and `utils.check_submission()` reads the notebook
through `_message.blocking_request("get_ipynb")`, all offline. Calls are appended to
the file named by COLAB_STANDIN_LOG; the notebook handed over is the file named by
COLAB_STANDIN_NOTEBOOK.
"""
import os


def _log(event: str) -> None:
    path = os.environ.get("COLAB_STANDIN_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(event + "\n")


from google.colab import _message, output  # noqa: E402,F401
