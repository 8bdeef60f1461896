"""Real servers on loopback for the shared-store tests.

* :class:`MotoServer`: moto's standalone S3-compatible server in a process of its own
  (``python -m moto.server``), on a free port; :meth:`MotoServer.bucket` makes a bucket.
* :class:`SilentServer`: accepts TCP connections and never answers (a store that is
  up but does not respond: every request must time out).
* :class:`CuttingProxy`: forwards to a server, and in the middle of the first object
  upload (a ``PUT`` whose body is under way) stops: it kills the server's process if
  given one, and closes both connections, as a server that dies mid-upload does.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from typing import List, Optional

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1"}


class MotoServer:
    """``python -m moto.server`` on 127.0.0.1 and a free port, until :meth:`stop`."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.port = self._port_from_output()
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def _port_from_output(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        seen: List[str] = []
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            seen.append(line)
            found = re.search(r"Running on http://127\.0\.0\.1:(\d+)", line)
            if found:
                # keep reading its output so that the pipe never fills
                threading.Thread(target=self.process.stdout.read, daemon=True).start()
                return int(found.group(1))
        self.stop()
        raise RuntimeError("moto's server did not start:\n" + "".join(seen))

    def bucket(self) -> str:
        """A new, empty bucket's name."""
        import boto3

        name = f"team-cache-{uuid.uuid4().hex[:12]}"
        client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket=name)
        return name

    def objects(self, bucket: str) -> dict:
        """``{key: bytes}`` of every object in ``bucket``."""
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        found = {}
        for item in client.list_objects_v2(Bucket=bucket).get("Contents", []):
            found[item["Key"]] = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
        return found

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


class _Listener:
    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.port = self.socket.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.connections: List[socket.socket] = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.connections.append(connection)
            self.serve(connection)

    def serve(self, connection: socket.socket) -> None:
        pass

    def close(self) -> None:
        self.closed = True
        self.socket.close()
        for connection in self.connections:
            try:
                connection.close()
            except OSError:
                pass


class SilentServer(_Listener):
    """Accepts, reads nothing, answers nothing."""


class CuttingProxy(_Listener):
    """Forwards to ``port``; cuts the first upload after ``after`` bytes of its body,
    killing ``victim`` (a process) first if given."""

    def __init__(self, port: int, after: int = 64 << 10,
                 victim: Optional[subprocess.Popen] = None) -> None:
        self.target = port
        self.after = after
        self.victim = victim
        self.cut = threading.Event()
        super().__init__()

    def serve(self, connection: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target))
        except OSError:  # the server is gone (killed): the client sees a closed connection
            connection.close()
            return
        threading.Thread(target=self._pipe, args=(upstream, connection, False),
                         daemon=True).start()
        threading.Thread(target=self._pipe, args=(connection, upstream, True),
                         daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, upload: bool) -> None:
        sent_in_put: Optional[int] = None
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                if upload and not self.cut.is_set():
                    if sent_in_put is None and data.startswith(b"PUT ") \
                            and b"/fastlower-v1/" in data.split(b"\r\n", 1)[0]:
                        sent_in_put = 0
                    if sent_in_put is not None:
                        if sent_in_put + len(data) > self.after:
                            sink.sendall(data[:max(0, self.after - sent_in_put)])
                            self._stop(source, sink)
                            return
                        sent_in_put += len(data)
                if self.cut.is_set():
                    self._stop(source, sink)
                    return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.close()
                except OSError:
                    pass

    def _stop(self, *ends: socket.socket) -> None:
        self.cut.set()
        if self.victim is not None and self.victim.poll() is None:
            os.kill(self.victim.pid, signal.SIGKILL)
            self.victim.wait()
        for end in ends:
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
