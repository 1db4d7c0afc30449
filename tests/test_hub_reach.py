"""The class reaches the hub: TLS on a real address, and the university's login (`make hub-test`).

A student's laptop is another machine: here a network namespace the test creates (`ip netns add`,
a veth pair, 10.x.y.1 on the host's side, 10.x.y.2 in the namespace). Debian's Chromium runs
inside it (Playwright, `nsenter --net`; never `playwright install`), so everything it reaches goes
over that link to the host's address, as a class's browsers would. The hub (hub/jupyterhub_config.py,
started by hubctl.start_hub with hubctl.access_env, i.e. `make hub-start HUB_BIND_URL=...`) listens
there with a certificate the test makes with openssl (self-signed, its address in subjectAltName).
Chromium trusts that certificate's key only (`--ignore-certificate-errors-spki-list`); a Chromium
without it is refused (the certificate is really checked).

* plain HTTP on a network address: hubctl refuses to start it so; a hub forced to shows the login
  page's "unsecured HTTP connection" warning (the check below can fail);
* TLS: from the namespace only the TLS port answers (the hub's API, the proxy's API, the grader
  service and the student's server are on the host's loopback); the certificate verifies for the
  address; the login page has no warning; a student logs in with their password and lands in
  their JupyterLab; every cookie is Secure; a browser without the key is refused;
* the university's login: oauthenticator's GenericOAuthenticator (hub/auth/oauth.py) against
  node-oidc-provider 9.13.3 (hub/auth/test-idp/, `make hub-idp`) on the same link, over TLS. A
  student signs in at the IdP (a wrong password is refused there), lands in their own server and
  gets the student's menu; the instructor gets Formgrader and the grader service; an identity the
  IdP knows but the roster does not is refused (403), as is one claiming `root`; added with
  `hubctl.add_users` (as `make students` does) the same identity gets in without a restart; an
  OIDC settings file others can read stops the hub from starting.

Needs root (netns, veth, system users, the spawner), /usr/bin/chromium, openssl, the hub's venv
and proxy and the IdP (`make hub-env hub-proxy hub-idp`). Runs with TC_HUB_BROWSER=1 (`make
hub-test`); `make test` runs only the argument checks at the end. Prints the time of each phase.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hub"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import hubctl  # noqa: E402
from test_hub_browser import CHROMIUM, CHROMIUM_FLAGS, Timer, nbgrader_menu  # noqa: E402

HUB_VENV = Path(os.environ.get("HUB_VENV", "/opt/transformer-course-hub"))
CHP = ROOT / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
IDP_DIR = ROOT / "hub" / "auth" / "test-idp"
TIMEOUT_MS = 120_000
WARNING = "#insecure-login-warning"

pytestmark = pytest.mark.slow
browser_only = pytest.mark.skipif(os.environ.get("TC_HUB_BROWSER") != "1",
                                  reason="the class's way in runs under `make hub-test` (TC_HUB_BROWSER=1)")


def sh(*cmd: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


# ---------------------------------------------------------------- a second machine: a network namespace
def free_subnet() -> tuple[str, str]:
    """A /30 in 10.0.0.0/8 that no route of the host touches: (host's address, the namespace's)."""
    routes = sh("ip", "-4", "route", "show", "table", "all").stdout + sh("ip", "-4", "addr").stdout
    for _ in range(100):
        a, b = secrets.randbelow(200) + 20, secrets.randbelow(64) * 4
        prefix = f"10.{a}.{b // 4}."
        if f"10.{a}." not in routes:
            return prefix + "1", prefix + "2"
    raise RuntimeError("no free 10.x.y.0/30 for the test's namespace")


class NetNS:
    """`ip netns add`, a veth pair, the host's side HOST and the namespace's NS (a /30)."""

    def __init__(self, run: str):
        self.name, self.host_if, self.ns_if = f"tc-reach-{run}", f"tcr{run}h", f"tcr{run}n"
        self.host, self.ns = free_subnet()
        sh("ip", "netns", "add", self.name)
        sh("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        sh("ip", "link", "set", self.ns_if, "netns", self.name)
        sh("ip", "addr", "add", f"{self.host}/30", "dev", self.host_if)
        sh("ip", "link", "set", self.host_if, "up")
        sh("ip", "-n", self.name, "addr", "add", f"{self.ns}/30", "dev", self.ns_if)
        sh("ip", "-n", self.name, "link", "set", self.ns_if, "up")
        sh("ip", "-n", self.name, "link", "set", "lo", "up")

    def run(self, *cmd: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["nsenter", f"--net=/run/netns/{self.name}", *cmd], capture_output=True, text=True, **kw)

    def remove(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


PROBE = r"""
import json, socket, ssl, sys, urllib.request
host, ports, https_port, cafile = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
out = {}
for p in ports:                                   # which of the hub's ports answer at all
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, p)); out[p] = "open"
    except OSError as e:
        out[p] = type(e).__name__
    finally:
        s.close()
