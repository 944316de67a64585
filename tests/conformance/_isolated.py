"""One case in a subprocess: ``python -m tests.conformance._isolated CASE_ID upstream|safe``.

Prints the case's result as a Python literal on its last line, then ends the process at once
(a call that blocked in another thread, or a consumer left open, must not hold it up). The
parent (:func:`.harness.run_isolated`) turns a timeout into ``blocked`` and a signal into ``crash``.
"""

from __future__ import annotations

import os
import resource
import sys
from dataclasses import replace

from .cases import CASES_BY_ID
from .harness import CLASSES, Case, run_case, run_ctor_case


def main(argv: list[str]) -> None:
    case_id, which = argv
    # Some of these calls crash the interpreter (upstream's bugs): leave no core file behind.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    item = CASES_BY_ID[case_id]
    cls = CLASSES[which]
    if isinstance(item, Case):
        result = run_case(replace(item, isolated=False), cls)
    else:
        result = run_ctor_case(replace(item, isolated=False), cls)
    print(repr(result.to_literal()), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
