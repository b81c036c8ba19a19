"""`vanilla-transformer serve` with two language pairs: English into German (a CTranslate2 export) and German into
French (PyTorch), and so English into French through German. Over real HTTP (uvicorn in a thread of the test
process, as the command serves): a LibreTranslate client from PyPI (libretranslatepy: translate, detect,
languages), Mastodon's request shape (JSON, `q` a list of HTML, `source=auto`, reading `detectedLanguage[i]`), the
pivot equal to two requests by hand and to the library translating twice, `alternatives` equal to the library's own
n-best, and a file translated and downloaded. The tiny models are untrained (their translations are noise) but
deterministic: what matters is that each answer is what the library gives for that text alone.
"""

import http.client
import json
import logging
import random
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from serve_fixtures import SENTENCES, ServerProcess, server_in_thread

pytest.importorskip("fastapi")
pytest.importorskip("py3langid")
ctranslate2 = pytest.importorskip("ctranslate2")
num2words = pytest.importorskip("num2words").num2words

from vanilla_transformer.serve import ServeSettings  # noqa: E402
from vanilla_transformer.serve.engine import TranslationEngine  # noqa: E402
from vanilla_transformer.translate import load_model_and_tokenizer, translate, translate_hypotheses  # noqa: E402

GERMAN = [num2words(n, lang="de") for n in (3, 17, 42, 99, 105, 256, 731, 1999)]
LANGUAGES = [{"code": "en", "name": "English", "targets": ["de", "fr"]},
             {"code": "de", "name": "German", "targets": ["fr"]},
             {"code": "fr", "name": "French", "targets": []}]


@pytest.fixture(scope="module")
def oracles(served_ct2_dir, served_de_fr_dir):
    """(model, tokenizer) of each pair, loaded by the library as `vanilla-transformer translate` loads them."""
    return {("en", "de"): load_model_and_tokenizer(served_ct2_dir), ("de", "fr"): load_model_and_tokenizer(served_de_fr_dir, "cpu")}


def alone(oracle, text: str) -> str:
    model, tokenizer = oracle
    return translate(model, tokenizer, [text])[0]


@pytest.fixture(scope="module")
def url(served_ct2_dir, served_de_fr_dir):
    engines = [TranslationEngine(served_ct2_dir), TranslationEngine(served_de_fr_dir, device="cpu")]
    with server_in_thread(engines, ServeSettings(batch_wait_ms=20)) as base:
        yield base


def post(url: str, route: str = "translate", **fields) -> httpx.Response:
    return httpx.post(f"{url}/{route}", json=fields, timeout=60)


def test_languages_lists_every_source_with_its_targets_pivots_included(url):
    from libretranslatepy import LibreTranslateAPI

    assert LibreTranslateAPI(url).languages() == LANGUAGES
    assert httpx.get(f"{url}/languages").json() == LANGUAGES


def test_a_libretranslate_client_translates_each_pair(url, oracles):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(url)
    for english, german in zip(SENTENCES[:3], GERMAN[:3]):
        assert client.translate(english, source="en", target="de") == alone(oracles["en", "de"], english)
        assert client.translate(german, source="de", target="fr") == alone(oracles["de", "fr"], german)
        assert client.translate(german, source="auto", target="fr") == alone(oracles["de", "fr"], german)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_pivot_equals_two_hops_by_hand_and_the_library_translating_twice(url, oracles, seed):
    rng = random.Random(seed)
    texts = [num2words(rng.randrange(10**6)) for _ in range(4)]
    text = f"{texts[0]}. {texts[1]}!\n{texts[2]}"  # several sentences and lines: split, translated, joined at each hop
    for q in (text, texts[3]):
        through = post(url, q=q, source="en", target="fr").json()["translatedText"]
        german = post(url, q=q, source="en", target="de").json()["translatedText"]
        by_hand = post(url, q=german, source="de", target="fr").json()["translatedText"]
        assert through == by_hand
    assert through == alone(oracles["de", "fr"], alone(oracles["en", "de"], texts[3]))
    html = f"<p>{texts[0]}</p><code>{texts[1]}</code><b>{texts[2]}</b>"
    through = post(url, q=html, source="en", target="fr", format="html").json()["translatedText"]
    german = post(url, q=html, source="en", target="de", format="html").json()["translatedText"]
    assert through == post(url, q=german, source="de", target="fr", format="html").json()["translatedText"]
    assert f"<code>{texts[1]}</code>" in through


