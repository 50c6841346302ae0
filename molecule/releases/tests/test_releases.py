"""Runtime releases, judged on the host: which release each running process runs, read from the process itself.

The router's release and version come from the native library its process has mapped (/proc/PID/maps) and that
release's installed distributions; the servers' from /get_server_info, which the stand-in answers from its own
process (importlib.metadata of the release it runs from), and from /proc/PID/exe's release. The tests run in
order and each leaves the host at the inventory's state (servers on sglang 0.5.23, router on sglang-router 0.3.2).
"""

from __future__ import annotations

import json
import re
import shlex

import pytest
import yaml

from conftest import ROOT, deploy, flat, host_state, lab_secret, recap, runs_from_disk, text

HOST = "dsv4-rel-1"
PORT = 24010
RELEASES = "/opt/sglang/releases"
LOCKS = "/var/cache/sglang-dsv4/lab-wheelhouse/locks"
ROUTER_031 = {"sglang_runtime_router_lock": f"{LOCKS}/sglang-router-0.3.1.txt"}
ROUTER_BROKEN = {"sglang_runtime_router_lock": f"{LOCKS}/sglang-router-0.3.2-no-setproctitle.txt"}
SERVER_0522 = {"sglang_runtime_server_lock": f"{LOCKS}/sglang-0.5.22-nodeps.txt"}
# smg end to end: the decode server announces its running window (--max-running-requests), which smg's PD
# admission needs (without it smg warns at every start; guide_releases, "The router: sglang-router or smg").
SMG = {
    "sglang_runtime_router_package": "smg",
    "sglang_services_topology": {
        "prefill": {
            "mode": "prefill",
            "gpu_ids": [0, 1, 2, 3],
            "numa_node": 0,
            "port": PORT + 1,
            "bootstrap_port": PORT + 3,
        },
        "decode": {
            "mode": "decode",
            "gpu_ids": [4, 5, 6, 7],
            "numa_node": 0,
            "port": PORT + 2,
            "extra_flags": ["--max-running-requests", "64"],
        },
        "router": {
            "mode": "router",
            "host": "127.0.0.1",
            "port": PORT,
            "metrics_host": "127.0.0.1",
            "metrics_port": PORT + 4,
        },
    },
}
BUILD = "Build the releases this host will run"

# What runs, read from the processes: for the router the release whose native library it has mapped and that
# release's router distribution; for each server the release of its python and the version it reports itself.
PROBE = r"""
import glob, json, os, re, subprocess, sys, urllib.request
key = sys.argv[1]
def pid(unit):
    argv = ["systemctl", "show", "-p", "MainPID", "--value", unit]
    return subprocess.run(argv, capture_output=True, text=True).stdout.strip()
out = {}
p = pid("sglang-dsv4-router")
native = re.compile(r"/(sglang_router|smg)/[^/]+\.so$")
libs = sorted({line.split()[-1] for line in open(f"/proc/{p}/maps") if native.search(line)})
site = os.path.dirname(os.path.dirname(libs[0]))
package = os.path.basename(os.path.dirname(libs[0]))
dist = glob.glob(os.path.join(site, package + "-*.dist-info"))[0]
version = dist[: -len(".dist-info")].rsplit("-", 1)[1]
out["router"] = {"pid": p, "release": site.split("/")[4], "package": package, "version": version}
for name, port in (("prefill", int(sys.argv[2]) + 1), ("decode", int(sys.argv[2]) + 2)):
    p = pid("sglang-dsv4-" + name)
    url = f"http://127.0.0.1:{port}/get_server_info"
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + key})
    info = json.load(urllib.request.urlopen(request, timeout=10))
    python = open(f"/proc/{p}/cmdline").read().split("\0")[0]
    out[name] = {"pid": p, "release": python.split("/")[4], "version": info["version"]}
print(json.dumps(out))
"""


