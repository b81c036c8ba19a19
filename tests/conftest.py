import os
import pathlib
import re
import shutil
import sys
import tempfile

# The test models are tiny: extra threads only add synchronisation, which costs a lot on a busy machine.
# Set before torch is imported, and inherited by the subprocesses some tests start.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The training runs' corpus cache ($HF_DATASETS_CACHE/vanilla-transformer-corpora) in a folder of this test process
# (each pytest-xdist worker has its own), removed at the end, not in ~/.cache: a test neither reuses what another run
# left there nor races another worker writing it. Set before `datasets` is imported; subprocesses inherit it.
os.environ["HF_DATASETS_CACHE"] = tempfile.mkdtemp(prefix="vanilla-transformer-tests-datasets-")

import pytest
import torch

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # tests run against this checkout, installed or not
    sys.path.insert(0, str(REPO_ROOT))

import vanilla_transformer  # noqa: E402, F401  (registers the Auto classes)
from helpers import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

DATASETS_CACHE = os.environ["HF_DATASETS_CACHE"]

torch.set_num_threads(1)

# Plain helpers (tiny_config, tiny_model, random_batch, REPO_ROOT, SHARED_DATA) are in helpers.py; fixtures here.


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every test starts on one torch thread, whatever the one before left (a library that raised the count): the
    same numbers in every order, and no OpenMP pool that a forked child would wait on (tests/test_files_safety.py)."""
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    yield


def pytest_unconfigure(config):
    shutil.rmtree(DATASETS_CACHE, ignore_errors=True)


# Module fixtures that start a server or a browser, or train and export models, for several tests: with `-n`, the tests
# using one run on one pytest-xdist worker (their `xdist_group`; pyproject.toml's `--dist loadgroup`), which makes it
# once instead of once per worker. Folders every worker may read are made once per run instead (made_once_per_run).
ONE_WORKER_FIXTURES = {
    ("test_serve", "command"): "serve-command",
    ("test_serve_npm_client", "url"): "serve-npm-client",
    ("test_explore", "live_app"): "explore-browser",
    ("test_explore", "browser"): "explore-browser",
    ("test_export_marian", "exports"): "marian-exports",
    ("test_export", "demo_checkpoint"): "export-demo-checkpoint",
    ("test_training_watch", "run_dir"): "training-watch-run",
    **{("test_other_configurations_training", name): "other-configurations-trained"
       for name in ("trained_lm", "trained_classifier", "trained_masked_lm")},
}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups (the marks added here)
def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__ if item.module else ""
        groups = sorted({ONE_WORKER_FIXTURES.get((module, name)) for name in item.fixturenames} - {None})
        if groups:
            item.add_marker(pytest.mark.xdist_group(groups[0]))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # the slow tests first (in every worker alike: they must collect the same order), the many short ones after
        # them: a worker that drew a long test near the end would keep the whole run waiting for it alone
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker for each CPU this process may run on (each test runs one torch thread), where
    pytest-xdist would count the machine's physical cores (one on a VM whose two CPUs are two threads of a core)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@pytest.fixture(params=[0, 1, 2], ids=lambda s: f"seed{s}")
def seed(request):
    return request.param


@pytest.fixture(scope="session")
def served_model_dir(tmp_path_factory):
    """The `vanilla-transformer serve` tests' tiny translator (tests/serve_fixtures.py), saved once per test run (and
    shared by pytest-xdist's workers)."""
    from serve_fixtures import save_served_model

    from helpers import made_once_per_run

    return str(made_once_per_run(tmp_path_factory, "served-model", save_served_model))


@pytest.fixture(scope="session")
def served_ct2_dir(served_model_dir, tmp_path_factory):
    """Its CTranslate2 export (float32), made once per test run."""
    from helpers import made_once_per_run
    from vanilla_transformer.interop.export_ctranslate2 import to_ctranslate2  # ctranslate2: an optional extra

    return str(made_once_per_run(tmp_path_factory, "served-ct2",
                                 lambda folder: to_ctranslate2(served_model_dir, folder, quantization="float32")))


@pytest.fixture(scope="session")
def served_de_fr_dir(tmp_path_factory):
    """A second tiny translator of the serve tests, German into French (with the first, English into German, a
    server has two pairs and a pivot from English into French), saved once per test run."""
    from serve_fixtures import save_served_model

    from helpers import made_once_per_run

    return str(made_once_per_run(tmp_path_factory, "served-de-fr",
                                 lambda folder: save_served_model(folder, "de", "fr", seed=1)))


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium (never a downloaded one); every request that leaves this machine is refused and recorded."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    outside = []

    def guard(route):
        url = route.request.url
        if re.match(r"^(https?|wss?)://(127\.0\.0\.1|localhost)(:\d+)?/", url) or url.startswith(
                ("file://", "data:", "blob:", "about:")):
            route.continue_()
        else:
            outside.append(url)
            route.abort()

    with sync_api.sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1280, "height": 1000})
        context.route("**/*", guard)
        context.outside = outside
        yield context
        context.close()
    assert outside == [], f"requests left 127.0.0.1: {outside}"
