"""What the real-host tests (tests/host/: a ComfyUI server, a Chromium) share, standard library only: a free local port,
stopping a process group, and a minimal RFC 6455 websocket client for ComfyUI's /ws event stream and
Chromium's DevTools protocol (text and binary messages, fragmentation, pings; nothing else)."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    """End a process started with start_new_session=True, and its children: politely, then for sure."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)


class WebSocket:
    def __init__(self, host: str, port: int, path: str, timeout: float = 30.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           ).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the websocket closed during the handshake")
            head += chunk
        head, self.buffer = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"no websocket upgrade: {head[:200]!r}")

    def settimeout(self, seconds: float) -> None:
        self.sock.settimeout(seconds)

    def send(self, payload: bytes, opcode: int = 1) -> None:
        """One frame; a client masks every frame it sends (RFC 6455 §5.3)."""
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
        else:
            head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the websocket closed")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def receive(self) -> tuple[int, bytes]:
        """The next whole message as (opcode, payload): 1 text, 2 binary. Pings are answered; a close frame
        raises ConnectionError."""
        payload, first_opcode = b"", None
        while True:
            b0, b1 = self._read(2)
            size = b1 & 0x7F
            if size == 126:
                size = int.from_bytes(self._read(2), "big")
            elif size == 127:
                size = int.from_bytes(self._read(8), "big")
            mask = self._read(4) if b1 & 0x80 else None
            data = self._read(size)
            if mask:
                data = bytes(c ^ mask[i % 4] for i, c in enumerate(data))
            opcode = b0 & 0x0F
            if opcode == 9:
                self.send(data, opcode=10)
                continue
            if opcode == 8:
                raise ConnectionError("the other side closed the websocket")
            if opcode == 10:
                continue
            first_opcode = first_opcode or opcode  # continuation frames (0) keep the first frame's type
            payload += data
            if b0 & 0x80:  # final fragment
                return first_opcode, payload

    def close(self) -> None:
        self.sock.close()
