"""Run by test_debug_audit.py under mpirun: each rank initializes detcoll itself, sets torch's
thread count (rank 1 differs from the others), calls detcoll.debug.audit.audit() from Python and
writes the findings it returned to DIR/rank<R>.json.

    mpirun -np 3 python3 debug_audit_driver.py DIR
"""

import json
import os
import sys

import torch

import detcoll.torch as hvd
from detcoll.debug.audit import audit


def main(out_dir):
    hvd.init()
    torch.set_num_threads(2 if hvd.rank() == 1 else 1)
    findings = audit()
    with open(os.path.join(out_dir, f"rank{hvd.rank()}.json"), "w") as f:
        json.dump(findings, f)


if __name__ == "__main__":
    main(sys.argv[1])
