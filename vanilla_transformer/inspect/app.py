"""The live explorer (Gradio): a text box, the decoding choices, the translation, and the explorer page for that
sentence; its API endpoint `/translate` returns the translation and the attention data.

Gradio is an optional extra (`pip install "vanilla-transformer[demo]"`): it is imported when an app is built.
Nothing is fetched from the network: the app uses system fonts, and Gradio's analytics are turned off.
"""

import html
import os

from vanilla_transformer.extras import import_extra
from vanilla_transformer.inspect.attention_run import configuration_of
from vanilla_transformer.inspect.data import attention_data
from vanilla_transformer.inspect.page import page_data, render_page
from vanilla_transformer.inspect.training_view import render_training_page, training_data

DECODING_CHOICES = ("greedy", "beam search", "sampling")
MAX_TEXT_CHARACTERS = 2000  # a text box longer than this is cut before tokenizing (the model reads far fewer tokens)


def _gradio():
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # before gradio is imported: no analytics calls
    return import_extra("gradio", "demo", "The explorer app")  # imported only when an app is built


def offline_theme():
    """Gradio's default look with system fonts: the default theme would load its fonts from Google."""
    gr = _gradio()
    return gr.themes.Default(font=[gr.themes.Font("system-ui"), "sans-serif"],
                             font_mono=[gr.themes.Font("ui-monospace"), "monospace"])


def offline_blocks_class():
    """`gr.Blocks` whose `launch()` uses `offline_theme` (system fonts) unless given another theme."""
    gr = _gradio()

    class OfflineBlocks(gr.Blocks):
        def launch(self, *args, **kwargs):
            kwargs.setdefault("theme", offline_theme())
            return super().launch(*args, **kwargs)

    return OfflineBlocks


def decoding_arguments(strategy: str, num_beams: float, temperature: float) -> dict:
    """generate's arguments for one of DECODING_CHOICES; a ValueError names a bad value."""
    if strategy == "greedy":
        return {"num_beams": 1, "do_sample": False}
    if strategy == "beam search":
        num_beams = int(num_beams)
        if num_beams < 1:
            raise ValueError(f"the number of beams must be at least 1, got {num_beams}")
        return {"num_beams": num_beams, "do_sample": False}
    if strategy == "sampling":
        if not temperature or temperature <= 0:
            raise ValueError(f"the temperature must be positive, got {temperature}")
        return {"num_beams": 1, "do_sample": True, "temperature": float(temperature)}
    raise ValueError(f"decoding {strategy!r} is not one of {', '.join(DECODING_CHOICES)}")


