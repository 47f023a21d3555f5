"""The server's request handling (transformer_tf2/serving/app.py) on a fake engine, through
Starlette's TestClient (the application's lifespan runs: its batcher starts and stops): the
answers' shapes, and every 400 and 413 path, for which nothing is decoded. No model."""

import json

import pytest
from fastapi.testclient import TestClient

from transformer_tf2.api import Hypothesis, Score
from transformer_tf2.serving import app as serving
from transformer_tf2.serving import engines

LIMITS = serving.Limits(max_sentences=4, max_chars=20, max_batch=8, wait_ms=0, max_queue=16)


class FakeEngine(engines.Engine):
    """Translates a sentence by reversing it (the prefix, if any, first); n hypotheses
    scored 0, -1, ...; scores a pair by the length of its target. Records its calls."""

    name = "fake"
    max_n_best = 3

    def __init__(self, sampling: bool = False, alignments: bool = True):
        self.sampling, self.alignments = sampling, alignments
        self.max_n_best = 64 if sampling else 3
        self.calls: list[tuple] = []

    def translate(self, sentences, n_best=1, prefixes=None, alignments=False, seed=None):
        self.calls.append(("translate", list(sentences), n_best, prefixes, alignments, seed))
        prefixes = prefixes or [""] * len(sentences)
        return [
            []
            if not s.strip()
            else [
                Hypothesis(p + s[::-1], -float(k), "0-0" if alignments else None)
                for k in range(n_best)
            ]
            for s, p in zip(sentences, prefixes)
        ]

    def score(self, sources, targets):
        self.calls.append(("score", list(sources), list(targets)))
        return [Score(-float(len(t)), [(t, -float(len(t)))]) for t in targets]

    def info(self):
        return {"engine": self.name}


@pytest.fixture
def client():
    engine = FakeEngine()
    with TestClient(serving.create_app(engine, LIMITS, drain_seconds=5)) as c:
        c.engine = engine
        yield c


def test_libretranslate_shapes(client):
    body = {"q": "abc", "source": "de", "target": "en"}
    assert client.post("/translate", json=body).json() == {"translatedText": "cba"}
    got = client.post("/translate", json={**body, "q": ["abc", "de", " "]}).json()
    assert got == {"translatedText": ["cba", "ed", ""]}
    got = client.post("/translate", json={**body, "alternatives": 2}).json()
    assert got == {"translatedText": "cba", "alternatives": ["cba", "cba"]}
    got = client.post("/translate", json={**body, "source": "auto", "q": ["a", "b"]}).json()
    detected = {"confidence": 100.0, "language": "de"}
    assert got == {"translatedText": ["a", "b"], "detectedLanguage": [detected, detected]}
    # a urlencoded form, as libretranslatepy posts it: each value a string
    assert client.post("/translate", data={**body, "q": "xy"}).json() == {"translatedText": "yx"}
    got = client.post("/translate", data={**body, "q": "xy", "alternatives": "1"}).json()
    assert got == {"translatedText": "yx", "alternatives": ["yx"]}
    # LibreTranslate's api_key is taken and not checked
    assert client.post("/translate", json={**body, "api_key": "k"}).json() == {
        "translatedText": "cba"
    }
    langs = client.get("/languages").json()
    assert langs[0] == {"code": "de", "name": "German", "targets": ["en"]}


