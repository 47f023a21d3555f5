"""The HTTP server's application (FastAPI, run by uvicorn from serve.py): LibreTranslate's
API, so that its clients work unchanged, this project's own endpoints for what that API
cannot say, health and information, and a page to try it (docs/serving.md).

    POST /translate     LibreTranslate: q (a string or a list), source ("de" or "auto"),
                        target ("en"), format ("text"), alternatives; JSON or a form
    GET  /languages     LibreTranslate: the languages and their targets
    POST /v1/translate  n-best lists with scores, alignments, target prefixes, a seed
    POST /v1/score      the scores of given translations
    GET  /health        200 while the server takes requests, 503 while it drains
    GET  /info          the run, checkpoint, engine, decoding settings, limits
    GET  /              the page: a German text box and its English translation
    GET  /docs          the API in OpenAPI (FastAPI's own)

Every request's sentences go through one Batcher (batcher.py), so concurrent requests
are decoded together. The OpenAPI schema of each route (schema.py) is the contract: the
checks here refuse what it calls invalid, and nothing it calls valid. Errors have
LibreTranslate's shape, ``{"error": "..."}``: 400 for a malformed request (bad JSON, a
wrong type, a missing field or one the route does not take, an unsupported language), 413
for one over the size limits (nothing is decoded for it; a body past what the limits allow
is not even read), 503 with Retry-After when the queue is full or the server drains (a
request still waiting when the drain's time is up gets it too). The server has no
authentication (docs/serving.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import urllib.parse
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from transformer_tf2.serving import engines, schema
from transformer_tf2.serving.batcher import Batcher, Closed, Full, Job
from transformer_tf2.serving.drain import Counts, Drain, Middleware
from transformer_tf2.utils.errors import UserError

SEED_MAX = schema.SEED_MAX


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may hold (413 past either) and how requests are batched."""

    max_sentences: int = 128  # sentences per request
    max_chars: int = 2000  # characters per sentence
    max_batch: int = 64  # sentences decoded in one batch
    wait_ms: float = 5.0  # the most a job waits for company (batcher.py: only when it pays)
    max_queue: int = 1024  # sentences waiting or being decoded; past it: 503
    max_tokens: int = 4096  # padded source tokens in one batch (0: no bound)
    workers: int = 1  # batches decoded at once, each on one thread


