"""``python -m bench``: see `bench.cli`."""

from bench.cli import main

raise SystemExit(main())
