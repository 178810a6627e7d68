"""A Ray address checked before Ray is asked to connect to it.

``ray.init(address=...)`` retries an address where nothing listens for a minute and more, printing a
line every few seconds, and while it retries the process does not act on SIGTERM. A plain TCP connect
to the cluster's port answers in milliseconds (refused), or within :data:`PROBE_S` (no answer): that is
one clear error instead. An address whose port answers but where Ray does not (another service) is
bounded by :func:`connect_bounded`.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from typing import Any

from .errors import RewardhubError

__all__ = ["PROBE_S", "connect_bounded", "probe_ray_address", "split_address"]

#: seconds a TCP connect to the cluster's port may take
PROBE_S = 5.0
#: Ray's default ports: the GCS of ``ray start --head``, and the Ray Client server (``ray://``)
GCS_PORT, CLIENT_PORT = 6379, 10001


def split_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a Ray address, or ``None`` for one Ray resolves itself (``auto``, ``local``)."""
    text = address.strip()
    client = text.startswith("ray://")
    if client:
        text = text[len("ray://"):]
    if not text or text in ("auto", "local") or "://" in text:
        return None
    text = text.split("/", 1)[0]
    if text.startswith("["):  # [v6]:port
        host, _, rest = text[1:].partition("]")
        port_text = rest.lstrip(":")
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    try:
        port = int(port_text) if port_text else (CLIENT_PORT if client else GCS_PORT)
    except ValueError:
        raise RewardhubError(f"Ray address {address!r}: the port {port_text!r} is not a number\n"
                             "give HOST:PORT, e.g. 10.0.0.1:6379") from None
    return host, port


def probe_ray_address(address: str, flag: str = "--address") -> None:
    """Raise one :class:`RewardhubError` when nothing listens at ``address``'s host and port."""
    where = split_address(address)
    if where is None:
        return
    host, port = where
    hint = (f"start the cluster there (ray start --head --port={port}), or give the address "
            "`ray status` shows on the head node")
    try:
        with socket.create_connection((host, port), timeout=PROBE_S):
            return
    except socket.gaierror as exc:
        why = f"the host {host!r} is not known ({exc.strerror})"
    except ConnectionRefusedError:
        why = f"nothing listens on port {port} of {host} (connection refused)"
    except TimeoutError:
        why = f"no answer from {host}:{port} within {PROBE_S:g} s (the host is down, or a firewall drops it)"
    except OSError as exc:
        why = f"cannot reach {host}:{port} ({exc.strerror or exc})"
    raise RewardhubError(f"no Ray cluster at {flag} {address}: {why}\n{hint}")


def connect_bounded(address: str, seconds: float) -> Any:
    """``ray.init(address)`` that gives up after ``seconds``, and that SIGTERM and Ctrl-C stop.

    The port answered the probe, but if Ray does not (another service listens there), Ray retries for
    minutes inside a call that Python's signal handlers cannot interrupt. So while it connects, SIGTERM
    and SIGINT are blocked in this thread (and in the threads Ray starts) and waited for by a watcher
    thread, which ends the process with one ERROR line: exit 1 when the time is up, 128 + the signal
    when one came.
    """
    import ray

    done = threading.Event()
    signals = {signal.SIGTERM, signal.SIGINT}
    main = threading.current_thread() is threading.main_thread()

    def stop(line: str, code: int) -> None:
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        finally:
            os._exit(code)

    def watch() -> None:
        deadline = time.monotonic() + seconds
        while not done.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                stop(
                    f"ERROR: Ray did not connect to {address} within {seconds:g} s (its port answers, but "
                    "not "
                    "as a Ray cluster's)\n  check the address and port (`ray status` on the head node shows "
                    "them)\n",
                    1,
                )
            if not main:
                done.wait(min(left, 0.2))
                continue
            got = signal.sigtimedwait(signals, min(left, 0.2))
            if got is not None and not done.is_set():
                name = signal.Signals(got.si_signo).name
                stop(
                    f"ERROR: interrupted ({name}) while connecting to Ray at {address}\n", 128 + got.si_signo
                )

    if main:
        signal.pthread_sigmask(signal.SIG_BLOCK, signals)  # the watcher (started after) inherits it too
    watcher = threading.Thread(target=watch, name="rewardhub-ray-connect", daemon=True)
    watcher.start()
    try:
        if not ray.is_initialized():  # as rewardhub.distributed connects (check_cluster then finds it up)
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                text = str(exc).strip().splitlines()
                raise RewardhubError(
                    f"cannot connect to Ray at {address}: {text[0] if text else type(exc).__name__}\n"
                    "check the address (`ray status` on the head node shows it)"
                ) from None
        return ray
    finally:
        done.set()
        watcher.join()
        if main:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)  # one that came meanwhile is acted on now
