"""`vanilla-transformer serve` with two language pairs (English into German, CTranslate2; German into French,
PyTorch), driven by a LibreTranslate client nobody here wrote: the npm package `libretranslate` 1.0.1 (its whole
code is dist/translate.js: `translate({query, source, target, format, apiurl, apiKey})` GETs `/languages`, checks
source and target among its codes and "auto", POSTs JSON to `/translate` and returns `translatedText`), run by Node.

The package is never downloaded here: `.ci/run` unpacks npm's tarball of it into `.ci-node/` (or set
`VT_LIBRETRANSLATE_NPM` to the package folder); without Node or the package the tests skip, saying how to install
them. A driver script calls the client for each case of a JSON list and records every request the client makes
(its own `fetch`, wrapped: the URL, the method, the body it sent, the status and body it got), so that the tests
check what the client sends as well as what it returns. The answers are compared with what the library itself
translates, each text alone.
"""

import json
import os
import shutil
import subprocess

import httpx
import pytest
from serve_fixtures import SENTENCES, server_in_thread

from helpers import REPO_ROOT

pytest.importorskip("fastapi")
pytest.importorskip("py3langid")
pytest.importorskip("ctranslate2")
num2words = pytest.importorskip("num2words").num2words

from vanilla_transformer.serve import ServeSettings  # noqa: E402
from vanilla_transformer.serve.engine import TranslationEngine  # noqa: E402
from vanilla_transformer.translate import load_model_and_tokenizer, translate  # noqa: E402

VERSION = "1.0.1"
PACKAGE = os.environ.get("VT_LIBRETRANSLATE_NPM") or str(REPO_ROOT / ".ci-node" / "node_modules" / "libretranslate")
INSTALL = (f"npm pack libretranslate@{VERSION} and extract its package/ folder to {PACKAGE}, as .ci/run does, or "
           "set VT_LIBRETRANSLATE_NPM to such a folder")
GERMAN = [num2words(n, lang="de") for n in (3, 17, 42, 99, 105, 256, 731, 1999)]
UNLISTED = "TypeError: This language was not found/does not exist."  # the client's own check, before any POST

