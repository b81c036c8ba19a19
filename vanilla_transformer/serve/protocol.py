"""LibreTranslate's /translate request, read and checked: `q`, `source`, `target`, `format`, `api_key`.

`read_fields` takes the fields from a JSON object or a form (URL-encoded or multipart), over the query string's;
`check_request` turns them into a `TranslateRequest` or raises `ApiError` with the status and message a
LibreTranslate client expects (400 bad input, 403 API key). Translating it is `app.translate_texts`.
"""

import json
from dataclasses import dataclass

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
    auto_source: bool  # source was "auto": answer with detectedLanguage


def _kind(value) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


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
        if not isinstance(data, dict):
            raise ApiError(400, f"Invalid request: the JSON body must be an object of fields, got {_kind(data)}")
        fields.update(data)
    elif content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        try:
            form = await request.form()
        except Exception as error:  # python-multipart's parse errors have no common base class
            raise ApiError(400, f"Invalid request: the form cannot be read ({' '.join(str(error).split())})") from None
        for name in form:
            values = [value for value in form.getlist(name) if isinstance(value, str)]
            fields[name] = values if name == "q" and len(values) > 1 else (values[0] if values else "")
    elif content_type and await request.body():
        raise ApiError(400, f"Invalid request: send the fields as JSON (application/json) or a form, not "
                            f"{content_type}")
    return fields


def _language(fields: dict, name: str, accepted: tuple[str, ...], pair: str) -> str:
    value = fields.get(name)
    if value is None or value == "":
        raise ApiError(400, f"Invalid request: missing {name} parameter")
    if not isinstance(value, str):
        raise ApiError(400, f"Invalid request: {name} must be a language code string, got {_kind(value)}")
    if value not in accepted:
        raise ApiError(400, f"{value} is not supported as {name} language: this server translates {pair}")
    return value


def check_request(fields: dict, *, source_lang: str, target_lang: str, char_limit: int,
                  batch_limit: int) -> TranslateRequest:
    """The checked request, or the `ApiError` of its first problem."""
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
        raise ApiError(400, "Invalid request: q is empty, there is nothing to translate")
    if len(texts) > batch_limit:
        raise ApiError(400, f"Invalid request: q has {len(texts)} texts, over this server's limit of {batch_limit} "
                            "texts per request")
    chars = sum(len(text) for text in texts)
    if chars > char_limit:
        raise ApiError(400, f"Invalid request: q has {chars} characters, over this server's limit of {char_limit} "
                            "characters per request")
    pair = f"{source_lang} into {target_lang}"
    source = _language(fields, "source", (source_lang, "auto"), pair)
    _language(fields, "target", (target_lang,), pair)
    text_format = fields.get("format") or "text"
    if text_format not in FORMATS:
        shown = text_format if isinstance(text_format, str) else _kind(text_format)
        raise ApiError(400, f"Invalid request: format {shown} is not supported (text or html)")
    return TranslateRequest(texts=texts, as_list=as_list, format=text_format, auto_source=source == "auto")


__all__ = ["FORMATS", "ApiError", "TranslateRequest", "check_request", "read_fields"]
