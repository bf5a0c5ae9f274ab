"""Endpoints still open when the interpreter exits are closed by an atexit hook, before
Python's finalization, so that no weightcast thread waits for the GIL of a dying interpreter."""

import atexit
import weakref

_open = weakref.WeakSet()


def track(endpoint):
    _open.add(endpoint)


@atexit.register
def _close_all():
    for endpoint in list(_open):
        try:
            endpoint.close("interpreter exiting")
        except Exception:  # noqa: BLE001: exiting anyway; the others must still close
            pass
