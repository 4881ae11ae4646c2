"""The console in a real browser: headless Debian chromium driven over WebDriver (selenium).

Run by .ci/console-browser, once per engine:

    python console-browser.py --parasol BIN --engine sqlite|postgres [--database URL]
        --axe axe.min.js --work DIR [--screenshots DIR]

Starts `parasol serve --demo` (fresh data directory under DIR, 127.0.0.1, free port) with its
feeds on (export files into DIR, the RPZ primary on a free port, unsigned transfers allowed
from 127.0.0.1, NOTIFYs to a UDP responder of this script that answers them), lists a few names
through the enforcement interface, then in the browser: the sign-in page, signing in with the
demo service provider's credential, the overview, an organization (search, delete, allow, the
decision on a name), the request journal with a refused batch whose member name is markup
(shown as text, no element made of it), the overview's feeds after a zone transfer from
127.0.0.1 and a refused one from 127.0.0.2 (made by this script's own small DNS client),
forged forms posted by pages of another site (http://127.0.0.2) and of another origin of the
same site (https://127.0.0.1, another port): refused with 400, nothing changed (checked through
the APIs); sign-out (the session is gone).
On every page: no console error and no Content-Security-Policy violation in chromium's log, and
axe-core (injected with execute_script, which the page's CSP does not govern) finds nothing of
impact serious or critical; both checks are first shown to fire (an inline script added to a
page, an image without alt). With --screenshots, a PNG of each page (1280x900), and one of the overview scrolled to its
feeds.

Chromium trusts the demo's self-signed certificate by its public key only
(--ignore-certificate-errors-spki-list with the certificate's SPKI hash), not by ignoring
certificate errors in general (with another key's hash it shows its privacy error page); this
script's own HTTPS requests verify the certificate against its file.

Every wait is a WebDriverWait or a bounded wait on the server's log: no sleep.
"""

import argparse
import base64
import hashlib
import http.server
import json
import os
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

WAIT = 30  # seconds any one wait may take
MARKUP = "<img src=x onerror=alert(1)>"
LISTED = [
    "ads.example",
    "ads-cdn.example",
    "adserver.example",
    "tracker.example",
    "malware-drop.example",
    "phish-login.example",
    "crypto-miner.example",
    "c2.botnet.example",
]


def log(msg):
    print(f"console-browser: {msg}", file=sys.stderr, flush=True)


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def event(domain):
    return {
        "deviceId": "ba6a59f4-e692-4724-ba36-c28132c761de",
        "deviceVersion": "13.7a",
        "eventTime": "2026-11-22T10:00:00.0Z",
        "alertTime": "2026-11-22T10:00:01Z",
        "dstDomain": domain,
        "dstUrl": f"http://{domain}/payload",
        "protocolVersion": "1.0a",
        "providerName": "Security Platform",
    }


# ------------------------------------------------------------------------------------ the server


