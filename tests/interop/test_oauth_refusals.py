"""OAUTHBEARER refusals on the wire, and the differential against Kafka's own validator.

Tokens are minted by the provider's admin API (tests/oidc/provider.mjs `/mint`: its real keys, any
claims, or a forgery) or made here, and presented by a raw client (oauth_support.OAuthConn:
SaslHandshake v1, SaslAuthenticate v1) to
- Kafka's OAUTH listener (scripts/lib/kafka.sh: OAuthBearerValidatorCallbackHandler, KIP-768, with
  the same expected issuer and audience, against the same provider's key set), the reference, and
- a Portcullis with the issue's `[oauthbearer]` table (validator "jwks").

`test_refused_token` (each case on both endpoints): the server answers the token with the JSON
challenge `{"status":"invalid_token"}`, the client sends 0x01, and the server fails with
SASL_AUTHENTICATION_FAILED (58) whose message is that JSON (Kafka's OAuthBearerSaslServer).

`test_same_outcome_as_kafka` (Portcullis only): every case, accepted ones too, gives the same
outcome string on both (challenge bytes, error code, message, whether Metadata is then served);
the intentional differences are listed in INTENTIONAL and must hold exactly as listed.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Callable

import pytest

from oauth_support import (INVALID_TOKEN, Endpoint, Oidc, endpoint_of, kafka_endpoint, login, oidc,
                           start_oauth_portcullis)

__all__ = ["oidc"]

SKEW_S = 30  # clock_skew_seconds on both (Kafka's default, Portcullis' default)


@dataclass(frozen=True)
class Case:
    id: str
    make: Callable[[Oidc], str]  # the token, made when the case runs (times relative to then)
    refused: bool  # what Kafka does with it
    login_kwargs: tuple = ()  # (authzid, extensions) for the framing cases

    def kwargs(self) -> dict:
        return dict(self.login_kwargs)


def now() -> int:
    return int(time.time())


def minted(**kw) -> Callable[[Oidc], str]:
    def make(o: Oidc) -> str:
        resolved = {k: (v() if callable(v) else v) for k, v in kw.items()}
        return o.mint(**resolved)
    return make


REFUSED = [
    # The list.
    Case("expired", minted(claims=lambda: {"iat": now() - 600, "exp": now() - SKEW_S - 60}), True),
    Case("not-yet-valid", minted(claims=lambda: {"nbf": now() + SKEW_S + 120}), True),
    Case("wrong-audience", minted(claims={"aud": "not-kafka"}), True),
    Case("wrong-issuer", minted(claims={"iss": "http://127.0.0.1:9/another-issuer"}), True),
    Case("alg-none", minted(forge="alg-none"), True),
    Case("hs256-with-the-public-key", minted(forge="hs256-public-key"), True),
    Case("bad-signature", minted(forge="bad-signature"), True),
    Case("tampered-payload", minted(forge="tampered-payload", tampered_claims={"sub": "admin"}), True),
    Case("missing-sub", minted(claims={"sub": None}), True),
    Case("random-kid", minted(header=lambda: {"kid": f"random-{secrets.token_hex(8)}"}), True),
    Case("not-a-jwt", lambda o: "not-a-jwt", True),
    # More of KIP-768's rules.
    Case("signed-by-an-unpublished-key", minted(forge="unknown-key"), True),
    Case("missing-exp", minted(claims={"exp": None}), True),
    Case("missing-iat", minted(claims={"iat": None}), True),
    Case("issued-in-the-future", minted(claims=lambda: {"iat": now() + SKEW_S + 120}), True),
    Case("blank-sub", minted(claims={"sub": "   "}), True),
    Case("missing-audience", minted(claims={"aud": None}), True),
    Case("two-parts", lambda o: ".".join(o.mint().split(".")[:2]), True),
    Case("es256-signature-under-an-rs256-kid", lambda o: _swap_signature(o), True),
]

ACCEPTED = [
    Case("rs256", minted(), False),
    Case("es256", minted(key="ES256"), False),
    Case("client-credentials-token", lambda o: o.token(), False),
    Case("es256-client-credentials-token", lambda o: o.token(o.client("es256-client")), False),
    Case("audience-list-holding-kafka", minted(claims={"aud": ["other", "kafka"]}), False),
    Case("not-before-within-the-skew", minted(claims=lambda: {"nbf": now() + 10}), False),
    Case("no-kid", minted(header={"kid": None}), False),
    Case("scope-string", minted(claims={"scope": "kafka:read kafka:write"}), False),
    Case("scope-list", minted(claims={"scope": ["kafka:read", "kafka:write"]}), False),
    Case("unknown-claims", minted(claims={"tenant": "acme", "nested": {"a": [1, 2]}}), False),
    Case("32-kib-token", minted(claims={"pad": "p" * 24_000}), False),
    # Kafka: authenticated with lifetime 0, closed at the first request (§2.2's quirk).
    Case("expired-within-the-skew", minted(claims=lambda: {"iat": now() - 600, "exp": now() - 10}), False),
    Case("authzid-equal-to-sub", minted(claims={"sub": "alice-app"}), False, (("authzid", "alice-app"),)),
    Case("with-an-extension", minted(), False, (("extensions", {"traceId": "abc123"}),)),
]

FRAMING = [
    # Refused without a challenge: Kafka's SaslAuthenticationException / SaslException messages.
    Case("authzid-not-the-sub", minted(claims={"sub": "alice-app"}), True, (("authzid", "mallory"),)),
    Case("oversize-100-kib", minted(claims={"pad": "p" * 80_000}), False),
]

# Where Portcullis differs from Kafka on purpose: case -> (Portcullis' outcome, why).
INTENTIONAL = {
    "oversize-100-kib": (
        f"refused challenge={INVALID_TOKEN.decode()} error=58 message={INVALID_TOKEN.decode()}",
        "Portcullis refuses tokens over 64 KiB before decoding them (MAX_TOKEN_LEN); Kafka accepts up "
        "to its 512 KiB SASL frame limit",
    ),
}


def _swap_signature(o: Oidc) -> str:
    """An ES256 signature (valid for its own header) pasted under a header naming the RS256 key."""
    rs = o.mint().split(".")
    es = o.mint(key="ES256").split(".")
    return f"{rs[0]}.{rs[1]}.{es[2]}"


@pytest.fixture(scope="module")
def refusal_node(launcher, oidc):
    return start_oauth_portcullis(launcher, oidc, "oauth-refusals")


@pytest.fixture(params=["kafka", pytest.param("portcullis", marks=pytest.mark.portcullis_only)])
def endpoint(request) -> Endpoint:
    if request.param == "kafka":
        return kafka_endpoint()
    return endpoint_of(request.getfixturevalue("refusal_node"))


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: c.id)
def test_refused_token(oidc, endpoint, case):
    """The JSON challenge, 0x01, then SASL_AUTHENTICATION_FAILED with the JSON as its message."""
    r = login(endpoint.host, endpoint.port, case.make(oidc), **case.kwargs())
    assert not r.accepted, f"{endpoint.name} accepted the {case.id} token"
    assert r.challenge == INVALID_TOKEN, r.outcome()
    assert r.error == 58 and r.message == INVALID_TOKEN.decode(), r.outcome()


@pytest.mark.parametrize("case", ACCEPTED, ids=lambda c: c.id)
def test_accepted_token(oidc, endpoint, case):
    """Controls: these tokens are good, so the refusals above are the validator's doing."""
    r = login(endpoint.host, endpoint.port, case.make(oidc), **case.kwargs())
    assert r.accepted, r.outcome()
    if case.id == "expired-within-the-skew":
        assert r.session_lifetime_ms == 0 and r.metadata is False, r
    else:
        assert r.metadata is True and r.session_lifetime_ms > 0, r


