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


# --- smg 1.13.0 (router_routes_smg.yml; the lab's releases scenario calls every route and every route literal) ---

SMG = yaml.safe_load((HERE / "router_routes_smg.yml").read_text())


def test_smg_fixture_block_is_the_binarys_block_in_order(smg_binary_strings: str) -> None:
    block = "".join(route["path"] for route in SMG["table"])
    assert block in smg_binary_strings
    start = smg_binary_strings.index(block)
    end = start + len(block)
    # The block is whole: what stands before and after it is no route literal.
    assert not smg_binary_strings[end:].startswith("/") and smg_binary_strings[start - 1] != "}"


def test_smg_routes_named_elsewhere_exist_and_ha_is_gone(smg_binary_strings: str) -> None:
    for route in SMG["elsewhere"]:
        assert route["path"] in smg_binary_strings, route
    assert "/ha/" not in smg_binary_strings


def test_smg_classes_are_those_of_sglang_router_for_the_routes_they_share() -> None:
    old = {r["path"]: r["class"] for r in ROUTES["table"] + ROUTES["elsewhere"]}
    new = {r["path"]: r["class"] for r in SMG["table"] + SMG["elsewhere"]}
    assert set(new.values()) <= CLASSES - {"ha"}
    # Measured differences, each said in the releases guide: /get_loads stays admin-only, /loads is new and open.
    assert {p: (old[p], new[p]) for p in set(old) & set(new) if old[p] != new[p]} == {}
