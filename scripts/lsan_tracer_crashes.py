#!/usr/bin/env python3
"""Whether every test a ctest run failed failed only because LeakSanitizer's
own tracer crashed as the process exited, after the test passed.

On a loaded machine the tracer that LeakSanitizer (clang 14) starts at exit
sometimes dies ("Tracer caught signal 11", "LeakSanitizer has encountered a
fatal error"): no leak was found or missed, the check never ran. Such tests
are worth running once more; a test that failed otherwise is not.

    scripts/lsan_tracer_crashes.py BUILD_DIR
Exit 0 (and the names on stdout) when there were failures and all are of
that kind; 1 otherwise.
"""
import pathlib
import re
import sys

CRASH = "LeakSanitizer has encountered a fatal error"


def main() -> int:
    tmp = pathlib.Path(sys.argv[1]) / "Testing" / "Temporary"
    try:
        failed = [line.split(":", 1)[1].strip()
                  for line in (tmp / "LastTestsFailed.log").read_text().splitlines()
                  if ":" in line]
        log = (tmp / "LastTest.log").read_text(errors="replace")
    except OSError as e:
        print(f"lsan_tracer_crashes: {e}", file=sys.stderr)
        return 1
    if not failed:
        return 1
    # One section per test: from "N/M Testing: NAME" to the next.
    sections = re.split(r"^\d+/\d+ Testing: ", log, flags=re.M)[1:]
    by_name = {s.split("\n", 1)[0].strip(): s for s in sections}
    for name in failed:
        section = by_name.get(name, "")
        passed = re.search(r"^\[  PASSED  \] 1 test\.$", section, flags=re.M)
        if CRASH not in section or not passed or "ERROR: LeakSanitizer: detected" in section:
            return 1
    print("\n".join(failed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