@pytest.mark.portcullis_only
def test_same_outcome_as_kafka(oidc, refusal_node):
    """The same token, presented to both, gives the same outcome, except where INTENTIONAL says."""
    portcullis = endpoint_of(refusal_node)
    kafka = kafka_endpoint()
    rows = []
    for case in REFUSED + ACCEPTED + FRAMING:
        token = case.make(oidc)
        k = login(kafka.host, kafka.port, token, **case.kwargs()).outcome()
        p = login(portcullis.host, portcullis.port, token, **case.kwargs()).outcome()
        rows.append((case, k, p))
    problems = []
    for case, k, p in rows:
        assert k.startswith("refused") == case.refused or case.id in INTENTIONAL, \
            f"Kafka's outcome for {case.id} is not what the table says: {k}"
        if case.id in INTENTIONAL:
            want, _why = INTENTIONAL[case.id]
            if p != want:
                problems.append(f"{case.id}: the intentional difference no longer holds: Portcullis {p!r}, "
                                f"expected {want!r} (Kafka {k!r})")
        elif k != p:
            problems.append(f"{case.id}:\n    kafka      {k}\n    portcullis {p}")
    report = "\n".join(f"{c.id:40} kafka: {k}\n{'':40} portcullis: {p}" for c, k, p in rows)
    print(report)
    assert not problems, "outcomes differ:\n" + "\n".join(problems)


def test_kafka_listener_is_the_reference(oidc):
    """The suite's own check: Kafka's OAUTH listener is up and validates against the provider (a valid
    token logs in, a forged one is refused), so the comparisons above compare with a real validator."""
    k = kafka_endpoint()
    assert login(k.host, k.port, oidc.token()).accepted
    assert not login(k.host, k.port, oidc.mint(forge="bad-signature")).accepted
