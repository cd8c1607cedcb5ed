"""A job through the Python types generated from /openapi.json: the request built and the answers read as
the generated pydantic models; quote it, submit it, read it to success.
Usage: python submit.py API_PY BASE_URL API_KEY"""

import json
import sys
import time
import urllib.request

from check_examples import load


def call(base, key, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with urllib.request.urlopen(urllib.request.Request(base + path, data, headers, method=method)) as answer:
        return json.load(answer)


def main(api_path, base, key):
    api = load(api_path)
    request = api.Alpha26T2vT2v(model="alpha2.6-t2v_t2v", prompt="a red fox running through snow at dawn", duration=5)
    body = request.model_dump(mode="json", exclude_unset=True)
    quote = api.Quote.model_validate(call(base, key, "POST", "/v1/quotes", {"request": body}))
    accepted = api.TaskAcceptance.model_validate(call(base, key, "POST", "/v1/videos/generations", body))
    if accepted.quote is None or accepted.quote.amount != quote.amount:
        sys.exit("the acceptance's quote is not the quote's")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        task = api.Task.model_validate(call(base, key, "GET", f"/v1/tasks/{accepted.task_id}"))
        status = getattr(task.status, "value", task.status)
        if status == "success":
            print(f"python: {task.task_id} success, {len(task.results or [])} result(s), quoted {task.quote.amount}")
            return
        if status in ("failed", "timeout", "cancelled"):
            sys.exit(f"the job ended {status}: {task.error}")
        time.sleep(0.1)
    sys.exit("the job did not finish in a minute")


if __name__ == "__main__":
    main(*sys.argv[1:])
