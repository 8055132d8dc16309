"""The JWKS validator's key set against a real provider: rotation, a flood of unknown kids, and the
provider going down (Portcullis only: Kafka's own validator has no per-interval bound, see below).

Each test has a Portcullis of its own with a JWKS URL of its own (`…/jwks?node=<name>`), so the
provider's admin API (`GET /jwks-requests`, counted per URL) counts exactly that node's fetches:
the counts come from the provider, not from Portcullis. The provider is this module's own
(own_oidc.py): its rotations and outages must not reach the tests that run beside it on the run's
shared provider, nor Kafka's OAUTH listener, which holds the shared provider's keys.

- Rotation: the provider gets a new signing key (`POST /rotate`); the first login with a token of
  the new key misses (unknown kid: refused with the invalid_token challenge, and one refresh is
  asked for); the next login finds the key. One fetch, and real clients (librdkafka's OIDC fetcher)
  then work with tokens of the new key.
- 1,000 tokens with random kids: each is refused, and the node fetches the key set at most once per
  `jwks_kid_refresh_min_interval_ms` (Kafka's validator refreshes once per new kid).
- The JWKS endpoint down (503) during a refresh: tokens of the keys already held keep working, a
  warning names the URL and the status, and the key set is had again once the provider is back.
"""

from __future__ import annotations

import math
import re
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from clients import confluent_consume, confluent_create_topic, confluent_produce
from oauth_support import (INVALID_TOKEN, Oidc, OAuthNode, confluent_oauth_conf, decode_jwt, default_oauthbearer,
                           jwks_fetch_metric, login, start_oauth_portcullis, url_path, wait_until)
from own_oidc import OwnOidc

pytestmark = pytest.mark.portcullis_only


@pytest.fixture(scope="module")
def oidc(run_dir):
    """A provider of this module's own, whose keys the tests rotate and whose key set they take down."""
    own = OwnOidc(run_dir / "oidc-keys")
    try:
        yield own.start()
    finally:
        own.stop()


def node_with(launcher, oidc: Oidc, name: str, **table) -> OAuthNode:
    return start_oauth_portcullis(launcher, oidc, name, oauthbearer=default_oauthbearer(oidc, name, **table))


def fetches(oidc: Oidc, node: OAuthNode) -> tuple[int, int]:
    return oidc.jwks_count(node.jwks_url)


def assert_refused(r, what: str) -> None:
    assert not r.accepted and r.challenge == INVALID_TOKEN and r.error == 58, f"{what}: {r.outcome()}"


def test_rotated_key_is_found_after_one_kid_miss_refresh(launcher, oidc, unique):
    node = node_with(launcher, oidc, "oauth-rotation")
    wait_until(lambda: fetches(oidc, node)[0] >= 1, 5, "the node's first key-set fetch")
    ok0 = fetches(oidc, node)[0]
    agents = oidc.jwks_entry(node.jwks_url)["agents"]
    assert agents and all(a.startswith("portcullis/") for a in agents), f"who fetched the node's URL: {agents}"

    new_kid = oidc.rotate()
    token = oidc.token()  # issued by the provider, signed with the new key
    assert decode_jwt(token)[0]["kid"] == new_kid

    first = login(node.host, node.port, token)
    assert_refused(first, "the first login with the new kid (the node does not hold the key yet)")
    wait_until(lambda: fetches(oidc, node)[0] >= ok0 + 1, 5, "one refresh after the kid miss")
    second = login(node.host, node.port, token)
    assert second.accepted and second.metadata, second.outcome()
    time.sleep(1)  # anything still in flight would be counted now
    ok, unavailable = fetches(oidc, node)
    assert (ok - ok0, unavailable) == (1, 0), f"expected exactly one refresh for the new kid: {ok - ok0} ok, " \
                                              f"{unavailable} failed"

    # A real client with tokens of the new key.
    conf = confluent_oauth_conf(node.bootstrap, oidc)
    topic = unique("oauth-rotated")
    confluent_create_topic(conf, topic, partitions=1)
    sent = confluent_produce(conf, topic, 100)
    assert confluent_consume(conf, topic, unique("oauth-rotated-group"), expected=100) == sent
    assert fetches(oidc, node)[0] == ok, "a known kid caused a fetch"


FLOOD = 1000
FLOOD_INTERVAL_MS = 2000


