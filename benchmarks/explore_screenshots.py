"""The pictures of docs/explore.md: the explorer's page for a sentence translated by a trained model, and one step of
its walk-through.

    python -m benchmarks.explore_screenshots MODEL --text "a blue shirt" [--out docs] [--step 17] [--token 2]

MODEL is a saved translation model (one that translates: a picture of random weights shows nothing). Writes
OUT/explore.png (the attention views: encoder-decoder attention, the decoding step by step) and
OUT/explore-walkthrough.png (the walk-through at step --step, following token --token). Needs Debian's chromium
(/usr/bin/chromium) and playwright; every request that leaves the machine is refused.
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
    parser.add_argument("--text", required=True, help="the sentence to show")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs", help="folder for the two PNG files")
    parser.add_argument("--step", type=int, default=18, help="the walk-through's step to show, from 0 (default 18: "
                                                              "the decoder's encoder-decoder attention softmax)")
    parser.add_argument("--token", type=int, default=1, help="the token the walk-through follows (default 1)")
    parser.add_argument("--layer", type=int, default=-1, help="the layer shown (default -1: the last)")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from vanilla_transformer.cli.explore import load_model_and_tokenizer
    from vanilla_transformer.inspect.data import attention_data
    from vanilla_transformer.inspect.page import write_html

    model, tokenizer = load_model_and_tokenizer(args.model, "cpu")
    data = attention_data(model, tokenizer, args.text)
    print(f"{args.text!r} -> {data['translation']!r}")
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        page_path = Path(write_html(Path(tmp) / "explore.html", [data]))
        context = playwright.chromium.launch_persistent_context(
            str(Path(tmp) / "profile"), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1280, "height": 900}, device_scale_factor=1)
        context.route(re.compile(r"^(?!file:|data:|blob:|about:).*"), lambda route: route.abort())
        page = context.new_page()
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
    print(f"Wrote {args.out / 'explore.png'} and {args.out / 'explore-walkthrough.png'}")


if __name__ == "__main__":
    main()
