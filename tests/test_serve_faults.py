"""`vanilla-transformer serve` when things go wrong, over real HTTP: the engine killed in the middle of a batch
(503 for that batch, the next requests served), one request the engine refuses (only it fails), a request over its
timeout, SIGTERM under load (the requests in flight answered, exit 0), and a browser on another origin calling the
server (CORS on by default, off with --no-cors)."""

import http.server
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from serve_fixtures import SENTENCES, ServerProcess, post, server_in_thread

pytest.importorskip("fastapi")
pytest.importorskip("sentencex")
pytest.importorskip("ctranslate2")

from vanilla_transformer.serve import ServeSettings  # noqa: E402
from vanilla_transformer.serve.engine import TranslationEngine  # noqa: E402
from vanilla_transformer.translate import load_model_and_tokenizer, translate  # noqa: E402


@pytest.fixture(scope="module")
def expected(served_ct2_dir):
    model, tokenizer = load_model_and_tokenizer(served_ct2_dir)
    return {sentence: translate(model, tokenizer, [sentence])[0] for sentence in SENTENCES}


class RecordingEngine(TranslationEngine):
    """The real engine, recording the sentences of each call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[list[str]] = []

    def translate(self, sentences):
        self.calls.append(list(sentences))
        return super().translate(sentences)


class KilledMidBatch(RecordingEngine):
    """The CTranslate2 model is unloaded while the first batch runs: CTranslate2 itself fails that call."""

    def translate(self, sentences):
        if not self.calls:
            self.model.translator.unload_model()
        return super().translate(sentences)


class RefusesOneSentence(RecordingEngine):
    refused = SENTENCES[3]

    def translate(self, sentences):
        if self.refused in sentences:
            self.calls.append(list(sentences))
            raise ValueError(f"cannot translate {self.refused!r}")
        return super().translate(sentences)


def at_once(url, sentences):
    """Each sentence in its own request, all sent together; their responses in order."""
    start = threading.Barrier(len(sentences))

    def send(sentence):
        start.wait()
        return post(url, q=sentence, source="en", target="de")

    with ThreadPoolExecutor(len(sentences)) as pool:
        return list(pool.map(send, sentences))


def test_an_engine_killed_mid_batch_fails_that_batch_and_the_next_requests_are_served(served_ct2_dir, expected):
    engine = KilledMidBatch(served_ct2_dir, source_lang="en", target_lang="de")
    sentences = SENTENCES[:6]
    with server_in_thread(engine, ServeSettings(batch_wait_ms=1000)) as url:
        responses = at_once(url, sentences)
        killed = set(engine.calls[0])
        assert len(killed) > 1  # the batch held several requests
        for sentence, response in zip(sentences, responses):
            if sentence in killed:
                assert response.status_code == 503
                assert response.json() == {"error": "the translation engine failed while translating this request "
                                                    "and was restarted; send it again"}
            else:  # a later batch, after the restart
                assert response.json() == {"translatedText": expected[sentence]}
        for response in at_once(url, sentences):  # served again, by the restarted engine
            assert response.status_code == 200
        assert [r.json()["translatedText"] for r in at_once(url, sentences)] == [expected[s] for s in sentences]
        assert httpx.get(f"{url}/health").status_code == 200
        assert "vt_engine_failures_total 1.0" in httpx.get(f"{url}/metrics").text


def test_a_request_the_engine_refuses_does_not_fail_the_others_in_its_batch(served_ct2_dir, expected):
    engine = RefusesOneSentence(served_ct2_dir, source_lang="en", target_lang="de")
    sentences = SENTENCES[:6]
    with server_in_thread(engine, ServeSettings(batch_wait_ms=1000)) as url:
        responses = at_once(url, sentences)
    assert any(engine.refused in call and len(call) > 1 for call in engine.calls)  # it was batched with others
    for sentence, response in zip(sentences, responses):
        if sentence == engine.refused:
            assert (response.status_code, response.json()) == (400, {
                "error": f"the engine cannot translate this text: cannot translate {engine.refused!r}"})
        else:
            assert response.json() == {"translatedText": expected[sentence]}


def test_a_request_over_its_timeout_gets_503_and_the_server_goes_on(served_ct2_dir, expected):
    class Slow(TranslationEngine):
        def translate(self, sentences):
            if SENTENCES[0] in sentences:
                time.sleep(1.5)
            return super().translate(sentences)

    with server_in_thread(Slow(served_ct2_dir, source_lang="en", target_lang="de"), ServeSettings(timeout=0.5)) as url:
        response = post(url, q=SENTENCES[0], source="en", target="de")
        assert response.status_code == 503
        assert "longer than this server's timeout of 0.5 s" in response.json()["error"]
        time.sleep(1.2)
        assert post(url, q=SENTENCES[1], source="en", target="de").json() == {"translatedText": expected[SENTENCES[1]]}


def queued(url) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("vt_queued_sentences "):
            return float(line.split()[1])
    raise AssertionError("no vt_queued_sentences in /metrics")


@pytest.mark.slow  # a server in a subprocess
def test_sigterm_under_load_answers_the_requests_in_flight_and_exits_0(served_ct2_dir, expected):
    server = ServerProcess([served_ct2_dir, "--source-lang", "en", "--target-lang", "de", "--batch-wait-ms", "2000"])
    try:
        in_flight = SENTENCES[:8]
        with ThreadPoolExecutor(12) as pool:
            waiting = [pool.submit(post, server.url, q=sentence, source="en", target="de") for sentence in in_flight]
            deadline = time.monotonic() + 30
            while queued(server.url) < len(in_flight):  # all eight are in the batcher, waiting for their batch
                assert time.monotonic() < deadline
                time.sleep(0.02)
            stop = threading.Event()

            def keep_sending(sentence):  # load that goes on through the shutdown
                answers = []
                while not stop.is_set():
                    try:
                        answers.append(post(server.url, q=sentence, source="en", target="de"))
                    except httpx.TransportError:  # not accepted any more
                        return answers
                return answers

            load = [pool.submit(keep_sending, sentence) for sentence in SENTENCES[8:12]]
            server.process.terminate()
            answered = [future.result(timeout=60) for future in waiting]
            status = server.process.wait(timeout=60)
            stop.set()
            during = [answer for future in load for answer in future.result(timeout=60)]
    finally:
        status = server.stop()
    assert [answer.json() for answer in answered] == [{"translatedText": expected[s]} for s in in_flight]
    assert all(answer.status_code == 200 for answer in during)
    assert status == 0, "\n".join(server.log)
    assert any("Stopped on SIGTERM" in line for line in server.log)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{server.url}/health")


# ----------------------------------------------------------------------------------------------------------------
# A browser on another origin

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu"]
FETCH = """async ([url, q]) => {
    try {
        const response = await fetch(url + "/translate", {method: "POST", headers: {"Content-Type": "application/json"},
                                                          body: JSON.stringify({q, source: "en", target: "de"})});
        return {status: response.status, body: await response.json()};
    } catch (error) { return {failed: String(error)}; }
}"""


@pytest.fixture(scope="module")
def page_origin():
    """A page served from another port of this machine (another origin than the translation server)."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"<!doctype html><title>client</title><p>a page that calls a translation server</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.mark.slow  # a real browser
@pytest.mark.parametrize("cors", [True, False], ids=["cors", "no-cors"])
def test_a_browser_fetch_from_another_origin(served_ct2_dir, expected, page_origin, cors):
    import os

    sync_api = pytest.importorskip("playwright.sync_api")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    engine = TranslationEngine(served_ct2_dir, source_lang="en", target_lang="de")
    with server_in_thread(engine, ServeSettings(cors=cors)) as url, sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            outside = []
            page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(
                "http://127.0.0.1:") else (outside.append(route.request.url), route.abort()))
            page.goto(page_origin)
            result = page.evaluate(FETCH, [url, SENTENCES[5]])
        finally:
            browser.close()
    assert outside == []
    if cors:
        assert result == {"status": 200, "body": {"translatedText": expected[SENTENCES[5]]}}
    else:
        assert "Failed to fetch" in result["failed"]  # the browser refuses the answer without CORS headers
