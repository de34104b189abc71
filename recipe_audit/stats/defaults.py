"""The question a card asks when nobody says otherwise, stated once for the whole package.

* ``DEFAULT_TAUS``: the release bar, a rerun fails when its audit metric is below 0.7;
* ``DEFAULT_EPS``: the failure budget, at most 10 % of future reruns may fail;
* ``DEFAULT_DELTA``: the risk, the bound may be wrong with probability at most 10 %.

At ``eps = delta = 0.10`` the sample floor is 22 reruns. The statistics, the card options, the
built-in app's ``audit`` config, the callback's options and the command line all default to
these values.
"""

DEFAULT_TAUS = (0.7,)
DEFAULT_EPS = 0.10
DEFAULT_DELTA = 0.10
