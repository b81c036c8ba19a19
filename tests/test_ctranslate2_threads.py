"""CTranslate2's threads on a CPU, measured (interop/ctranslate2_runtime.py): the faster of one thread and
CTranslate2's default is kept, the choice is cached per machine and model shape, a given `intra_threads` or
`OMP_NUM_THREADS` is obeyed, and the translations are the same whatever the threads."""

import json
import time

import pytest

pytest.importorskip("ctranslate2")

from translation_fixtures import GERMAN, saved_with_export, tiny_tokenizer, tiny_translator  # noqa: E402
from vanilla_transformer.interop import ctranslate2_runtime  # noqa: E402
from vanilla_transformer.interop.ctranslate2_runtime import CTranslate2Translator  # noqa: E402
from vanilla_transformer.translate import translate  # noqa: E402


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return saved_with_export(tiny_translator(seed=2), tiny_tokenizer(), tmp_path_factory.mktemp("threads"))["ctranslate2"]


@pytest.fixture
def measuring(monkeypatch, tmp_path):
    """No OMP_NUM_THREADS (the tests' conftest sets it), two cores, and the cache in a folder of the test."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(ctranslate2_runtime, "usable_cpus", lambda: [0, 1])
    path = tmp_path / "cache" / "ctranslate2-threads.json"
    monkeypatch.setattr(ctranslate2_runtime, "measurements_path", lambda name: str(path))
    return path


class Slow:
    """Stands in for a ctranslate2.Translator whose batches take `seconds`."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def translate_batch(self, rows, **options):
        time.sleep(self.seconds)


@pytest.mark.parametrize("faster", [1, 2])
def test_the_faster_thread_count_is_kept_and_cached(exported, measuring, monkeypatch, faster):
    loads = []

    def load(threads):
        loads.append(threads)
        return Slow(0.002 if threads == faster else 0.02)

    engine = CTranslate2Translator(exported, intra_threads=1)  # a real instance; its choice is asked again below
    translator, threads = engine._fastest_threads(load, (1, 2), exported, "float32", "test")
    assert threads == faster and translator.seconds == 0.002 and loads == [1, 2]
    assert engine.thread_choice[faster] < engine.thread_choice[3 - faster]
    cached = json.loads(measuring.read_text())
    assert [entry["choice"] for entry in cached.values()] == [faster]

    loads.clear()  # the same machine and model shape: read, not measured
    assert engine._fastest_threads(load, (1, 2), exported, "float32", "test")[1] == faster and loads == [faster]
    loads.clear()  # another compute type is measured anew
    engine._fastest_threads(load, (1, 2), exported, "int8", "test")
    assert loads == [1, 2] and len(json.loads(measuring.read_text())) == 2


def test_a_damaged_or_unwritable_cache_only_means_measuring_again(exported, measuring, monkeypatch, tmp_path):
    measuring.parent.mkdir(parents=True)
    measuring.write_text("{not json")
    engine = CTranslate2Translator(exported)
    assert set(engine.thread_choice) == {1, 2} and engine.intra_threads in (1, 2)
    assert json.loads(measuring.read_text())  # replaced by a good one
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setattr(ctranslate2_runtime, "measurements_path", lambda name: str(blocker / "threads.json"))
    assert set(CTranslate2Translator(exported).thread_choice) == {1, 2}


def test_given_threads_and_omp_num_threads_are_obeyed(exported, measuring, monkeypatch):
    assert CTranslate2Translator(exported, intra_threads=2).thread_choice == {}
    assert CTranslate2Translator(exported, intra_threads=2).translator.num_translators == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    engine = CTranslate2Translator(exported)
    assert engine.thread_choice == {} and engine.intra_threads == 1 and not measuring.exists()
    monkeypatch.setattr(ctranslate2_runtime, "usable_cpus", lambda: [0])
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert CTranslate2Translator(exported).thread_choice == {}  # one core: nothing to choose


def test_loading_leaves_torchs_threads_as_they_were(exported, measuring):
    """CTranslate2 sets the loading thread's OpenMP thread count to its own, which torch shares where both use one
    OpenMP runtime (a student trained after the teacher's pass ran on one thread): after a load at 1 thread, at 2 and
    measured, torch's count is the caller's; the engine still translates with what it chose."""
    import torch

    for torch_threads in (2, 3):
        for intra_threads in (1, 2, None):
            torch.set_num_threads(torch_threads)
            engine = CTranslate2Translator(exported, intra_threads=intra_threads)
            assert torch.get_num_threads() == torch_threads
            assert engine.intra_threads in ((1, 2) if intra_threads is None else (intra_threads,))
    torch.set_num_threads(1)


@pytest.mark.parametrize("decoding", [dict(num_beams=1), dict(num_beams=4)])
def test_the_translations_are_the_same_whatever_the_threads(exported, measuring, decoding):
    texts = GERMAN + [text.upper() for text in GERMAN]
    tokenizer = tiny_tokenizer()
    results = [translate(CTranslate2Translator(exported, intra_threads=threads), tokenizer, texts, batch_size=4,
                         max_new_tokens=10, **decoding) for threads in (1, 2)]
    measured = CTranslate2Translator(exported)
    assert results[0] == results[1] == translate(measured, tokenizer, texts, batch_size=4, max_new_tokens=10,
                                                 **decoding)