def test_mastodon_s_request_shape(url, oracles):
    """Mastodon's LibreTranslate client: a JSON body with q a list of HTML statuses, source auto, format html; it
    reads translatedText[i] and detectedLanguage[i]["language"], and the targets of each source from /languages."""
    statuses = [f"<p>{SENTENCES[4]}</p>", f"<p>{GERMAN[4]}</p>", f"<p>{GERMAN[5]} <a href=\"x\">{GERMAN[6]}</a></p>",
                f"<p>{SENTENCES[5]}</p>"]
    response = httpx.post(f"{url}/translate", timeout=60, headers={"Content-Type": "application/json"},
                          content=json.dumps({"q": statuses, "source": "auto", "target": "fr", "format": "html"}))
    assert response.status_code == 200, response.text
    data = response.json()
    assert [data["detectedLanguage"][i]["language"] for i in range(4)] == ["en", "de", "de", "en"]
    assert all(0 < data["detectedLanguage"][i]["confidence"] <= 100 for i in range(4))
    for i, (status, source) in enumerate(zip(statuses, ["en", "de", "de", "en"])):  # each from its own language
        assert data["translatedText"][i] == post(url, q=status, source=source, target="fr",
                                                 format="html").json()["translatedText"]
    assert data["translatedText"][1] == f"<p>{alone(oracles['de', 'fr'], GERMAN[4])}</p>"
    targets = {language["code"]: language["targets"] for language in httpx.get(f"{url}/languages").json()}
    assert "fr" in targets["de"] and "fr" in targets["en"]
    one = post(url, q=GERMAN[7], source="auto", target="fr").json()  # a string: one object, not a list
    assert one["detectedLanguage"]["language"] == "de" and one["translatedText"] == alone(oracles["de", "fr"], GERMAN[7])


@pytest.mark.parametrize("seed", [0, 1])
def test_detect_finds_the_language_of_number_words_among_the_served_sources(url, seed):
    """num2words writes the texts, in the language asked for: /detect (through libretranslatepy) names it first."""
    from libretranslatepy import LibreTranslateAPI

    client, rng = LibreTranslateAPI(url), random.Random(seed)
    right = 0
    for _ in range(20):
        language = rng.choice(["en", "de"])
        answer = client.detect(" ".join(num2words(rng.randrange(100, 10**6), lang=language) for _ in range(3)))
        assert [item["language"] for item in answer] in (["en", "de"], ["de", "en"])  # the served sources only
        assert answer[0]["confidence"] >= answer[1]["confidence"]
        assert sum(item["confidence"] for item in answer) == pytest.approx(100, abs=0.02)
        right += answer[0]["language"] == language
    assert right >= 18


def test_alternatives_are_the_library_s_n_best(url, oracles):
    model, tokenizer = oracles["en", "de"]
    for count in (1, 2, 3):
        answer = post(url, q=SENTENCES[8], source="en", target="de", alternatives=count).json()
        best, *others = translate_hypotheses(model, tokenizer, [SENTENCES[8]], count + 1)[0]
        assert answer["translatedText"] == best
        assert answer["alternatives"] == list(dict.fromkeys(text for text in others if text != best))
        assert len(answer["alternatives"]) <= count
    listed = post(url, q=[SENTENCES[8], SENTENCES[9]], source="en", target="de", alternatives=2).json()
    assert len(listed["alternatives"]) == 2 and all(isinstance(texts, list) for texts in listed["alternatives"])
    assert listed["translatedText"][1] == translate_hypotheses(model, tokenizer, [SENTENCES[9]], 3)[0][0]
    assert "alternatives" not in post(url, q=SENTENCES[8], source="en", target="de").json()
    html = post(url, q=f"<b>{SENTENCES[8]}</b>", source="en", target="de", format="html", alternatives=2).json()
    assert html["alternatives"] == []  # none for html, as LibreTranslate answers
    through = post(url, q=SENTENCES[8], source="en", target="fr", alternatives=2).json()  # of the last model
    german = alone(oracles["en", "de"], SENTENCES[8])
    best, *others = translate_hypotheses(*oracles["de", "fr"], [german], 3)[0]
    assert through["translatedText"] == best
    assert through["alternatives"] == list(dict.fromkeys(text for text in others if text != best))


