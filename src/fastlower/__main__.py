"""``python -m fastlower``: the ``fastlower`` command line (see ``fastlower.cli``)."""

from .cli import main

raise SystemExit(main())
