"""AR and Lopti inside verl 0.9, as an installed plugin (docs/guides/verl.md).

verl imports every module of its `verl.plugins` entry-point group when it is itself imported, in the
driver and in every Ray worker. lopti declares two, each registering one piece, so that a failure in
one (verl only logs it at DEBUG level) cannot take the other down:
- `lopti.integrations.verl.ar`: the policy loss `lopti_ar` and its config class;
- `lopti.integrations.verl.trainer`: the v1 trainer mode `lopti`.
This package imports neither piece, so that loading one does not load the other; it checks that verl and what its
v1 trainer imports are installed in the ranges lopti was tested with (`lopti[verl]`), before either piece imports them.
"""

from lopti.extras import require

require("verl", "lopti's verl plugin")
