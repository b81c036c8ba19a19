"""One `vanilla-transformer serve` with two language pairs against each pair served alone: time, sentences per
second, resident memory and answers.

    python -m benchmarks.serve_two_models [--model A --source-lang en --target-lang de
                                           --model2 B --source-lang2 en --target-lang2 fr] [--rounds 3] [--write]

Without `--model` and `--model2` it first trains two small number-words models as benchmarks/serve_load.py trains
its one (d_model 64, 2+2 layers, `--train-steps` Adam steps each): English -> German and English -> French, and
exports both to CTranslate2 (float32). Each round runs, one after the other, as the real command in a subprocess:

1. a server of A alone answering `--requests` requests of A's pair (one sentence each);
2. a server of B alone answering `--requests` requests of B's pair;
3. one server of A and B (`vanilla-transformer serve A B`) answering the same 2 x `--requests` requests,
   interleaved (A's first, B's first, A's second, ...), from the same `--clients` keep-alive connections.

Serving two models costs no more than the sum when the third run takes no longer than the first two together.
Each server's resident memory is read once it answers /health (loaded, nothing translated yet) and after its
requests; two models in one process should cost about the two alone less what one process of the libraries costs.
Every answer is compared with `vanilla-transformer translate --batch-size 1` of the same sentence by the same model.
The table gives the median over `--rounds` rounds; the per-round figures follow it.

`--write` replaces this benchmark's section of benchmarks/RESULTS.md.
"""

import argparse
import asyncio
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run from a checkout, installed or not
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.report import machine_description, publish, software_versions  # noqa: E402
from benchmarks.serve_load import (  # noqa: E402
    Connection,
    Server,
    command_translations,
    demo_sentences,
    make_demo_model,
    run,
    set_threads,
)

SECTION = "## Serving two language pairs from one server"
WARM_UP = 64  # requests of each pair before the timed ones, not counted


async def closed_loop(port: int, jobs: list[tuple[str, str, str]], clients: int) -> tuple[float, list[str]]:
    """`clients` connections sending the (sentence, source, target) jobs in order, one request each, each as soon as
    its last was answered. Returns (seconds, answers in the jobs' order)."""
    answers: list[str | None] = [None] * len(jobs)
    todo = iter(range(len(jobs)))

    async def client():
        connection = Connection(port)
        try:
            for i in todo:
                answers[i] = await connection.translate(*jobs[i])
        finally:
            connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return time.perf_counter() - started, answers


def interleave(first: list, second: list) -> list:
    """first[0], second[0], first[1], second[1], ... (then the rest of the longer one)."""
    merged = [job for pair in zip(first, second) for job in pair]
    shorter = min(len(first), len(second))
    return merged + first[shorter:] + second[shorter:]


def serve_and_measure(models: list[Path], server_args: list[str], jobs: list, expected: list[str], warm_up: list,
                      clients: int) -> dict:
    """One server of `models` answering `jobs` (after `warm_up`); its time, engine calls, memory and wrong answers."""
    server = Server(models, server_args)
    try:
        loaded = server.rss_mib()
        run(closed_loop(server.port, warm_up, clients))
        calls_before = server.metric("vt_batch_sentences_count")
        engine_before = server.metric("vt_engine_seconds_sum")
        seconds, answers = run(closed_loop(server.port, jobs, clients))
        calls = server.metric("vt_batch_sentences_count") - calls_before
        engine_seconds = server.metric("vt_engine_seconds_sum") - engine_before
        after = server.rss_mib()
    finally:
        status = server.stop()
    return {"seconds": seconds, "per_second": len(jobs) / seconds, "mean_batch": len(jobs) / calls,
            "engine_busy": engine_seconds / seconds, "rss_loaded": loaded, "rss_after": after,
            "wrong": sum(answer != want for answer, want in zip(answers, expected)), "exit_status": status}


def median_of(rounds: list[dict], key: str) -> float:
    return statistics.median(one[key] for one in rounds)


