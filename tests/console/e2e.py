"""The console end to end in a real Chromium (Debian's), driven by Playwright: an operator opens an account,
tops it up and makes a key; the client signs in with it, submits from the playground, sees the task finish
and its spend in the chart; the operator revokes the key, and the client's next request is refused.

Run by tests/console.rs against a gateway it started: e2e.py URL ADMIN_TOKEN SCREENSHOT_DIR.
"""

import os
import re
import sys

from playwright.sync_api import expect, sync_playwright

URL, ADMIN_TOKEN, SHOTS = sys.argv[1], sys.argv[2], sys.argv[3]
CHROMIUM = os.environ.get("MEDIAGATE_CHROMIUM", "/usr/bin/chromium")
# Chromium's own calls home are refused on a closed network, many at a time: they are switched off.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def shot(page, name):
    page.screenshot(path=os.path.join(SHOTS, f"{name}.png"), full_page=True)


# What a person would call a broken layout, found in the page as drawn: a word split over two lines, a button
# whose label wraps, or anything wider than the window (a wide table scrolls inside its own box instead).
LAYOUT_PROBLEMS = """() => {
  const problems = [];
  const lines = (range) => new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top))).size;
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest("pre, script, style")) continue;
    const text = node.textContent;
    // Prose (.text) may break after a hyphen, as print does; an id, a time or a status never breaks.
    const words = node.parentElement.closest(".text") ? /[^\\s-]+-?/g : /\\S+/g;
    for (const match of text.matchAll(words)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      if (lines(range) > 1) problems.push(`word broken: ${match[0]}`);
    }
  }
  for (const button of document.querySelectorAll("button")) {
    const range = document.createRange();
    range.selectNodeContents(button);
    if (lines(range) > 1) problems.push(`button wraps: ${button.textContent.trim()}`);
  }
  const page = document.documentElement;
  if (page.scrollWidth > page.clientWidth) problems.push(`page overflows: ${page.scrollWidth} > ${page.clientWidth}`);
  return problems;
}"""


# Bytes on the wire of each page's HTML (compressed), by path.
SENT = {}


def check_layout(page, paths, name):
    """Opens each path at 1366 and 800 px, screenshots it and checks its layout."""
    for width in (1366, 800):
        page.set_viewport_size({"width": width, "height": 900})
        for path in paths:
            response = page.goto(URL + path)
            assert response.headers.get("content-encoding") == "gzip", (path, response.headers)
            if width == 1366:
                SENT[path] = response.request.sizes()["responseBodySize"]
            problems = page.evaluate(LAYOUT_PROBLEMS)
            slug = path.strip("/").replace("/", "-").replace("?", "-").replace("=", "-").replace("&", "-")
            page.screenshot(path=os.path.join(SHOTS, "layout", f"{name}-{slug}-{width}.png"), full_page=True)
            assert not problems, f"{path} at {width} px: {problems[:10]}"


