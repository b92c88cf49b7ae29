"""The SQL interface's bind rule: beyond loopback, no start without a password."""

from __future__ import annotations

import pytest

from phasemeter.settings import Settings
from phasemeter.stream_jobs.sql_http import check_bind
from phasemeter.timeparse import ArgError


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_loopback_needs_no_credentials(host):
    assert check_bind(Settings(web_host=host)) is None  # it raises when credentials are needed


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "worker.internal"])
def test_beyond_loopback_a_password_is_required(host):
    with pytest.raises(ArgError, match="PHASEMETER_SQL_PASSWORD"):
        check_bind(Settings(web_host=host))
    check_bind(Settings(web_host=host, sql_password="s3cret"))
