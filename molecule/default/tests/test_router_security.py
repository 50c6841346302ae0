"""The real router's port on a lab host: no stranger gets through (tests/contract/router_routes.yml).

Every route of the router's own table is called without a key, with the client key and with the admin key.
"""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import PORT_BASE, ROOT, lab_secret

ROUTES = yaml.safe_load((ROOT / "tests/contract/router_routes.yml").read_text())
ALL = ROUTES["table"] + ROUTES["elsewhere"]

PROBE = """
import json, re, sys, urllib.error, urllib.request
routes, keys = json.loads(sys.argv[1]), json.loads(sys.argv[2])
def status(method, path, key, body=b'{}'):
    request = urllib.request.Request('http://127.0.0.1:PORT' + re.sub(r'\\{[^}]+\\}', 'x', path), method=method,
                                     data=body if method == 'POST' else None)
    request.add_header('Content-Type', 'application/json')
    if key:
        request.add_header('Authorization', 'Bearer ' + key)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
if routes == 'chat':
    body = json.dumps({'model': 'deepseek-ai/DeepSeek-V4-Flash', 'messages': [{'role': 'user', 'content': 'hi'}]})
    print(json.dumps({who: status('POST', '/v1/chat/completions', key, body.encode()) for who, key in keys.items()}))
else:
    print(json.dumps({path: {method: {who: status(method, path, key) for who, key in keys.items()}
                            for method in ('GET', 'POST')} for path in routes}))
""".replace("PORT", str(PORT_BASE))


def probe(host, routes, keys: dict[str, str]) -> dict:
    script = f"python3 - {json.dumps(json.dumps(routes))} {json.dumps(json.dumps(keys))} <<'EOF'\n{PROBE}\nEOF"
    return json.loads(host.check_output(script))


def keys() -> dict[str, str]:
    return {
        "none": "",
        "client": lab_secret("sglang_services_api_key"),
        "admin": lab_secret("sglang_services_admin_key"),
    }


@pytest.fixture(scope="module")
def statuses(host):
    return probe(host, [route["path"] for route in ALL], keys())


def by_class(name: str) -> list[str]:
    return [route["path"] for route in ALL if route["class"] == name]


@pytest.mark.parametrize("path", by_class("control"))
def test_control_plane_refuses_strangers_and_clients(statuses, path):
    for method in ("GET", "POST"):
        seen = statuses[path][method]
        assert seen["none"] == 401 and seen["client"] == 401, (method, seen)
    assert any(statuses[path][m]["admin"] != 401 for m in ("GET", "POST")), statuses[path]


@pytest.mark.parametrize("path", by_class("ha"))
def test_ha_routes_refuse_strangers_and_do_nothing_for_clients(statuses, path):
    for method in ("GET", "POST"):
        seen = statuses[path][method]
        assert seen["none"] == 401, (method, seen)
        # Measured: /ha/* is guarded by the client key, not the admin key; with HA off it answers 503 or 4xx.
        assert seen["client"] >= 400 and seen["admin"] == 401, (method, seen)


@pytest.mark.parametrize("path", by_class("inference"))
def test_inference_needs_the_client_key(statuses, path):
    for method in ("GET", "POST"):
        seen = statuses[path][method]
        assert seen["none"] == 401 and seen["admin"] == 401, (method, seen)
        assert seen["client"] != 401, (method, seen)


def test_chat_without_the_key_is_401_and_with_it_200(host):
    assert probe(host, "chat", keys()) == {"none": 401, "client": 200, "admin": 401}


@pytest.mark.parametrize("path", by_class("open"))
def test_open_routes_are_read_only_information(statuses, path):
    assert statuses[path]["GET"]["none"] != 401
    assert statuses[path]["POST"]["none"] in (401, 404, 405)
