"""`vanilla-transformer serve` over real HTTP: a LibreTranslate client from PyPI translates through the command,
concurrent requests get their own answers (equal to translating each sentence alone), bad input gets one status and
one error while the server keeps serving, limits and API keys hold, and faults in the engine fail only their batch.

The model is tiny and untrained (its translations are noise) but deterministic, in float64 for PyTorch: what
matters is that each answer is exactly `vanilla_transformer.translate.translate` of that sentence alone (the
library side of `vanilla-transformer translate`).
"""

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from serve_fixtures import SENTENCES, ServerProcess, free_port, post, server_in_thread

pytest.importorskip("fastapi")
pytest.importorskip("sentencex")
ctranslate2 = pytest.importorskip("ctranslate2")

from vanilla_transformer.serve import ServeSettings  # noqa: E402
from vanilla_transformer.serve.engine import TranslationEngine  # noqa: E402
from vanilla_transformer.translate import load_model_and_tokenizer, translate  # noqa: E402

API_KEY = "k-3f9a1c"


@pytest.fixture(scope="module")
def oracles(served_model_dir, served_ct2_dir):
    """(model, tokenizer) of each engine, loaded by the library as `vanilla-transformer translate` loads them."""
    return {"pytorch": load_model_and_tokenizer(served_model_dir, "cpu"), "ctranslate2": load_model_and_tokenizer(served_ct2_dir)}


def alone(oracle, sentences) -> dict[str, str]:
    """Each sentence translated in a batch of its own (the oracle for every answer of the server)."""
    model, tokenizer = oracle
    return {sentence: translate(model, tokenizer, [sentence])[0] for sentence in sentences}


@pytest.fixture(scope="module")
def expected(oracles):
    return {engine: alone(oracle, SENTENCES) for engine, oracle in oracles.items()}


@pytest.fixture(scope="module")
def command(served_ct2_dir, tmp_path_factory):
    """The real command over the CTranslate2 export (which has no model card: the languages are given), with API
    keys and small limits."""
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text(f"# keys of this test\n{API_KEY}\nother-key\n", encoding="utf-8")
    server = ServerProcess([served_ct2_dir, "--source-lang", "en", "--target-lang", "de", "--api-keys", str(keys),
                            "--char-limit", "400", "--batch-limit", "20", "--body-limit", "100000"])
    yield server
    assert server.stop() == 0, "\n".join(server.log)


def test_the_translations_differ_from_sentence_to_sentence(expected):
    """The oracle can see a swapped answer: the tiny model gives most sentences a translation of their own."""
    for answers in expected.values():
        assert len(set(answers.values())) >= len(SENTENCES) * 3 // 4


@pytest.mark.slow  # the command's server in a subprocess
def test_a_libretranslate_client_translates_through_the_command(command, expected):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(command.url, api_key=API_KEY)
    assert client.languages() == [{"code": "en", "name": "English", "targets": ["de"]},
                                  {"code": "de", "name": "German", "targets": []}]
    for sentence in SENTENCES[:4]:
        assert client.translate(sentence, source="en", target="de") == expected["ctranslate2"][sentence]
    assert client.translate(SENTENCES[5], source="auto", target="de") == expected["ctranslate2"][SENTENCES[5]]


@pytest.mark.slow  # the command's server in a subprocess
def test_a_list_of_texts_and_several_sentences_in_one_text(command, oracles):
    sentences = [f"{SENTENCES[0]}.", f"{SENTENCES[1]}!", SENTENCES[2], SENTENCES[3]]
    answers = alone(oracles["ctranslate2"], sentences)
    text = f"  {sentences[0]} {sentences[1]}\n{sentences[2]}"
    response = post(command.url, q=[SENTENCES[3], text, ""], source="en", target="de", api_key=API_KEY)
    assert response.status_code == 200, response.text
    # the text is cut into its three sentences, each translated alone and put back with its whitespace
    assert response.json() == {"translatedText": [
        answers[SENTENCES[3]], f"  {answers[sentences[0]]} {answers[sentences[1]]}\n{answers[sentences[2]]}", ""]}


# ----------------------------------------------------------------------------------------------------------------
# Concurrency: batched answers are each request's own, equal to the sentence translated alone


def batch_counts(url) -> tuple[float, float]:
    """(engine calls, sentences translated) from the server's /metrics."""
    metrics = httpx.get(f"{url}/metrics").text
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in metrics.splitlines()
              if line and not line.startswith("#")}
    return values["vt_batch_sentences_count"], values["vt_sentences_total"]


