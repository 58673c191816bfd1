"""An S3 endpoint with read-only credentials, for the tests: forwards GET and
HEAD to the S3 server on loopback port TARGET and answers every other request
(PUT, POST, DELETE) with 403 AccessDenied, as a bucket policy that grants only
s3:GetObject and s3:ListBucket would. Listens on 127.0.0.1 only and prints its
port on the first line.

With --hang, writes get no answer at all (held for 120 s), as from an object
store with one data centre down: reads work, writes time out.

usage: readonly_s3_proxy.py TARGET_PORT [--hang]
"""

import http.client
import http.server
import sys
import time

TARGET = int(sys.argv[1])
HANG = "--hang" in sys.argv[2:]
DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
)


class ReadOnly(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def forward(self):
        upstream = http.client.HTTPConnection("127.0.0.1", TARGET, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
        upstream.request(self.command, self.path, headers=headers)
        reply = upstream.getresponse()
        body = reply.read()
        self.send_response(reply.status, reply.reason)
        for key, value in reply.getheaders():
            if key.lower() not in ("connection", "transfer-encoding", "content-length"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        upstream.close()

    def deny(self):
        if HANG:
            time.sleep(120)
            self.close_connection = True
            return
        length = int(self.headers.get("Content-Length") or 0)
        while length > 0:
            length -= len(self.rfile.read(min(length, 1 << 16)))
        self.send_response(403, "Forbidden")
        if "chunked" in (self.headers.get("Transfer-Encoding") or ""):
            # The body was not read: this connection cannot carry another request.
            self.close_connection = True
            self.send_header("Connection", "close")
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(DENIED)))
        self.end_headers()
        self.wfile.write(DENIED)

    do_GET = forward
    do_HEAD = forward
    do_PUT = deny
    do_POST = deny
    do_DELETE = deny


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ReadOnly)
print(server.server_address[1], flush=True)
server.serve_forever()