class Server:
    """`parasol serve --demo` on a fresh data directory, read until its ready line."""

    def __init__(self, parasol, work, database, notify):
        self.data = os.path.join(work, "data")
        self.exports = os.path.join(work, "exports")
        args = [parasol, "serve", "--demo", "--data-dir", self.data, "--listen", "127.0.0.1:0"]
        args += ["--export-dir", self.exports, "--rpz-listen", "127.0.0.1:0"]
        args += ["--rpz-allow", "127.0.0.1/32", "--rpz-notify", f"127.0.0.1:{notify}"]
        if database:
            args += ["--database", database]
        self.rpz = None
        self.log_path = os.path.join(work, "server.log")
        self.log_file = open(self.log_path, "w")
        self.out = open(os.path.join(work, "server.stdout"), "w")
        self.proc = subprocess.Popen(args, stdout=self.out, stderr=subprocess.PIPE, text=True)
        self.ready = threading.Event()
        self.url = None
        self.reader = threading.Thread(target=self._read_log, daemon=True)
        self.reader.start()
        if not self.ready.wait(60) or not self.url or not self.rpz:
            self.stop()
            raise Failure(f"the server logged no ready line in 60 s; its log:\n{self.log_text()}")
        # The demo's credentials, written into the data directory before the ready line.
        with open(os.path.join(self.data, "demo-credentials.json")) as f:
            self.creds = json.load(f)
        self.cert = os.path.join(self.data, "tls", "cert.pem")
        self.tls = ssl.create_default_context(cafile=self.cert)

    def _read_log(self):
        for line in self.proc.stderr:
            self.log_file.write(line)
            self.log_file.flush()
            # "rpz: serving the zones org-<id>.rpz.parasol on 127.0.0.1:PORT (UDP and TCP)..."
            if "rpz: serving the zones " in line and self.rpz is None:
                host, port = line.split(" on ", 1)[1].split(" ", 1)[0].rsplit(":", 1)
                self.rpz = (host, int(port))
            if "parasol ready: serving " in line and not self.ready.is_set():
                self.url = line.split("parasol ready: serving ", 1)[1].strip()
                self.ready.set()
        self.ready.set()

    def log_text(self):
        if not self.log_file.closed:
            self.log_file.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(30)
        self.log_file.close()
        self.out.close()

    def request(self, method, path, body=None, headers=None, auth=None):
        """(status, body bytes) of one HTTPS request, the certificate verified."""
        headers = dict(headers or {})
        if auth:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, context=self.tls, timeout=WAIT) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def post_events(self, key, body):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.request(
            "POST",
            f"/1.0/events?customerKey={key}",
            data,
            {"Content-Type": "application/json"},
        )

    def listed(self, key):
        """Every name on the organization's domain list, through the enforcement interface."""
        names, path = {}, f"/1.0/domains?customerKey={key}&limit=200"
        status, body = self.request("GET", path)
        check(status == 200, f"GET /1.0/domains answered {status}: {body[:200]!r}")
        for d in json.loads(body)["data"]:
            names[d["name"]] = d["id"]
        return names

    def allowed(self, org, cred):
        """The organization's allow list, through the management interface."""
        status, body = self.request("GET", f"/parasol/v1/organizations/{org}/allowlist", auth=cred)
        check(status == 200, f"GET allowlist answered {status}: {body[:200]!r}")
        doc = json.loads(body)
        items = doc["data"] if isinstance(doc, dict) else doc
        return sorted(i["name"] if isinstance(i, dict) else i for i in items)


# ------------------------------------------------------------------------------------------- DNS


