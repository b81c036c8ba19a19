"""`vanilla-transformer serve` used as a hostile client or operator would: the model's files changed under a running
server, input that makes parsers fail or take quadratic time, forged log lines and proxy headers, options out of
range, SIGTERM right after requests arrive, and public answers that would show the server's files."""

import shutil

import httpx
import pytest
from serve_fixtures import SENTENCES, post, server_in_thread

pytest.importorskip("fastapi")
pytest.importorskip("sentencex")

from vanilla_transformer.serve import ServeSettings  # noqa: E402
from vanilla_transformer.serve.engine import TranslationEngine  # noqa: E402

# ----------------------------------------------------------------------------------------------------------------
# The files under a running server


def mapped_files() -> str:
    with open("/proc/self/maps", encoding="utf-8") as maps:
        return maps.read()


@pytest.mark.parametrize("change", ["overwritten", "truncated"])
def test_a_checkpoint_changed_on_disk_changes_no_answer_of_a_running_engine(change, served_model_dir, tmp_path):
    import gc
    import os

    import torch

    folder = tmp_path / "model"
    shutil.copytree(served_model_dir, folder)
    engine = TranslationEngine(folder, source_lang="en", target_lang="de")
    before = engine.translate(SENTENCES)
    gc.collect()
    weights = folder / "model.safetensors"
    if os.path.exists("/proc/self/maps"):
        assert str(weights) not in mapped_files()  # the weights are the process's own memory
    if change == "overwritten":  # other weights, written in place (the same inode, as `cp` does)
        from safetensors.torch import load_file, save_file

        state = load_file(weights)
        torch.manual_seed(1)
        other = {name: torch.randn_like(tensor) if tensor.is_floating_point() else tensor
                 for name, tensor in state.items()}
        save_file(other, tmp_path / "other.safetensors", metadata={"format": "pt"})
        with open(weights, "r+b") as file:
            file.write((tmp_path / "other.safetensors").read_bytes())
        assert TranslationEngine(folder, source_lang="en", target_lang="de").translate(SENTENCES) != before
    else:
        with open(weights, "r+b") as file:
            file.truncate(100)
    assert engine.translate(SENTENCES) == before  # a truncated mapped file would be SIGBUS here


# ----------------------------------------------------------------------------------------------------------------
# Requests that break parsers: one JSON error with its 4xx status, never a traceback


@pytest.fixture(scope="module")
def engine(served_model_dir):
    return TranslationEngine(served_model_dir, source_lang="en", target_lang="de")


def no_traceback_logged(caplog):
    assert "Traceback" not in caplog.text
    assert not [record for record in caplog.records if record.exc_info], caplog.text


def server_log(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "vanilla_transformer.serve"]


