"""The recall server connecting points an agent at when it is elsewhere (`--server URL`): its URL
checked and put in the one shape every agent's configuration takes, and asked once by `--check`.

The URL goes into configuration files and into the hooks' command lines: it may carry no
credentials (the token is read from LIBRARIAN_MCP_TOKEN at run time, never written), nothing a
shell would read as its own, and no query a server would drop.

Standard library only.
"""

import json
import re
import urllib.error
import urllib.request
from urllib.parse import urlsplit

__all__ = ["TOKEN_VARIABLE", "ask", "mcp_url_of"]

TOKEN_VARIABLE = "LIBRARIAN_MCP_TOKEN"
"""The environment variable every agent reads the server's token from, at run time."""
ASK_TIMEOUT_S = 10.0
_PATH = re.compile(r"[A-Za-z0-9._~%/-]*")
"""The characters a path may hold: none a shell, TOML or JSON would read otherwise."""


def mcp_url_of(raw: str) -> str:
    """The server's MCP endpoint from what `--server` was given (`https://host:3201`, or its
    `/mcp` URL, or one under a path prefix); ValueError saying why when it cannot be one."""
    try:
        parts = urlsplit(raw.strip())
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("give an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("a URL with a user or password in it would be written into files: "
                         f"give the token in {TOKEN_VARIABLE} instead")  # fmt: skip
    if parts.query or parts.fragment:
        raise ValueError("a URL with a query or a fragment is not a server's address")
    if not _PATH.fullmatch(parts.path) or not re.fullmatch(r"[A-Za-z0-9.:\[\]-]+", parts.netloc):
        raise ValueError("the URL holds characters a hook's command line would read otherwise")
    path = parts.path.rstrip("/")
    path = path[: -len("/mcp")] if path.endswith("/mcp") else path
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}{path}/mcp"


def recall_url_of(mcp_url: str) -> str:
    """Where the hooks ask (as hooks/librarian_memory.url_of puts it beside /mcp)."""
    return mcp_url[: -len("/mcp")] + "/recall"


def ask(mcp_url: str, token: str, timeout_s: float = ASK_TIMEOUT_S) -> str | None:
    """Why memory would not reach an agent through the server, asked as a prompt's hook asks it
    (`POST /recall` with the token); None when it answers."""
    body = json.dumps({"query": "librarian connect --check", "limit": 1}).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    request = urllib.request.Request(recall_url_of(mcp_url), body, headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            json.loads(response.read(1024 * 1024))
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            held = "the token in" if token else "no token: set"
            return f"{mcp_url} refuses the hooks ({exc.code}): {held} {TOKEN_VARIABLE}"
        return f"{mcp_url} answers the hooks with HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        return f"{mcp_url} does not answer ({type(why).__name__}: {why})"
    except ValueError:
        return f"{mcp_url} answers, but not as Librarian's recall server does (not JSON)"
    return None