ctx = ssl.create_default_context(cafile=cafile)   # the certificate, verified for the address
with socket.create_connection((host, https_port), timeout=10) as raw, ctx.wrap_socket(raw, server_hostname=host) as t:
    out["tls"] = [t.version(), t.getpeercert()["subjectAltName"]]
with urllib.request.urlopen(f"https://{host}:{https_port}/hub/login", context=ctx, timeout=30) as r:
    out["https_login"] = [r.status, r.read().decode()[:20000]]
try:                                              # plain HTTP on the TLS port
    urllib.request.urlopen(f"http://{host}:{https_port}/hub/login", timeout=10)
    out["plain_http"] = "answered"
except Exception as e:
    out["plain_http"] = type(e).__name__
print(json.dumps(out))
"""


def listeners() -> list[tuple[str, int, int]]:
    """(address, port, uid) of every listening IPv4 TCP socket in the host's namespace (/proc/net/tcp)."""
    out = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if f[3] != "0A":
            continue
        addr, port = f[1].split(":")
        ip = socket.inet_ntoa(bytes.fromhex(addr)[::-1])
        out.append((ip, int(port, 16), int(f[7])))
    return out


# ---------------------------------------------------------------- the fixture: namespace, certificate, class, IdP
@pytest.fixture(scope="module")
def reach(tmp_path_factory):
    pytest.importorskip("playwright", reason="playwright is not installed (make test-env)")
    missing = [why for why, ok in (
        ("root (network namespace, system users, the spawner)", os.geteuid() == 0),
        (f"Chromium at {CHROMIUM} (`make browser-deps`; never `playwright install`)", Path(CHROMIUM).exists()),
        (f"the hub's venv with oauthenticator at {HUB_VENV} (`make hub-env`)",
         any((HUB_VENV / "lib").glob("python3*/site-packages/oauthenticator"))),
        (f"the proxy {CHP} (`make hub-proxy`)", CHP.exists()),
        ("the test's OpenID Connect provider (`make hub-idp`)", (IDP_DIR / "node_modules" / "oidc-provider").is_dir()),
    ) if not ok]
    if missing:
        pytest.skip("needs " + "; ".join(missing))

    run = secrets.token_hex(2)
    base = f"tc-oidc-{run}"
    tmp = tmp_path_factory.mktemp("reach")
    tmp.chmod(0o700)
    state = tmp / "state"
    cls = hubctl.Class(instructors=[], students=[], exchange=Path(f"/srv/{base}/exchange"),
                       assignments=["01_attention"])
    timer, net, idp = Timer(), None, None
    try:
        net = NetNS(run)
        # the certificate of the class's address (self-signed; the address in subjectAltName); root's key
        cert, key = tmp / "hub.pem", tmp / "hub.key"
        sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={net.host}",
           "-addext", f"subjectAltName=IP:{net.host}", "-keyout", str(key), "-out", str(cert))
        key.chmod(0o600)
        spki = subprocess.run(f"openssl x509 -in {cert} -pubkey -noout | openssl pkey -pubin -outform der "
                              "| openssl dgst -sha256 -binary | base64", shell=True, check=True,
                              capture_output=True, text=True).stdout.strip()
        # Chromium inside the namespace (Playwright talks to it over pipes, which nsenter keeps)
        wrapper = tmp / "chromium-in-netns"
        wrapper.write_text(f'#!/bin/sh\nexec nsenter --net=/run/netns/{net.name} {CHROMIUM} "$@"\n')
        wrapper.chmod(0o755)

        new = hubctl.add_users(cls, state, [f"{base}-i"], [f"{base}-a", f"{base}-b"])
        passwords = {user: password for user, _, password in new}
        hubctl.setup_course(cls, HUB_VENV)
        port = hubctl.free_port_block()
        public = f"https://{net.host}:{port}"
        timer.mark(f"namespace {net.name} ({net.ns} -> {net.host}), certificate, class set up")

        # the university's IdP on the same link, over TLS with the same certificate (another port)
        idp_port = hubctl.free_port_block(1)
        issuer = f"https://{net.host}:{idp_port}"
        accounts = {name: secrets.token_urlsafe(12) for name in (*cls.users, f"{base}-x", "root")}
        idp_settings = tmp / "idp.json"
        idp_settings.write_text(json.dumps({
            "issuer": issuer, "host": net.host, "port": idp_port, "tls": {"cert": str(cert), "key": str(key)},
            "clients": [{"client_id": f"course-hub-{run}", "client_secret": secrets.token_urlsafe(32),
                         "redirect_uris": [f"{public}/hub/oauth_callback"]}],
            # the IdP's subject ids are opaque; the login id is preferred_username, as the class list's ids
            "accounts": [{"login": name, "password": pw, "sub": f"uni-{secrets.token_hex(8)}",
                          "claims": {"preferred_username": name, "name": f"Person {name}",
                                     "email": f"{name}@uni.example"}} for name, pw in accounts.items()],
        }))
        idp_settings.chmod(0o600)
        idp_log = tmp / "idp.log"
        idp = subprocess.Popen(["node", str(IDP_DIR / "idp.mjs"), str(idp_settings)], cwd=IDP_DIR,
                               stdout=open(idp_log, "w"), stderr=subprocess.STDOUT)
        ctx = ssl.create_default_context(cafile=str(cert))
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{issuer}/.well-known/openid-configuration", context=ctx, timeout=2) as r:
                    assert json.load(r)["issuer"] == issuer
                    break
            except OSError:
                if idp.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the IdP did not start: " + idp_log.read_text())
                time.sleep(0.2)
        timer.mark(f"OpenID Connect provider up at {issuer}")
        yield {"cls": cls, "state": state, "net": net, "cert": cert, "key": key, "spki": spki, "wrapper": wrapper,
               "port": port, "public": public, "passwords": passwords, "issuer": issuer, "accounts": accounts,
               "client": json.loads(idp_settings.read_text())["clients"][0], "timer": timer, "base": base,
               "idp_log": idp_log, "tmp": tmp}
    finally:
        hubctl.stop_hub(state=state, cls=cls)
        if idp is not None:
            idp.terminate()
            idp.wait(10)
        hubctl.teardown(cls, state)
        shutil.rmtree(f"/srv/{base}", ignore_errors=True)
        if net is not None:
            net.remove()


