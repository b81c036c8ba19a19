"""How fast the attention explorer answers, with the `multi30k` preset's shape (3 + 3 layers, 4 heads, d_model 256,
d_ff 1024; random weights: speed does not depend on them) and a tokenizer trained on Multi30k's English and German.

    python -m benchmarks.explore_speed [--repeats 3] [--write]

1. server start: from the "running on URL" line of `vanilla-transformer explore MODEL` to a page that can be used
   (the Source box and the Translate button shown in chromium). Goal: < 3 s. The time from launching the command to
   that line (Python, torch, transformers and gradio imports, loading the model) is reported beside it.
2. Translate to views: a 20-token sentence, from the translation appearing in the app to every view drawn in the
   explorer frame, the walk-through included. Goal: < 1 s. Click-to-translation (the model's decoding, greedy, 20
   target tokens) beside it.
3. the static page for that sentence: its size (goal: < 1 MB), and in it the walk-through: the time from opening the
   page to its first step drawn, and the time to draw each step after "next" (median and worst over all steps).
4. `attention_data` without and with the walk-through (the one extra forward pass with its hooks).

Needs Debian's chromium (/usr/bin/chromium) and playwright. `--write` replaces this benchmark's section of
benchmarks/RESULTS.md.
"""

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # run as `python benchmarks/NAME.py`: put the checkout on sys.path
    import checkout  # noqa: F401
from benchmarks.checkout import ROOT as REPO_ROOT  # noqa: E402
from benchmarks.report import machine_description, software_versions, write_section  # noqa: E402

# Multi30k beside the checkout (../shared), or beside the folder of worktrees (../../shared); --data_dir overrides
DATA = next((folder / "shared" / "data" / "multi30k" for folder in (REPO_ROOT.parent, REPO_ROOT.parent.parent)
             if (folder / "shared" / "data" / "multi30k").is_dir()), REPO_ROOT.parent / "shared" / "data" / "multi30k")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TARGET_TOKENS = 20


def build_model(folder: Path, data: Path = DATA) -> str:
    """A random multi30k-preset model and a Multi30k tokenizer saved in `folder`; returns a 20-token sentence."""
    import torch

    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    from vanilla_transformer.training.presets import PRESETS
    from vanilla_transformer.training.tokenizer import train_tokenizer

    files = [data / "train.en", data / "train.de"]
    if not all(f.is_file() for f in files):
        sys.exit(f"benchmarks/explore_speed.py: error: the Multi30k training files are missing from {data}")
    tokenizer = train_tokenizer(files=[str(f) for f in files], vocab_size=PRESETS["multi30k"].data["vocab_size"])
    torch.manual_seed(0)
    config = VanillaTransformerConfig(vocab_size=len(tokenizer), **PRESETS["multi30k"].model)
    model = VanillaTransformerForConditionalGeneration(config).eval()
    # random weights never stop by themselves: a translation of exactly 20 tokens, decoded greedily
    model.generation_config.update(num_beams=1, early_stopping=False, length_penalty=1.0,
                                   max_length=TARGET_TOKENS + 1, min_length=TARGET_TOKENS + 1)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    for line in (data / "val.en").read_text(encoding="utf-8").splitlines():
        if len(tokenizer(line)["input_ids"]) == TARGET_TOKENS:
            return line
    sys.exit("benchmarks/explore_speed.py: error: no validation sentence of 20 tokens")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure_once(folder: Path, sentence: str, playwright) -> dict:
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    launched = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "vanilla_transformer", "explore", str(folder), "--port", str(port),
                               "--device", "cpu"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    outside = []
    try:
        url = None
        while url is None:
            line = server.stdout.readline()
            if not line and server.poll() is not None:
                sys.exit("benchmarks/explore_speed.py: error: the explorer exited before serving")
            match = re.search(r"running on (http://\S+)", line)
            url = match.group(1) if match else None
        announced = time.perf_counter()
        with tempfile.TemporaryDirectory() as profile:
            context = playwright.chromium.launch_persistent_context(profile, executable_path=CHROMIUM,
                                                                    args=CHROMIUM_ARGS, headless=True)

            def guard(route):
                if re.match(r"^(https?|wss?)://127\.0\.0\.1(:\d+)?/", route.request.url):
                    route.continue_()
                else:
                    outside.append(route.request.url)
                    route.abort()

            context.route("**/*", guard)
            page = context.new_page()
            started_browser = time.perf_counter() - announced  # chromium's own start, taken off the page time
            page.goto(url)
            page.locator("#source textarea").wait_for()
            page.locator("#translate").wait_for()
            usable = time.perf_counter()
            page.locator("#source textarea").fill(sentence)
            clicked = time.perf_counter()
            page.locator("#translate").click()
            page.wait_for_function("document.querySelector('#translation textarea').value.length > 0", polling=10)
            translated = time.perf_counter()
            frame = page.frame_locator("#explorer-frame")
            frame.locator("#explorer[data-ready=true] rect.cell").first.wait_for()
            frame.locator("#positions").wait_for()
            frame.locator("#walkthrough[data-ready=true] #wt-body").wait_for()
            drawn = time.perf_counter()
            cells = frame.locator("rect.cell").count()
            context.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    if outside:
        sys.exit(f"benchmarks/explore_speed.py: error: requests left 127.0.0.1: {outside}")
    return {"launch_to_url": announced - launched, "url_to_usable": usable - announced - started_browser,
            "browser_start": started_browser, "click_to_translation": translated - clicked,
            "translation_to_views": drawn - translated, "cells": cells}


