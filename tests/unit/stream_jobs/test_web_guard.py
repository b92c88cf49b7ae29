"""The web port's guard as configured from settings: which Host names pass,
and the URL the CLI is told for a worker on a wildcard bind passes them."""

from __future__ import annotations

from phasemeter.callers import allowed_names, host_allowed
from phasemeter.cli.commands import local_url
from phasemeter.settings import Settings
from phasemeter.stream_jobs import web_guard


def test_application_options_hold_one_middleware_and_a_body_limit():
    opts = web_guard.application_options(Settings())
    assert len(opts["middlewares"]) == 1 and opts["client_max_size"] == web_guard.MAX_BODY_BYTES


def test_the_url_the_cli_is_told_is_one_the_port_answers():
    assert len(["127.0.0.1", "0.0.0.0", "::", "::1", "pm.internal"]) == 5
    for bind in ("127.0.0.1", "0.0.0.0", "::", "::1", "pm.internal"):
        s = Settings.from_env({"PHASEMETER_WEB_HOST": bind, "PHASEMETER_WEB_PORT": "6066"})
        url = local_url(s)
        host = url.split("//", 1)[1]
        assert host_allowed(host, allowed_names(s.web_host, s.allowed_hosts)), (bind, url)
