"""The pictures of docs/explore.md: the explorer's page for a sentence translated by a trained model, one step of
its walk-through, and the training view of a watched run.

    python -m benchmarks.explore_screenshots MODEL --text "a blue shirt" [--out docs] [--step 17] [--token 2]
    python -m benchmarks.explore_screenshots RUN_DIR --training [--recording 0.3] [--out docs]

MODEL is a saved translation model (one that translates: a picture of random weights shows nothing). Writes
OUT/explore.png (the attention views: encoder-decoder attention, the decoding step by step) and
OUT/explore-walkthrough.png (the walk-through at step --step, following token --token). With `--training`, RUN_DIR
is a training run's output folder with recordings (`--watch-steps`), and it writes OUT/explore-training.png: the
training view at the recording `--recording` of the way through the run (a fraction: 0 the first, 1 the last).
Needs Debian's chromium (/usr/bin/chromium) and playwright; every request that leaves the machine is refused.
"""

import argparse
import re
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a saved translation model (folder)")
    parser.add_argument("--text", help="the sentence to show (required without --training)")
    parser.add_argument("--training", action="store_true", help="MODEL is a watched run: its training view")
    parser.add_argument("--recording", type=float, default=0.3,
                        help="with --training, the recording shown, as a fraction of the way through the run")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs", help="folder for the two PNG files")
    parser.add_argument("--step", type=int, default=18, help="the walk-through's step to show, from 0 (default 18: "
                                                              "the decoder's encoder-decoder attention softmax)")
    parser.add_argument("--token", type=int, default=1, help="the token the walk-through follows (default 1)")
    parser.add_argument("--layer", type=int, default=-1, help="the layer shown (default -1: the last)")
    args = parser.parse_args(argv)
    if args.training:
        return training_screenshot(args)
    if not args.text:
        parser.error("--text is required (or --training for a run's training view)")
    from playwright.sync_api import sync_playwright

    from vanilla_transformer.cli.explore import load_model_and_tokenizer
    from vanilla_transformer.inspect.data import attention_data
    from vanilla_transformer.inspect.page import write_html

    model, tokenizer = load_model_and_tokenizer(args.model, "cpu")
    data = attention_data(model, tokenizer, args.text)
    print(f"{args.text!r} -> {data['translation']!r}")
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        page_path = Path(write_html(Path(tmp) / "explore.html", [data]))
        context = browser(playwright, tmp)
        page, errors = browser_page(context)
        page.goto(page_path.as_uri())
        page.locator("#walkthrough[data-ready=true]").wait_for()
        page.locator("#step").fill(str(min(3, len(data["steps"]) - 1)))
        bottom = page.locator("#steps").bounding_box()
        page.screenshot(path=str(args.out / "explore.png"), full_page=True,
                        clip={"x": 0, "y": 0, "width": 1280, "height": bottom["y"] + bottom["height"] + 12})
        layers = len(data["walkthrough"]["decoder"])
        page.locator("#wt-step").select_option(str(args.step))
        page.locator("#wt-layer").select_option(str(args.layer % layers))
        page.locator("#wt-token").select_option(str(args.token))
        page.locator("#walkthrough").screenshot(path=str(args.out / "explore-walkthrough.png"))
        context.close()
    if errors:
        raise SystemExit(f"the page logged errors: {errors}")
    print(f"Wrote {args.out / 'explore.png'} and {args.out / 'explore-walkthrough.png'}")


def browser(playwright, tmp: str):
    """Debian's chromium, headless, a fresh profile in `tmp`, every request that leaves the machine refused."""
    context = playwright.chromium.launch_persistent_context(
        str(Path(tmp) / "profile"), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
        viewport={"width": 1280, "height": 900}, device_scale_factor=1)
    context.route(re.compile(r"^(?!file:|data:|blob:|about:).*"), lambda route: route.abort())
    return context


def browser_page(context):
    """(a new page, the list its console errors and uncaught exceptions go to): a screenshot of a page that logged
    any is refused."""
    page = context.new_page()
    errors = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    return page, errors


def training_screenshot(args) -> None:
    """OUT/explore-training.png: the training view of the run in args.model at the recording args.recording of the
    way through."""
    from playwright.sync_api import sync_playwright

    from vanilla_transformer.inspect.training_view import render_training_page, training_data

    data = training_data(args.model)
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        page_path = Path(tmp) / "training.html"
        page_path.write_text(render_training_page(data), encoding="utf-8")
        context = browser(playwright, tmp)
        page, errors = browser_page(context)
        page.goto(page_path.as_uri())
        page.locator("#explorer[data-ready=true]").wait_for()
        last = int(page.locator("#training-step").get_attribute("max"))
        page.locator("#training-step").fill(str(round(min(max(args.recording, 0.0), 1.0) * last)))
        print(page.locator("#training-step-label").inner_text())
        page.screenshot(path=str(args.out / "explore-training.png"), full_page=True)
        context.close()
    if errors:
        raise SystemExit(f"the page logged errors: {errors}")
    print(f"Wrote {args.out / 'explore-training.png'}")


if __name__ == "__main__":
    main()
