"""`[oauthbearer]` changed by reload (issue 23): the validator is started again with the new
settings (a new key set URL, audience, issuer) for new logins; one that cannot start (a key set
URL outside `allowed_urls`) refuses the reload and the running one keeps serving.

Uses the run's OpenID provider read-only (tokens, and the fetch count of this test's own key set
URLs), and a node of its own, so it runs beside the other files."""

from __future__ import annotations

import os
import subprocess
import urllib.parse

import pytest

from oauth_support import default_oauthbearer, login, oidc, start_oauth_portcullis, toml_value  # noqa: F401 (fixture)

pytestmark = pytest.mark.portcullis_only


def test_oauthbearer_settings_changed_by_reload_apply_to_new_logins(launcher, oidc, unique):
    o = oidc
    name = unique("reload-oauth")
    node = start_oauth_portcullis(launcher, o, name)
    config = node.process.config

    def reload_with(**overrides) -> subprocess.CompletedProcess:
        table = default_oauthbearer(o, name, **overrides)
        text = config.read_text()
        start = text.index("\n[oauthbearer]\n")
        end = text.index("\n[", start + 1)
        block = "\n[oauthbearer]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in table.items())
        config.write_text(text[:start] + block + text[end:])
        env = {k: v for k, v in os.environ.items() if not k.startswith("PORTCULLIS_")}
        return subprocess.run([str(launcher.binary), "reload", "--config", str(config)],
                              capture_output=True, text=True, timeout=60, env=env)

    def accepted() -> bool:
        return login(node.host, node.port, o.token()).accepted

    assert accepted()

    r = reload_with(expected_audience=["not-kafka"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "oauthbearer.expected_audience" in r.stdout, r.stdout
    assert not accepted()

    r = reload_with(expected_issuer=o.issuer + "/not-this-one")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "oauthbearer.expected_audience" in r.stdout and "oauthbearer.expected_issuer" in r.stdout, r.stdout
    assert not accepted()

    new_url = f"{o.jwks_url}?node={urllib.parse.quote(name + '-reloaded')}"
    assert o.jwks_count(new_url)[0] == 0
    r = reload_with(jwks_url=new_url)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "oauthbearer.jwks_url" in r.stdout and "oauthbearer.expected_issuer" in r.stdout, r.stdout
    assert o.jwks_count(new_url)[0] >= 1  # the new validator fetched its key set from the new URL
    assert accepted()

    # A key set URL outside allowed_urls: refused with the key named; the running validator serves.
    r = reload_with(jwks_url="http://127.0.0.1:9/elsewhere/jwks.json")
    said = r.stdout + r.stderr
    assert r.returncode != 0 and "refused" in said and "oauthbearer.jwks_url" in said, said
    assert accepted()
