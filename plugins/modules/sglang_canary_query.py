#!/usr/bin/python
"""One round of the canary analysis: query the fleet's Prometheus for the canary and the hosts not yet changed."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_canary_query
short_description: Query Prometheus for one window of the canary analysis
version_added: 0.6.0
description:
  - Runs where the Prometheus that holds every host's series answers (the central Prometheus of
    C(playbooks/monitoring.yml), from its own host), and asks it, for one window, each check of the canary
    analysis (module_utils/sglang_canary.py) for the given hosts.
  - Returns host -> value per check; a check Prometheus cannot answer is reported in C(errors) and counts as no
    data (a failure of the round, judged by the caller).
options:
  url:
    description: The Prometheus URL, as seen from the host the module runs on.
    type: str
    required: true
  username:
    description: Basic-auth user, when Prometheus asks for one.
    type: str
    default: ""
  password:
    description: Basic-auth password (never logged).
    type: str
    default: ""
  ca_file:
    description: CA file to check Prometheus's certificate with (https).
    type: path
  hosts:
    description: The C(host) label values to ask for (canary and hosts not yet changed).
    type: list
    elements: str
    required: true
  window:
    description: The window, in seconds, that ends now.
    type: int
    required: true
  fleet:
    description: The C(fleet) label value the series must carry (the monitoring role's sglang_monitoring_fleet); empty
      asks every fleet's.
    type: str
    default: ""
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: One round of the canary analysis
  dsv4.sglang.sglang_canary_query:
    url: http://127.0.0.1:9090
    hosts: [dsv4-gpu-01, dsv4-gpu-02]
    window: 60
    fleet: sglang-dsv4
"""

RETURN = r"""
samples:
  description: check -> host -> value.
  returned: always
  type: dict
errors:
  description: The checks Prometheus did not answer, with why.
  returned: always
  type: list
failed:
  description: The names of the checks whose query failed (their samples are empty; the verdict fails them).
  returned: always
  type: list
"""

import base64
import json
import urllib.error
import urllib.parse

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import open_url
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_canary import by_host, queries


def ask(p: dict, query: str) -> dict:
    headers = {}
    if p["username"]:
        token = base64.b64encode(f"{p['username']}:{p['password']}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    url = f"{p['url'].rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with open_url(url, headers=headers, timeout=30, ca_path=p["ca_file"], use_proxy=False) as response:
        return json.loads(response.read())


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "username": {"type": "str", "default": ""},
            "password": {"type": "str", "default": "", "no_log": True},
            "ca_file": {"type": "path"},
            "hosts": {"type": "list", "elements": "str", "required": True},
            "window": {"type": "int", "required": True},
            "fleet": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        wanted = queries(p["hosts"], p["window"], p["fleet"] or None)
    except ValueError as error:
        module.fail_json(msg=f"canary analysis: {error}")
    samples, errors, failed = {}, [], []
    for check, query in wanted.items():
        try:
            answer = ask(p, query)
        except (urllib.error.URLError, OSError, UrlConnectionError, ValueError) as error:
            errors.append(f"{check}: {p['url']} did not answer ({error})")
            failed.append(check)
            answer = {}
        if answer and answer.get("status") != "success":
            errors.append(f"{check}: {answer.get('errorType')}: {answer.get('error')}")
            failed.append(check)
        samples[check] = by_host(answer) if check not in failed else {}
    module.exit_json(changed=False, samples=samples, errors=errors, failed=failed)


if __name__ == "__main__":
    main()
