"""systemd's view of a unit, parsed in one place (module_utils/sglang_systemd.py)."""

from __future__ import annotations

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_systemd as systemd


def test_the_command_line_asks_for_each_property_of_each_unit():
    assert systemd.show_argv(["a.service", "b.service"], ("Id", "MainPID")) == [
        "systemctl",
        "show",
        "a.service",
        "b.service",
        "--property=Id",
        "--property=MainPID",
    ]
    assert systemd.show_argv(["a.service"], ["ActiveState"], "unix")[2] == "--timestamp=unix"


def test_one_units_properties_keep_a_value_that_holds_an_equals_sign():
    out = "ActiveState=active\nEnvironment=A=1 B=2\nnot a property\n"
    assert systemd.properties(out) == {"ActiveState": "active", "Environment": "A=1 B=2"}


def test_several_units_are_read_by_their_id():
    out = "Id=a.service\nActiveState=active\n\nId=b.service\nActiveState=failed\n"
    assert systemd.units(out) == {
        "a.service": {"Id": "a.service", "ActiveState": "active"},
        "b.service": {"Id": "b.service", "ActiveState": "failed"},
    }