def running(host) -> dict:
    key = lab_secret("sglang_services_api_key")
    return json.loads(host.check_output(f"python3 -c {shlex.quote(PROBE)} {shlex.quote(key)} {PORT}"))


def releases(host) -> dict:
    """id -> (group, headline packages, manifest mtime) of every finished release on the host."""
    script = (
        "for m in DIR/*/sglang-release.json; do printf '%s %s\\n' \"$(stat -c %Y $m)\" \"$(tr -d '\\n' <$m)\"; done"
    )
    out = host.check_output(script.replace("DIR", RELEASES))
    found = {}
    for line in out.splitlines():
        mtime, manifest = line.split(" ", 1)
        entry = json.loads(manifest)
        found[entry["id"]] = (
            entry["group"],
            {k: v for k, v in entry["packages"].items() if k in ("sglang", "sglang-router", "smg")},
            mtime,
        )
    return found


def run(settings: dict | None = None, *args: str):
    return deploy(*(["-e", json.dumps(settings)] if settings else []), *args)


def apply_part(out) -> str:
    """What the run printed from its apply on (after the plan and the build play)."""
    whole = text(out)
    return whole[whole.index("PLAY [Apply") :] if "PLAY [Apply" in whole else ""


def no_op(out) -> bool:
    return out.returncode == 0 and "apply to 0 of 1 host(s): none" in out.stdout and "changed=0" in recap(out.stdout)


@pytest.fixture(scope="module", autouse=True)
def back_to_the_inventory(host):
    yield
    out = deploy()
    assert out.returncode == 0, text(out)[-3000:]


def test_the_converged_host_runs_its_releases_read_only_to_the_service_user(host):
    now = running(host)
    assert (now["router"]["package"], now["router"]["version"]) == ("sglang_router", "0.3.2")
    assert now["prefill"]["version"] == now["decode"]["version"] == "0.5.23"
    found = releases(host)
    assert found[now["router"]["release"]][:2] == ("router", {"sglang-router": "0.3.2"})
    assert found[now["prefill"]["release"]][:2] == ("servers", {"sglang": "0.5.23"})
    assert now["prefill"]["release"] == now["decode"]["release"]
    # Each start record carries the release it ran from.
    for unit, name in (("router", "router"), ("prefill", "prefill")):
        record = json.loads(host.check_output(f"cat /run/sglang-dsv4/sglang-dsv4-{name}.json"))
        assert list(record["releases"].values()) == [now[unit]["release"]]
    site = host.check_output(f"ls -d {RELEASES}/{now['router']['release']}/lib/python3*/site-packages")
    denied = host.run(f"runuser -u sglang -- touch {site}/sglang_router/planted.py")
    assert denied.rc != 0 and "Permission denied" in denied.stderr
    # Built as production builds (this scenario's host_vars): byte-compiled, and the compiled files as read-only.
    servers = host.check_output(f"ls -d {RELEASES}/{now['prefill']['release']}/lib/python3*/site-packages")
    compiled = host.check_output(f"find {servers}/sglang -name '*.pyc' | wc -l")
    assert int(compiled) > 100, compiled
    denied = host.run(f"runuser -u sglang -- touch {servers}/sglang/__pycache__/planted.pyc")
    assert denied.rc != 0 and "Permission denied" in denied.stderr
    assert host.check_output(f"stat -c '%U %a' {RELEASES}") == "root 755"


