"""``python -m fastlower``: the ``fastlower`` command line (see ``fastlower.frontends.cli``)."""

from .frontends.cli import main

raise SystemExit(main())
