"""Who may call a listener: the Host check and the CORS "simple request" rule.

Binding to loopback keeps other machines out, but not a web page in the
operator's own browser. Two things let such a page in:

- **DNS rebinding.** A page's name is re-pointed at 127.0.0.1, so its
  scripts can read the responses of a loopback port. The browser still sends
  the page's own name in `Host`, so a listener that answers only the names it
  serves cannot be read this way. (RFC 7230 §5.4 makes `Host` mandatory.)
- **Cross-site simple requests.** A page may POST `text/plain`,
  `application/x-www-form-urlencoded` or `multipart/form-data` to any origin
  without a CORS preflight (Fetch standard, "CORS-safelisted request-header").
  The response is hidden from the page, but the request runs. So nothing that
  changes state or runs a command may accept one.

Pure: every listener (the worker's web port, its SQL interface, the OTLP/HTTP
receiver) calls these with what it was told and what it received.
"""

from __future__ import annotations

import ipaddress

# Names that always mean "this machine" when the listener is on loopback.
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})

# Content types a browser sends cross-site without a preflight.
SIMPLE_CONTENT_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"})


def host_name(host_header: str | None) -> str | None:
    """The name part of a `Host` header, lower case, without the port or the
    brackets of an IPv6 literal; None when missing or malformed."""
    if not host_header:
        return None
    value = host_header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or (value[end + 1:] and not value[end + 1:].startswith(":")):
            return None
        return value[1:end]
    name, _, port = value.partition(":")
    if port and not port.isdigit():
        return None
    return name or None


def is_loopback(name: str) -> bool:
    """An address or name of this machine's loopback (a listener bound there
    is out of other machines' reach)."""
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return name in LOOPBACK_NAMES


def allowed_names(bind: str, configured: str) -> frozenset[str]:
    """The `Host` names a listener bound to `bind` answers: the loopback names
    when it is on loopback, plus the comma-separated `configured` list
    (PHASEMETER_ALLOWED_HOSTS). `*` alone allows every name, for a listener
    behind a proxy that checks names itself."""
    names = {n.strip().lower() for n in configured.split(",") if n.strip()}
    if is_loopback(bind) or bind in ("", "0.0.0.0", "::"):
        names |= LOOPBACK_NAMES
    if bind and bind not in ("0.0.0.0", "::"):
        names.add(bind.lower())
    return frozenset(names)


def host_allowed(host_header: str | None, allowed: frozenset[str]) -> bool:
    """True when the request names a host this listener serves. An IP literal
    on loopback is always this machine, so it is allowed when loopback is."""
    if "*" in allowed:
        return True
    name = host_name(host_header)
    if name is None:
        return False
    if name in allowed:
        return True
    return is_loopback(name) and bool(allowed & LOOPBACK_NAMES)


def is_simple_request(method: str, content_type: str | None) -> bool:
    """True for a request a browser sends cross-site without asking first: a
    POST (or GET/HEAD) whose content type is missing or CORS-safelisted."""
    if method.upper() not in ("GET", "HEAD", "POST"):
        return False
    if not content_type:
        return True
    return content_type.split(";", 1)[0].strip().lower() in SIMPLE_CONTENT_TYPES
