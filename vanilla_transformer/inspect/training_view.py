"""The explorer's training view: how a run learned, replayed from the recordings its `TrainingWatch` callback made
(training/watch.py): a step slider over the recorded steps; the encoder-decoder attention of the chosen sentence over
its reference going from uniform to aligned; the model's greedy translation at that step; the loss curve with the
step marked; each layer's gradient norm.

One renderer, `explore_assets/training.js`, draws it in the static page (`render_training_page`) and inside the live
app (`app.build_training_app`, which reads the run folder again on every load, so it follows a run in progress). The
page embeds the recordings as they are stored (the weights as base64 uint16), so that 20 steps of three sentences of a
Multi30k-sized model stay well under 2 MB, and decodes each once in the browser.
"""

import os

from vanilla_transformer.inspect.page import assemble_page, script_json
from vanilla_transformer.training.watch import read_watch

TRAINING_SCRIPTS = ("training.js",)


def training_data(run_dir: str) -> dict:
    """The run's recordings (`training.watch.read_watch`) with the run's name: what the training view draws. A
    ValueError (one line) when there is nothing recorded yet."""
    data = read_watch(run_dir)
    if not data["recordings"] or not data["sentences"]:
        raise ValueError(f"{run_dir} has no recorded step yet: the first is made when training starts")
    name = os.path.basename(os.path.normpath(os.path.abspath(run_dir)))
    return {"run": name, **data}


def render_training_page(data: dict, title: str | None = None) -> str:
    """The self-contained page (HTML with inline CSS, JS and data; nothing fetched) of `training_data`."""
    return assemble_page(script_json(data), TRAINING_SCRIPTS, title or f"Training, watched: {data.get('run', '')}")
