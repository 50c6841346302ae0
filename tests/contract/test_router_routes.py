"""The router route fixture (router_routes.yml) against the real sglang-router 0.3.2's own route table.

The lab's security tests (molecule/default/tests/test_router_security.py) call every route of the fixture; this
test makes sure the fixture is the router's whole table, in its order, so no route escapes them.
"""

from __future__ import annotations

from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROUTES = yaml.safe_load((HERE / "router_routes.yml").read_text())
CLASSES = {"inference", "open", "control", "ha"}


def test_fixture_is_the_routers_route_table_in_order(router_binary_strings: str) -> None:
    table = "".join(route["path"] for route in ROUTES["table"])
    assert table in router_binary_strings
    # The table ends where the next literal begins: nothing of it is left out at the end.
    end = router_binary_strings.index(table) + len(table)
    assert not router_binary_strings[end:].startswith("/")


def test_routes_registered_elsewhere_exist(router_binary_strings: str) -> None:
    for route in ROUTES["elsewhere"]:
        assert route["path"] in router_binary_strings, route


def test_every_route_has_a_class_and_the_named_ones_are_guarded() -> None:
    routes = {r["path"]: r["class"] for r in ROUTES["table"] + ROUTES["elsewhere"]}
    assert set(routes.values()) <= CLASSES
    for path in ("/workers", "/flush_cache", "/wasm", "/v1/tokenizers", "/get_loads"):
        assert routes[path] == "control"
    assert all(cls == "ha" for path, cls in routes.items() if path.startswith("/ha/"))