@pytest.mark.parametrize("pair", [("en", "de"), ("de", "fr")], ids=["ctranslate2", "pytorch"])
def test_requests_with_and_without_alternatives_at_once_get_their_own_answers(url, oracles, pair):
    """Plain requests and n-best requests batched by one engine at the same time: each gets what the library gives
    its sentence alone."""
    model, tokenizer = oracles[pair]
    jobs = [(sentence, k % 3) for k, sentence in enumerate(SENTENCES if pair[0] == "en" else GERMAN * 2)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda job: post(url, q=job[0], source=pair[0], target=pair[1],
                                                 alternatives=job[1]).json(), jobs))
    for (sentence, count), answer in zip(jobs, answers):
        if count == 0:
            assert answer["translatedText"] == alone(oracles[pair], sentence)
        else:
            best, *others = translate_hypotheses(model, tokenizer, [sentence], count + 1)[0]
            assert answer["translatedText"] == best
            assert answer["alternatives"] == list(dict.fromkeys(text for text in others if text != best))


BAD = [
    ({"q": "x", "source": "fr", "target": "en"}, "fr is not supported as source language"),
    ({"q": "x", "source": "de", "target": "en"}, "English (en) is not available as a target language from German (de)"),
    ({"q": "x", "source": "en", "target": "es"}, "es is not supported as target language"),
    ({"q": "x", "source": "auto", "target": "es"}, "es is not supported as target language"),
    ({"q": "x", "source": "en", "target": "auto"}, "auto is not supported as target language"),
    ({"q": "x", "source": "en", "target": "de", "alternatives": 4}, "alternatives parameter must be <= 3"),
    ({"q": "x", "source": "en", "target": "de", "alternatives": "two"}, "alternatives parameter is not a number"),
    ({"q": "x", "source": "en", "target": "de", "alternatives": [1]}, "alternatives parameter is not a number"),
    ({"q": "x", "source": "EN\n", "target": "de"}, "not a language code"),
]


@pytest.mark.parametrize("body, message", BAD, ids=[m for _, m in BAD])
def test_an_unknown_pair_or_bad_alternatives_get_400_and_one_error(url, body, message):
    response = post(url, **body)
    assert response.status_code == 400 and list(response.json()) == ["error"], response.text
    assert message in response.json()["error"]


def test_detect_errors_are_libretranslate_s(url):
    assert post(url, "detect").status_code == 400
    assert post(url, "detect").json() == {"error": "Invalid request: missing q parameter"}


def test_frontend_settings_has_libretranslate_s_fields(url):
    settings = httpx.get(f"{url}/frontend/settings").json()
    assert {"charLimit", "frontendTimeout", "apiKeys", "keyRequired", "suggestions", "filesTranslation",
            "supportedFilesFormat", "language"} <= set(settings)
    assert settings["supportedFilesFormat"] == [".txt", ".html"] and settings["filesTranslation"] is True
    assert settings["apiKeys"] is False and settings["keyRequired"] is False
    assert settings["language"] == {"source": {"code": "auto", "name": "Auto Detect"},
                                    "target": {"code": "de", "name": "German"}}


