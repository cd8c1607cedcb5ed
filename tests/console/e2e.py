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


def main():
    os.makedirs(SHOTS, exist_ok=True)
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
        operator.get_by_label("Top up (money)").fill("100")
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

        # The client signs in with the key: nothing spent yet.
        client.goto(URL + "/console/sign-in")
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
        client.get_by_label("Model").select_option("alpha2.6-t2v_t2v")
        client.get_by_role("button", name="Choose").click()
        expect(client.locator("#playground")).to_have_attribute("data-model", "alpha2.6-t2v_t2v")
        client.get_by_label("prompt (required)").fill("a fox crossing a snowy field at dawn")
        # Its end is delivered to an endpoint that refuses it: the operator sends it again below.
        client.get_by_label("callback_url").fill("http://127.0.0.1:9/hooks")
        client.get_by_role("button", name="Submit").click()
        expect(client.locator("#progress")).to_have_attribute("data-status", "success", timeout=60_000)
        expect(client.locator("#preview video")).to_have_count(1)
        shot(client, "05-playground-finished")

        # Its spend shows in the chart, and the task in its list.
        client.get_by_role("link", name="Home", exact=True).click()
        expect(client.locator("[data-total]")).not_to_have_text("0.00")
        expect(client.get_by_role("cell", name="success")).to_have_count(1)
        shot(client, "06-client-spend")

        # The task's page tells its life; the usage page lists it, and its CSV export too.
        client.get_by_role("link", name=re.compile(r"^task-")).first.click()
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