def test_own_endpoints_shapes(client):
    got = client.post("/v1/translate", json={"q": ["ab"], "n_best": 2, "prefix": ["X"]})
    assert got.json() == {
        "translations": [
            [
                {"text": "Xba", "score": 0.0, "alignment": None, "runaway": False},
                {"text": "Xba", "score": -1.0, "alignment": None, "runaway": False},
            ]
        ]
    }
    got = client.post("/v1/translate", json={"q": ["ab"], "alignments": True}).json()
    assert got["translations"][0][0]["alignment"] == "0-0"
    # one prefix string is every sentence's; one target string too
    got = client.post("/v1/translate", json={"q": ["ab", "cd"], "prefix": "X"}).json()
    assert [t[0]["text"] for t in got["translations"]] == ["Xba", "Xdc"]
    got = client.post("/v1/score", json={"q": ["a", "b"], "targets": "xy"}).json()
    assert [s["score"] for s in got["scores"]] == [-2.0, -2.0]
    got = client.post("/v1/score", json={"q": ["a", "b"], "targets": ["xyz", "x"]}).json()
    assert [s["score"] for s in got["scores"]] == [-3.0, -1.0]
    assert client.get("/health").json() == {"status": "ok", "queued": 0}
    info = client.get("/info").json()
    assert info["engine"] == "fake" and info["limits"]["max_sentences"] == 4
    assert info["batches"]["batches"] == 5


