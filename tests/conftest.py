import os
import pathlib
import sys

# The test models are tiny: extra threads only add synchronisation, which costs a lot on a busy machine.
# Set before torch is imported, and inherited by the subprocesses some tests start.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # tests run against this checkout, installed or not
    sys.path.insert(0, str(REPO_ROOT))

import vanilla_transformer  # noqa: E402, F401  (registers the Auto classes)

torch.set_num_threads(1)

# Plain helpers (tiny_config, tiny_model, random_batch, REPO_ROOT, SHARED_DATA) are in helpers.py; fixtures here.


@pytest.fixture(params=[0, 1, 2], ids=lambda s: f"seed{s}")
def seed(request):
    return request.param


@pytest.fixture(scope="session")
def served_model_dir(tmp_path_factory):
    """The `vanilla-transformer serve` tests' tiny translator (tests/serve_fixtures.py), saved once per session."""
    from serve_fixtures import save_served_model

    return save_served_model(tmp_path_factory.mktemp("served") / "model")


@pytest.fixture(scope="session")
def served_ct2_dir(served_model_dir, tmp_path_factory):
    """Its CTranslate2 export (float32), made once per session."""
    from vanilla_transformer.interop.export_ctranslate2 import to_ctranslate2  # ctranslate2: an optional extra

    return str(to_ctranslate2(served_model_dir, tmp_path_factory.mktemp("served-ct2") / "ct2",
                              quantization="float32"))
