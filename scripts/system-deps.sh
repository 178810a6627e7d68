#!/usr/bin/env bash
# Optional system packages (the code sandbox uses bubblewrap, setpriv and prlimit when present). Never fatal:
# without them the sandbox says what it cannot enforce.
set -u
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
# setpriv drops to the sandbox uid inside bubblewrap, prlimit sets the limits (both util-linux)
{ command -v setpriv >/dev/null 2>&1 && command -v prlimit >/dev/null 2>&1; } || need+=(util-linux)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") >/dev/null 2>&1 \
    || echo "note: could not install ${need[*]} (the sandbox will report reduced isolation)"
fi
exit 0