REFUSED = [
    # (path, raw body or JSON value, content type, status, message)
    ("/translate", b"{bad", "application/json", 400, "Invalid JSON format"),
    ("/translate", b"\xff\xfe{}", "application/json", 400, "Invalid JSON format"),
    ("/translate", b"[" * 30000 + b"]" * 30000, "application/json", 400, "Invalid JSON format"),
    ("/v1/translate", b"{bad", "application/json", 400, "Invalid JSON format"),
    ("/translate", ["a"], None, 400, "the body must be a JSON object"),
    ("/translate", {"q": 5, "source": "de", "target": "en"}, None, 400, "q must be a string"),
    ("/translate", {"q": ["a", 5], "source": "de", "target": "en"}, None, 400, "q must be"),
    ("/translate", {"source": "de", "target": "en"}, None, 400, "missing q parameter"),
    ("/translate", {"q": "", "source": "de", "target": "en"}, None, 400, "missing q parameter"),
    ("/translate", {"q": "a", "target": "en"}, None, 400, "missing source parameter"),
    ("/translate", {"q": "a", "source": "de"}, None, 400, "missing target parameter"),
    ("/translate", {"q": "a", "source": ["de"], "target": "en"}, None, 400, "source must be"),
    ("/translate", {"q": "a", "source": "de", "target": 5}, None, 400, "target must be"),
    ("/translate", {"q": "a", "source": "fr", "target": "en"}, None, 400, "fr is not supported"),
    ("/translate", {"q": "a", "source": "de", "target": "de"}, None, 400, "de is not supported"),
    ("/translate", {"q": "a", "source": "de", "target": "en", "format": "html"}, None, 400, "html"),
    (
        "/translate",
        {"q": "a", "source": "de", "target": "en", "alternatives": "x"},
        None,
        400,
        "alternatives parameter is not a number",
    ),  # noqa: E501
    (
        "/translate",
        {"q": "a", "source": "de", "target": "en", "alternatives": -1},
        None,
        400,
        "alternatives must be a whole number",
    ),  # noqa: E501
    (
        "/translate",
        {"q": "a", "source": "de", "target": "en", "alternatives": 3},
        None,
        400,
        "4 translations per sentence asked; this server gives at most 3",
    ),  # noqa: E501
    (
        "/translate",
        b'{"q": "a", "source": "de", "target": "en", "alternatives": Infinity}',
        "application/json",
        400,
        "alternatives parameter is not a number",
    ),  # noqa: E501
    (
        "/translate",
        b"q=%FF&source=de&target=en",
        "application/x-www-form-urlencoded",
        400,
        "not UTF-8",
    ),  # noqa: E501
    (
        "/translate",
        b"--x--",
        "multipart/form-data; boundary=x",
        400,
        "send JSON or a urlencoded form",
    ),  # noqa: E501
    # the schema's types are JSON's: a number or a boolean in a string is refused (a form's
    # values are strings); null is no value; a field the endpoint does not take is refused
    (
        "/translate",
        {"q": "a", "source": "de", "target": "en", "alternatives": "1"},
        None,
        400,
        "alternatives parameter is not a number",
    ),
    (
        "/translate",
        {"q": "a", "source": "de", "target": "en", "format": ""},
        None,
        400,
        "is not supported: use format text",
    ),
    (
        "/translate",
        {"q": "a", "source": "de", "target": "en", "api_key": 5},
        None,
        400,
        "api_key must be a string",
    ),
    (
        "/translate",
        {"q": "a", "source": "de", "target": "en", "alternative": 1},
        None,
        400,
        "unknown field 'alternative' (this endpoint takes alternatives, api_key, format, q, "
        "source, target)",
    ),
    (
        "/translate",
        b"q=a&q=b&source=de&target=en",
        "application/x-www-form-urlencoded",
        400,
        "the form gives q 2 times: a form field is given once (send a list of sentences as JSON)",
    ),
    (
        "/v1/translate",
        {"q": ["a"], "alignments": "true"},
        None,
        400,
        "alignments must be true or false",
    ),
    ("/v1/translate", {"q": ["a"], "n_best": "2"}, None, 400, "n_best parameter is not a number"),
    ("/v1/translate", {"q": None}, None, 400, "q must be a string or a list of strings"),
    ("/v1/translate", {"q": ["a"], "prefix": None}, None, 400, "prefix must be a string"),
    ("/v1/translate", {"q": ["a"], "seed": None}, None, 400, "seed parameter is not a number"),
    ("/v1/translate", {"q": ["a"], "nbest": 2}, None, 400, "unknown field 'nbest'"),
    ("/v1/score", {"q": ["a"], "targets": ["x"], "n_best": 2}, None, 400, "unknown field 'n_best'"),
    ("/v1/translate", {"q": "a"}, None, 200, None),  # one string is one sentence
    ("/v1/translate", {"q": 5}, None, 400, "q must be a string or a list of strings"),
    ("/v1/translate", {}, None, 400, "missing q parameter"),
    ("/v1/translate", {"q": ["a"], "n_best": "x"}, None, 400, "n_best parameter is not a number"),
    ("/v1/translate", {"q": ["a"], "n_best": 0}, None, 400, "n_best must be a whole number >= 1"),
    ("/v1/translate", {"q": ["a"], "n_best": 1.5}, None, 400, "n_best must be a whole number"),
    ("/v1/translate", {"q": ["a"], "n_best": True}, None, 400, "n_best parameter is not a number"),
    ("/v1/translate", {"q": ["a"], "n_best": 4}, None, 400, "at most 3"),
    (
        "/v1/translate",
        {"q": ["a"], "alignments": "maybe"},
        None,
        400,
        "alignments must be true or false",
    ),  # noqa: E501
    ("/v1/translate", {"q": ["a"], "alignments": 1}, None, 400, "alignments must be true or false"),
    ("/v1/translate", {"q": ["a"], "prefix": [5]}, None, 400, "prefix must be a string"),
    ("/v1/translate", {"q": ["a"], "prefix": ["x", "y"]}, None, 400, "2 prefixes for 1 sentences"),
    ("/v1/translate", {"q": ["a"], "seed": 3}, None, 400, "a seed is for sampling"),
    ("/v1/translate", {"q": ["a"], "seed": "x"}, None, 400, "seed parameter is not a number"),
    ("/v1/translate", {"q": ["a"], "seed": -1}, None, 400, "seed must be a whole number >= 0"),
    ("/v1/score", {"q": ["a"]}, None, 400, "missing targets parameter"),
    ("/v1/score", {"q": ["a"], "targets": [1]}, None, 400, "targets must be a string"),
    ("/v1/score", {"q": ["a"], "targets": ["x", "y"]}, None, 400, "2 targets for 1 sentences"),
    # over the size limits (4 sentences, 20 characters): 413
    (
        "/translate",
        {"q": ["a"] * 5, "source": "de", "target": "en"},
        None,
        413,
        "request (5 sentences) exceeds the limit (4 sentences)",
    ),  # noqa: E501
    (
        "/translate",
        {"q": "x" * 21, "source": "de", "target": "en"},
        None,
        413,
        "a sentence of 21 characters exceeds the limit (20 characters)",
    ),  # noqa: E501
    ("/translate", {"q": "x" * 21, "source": "fr", "target": "en"}, None, 413, "21 characters"),
    ("/v1/translate", {"q": ["a"] * 5}, None, 413, "5 sentences"),
    ("/v1/translate", {"q": ["a"], "prefix": ["x" * 21]}, None, 413, "21 characters"),
    ("/v1/score", {"q": ["a"], "targets": ["x" * 21]}, None, 413, "21 characters"),
    ("/v1/score", {"q": ["a"] * 5, "targets": ["x"] * 5}, None, 413, "5 sentences"),
]


