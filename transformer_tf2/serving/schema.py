"""The server's contract: the OpenAPI schemas of its request bodies and of its answers,
built from its size limits and its engine (app.py puts them on each route). The request
checks of app.py refuse exactly what these schemas call invalid, so that a request the
schema calls valid is never refused and every refusal is a documented status: 400 for a
malformed request, 413 past the size limits, 503 while the queue is full or the server
drains (docs/serving.md, "The API"; tests/test_schemathesis.py holds the server to it).

One rule of the own endpoints joins two fields, which JSON Schema cannot say: a list of
``prefix`` (POST /v1/translate) or of ``targets`` (POST /v1/score) holds one entry per
sentence of ``q`` (one string is every sentence's). Their ``description`` says so, and
``x-same-length-as`` names the other field.
"""

from __future__ import annotations

from typing import Any

# a seed of 32 bits: the TensorFlow engine's draws key on those, CTranslate2 takes no more
SEED_MAX = 2**32 - 1
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}},
    "additionalProperties": False,
}
RETRY_AFTER = {
    "Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "string"}}
}
REFUSALS = {
    "400": "a malformed request: bad JSON, a wrong type, a missing or unknown field, an "
    "option the server was not started with",
    "413": "over the size limits (sentences per request, characters per sentence, bytes "
    "per body): nothing was decoded",
    "503": "the queue is full or the server is stopping: retry after Retry-After seconds",
}


def refusal(status: str) -> dict:
    """The answer of a refused request: LibreTranslate's ``{"error": "..."}``."""
    answer: dict[str, Any] = {
        "description": REFUSALS[status],
        "content": {JSON: {"schema": ERROR}},
    }
    if status == "503":
        answer["headers"] = RETRY_AFTER
    return answer


def texts(limits, required: bool) -> dict:
    """One sentence or a list of them: a required field (``q``, ``targets``) holds at
    least one sentence (a non-empty string, or a list of one string or more), an optional
    one (``prefix``) may be empty; at most ``max_sentences`` of ``max_chars`` each."""
    least = 1 if required else 0
    sentence = {"type": "string", "maxLength": limits.max_chars}
    return {
        "oneOf": [
            {**sentence, "minLength": least},
            {
                "type": "array",
                "items": sentence,
                "minItems": least,
                "maxItems": limits.max_sentences,
            },
        ]
    }


def whole(low: int, high: int | None = None, **more) -> dict:
    """An integer field from ``low`` to ``high``: in a form, its decimal digits."""
    field = {"type": "integer", "minimum": low, **more}
    if high is not None:
        field["maximum"] = high
    return field


def body(schema: dict, form: dict | None = None) -> dict:
    """A required request body of ``schema`` in JSON, and of ``form`` in a urlencoded
    form where LibreTranslate takes one (each field given once, a number in digits)."""
    content = {JSON: {"schema": schema}}
    if form:
        content[FORM] = {"schema": form}
    return {"required": True, "content": content}


def route(request: dict | None, answer: dict, *refusals: str) -> dict:
    """``openapi_extra`` of a route: its request body, its answer (200) and its refusals."""
    extra: dict[str, Any] = {
        "responses": {
            "200": {"description": "the answer", "content": {JSON: {"schema": answer}}},
            **{status: refusal(status) for status in refusals},
        }
    }
    if request is not None:
        extra["requestBody"] = request
    return extra


def one_or_list(item: dict) -> dict:
    """An answer's field: one ``item`` (for one string ``q``) or a list of them."""
    return {"anyOf": [item, {"type": "array", "items": item}]}


