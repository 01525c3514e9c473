"""Fuzzing the webhook over its real transport (HTTPS), bodies split across writes and
chunked: never a 5xx, the server stays up, and a well-formed review is still answered
correctly after each fuzzed one. Bounded to a few seconds."""

import json

from fuzz_bodies import Framing, bodies, framings
from hypothesis import HealthCheck, example, given, settings
from split_http import send_split
from test_webhook_server import review

from hami_dcu.webhook.server import MAX_BODY


def assert_well_formed_review_still_answered(served) -> None:
    reply = send_split(served.url, "/webhook", json.dumps(review()).encode(), parts=2, chunked=True,
                       pause=0.0, cafile=str(served.ca_file))
    assert reply.status == 200
    response = reply.json()["response"]
    assert response["uid"] == "u-1" and response["allowed"] is True and response["patchType"] == "JSONPatch"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies(review()), framing=framings)
@example(body=b"", framing=Framing(parts=2, chunked=True, pause=0.0))  # an empty chunked body is one "0" chunk
def test_fuzzed_split_and_chunked_reviews_never_5xx(served_webhook, body, framing):
    reply = send_split(served_webhook.url, "/webhook", body, parts=framing.parts, chunked=framing.chunked,
                       pause=framing.pause, cafile=str(served_webhook.ca_file))
    assert reply.status < 500, reply.body
    answer = reply.json()
    if reply.status == 200:
        assert answer["kind"] == "AdmissionReview" and isinstance(answer["response"]["allowed"], bool)
        if not answer["response"]["allowed"]:
            assert answer["response"]["status"]["message"]
    else:
        assert reply.status in (400, 413) and answer["error"]
        assert reply.status == 400 or len(body) > MAX_BODY
    assert_well_formed_review_still_answered(served_webhook)