def test_a_router_upgrade_restarts_the_router_alone_onto_a_release_built_before_the_batch(host):
    before = running(host)
    down = run(ROUTER_031)
    assert down.returncode == 0, text(down)[-4000:]
    old = running(host)
    assert (old["router"]["version"], old["prefill"]["pid"], old["decode"]["pid"]) == (
        "0.3.1",
        before["prefill"]["pid"],
        before["decode"]["pid"],
    )
    # The build ran in its own play, before any host's apply; the apply itself ran no pip.
    assert f"{BUILD}" in text(down) and BUILD not in apply_part(down)
    up = run()
    assert up.returncode == 0, text(up)[-4000:]
    plan = flat(up)
    assert (
        f"runtime router: release {old['router']['release']} (sglang-router 0.3.1) -> {before['router']['release']}"
        " (sglang-router 0.3.2), built"
    ) in plan, plan[-3000:]
    new = running(host)
    assert (new["router"]["version"], new["router"]["release"]) == ("0.3.2", before["router"]["release"])
    assert new["router"]["pid"] not in (old["router"]["pid"], before["router"]["pid"])
    assert (new["prefill"]["pid"], new["decode"]["pid"]) == (before["prefill"]["pid"], before["decode"]["pid"])
    assert runs_from_disk(host_state(host)) == []


def test_a_server_package_change_restarts_prefill_and_decode_together_and_pruning_keeps_the_way_back(host):
    before = running(host)
    out = run(SERVER_0522)
    assert out.returncode == 0, text(out)[-4000:]
    old = running(host)
    assert old["prefill"]["version"] == old["decode"]["version"] == "0.5.22"
    assert old["prefill"]["pid"] != before["prefill"]["pid"] and old["decode"]["pid"] != before["decode"]["pid"]
    assert old["router"]["pid"] == before["router"]["pid"]
    assert "runtime servers: release" in flat(out) and "(sglang 0.5.22), to build" in flat(out)
    back = run()
    assert back.returncode == 0, text(back)[-4000:]
    assert (
        f"runtime servers: release {old['prefill']['release']} (sglang 0.5.22) -> {before['prefill']['release']}"
        " (sglang 0.5.23), built"
    ) in flat(back)
    new = running(host)
    assert new["prefill"]["version"] == new["decode"]["version"] == "0.5.23"
    assert new["prefill"]["pid"] != old["prefill"]["pid"] and new["decode"]["pid"] != old["decode"]["pid"]
    assert new["router"]["pid"] == before["router"]["pid"]
    # Pruning after this verified run (keep 3): the running releases and the one it ran before stay (0.5.22,
    # the way back); the oldest other one (sglang-router 0.3.1) goes.
    kept = sorted((group, tuple(packages.items())) for group, packages, _mtime in releases(host).values())
    assert kept == [
        ("router", (("sglang-router", "0.3.2"),)),
        ("servers", (("sglang", "0.5.22"),)),
        ("servers", (("sglang", "0.5.23"),)),
    ]


def test_a_release_whose_router_cannot_start_is_rolled_back_to_the_previous_release_with_no_pip(host):
    before_state, before, built = host_state(host), running(host), releases(host)
    out = run(ROUTER_BROKEN)
    assert out.returncode != 0 and f"{HOST} was rolled back to its state before this run" in text(out), text(out)[
        -4000:
    ]
    assert BUILD in text(out) and BUILD not in apply_part(out)
    after_state, after, now = host_state(host), running(host), releases(host)
    # Back on the previous release, read from the router's process: a new process, the old library.
    assert (after["router"]["release"], after["router"]["version"]) == (before["router"]["release"], "0.3.2")
    assert after["router"]["pid"] != before["router"]["pid"]
    assert (after["prefill"]["pid"], after["decode"]["pid"]) == (before["prefill"]["pid"], before["decode"]["pid"])
    assert after_state["files"] == before_state["files"]
    assert runs_from_disk(after_state) == []
    # No release was built or touched on the way back: the old ones keep their manifests, one new one is there.
    assert {rid: entry for rid, entry in now.items() if rid in built} == built
    assert len(now) == len(built) + 1
    journal = host.check_output(
        "journalctl -u sglang-dsv4-router -o cat --since '-5min' | grep -c \"No module named 'setproctitle'\" || true"
    )
    assert int(journal) >= 1


def test_a_second_run_changes_nothing(host):
    assert no_op(run())