def explore_text(model, tokenizer, text: str, strategy: str = "greedy", num_beams: int = 4,
                 temperature: float = 1.0) -> tuple[str, dict, str]:
    """What the app's Translate button (and its `/translate` endpoint) does: (translation, attention data, the
    views as an iframe). A ValueError says what is wrong with the input."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("The source text is empty: type a sentence.")
    notes = []
    if len(text) > MAX_TEXT_CHARACTERS:
        notes.append(f"The text has {len(text)} characters; only the first {MAX_TEXT_CHARACTERS} were read.")
        text = text[:MAX_TEXT_CHARACTERS]
    generate_kwargs = decoding_arguments(strategy, num_beams, temperature) \
        if configuration_of(model) != "encoder-only" else {}
    data = attention_data(model, tokenizer, text, **generate_kwargs)
    data["notes"] = notes + data["notes"]
    return data["translation"], data, iframe(data)


def iframe(data: dict) -> str:
    """The page for one text inside an iframe (its scripts run there, apart from the app's)."""
    return page_frame(render_page([data]))


def page_frame(page: str) -> str:
    """An explorer page inside an iframe (its scripts run there, apart from the app's)."""
    return (f'<iframe id="explorer-frame" title="Attention explorer" srcdoc="{html.escape(page, quote=True)}" '
            'style="width:100%;height:1200px;border:0" sandbox="allow-scripts"></iframe>')


# The app's side of explore.js's tellHeight: the frame takes the height of the page it shows (no inner scrolling).
_FIT_FRAME_JS = """
window.addEventListener("message", function (event) {
  var height = event.data && event.data["vanilla-transformer-explorer-height"];
  var frame = element.querySelector("iframe");
  if (height && frame && event.source === frame.contentWindow) frame.style.height = (height + 16) + "px";
});
"""


def _default_decoding(model) -> tuple[str, int, float]:
    config = getattr(model, "generation_config", None)
    if config is None:  # encoder-only: nothing is generated
        return "greedy", 2, 1.0
    strategy = "sampling" if config.do_sample else "beam search" if (config.num_beams or 1) > 1 else "greedy"
    return strategy, max(config.num_beams or 1, 2), float(config.temperature or 1.0)


def build_app(model, tokenizer, title: str | None = None):
    """The live explorer: a **Source** text box, decoding choices (defaults from the model's generation config), a
    **Translate** button, the translation, and the views of the explorer page for that sentence. Its API endpoint
    `/translate` (text, decoding, beams, temperature) returns (translation, attention data as the page embeds them
    (`page.page_data`: the walk-through packed), views HTML).

    Returns a `gr.Blocks`; its `launch()` uses system fonts (no Google fonts) and Gradio's analytics are off.
    """
    gr = _gradio()
    configuration = configuration_of(model)

    OfflineBlocks = offline_blocks_class()
    name = getattr(model.config, "_name_or_path", "") or type(model).__name__
    title = title or f"Attention explorer: {os.path.basename(os.path.normpath(name)) or name}"
    strategy, beams, temperature = _default_decoding(model)
    verb = {"encoder-decoder": "Translate", "decoder-only": "Continue", "encoder-only": "Analyse"}[configuration]

    def run(text, strategy, num_beams, temperature):
        try:
            translation, data, views = explore_text(model, tokenizer, text, strategy, num_beams, temperature)
        except ValueError as error:
            raise gr.Error(str(error), print_exception=False) from None
        # the data as the page holds them: the walk-through's full values would be some 10 MB of JSON per sentence
        return translation, page_data(data), views

    with OfflineBlocks(title=title, analytics_enabled=False) as app:
        gr.Markdown(f"## {html.escape(title)}\n{type(model).__name__} ({configuration}): every layer and head of "
                    "its attention for your sentence. Hover a token to see what it attends to and what attends to it.")
        with gr.Row():
            with gr.Column(scale=3):
                source = gr.Textbox(label="Source", lines=2, placeholder="Type a sentence", elem_id="source")
            with gr.Column(scale=2):
                decoding = gr.Radio(list(DECODING_CHOICES), value=strategy, label="Decoding", elem_id="decoding",
                                    visible=configuration != "encoder-only")
                with gr.Row():
                    num_beams = gr.Slider(1, 8, value=beams, step=1, label="Beams (beam search)",
                                          visible=configuration != "encoder-only")
                    temp = gr.Slider(0.05, 2.0, value=temperature, step=0.05, label="Temperature (sampling)",
                                     visible=configuration != "encoder-only")
        button = gr.Button(verb, variant="primary", elem_id="translate")
        translation = gr.Textbox(label={"encoder-decoder": "Translation", "decoder-only": "Continuation",
                                        "encoder-only": "Text"}[configuration], interactive=False,
                                 elem_id="translation")
        views = gr.HTML(elem_id="views", js_on_load=_FIT_FRAME_JS)
        with gr.Accordion("Attention data (JSON)", open=False):
            data = gr.JSON(label="attention data")
        inputs = [source, decoding, num_beams, temp]
        button.click(run, inputs, [translation, data, views], api_name="translate")
        source.submit(run, inputs, [translation, data, views], api_name=False)
    return app


def build_training_app(run_dir: str, title: str | None = None):
    """The live training view of `run_dir` (`training_view`): the same page as `--html` writes, read from the run
    folder again at every page load and by the **Reload** button, so that it follows a run in progress."""
    gr = _gradio()
    name = os.path.basename(os.path.normpath(os.path.abspath(run_dir)))
    title = title or f"Training, watched: {name}"

    def load():
        try:
            return page_frame(render_training_page(training_data(run_dir)))
        except ValueError as error:
            raise gr.Error(str(error), print_exception=False) from None

    with offline_blocks_class()(title=title, analytics_enabled=False) as app:
        gr.Markdown(f"## {html.escape(title)}\nThe recordings of the run in `{html.escape(run_dir)}`: move the step "
                    "slider to see the attention align and the translation improve.")
        button = gr.Button("Reload (a run in progress records more steps)", elem_id="reload")
        views = gr.HTML(elem_id="views", js_on_load=_FIT_FRAME_JS)
        button.click(load, [], [views], api_name=False)
        app.load(load, [], [views], api_name=False)
    return app
