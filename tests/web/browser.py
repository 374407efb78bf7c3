"""Drives Debian's chromium, headless, through chromedriver with Selenium
(the W3C WebDriver client from PyPI): loads the gpusched serve page, finds
the GPUs and the queue, and waits, without reloading, for job 1 to end.

Usage: browser.py URL SCREENSHOT
Prints one JSON line: what it saw.
"""

import json
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

url, screenshot = sys.argv[1], sys.argv[2]
options = webdriver.ChromeOptions()
options.binary_location = "/usr/bin/chromium"
for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,1000"):
    options.add_argument(flag)
driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
try:
    driver.get(url)

    def wait(what, cond, limit=60):
        deadline = time.time() + limit
        while time.time() < deadline:
            value = cond()
            if value:
                return value
            time.sleep(0.1)
        raise SystemExit(f"timed out waiting for {what}: {driver.page_source[:3000]}")

    # The page redraws its tables every second: read them in one script
    # each time, never through element references that go stale.
    def texts(selector):
        return driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.innerText);",
            selector,
        )

    def state(no):
        return driver.execute_script(
            "const r = document.querySelector('#jobs tr[data-job=\"' + arguments[0] + '\"]');"
            "return r ? r.dataset.state : null;",
            no,
        )

    gpu_text = wait("GPU rows", lambda: texts("#gpus tr[data-gpu]"))
    first = wait("job 1 running", lambda: state(1) == "running" and state(1))
    users = texts("#users tr[data-user] td:first-child")
    # A reload would drop this mark.
    driver.execute_script("window.__gpusched_mark = 42;")
    last = wait("job 1 to end", lambda: state(1) not in (None, "running") and state(1), 90)
    mark = driver.execute_script("return window.__gpusched_mark;")
    # The page's clock is 24-hour, like the terminal, the board and top.
    updated = driver.execute_script("return document.getElementById('updated').innerText;")
    driver.save_screenshot(screenshot)
    print(json.dumps({"gpus": gpu_text, "users": users, "first": first, "last": last, "mark": mark, "updated": updated}))
finally:
    driver.quit()