def test_a_release_changed_by_hand_is_drift_and_stops_the_plan(host):
    before_state = host_state(host)
    router = running(host)["router"]["release"]
    site = host.check_output(f"ls -d {RELEASES}/{router}/lib/python3*/site-packages")
    host.run_test(f"mkdir {site}/dsv4_lab_probe-1.0.dist-info")
    try:
        out = run()
        assert out.returncode != 0
        assert (
            f"release {RELEASES}/{router} (router) was changed by hand after its build: dsv4-lab-probe - in the lock,"
            " 1.0 installed"
        ) in flat(out), flat(out)[-3000:]
        assert "PLAY [Apply" not in text(out) or "skipping: no hosts matched" in text(out)
        after = host_state(host)
        assert after["files"] == before_state["files"]
        assert {u: (e["pid"], e["invocation"]) for u, e in after["units"].items()} == {
            u: (e["pid"], e["invocation"]) for u, e in before_state["units"].items()
        }
    finally:
        host.run(f"rm -rf {site}/dsv4_lab_probe-1.0.dist-info")
    assert no_op(run())


ROUTES = yaml.safe_load((ROOT / "tests/contract/router_routes_smg.yml").read_text())
ALL = ROUTES["table"] + ROUTES["elsewhere"]
METHODS = ("GET", "POST", "PUT", "DELETE")
CALLS = r"""
import json, re, sys, urllib.error, urllib.request
routes, keys, port = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
def status(method, path, key):
    request = urllib.request.Request(f"http://127.0.0.1:{port}" + re.sub(r"\{[^}]+\}", "x", path), method=method,
                                     data=b"{}" if method in ("POST", "PUT") else None)
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
methods = sys.argv[4].split()
print(json.dumps({p: {m: {who: status(m, p, k) for who, k in keys.items()} for m in methods} for p in routes}))
"""
# Every route-like literal of the running smg's own library, called on the host (smg routes before it authenticates:
# 404 to everyone means no route); prints the literals that are routes.
LITERALS = r"""
import glob, json, re, sys, urllib.error, urllib.request
data = open(glob.glob(sys.argv[1] + "/lib/python3*/site-packages/smg/smg_rs*.so")[0], "rb").read().decode("latin-1")
found = set()
for run in re.findall(r"(?:/[a-z_]+(?:/(?:\{[a-z_]+\}|[a-z_]+))*)+", data):
    starts = [m.start() for m in re.finditer("/", run)]
    found.update(run[a:b] for i, a in enumerate(starts) for b in starts[i + 1 :] + [len(run)] if b - a < 60)
def routed(path):
    for method in ("GET", "POST", "DELETE"):
        url = f"http://127.0.0.1:{sys.argv[2]}" + re.sub(r"\{[^}]+\}", "x", path)
        request = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
        try:
            urllib.request.urlopen(request, timeout=30).close()
            return True
        except urllib.error.HTTPError as error:
            if error.code != 404:
                return True
    return False
print(json.dumps({"literals": len(found), "routes": sorted(p for p in found if routed(p))}))
"""


def keys() -> dict[str, str]:
    return {
        "none": "",
        "client": lab_secret("sglang_services_api_key"),
        "admin": lab_secret("sglang_services_admin_key"),
    }


def calls(host, routes: list[str], methods=METHODS) -> dict:
    args = " ".join(shlex.quote(a) for a in (json.dumps(routes), json.dumps(keys()), str(PORT), " ".join(methods)))
    return json.loads(host.check_output(f"python3 -c {shlex.quote(CALLS)} {args}"))


@pytest.fixture(scope="module")
def on_smg(host):
    before = running(host)
    out = run(SMG)
    assert out.returncode == 0, text(out)[-4000:]
    yield {"before": before, "out": out, "now": running(host)}
    back = run()
    assert back.returncode == 0, text(back)[-4000:]
    assert (running(host)["router"]["package"], running(host)["router"]["version"]) == ("sglang_router", "0.3.2")


