"""``python -m rewardhub``."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    try:
        from .cli import main

        status = main()
    except KeyboardInterrupt:  # Ctrl-C while starting (imports) or ending: one line, exit 130
        try:
            print("ERROR: interrupted (SIGINT)", file=sys.stderr, flush=True)
        except OSError:
            pass
        status = 130
    sys.exit(status)