# Calls the client's translate() for each case of the JSON list on stdin (`apiurl` filled in), one after the other;
# prints one JSON list: per case what it returned (its type and value) or threw (name: message), and the requests it
# made through fetch.
DRIVER = """
const { translate } = require(process.argv[2]);
const realFetch = globalThis.fetch;
let calls = [];
globalThis.fetch = async (url, options = {}) => {
  const response = await realFetch(url, options);
  calls.push({url: String(url), method: options.method || "GET",
              body: options.body === undefined ? null : JSON.parse(options.body),
              status: response.status, answer: await response.clone().text()});
  return response;
};
(async () => {
  const cases = JSON.parse(require("fs").readFileSync(0, "utf8"));
  const results = [];
  for (const options of cases) {
    calls = [];
    try {
      const text = await translate({...options, apiurl: process.argv[3]});
      results.push({type: typeof text, text: text === undefined ? null : text, calls});
    } catch (error) {
      results.push({error: `${error.name}: ${error.message}`, calls});
    }
  }
  process.stdout.write(JSON.stringify(results));
})();
"""


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """run(url, cases) -> the driver's results: the npm client under Node (skips without them)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (apt-get install nodejs)")
    manifest = os.path.join(PACKAGE, "package.json")
    if not os.path.isfile(manifest):
        pytest.skip(f"the npm package libretranslate is not installed ({INSTALL})")
    with open(manifest, encoding="utf-8") as f:
        version = json.load(f).get("version")
    if version != VERSION:
        pytest.skip(f"{PACKAGE} holds libretranslate {version}, these tests drive {VERSION} ({INSTALL})")
    driver = tmp_path_factory.mktemp("npm-client") / "driver.js"
    driver.write_text(DRIVER)

    def run(url: str, cases: list[dict]) -> list[dict]:
        done = subprocess.run([node, str(driver), PACKAGE, url], input=json.dumps(cases), capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        results = json.loads(done.stdout)
        assert len(results) == len(cases)
        return results

    return run


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


def posted(result: dict) -> dict:
    """The body of the one POST the client made, after its one GET of /languages."""
    calls = result["calls"]
    assert [(call["method"], call["url"].rsplit("/", 1)[1]) for call in calls] == [("GET", "languages"),
                                                                                  ("POST", "translate")], calls
    assert calls[0]["status"] == 200
    return calls[1]["body"]


def test_each_pair_and_a_list(client, url, oracles):
    cases = [{"query": text, "source": "en", "target": "de"} for text in SENTENCES[:3]]
    cases += [{"query": text, "source": "de", "target": "fr"} for text in GERMAN[:3]]
    cases.append({"query": SENTENCES[3:5], "source": "en", "target": "de"})  # passed through as q: a list back
    results = client(url, cases)
    for case, result in zip(cases[:6], results):
        assert result["type"] == "string", result
        assert result["text"] == alone(oracles[case["source"], case["target"]], case["query"])
        # the client's request shape: format "text" and an empty apiKey (camelCase) sent whether asked or not
        assert posted(result) == {"q": case["query"], "source": case["source"], "target": case["target"],
                                  "format": "text", "apiKey": ""}
    assert results[6]["text"] == [alone(oracles["en", "de"], text) for text in SENTENCES[3:5]]


def test_source_omitted_is_sent_as_auto_and_detected(client, url, oracles):
    cases = [{"query": GERMAN[3], "target": "fr"}, {"query": GERMAN[4], "target": "fr"},
             {"query": SENTENCES[4], "target": "fr"}, {"query": SENTENCES[5], "target": "de"}]
    results = client(url, cases)
    assert [posted(result)["source"] for result in results] == ["auto"] * 4
    assert [json.loads(result["calls"][1]["answer"])["detectedLanguage"]["language"] for result in results] == [
        "de", "de", "en", "en"]
    assert results[0]["text"] == alone(oracles["de", "fr"], GERMAN[3])
    assert results[1]["text"] == alone(oracles["de", "fr"], GERMAN[4])
    assert results[2]["text"] == alone(oracles["de", "fr"], alone(oracles["en", "de"], SENTENCES[4]))
    assert results[3]["text"] == alone(oracles["en", "de"], SENTENCES[5])


def test_html_keeps_its_markup_and_translates_its_text(client, url, oracles):
    page = f'<p>{GERMAN[5]}</p><code>{GERMAN[6]}</code><p class="x">{GERMAN[7]}</p>'
    result, = client(url, [{"query": page, "source": "de", "target": "fr", "format": "html"}])
    assert posted(result)["format"] == "html"
    assert result["text"] == (f'<p>{alone(oracles["de", "fr"], GERMAN[5])}</p><code>{GERMAN[6]}</code>'
                              f'<p class="x">{alone(oracles["de", "fr"], GERMAN[7])}</p>')


def test_the_pivot_through_german(client, url, oracles):
    cases = [{"query": text, "source": "en", "target": "fr"} for text in SENTENCES[6:9]]
    cases.append({"query": f"<b>{SENTENCES[9]}</b><code>{SENTENCES[10]}</code>", "source": "en", "target": "fr",
                  "format": "html"})
    results = client(url, cases)
    for text, result in zip(SENTENCES[6:9], results):
        assert result["text"] == alone(oracles["de", "fr"], alone(oracles["en", "de"], text))
    assert results[3]["text"] == (f"<b>{alone(oracles['de', 'fr'], alone(oracles['en', 'de'], SENTENCES[9]))}</b>"
                                  f"<code>{SENTENCES[10]}</code>")


def test_a_language_not_listed_is_refused_by_the_client_itself(client, url):
    """The client throws its own TypeError after reading /languages, which does not list the code: no POST."""
    listed = {language["code"] for language in httpx.get(f"{url}/languages").json()}
    cases = [{"query": SENTENCES[0], "source": "en", "target": "es"},
             {"query": SENTENCES[0], "source": "xx", "target": "de"},
             {"query": SENTENCES[0], "target": "EN"}]  # codes are compared as they are
    assert not {"es", "xx", "EN"} & listed
    for result in client(url, cases):
        assert result["error"] == UNLISTED
        assert [(call["method"], call["url"], call["status"]) for call in result["calls"]] == [
            ("GET", f"{url}/languages", 200)]


def test_a_listed_pair_that_no_model_translates_is_our_400_which_the_client_returns_as_undefined(client, url):
    """French is listed (as a target), so the client's check lets fr -> en through: the server answers one 400 and
    the client, which reads translatedText whatever the status, returns undefined."""
    result, = client(url, [{"query": "trois", "source": "fr", "target": "en"}])
    assert result["type"] == "undefined"
    call = result["calls"][1]
    assert call["status"] == 400 and list(json.loads(call["answer"])) == ["error"]
    assert json.loads(call["answer"])["error"].startswith("fr is not supported as source language")


def test_the_client_s_api_key_is_not_read(client, served_ct2_dir):
    """The client sends its key as `apiKey`; LibreTranslate reads `api_key` only (`get_req_api_key`), and so does
    this server: a server that needs a key refuses the client's request as one without a key (403, one error), and
    the client returns undefined. /languages needs no key, in both."""
    engine = TranslationEngine(served_ct2_dir)
    with server_in_thread(engine, ServeSettings(api_keys=frozenset({"k1"}))) as base:
        result, = client(base, [{"query": SENTENCES[0], "source": "en", "target": "de", "apiKey": "k1"}])
        assert posted(result) == {"q": SENTENCES[0], "source": "en", "target": "de", "format": "text", "apiKey": "k1"}
        assert result["type"] == "undefined"
        call = result["calls"][1]
        assert call["status"] == 403 and json.loads(call["answer"]) == {
            "error": "Missing API key: this server needs an api_key with each request"}
        assert httpx.post(f"{base}/translate", json={**call["body"], "api_key": "k1"}).status_code == 200