def browser(pw, r, trust: bool = True):
    """Chromium inside the namespace; it trusts the test certificate's key only if ``trust``."""
    flags = CHROMIUM_FLAGS + ([f"--ignore-certificate-errors-spki-list={r['spki']}"] if trust else [])
    return pw.chromium.launch(executable_path=str(r["wrapper"]), headless=True, args=flags)


def context(b, r, external: list):
    ctx = b.new_context(viewport={"width": 1400, "height": 900})
    ctx.set_default_timeout(TIMEOUT_MS)
    allowed = (f"https://{r['net'].host}:", f"http://{r['net'].host}:")

    def guard(route):          # the class's address only: anything else is refused and recorded
        if route.request.url.startswith(allowed):
            route.continue_()
        else:
            external.append(route.request.url)
            route.abort()

    ctx.route("**/*", guard)
    return ctx


def browse(ctx, url: str) -> tuple[int, str, str, object]:
    """Open ``url`` in a new tab of ``ctx`` (Chromium, in the namespace: Playwright's own request API
    would leave from the host): (status, final URL, page text, JSON body or None)."""
    page = ctx.new_page()
    try:
        response = page.goto(url)
        try:
            body = response.json()
        except Exception:
            body = None
        return response.status, page.url, page.content(), body
    finally:
        page.close()


def warning_shown(page) -> bool:
    page.locator(WARNING).wait_for(state="attached")
    page.wait_for_load_state("load")
    return page.locator(WARNING).is_visible()


def wait_lab(page, user: str) -> None:
    page.wait_for_url(f"**/user/{user}/lab**")
    page.wait_for_selector("#jp-main-dock-panel")
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").wait_for()