# in the page: the time "next" takes to draw the following step (synchronous), for every step
STEP_TIMES_JS = """() => {
  const times = [], next = document.getElementById("wt-next");
  while (!document.getElementById("wt-next").disabled) {
    const start = performance.now();
    document.getElementById("wt-next").click();
    times.push(performance.now() - start);
  }
  return times;
}"""


def measure_page(path: Path, playwright) -> dict:
    """The static page from disk: opening it to the walk-through's first step drawn, then each step's drawing."""
    with tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                                                headless=True)
        page = context.new_page()
        started = time.perf_counter()
        page.goto(path.as_uri())
        page.locator("#walkthrough[data-ready=true] #wt-body").wait_for()
        opened = time.perf_counter() - started
        steps = page.evaluate(STEP_TIMES_JS)
        context.close()
    return {"open_to_walkthrough": opened, "step_median_ms": statistics.median(steps), "step_worst_ms": max(steps),
            "steps": len(steps) + 1}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="server starts to measure (default 3; medians)")
    parser.add_argument("--data_dir", type=Path, default=DATA, help=f"Multi30k's files (default {DATA})")
    parser.add_argument("--write", action="store_true", help="write the table into benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from vanilla_transformer.cli.explore import load_model_and_tokenizer
    from vanilla_transformer.inspect.data import attention_data
    from vanilla_transformer.inspect.page import write_html

    machine = machine_description()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "multi30k-random"
        sentence = build_model(folder, args.data_dir)
        model, tokenizer = load_model_and_tokenizer(str(folder), "cpu")
        timings = {False: [], True: []}
        for _ in range(args.repeats):
            for walkthrough in (False, True):
                started = time.perf_counter()
                data = attention_data(model, tokenizer, sentence, walkthrough=walkthrough)
                timings[walkthrough].append(time.perf_counter() - started)
        page = write_html(Path(tmp) / "page.html", [data])
        page_bytes = os.path.getsize(page)
        with sync_playwright() as playwright:
            runs = [measure_once(folder, sentence, playwright) for _ in range(args.repeats)]
            pages = [measure_page(Path(page), playwright) for _ in range(args.repeats)]
    median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    worst = {key: max(run[key] for run in runs) for key in runs[0]}
    rows = [
        ("server start message -> usable page", "< 3 s", f"{median['url_to_usable']:.2f} s",
         f"{worst['url_to_usable']:.2f} s"),
        ("  (command launched -> start message)", "", f"{median['launch_to_url']:.1f} s",
         f"{worst['launch_to_url']:.1f} s"),
        (f"translation shown -> all views drawn ({median['cells']:.0f} cells)", "< 1 s",
         f"{median['translation_to_views']:.2f} s", f"{worst['translation_to_views']:.2f} s"),
        ("  (Translate clicked -> translation shown)", "", f"{median['click_to_translation']:.2f} s",
         f"{worst['click_to_translation']:.2f} s"),
        ("static page of the sentence", "< 1 MB", f"{page_bytes / 1e6:.2f} MB", ""),
        ("static page opened -> walk-through drawn", "< 1 s",
         f"{statistics.median(p['open_to_walkthrough'] for p in pages):.2f} s",
         f"{max(p['open_to_walkthrough'] for p in pages):.2f} s"),
        (f"walk-through: one step drawn after next ({pages[0]['steps']} steps)", "< 1 s",
         f"{statistics.median(p['step_median_ms'] for p in pages):.0f} ms",
         f"{max(p['step_worst_ms'] for p in pages):.0f} ms"),
        ("attention_data, without -> with the walk-through", "",
         f"{statistics.median(timings[False]):.2f} -> {statistics.median(timings[True]):.2f} s",
         f"{max(timings[False]):.2f} -> {max(timings[True]):.2f} s"),
    ]
    text = (f"`python -m benchmarks.explore_speed --repeats {args.repeats}`: the multi30k preset's shape "
            f"(3 + 3 layers, 4 heads, d_model 256, d_ff 1024, random weights), a {TARGET_TOKENS}-token sentence "
            f"translated into {len(data['target_tokens'])} tokens (greedy), chromium headless. {machine}; "
            f"{software_versions()}.\n\n"
            "| | goal | median | worst |\n|---|---|---|---|\n"
            + "\n".join(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows) + "\n")
    print(f"sentence: {sentence!r}\n")
    print(text)
    if args.write:
        write_section("## Attention explorer: speed", "## Attention explorer: speed\n\n" + text)


if __name__ == "__main__":
    main()
