"""Filters that turn the one topology variable into unit specifications (plugins/plugin_utils/sglang_units.py), and
the inventory's PD pools across hosts into the lists of their routers (plugins/plugin_utils/sglang_pools.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.dsv4.sglang.plugins.plugin_utils.sglang_pools import (
    sglang_pool_errors,
    sglang_pool_members,
    sglang_pool_router,
    sglang_pool_router_hosts,
    sglang_pool_services,
    sglang_pools_left_out,
)
from ansible_collections.dsv4.sglang.plugins.plugin_utils.sglang_units import (
    router_host,
    router_url,
    sglang_systemd_argv,
    sglang_topology_errors,
    sglang_unit_specs,
)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglang_topology_errors": sglang_topology_errors,
            "sglang_unit_specs": sglang_unit_specs,
            "sglang_router_url": router_url,
            "sglang_router_host": router_host,
            "sglang_systemd_argv": sglang_systemd_argv,
            "sglang_pool_errors": sglang_pool_errors,
            "sglang_pool_members": sglang_pool_members,
            "sglang_pools_left_out": sglang_pools_left_out,
            "sglang_pool_router": sglang_pool_router,
            "sglang_pool_router_hosts": sglang_pool_router_hosts,
            "sglang_pool_services": sglang_pool_services,
        }
