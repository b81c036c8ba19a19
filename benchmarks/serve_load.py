"""`vanilla-transformer serve` under load: dynamic batching against one sentence per engine call, latency at half
load, the server's overhead over its engine, and memory over 10,000 requests.

    python -m benchmarks.serve_load [--model CT2_DIR --source-lang de --target-lang en] [--write]

Without `--model` it first trains a small English -> German number-words model (the recipe's demo task, d_model
64, 2+2 layers, `--train-steps` Adam steps of 64 pairs on the CPU: the recipe of tests/test_export.py's demo
checkpoint; under a minute on a quiet machine) and exports it to CTranslate2 (float32).
The server runs as the real command in a subprocess; the clients are `--clients` keep-alive HTTP/1.1 connections
of asyncio in this process (see `Connection`), each sending one sentence per request (so the clients share the machine's
cores with the server: on 2 cores the numbers are a floor).

1. Throughput: the same `--requests` sentences through the server with batching (the defaults) and with
   `--no-batching` (one engine call per sentence); every answer is compared with `vanilla-transformer translate
   --batch-size 1` of the same sentence (each sentence alone).
2. Latency: requests sent at a fixed rate of half the batched throughput for `--latency-seconds`; p50 and p99.
3. Overhead: the engine's own throughput (`TranslationEngine.translate`, in this process, on batches of the mean
   size the server formed) against the server's; and the engine's busy time from /metrics against the wall time.
4. Memory: the server's resident memory every 1,000 of `--memory-requests` requests.

`--write` replaces this benchmark's section of benchmarks/RESULTS.md.
"""

import argparse
import asyncio
import json
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run from a checkout, installed or not
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.report import machine_description, publish, software_versions  # noqa: E402

SECTION = "## Serving: `vanilla-transformer serve` under load"
SERVING = re.compile(r"Serving at http://127\.0\.0\.1:(\d+)")


def make_demo_model(folder: Path, steps: int, seed: int = 0, source_lang: str = "en", target_lang: str = "de") -> Path:
    """Train the number-words model (`source_lang` -> `target_lang`) for `steps` steps, save it (with its card) in
    `folder` and export it to CTranslate2 there; returns the export."""
    import torch

    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    from vanilla_transformer.cards.model_card import save_for_hub
    from vanilla_transformer.interop.export_ctranslate2 import to_ctranslate2
    from vanilla_transformer.training.numbers import number_translation_splits
    from vanilla_transformer.training.tokenizer import train_tokenizer

    splits = number_translation_splits(train_size=3000, seed=seed, source_lang=source_lang, target_lang=target_lang)
    train = splits["train"]
    tokenizer = train_tokenizer(train["source"] + train["target"], vocab_size=160, min_frequency=1,
                                model_max_length=64)
    pairs = list(zip(tokenizer(train["source"])["input_ids"], tokenizer(train["target"])["input_ids"]))
    torch.manual_seed(seed)
    config = VanillaTransformerConfig(vocab_size=len(tokenizer), d_model=64, encoder_layers=2, decoder_layers=2,
                                      encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                                      decoder_ffn_dim=128, dropout=0.0, max_position_embeddings=64)
    model = VanillaTransformerForConditionalGeneration(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    rng = random.Random(seed)
    for step in range(steps):
        batch = rng.sample(pairs, 64)
        inputs = tokenizer.pad({"input_ids": [source for source, _ in batch]}, return_tensors="pt")
        labels = tokenizer.pad({"input_ids": [target for _, target in batch]}, return_tensors="pt")["input_ids"]
        loss = model(**inputs, labels=labels.masked_fill(labels == tokenizer.pad_token_id, -100)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"  step {step}: loss {loss.item():.3f}", file=sys.stderr)
    model.generation_config.max_length = 48
    save_for_hub(model.eval(), tokenizer, folder / "model", source_lang=source_lang, target_lang=target_lang)
    return to_ctranslate2(folder / "model", folder / "ct2", quantization="float32")


def demo_sentences(seed: int = 0, source_lang: str = "en") -> list[str]:
    """The demo task's held-out sentences in `source_lang` (test and validation splits), each once."""
    from vanilla_transformer.training.numbers import number_translation_splits

    splits = number_translation_splits(train_size=3000, seed=seed, source_lang=source_lang, target_lang="de")
    return list(dict.fromkeys(splits["test"]["source"] + splits["validation"]["source"]))


def command_translations(model: Path, sentences: list[str], folder: Path) -> list[str]:
    """`vanilla-transformer translate --batch-size 1` of each sentence (each alone)."""
    source = folder / "sentences.txt"
    source.write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
    output = subprocess.run([sys.executable, "-m", "vanilla_transformer", "translate", "--model", str(model),
                             "--input", str(source), "--batch-size", "1", "--no-progress"],
                            check=True, capture_output=True, text=True, env=subprocess_env()).stdout
    return output.split("\n")[: len(sentences)]


def subprocess_env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}