@pytest.mark.parametrize("engine_name", ["pytorch", "ctranslate2"])
@pytest.mark.parametrize("seed", [0, 1])
def test_concurrent_requests_get_their_own_answers(engine_name, seed, served_model_dir, served_ct2_dir, expected):
    import random

    folder = served_model_dir if engine_name == "pytorch" else served_ct2_dir
    engine = TranslationEngine(folder, source_lang="en", target_lang="de")
    order = [sentence for _ in range(3) for sentence in SENTENCES]
    random.Random(seed).shuffle(order)
    with server_in_thread(engine, ServeSettings(batch_wait_ms=20)) as url:
        start = threading.Barrier(16)

        def client(sentences):
            start.wait()
            return [post(url, q=sentence, source="en", target="de").json()["translatedText"]
                    for sentence in sentences]

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(client, [order[i::16] for i in range(16)]))
        calls, sentences = batch_counts(url)
    for i, got in enumerate(answers):
        assert got == [expected[engine_name][sentence] for sentence in order[i::16]]
    assert sentences == len(order)
    assert calls < len(order) / 2  # the sentences went to the engine in batches, not one by one


def test_without_batching_each_sentence_is_one_engine_call(served_ct2_dir, expected):
    engine = TranslationEngine(served_ct2_dir, source_lang="en", target_lang="de")
    with server_in_thread(engine, ServeSettings(batching=False)) as url:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda s: post(url, q=s, source="en", target="de").json()["translatedText"],
                                    SENTENCES))
        assert batch_counts(url) == (len(SENTENCES), len(SENTENCES))
    assert answers == [expected["ctranslate2"][sentence] for sentence in SENTENCES]


@pytest.mark.slow  # a server in a subprocess
def test_several_worker_processes_serve_one_address_and_stop_together_on_sigterm(served_ct2_dir, expected):
    """--workers 2: uvicorn's supervisor starts two processes, each loading the model; concurrent requests on new
    connections get the single-sentence answers; each worker answers a request that stalls 408 (the connections'
    limits reach the workers); SIGTERM to the supervisor ends both workers and the command exits 0. Oracle: the
    workers' own log lines (each names its process id)."""
    import re
    import socket
    import time

    server = ServerProcess([served_ct2_dir, "--source-lang", "en", "--target-lang", "de", "--workers", "2",
                            "--read-timeout", "0.5"], timeout=180, port=free_port())
    try:
        deadline = time.monotonic() + 180
        while len(started := set(re.findall(r"\[(\d+)\] Application startup complete", "\n".join(server.log)))) < 2:
            assert time.monotonic() < deadline, "\n".join(server.log)
            time.sleep(0.1)
        with ThreadPoolExecutor(8) as pool:  # each post() opens its own connection
            answers = list(pool.map(lambda s: post(server.url, q=s, source="en", target="de"), SENTENCES * 2))

        def stalled(_):
            with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
                sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Le")
                received = b""
                while chunk := sock.recv(4096):
                    received += chunk
                return received

        with ThreadPoolExecutor(8) as pool:
            refusals = list(pool.map(stalled, range(8)))
    finally:
        status = server.stop()
    assert all(refusal.startswith(b"HTTP/1.1 408") and b'{"error": "The request was not sent within 0.5 seconds"}'
               in refusal for refusal in refusals), refusals
    assert [answer.json()["translatedText"] for answer in answers] == [expected["ctranslate2"][s]
                                                                       for s in SENTENCES * 2]
    assert status == 0, "\n".join(server.log)
    finished = set(re.findall(r"\[(\d+)\] Finished server process", "\n".join(server.log)))
    assert finished == started and len(started) == 2, "\n".join(server.log)


def test_the_languages_come_from_the_model_card(served_model_dir, expected):
    engine = TranslationEngine(served_model_dir)
    assert (engine.source_lang, engine.target_lang) == ("en", "de")
    with server_in_thread(engine, ServeSettings()) as url:
        assert httpx.get(f"{url}/languages").json()[0] == {"code": "en", "name": "English", "targets": ["de"]}
        response = httpx.post(f"{url}/translate", data={"q": SENTENCES[4], "source": "en", "target": "de"})
        assert response.json() == {"translatedText": expected["pytorch"][SENTENCES[4]]}
        assert httpx.get(f"{url}/health").json()["status"] == "ok"


@pytest.mark.slow  # the command's server in a subprocess
def test_html_keeps_the_markup_and_translates_each_text_node(command, oracles):
    words = [SENTENCES[0], SENTENCES[6], SENTENCES[9]]
    answers = alone(oracles["ctranslate2"], words)
    fragment = (f'<p class="a">{words[0]} <b>{words[1]}</b><!-- note --></p><script>var x = "<i>one</i>";</script>'
                f"<ul><li>{words[2]}</li><li>  </li></ul><br/>")
    response = post(command.url, q=fragment, source="en", target="de", format="html", api_key=API_KEY)
    assert response.status_code == 200, response.text
    assert response.json()["translatedText"] == (
        f'<p class="a">{answers[words[0]]} <b>{answers[words[1]]}</b><!-- note --></p>'
        f'<script>var x = "<i>one</i>";</script><ul><li>{answers[words[2]]}</li><li>  </li></ul><br/>')


