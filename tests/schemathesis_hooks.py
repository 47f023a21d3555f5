"""schemathesis's hooks for tests/test_schemathesis.py (loaded through SCHEMATHESIS_HOOKS):
the one rule of the server's contract that JSON Schema cannot say (serving/schema.py) — a
list of ``prefix`` or ``targets`` holds one entry per sentence of ``q`` — is kept by the
cases schemathesis draws, as the schema's ``x-same-length-as`` asks."""

import schemathesis


def sentences(value) -> int | None:
    if isinstance(value, str):
        return 1
    return len(value) if isinstance(value, list) else None


@schemathesis.hook
def filter_case(context, case) -> bool:
    body = case.body
    if not isinstance(body, dict):
        return True
    for other in ("prefix", "targets"):
        if isinstance(body.get(other), list) and "q" in body:
            want = sentences(body["q"])
            if want is not None and want != len(body[other]):
                return False
    return True
