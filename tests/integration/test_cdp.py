"""The browser harness itself: it must work in a test process that already
holds many descriptors, as a pytest worker does late in the suite."""

import os

import pytest


@pytest.fixture
def many_fds():
    # Push the next descriptors past select()'s FD_SETSIZE (1024).
    held = []
    while not held or held[-1] < 1100:
        held.append(os.open(os.devnull, os.O_RDONLY))
    yield held[-1]
    for fd in held:
        os.close(fd)


def test_a_browser_started_above_descriptor_1024_answers(many_fds, tmp_path):
    from cdp import Chrome, chromium_or_skip

    exe = chromium_or_skip("to check the DevTools harness")
    browser = Chrome(exe, tmp_path / "profile")
    try:
        assert browser._r > 1024, browser._r
        browser.open("about:blank")
        assert browser.eval("6 * 7") == 42
    finally:
        browser.close()