@pytest.mark.parametrize(
    "path, body, kind, status, message",
    REFUSED,
    ids=[f"{r[0]}-{r[3]}-{i}" for i, r in enumerate(REFUSED)],
)
def test_a_refused_request_gets_its_status_and_message_and_nothing_is_decoded(
    client, path, body, kind, status, message
):
    if isinstance(body, bytes):
        response = client.post(path, content=body, headers={"content-type": kind})
    else:
        response = client.post(path, json=body)
    assert response.status_code == status, response.text
    if status == 200:
        return
    assert message in response.json()["error"]
    assert set(response.json()) == {"error"}
    assert client.engine.calls == []  # nothing decoded for it
    assert client.get("/info").json()["batches"]["batches"] == 0


def test_an_unknown_path_or_method_is_refused_in_libretranslates_shape(client):
    response = client.get("/nowhere")
    assert response.status_code == 404 and response.json() == {"error": "Not Found"}
    response = client.get("/translate")
    assert response.status_code == 405 and response.json() == {"error": "Method Not Allowed"}
    assert response.headers["allow"] == "POST"


def test_the_schema_states_the_limits_and_the_engines_options(client):
    """The OpenAPI schema of serving/schema.py: what the checks of app.py refuse."""
    spec = client.get("/openapi.json").json()
    translate = spec["paths"]["/translate"]["post"]
    assert translate["requestBody"]["required"] is True
    fields = translate["requestBody"]["content"]["application/json"]["schema"]
    assert fields["additionalProperties"] is False
    q = fields["properties"]["q"]["oneOf"]
    assert q[0] == {"type": "string", "maxLength": 20, "minLength": 1}
    assert q[1]["maxItems"] == 4 and q[1]["minItems"] == 1
    assert fields["properties"]["alternatives"]["maximum"] == 2  # FakeEngine: 3 at most
    form = translate["requestBody"]["content"]["application/x-www-form-urlencoded"]["schema"]
    assert form["properties"]["q"] == q[0]  # a form holds one sentence
    assert set(translate["responses"]) == {"200", "400", "413", "503"}
    own = spec["paths"]["/v1/translate"]["post"]["requestBody"]["content"]["application/json"]
    own = own["schema"]
    assert "seed" not in own["properties"]  # FakeEngine does not sample
    assert own["then"] == {"properties": {"n_best": {"const": 1}}}  # alignments: n_best 1
    assert own["properties"]["prefix"]["oneOf"][1]["minItems"] == 0
    assert spec["paths"]["/health"]["get"]["responses"]["503"]["content"]


def test_a_body_past_what_the_limits_allow_is_refused_unread(client):
    most = serving.max_body(LIMITS)
    # a JSON body of the limits' longest escapes fits
    q = ["\U0001f600" * LIMITS.max_chars] * LIMITS.max_sentences
    body = json.dumps({"q": q, "prefix": q}).encode()
    assert len(body) <= most
    assert client.post("/v1/translate", content=body).status_code == 200
    # past the limit, with a Content-Length or streamed without one
    big = b'{"q": ["a"], "pad": "' + b"x" * most + b'"}'
    response = client.post("/v1/translate", content=big)
    assert response.status_code == 413 and f"({most} bytes)" in response.json()["error"]
    response = client.post("/v1/translate", content=iter([big[:1000], big[1000:]]))
    assert response.status_code == 413
    assert len(client.engine.calls) == 1


