"""``python -m fastlower.frontends.cli``: the same as the ``fastlower`` console script."""

from . import main

raise SystemExit(main())
