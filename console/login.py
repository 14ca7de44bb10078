"""The login form (only when ``console_token`` is set): the token as a password, exchanged for
an HttpOnly, SameSite=Strict cookie derived from it."""

from __future__ import annotations

from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from threadwarden.console.security import SESSION_COOKIE
from threadwarden.console.web import console_of, safe_next, see_other


def _page(request: Request, next_path: str, error: str | None, status: int) -> Response:
    template = request.app.state.templates.get_template("login.html")
    html = template.render(title="Sign in", next_path=next_path, error=error, login=False)
    return HTMLResponse(html, status_code=status)


async def form(request: Request) -> Response:
    """``GET /login``."""
    return _page(request, safe_next(request.query_params.get("next"), "/"), None, 200)


async def sign_in(request: Request) -> Response:
    """``POST /login``: a right token sets the session cookie and goes on to ``next``."""
    guard = console_of(request).guard
    fields = parse_qs((await request.body()).decode("utf-8", "replace"))
    given = next(iter(fields.get("token", [])), "")
    next_path = safe_next(next(iter(fields.get("next", [])), None), "/")
    if not guard.required:
        return see_other(next_path)
    if not guard.password_matches(given):
        return _page(request, next_path, "That token is not the console's.", 401)
    answer = see_other(next_path)
    answer.set_cookie(
        SESSION_COOKIE,
        guard.session_value(),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return answer


async def sign_out(request: Request) -> Response:
    """``POST /logout`` (CSRF-checked like every POST): drops the cookie."""
    answer = see_other("/login")
    answer.delete_cookie(SESSION_COOKIE, path="/")
    return answer