def test_smg_deploys_and_verifies_with_the_router_restarted_alone(host, on_smg):
    now, before = on_smg["now"], on_smg["before"]
    assert (now["router"]["package"], now["router"]["version"]) == ("smg", "1.13.0")
    assert now["router"]["release"] != before["router"]["release"]
    assert "(smg 1.13.0), to build" in flat(on_smg["out"])
    # The decode server restarted for its new flag; prefill did too (always together); the verification passed.
    assert now["prefill"]["pid"] != before["prefill"]["pid"] and now["decode"]["pid"] != before["decode"]["pid"]
    assert runs_from_disk(host_state(host)) == []


def test_smg_logs_no_warning_or_error_at_its_current_start(host, on_smg):
    invocation = host.check_output("systemctl show -p InvocationID --value sglang-dsv4-router")
    journal = host.check_output(f"journalctl -o cat _SYSTEMD_INVOCATION_ID={invocation} | sed 's/\\x1b\\[[0-9;]*m//g'")
    assert journal.strip(), "the router's current invocation logged nothing"
    flagged = [line for line in journal.splitlines() if re.search(r"\b(WARN|WARNING|ERROR)\b", line)]
    assert flagged == [], flagged


def test_smg_readiness_names_its_healthy_workers(host, on_smg):
    out = host.check_output(
        f"python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{PORT}/readiness').read().decode())\""
    )
    body = json.loads(out)
    assert body.get("status") == "ready" and body.get("healthy_workers") == 2, body


@pytest.fixture(scope="module")
def smg_statuses(host, on_smg):
    return calls(host, [route["path"] for route in ALL])


def by_class(name: str) -> list[str]:
    return [route["path"] for route in ALL if route["class"] == name]


@pytest.mark.parametrize("path", by_class("control"))
def test_smg_control_plane_is_the_admin_keys_alone(smg_statuses, path):
    seen = smg_statuses[path]
    routed = [m for m in METHODS if seen[m]["admin"] != 405]
    assert routed, seen
    for method in routed:
        assert seen[method]["none"] == 401 and seen[method]["client"] == 401, (method, seen[method])
        assert seen[method]["admin"] != 401, (method, seen[method])


@pytest.mark.parametrize("path", by_class("inference"))
def test_smg_inference_needs_the_client_key(smg_statuses, path):
    seen = smg_statuses[path]
    routed = [m for m in METHODS if seen[m]["client"] != 405]
    assert routed, seen
    for method in routed:
        assert seen[method]["none"] == 401 and seen[method]["admin"] == 401, (method, seen[method])
        assert seen[method]["client"] != 401, (method, seen[method])


@pytest.mark.parametrize("path", by_class("open"))
def test_smg_open_routes_are_read_only(smg_statuses, path):
    seen = smg_statuses[path]
    assert seen["GET"]["none"] != 401, seen
    assert all(seen[m]["none"] in (401, 404, 405) for m in ("POST", "PUT", "DELETE")), seen


def test_smg_serves_no_route_the_fixture_does_not_name(host, on_smg):
    release = f"{RELEASES}/{on_smg['now']['router']['release']}"
    found = json.loads(host.check_output(f"python3 -c {shlex.quote(LITERALS)} {release} {PORT}"))
    assert found["literals"] > 1000
    known = {route["path"] for route in ALL}
    # A literal inside a templated route ("/v1/tokenizers/status" reaches "/v1/tokenizers/{tokenizer_id}").
    templates = [re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(p)) + "$") for p in known]
    unknown = sorted(p for p in found["routes"] if p not in known and not any(t.match(p) for t in templates))
    assert unknown == [], unknown
    gone = calls(host, ROUTES["gone"], ("GET", "POST"))
    assert all(s == 404 for by_method in gone.values() for who in by_method.values() for s in who.values()), gone
