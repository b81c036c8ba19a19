"""Models and servers for the `vanilla-transformer serve` tests: a tiny number-words translator (PyTorch, with a
model card naming en -> de) and its CTranslate2 export; the server on a free port, in a thread of the test process
(for engines with faults put in) or as the real command in a subprocess; a real HTTP client (httpx). The served
model and its export are conftest.py's session fixtures `served_model_dir` and `served_ct2_dir`."""

import os
import re
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
import torch

from helpers import REPO_ROOT, tiny_config

num2words = pytest.importorskip("num2words").num2words

from vanilla_transformer import VanillaTransformerForConditionalGeneration  # noqa: E402
from vanilla_transformer.cards.model_card import save_for_hub  # noqa: E402
from vanilla_transformer.training.tokenizer import train_tokenizer  # noqa: E402

# sentences of the number-words task, each translated differently by the tiny model
SENTENCES = [num2words(n) for n in (3, 17, 42, 99, 105, 256, 731, 1000, 1999, 4321, 65536, 77, 808, 12, 5000, 640)]
SERVING = re.compile(r"Serving at http://127\.0\.0\.1:(\d+)")


def save_served_model(path, source_lang: str = "en", target_lang: str = "de", seed: int = 0) -> str:
    """A tiny random translator (float64: batched and single sentences cannot flip a near-tie) with a tokenizer of
    number words in English, German and French (so that one model's translation is a short input to the next, as
    real translations are) and a model card saying `source_lang` -> `target_lang`, saved at `path`."""
    texts = [num2words(i, lang=lang) for lang in ("en", "de", "fr") for i in range(400)]
    tokenizer = train_tokenizer(texts, vocab_size=300, min_frequency=1, model_max_length=64)
    torch.manual_seed(seed)
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer))).double().eval()
    model.generation_config.max_length = 16
    save_for_hub(model, tokenizer, path, source_lang=source_lang, target_lang=target_lang)
    return str(path)


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick), for commands that need a port number of their own."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def post(url: str, timeout: float = 60, **fields) -> httpx.Response:
    return httpx.post(f"{url}/translate", json=fields, timeout=timeout)


@contextmanager
def server_in_thread(engine, settings, **options):
    """The app of `engine` under `settings` served in a thread as the command serves it (`server.make_server`, with
    `options` such as forwarded_allow_ips); yields its base URL."""
    from vanilla_transformer.serve.app import create_app
    from vanilla_transformer.serve.server import connection_limits, listening_socket, make_server

    sock = listening_socket("127.0.0.1", 0)
    limits = connection_limits(settings, options.get("forwarded_allow_ips"))
    server = make_server(create_app(engine, settings), limits, log_level="warning", **options)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


class ServerProcess:
    """`vanilla-transformer serve ARGS --port PORT` (default 0: any free port) in a subprocess; `url` once it
    listens; its log lines in `log`."""

    def __init__(self, args: list[str], timeout: float = 120, port: int = 0):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
        self.process = subprocess.Popen([sys.executable, "-m", "vanilla_transformer", "serve", *args, "--port",
                                         str(port)],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.log: list[str] = []
        self.port = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        deadline = time.monotonic() + timeout
        while self.port is None:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise AssertionError("the server did not start:\n" + "\n".join(self.log))
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}"
        while True:  # listening; wait until the app has started
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not answer /health:\n" + "\n".join(self.log)
            time.sleep(0.05)

    def _read(self):
        for line in self.process.stdout:
            self.log.append(line.rstrip("\n"))
            found = SERVING.search(line)
            if found:
                self.port = int(found.group(1))

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then the exit status."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            return self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.reader.join(timeout=5)
