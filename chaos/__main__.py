"""``python -m chaos``: see `chaos.cli`."""

from chaos.cli import main

raise SystemExit(main())
