"""Endpoints still open when the interpreter exits are closed by an atexit hook, before
Python's finalization, so that no weightcast thread waits for the GIL of a dying interpreter.
Endpoints are context managers through ``Closing``."""

import atexit
import weakref

_open = weakref.WeakSet()


def track(endpoint):
    _open.add(endpoint)


class Closing:
    """``with endpoint:`` closes the endpoint on leaving the block (its ``close()``)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


@atexit.register
def _close_all():
    for endpoint in list(_open):
        try:
            endpoint.close("interpreter exiting")
        except Exception:  # noqa: BLE001: exiting anyway; the others must still close
            pass