def stop(hub, r, cls=None) -> None:
    """Stop the hub; when called while a test fails, print the tail of its log first (the state goes)."""
    log = r["state"] / "jupyterhub.log"
    if sys.exc_info()[0] is not None and log.exists():
        print("[hub reach] hub log, last lines:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-80:]))
    hubctl.stop_hub(hub, cls)


def start(r, **access):
    env = hubctl.access_env(r["state"], **access)
    return hubctl.start_hub(port=r["port"], venv=HUB_VENV, state=r["state"], extra_env=env)


# ---------------------------------------------------------------- plain HTTP: refused, and warned about
@browser_only
def test_plain_http_on_a_network_address_is_refused_and_warned(reach):
    from playwright.sync_api import sync_playwright

    r, timer = reach, reach["timer"]
    host = r["net"].host
    with pytest.raises(SystemExit, match="over TLS only"):
        hubctl.access_env(r["state"], bind_url=f"http://{host}:{r['port']}")
    # forced past hubctl (its environment set by hand), the login page warns the class
    hub = hubctl.start_hub(port=r["port"], venv=HUB_VENV, state=r["state"],
                           extra_env={"TC_HUB_BIND_URL": f"http://{host}:{r['port']}"})
    try:
        assert hub.url == f"http://{host}:{r['port']}"
        external: list[str] = []
        with sync_playwright() as pw:
            b = browser(pw, r)
            try:
                page = context(b, r, external).new_page()
                page.goto(f"{hub.url}/hub/login")
                assert page.evaluate("window.isSecureContext") is False
                assert warning_shown(page), "the login page does not warn about plain HTTP"
                assert "unsecured HTTP connection" in page.locator(WARNING).inner_text()
            finally:
                b.close()
        assert external == [], external
    finally:
        stop(hub, r)
    timer.mark("plain HTTP on the namespace's address: refused by hubctl; forced, the login page warns")


# ---------------------------------------------------------------- TLS on the class's address, passwords
@browser_only
def test_tls_on_the_class_address(reach):
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    r, timer = reach, reach["timer"]
    host, port = r["net"].host, r["port"]
    (instructor,), (a, b) = r["cls"].instructors, r["cls"].students
    hub = start(r, bind_url=f"https://{host}:{port}", ssl_cert=str(r["cert"]), ssl_key=str(r["key"]))
    try:
        assert hub.url == r["public"]
        timer.mark(f"hub up over TLS at {hub.url} in {hub.started_seconds:.1f} s")

        # from the other machine: only the TLS port answers; the certificate verifies for the address
        probe = r["net"].run(str(HUB_VENV / "bin" / "python"), "-c", PROBE, host,
                             json.dumps([port, port + 1, port + 2, port + 3]), str(port), str(r["cert"]), timeout=120)
        assert probe.returncode == 0, probe.stderr
        seen = json.loads(probe.stdout)
        assert seen[str(port)] == "open"
        assert all(seen[str(p)] == "ConnectionRefusedError" for p in (port + 1, port + 2, port + 3)), seen
        assert seen["https_login"][0] == 200 and WARNING[1:] in seen["https_login"][1]
        assert seen["tls"][0] in ("TLSv1.2", "TLSv1.3") and ["IP Address", host] in seen["tls"][1], seen["tls"]
        assert seen["plain_http"] != "answered", "plain HTTP answered on the TLS port"
        timer.mark(f"from the namespace: only {port} answers ({seen['tls'][0]}, certificate verified for {host})")

        external: list[str] = []
        with sync_playwright() as pw:
            # a browser that does not trust the key is stopped: the certificate is checked
            untrusting = browser(pw, r, trust=False)
            try:
                with pytest.raises(PlaywrightError, match="ERR_CERT_AUTHORITY_INVALID"):
                    untrusting.new_page().goto(f"{hub.url}/hub/login")
            finally:
                untrusting.close()

            chromium = browser(pw, r)
            try:
                ctx = context(chromium, r, external)
                page = ctx.new_page()
                page.goto(f"{hub.url}/hub/login")
                assert page.evaluate("[window.isSecureContext, location.protocol]") == [True, "https:"]
                assert not warning_shown(page), "the login page warns about plain HTTP over TLS"
                # a student with their own password, typed into the page, over TLS
                page.fill("input[name=username]", a)
                page.fill("input[name=password]", r["passwords"][a])
                t0 = time.monotonic()
                page.click("input[type=submit], button[type=submit]")
                wait_lab(page, a)
                timer.mark(f"{a}: password login over TLS to JupyterLab in {time.monotonic() - t0:.1f} s (incl. spawn)")
                assert nbgrader_menu(page) == ["Assignment List"]
                cookies = [c for c in ctx.cookies() if c["domain"] == host]
                assert {"jupyterhub-hub-login", f"jupyterhub-user-{a}"} <= {c["name"] for c in cookies}, cookies
                assert all(c["secure"] for c in cookies), [(c["name"], c["path"]) for c in cookies if not c["secure"]]
            finally:
                chromium.close()
        assert external == [], external

        # the student's server and the hub's own ports listen on the host's loopback; only the proxy on the address
        uid = pwd.getpwnam(a).pw_uid
        mine = [(ip, p) for ip, p, owner in listeners() if owner == uid]
        assert mine and all(ip == "127.0.0.1" for ip, _ in mine), mine
        hubs = {p: ip for ip, p, _ in listeners() if port <= p <= port + 3}
        assert hubs == {port: host, port + 1: "127.0.0.1", port + 2: "127.0.0.1", port + 3: "127.0.0.1"}, hubs
        timer.mark("listening: the proxy on the class's address only; hub, proxy API, grader, server on 127.0.0.1")
    finally:
        stop(hub, r)


# ---------------------------------------------------------------- the university's login (OpenID Connect)
def idp_sign_in(page, login: str, password: str) -> None:
    page.locator("#login").fill(login)
    page.locator("#password").fill(password)
    page.locator("#sign-in").click()


def hub_login_via_idp(page, r) -> None:
    page.goto(f"{r['public']}/hub/login")
    assert not warning_shown(page)
    page.get_by_role("button", name="Sign in with University login").click()
    page.wait_for_url(f"{r['issuer']}/interaction/**")


@browser_only
def test_university_login(reach):
    from playwright.sync_api import sync_playwright

    r, timer = reach, reach["timer"]
    host, port, state = r["net"].host, r["port"], r["state"]
    cls = r["cls"]
    (instructor,), (a, b) = cls.instructors, cls.students
    stranger = f"{r['base']}-x"
    settings = state / "oidc.json"
    settings.write_text(json.dumps({"issuer": r["issuer"], "client_id": r["client"]["client_id"],
                                    "client_secret": r["client"]["client_secret"], "ca_file": str(r["cert"]),
                                    "username_claim": "preferred_username"}))
    access = dict(bind_url=f"https://{host}:{port}", ssl_cert=str(r["cert"]), ssl_key=str(r["key"]), auth="oidc")

    # the settings hold the client secret: readable by others, the hub refuses them
    settings.chmod(0o644)
    with pytest.raises(RuntimeError, match="closed to others"):
        start(r, **access)
    hubctl.stop_hub(state=state)
    settings.chmod(0o600)

    hub = start(r, **access)
    external: list[str] = []
    try:
        timer.mark(f"hub up over TLS with the OpenID Connect login in {hub.started_seconds:.1f} s")
        with sync_playwright() as pw:
            chromium = browser(pw, r)
            try:
                # a student: the IdP refuses a wrong password, then signs them in; they land in their own server
                sctx = context(chromium, r, external)
                page = sctx.new_page()
                hub_login_via_idp(page, r)
                idp_sign_in(page, a, r["accounts"][b])
                page.locator("#error").wait_for()
                assert "Wrong login or password" in page.locator("#error").inner_text()
                t0 = time.monotonic()
                idp_sign_in(page, a, r["accounts"][a])
                wait_lab(page, a)
                timer.mark(f"{a}: signed in at the IdP, in their JupyterLab in {time.monotonic() - t0:.1f} s (incl. spawn)")
                assert nbgrader_menu(page) == ["Assignment List"], "the roster makes them a student"
                assert hubctl.processes_of(pwd.getpwnam(a).pw_uid), f"no process runs as {a}"
                status, _, text, who = browse(sctx, f"{r['public']}/hub/api/user")
                assert status == 200 and who["name"] == a and who["admin"] is False, text[:500]
                assert browse(sctx, f"{r['public']}/services/grader/")[0] == 403
                status, url, text, _ = browse(sctx, f"{r['public']}/user/{instructor}/api/contents")
                assert status in (403, 404) and '"content"' not in text, (status, url)
                cookies = [c for c in sctx.cookies() if c["domain"] == host]
                assert cookies and all(c["secure"] for c in cookies), [(c["name"], c["path"]) for c in cookies
                                                                       if not c["secure"]]

                # the instructor, by the roster: Formgrader and the grader service
                ictx = context(chromium, r, external)
                ipage = ictx.new_page()
                hub_login_via_idp(ipage, r)
                t0 = time.monotonic()
                idp_sign_in(ipage, instructor, r["accounts"][instructor])
                wait_lab(ipage, instructor)
                timer.mark(f"{instructor}: signed in at the IdP, in JupyterLab in {time.monotonic() - t0:.1f} s")
                assert nbgrader_menu(ipage) == ["Formgrader", "Create assignment"], "the roster makes them the instructor"
                ipage.keyboard.press("Escape")
                gpage = ictx.new_page()
                gpage.goto(f"{r['public']}/services/grader/")
                assert gpage.locator("#who").inner_text() == instructor

                # identities the IdP vouches for but the roster does not name are refused
                for name in (stranger, "root"):
                    xctx = context(chromium, r, external)
                    xpage = xctx.new_page()
                    hub_login_via_idp(xpage, r)
                    with xpage.expect_response(lambda resp: "/hub/oauth_callback" in resp.url) as answer:
                        idp_sign_in(xpage, name, r["accounts"][name])
                    assert answer.value.status == 403, (name, answer.value.status)
                    xpage.get_by_role("heading", name="403").wait_for()
                    assert "not on this course's class list" in xpage.locator("h1").inner_text()
                    status, url, _, _ = browse(xctx, f"{r['public']}/hub/home")
                    assert "/hub/login" in url, (name, status, url)
                    xctx.close()
                timer.mark(f"{stranger} and 'root', vouched for by the IdP, refused (403): not on the roster")

                # ... until the class list names them (make students: hubctl.add_users): no restart
                hubctl.add_users(cls, state, [], [stranger])
                xctx = context(chromium, r, external)
                xpage = xctx.new_page()
                hub_login_via_idp(xpage, r)
                idp_sign_in(xpage, stranger, r["accounts"][stranger])
                wait_lab(xpage, stranger)
                assert nbgrader_menu(xpage) == ["Assignment List"]
                timer.mark(f"{stranger}, added to the class list, signed in without a restart")
            finally:
                chromium.close()
        assert external == [], external
        log = r["idp_log"].read_text()
        assert f'idp sign-in "{a}": refused' in log and f'idp sign-in "{a}": accepted' in log, log[-2000:]
    finally:
        stop(hub, r, cls)
    print("[hub reach] phases: " + json.dumps(timer.marks))


# ---------------------------------------------------------------- hubctl's checks (also in `make test`)
def test_access_arguments(tmp_path):
    """hubctl.access_env: plain HTTP only on loopback, cert and key together, a key only root reads."""
    state = tmp_path
    assert hubctl.access_env(state) == {}
    assert hubctl.access_env(state, bind_url="http://127.0.0.1:8000") == {
        "TC_HUB_BIND_URL": "http://127.0.0.1:8000", "TC_HUB_PUBLIC_URL": "http://127.0.0.1:8000/"}
    with pytest.raises(SystemExit, match="over TLS only"):
        hubctl.access_env(state, bind_url="http://0.0.0.0:80")
    with pytest.raises(SystemExit, match="expected http"):
        hubctl.access_env(state, bind_url="hub.example.edu")
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("cert")
    key.write_text("key")
    with pytest.raises(SystemExit, match="both or neither"):
        hubctl.access_env(state, bind_url="https://0.0.0.0:443", ssl_cert=str(cert))
    key.chmod(0o644)
    with pytest.raises(SystemExit, match="only root can read"):
        hubctl.access_env(state, bind_url="https://0.0.0.0:443", ssl_cert=str(cert), ssl_key=str(key))
    key.chmod(0o600)
    if os.geteuid() == 0:
        env = hubctl.access_env(state, bind_url="https://0.0.0.0:443", ssl_cert=str(cert), ssl_key=str(key),
                                public_url="https://hub.uni.example/", auth="oidc")
        assert env == {"TC_HUB_SSL_CERT": str(cert), "TC_HUB_SSL_KEY": str(key), "TC_HUB_BIND_URL": "https://0.0.0.0:443",
                       "TC_HUB_PUBLIC_URL": "https://hub.uni.example/",
                       "TC_HUB_AUTH_CONFIG": str(ROOT / "hub" / "auth" / "oauth.py"),
                       "TC_HUB_OIDC": str(state / "oidc.json")}
        assert hubctl.probe_url(env, 8800) == "https://127.0.0.1:443"
    with pytest.raises(SystemExit, match="expected one of"):
        hubctl.access_env(state, auth="ldap")