def summarize(rounds: list[dict[str, dict]]) -> dict:
    """The median of each figure of each server over the rounds, and of each round's ratios."""
    summary = {name: {key: median_of([one[name] for one in rounds], key)
                      for key in ("seconds", "per_second", "mean_batch", "engine_busy", "rss_loaded", "rss_after")}
               for name in ("a", "b", "ab")}
    for name in ("a", "b", "ab"):
        summary[name]["wrong"] = sum(one[name]["wrong"] for one in rounds)
        summary[name]["exit_status"] = ", ".join(str(code) for code in sorted({one[name]["exit_status"]
                                                                                for one in rounds}))
    summary["time_ratio"] = [one["ab"]["seconds"] / (one["a"]["seconds"] + one["b"]["seconds"]) for one in rounds]
    summary["memory_shared"] = [one["a"]["rss_loaded"] + one["b"]["rss_loaded"] - one["ab"]["rss_loaded"]
                                for one in rounds]
    return summary


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def render(result: dict, command: str) -> str:
    s = result["summary"]
    a, b, ab = s["a"], s["b"], s["ab"]
    n, pair_a, pair_b = result["requests"], result["pair_a"], result["pair_b"]
    sum_seconds = a["seconds"] + b["seconds"]

    def row(name, requests, one):
        return (f"| {name} | {requests:,} | {one['seconds']:.2f} | {one['per_second']:.0f} | {one['mean_batch']:.1f} | "
                f"{one['engine_busy']:.0%} | {one['rss_loaded']:.0f} | {one['rss_after']:.0f} | {one['wrong']} |")

    ratios = ", ".join(f"{ratio:.2f}" for ratio in s["time_ratio"])
    shared = ", ".join(f"{mib:.0f}" for mib in s["memory_shared"])
    per_round = "; ".join(f"{one['a']['seconds']:.2f} / {one['b']['seconds']:.2f} / {one['ab']['seconds']:.2f}"
                          for one in result["rounds"])
    return "\n".join([
        SECTION, "",
        f"{result['date']}, {result['machine']}; {result['software']}. Models: {result['model']}. Each round: a "
        f"server of A ({pair_a}) alone answering {n:,} requests, one of B ({pair_b}) alone answering {n:,}, then one "
        f"server of both (`vanilla-transformer serve A B`) answering the same {2 * n:,} requests interleaved (A, B, "
        f"A, ...); one sentence a request from {result['clients']} concurrent clients (keep-alive connections of "
        f"asyncio in the benchmark's process, on the same cores as the servers), after {WARM_UP} requests of each "
        f"pair not counted; the batching defaults; the engines on {result['threads']} thread(s) (OMP_NUM_THREADS). "
        f"Medians of {result['rounds_count']} round(s); answers unlike `translate` alone summed over the rounds.", "",
        "| server | requests | seconds | sentences/s | sentences per engine call | engine busy | resident MiB, loaded "
        "| resident MiB, after the requests | answers unlike `translate` alone |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        row(f"A alone ({pair_a})", n, a), row(f"B alone ({pair_b})", n, b),
        row("A and B in one server", 2 * n, ab),
        f"| A alone + B alone | {2 * n:,} | {sum_seconds:.2f} | {2 * n / sum_seconds:.0f} | | | "
        f"{a['rss_loaded'] + b['rss_loaded']:.0f} | {a['rss_after'] + b['rss_after']:.0f} | |", "",
        f"- Time: the server of both took {statistics.median(s['time_ratio']):.2f}x the time of the two alone "
        f"together (median; each round: {ratios}). Seconds of A / B / both, each round: {per_round}.",
        f"- Memory: loaded, the server of both held {ab['rss_loaded']:.0f} MiB against {a['rss_loaded']:.0f} + "
        f"{b['rss_loaded']:.0f} for the two alone; what one process saves (the two alone less the server of both, "
        f"each round): {shared} MiB.",
        "- Engine busy: seconds in engine calls over the wall time; in the server of both, the two engines' "
        "together (each engine has a batcher thread of its own, so the two can translate at the same time).",
        f"- Exit status after SIGTERM: A {a['exit_status']}, B {b['exit_status']}, both {ab['exit_status']}.", "",
        "Command:", "", "```bash", command, "```", ""])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="model A, a CTranslate2 export (default: train and export the "
                        "English -> German demo model); with --model2")
    parser.add_argument("--source-lang", default="en", help="A's source language (default en)")
    parser.add_argument("--target-lang", default="de", help="A's target language (default de)")
    parser.add_argument("--model2", type=Path, help="model B, a CTranslate2 export of another pair (default: train "
                        "and export the English -> French demo model); with --model")
    parser.add_argument("--source-lang2", default="en", help="B's source language (default en)")
    parser.add_argument("--target-lang2", default="fr", help="B's target language (default fr)")
    parser.add_argument("--model-description", help="what --model and --model2 are, for the report")
    parser.add_argument("--sentences", type=Path, help="file of A's source sentences (default: the demo's held-out "
                        "set in A's source language)")
    parser.add_argument("--sentences2", type=Path, help="file of B's source sentences (default: as --sentences)")
    parser.add_argument("--train-steps", type=positive, default=150, help="Adam steps of each demo model")
    parser.add_argument("--requests", type=positive, default=1000, help="requests of each pair (default 1000)")
    parser.add_argument("--clients", type=positive, default=64)
    parser.add_argument("--threads", type=positive, default=1, help="the engines' CPU threads (OMP_NUM_THREADS)")
    parser.add_argument("--rounds", type=positive, default=3, help="rounds of the three servers (default 3)")
    parser.add_argument("--write", action="store_true", help="replace this section of benchmarks/RESULTS.md")
    parser.add_argument("--results", help="another results file to write")
    args = parser.parse_args(argv)
    if (args.model is None) != (args.model2 is None):
        parser.error("give both --model and --model2, or neither (then the demo models are trained)")
    pair_a, pair_b = (args.source_lang, args.target_lang), (args.source_lang2, args.target_lang2)
    if pair_a == pair_b:
        parser.error(f"A and B both translate {pair_a[0]} into {pair_a[1]}: one server serves one model per pair")
    for option, path in (("--model", args.model), ("--model2", args.model2), ("--sentences", args.sentences),
                         ("--sentences2", args.sentences2)):
        if path is not None and not path.exists():
            parser.error(f"{option} {path} does not exist")
    set_threads(args.threads)
    machine = machine_description()  # the load before anything runs
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        if args.model is None:
            model_a = make_demo_model(folder / "a", args.train_steps, source_lang=pair_a[0], target_lang=pair_a[1])
            model_b = make_demo_model(folder / "b", args.train_steps, source_lang=pair_b[0], target_lang=pair_b[1])
            described = (f"the number-words demo models ({pair_a[0]} -> {pair_a[1]} and {pair_b[0]} -> {pair_b[1]}; "
                         f"each d_model 64, 2+2 layers, {args.train_steps} Adam steps of 64 pairs), exported to "
                         "CTranslate2 float32")
        else:
            model_a, model_b = args.model, args.model2
            described = args.model_description or f"A {args.model}, B {args.model2}"
        jobs, expected = {}, {}
        for name, model, (source, target), sentences in (("a", model_a, pair_a, args.sentences),
                                                         ("b", model_b, pair_b, args.sentences2 or args.sentences)):
            pool = (sentences.read_text(encoding="utf-8").splitlines() if sentences
                    else demo_sentences(source_lang=source))
            chosen = [pool[i % len(pool)] for i in range(args.requests)]
            unique = list(dict.fromkeys(chosen))
            (folder / name).mkdir(exist_ok=True)
            by_sentence = dict(zip(unique, command_translations(model, unique, folder / name)))
            jobs[name] = [(sentence, source, target) for sentence in chosen]
            expected[name] = [by_sentence[sentence] for sentence in chosen]
        jobs["ab"], expected["ab"] = interleave(jobs["a"], jobs["b"]), interleave(expected["a"], expected["b"])
        warm = {name: jobs[name][:WARM_UP] for name in ("a", "b")}
        warm["ab"] = interleave(warm["a"], warm["b"])
        servers = {"a": ([model_a], ["--source-lang", pair_a[0], "--target-lang", pair_a[1]]),
                   "b": ([model_b], ["--source-lang", pair_b[0], "--target-lang", pair_b[1]]),
                   "ab": ([model_a, model_b], [])}  # each pair from its export, as a user serves two
        rounds = []
        for round_number in range(args.rounds):
            measured = {}
            for name, (models, server_args) in servers.items():
                measured[name] = serve_and_measure(models, server_args, jobs[name], expected[name], warm[name],
                                                   args.clients)
                print(f"  round {round_number + 1}, {name}: {measured[name]}", file=sys.stderr)
            rounds.append(measured)
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine,
              "software": software_versions(), "model": described, "pair_a": " -> ".join(pair_a),
              "pair_b": " -> ".join(pair_b), "requests": args.requests, "clients": args.clients,
              "threads": args.threads, "rounds_count": args.rounds, "rounds": rounds, "summary": summarize(rounds)}
    quoted = [shlex.quote(arg) for arg in (argv if argv is not None else sys.argv[1:])]
    publish(SECTION, render, result, "benchmarks.serve_two_models", quoted, args.write, args.results)
    return result


if __name__ == "__main__":
    main()