def libretranslate_translate(limits, engine) -> dict:
    """POST /translate: LibreTranslate's fields; ``alternatives`` at most the beam - 1."""
    request = {
        "type": "object",
        "required": ["q", "source", "target"],
        "additionalProperties": False,
        "properties": {
            "q": texts(limits, required=True),
            "source": {"type": "string", "enum": [engine.source, "auto"], "example": "de"},
            "target": {"type": "string", "enum": [engine.target], "example": "en"},
            "format": {"type": "string", "enum": ["text"], "default": "text"},
            "alternatives": whole(0, engine.max_n_best - 1, default=0),
            "api_key": {"type": "string", "description": "accepted, not checked"},
        },
    }
    detected = {
        "type": "object",
        "properties": {"confidence": {"type": "number"}, "language": {"type": "string"}},
    }
    answer = {
        "type": "object",
        "required": ["translatedText"],
        "properties": {
            "translatedText": one_or_list({"type": "string"}),
            "alternatives": one_or_list({"type": "array", "items": {"type": "string"}}),
            "detectedLanguage": one_or_list(detected),
        },
    }
    # a form (libretranslatepy's) holds one sentence: a list of them is JSON's
    one = {**texts(limits, required=True)["oneOf"][0]}
    form = {**request, "properties": {**request["properties"], "q": one}}
    return route(body(request, form), answer, "400", "413", "503")


def own_translate(limits, engine) -> dict:
    """POST /v1/translate: ``n_best`` at most the engine's, ``alignments`` where the
    engine gives them and only with ``n_best`` 1, ``seed`` on a sampling engine."""
    properties: dict[str, Any] = {
        "q": texts(limits, required=True),
        "n_best": whole(1, engine.max_n_best, default=1),
        "alignments": {"type": "boolean", "default": False},
        "prefix": {
            **texts(limits, required=False),
            "description": "the text the translations start with: a list holds one "
            "prefix per sentence of q, a string is every sentence's",
            "x-same-length-as": "q",
        },
    }
    request: dict[str, Any] = {
        "type": "object",
        "required": ["q"],
        "additionalProperties": False,
        "properties": properties,
    }
    if not engine.alignments:
        properties["alignments"]["enum"] = [False]
    elif engine.max_n_best > 1:  # alignments align the best translation only
        request["if"] = {"required": ["alignments"], "properties": {"alignments": {"const": True}}}
        request["then"] = {"properties": {"n_best": {"const": 1}}}
    if engine.sampling:
        properties["seed"] = whole(0, SEED_MAX, description="the draws of this request")
    hypothesis = {
        "type": "object",
        "required": ["text", "score", "alignment", "runaway"],
        "properties": {
            "text": {"type": "string"},
            "score": {"type": ["number", "null"]},
            "alignment": {"type": ["string", "null"]},
            "runaway": {"type": "boolean"},
        },
    }
    answer = {
        "type": "object",
        "required": ["translations"],
        "properties": {
            "translations": {"type": "array", "items": {"type": "array", "items": hypothesis}}
        },
    }
    return route(body(request), answer, "400", "413", "503")


def own_score(limits) -> dict:
    """POST /v1/score: a target per source."""
    request = {
        "type": "object",
        "required": ["q", "targets"],
        "additionalProperties": False,
        "properties": {
            "q": texts(limits, required=True),
            "targets": {
                **texts(limits, required=True),
                "description": "the translation to score: a list holds one per sentence "
                "of q, a string is every sentence's",
                "x-same-length-as": "q",
            },
        },
    }
    # (piece, log-probability)
    token = {"type": "array", "items": {"type": ["string", "number"]}, "minItems": 2, "maxItems": 2}
    score = {
        "type": "object",
        "required": ["score", "tokens"],
        "properties": {"score": {"type": "number"}, "tokens": {"type": "array", "items": token}},
    }
    answer = {
        "type": "object",
        "required": ["scores"],
        "properties": {"scores": {"type": "array", "items": score}},
    }
    return route(body(request), answer, "400", "413", "503")


def languages() -> dict:
    language = {
        "type": "object",
        "required": ["code", "name", "targets"],
        "properties": {
            "code": {"type": "string"},
            "name": {"type": "string"},
            "targets": {"type": "array", "items": {"type": "string"}},
        },
    }
    return route(None, {"type": "array", "items": language})


def health() -> dict:
    answer = {
        "type": "object",
        "required": ["status", "queued"],
        "properties": {"status": {"const": "ok"}, "queued": {"type": "integer", "minimum": 0}},
    }
    return route(None, answer, "503")


def info() -> dict:
    return route(None, {"type": "object"})


def fields(schema: dict) -> set[str]:
    """The fields a route's request body may hold (app.py refuses any other)."""
    return set(schema["requestBody"]["content"][JSON]["schema"]["properties"])