@pytest.mark.parametrize("name, content, text_format", [
    ("notes.txt", f"{SENTENCES[0]}.\r\n\n  {SENTENCES[1]}! {SENTENCES[2]}\n", "text"),
    ("page.html", f"<!DOCTYPE html><html><head><title>{SENTENCES[3]}</title><script>var x = '{SENTENCES[4]}';</script>"
                  f"</head><body><P CLASS=a>{SENTENCES[5]} &amp; {SENTENCES[6]}</P></body></html>\n", "html"),
])
def test_a_file_is_translated_and_downloaded(url, name, content, text_format):
    data = content.encode("utf-8")
    response = httpx.post(f"{url}/translate_file", data={"source": "en", "target": "fr"},
                          files={"file": (name, data)}, timeout=60)
    assert response.status_code == 200, response.text
    link = response.json()["translatedFileUrl"]
    assert link.startswith(f"{url}/download_file/")
    download = httpx.get(link, timeout=60)
    assert download.status_code == 200
    assert download.headers["content-disposition"] == f'attachment; filename="{name}"'
    expected = post(url, q=content, source="en", target="fr", format=text_format).json()["translatedText"]
    assert download.content.decode("utf-8") == expected
    auto = httpx.post(f"{url}/translate_file", data={"source": "auto", "target": "fr"}, files={"file": (name, data)},
                      timeout=60).json()["translatedFileUrl"]
    assert httpx.get(auto, timeout=60).content == download.content


@pytest.mark.parametrize("files, data, status, message", [
    ({"file": ("a.pdf", b"%PDF-1.4")}, {"source": "en", "target": "de"}, 400, "file format not supported"),
    ({"file": ("a.txt", b"\xff\xfethree")}, {"source": "en", "target": "de"}, 400, "not UTF-8 text"),
    ({"file": ("a.txt", b"three\0")}, {"source": "en", "target": "de"}, 400, "NUL"),
    ({"other": ("a.txt", b"three")}, {"source": "en", "target": "de"}, 400, "missing file parameter"),
    ({"file": ("a.txt", b"three")}, {"source": "en", "target": "es"}, 400, "es is not supported as target language"),
    ({"file": ("a.txt", b"three " * 1000)}, {"source": "en", "target": "de"}, 400,
     "the file has 6000 characters, over this server's limit of"),
    ({"file": ("a.txt", b"")}, {"source": "en", "target": "de"}, 400, "the file is empty, there is nothing to translate"),
    ({"file": ("a.txt", "\ufeff".encode())}, {"source": "en", "target": "de"}, 400, "the file is empty"),
])
def test_a_file_that_cannot_be_translated_gets_one_error(url, files, data, status, message):
    response = httpx.post(f"{url}/translate_file", data=data, files=files, timeout=60)
    assert response.status_code == status and list(response.json()) == ["error"], response.text
    assert message in response.json()["error"]


def raw_get(url: str, path: str) -> tuple[int, dict, bytes]:
    """GET `path` sent byte for byte as given (http.client neither normalises nor re-encodes it): (status, headers,
    body)."""
    connection = http.client.HTTPConnection(httpx.URL(url).host, httpx.URL(url).port, timeout=60)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, {key.lower(): value for key, value in response.getheaders()}, response.read()
    finally:
        connection.close()


# URL-encoded and plain dot segments, slashes and backslashes, double encoding, a trailing slash (which the router
# would otherwise redirect): each one 404 with one JSON error, never a redirect, never a file outside the folder
TRAVERSALS = ["0" * 32 + ".notes.txt", "x.txt", "%2e%2e%2f", "%2E%2E%2F%2e%2e%2Fetc%2Fpasswd", "..%2f",
              "..%2F..%2Fetc%2Fpasswd", "%2f", "%2fetc%2fpasswd", "%2E%2E", "%2e", "..", "../", "../../etc/passwd",
              "x.txt/", "x.txt%2f", "a/b.txt", "..%5c..%5cx.txt", "%5c", "..\\x.txt", "%252e%252e%252fetc%252fpasswd",
              "%252e%252e", ""]


@pytest.mark.parametrize("name", TRAVERSALS)
def test_a_download_of_no_translated_file_is_404(url, name):
    status, headers, body = raw_get(url, f"/download_file/{name}")
    assert status == 404 and "location" not in headers, (status, headers)
    assert json.loads(body) == {"error": "Not found: no such translated file (they are kept for 30 minutes)"}


