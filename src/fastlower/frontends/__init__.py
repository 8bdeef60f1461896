"""The ways in: the ``fastlower`` command line (``cli``), saved programs loaded back
(``loading``), scripts run under fastlower (``script_runner``), the demo and its models
(``demo``, ``examples``), progress on a terminal (``console``) and the pytest plugin
(``pytest_plugin``). Importing this package imports neither torch nor ExecuTorch.
"""