def answer_notifies():
    """A UDP socket on 127.0.0.1 that answers every NOTIFY it gets (NOERROR), on a thread of its
    own; returns its port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))

    def serve():
        while True:
            data, peer = sock.recvfrom(4096)
            if len(data) >= 12:
                # The same id, QR set, opcode kept, RCODE 0, no records.
                sock.sendto(data[:2] + bytes([data[2] | 0x80, 0]) + bytes(8), peer)

    threading.Thread(target=serve, daemon=True).start()
    return sock.getsockname()[1]


def axfr_rcode(primary, zone, source):
    """The RCODE of the first message answering an unsigned AXFR of `zone` over TCP from the
    loopback address `source`."""
    qname = b"".join(bytes([len(label)]) + label.encode() for label in zone.split(".")) + b"\0"
    query = struct.pack(">HHHHHH", 0x5053, 0, 1, 0, 0, 0) + qname + struct.pack(">HH", 252, 1)
    with socket.create_connection(primary, timeout=WAIT, source_address=(source, 0)) as s:
        s.sendall(struct.pack(">H", len(query)) + query)
        f = s.makefile("rb")
        length = f.read(2)
        check(len(length) == 2, f"no answer to the AXFR of {zone} from {source}")
        message = f.read(struct.unpack(">H", length)[0])
        check(message[:2] == query[:2], f"the answer to the AXFR of {zone}: another id")
        return message[3] & 0x0F


# ------------------------------------------------------------------------- the cross-site page


def serve_attacker(host, tls, target_url, forms):
    """A page on another origin per form, served on `host` (plain HTTP, or HTTPS with the
    certificate and key `tls`): it posts the form to the console as soon as it loads.
    Returns (server, {name: url})."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            name = self.path.strip("/")
            if name not in forms:
                self.send_error(404)
                return
            action, fields = forms[name]
            inputs = "".join(
                f'<input type="hidden" name="{k}" value="{v}">' for k, v in fields.items()
            )
            page = (
                f'<!doctype html><html lang="en"><head><title>{name}</title></head>'
                f'<body onload="document.forms[0].submit()">'
                f'<form method="post" action="{target_url}{action}">{inputs}</form>'
                f"</body></html>"
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer((host, 0), Handler)
    scheme = "http"
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        scheme = "https"
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    return srv, {name: f"{scheme}://{host}:{port}/{name}" for name in forms}


# ------------------------------------------------------------------------------------ the browser


def spki_hash(cert):
    """base64 of the SHA-256 of the certificate's SubjectPublicKeyInfo (openssl)."""
    pub = subprocess.run(
        ["openssl", "x509", "-pubkey", "-noout", "-in", cert],
        check=True,
        capture_output=True,
    ).stdout
    der = subprocess.run(
        ["openssl", "pkey", "-pubin", "-outform", "der"],
        input=pub,
        check=True,
        capture_output=True,
    ).stdout
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def browser(work, cert):
    opts = webdriver.ChromeOptions()
    opts.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={os.path.join(work, 'chromium')}",
        f"--ignore-certificate-errors-spki-list={spki_hash(cert)}",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    service = Service(
        executable_path=os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"),
        log_output=os.path.join(work, "chromedriver.log"),
    )
    d = webdriver.Chrome(options=opts, service=service)
    # Pages (and screenshots) of exactly 1280x900 CSS pixels.
    d.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False},
    )
    d.set_page_load_timeout(WAIT)
    d.set_script_timeout(WAIT)
    return d