def test_only_the_exact_name_of_a_translated_file_downloads_it(url):
    """The name given, with a trailing slash or dot segments around it, encoded or not, is no file's name: 404."""
    link = httpx.post(f"{url}/translate_file", data={"source": "en", "target": "de"}, timeout=60,
                      files={"file": ("a.txt", SENTENCES[0].encode())}).json()["translatedFileUrl"]
    name = link.rsplit("/", 1)[1]
    status, _, body = raw_get(url, f"/download_file/{name}")
    assert status == 200 and body.decode() == post(url, q=SENTENCES[0], source="en", target="de").json()[
        "translatedText"]
    for path in (f"{name}/", f"{name}%2f", f"x/../{name}", f"x%2f..%2f{name}", f"x%2f%2e%2e%2f{name}", f"./{name}",
                 f"%2e%2f{name}", f"{name}%2f%2e", f"%252e%252e%252f{name}"):
        status, headers, body = raw_get(url, f"/download_file/{path}")
        assert status == 404 and "location" not in headers and list(json.loads(body)) == ["error"], path


@pytest.mark.slow  # the command's server in a subprocess
def test_the_command_serves_a_folder_of_model_folders_and_logs_the_pivot(served_ct2_dir, served_de_fr_dir, tmp_path):
    from libretranslatepy import LibreTranslateAPI

    models = tmp_path / "models"
    shutil.copytree(served_ct2_dir, models / "en-de")
    shutil.copytree(served_de_fr_dir, models / "de-fr")
    server = ServerProcess([str(models), "--device", "cpu"])
    try:
        client = LibreTranslateAPI(server.url)
        assert client.languages() == [LANGUAGES[1], LANGUAGES[0], LANGUAGES[2]]  # de-fr comes first by name
        german = client.translate(SENTENCES[0], source="en", target="de")
        assert client.translate(SENTENCES[0], source="en", target="fr") == client.translate(german, "de", "fr")
        assert client.detect(GERMAN[0])[0]["language"] == "de"
    finally:
        assert server.stop() == 0, "\n".join(server.log)
    assert any("Pivot: en -> fr through de" in line for line in server.log), "\n".join(server.log)


def test_each_request_through_a_pivot_says_so_in_the_log(url, caplog):
    with caplog.at_level(logging.INFO, logger="vanilla_transformer.serve"):
        post(url, q=[SENTENCES[0], GERMAN[0]], source="auto", target="fr")
        post(url, q=SENTENCES[1], source="en", target="de")
        deadline = time.monotonic() + 10  # the access log's line comes after the answer is sent
        while len(lines := [record.getMessage() for record in caplog.records
                            if "POST /translate" in record.getMessage()]) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert len(lines) == 2 and "pivot=en->fr via de" in lines[0] and "pivot" not in lines[1], lines


def test_the_new_routes_need_a_key_and_count_against_the_limit(served_ct2_dir):
    engine = TranslationEngine(served_ct2_dir)
    with server_in_thread(engine, ServeSettings(api_keys=frozenset({"k1"}), req_limit=5)) as base:
        file = {"file": ("a.txt", SENTENCES[0].encode())}
        assert httpx.post(f"{base}/detect", data={"q": SENTENCES[0]}).json() == {
            "error": "Missing API key: this server needs an api_key with each request"}
        assert httpx.post(f"{base}/translate_file", data={"source": "en", "target": "de", "api_key": "k2"},
                          files=file).json() == {"error": "Invalid API key"}
        assert httpx.post(f"{base}/detect", data={"q": SENTENCES[0], "api_key": "k1"}).json() == [
            {"confidence": 100.0, "language": "en"}]  # the one source served
        link = httpx.post(f"{base}/translate_file", data={"source": "en", "target": "de", "api_key": "k1"},
                          files=file, timeout=60).json()["translatedFileUrl"]
        assert httpx.get(link).text == post(base, q=SENTENCES[0], source="en", target="de",
                                            api_key="k1").json()["translatedText"]
        refused = httpx.post(f"{base}/detect", data={"q": SENTENCES[0], "api_key": "k1"})
        assert refused.status_code == 429 and "Retry-After" in refused.headers
        assert httpx.get(link).status_code == 200  # a download is not a request of the limit
        # nor needs a key: LibreTranslate's download_file has no access check (its name, 128 random bits, is the
        # key); a key given is not read
        assert httpx.get(link, params={"api_key": "k2"}).status_code == 200


