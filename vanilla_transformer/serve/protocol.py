"""LibreTranslate's /translate request, read and checked: `q`, `source`, `target`, `format`, `alternatives`,
`api_key`.

`read_fields` takes the fields from a JSON object or a form (URL-encoded or multipart), over the query string's;
`check_request` turns them into a `TranslateRequest` or raises `ApiError` with the status and message a
LibreTranslate client expects (400 bad input, 403 API key). Translating it is `app.translate_texts`.

Whatever the body holds, reading it ends in fields or in an `ApiError`: JSON nested deeper than the parser goes is
a 400, and so is a string anywhere in the fields that is not Unicode text (a lone surrogate such as the escaped
`\ud800`, which JSON allows and nothing after the parser can encode).
"""

import json
import re
from dataclasses import dataclass

from starlette.requests import ClientDisconnect

from vanilla_transformer.cards.model_card import LANGUAGE_CODE
from vanilla_transformer.serve.limits import BodyTooLarge

FORMATS = ("text", "html")
_JSON_TYPES = {bool: "a boolean", int: "a number", float: "a number", dict: "an object", list: "a list",
               type(None): "null"}


class ApiError(Exception):
    """An answer {"error": message} with HTTP `status` (and extra headers, e.g. Retry-After)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


@dataclass(frozen=True)
class TranslateRequest:
    texts: list[str]
    as_list: bool  # q was a list: answer a list
    format: str
    source: str  # a language code, or "auto": answer with detectedLanguage
    target: str
    alternatives: int = 0  # alternative translations asked for (0: answer no "alternatives")
    what: str = "q"  # what the texts are, for errors: "q", or "the file" of /translate_file

    @property
    def auto_source(self) -> bool:
        return self.source == "auto"


_SURROGATE = re.compile("[\ud800-\udfff]")


def _kind(value) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def check_unicode(fields: dict) -> None:
    """An `ApiError` (400) when a string anywhere in `fields` (names, values, nested lists and objects) holds a
    surrogate code point: it is no Unicode text, and would fail whatever encodes it later (tokenizer, log, answer)."""
    waiting: list = [("", fields)]  # (the top-level field it is in, value): a loop, as JSON may nest deep
    while waiting:
        field, value = waiting.pop()
        if isinstance(value, dict):
            for name, item in value.items():
                waiting.append((field or name, name))
                waiting.append((field or name, item))
        elif isinstance(value, list):
            waiting.extend((field, item) for item in value)
        elif isinstance(value, str) and not value.isascii() and _SURROGATE.search(value):
            shown = field if field.isascii() and field.isprintable() and len(field) <= 40 else "a field"
            raise ApiError(400, f"Invalid request: {shown} holds a lone surrogate (such as \\ud800), which is not "
                                "Unicode text")


def loggable(text) -> str:
    """`text` as one line of printable characters: what a client sent (a path, an address from a proxy header,
    an engine's message about a text) with its line breaks and control characters escaped, so that it cannot
    forge log lines."""
    text = str(text)
    return text if text.isprintable() else repr(text)[1:-1]


async def read_fields(request) -> dict:
    """The request's fields (a starlette Request): its JSON object or form, over its query parameters."""
    fields: dict = dict(request.query_params)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json":
        body = await request.body()
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, ValueError) as error:
            raise ApiError(400, f"Invalid request: the body is not valid JSON ({error})") from None
        except RecursionError:
            raise ApiError(400, "Invalid request: the JSON body is nested too deeply") from None
        if not isinstance(data, dict):
            raise ApiError(400, f"Invalid request: the JSON body must be an object of fields, got {_kind(data)}")
        fields.update(data)
    elif content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        try:
            form = await request.form()
        except (BodyTooLarge, ClientDisconnect):  # not the form's fault: the app's middleware answers these
            raise
        except Exception as error:  # python-multipart's parse errors have no common base class
            raise ApiError(400, f"Invalid request: the form cannot be read ({' '.join(str(error).split())})") from None
        for name in form:
            values = [value for value in form.getlist(name) if isinstance(value, str)]
            fields[name] = values if name == "q" and len(values) > 1 else (values[0] if values else "")
    elif content_type and await request.body():
        raise ApiError(400, f"Invalid request: send the fields as JSON (application/json) or a form, not "
                            f"{content_type}")
    check_unicode(fields)
    return fields