def test_alignments_on_an_engine_without_them_and_a_seed_on_a_sampling_one():
    engine = FakeEngine(sampling=True, alignments=False)
    engine.name = "nolinks"
    with TestClient(serving.create_app(engine, LIMITS)) as client:
        response = client.post("/v1/translate", json={"q": ["ab"], "alignments": True})
        assert response.status_code == 400
        assert response.json() == {
            "error": "Invalid request: alignments are not given by the nolinks engine"
        }
        assert engine.calls == []
        got = client.post("/v1/translate", json={"q": ["ab"], "seed": 7, "n_best": 5}).json()
        assert len(got["translations"][0]) == 5
        assert engine.calls == [("translate", ["ab"], 5, None, False, 7)]
        # a seed of 32 bits at most (CTranslate2 takes no more)
        body = {"q": ["ab"], "seed": 2**32 - 1}
        assert client.post("/v1/translate", json=body).status_code == 200
        response = client.post("/v1/translate", json={"q": ["ab"], "seed": 2**32})
        assert response.status_code == 400
        assert response.json() == {"error": "Invalid request: seed must be at most 4294967295"}
        assert len(engine.calls) == 2


def test_alignments_with_an_n_best_list_are_refused_before_any_decoding(client):
    """Alignments align the best translation: n_best 2 with alignments is a 400 up front,
    so no batch (and no other client's sentence in it) meets the refusal."""
    response = client.post("/v1/translate", json={"q": ["ab"], "n_best": 2, "alignments": True})
    assert response.status_code == 400
    assert response.json() == {
        "error": "Invalid request: alignments align the best translation: ask for n_best 1"
    }
    assert client.engine.calls == []
    got = client.post("/v1/translate", json={"q": ["ab"], "alignments": True}).json()
    assert got["translations"][0][0]["alignment"] == "0-0"


def test_health_is_503_once_the_server_drains():
    engine = FakeEngine()
    application = serving.create_app(engine, LIMITS, drain_seconds=5)
    with TestClient(application) as client:
        assert client.get("/health").status_code == 200
        application.state.drain()  # what serve.py does on SIGTERM
        response = client.get("/health")
        assert response.status_code == 503 and "shutting down" in response.json()["error"]


def test_a_drain_refuses_new_decoding_says_close_and_counts_every_answer():
    """From the drain on: new decoding gets 503 with Retry-After, every answer says
    Connection: close, and drained() (serve.py's cue to close the connections) holds once
    nothing accepted is left. The counts name each path read and each status answered;
    a path the server has not counts as "other"."""
    engine = FakeEngine()
    application = serving.create_app(engine, LIMITS, drain_seconds=5)
    with TestClient(application) as client:
        body = {"q": "ab", "source": "de", "target": "en"}
        response = client.post("/translate", json=body)
        assert response.status_code == 200 and "connection" not in response.headers
        client.get("/nowhere")
        client.get("/also/nowhere")
        assert not application.state.drained()
        application.state.drain()
        assert application.state.drained()  # nothing was accepted and left
        response = client.post("/translate", json=body)
        assert response.status_code == 503 and response.headers["retry-after"] == "5"
        assert response.json() == {"error": "The server is shutting down"}
        assert response.headers["connection"] == "close"
        assert client.get("/languages").headers["connection"] == "close"
        counts = application.state.counts
        assert counts.summary() == (
            "/languages: 1 read, answered 200 x1; /translate: 2 read, answered 200 x1, "
            "503 x1; other: 2 read, answered 404 x2"
        )
        assert counts.unanswered() == 0
    assert len(engine.calls) == 1
