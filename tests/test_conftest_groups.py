"""The suite's grouping works with the installed pytest and pytest-xdist: tests marked `xdist_group` by a conftest
hook, as tests/conftest.py marks the users of its expensive module fixtures (ONE_WORKER_FIXTURES), run on one worker
under `--dist loadgroup`. When they do not, nothing fails: each worker builds those fixtures again and the suite only
gets slower, so this test says it (pytest 9.2 with pytest-xdist 3.8 is such a pair: pyproject.toml's dev extra)."""

import json
import subprocess
import sys
import textwrap

CONFTEST = textwrap.dedent(
    """
    import pytest


    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(config, items):
        for item in items:
            if "shared" in item.fixturenames:
                item.add_marker(pytest.mark.xdist_group("shared-fixture"))
    """
)

TESTS = textwrap.dedent(
    """
    import json
    import os

    import pytest


    @pytest.fixture(scope="module")
    def shared():
        return os.environ["PYTEST_XDIST_WORKER"]


    @pytest.mark.parametrize("index", range(6))
    def test_grouped(shared, index, tmp_path_factory):
        with open(os.environ["WORKERS_FILE"], "a") as file:
            file.write(json.dumps(["grouped", shared]) + "\\n")


    @pytest.mark.parametrize("index", range(6))
    def test_free(index):
        with open(os.environ["WORKERS_FILE"], "a") as file:
            file.write(json.dumps(["free", os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")
    """
)


def test_tests_marked_by_a_conftest_hook_share_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_groups.py").write_text(TESTS)
    workers_file = tmp_path / "workers.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
         "-p", "no:randomly", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "WORKERS_FILE": str(workers_file)})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    runs = [json.loads(line) for line in workers_file.read_text().splitlines()]
    assert len(runs) == 12
    grouped = {worker for kind, worker in runs if kind == "grouped"}
    assert len(grouped) == 1, f"the grouped tests ran on {sorted(grouped)}: pytest-xdist did not keep them together"