def set_threads(threads: int) -> None:
    """The engine's CPU threads, here and in the servers started: OpenMP's (CTranslate2's and torch's), set before
    either starts its thread pool. On a machine whose cores other work shares, more threads than free cores make
    OpenMP's waiting threads spin against each other (the benchmark's default is 1)."""
    os.environ["OMP_NUM_THREADS"] = str(threads)


class Server:
    """`vanilla-transformer serve MODEL [MODEL ...] ARGS --port 0` in a subprocess."""

    def __init__(self, model: Path | list[Path], args: list[str]):
        import httpx

        models = [str(path) for path in (model if isinstance(model, list) else [model])]
        self.process = subprocess.Popen([sys.executable, "-m", "vanilla_transformer", "serve", *models, *args,
                                         "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env=subprocess_env())
        self.port = None
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 180
        while self.port is None or not self._healthy(httpx):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.1)
        self.url = f"http://127.0.0.1:{self.port}"

    def _read(self):
        for line in self.process.stdout:  # drained, so that the log never blocks the server
            found = SERVING.search(line)
            if found:
                self.port = int(found.group(1))

    def _healthy(self, httpx) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    def metric(self, name: str) -> float:
        import httpx

        for line in httpx.get(f"{self.url}/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise KeyError(name)

    def rss_mib(self) -> float:
        import psutil

        return psutil.Process(self.process.pid).memory_info().rss / 2**20

    def stop(self) -> int:
        self.process.terminate()
        return self.process.wait(timeout=120)


class Connection:
    """One keep-alive HTTP/1.1 connection that sends JSON requests and reads the answers (Content-Length bodies, as
    uvicorn sends them). The load is generated with this rather than httpx because the clients share the server's
    cores and httpx spends more CPU per request than the server does: on 2 busy cores an httpx client caps the load
    near 40 requests/s, far below what the server answers, and would measure itself."""

    def __init__(self, port: int):
        self.port, self.reader, self.writer = port, None, None

    async def post(self, path: str, fields: dict) -> tuple[int, bytes]:
        body = json.dumps(fields).encode()
        request = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        reused = self.writer is not None
        if not reused:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(request)
        status_line = await self.reader.readline()
        if not status_line and reused:  # the server closed the idle connection (keep-alive timeout): a new one
            self.close()
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            self.writer.write(request)
            status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    async def translate(self, sentence: str, source: str, target: str) -> str:
        status, body = await self.post("/translate", {"q": sentence, "source": source, "target": target})
        if status != 200:
            raise RuntimeError(f"the server answered {status}: {body.decode()}")
        return json.loads(body)["translatedText"]

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None


async def closed_loop(port: int, sentences: list[str], clients: int, source: str, target: str,
                      on_answer=None) -> tuple[float, dict[int, str]]:
    """`clients` connections sending the sentences one request each, each as soon as its last was answered.
    Returns (seconds, answers by index)."""
    answers: dict[int, str] = {}
    todo = iter(range(len(sentences)))

    async def client():
        connection = Connection(port)
        try:
            for i in todo:
                answers[i] = await connection.translate(sentences[i], source, target)
                if on_answer:
                    on_answer(len(answers))
        finally:
            connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return time.perf_counter() - started, answers


async def open_loop(port: int, sentences: list[str], rate: float, seconds: float, source: str,
                    target: str) -> list[float]:
    """Requests sent at `rate` per second for `seconds`, whatever the answers (on idle connections, new ones when
    none is idle); returns each one's latency."""
    latencies: list[float] = []
    idle: list[Connection] = []

    async def one(sentence):
        connection = idle.pop() if idle else Connection(port)
        started = time.perf_counter()
        await connection.translate(sentence, source, target)
        latencies.append(time.perf_counter() - started)
        idle.append(connection)

    tasks, start = [], time.perf_counter()
    for i in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        tasks.append(asyncio.create_task(one(sentences[i % len(sentences)])))
    await asyncio.gather(*tasks)
    for connection in idle:
        connection.close()
    return latencies


def run(coroutine):
    """asyncio.run, on uvloop's event loop when it is installed (a lighter client leaves more CPU to the server)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def engine_throughput(model: Path, sentences: list[str], batch_size: int, source: str, target: str) -> float:
    """Sentences per second of `TranslationEngine.translate` alone, in batches of `batch_size`, longest first
    within each batch as the batcher sends them."""
    from vanilla_transformer.serve.engine import TranslationEngine

    engine = TranslationEngine(model, source_lang=source, target_lang=target)
    engine.translate(sentences[:batch_size])  # warm up
    started = time.perf_counter()
    for start in range(0, len(sentences), batch_size):
        engine.translate(sentences[start: start + batch_size])
    return len(sentences) / (time.perf_counter() - started)


def measure_throughput(model, sentences, expected, args) -> dict:
    result = {}
    for name, extra in (("batching", []), ("one sentence per call", ["--no-batching"])):
        server = Server(model, [*extra, "--source-lang", args.source_lang, "--target-lang", args.target_lang])
        try:
            run(closed_loop(server.port, sentences[:64], args.clients, args.source_lang, args.target_lang))
            calls_before, engine_before = server.metric("vt_batch_sentences_count"), server.metric(
                "vt_engine_seconds_sum")
            seconds, answers = run(closed_loop(server.port, sentences, args.clients, args.source_lang,
                                                       args.target_lang))
            calls = server.metric("vt_batch_sentences_count") - calls_before
            engine_seconds = server.metric("vt_engine_seconds_sum") - engine_before
        finally:
            server.stop()
        wrong = sum(answers[i] != expected[i] for i in range(len(sentences)))
        result[name] = {"per_second": len(sentences) / seconds, "mean_batch": len(sentences) / calls,
                        "engine_busy": engine_seconds / seconds, "wrong": wrong}
        print(f"  {name}: {result[name]}", file=sys.stderr)
    return result


def measure_latency_and_memory(model, sentences, rate, args) -> dict:
    server = Server(model, ["--source-lang", args.source_lang, "--target-lang", args.target_lang])
    try:
        run(closed_loop(server.port, sentences[:64], args.clients, args.source_lang, args.target_lang))
        latencies = run(open_loop(server.port, sentences, rate, args.latency_seconds, args.source_lang,
                                          args.target_lang))
        memory = [server.rss_mib()]

        def sample(count):
            if count % 1000 == 0:
                memory.append(server.rss_mib())

        many = [sentences[i % len(sentences)] for i in range(args.memory_requests)]
        run(closed_loop(server.port, many, args.clients, args.source_lang, args.target_lang, sample))
    finally:
        status = server.stop()
    return {"rate": rate, "p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99),
            "answered": len(latencies), "memory": memory, "exit_status": status}


def render(result: dict, command: str) -> str:
    on, off = result["batching"], result["one sentence per call"]
    latency, memory = result["latency"], result["latency"]["memory"]
    rows = [f"| batching (defaults: 4096 tokens, 5 ms) | {on['per_second']:.0f} | {on['mean_batch']:.1f} | "
            f"{on['engine_busy']:.0%} | {on['wrong']} |",
            f"| `--no-batching` | {off['per_second']:.0f} | {off['mean_batch']:.1f} | {off['engine_busy']:.0%} | "
            f"{off['wrong']} |"]
    return "\n".join([
        SECTION, "",
        f"{result['date']}, {result['machine']}; {result['software']}. Model: {result['model']}. "
        f"{result['requests']} requests of one sentence each from {result['clients']} concurrent clients (keep-alive "
        "connections of asyncio in the benchmark's process, on the same cores as the server); the engine on "
        f"{result['threads']} thread(s) (OMP_NUM_THREADS).", "",
        "| server | sentences/s | sentences per engine call | engine busy | answers unlike `translate` alone |",
        "| --- | --- | --- | --- | --- |", *rows, "",
        f"- Batching: {on['per_second'] / off['per_second']:.2f}x the sentences per second of one sentence per call.",
        f"- Latency at {latency['rate']:.0f} requests/s (half the batched throughput) for {result['latency_seconds']} "
        f"s: p50 {latency['p50'] * 1000:.0f} ms, p99 {latency['p99'] * 1000:.0f} ms ({latency['answered']} requests).",
        f"- Overhead: the engine alone (`TranslationEngine.translate`, batches of {on['mean_batch']:.0f}) translates "
        f"{result['engine_per_second']:.0f} sentences/s; the server {on['per_second']:.0f}, "
        f"{on['per_second'] / result['engine_per_second']:.0%} of that. The engine was busy {on['engine_busy']:.0%} "
        "of the server's wall time.",
        f"- Memory (resident, MiB) every 1,000 of {result['memory_requests']:,} requests: "
        f"{', '.join(f'{m:.0f}' for m in memory)} (growth {memory[-1] - memory[1]:+.0f} MiB after the first 1,000). "
        f"Exit status after SIGTERM: {latency['exit_status']}.", "",
        "Command:", "", "```bash", command, "```", ""])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a CTranslate2 export (default: train and export the demo model)")
    parser.add_argument("--model-description", help="what --model is, for the report")
    parser.add_argument("--source-lang", default="en")
    parser.add_argument("--target-lang", default="de")
    parser.add_argument("--train-steps", type=int, default=150)
    parser.add_argument("--sentences", type=Path, help="file of source sentences (default: the demo's held-out set)")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="the engine's CPU threads (OMP_NUM_THREADS)")
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument("--memory-requests", type=int, default=10_000)
    parser.add_argument("--write", action="store_true", help="replace this section of benchmarks/RESULTS.md")
    parser.add_argument("--results", help="another results file to write")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    machine = machine_description()  # the load before anything runs
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        if args.model is None:
            model = make_demo_model(folder, args.train_steps)
            described = (f"the number-words demo model (en -> de; d_model 64, 2+2 layers, {args.train_steps} Adam "
                         "steps of 64 pairs), exported to CTranslate2 float32")
        else:
            model = args.model
            described = args.model_description or str(args.model)
        pool = args.sentences.read_text(encoding="utf-8").splitlines() if args.sentences else demo_sentences()
        sentences = [pool[i % len(pool)] for i in range(args.requests)]
        unique = list(dict.fromkeys(sentences))
        by_sentence = dict(zip(unique, command_translations(model, unique, folder)))
        expected = [by_sentence[s] for s in sentences]
        result = {"throughput": None, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "machine": machine, "software": software_versions(), "model": described,
                  "requests": args.requests, "clients": args.clients, "threads": args.threads,
                  "latency_seconds": args.latency_seconds,
                  "memory_requests": args.memory_requests}
        result.update(measure_throughput(model, sentences, expected, args))
        batch = max(1, round(result["batching"]["mean_batch"]))
        result["engine_per_second"] = engine_throughput(model, sentences, batch, args.source_lang, args.target_lang)
        result["latency"] = measure_latency_and_memory(model, sentences, result["batching"]["per_second"] / 2, args)
    quoted = [shlex.quote(arg) for arg in (argv if argv is not None else sys.argv[1:])]
    publish(SECTION, render, result, "benchmarks.serve_load", quoted, args.write, args.results)
    return result


if __name__ == "__main__":
    main()
