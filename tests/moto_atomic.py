"""moto's S3 server (same arguments as `python -m moto.server`) with its writes
made one at a time, as a real S3 server's conditional writes are atomic.

moto checks `If-None-Match: *` and `If-Match` and then writes, with no lock
between the two (moto/s3/responses.py, `put_object`), and its server is
threaded: two concurrent create-only writes of one key can both succeed, and
two `If-Match` updates from one ETag can both land. AWS S3 and SeaweedFS
answer the loser 412. ibi's lease and its config updates rely on that answer,
so the tests' moto serialises every request that is not a read; reads still
run concurrently.

Two costs moto pays on every request, for nothing here, are cut: it listed its
own package folder (an isdir for each of its ~150 services) to match the Host
header, and logged a line to stderr (which the tests throw away). A mirror and
a verify of 200 two-file items cost moto 49-65 s of CPU before, 29-31 s after;
moto's CPU was more than half of the whole test suite's.
"""

import threading

import moto.server as server
from moto import backends
from werkzeug import serving

_Dispatcher = server.DomainDispatcherApplication
_writes = threading.Lock()
_READS = ("GET", "HEAD", "OPTIONS")


class WritesOneAtATime(_Dispatcher):
    def __call__(self, environ, start_response):
        if environ.get("REQUEST_METHOD") in _READS:
            return super().__call__(environ, start_response)
        with _writes:
            # The whole response is made under the lock: the write is done by then.
            return list(super().__call__(environ, start_response))


server.DomainDispatcherApplication = WritesOneAtATime

_modules = frozenset(backends.list_of_moto_modules())
backends.list_of_moto_modules = lambda: _modules
serving.WSGIRequestHandler.log_request = lambda *args, **kwargs: None

if __name__ == "__main__":
    server.main()