@pytest.mark.slow  # worker processes of the command
def test_with_worker_processes_any_worker_serves_a_file_translated_by_another(served_ct2_dir, served_de_fr_dir):
    """--workers 2: each upload and each download on a new connection, which the kernel hands to either worker;
    every download finds its file (the workers keep the files in one folder), with the translation of its text."""
    import re
    import time

    from serve_fixtures import free_port

    server = ServerProcess([served_ct2_dir, served_de_fr_dir, "--device", "cpu", "--workers", "2"], timeout=240,
                           port=free_port())
    try:
        deadline = time.monotonic() + 240
        while len(set(re.findall(r"\[(\d+)\] Application startup complete", "\n".join(server.log)))) < 2:
            assert time.monotonic() < deadline, "\n".join(server.log)
            time.sleep(0.1)
        texts = [f"{sentence}.\n{other}" for sentence, other in zip(SENTENCES[:8], SENTENCES[8:])]
        links = [httpx.post(f"{server.url}/translate_file", data={"source": "en", "target": "fr"}, timeout=120,
                            files={"file": (f"{i}.txt", text.encode())}).json()["translatedFileUrl"]
                 for i, text in enumerate(texts)]
        downloads = [httpx.get(link, timeout=60) for link in links]
        expected = [post(server.url, q=text, source="en", target="fr").json()["translatedText"] for text in texts]
    finally:
        status = server.stop()
    assert [download.status_code for download in downloads] == [200] * len(texts)
    assert [download.text for download in downloads] == expected
    assert status == 0, "\n".join(server.log)


def test_one_folder_named_twice_in_any_spelling_is_served_once(served_ct2_dir, served_de_fr_dir, tmp_path):
    import os

    from vanilla_transformer.cli.serve import model_folders

    models = tmp_path / "models"
    models.mkdir()
    os.symlink(served_ct2_dir, models / "en-de")
    spellings = [served_ct2_dir, f"{served_ct2_dir}/", f"{served_ct2_dir}/../{os.path.basename(served_ct2_dir)}",
                 str(models / "en-de")]
    assert model_folders([*spellings, served_de_fr_dir, str(models)]) == [served_ct2_dir, served_de_fr_dir]
    assert model_folders([served_de_fr_dir, *spellings[::-1]]) == [served_de_fr_dir, str(models / "en-de")]


@pytest.mark.parametrize("setting, value", [("max_length_a", "2"), ("max_length_b", -1), ("num_beams", 0),
                                            ("min_new_tokens", -1)])
def test_a_folder_whose_generation_config_cannot_work_is_refused_at_start(served_de_fr_dir, tmp_path, setting, value):
    folder = shutil.copytree(served_de_fr_dir, tmp_path / "edited")
    config = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**config, "num_beams": 1, setting: value}))
    with pytest.raises(ValueError, match=f"^{folder} cannot be served: {setting}="):
        TranslationEngine(folder, device="cpu")


def test_a_restart_never_loads_files_changed_on_disk_since_the_server_started(served_ct2_dir, tmp_path):
    folder = shutil.copytree(served_ct2_dir, tmp_path / "served")
    engine = TranslationEngine(folder)
    before = engine.translate(SENTENCES[:2])
    engine.restart()  # the same files: loaded again, the same answers
    assert engine.translate(SENTENCES[:2]) == before
    config = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**config, "max_length_a": 0, "max_length_b": 2}))
    with pytest.raises(RuntimeError, match="changed on disk since the server loaded it"):
        engine.restart()
    assert engine.translate(SENTENCES[:2]) == before  # still the model the server started with