def test_a_flood_of_random_kids_costs_at_most_one_fetch_per_interval(launcher, oidc):
    """1,000 tokens, each with a kid of its own that no key has (signed by the real key), from 25
    connections at once: every one refused; fetches <= 1 + (flood time + interval) / interval."""
    node = node_with(launcher, oidc, "oauth-kid-flood", jwks_kid_refresh_min_interval_ms=FLOOD_INTERVAL_MS)
    wait_until(lambda: fetches(oidc, node)[0] >= 1, 5, "the node's first key-set fetch")
    tokens = [oidc.mint(header={"kid": f"flood-{i}-{secrets.token_hex(6)}"}) for i in range(FLOOD)]
    metric_before = jwks_fetch_metric(node)
    ok0, bad0 = fetches(oidc, node)
    outcomes: list[str] = []
    lock = threading.Lock()

    def one(token: str) -> None:
        r = login(node.host, node.port, token)
        with lock:
            outcomes.append("refused" if (not r.accepted and r.challenge == INVALID_TOKEN and r.error == 58)
                            else r.outcome())

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=25) as pool:
        list(pool.map(one, tokens))
    took = time.monotonic() - started
    # A refresh asked for near the end runs at most one interval later.
    time.sleep(FLOOD_INTERVAL_MS / 1000 + 1.5)
    ok, bad = fetches(oidc, node)
    assert len(outcomes) == FLOOD and set(outcomes) == {"refused"}, \
        f"not every random-kid token was refused: {sorted(set(outcomes))[:5]}"
    bound = 1 + math.ceil((took * 1000 + FLOOD_INTERVAL_MS) / FLOOD_INTERVAL_MS)
    print(f"{FLOOD} random kids in {took:.1f}s: {ok - ok0} key-set fetches (bound {bound}), {bad - bad0} failed")
    assert bad == bad0
    assert 1 <= ok - ok0 <= bound, f"{ok - ok0} fetches for {FLOOD} random kids in {took:.1f}s (bound {bound})"
    # Portcullis' own count (metric portcullis.oauthbearer.jwks.fetches) agrees with the provider's.
    after = jwks_fetch_metric(node)
    kid_fetches = sum(v for (trigger, _), v in after.items() if trigger == "unknown_kid") - \
        sum(v for (trigger, _), v in metric_before.items() if trigger == "unknown_kid")
    assert kid_fetches == ok - ok0, (metric_before, after)
    # No lock-out: a good token still logs in.
    r = login(node.host, node.port, oidc.token())
    assert r.accepted and r.metadata, r.outcome()


def test_provider_down_during_a_refresh_keeps_the_cached_keys(launcher, oidc):
    """The JWKS endpoint answers 503 while a refresh (for a new kid) runs: it fails after its retries
    (jwks_retry_backoff_max_ms = 1500) and a warning names the URL and the status; the keys held keep
    working meanwhile; once the provider is back, the periodic refresh (jwks_refresh_ms = 6000) gets
    the new key."""
    node = node_with(launcher, oidc, "oauth-jwks-down", jwks_refresh_ms=6000, jwks_retry_backoff_max_ms=1500)
    wait_until(lambda: fetches(oidc, node)[0] >= 1, 5, "the node's first key-set fetch")
    old_kid = next(k["kid"] for k in oidc.keys() if k["alg"] == "RS256" and k["current"])
    log_from = node.process.log_size()
    oidc.down()
    try:
        new_kid = oidc.rotate()
        new_token = oidc.mint(key=new_kid)
        assert_refused(login(node.host, node.port, new_token), "a token of the new key while the JWKS is down")
        wait_until(lambda: fetches(oidc, node)[1] >= 2, 5, "the refresh trying the JWKS endpoint (503)")
        # Keys already held: still accepted, with the provider down.
        r = login(node.host, node.port, oidc.mint(key=old_kid))
        assert r.accepted and r.metadata, r.outcome()
        path = url_path(node.jwks_url)

        def warning() -> str | None:
            text = node.process.log_since(log_from, 400)
            return next((line for line in text.splitlines()
                         if "WARN" in line and "503" in line and path in line), None)

        line = wait_until(warning, 8, "a warning naming the JWKS URL and the 503")
        assert re.search(r"keep|kept", line, re.I), line
        r = login(node.host, node.port, oidc.mint(key=old_kid))
        assert r.accepted and r.metadata, f"after the failed refresh: {r.outcome()}"
    finally:
        oidc.up()
    ok_before = fetches(oidc, node)[0]
    wait_until(lambda: fetches(oidc, node)[0] > ok_before, 10, "a key-set fetch after the provider is back")
    r = login(node.host, node.port, new_token)
    assert r.accepted and r.metadata, f"the new key after the provider came back: {r.outcome()}"