class Console:
    """The browser on the console: waits, page checks and screenshots."""

    def __init__(self, driver, server, axe, shots):
        self.d = driver
        self.s = server
        self.axe = axe
        self.shots = shots
        self.pages_checked = []
        self.network = []

    def wait(self, cond, what):
        try:
            return WebDriverWait(self.d, WAIT).until(cond)
        except TimeoutException as e:
            raise Failure(f"waited {WAIT} s for {what}: {type(e).__name__} at {self.d.current_url}")

    def h1(self, text):
        self.wait(EC.text_to_be_present_in_element((By.TAG_NAME, "h1"), text), f"h1 {text!r}")

    def open(self, path):
        self.d.get(self.s.url + path)

    def body(self):
        return self.d.find_element(By.TAG_NAME, "body").text

    def click(self, css):
        self.d.find_element(By.CSS_SELECTOR, css).click()

    def type(self, css, text):
        el = self.d.find_element(By.CSS_SELECTOR, css)
        el.clear()
        el.send_keys(text)

    def log_entries(self):
        return self.d.get_log("browser")

    def clean_log(self, page):
        """No console message of level SEVERE or WARNING, among them CSP violations."""
        bad = [e for e in self.log_entries() if e["level"] in ("SEVERE", "WARNING")]
        check(not bad, f"{page}: chromium's console logged {json.dumps(bad, indent=1)}")

    def accessible(self, page):
        """axe-core on the current page: nothing of impact serious or critical."""
        self.d.execute_script(self.axe)
        result = self.d.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "axe.run(document, {resultTypes: ['violations']})"
            ".then(r => done({ok: true, violations: r.violations, passes: r.passes.length}),"
            "      e => done({ok: false, error: String(e)}));"
        )
        check(result.get("ok"), f"{page}: axe-core failed: {result.get('error')}")
        check(result["passes"] > 0, f"{page}: axe-core ran no rule")
        grave = [
            {
                "id": v["id"],
                "impact": v["impact"],
                "help": v["help"],
                "nodes": [n["html"] for n in v["nodes"]][:5],
            }
            for v in result["violations"]
            if v["impact"] in ("serious", "critical")
        ]
        minor = [f"{v['id']} ({v['impact']})" for v in result["violations"] if v not in grave]
        check(not grave, f"{page}: axe-core found {json.dumps(grave, indent=1)}")
        return minor

    def page_done(self, page, shot=None):
        """The checks every page gets; a screenshot with --screenshots."""
        minor = self.accessible(page)
        self.clean_log(page)
        if shot and self.shots:
            path = os.path.join(self.shots, f"{shot}.png")
            check(self.d.save_screenshot(path), f"screenshot {path}")
        self.pages_checked.append(page)
        log(
            f"  {page}: no console error, no CSP violation, axe-core: nothing serious or "
            f"critical{' (minor: ' + ', '.join(minor) + ')' if minor else ''}"
        )

    def network_reset(self):
        """Forgets the network events seen so far."""
        self.d.get_log("performance")
        self.network = []

    def responses(self, url):
        """Statuses chromium received for requests to `url` since `network_reset` (redirects
        included), why it withheld the session cookie from them, if it did, and whether it sent
        it."""
        self.network += [json.loads(e["message"])["message"] for e in self.d.get_log("performance")]
        messages = self.network
        ids = {
            m["params"]["requestId"]
            for m in messages
            if m["method"] == "Network.requestWillBeSent" and m["params"]["request"]["url"] == url
        }
        statuses, withheld, sent = [], [], False
        for m in messages:
            p = m.get("params", {})
            if p.get("requestId") not in ids:
                continue
            if m["method"] == "Network.requestWillBeSent" and p.get("redirectResponse"):
                if p["redirectResponse"]["url"] == url:
                    statuses.append(p["redirectResponse"]["status"])
            elif m["method"] == "Network.responseReceived" and p["response"]["url"] == url:
                statuses.append(p["response"]["status"])
            elif m["method"] == "Network.requestWillBeSentExtraInfo":
                for c in p.get("associatedCookies", []):
                    if c["cookie"]["name"] != "parasol_console":
                        continue
                    if c.get("blockedReasons"):
                        withheld.extend(c["blockedReasons"])
                    else:
                        sent = True
        return statuses, withheld, sent


# ---------------------------------------------------------------------------------- the scenario