JSON = {"Content-Type": "application/json"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
BREAKING = [
    # (body, headers, status, what the error says)
    (b'{"q": "two\\ud800", "source": "en", "target": "de"}', JSON, 400, "q holds a lone surrogate"),
    (b'{"q": ["a", "\\udfff b"], "source": "en", "target": "de"}', JSON, 400, "q holds a lone surrogate"),
    (b'{"q": "a", "source": "en\\ud800", "target": "de"}', JSON, 400, "source holds a lone surrogate"),
    (b'{"q": "a", "source": "en", "target": "de", "api_key": "\\ud800"}', JSON, 400, "api_key holds a lone"),
    (b'{"q": "a", "source": "en", "target": "de", "\\ud800": 1}', JSON, 400, "a field holds a lone surrogate"),
    (b'{"q": "a", "source": "en", "target": "de", "x": {"y": ["\\ud800"]}}', JSON, 400, "x holds a lone"),
    (b'{"q": ' + b"[" * 100_000 + b"]" * 100_000 + b', "source": "en", "target": "de"}', JSON, 400,
     "nested too deeply"),
    (b"--b\r\nxx", {"Content-Type": "multipart/form-data"}, 400, "the form cannot be read"),
]


@pytest.mark.parametrize("body, headers, status, message", BREAKING, ids=[m for *_, m in BREAKING])
def test_requests_that_break_parsers_get_one_json_error(engine, caplog, body, headers, status, message):
    with caplog.at_level("INFO"), server_in_thread(engine, ServeSettings()) as url:
        response = httpx.post(f"{url}/translate", content=body, headers=headers, timeout=60)
        assert response.status_code == status, response.text
        assert list(response.json()) == ["error"] and message in response.json()["error"]
        assert post(url, q=SENTENCES[0], source="en", target="de").status_code == 200  # still serving
    no_traceback_logged(caplog)


@pytest.mark.parametrize("fragment", ["<![ x", "<p>a <![ b", "<!--" * 300 + "x", "<a x='y>" + "z" * 50,
                                      "</P>" + SENTENCES[1] + "<script>var s = '<b>"])
def test_malformed_html_is_translated_around_its_markup(engine, caplog, fragment):
    with caplog.at_level("INFO"), server_in_thread(engine, ServeSettings()) as url:
        response = post(url, q=fragment, source="en", target="de", format="html")
    assert response.status_code == 200, response.text
    from vanilla_transformer.serve.markup import split_markup

    markup = split_markup(fragment)
    assert len(markup.texts) <= 1
    if not markup.texts:
        assert response.json() == {"translatedText": fragment}
    no_traceback_logged(caplog)


def test_a_form_with_bytes_that_are_not_utf8_is_read(engine, caplog):
    with caplog.at_level("INFO"), server_in_thread(engine, ServeSettings()) as url:
        response = httpx.post(f"{url}/translate", content=b"q=two%ED%A0%80&source=en&target=de", headers=FORM)
    assert response.status_code == 200, response.text  # the stray bytes read as U+FFFD, as browsers do
    no_traceback_logged(caplog)


# ----------------------------------------------------------------------------------------------------------------
# The log: one line per request, whatever the client sends or does


def test_a_line_break_in_the_path_cannot_forge_a_log_line(engine, caplog):
    with caplog.at_level("INFO"), server_in_thread(engine, ServeSettings()) as url:
        assert httpx.get(f"{url}/x%0a127.0.0.1%20GET%20/health%20200%0d%1b[2J").status_code == 404
    lines = [message for message in server_log(caplog) if "/x" in message]
    assert len(lines) == 1 and "\n" not in lines[0] and "\r" not in lines[0] and "\x1b" not in lines[0], lines
    assert "/x\\n127.0.0.1 GET /health 200\\r\\x1b[2J 404" in lines[0]


def test_a_client_gone_mid_body_is_one_log_line(engine, caplog):
    import socket
    import time

    with caplog.at_level("INFO"), server_in_thread(engine, ServeSettings()) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 1000\r\n\r\n{\"q\": \"two")
            time.sleep(0.3)
        deadline = time.monotonic() + 10
        while "499" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        assert post(url, q=SENTENCES[0], source="en", target="de").status_code == 200
    lines = [message for message in server_log(caplog) if "POST /translate 499" in message]
    assert len(lines) == 1 and "the client disconnected" in lines[0], caplog.text
    no_traceback_logged(caplog)


# ----------------------------------------------------------------------------------------------------------------
# Connections: what uvicorn's parser refuses, requests that never finish arriving, one client's many connections


def raw_answer(port: int, data: bytes, wait: float = 10.0) -> tuple[int, dict, float]:
    """Send `data` on a new connection and read until the server closes it: (status, JSON body, seconds)."""
    import json
    import socket
    import time

    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        if data:
            sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), received
    return int(head.split()[1]), json.loads(body), time.monotonic() - started


GOOD_BODY = b'{"q": "two dogs", "source": "en", "target": "de"}'
MALFORMED = {
    "a Content-Length that is no number": b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                                          b"\r\nContent-Length: abc\r\n\r\n" + GOOD_BODY,
    "a negative Content-Length": b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n" + GOOD_BODY,
    "a control byte in a header": b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n",
    "a header without a colon": b"GET /health HTTP/1.1\r\nHost: x\r\nnocolon\r\n\r\n",
    "a request line of garbage": b"\x16\x03\x01\x02\x00 hello\r\n\r\n",
    "Content-Length beside chunked": b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                                     b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
}