def language_field(fields: dict, name: str) -> str:
    """The code in field `name` (`source` or `target`), checked to be a code-like string; whether the server
    translates it is `models.ServedModels.route`'s to say."""
    value = fields.get(name)
    if value is None or value == "":
        raise ApiError(400, f"Invalid request: missing {name} parameter")
    if not isinstance(value, str):
        raise ApiError(400, f"Invalid request: {name} must be a language code string, got {_kind(value)}")
    if not (value == "auto" or LANGUAGE_CODE.fullmatch(value)):
        shown = value if len(value) <= 20 and value.isprintable() else f"{value[:20]!r}..."
        raise ApiError(400, f"{shown} is not supported as {name} language (not a language code)")
    return value


def alternatives_field(fields: dict, limit: int) -> int:
    """`alternatives`: how many other translations to answer (LibreTranslate's field: a number, negative as 0)."""
    value = fields.get("alternatives", 0)
    if value is None or value == "":
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ApiError(400, "Invalid request: alternatives parameter is not a number")
    try:
        number = int(value)
    except (ValueError, OverflowError):  # "x", "1.5", inf
        raise ApiError(400, "Invalid request: alternatives parameter is not a number") from None
    if isinstance(value, float) and value != number:
        raise ApiError(400, "Invalid request: alternatives parameter is not a number")
    number = max(0, number)
    if number > limit:
        raise ApiError(400, f"Invalid request: alternatives parameter must be <= {limit}")
    return number


def texts_field(fields: dict, *, char_limit: int, batch_limit: int, what: str = "q") -> tuple[list[str], bool]:
    """(the texts of `q`, whether q was a list), within the limits. `what` q holds, for errors ("q", or "the
    file" whose text /translate_file puts in q)."""
    q = fields.get("q")
    if q is None:
        raise ApiError(400, "Invalid request: missing q parameter")
    if isinstance(q, str):
        texts, as_list = [q], False
    elif isinstance(q, list):
        texts, as_list = q, True
        wrong = next((i for i, text in enumerate(q) if not isinstance(text, str)), None)
        if wrong is not None:
            raise ApiError(400, f"Invalid request: q must be a string or a list of strings; item {wrong} of q is "
                                f"{_kind(q[wrong])}")
    else:
        raise ApiError(400, f"Invalid request: q must be a string or a list of strings, got {_kind(q)}")
    if not q:
        raise ApiError(400, f"Invalid request: {what} is empty, there is nothing to translate")
    if len(texts) > batch_limit:
        raise ApiError(400, f"Invalid request: q has {len(texts)} texts, over this server's limit of {batch_limit} "
                            "texts per request")
    chars = sum(len(text) for text in texts)
    if chars > char_limit:
        raise ApiError(400, f"Invalid request: {what} has {chars} characters, over this server's limit of {char_limit} "
                            "characters per request")
    return texts, as_list


def check_request(fields: dict, *, char_limit: int, batch_limit: int, alternatives_limit: int = 3,
                  what: str = "q") -> TranslateRequest:
    """The checked request, or the `ApiError` of its first problem. `what` q holds, for errors (`texts_field`)."""
    texts, as_list = texts_field(fields, char_limit=char_limit, batch_limit=batch_limit, what=what)
    source = language_field(fields, "source")
    target = language_field(fields, "target")
    if target == "auto":
        raise ApiError(400, "auto is not supported as target language")
    text_format = fields.get("format") or "text"
    if text_format not in FORMATS:
        shown = text_format if isinstance(text_format, str) else _kind(text_format)
        raise ApiError(400, f"Invalid request: format {shown} is not supported (text or html)")
    return TranslateRequest(texts=texts, as_list=as_list, format=text_format, source=source, target=target,
                            alternatives=alternatives_field(fields, alternatives_limit), what=what)


__all__ = ["FORMATS", "ApiError", "TranslateRequest", "alternatives_field", "check_request", "check_unicode",
           "language_field", "loggable", "read_fields", "texts_field"]
