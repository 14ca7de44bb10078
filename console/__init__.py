"""The operator console: the ledger in a browser (docs/console.md).

An ASGI app (Starlette, Jinja2, served by uvicorn) that reads and decides through
`ThreadwardenClient` and reads the ledger's pages with its own literal SQL (`queries.py`).
Only the CLI's commands import it: ``threadwarden console`` (`threadwarden.cli.commands`),
``dev`` and ``demo`` (`threadwarden.cli.worker_commands`).
"""
