"""python3 -m detcoll.debug diff RUN_A RUN_B [--json] [--any-script] | audit [--json] [--strict]
(README, "Finding why two runs differ")."""

import sys


def main(argv):
    usage = ("usage: python3 -m detcoll.debug diff RUN_A RUN_B [--json] [--any-script]\n"
             "       python3 -m detcoll.debug audit [--json] [--strict]")
    if not argv or argv[0] in ("-h", "--help"):
        print(usage)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "diff":
        from detcoll.debug import diff
        return diff.main(rest)
    if command == "audit":
        from detcoll.debug import audit
        return audit.main(rest)
    print(f"detcoll.debug: unknown command {command!r}\n{usage}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