# ----------------------------------------------------------------------------------------------------------------
# Bad input: one status, one error, and the server keeps serving

BAD_REQUESTS = [
    # (JSON body, or raw body with its content type), status, what the error says
    ("{\"q\": \"three\", ", 400, "not valid JSON"),
    (["three"], 400, "must be an object"),
    ({"source": "en", "target": "de"}, 400, "missing q parameter"),
    ({"q": "", "source": "en", "target": "de"}, 400, "q is empty"),
    ({"q": [], "source": "en", "target": "de"}, 400, "q is empty"),
    ({"q": 17, "source": "en", "target": "de"}, 400, "q must be a string or a list of strings, got a number"),
    ({"q": ["three", None], "source": "en", "target": "de"}, 400, "item 1 of q is null"),
    ({"q": ["three"] * 10_000, "source": "en", "target": "de"}, 400, "q has 10000 texts, over this server's limit of 20"),
    ({"q": "three " * 100, "source": "en", "target": "de"}, 400, "q has 600 characters, over this server's limit of 400"),
    ({"q": "three", "source": "en", "target": "fr"}, 400, "fr is not supported as target language"),
    ({"q": "three", "source": "de", "target": "de"}, 400, "de is not supported as source language"),
    ({"q": "three", "target": "de"}, 400, "missing source parameter"),
    ({"q": "three", "source": "en", "target": "de", "format": "markdown"}, 400, "format markdown is not supported"),
    ({"q": " ".join(["three"] * 66), "source": "en", "target": "de"}, 400, "tokens long, over the 64 tokens"),
    ({"q": "x" * 120_000, "source": "en", "target": "de"}, 413, "over this server's limit of 100000 bytes"),
]


@pytest.mark.slow  # the command's server in a subprocess
@pytest.mark.parametrize("body, status, message", BAD_REQUESTS, ids=[m for _, _, m in BAD_REQUESTS])
def test_bad_input_gets_one_status_and_one_error(command, expected, body, status, message):
    if isinstance(body, str):
        response = httpx.post(f"{command.url}/translate", content=body, timeout=60,
                              headers={"Content-Type": "application/json"})
    else:
        if isinstance(body, dict):
            body = {**body, "api_key": API_KEY}
        response = httpx.post(f"{command.url}/translate", json=body, timeout=60)
    assert response.status_code == status, response.text
    assert list(response.json()) == ["error"]
    assert message in response.json()["error"]
    assert "Traceback" not in response.text
    good = post(command.url, q=SENTENCES[7], source="en", target="de", api_key=API_KEY)  # still serving
    assert good.json() == {"translatedText": expected["ctranslate2"][SENTENCES[7]]}


def test_a_ctranslate2_folder_limits_sentences_to_the_positions_its_export_recorded(served_model_dir, tmp_path):
    """The limit is the positions the export's tables hold where the tokenizer allows more (learned positions for 24
    tokens here, the tokenizer 64: CTranslate2 itself refuses a 25th, tests/test_export.py), and the tokenizer's
    alone for a folder that does not record them. A sentence over it gets 400 before it reaches the engine."""
    import json

    from transformers import AutoTokenizer

    from helpers import tiny_config
    from vanilla_transformer import VanillaTransformerForConditionalGeneration
    from vanilla_transformer.interop.export_ctranslate2 import to_ctranslate2

    tokenizer = AutoTokenizer.from_pretrained(served_model_dir)
    config = tiny_config(vocab_size=len(tokenizer), position_embedding_type="learned", max_position_embeddings=24)
    folder = to_ctranslate2(VanillaTransformerForConditionalGeneration(config).eval(), tmp_path / "ct2",
                            tokenizer=tokenizer)
    engine = TranslationEngine(folder, source_lang="en", target_lang="de")
    assert (engine.max_input_tokens, tokenizer.model_max_length) == (24, 64)
    with server_in_thread(engine, ServeSettings()) as url:
        words = " ".join(["three"] * 30)
        response = post(url, q=words, source="en", target="de")
        assert response.status_code == 400 and "tokens long, over the 24 tokens the en -> de model reads" in response.text
        assert post(url, q="three", source="en", target="de").status_code == 200

    config_file = folder / "config.json"
    recorded = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({key: value for key, value in recorded.items() if key != "max_positions"}))
    assert TranslationEngine(folder, source_lang="en", target_lang="de").max_input_tokens == 64


