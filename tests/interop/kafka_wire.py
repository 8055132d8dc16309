"""A minimal Kafka wire-protocol client for the raw-socket tests.

Only what the pre-authentication tests need: request framing with header v1, ApiVersions v0,
SaslHandshake v0/v1, SaslAuthenticate v0, Metadata v1, and a PLAIN token. Written here from the
protocol definitions so the tests can send exactly the bytes a hostile client would.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

API_METADATA = 3
API_SASL_HANDSHAKE = 17
API_API_VERSIONS = 18
API_SASL_AUTHENTICATE = 36

ERROR_NONE = 0
ERROR_SASL_AUTHENTICATION_FAILED = 58
ERROR_UNSUPPORTED_SASL_MECHANISM = 33

CLIENT_ID = "portcullis-wire-test"


class Closed(Exception):
    """The peer closed the connection (EOF or reset) before a full response arrived."""


def string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def byte_array(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def request(api_key: int, api_version: int, correlation_id: int, body: bytes) -> bytes:
    """A framed request with a v1 request header (non-flexible)."""
    header = struct.pack(">hhi", api_key, api_version, correlation_id) + string(CLIENT_ID)
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


class Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"truncated response: need {n} bytes at {self.pos} of {len(self.data)}")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def int8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self.take(n).decode()

    def bytes_(self) -> bytes | None:
        n = self.int32()
        return None if n < 0 else self.take(n)

    def array(self, item):
        n = self.int32()
        return [] if n < 0 else [item(self) for _ in range(n)]


@dataclass
class Broker:
    node_id: int
    host: str
    port: int


class Conn:
    """One TCP connection speaking framed Kafka requests."""

    def __init__(self, host: str, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Conn":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except (ConnectionResetError, BrokenPipeError) as e:
                raise Closed(str(e)) from e
            if not chunk:
                raise Closed(f"EOF after {len(buf)} of {n} bytes")
            buf += chunk
        return buf

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(size)

    def call(self, api_key: int, api_version: int, body: bytes) -> Reader:
        self.correlation_id += 1
        cid = self.correlation_id
        self.send_raw(request(api_key, api_version, cid, body))
        r = Reader(self.recv_frame())
        got = r.int32()
        if got != cid:
            raise AssertionError(f"correlation id {got}, expected {cid}")
        return r

    def wait_closed(self, timeout: float = 5.0) -> bytes:
        """Reads until the peer closes; returns whatever arrived first (b'' when nothing did).

        Raises TimeoutError if the connection is still open after `timeout` seconds.
        """
        self.sock.settimeout(timeout)
        got = b""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"connection still open after {timeout}s; received {got[:64]!r}")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                return got
            except socket.timeout as e:
                raise TimeoutError(
                    f"connection still open after {timeout}s; received {got[:64]!r}"
                ) from e
            if not chunk:
                return got
            got += chunk

    # --- requests -------------------------------------------------------------------------------

    def api_versions(self) -> dict[int, tuple[int, int]]:
        r = self.call(API_API_VERSIONS, 0, b"")
        error = r.int16()
        if error != ERROR_NONE:
            raise AssertionError(f"ApiVersions error {error}")
        return {k: (lo, hi) for k, lo, hi in r.array(lambda x: (x.int16(), x.int16(), x.int16()))}

    def sasl_handshake(self, mechanism: str, version: int = 1) -> tuple[int, list[str]]:
        r = self.call(API_SASL_HANDSHAKE, version, string(mechanism))
        error = r.int16()
        mechanisms = r.array(lambda x: x.string())
        return error, mechanisms

    def sasl_authenticate(self, auth_bytes: bytes) -> tuple[int, str | None, bytes | None]:
        r = self.call(API_SASL_AUTHENTICATE, 0, byte_array(auth_bytes))
        error = r.int16()
        message = r.string()
        token = r.bytes_()
        return error, message, token

    def authenticate_plain(self, user: str, password: str) -> None:
        error, mechanisms = self.sasl_handshake("PLAIN")
        if error != ERROR_NONE:
            raise AssertionError(f"SaslHandshake(PLAIN) error {error}, mechanisms {mechanisms}")
        error, message, _ = self.sasl_authenticate(plain_token(user, password))
        if error != ERROR_NONE:
            raise AssertionError(f"SaslAuthenticate(PLAIN) error {error}: {message}")

    def metadata_v1(self) -> list[Broker]:
        # Metadata v1 body: topics = null (all topics).
        r = self.call(API_METADATA, 1, struct.pack(">i", -1))
        return r.array(_broker_v1)


def plain_token(user: str, password: str) -> bytes:
    """RFC 4616: [authzid] NUL authcid NUL passwd."""
    return b"\0" + user.encode() + b"\0" + password.encode()


def _broker_v1(r: Reader) -> Broker:
    node_id = r.int32()
    host = r.string()
    port = r.int32()
    r.string()  # rack (nullable)
    return Broker(node_id, host, port)