class RequestError(Exception):
    """A request the server refuses: ``status`` and LibreTranslate's error text."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def max_body(limits: Limits) -> int:
    """The most bytes a request body may hold: two text fields (q and prefix, or q and
    targets) at the size limits, each character at its longest escape (a character
    outside the BMP: a JSON surrogate pair, 12 bytes, or 4 UTF-8 bytes percent-encoded,
    12 bytes), and 64 KiB for the rest. Past it: 413, the body unread."""
    return 2 * limits.max_sentences * (12 * limits.max_chars + 8) + 65536


async def read_body(request: Request, limits: Limits) -> bytes:
    """The request's body, read no further than :func:`max_body` (413 past it), so that
    a client cannot make the server hold an unbounded body in memory."""
    most = max_body(limits)
    too_large = RequestError(
        413, f"Invalid request: the request body exceeds the limit ({most} bytes)"
    )
    try:
        declared = int(request.headers.get("content-length", "0"))
    except ValueError:
        raise RequestError(400, "Invalid request: a malformed Content-Length") from None
    if declared > most:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > most:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


class Fields(dict):
    """A request's fields; ``form``: they came in a urlencoded form, where every value is
    a string (a number its digits, a boolean "true" or "false")."""

    form = False


async def read_fields(request: Request, limits: Limits, names: set[str]) -> Fields:
    """A request's fields: a JSON object, or a form (libretranslatepy posts one); 400
    for a field not in ``names`` (the route's schema: schema.fields)."""
    fields = await parse_fields(request, limits)
    unknown = sorted(set(fields) - names)
    if unknown:
        raise RequestError(
            400,
            f"Invalid request: unknown field {unknown[0]!r} (this endpoint takes "
            f"{', '.join(sorted(names))})",
        )
    return fields


async def parse_fields(request: Request, limits: Limits) -> Fields:
    kind = request.headers.get("content-type", "")
    body = await read_body(request, limits)
    if kind.startswith("application/x-www-form-urlencoded"):
        try:
            # strict: a percent-escape that is not UTF-8 is refused, not replaced by U+FFFD
            form = urllib.parse.parse_qs(
                body.decode("utf-8"), keep_blank_values=True, errors="strict"
            )
        except UnicodeDecodeError:
            raise RequestError(400, "Invalid request: the form is not UTF-8") from None
        repeated = sorted(k for k, v in form.items() if len(v) > 1)
        if repeated:  # as LibreTranslate: a list of sentences is JSON's
            raise RequestError(
                400,
                f"Invalid request: the form gives {repeated[0]} {len(form[repeated[0]])} "
                "times: a form field is given once (send a list of sentences as JSON)",
            )
        fields = Fields({k: v[0] for k, v in form.items()})
        fields.form = True
        return fields
    if kind.startswith("multipart/"):
        raise RequestError(400, "Invalid request: send JSON or a urlencoded form")
    if not body.strip():
        return Fields()
    try:
        fields = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: deep nesting
        raise RequestError(400, "Invalid JSON format") from None
    if not isinstance(fields, dict):
        raise RequestError(400, "Invalid request: the body must be a JSON object")
    return Fields(fields)


def texts(fields: dict, name: str, limits: Limits, required: bool = True) -> tuple[list, bool]:
    """Field ``name`` as a list of strings and whether it was one string; 400 for a
    missing field or a wrong type (null too), 413 past the size limits. A required field
    holds a sentence at least (not "" nor []), an optional one may be empty."""
    if name not in fields or (required and fields[name] in ("", [])):
        if required:
            raise RequestError(400, f"Invalid request: missing {name} parameter")
        return [], False
    value = fields[name]
    single = isinstance(value, str)
    values = [value] if single else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise RequestError(400, f"Invalid request: {name} must be a string or a list of strings")
    if len(values) > limits.max_sentences:
        raise RequestError(
            413,
            f"Invalid request: request ({len(values)} sentences) exceeds the limit "
            f"({limits.max_sentences} sentences)",
        )
    longest = max((len(v) for v in values), default=0)
    if longest > limits.max_chars:
        raise RequestError(
            413,
            f"Invalid request: a sentence of {longest} characters exceeds the limit "
            f"({limits.max_chars} characters)",
        )
    return values, single


def integer(fields: Fields, name: str, default: int, low: int = 0, high: int | None = None) -> int:
    """An integer field: a JSON number of no fraction (not a boolean, nor a string), or a
    form's decimal digits."""
    value = fields.get(name, default)
    if isinstance(value, bool) or (isinstance(value, str) and not fields.form):
        value = None
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: JSON's Infinity
        raise RequestError(400, f"Invalid request: {name} parameter is not a number") from None
    if number < low or (isinstance(value, float) and not value.is_integer()):
        raise RequestError(400, f"Invalid request: {name} must be a whole number >= {low}")
    if high is not None and number > high:
        raise RequestError(400, f"Invalid request: {name} must be at most {high}")
    return number


def flag(fields: Fields, name: str) -> bool:
    """A boolean field: JSON's true or false, or a form's "true", "false", "1", "0"."""
    value = fields.get(name, False)
    if fields.form and isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    if not isinstance(value, bool):
        raise RequestError(400, f"Invalid request: {name} must be true or false")
    return value


def create_app(
    engine: engines.Engine, limits: Limits = Limits(), drain_seconds: float = 30
) -> FastAPI:
    """The application serving ``engine`` under ``limits``; its batcher starts with the
    application and drains (at most ``drain_seconds``) when the server stops."""
    state: dict[str, Any] = {"drain": Drain(drain_seconds)}
    counts = Counts()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher = Batcher(
            lambda jobs: engines.run_jobs(engine, jobs),
            limits.max_batch,
            limits.wait_ms,
            limits.max_queue,
            workers=limits.workers,
            max_tokens=limits.max_tokens,
        )
        state["batcher"] = app.state.batcher = batcher
        state["drain"].bind()
        yield
        state["drain"].start()
        # the requests are answered (or given 503 at the deadline, their jobs dropped):
        # what is left is at most the batch being decoded, given what the time allows
        left = state["drain"].left()
        await asyncio.get_running_loop().run_in_executor(None, batcher.close, left)

    app = FastAPI(
        title="transformer_tf2 translation server",
        description=__doc__.split("\n\n")[0],
        lifespan=lifespan,
    )
    # serve.py's signal handling: start the drain, see when it is done, the counts
    app.state.drain = state["drain"].start
    app.state.drained = functools.partial(drained, state)
    app.state.counts = counts
    app.add_middleware(Middleware, drain=state["drain"], counts=counts)

    @app.exception_handler(RequestError)
    async def refused(request: Request, e: RequestError):
        return error(e.status, e.message, e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException):
        """Starlette's own refusals (404 for an unknown path, 405 for a method a route
        does not take, with its Allow header) in LibreTranslate's shape too."""
        return error(e.status_code, str(e.detail), dict(e.headers or {}))

    @app.exception_handler(UserError)
    async def user_error(request: Request, e: UserError):
        return error(400, f"Invalid request: {e}")

    decode = functools.partial(decode_job, state)
    add_libretranslate_routes(app, engine, limits, decode)
    add_own_routes(app, engine, limits, decode)
    add_status_routes(app, engine, limits, state, drain_seconds)
    counts.known = {route.path for route in app.routes}  # any other path is "other"
    return app


def drained(state: dict) -> bool:
    """Whether a drain that started is done: every accepted sentence decoded (or the
    drain's time up). Then serve.py closes the connections and stops."""
    drain = state["drain"]
    if not drain.draining or "batcher" not in state:
        return False
    return state["batcher"].pending == 0 or drain.left() == 0


async def client_gone(request: Request) -> None:
    """Returns when the client of ``request``, whose body has been read, disconnects: the
    server tells the application by a message, so nothing polls."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def decode_job(state: dict, request: Request, job: Job):
    """The job's results, decoded in a batch; 503 when the queue is full or the
    server drains past its deadline; None if the client went away meanwhile (its place
    is freed). It waits on events (the result, the client's departure, the drain), never
    on a timer, but for the drain's deadline."""
    drain = state["drain"]
    try:
        if drain.draining:  # no new decoding: only the accepted requests are answered
            raise Closed
        future = state["batcher"].submit(job)
    except Full as e:
        raise RequestError(
            503,
            f"Slowdown: the server's queue is full; retry after {e.retry_after} s",
            {"Retry-After": str(e.retry_after)},
        ) from None
    except Closed:
        raise RequestError(503, "The server is shutting down", {"Retry-After": "5"}) from None
    gone = asyncio.ensure_future(client_gone(request))
    draining = asyncio.ensure_future(drain.wait())
    try:
        while True:
            timeout = drain.left()
            if timeout is not None:
                if timeout <= 0:  # the drain's time is up: the job is dropped
                    future.cancel()
                    raise RequestError(
                        503,
                        "The server is shutting down: the request did not finish within "
                        "its drain time",
                        {"Retry-After": "5"},
                    )
            waits = {future, gone} | ({draining} if not draining.done() else set())
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if future.done():
                return future.result()
            if gone.done():
                future.cancel()  # the batcher frees its place
                return None
    except asyncio.CancelledError:  # the server cancelled the request: drop its job
        future.cancel()
        raise
    finally:
        gone.cancel()
        draining.cancel()


def check_languages(fields: dict, engine: engines.Engine) -> bool:
    """LibreTranslate's source and target; True where the source was "auto"."""
    for name in ("source", "target"):
        if not fields.get(name):
            raise RequestError(400, f"Invalid request: missing {name} parameter")
        if not isinstance(fields[name], str):
            raise RequestError(400, f"Invalid request: {name} must be a language code")
    source, target = fields["source"], fields["target"]
    if source not in (engine.source, "auto"):
        raise RequestError(400, f"{source} is not supported")
    if target != engine.target:
        raise RequestError(400, f"{target} is not supported")
    return source == "auto"


def add_libretranslate_routes(app: FastAPI, engine: engines.Engine, limits: Limits, decode) -> None:
    """LibreTranslate's endpoints: POST /translate and GET /languages."""

    contract = schema.libretranslate_translate(limits, engine)
    names = schema.fields(contract)

    @app.post("/translate", openapi_extra=contract)
    async def translate(request: Request):
        """LibreTranslate's translate: ``translatedText`` (a string, or a list for a
        list ``q``), ``alternatives`` when asked, ``detectedLanguage`` for "auto"."""
        fields = await read_fields(request, limits, names)
        sentences, single = texts(fields, "q", limits)
        auto = check_languages(fields, engine)
        if fields.get("format", "text") != "text":
            raise RequestError(400, f"{fields['format']} is not supported: use format text")
        alternatives = integer(fields, "alternatives", 0)
        if not isinstance(fields.get("api_key", ""), str):  # accepted, not checked
            raise RequestError(400, "Invalid request: api_key must be a string")
        engine.check(alternatives + 1, False, None)
        key = ("translate", alternatives + 1, False, None)
        results = await decode(
            request, Job(sentences, key, alone=engine.sampling, tokens=engine.longest(sentences))
        )
        if results is None:
            return JSONResponse({}, status_code=499)
        best = [r[0].text if r else "" for r in results]
        others = [[h.text for h in r[1:]] for r in results]
        body: dict[str, Any] = {"translatedText": best[0] if single else best}
        if alternatives:
            body["alternatives"] = others[0] if single else others
        if auto:
            detected = {"confidence": 100.0, "language": engine.source}
            body["detectedLanguage"] = detected if single else [detected] * len(sentences)
        return body

    @app.get("/languages", openapi_extra=schema.languages())
    async def languages():
        """LibreTranslate's languages: the model's source, with its one target."""
        name = engines.LANGUAGE_NAMES
        return [
            {
                "code": engine.source,
                "name": name.get(engine.source, engine.source),
                "targets": [engine.target],
            },
            {"code": engine.target, "name": name.get(engine.target, engine.target), "targets": []},
        ]


def add_own_routes(app: FastAPI, engine: engines.Engine, limits: Limits, decode) -> None:
    """The own endpoints: /v1/translate and /v1/score."""

    contract = schema.own_translate(limits, engine)
    # a seed on an engine that does not sample: engine.check's refusal says why
    names = schema.fields(contract) | {"seed"}

    @app.post("/v1/translate", openapi_extra=contract)
    async def translate_v1(request: Request):
        """Per sentence its ``n_best`` hypotheses: text, score, Pharaoh alignment (with
        ``alignments``), runaway; ``prefix``: per sentence the text its translations
        start with; ``seed``: the draws of a sampling server."""
        fields = await read_fields(request, limits, names)
        sentences, _ = texts(fields, "q", limits)
        n_best = integer(fields, "n_best", 1, low=1)
        alignments = flag(fields, "alignments")
        prefixes, one = texts(fields, "prefix", limits, required=False)
        if one:  # one string: every sentence's prefix
            prefixes = prefixes * len(sentences)
        if prefixes and len(prefixes) != len(sentences):
            raise RequestError(
                400, f"Invalid request: {len(prefixes)} prefixes for {len(sentences)} sentences"
            )
        # a seed of 32 bits: the TensorFlow engine's draws key on those, CTranslate2 takes no more
        seed = integer(fields, "seed", 0, high=SEED_MAX) if "seed" in fields else None
        engine.check(n_best, alignments, seed)
        key = ("translate", n_best, alignments, seed)
        job = Job(
            sentences,
            key,
            {"prefixes": prefixes or None},
            alone=engine.sampling,
            tokens=engine.longest(sentences),
        )
        results = await decode(request, job)
        if results is None:
            return JSONResponse({}, status_code=499)
        return {"translations": [[dataclasses.asdict(h) for h in r] for r in results]}

    score_contract = schema.own_score(limits)
    score_names = schema.fields(score_contract)

    @app.post("/v1/score", openapi_extra=score_contract)
    async def score_v1(request: Request):
        """The summed log-probability of each target given its source, and each token's."""
        fields = await read_fields(request, limits, score_names)
        sentences, _ = texts(fields, "q", limits)
        targets, one = texts(fields, "targets", limits)
        if one:  # one string: every sentence's target
            targets = targets * len(sentences)
        if len(targets) != len(sentences):
            raise RequestError(
                400, f"Invalid request: {len(targets)} targets for {len(sentences)} sentences"
            )
        results = await decode(
            request,
            Job(sentences, ("score",), {"targets": targets}, tokens=engine.longest(sentences)),
        )
        if results is None:
            return JSONResponse({}, status_code=499)
        return {"scores": [{"score": s.score, "tokens": s.tokens} for s in results]}


def add_status_routes(
    app: FastAPI, engine: engines.Engine, limits: Limits, state: dict, drain_seconds: float
) -> None:
    """/health, /info and the page at /."""

    @app.get("/health", openapi_extra=schema.health())
    async def health():
        if state["drain"].draining:
            return error(503, "The server is shutting down", {"Retry-After": "5"})
        return {"status": "ok", "queued": state["batcher"].pending}

    @app.get("/info", openapi_extra=schema.info())
    async def info():
        return {
            **engine.info(),
            "limits": dataclasses.asdict(limits),
            "drain_seconds": drain_seconds,
            "batches": dataclasses.asdict(state["batcher"].stats),
        }

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page():
        return resources.files("transformer_tf2.serving").joinpath("page.html").read_text("utf-8")