@pytest.mark.slow  # the command's server in a subprocess
@pytest.mark.parametrize("key, message", [(None, "Missing API key: this server needs an api_key with each request"),
                                          ("k-3f9a1", "Invalid API key"),
                                          (17, "Invalid API key")])
def test_a_missing_or_wrong_api_key_is_refused(command, key, message):
    fields = {"q": SENTENCES[0], "source": "en", "target": "de"} | ({} if key is None else {"api_key": key})
    response = httpx.post(f"{command.url}/translate", json=fields)
    assert (response.status_code, response.json()) == (403, {"error": message})
    assert post(command.url, q=SENTENCES[0], source="en", target="de", api_key="other-key").status_code == 200


@pytest.mark.slow  # the command's server in a subprocess
def test_unknown_routes_and_methods_answer_with_an_error(command):
    assert httpx.get(f"{command.url}/nothing").json() == {"error": "Not Found"}
    response = httpx.get(f"{command.url}/translate")
    assert (response.status_code, response.json()) == (405, {"error": "Method Not Allowed"})


def test_over_the_request_limit_a_client_gets_429(served_ct2_dir, expected):
    engine = TranslationEngine(served_ct2_dir, source_lang="en", target_lang="de")
    with server_in_thread(engine, ServeSettings(req_limit=3)) as url:
        answers = [post(url, q=SENTENCES[2], source="en", target="de") for _ in range(5)]
        assert [answer.status_code for answer in answers] == [200, 200, 200, 429, 429]
        assert "over this server's limit of 3 per minute" in answers[3].json()["error"]
        assert 1 <= int(answers[3].headers["Retry-After"]) <= 60
        assert httpx.get(f"{url}/languages").status_code == 200  # only /translate is counted


@pytest.mark.slow  # the command's server in a subprocess
def test_the_metrics_are_prometheus_text(command):
    from prometheus_client.parser import text_string_to_metric_families

    post(command.url, q=SENTENCES[3], source="en", target="de", api_key=API_KEY)
    families = {family.name: family for family in text_string_to_metric_families(httpx.get(
        f"{command.url}/metrics", headers={"Authorization": f"Bearer {API_KEY}"}).text)}
    assert {"vt_requests", "vt_request_seconds", "vt_batch_sentences", "vt_engine_seconds"} <= set(families)
    ok = [sample for sample in families["vt_requests"].samples
          if sample.labels == {"route": "/translate", "status": "200"} and sample.name == "vt_requests_total"]
    assert ok and ok[0].value >= 1


# ----------------------------------------------------------------------------------------------------------------
# The command's own errors: one line, before anything listens


@pytest.mark.parametrize("problem", ["missing folder", "no languages", "same languages", "empty keys", "port taken",
                                     "one pair twice", "languages of several", "no model inside"])
def test_the_command_stops_with_one_line(problem, served_model_dir, served_ct2_dir, tmp_path, capsys):
    import json
    import shutil
    import socket

    from helpers import run_main
    from vanilla_transformer.cli.main import main

    unnamed = tmp_path / "unnamed-ct2"  # an export that records no languages (as exports of a model object)
    shutil.copytree(served_ct2_dir, unnamed)
    config = json.loads((unnamed / "config.json").read_text(encoding="utf-8"))
    del config["languages"]
    (unnamed / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (tmp_path / "empty").mkdir()
    argv, message = {
        "missing folder": ([str(tmp_path / "missing")], "model folder not found"),
        "no languages": ([str(unnamed)], "does not say which languages it translates"),
        "one pair twice": ([served_model_dir, served_ct2_dir], "both translate en into de: serve one model per"),
        "languages of several": ([served_model_dir, served_ct2_dir, "--source-lang", "en"],
                                 "name the languages of a single MODEL"),
        "no model inside": ([str(tmp_path / "empty")], "is neither a model folder (no config.json) nor a folder of"),
        "same languages": ([served_model_dir, "--target-lang", "en"], "the source and target languages are both 'en'"),
        "empty keys": ([served_model_dir, "--api-keys", str(tmp_path / "keys.txt")], "holds no key"),
        "port taken": ([served_model_dir], "cannot listen on 127.0.0.1:"),
    }[problem]
    (tmp_path / "keys.txt").write_text("# no key yet\n\n", encoding="utf-8")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1]) if problem == "port taken" else "0"
        code, out, err = run_main(main, ["serve", *argv, "--port", port], capsys)
    if problem == "languages of several":  # a usage error: argparse's usage, then the one line, exit 2
        assert code == 2 and message in err.strip().splitlines()[-1], err
        return
    assert code == 1 and out == "", err
    assert err.strip().count("\n") == 0 and err.startswith("vanilla-transformer serve: error: "), err
    assert message in err