@pytest.mark.parametrize("request_bytes", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_request_the_http_parser_refuses_is_one_json_error(engine, caplog, request_bytes):
    with caplog.at_level("INFO"), server_in_thread(engine, ServeSettings()) as url:
        status, body, _ = raw_answer(int(url.rsplit(":", 1)[1]), request_bytes)
        assert status == 400 and list(body) == ["error"] and body["error"], body
        assert post(url, q=SENTENCES[0], source="en", target="de").status_code == 200
    no_traceback_logged(caplog)


def test_a_refused_cors_preflight_is_one_json_error(engine):
    with server_in_thread(engine, ServeSettings()) as url:
        refused = httpx.options(f"{url}/translate", headers={"Origin": "http://elsewhere.example",
                                                             "Access-Control-Request-Method": "DELETE"})
        allowed = httpx.options(f"{url}/translate", headers={"Origin": "http://elsewhere.example",
                                                             "Access-Control-Request-Method": "POST"})
    assert refused.status_code == 400 and refused.json() == {"error": "Disallowed CORS method"}
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == "*"


STALLED = {
    "nothing sent": b"",
    "half the headers": b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Ty",
    "the headers and part of the body": b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                                        b"\r\nContent-Length: 100\r\n\r\n" + GOOD_BODY[:20],
    "one chunk of a chunked body": b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                   b"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"q\":\r\n",
}


@pytest.mark.parametrize("sent", STALLED.values(), ids=STALLED.keys())
def test_a_request_that_never_finishes_arriving_is_answered_408(engine, caplog, sent):
    with caplog.at_level("INFO"), server_in_thread(engine, ServeSettings(read_timeout=0.5)) as url:
        status, body, seconds = raw_answer(int(url.rsplit(":", 1)[1]), sent)
        assert status == 408 and "not sent within 0.5 seconds" in body["error"], body
        assert 0.4 < seconds < 5, seconds
        assert post(url, q=SENTENCES[0], source="en", target="de").status_code == 200
    no_traceback_logged(caplog)


def test_the_read_timeout_counts_reading_not_translating_nor_keep_alive(served_model_dir, caplog):
    """A translation longer than the read timeout is answered; a request sent slowly but within it is answered;
    on a kept-alive connection the next request's time counts from the previous answer."""
    import socket
    import time

    class Slow(TranslationEngine):
        def translate(self, *args, **kwargs):
            time.sleep(1.0)
            return super().translate(*args, **kwargs)

    slow = Slow(served_model_dir, source_lang="en", target_lang="de")
    settings = ServeSettings(read_timeout=0.6, batching=False)
    with caplog.at_level("INFO"), server_in_thread(slow, settings) as url:
        assert post(url, q=SENTENCES[0], source="en", target="de").status_code == 200  # 1 s of translation
        request = (b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                   + str(len(GOOD_BODY)).encode() + b"\r\n\r\n" + GOOD_BODY)
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as sock:
            for round in range(2):  # two requests on one connection, each sent in pieces over 0.3 s
                for start in range(0, len(request), len(request) // 3 + 1):
                    sock.sendall(request[start:start + len(request) // 3 + 1])
                    time.sleep(0.1)
                answer = b""
                while b"translatedText" not in answer:
                    answer += sock.recv(65536)
                assert answer.startswith(b"HTTP/1.1 200"), answer
    no_traceback_logged(caplog)


def test_one_client_cannot_hold_every_connection(engine, caplog):
    import socket

    with caplog.at_level("INFO"), server_in_thread(engine, ServeSettings(connections_per_client=3)) as url:
        port = int(url.rsplit(":", 1)[1])
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        try:
            import time

            time.sleep(0.3)  # the server has taken the three
            status, body, _ = raw_answer(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert status == 429 and "at most 3" in body["error"], body
        finally:
            for sock in held:
                sock.close()
        deadline = time.monotonic() + 10
        while True:  # the server counts a connection until it has seen it closed
            answer = httpx.get(f"{url}/health", timeout=10)
            if answer.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert answer.status_code == 200, answer.text
    no_traceback_logged(caplog)


# ----------------------------------------------------------------------------------------------------------------
# Work off the event loop


def test_a_request_being_split_does_not_hold_up_health(served_model_dir):
    """Eight large requests whose preparation takes half a second each: /health still answers at once. (A few short
    texts are prepared on the event loop itself, where they take well under a millisecond.)"""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from vanilla_transformer.serve.app import INLINE_CHARACTERS

    class SlowCounting(TranslationEngine):
        def count_tokens(self, sentences):
            time.sleep(0.5)  # stands for CPU work on a large request
            return super().count_tokens(sentences)

    slow = SlowCounting(served_model_dir, source_lang="en", target_lang="de")
    with server_in_thread(slow, ServeSettings()) as url, ThreadPoolExecutor(8) as pool:
        started = threading.Barrier(9)

        def send(text):
            started.wait()
            return post(url, q=text, source="en", target="de")

        large = [". ".join(2 * (SENTENCES[i:] + SENTENCES[:i])) + "." for i in range(8)]
        assert all(INLINE_CHARACTERS < len(text) < ServeSettings().char_limit for text in large)
        answers = [pool.submit(send, text) for text in large]
        started.wait()
        time.sleep(0.2)
        before = time.perf_counter()
        assert httpx.get(f"{url}/health", timeout=30).status_code == 200
        waited = time.perf_counter() - before
        assert all(answer.result(timeout=60).status_code == 200 for answer in answers)
    assert waited < 2.0, waited  # on the event loop, the four seconds of preparation would come first


# ----------------------------------------------------------------------------------------------------------------
# Proxy headers, public answers, /metrics


def test_x_forwarded_for_cannot_get_around_the_request_limit(engine):
    with server_in_thread(engine, ServeSettings(req_limit=2)) as url:  # the command's default: trust no proxy
        statuses = [httpx.post(f"{url}/translate", json={"q": SENTENCES[0], "source": "en", "target": "de"},
                               headers={"X-Forwarded-For": f"10.0.0.{i}"}).status_code for i in range(4)]
    assert statuses == [200, 200, 429, 429]


def test_x_forwarded_for_is_the_client_behind_a_trusted_proxy(engine, caplog):
    with caplog.at_level("INFO"), server_in_thread(engine, ServeSettings(req_limit=2),
                                                   forwarded_allow_ips="127.0.0.1") as url:
        statuses = [httpx.post(f"{url}/translate", json={"q": SENTENCES[0], "source": "en", "target": "de"},
                               headers={"X-Forwarded-For": f"10.0.0.{i % 2}"}).status_code for i in range(5)]
    assert statuses == [200, 200, 200, 200, 429]
    assert "10.0.0.1 POST /translate 200" in caplog.text


def test_public_answers_show_no_path(served_model_dir):
    engine = TranslationEngine(served_model_dir)
    with server_in_thread(engine, ServeSettings()) as url:
        answers = [httpx.get(f"{url}{route}").text for route in ("/health", "/openapi.json", "/docs", "/languages",
                                                                  "/frontend/settings", "/metrics", "/nothing")]
    assert httpx.Response(200, text=answers[0]).json() == {"status": "ok", "model": "PyTorch, en -> de"}
    for answer in answers:
        assert served_model_dir not in answer and "/tmp" not in answer


def test_metrics_need_an_api_key_when_the_server_has_keys(engine):
    with server_in_thread(engine, ServeSettings(api_keys=frozenset({"k-1", "k-2"}))) as url:
        assert httpx.get(f"{url}/metrics").status_code == 403
        assert httpx.get(f"{url}/metrics", params={"api_key": "k-3"}).json() == {"error": "Invalid API key"}
        assert httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer k-9"}).status_code == 403
        with_header = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer k-2"})
        with_query = httpx.get(f"{url}/metrics", params={"api_key": "k-1"})
    assert with_header.status_code == with_query.status_code == 200
    assert "vt_requests_total" in with_header.text


# ----------------------------------------------------------------------------------------------------------------
# SIGTERM right after requests arrive


def sent_request(port: int, sentence: str):
    """A socket with a whole /translate request of `sentence` sent on it (Connection: close)."""
    import json
    import socket

    body = json.dumps({"q": sentence, "source": "en", "target": "de"}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return sock


def answer_of(sock) -> str:
    """The status line of the answer on `sock`, or what happened instead."""
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except OSError as error:
        return repr(error)
    finally:
        sock.close()
    return b"".join(chunks).split(b"\r\n", 1)[0].decode() or "closed unanswered"


@pytest.mark.slow  # servers in subprocesses
@pytest.mark.parametrize("attempt", [0, 1, 2])
def test_sigterm_right_after_requests_arrive_answers_every_one(served_model_dir, attempt):
    """Requests sent 50 ms before SIGTERM (whole, each on a connection of its own): each is answered, none reset
    unanswered, and the command exits 0."""
    import time

    from serve_fixtures import ServerProcess

    server = ServerProcess([served_model_dir])
    try:
        sockets = [sent_request(server.port, sentence) for sentence in SENTENCES * 4]
        time.sleep(0.05)
        server.process.terminate()
        answers = [answer_of(sock) for sock in sockets]
    finally:
        status = server.stop()
    assert answers == ["HTTP/1.1 200 OK"] * len(sockets), answers
    assert status == 0, "\n".join(server.log)


# ----------------------------------------------------------------------------------------------------------------
# Options that would break the server: refused at start, with one line


@pytest.mark.parametrize("options, message", [
    (["--batch-wait-ms", "inf"], "--batch-wait-ms must be from 0 to 60000, got inf"),
    (["--batch-wait-ms", "nan"], "--batch-wait-ms must be from 0 to 60000, got nan"),
    (["--timeout", "inf"], "--timeout must be from 0.001 to 86400, got inf"),
    (["--num-beams", "100000"], "--num-beams must be from 1 to 64, got 100000"),
    (["--port", "65536"], "--port must be from 0 to 65535, got 65536"),
    (["--port", "-1"], "--port must be from 0 to 65535, got -1"),
    (["--host", ""], "--host must be a host name or an IP address"),
    (["--host", "local host"], "--host must be a host name or an IP address"),
    (["--max-batch-tokens", "1e9"], "--max-batch-tokens '1e9' is not an integer"),
    (["--body-limit", str(1 << 40)], "--body-limit must be from 1 to"),
    (["--workers", "100000"], "--workers must be from 1 to 256"),
    (["--read-timeout", "0"], "--read-timeout must be from 0.001 to 86400, got 0"),
    (["--read-timeout", "nan"], "--read-timeout must be from 0.001 to 86400, got nan"),
    (["--connections-per-client", "-1"], "--connections-per-client must be from 0 to 1000000, got -1"),
    (["--forwarded-allow-ips", "10.0.0.1,proxy"], "'proxy' is neither"),
    (["--batch-wait-ms", "5000", "--timeout", "2"], "--batch-wait-ms 5000 is not shorter than --timeout 2 s"),
])
def test_options_out_of_range_are_usage_errors(options, message, served_model_dir, capsys):
    from helpers import run_main
    from vanilla_transformer.cli.main import main

    code, out, err = run_main(main, ["serve", served_model_dir, *options], capsys)
    assert code == 2 and out == "", err
    assert err.strip().splitlines()[-1].startswith("vanilla-transformer serve: error: "), err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("card", ["---\nlanguage: [en, de\n---\n", "---\n- en\n- de\n---\n",
                                  "---\nlanguage: {a: [}\n---\n", "---\n\tlanguage: en\n---\n"])
def test_a_broken_model_card_is_one_line(card, served_model_dir, tmp_path, capsys):
    from helpers import run_main
    from vanilla_transformer.cli.main import main

    folder = tmp_path / "model"
    shutil.copytree(served_model_dir, folder)
    (folder / "README.md").write_text(card, encoding="utf-8")
    code, out, err = run_main(main, ["serve", str(folder), "--port", "0"], capsys)
    assert code == 1 and out == "", err
    assert err.strip().count("\n") == 0 and "cannot be read as a model card" in err, err