def scenario(c, server):
    s = server
    creds = s.creds
    sp = (creds["serviceProvider"]["apiKey"], creds["serviceProvider"]["apiSecret"])
    org = creds["organizations"][0]
    org_id, key = org["id"], org["customerKey"]
    other = creds["organizations"][1]
    base = f"/console/organizations/{org_id}"

    # Names on the first organization's list, some events on the other's.
    status, body = s.post_events(key, [event(n) for n in LISTED])
    check(status == 202, f"listing names answered {status}: {body[:300]!r}")
    status, _ = s.post_events(other["customerKey"], [event("other-org.example")])
    check(status == 202, f"listing the other organization's name answered {status}")
    check(sorted(s.listed(key)) == sorted(LISTED), "the names listed")

    # The sign-in page.
    c.open("/console/")
    c.h1("Sign in")
    # The page's CSP holds and its violations reach the log this suite reads: an inline script
    # added by WebDriver is refused and logged (then the log is read empty again).
    c.d.execute_script(
        "const s = document.createElement('script');"
        "s.textContent = 'window.inlineRan = true';"
        "document.head.appendChild(s);"
    )
    check(
        c.d.execute_script("return window.inlineRan === true") is False,
        "an inline script ran despite the CSP",
    )
    probe = c.wait(
        lambda d: [e for e in c.log_entries() if "Content Security Policy" in e["message"]],
        "chromium to log the inline script's CSP violation",
    )
    log(f"  CSP probe: an inline script was refused and logged ({probe[0]['message'][:90]}...)")
    # And axe-core finds what it should: an image without a text alternative (critical).
    c.d.execute_script(
        "const i = document.createElement('img');"
        "i.src = 'data:image/gif;base64,R0lGODlhAQABAAAAACw=';"
        "document.querySelector('main').appendChild(i);"
    )
    try:
        c.accessible("sign-in page with an image added without alt")
        raise Failure("axe-core found nothing in an image without alt")
    except Failure as e:
        check("image-alt" in str(e), f"axe-core on an image without alt: {e}")
    log("  axe-core probe: an image added without alt is found (image-alt, critical)")
    c.d.refresh()
    c.h1("Sign in")
    c.page_done("sign-in page", "sign-in")

    # A wrong secret: 401's page, the form again, no session.
    c.type("#api_key", sp[0])
    c.type("#secret", "0" * 64)
    c.click("form[action='/console/signin'] button[type=submit]")
    c.wait(
        EC.presence_of_element_located((By.CSS_SELECTOR, "p.error[role=alert]")),
        "the refusal of a wrong secret",
    )
    check(c.d.get_cookie("parasol_console") is None, "a wrong secret set a cookie")
    # Chromium logs the 401 itself as a failed load, and nothing else.
    logged = [e for e in c.log_entries() if "status of 401" not in e["message"]]
    check(not logged, f"the wrong secret's page logged {logged}")

    # Signing in with the demo service provider's credential: the overview, both organizations.
    c.type("#api_key", sp[0])
    c.type("#secret", sp[1])
    c.click("form[action='/console/signin'] button[type=submit]")
    c.h1("Overview")
    text = c.body()
    # The service provider's customer only (the demo's other organization is the MSP's).
    check(
        org["name"] in text and other["name"] not in text,
        f"the overview lists {org['name']} and not {other['name']}",
    )
    check(c.d.get_cookie("parasol_console") is not None, "the session cookie")
    cookie = c.d.get_cookie("parasol_console")
    check(
        cookie["httpOnly"] and cookie["secure"] and cookie.get("sameSite") == "Strict",
        f"the session cookie's attributes: {cookie}",
    )

    # The organization: search, delete, allow, decide.
    c.d.find_element(By.LINK_TEXT, org["name"]).click()
    c.h1(f"Organization {org_id}")
    c.page_done("organization page")
    c.type("#q", "ads")
    c.click("form[role=search] button[type=submit]")
    c.wait(lambda d: "q=ads" in d.current_url, "the search's page")
    rows = [r.text for r in c.d.find_elements(By.CSS_SELECTOR, "main table:first-of-type tbody tr")]
    found = sorted(n for n in LISTED if any(f" {n} " in f" {r} " for r in rows))
    check(
        found == ["ads-cdn.example", "ads.example", "adserver.example"],
        f"the search for 'ads' found {found} in {rows}",
    )
    c.page_done("organization page, searched")
    c.click("button[aria-label='Delete ads-cdn.example']")
    c.wait(
        EC.text_to_be_present_in_element(
            (By.CSS_SELECTOR, "p.notice[role=status]"), "Done: deleted."
        ),
        "the deletion's notice",
    )
    check("ads-cdn.example" not in s.listed(key), "the deleted name is still listed")
    check(len(s.listed(key)) == len(LISTED) - 1, "the deletion removed one name only")
    c.page_done("organization page, after a deletion")

    c.type("#allow", "tracker.example")
    c.click(f"form[action='{base}/allowlist/add'] button[type=submit]")
    c.wait(
        EC.text_to_be_present_in_element(
            (By.CSS_SELECTOR, "p.notice[role=status]"), "Done: allowed."
        ),
        "the allow entry's notice",
    )
    check(s.allowed(org_id, sp) == ["tracker.example"], "the allow list through the API")
    c.type("#name", "cdn.tracker.example")
    c.click(f"form[action='{base}'][method=get]:not([role]) button[type=submit]")
    c.wait(
        EC.text_to_be_present_in_element((By.CSS_SELECTOR, "p.notice"), "cdn.tracker.example"),
        "the decision on a name",
    )
    verdict = c.d.find_element(By.CSS_SELECTOR, "p.notice").text
    check(
        "not blocked" in verdict and "tracker.example" in verdict,
        f"the decision on cdn.tracker.example: {verdict!r}",
    )
    c.type("#name", "c2.botnet.example")
    c.click(f"form[action='{base}'][method=get]:not([role]) button[type=submit]")
    c.wait(
        EC.text_to_be_present_in_element(
            (By.CSS_SELECTOR, "p.notice"), "c2.botnet.example is blocked"
        ),
        "the decision on a listed name",
    )
    c.open(base)
    c.h1(f"Organization {org_id}")
    c.page_done("organization page, after an allow entry", "organization")

    # A refused batch whose member name is markup, sent from here over HTTP.
    member = json.dumps(MARKUP)
    body = json.dumps([event("journal.example")]).replace("{", "{" + f"{member}:1,{member}:2,", 1)
    status, answer = s.post_events(key, body.encode())
    check(status == 400, f"the batch with a duplicated member answered {status}: {answer[:300]!r}")
    errors = json.loads(answer).get("errors", {})
    check(
        errors.get(f"[0].{MARKUP}") == "is duplicated",
        f"the refusal names the member: {answer[:300]!r}",
    )
    status, _ = s.post_events(key, [event("journal-ok.example")])
    check(status == 202, "an accepted batch for the journal")

    c.d.find_element(By.LINK_TEXT, "Request journal").click()
    c.h1("Request journal")
    # The journal is drawn by the server: the refusal's field list is there once the page is.
    c.wait(
        EC.presence_of_element_located((By.CSS_SELECTOR, "main td li")),
        "the refusal's fields in the journal",
    )
    check(not c.d.find_elements(By.TAG_NAME, "img"), "an <img> element was made of the markup")
    check(c.d.execute_script("return document.images.length") == 0, "document.images")
    codes = [e.text for e in c.d.find_elements(By.CSS_SELECTOR, "main td li code")]
    check(MARKUP in codes, f"the member's name shown as text: {codes}")
    check("is duplicated" in c.body(), "the refusal's reason in the journal")
    rows = c.d.find_elements(By.CSS_SELECTOR, "main table tbody tr")
    check(len(rows) == 3, f"the journal shows the organization's 3 requests: {len(rows)}")
    c.page_done("journal page", "journal")
    Select(c.d.find_element(By.ID, "status")).select_by_value("400")
    c.click("form[action$='/journal'] button[type=submit]")
    c.wait(lambda d: "status=400" in d.current_url, "the journal filtered")
    rows = c.d.find_elements(By.CSS_SELECTOR, "main table tbody tr")
    check(len(rows) == 1 and "400" in rows[0].text, "the filter kept the one refusal")
    c.page_done("journal page, filtered by status")

    # The feeds: once the organization's export files hold its last name (its zone is made in the
    # same round, before them), a transfer of its zone from 127.0.0.1 (an allowed address) and
    # one from 127.0.0.2 (neither allowed nor signed: REFUSED, RCODE 5).
    exported = os.path.join(s.exports, f"org-{org_id}.rpz")

    def in_files(_):
        try:
            with open(exported) as f:
                return "journal-ok.example" in f.read()
        except FileNotFoundError:
            return False

    c.wait(in_files, "the organization's last name in its export files")
    zone = f"org-{org_id}.rpz.parasol"
    rcode = axfr_rcode(s.rpz, zone, "127.0.0.1")
    check(rcode == 0, f"the AXFR of {zone} from 127.0.0.1 answered RCODE {rcode}")
    rcode = axfr_rcode(s.rpz, zone, "127.0.0.2")
    check(rcode == 5, f"the AXFR of {zone} from 127.0.0.2 answered RCODE {rcode}, not REFUSED")

    # The overview again, with the last hour's chart (its screenshot): the organization's events
    # (the listed names and the one accepted since) and its refusal, not the other organization's
    # event; and its feeds (read again until the NOTIFY of the last change shows as answered).
    c.open("/console/")
    c.h1("Overview")

    def feeds_shown(d):
        d.refresh()
        text = " ".join(c.body().split())
        return ": answered" in text and "the whole zone" in text and text

    text = c.wait(feeds_shown, "the feeds on the overview, the last NOTIFY answered")
    for fact in (
        "127.0.0.1 AXFR",
        "the whole zone unsigned",
        "127.0.0.2 AXFR",
        "refused: neither signed with the key nor from an allowed address",
        f"on {s.rpz[0]}:{s.rpz[1]} (UDP and TCP)",
        s.exports,
        "Last round that wrote",
    ):
        check(fact in text, f"the overview's feeds show {fact!r}: {text[-1500:]!r}")
    c.h1("Overview")
    chart = c.d.find_element(By.ID, "chart-words").text
    check(
        chart.startswith(f"Last hour: {len(LISTED) + 1} events accepted")
        and ", 1 event requests refused" in chart,
        f"the chart's words: {chart!r}",
    )
    cells = [
        td.text
        for td in c.d.find_elements(By.CSS_SELECTOR, "main table:first-of-type tbody tr td")
    ]
    check(
        cells == [str(org_id), org["name"], str(len(s.listed(key)))],
        f"the overview's organizations: {cells}",
    )
    c.page_done("overview page", "overview")
    feeds = c.d.find_element(By.XPATH, "//h2[text()='Feeds']")
    c.d.execute_script("arguments[0].scrollIntoView()", feeds)
    c.page_done("overview page, scrolled to the feeds", "feeds")

    # Forged forms: pages of other origins post to the console's actions as soon as they load.
    #  - http://127.0.0.2:PORT is another site: chromium withholds the SameSite=Strict cookie,
    #    so the server sees no session, and refuses a form from another origin as such (400).
    #  - https://127.0.0.1:PORT (the demo's certificate, another port) is the same site but
    #    another origin: the cookie goes along, and the server's origin check refuses the form
    #    (400).
    # Either way nothing changes (checked through the APIs), and a form carrying the session's
    # real token is refused all the same. Signing in from another origin is refused too.
    listed_before, allowed_before = s.listed(key), s.allowed(org_id, sp)
    target = listed_before["tracker.example"]
    csrf = c.d.find_element(By.CSS_SELECTOR, "input[name=csrf]").get_attribute("value")
    forms = {
        "delete": (f"{base}/domains/delete", {"id": target}),
        "allow": (f"{base}/allowlist/add", {"name": "phish-login.example"}),
        "delete-with-token": (f"{base}/domains/delete", {"id": target, "csrf": csrf}),
        "allow-with-token": (
            f"{base}/allowlist/add",
            {"name": "phish-login.example", "csrf": csrf},
        ),
        "signin": ("/console/signin", {"api_key": sp[0], "secret": sp[1]}),
    }
    tls = (s.cert, os.path.join(s.data, "tls", "key.pem"))
    for host, cert, cookie_sent in (("127.0.0.2", None, False), ("127.0.0.1", tls, True)):
        attacker, urls = serve_attacker(host, cert, s.url, forms)
        try:
            for name, url in urls.items():
                action = s.url + forms[name][0]
                c.network_reset()
                c.d.get(url)
                c.wait(
                    lambda d: d.current_url.startswith(s.url + "/console/")
                    and d.execute_script("return document.readyState") == "complete",
                    f"the {name} form's answer",
                )
                # The form's request and its answer, as chromium's network events tell them.
                statuses, withheld, sent = c.wait(
                    lambda d, action=action: (r := c.responses(action))[0] and (r[1] or r[2]) and r,
                    f"chromium's network events of the {name} form from {url}",
                )
                # chromium logs a 4xx answer as a failed load: that, and nothing else.
                logged = [e for e in c.log_entries() if "status of 4" not in e["message"]]
                check(not logged, f"the {name} form from {url}: the console logged {logged}")
                check(
                    sent == cookie_sent and bool(withheld) != cookie_sent,
                    f"the {name} form from {url}: session cookie sent: {sent}, withheld for "
                    f"{withheld}",
                )
                check(statuses == [400], f"the {name} form from {url} answered {statuses}")
                check(
                    "not sent from this console" in c.body(),
                    f"the {name} form's refusal: {c.body()[:200]!r}",
                )
                check(
                    s.listed(key) == listed_before, f"the {name} form from {url} changed the list"
                )
                check(
                    s.allowed(org_id, sp) == allowed_before,
                    f"the {name} form from {url} changed the allow list",
                )
                log(
                    f"  {name} form from {url.rsplit('/', 1)[0]}: answered {statuses}"
                    + (
                        f", cookie withheld ({', '.join(sorted(set(withheld)))})"
                        if withheld
                        else ", cookie sent"
                    )
                    + ", nothing changed"
                )
        finally:
            attacker.shutdown()
            attacker.server_close()

    # Still signed in: the forms did not end the session.
    c.open(base)
    c.h1(f"Organization {org_id}")
    c.clean_log("organization page, after the cross-site forms")

    # Sign out: the sign-in page, and the session is gone.
    c.click("form[action='/console/signout'] button[type=submit]")
    c.h1("Sign in")
    check(c.d.get_cookie("parasol_console") is None, "the cookie after sign-out")
    c.page_done("sign-in page, after sign-out")
    c.open(base)
    c.h1("Sign in")
    check(
        not c.d.find_elements(By.CSS_SELECTOR, "form[action='/console/signout']"),
        "a page of the session after sign-out",
    )
    c.clean_log("after sign-out")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parasol", required=True)
    ap.add_argument("--engine", required=True, choices=["sqlite", "postgres"])
    ap.add_argument("--database")
    ap.add_argument("--axe", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--screenshots")
    a = ap.parse_args()
    with open(a.axe) as f:
        axe = f.read()
    if a.screenshots:
        os.makedirs(a.screenshots, exist_ok=True)
    started = time.monotonic()
    try:
        server = Server(a.parasol, a.work, a.database, answer_notifies())
    except Failure as e:
        log(f"{a.engine}: FAILED: {e}")
        sys.exit(1)
    log(f"{a.engine}: server ready at {server.url}")
    driver = None
    try:
        driver = browser(a.work, server.cert)
        c = Console(driver, server, axe, a.screenshots)
        scenario(c, server)
        log(
            f"{a.engine}: passed ({len(c.pages_checked)} page checks, "
            f"{time.monotonic() - started:.1f} s)"
        )
    except (Failure, WebDriverException) as e:
        log(f"{a.engine}: FAILED: {type(e).__name__}: {e}")
        if driver:
            try:
                driver.save_screenshot(os.path.join(a.work, "failure.png"))
                log(f"at {driver.current_url}; screenshot {a.work}/failure.png")
            except WebDriverException as why:
                log(f"no screenshot of the failure: {why}")
        log("the end of the server's log:\n" + "".join(server.log_text().splitlines(True)[-30:]))
        sys.exit(1)
    finally:
        if driver:
            driver.quit()
        server.stop()


if __name__ == "__main__":
    main()