def main():
    os.makedirs(os.path.join(SHOTS, "layout"), exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        operator = browser.new_context().new_page()
        client = browser.new_context(viewport={"width": 390, "height": 844}).new_page()
        for page in (operator, client):
            page.set_default_timeout(20_000)

        # The operator signs in, opens an account, tops it up and makes a key.
        operator.goto(URL + "/console")
        expect(operator).to_have_url(re.compile(r"/console/sign-in$"))
        shot(operator, "01-sign-in")
        operator.get_by_label("Admin token").fill(ADMIN_TOKEN)
        operator.get_by_role("button", name="Sign in as operator").click()
        expect(operator.get_by_role("heading", name="Overview")).to_be_visible()
        shot(operator, "02-overview")
        operator.get_by_label("New account").fill("e2e-studio")
        operator.get_by_role("button", name="Create account").click()
        expect(operator.locator("[data-account]")).to_have_text("e2e-studio")
        # A new account comes with its webhook secret, shown once.
        assert operator.locator("#shown-once").inner_text().strip().startswith("whsec_")
        operator.get_by_label("Top up (units)").fill("100")
        operator.get_by_role("button", name="Top up").click()
        expect(operator.locator('[data-pot="balance"]')).to_have_text("100.00")
        operator.get_by_role("button", name="Rotate the webhook secret").click()
        assert operator.locator("#shown-once").inner_text().strip().startswith("whsec_")
        operator.get_by_role("button", name="Create a key").click()
        key = operator.locator("#shown-once").inner_text().strip()
        assert key.startswith("mg-"), key
        shot(operator, "03-account-with-key")
        operator.reload()
        expect(operator.locator("#shown-once")).to_have_count(0)

        # A mistyped key is refused on the sign-in page itself; then the client signs in: nothing spent yet.
        client.goto(URL + "/console/sign-in")
        client.get_by_label("API key").fill(key + "x")
        client.get_by_role("button", name="Sign in with the key").click()
        expect(client.get_by_role("alert")).to_contain_text("not valid")
        expect(client.get_by_role("button", name="Sign in with the key")).to_be_visible()
        client.get_by_label("API key").fill(key)
        client.get_by_role("button", name="Sign in with the key").click()
        expect(client.get_by_role("heading", name="e2e-studio")).to_be_visible()
        expect(client.locator("[data-total]")).to_have_text("0.00")
        shot(client, "04-client-home")

        # It submits from the playground and sees the task finish, with a preview. The page's first load
        # (HTML, stylesheet, script) stays under 200 KB.
        responses = []

        def loaded_one(response):
            responses.append(response)

        client.on("response", loaded_one)
        client.get_by_role("link", name="Playground", exact=True).click()
        client.wait_for_load_state("load")
        client.remove_listener("response", loaded_one)
        loaded = sum(len(response.body()) for response in responses)
        print(f"playground first load: {loaded} bytes in {len(responses)} responses")
        assert loaded < 200_000, [(r.url, len(r.body())) for r in responses]
        # A model that needs an image says so before anything is sent, with the one field it takes for it.
        client.get_by_label("Model").select_option("alpha2.6-i2v_i2v")
        client.get_by_role("button", name="Choose").click()
        expect(client.locator("#quote")).to_contain_text("`image_url` is required")
        expect(client.get_by_label("image_url (required)")).to_be_visible()
        expect(client.locator("#f-img_url")).to_have_count(0)
        client.get_by_label("Model").select_option("alpha2.6-t2v_t2v")
        client.get_by_role("button", name="Choose").click()
        expect(client.locator("#playground")).to_have_attribute("data-model", "alpha2.6-t2v_t2v")
        client.get_by_label("prompt (required)").fill("a fox crossing a snowy field at dawn")
        # Its end is delivered to an endpoint that refuses it: the operator sends it again below.
        client.get_by_label("callback_url").fill("http://127.0.0.1:9/hooks")
        # The price of the job as filled in, before Submit, and again when an option changes it.
        expect(client.locator("#quote")).to_have_attribute("data-state", "priced")
        expect(client.locator("#quote")).to_contain_text(re.compile(r"This job costs \d+\.\d\d for 5 s at \S+"))
        before = client.locator("#quote").inner_text()
        client.get_by_label("duration").fill("10")
        expect(client.locator("#quote")).to_contain_text("for 10 s")
        assert client.locator("#quote").inner_text() != before
        client.get_by_label("duration").fill("")
        client.get_by_role("button", name="Submit").click()
        expect(client.locator("#progress")).to_have_attribute("data-status", "success", timeout=60_000)
        expect(client.locator("#preview video")).to_have_count(1)
        # The video plays: Chromium reads it as H.264 of the length asked for (5 s by default) and its shape.
        client.wait_for_function("() => document.querySelector('#preview video').readyState >= 1")
        shape = client.evaluate("() => { const v = document.querySelector('#preview video');"
                                " return [v.duration, v.videoWidth, v.videoHeight, v.error && v.error.code]; }")
        assert abs(shape[0] - 5) < 0.5 and shape[1] > shape[2] > 0 and shape[3] is None, shape
        shot(client, "05-playground-finished")

        # Its spend shows in the chart, and the task in its list.
        client.get_by_role("link", name="Home", exact=True).click()
        expect(client.locator("[data-total]")).not_to_have_text("0.00")
        expect(client.get_by_role("cell", name="success")).to_have_count(1)
        shot(client, "06-client-spend")

        # The task's page tells its life; the usage page lists it, and its CSV export too.
        client.get_by_role("link", name=re.compile(r"^task-")).first.click()
        client_task_path = client.url[len(URL):]
        expect(client.locator(".timeline")).to_contain_text("ended: success")
        expect(client.locator(".timeline")).to_contain_text("settled")
        shot(client, "07-client-task")
        client.get_by_role("link", name="Usage", exact=True).click()
        expect(client.locator("tbody tr")).to_have_count(1)
        with client.expect_download() as download:
            client.get_by_role("link", name="Export CSV").click()
        exported = open(download.value.path()).read()
        assert "alpha2.6-t2v_t2v" in exported and exported.startswith("at,account"), exported
        shot(client, "08-client-usage")
        client.get_by_role("link", name="Tasks", exact=True).click()
        client.get_by_label("Status").select_option("failed")
        client.get_by_role("button", name="Filter").click()
        expect(client.locator("tbody tr")).to_have_count(0)
        client.get_by_label("Status").select_option("success")
        client.get_by_role("button", name="Filter").click()
        expect(client.locator("tbody tr")).to_have_count(1)
        shot(client, "08-client-tasks")

        # The operator sees the account's usage, switches a model off and on, and verifies the ledger.
        operator.get_by_role("link", name="Usage", exact=True).click()
        operator.get_by_label("Account").fill("e2e-studio")
        operator.get_by_role("button", name="Filter").click()
        expect(operator.locator("tbody tr")).to_have_count(1)
        expect(operator.locator("[data-total]")).not_to_have_text("0.00")
        shot(operator, "09-operator-usage")
        operator.get_by_role("link", name="Models", exact=True).click()
        row = operator.locator('tr[data-model="beta-image-plus"]')
        row.get_by_role("button", name="Disable beta-image-plus").click()
        expect(row).to_contain_text("disabled")
        row.get_by_role("button", name="Enable beta-image-plus").click()
        expect(row).to_contain_text("enabled")
        shot(operator, "10-models")
        operator.get_by_role("link", name="Webhooks", exact=True).click()
        operator.get_by_label("Account").fill("e2e-studio")
        operator.get_by_role("button", name="Filter").click()
        expect(operator.locator("tbody tr")).to_have_count(1)
        operator.get_by_role("button", name=re.compile(r"^Send delivery")).click()
        expect(operator.get_by_role("status")).to_contain_text("is sent again now")
        shot(operator, "11-webhooks")
        operator.get_by_role("link", name="Overview", exact=True).click()
        # This replica's last minute: the requests made, and the poller's queries with each key.
        expect(operator.locator("[data-requests]")).not_to_have_text("0 · 0 · 0")
        expect(operator.get_by_role("cell", name="cn-beijing").first).to_be_visible()
        operator.get_by_role("button", name="Verify the ledger").click()
        expect(operator.locator("[data-ledger]")).to_contain_text("The ledger verifies")
        shot(operator, "12-ledger")

        # Every page, as each kind of viewer sees it, at a laptop's width and a narrow window's.
        check_layout(browser.new_context().new_page(), ["/console/sign-in"], "anyone")
        operator.goto(URL + "/console/tasks")
        expect(operator.locator(".empty")).to_contain_text("Type an account's name above")
        client.goto(URL + "/console/overview")
        expect(client.get_by_role("alert")).to_contain_text("This page is for operators")
        operator.goto(URL + "/console/accounts?search=E2E")
        # Its balance, less the playground's job, and the time of that job.
        row = operator.locator('[data-account-row="e2e-studio"]')
        expect(row).to_contain_text(re.compile(r"9\d\.\d\d"))
        expect(row).to_contain_text(re.compile(r"20\d\d-\d\d-\d\d \d\d:\d\d"))
        # Root names an operator on the Audit page: its token is shown once, and the trail lists the change.
        operator.goto(URL + "/console/audit")
        operator.get_by_label("New operator").fill("e2e-ops")
        operator.get_by_role("button", name="Create operator").click()
        expect(operator.locator("#shown-once")).to_contain_text("mgop-")
        expect(operator.locator('[data-operator="e2e-ops"]')).to_be_visible()
        expect(operator.locator('[data-audit-action="operator.create"]')).to_have_count(1)
        expect(operator.locator('[data-audit-action="balance.top_up"]').first).to_be_visible()
        check_layout(operator, ["/console/overview", "/console/accounts", "/console/accounts/e2e-studio", "/console/models",
                                "/console/usage?account=e2e-studio", "/console/tasks?account=e2e-studio",
                                "/console/tasks", client_task_path, "/console/webhooks?account=e2e-studio",
                                "/console/audit"],
                     "operator")
        check_layout(client, ["/console/home", "/console/tasks", client_task_path, "/console/usage",
                              "/console/playground", "/console/playground?model=alpha2.7-r2v",
                              "/console/playground?model=alphax-background-generation-v2_background"], "client")
        client.set_viewport_size({"width": 390, "height": 844})
        heaviest = max(SENT, key=SENT.get)
        print(f"heaviest page: {heaviest}, {SENT[heaviest]} bytes sent")

        # The operator revokes the key; the client's next request is refused.
        operator.goto(URL + "/console/accounts/e2e-studio")
        operator.get_by_role("button", name=re.compile(r"^Revoke the key")).click()
        expect(operator.get_by_role("status")).to_have_text("Key revoked.")
        shot(operator, "13-key-revoked")
        response = client.goto(URL + "/console/home")
        assert response.status == 401, response.status
        expect(client.get_by_role("alert")).to_contain_text("revoked")
        shot(client, "14-client-refused")
        browser.close()
    print("console end to end: ok")


if __name__ == "__main__":
    main()
