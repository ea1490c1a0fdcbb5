"""An HTTP/3 test client on aioquic (a real QUIC stack with resumption and 0-RTT).

    h3client.py HOST PORT SNI CA [options] REQUEST...

REQUEST is METHOD:PATH or METHOD:PATH:N (a body of N pattern bytes: byte i is i % 251, the
test origin's pattern). Options:
    --header K=V     send header K: V with every REQUEST after this option
    --ticket-out F   save the session ticket the server sends (for a later resumption)
    --ticket-in F    resume with the ticket saved in F
    --early          send the first request in 0-RTT data (with --ticket-in)
    --clients N      N connections at once, each sending every REQUEST
    --parallel       send every REQUEST at once, each on its own stream (default: one by one)
    --capture F      write the datagrams of the first flight (Initial + 0-RTT) to F
    --replay F       send the datagrams saved in F as they are (a replayed first flight) and
                     wait 1 s for answers; prints how many datagrams came back
    --flood N        send the first flights (Initial packets) of N new connections and never
                     answer; prints how many answers came back and how many were Retry packets
    --after-goaway   send the requests only once the server's GOAWAY has come (up to 30 s)
    --send-goaway    after the requests send a GOAWAY of our own (as a client going away)
    --key-update     before every request but the first, update the 1-RTT keys (RFC 9001 §6)
    --encoder HEX    before the requests send these bytes on our QPACK encoder stream
    --hex-paths      the PATH of every REQUEST after this option is written in hex, sent as
                     those bytes (a NUL argv cannot carry, a ':' the REQUEST syntax splits on)
    --late-fin       end each request without a body in a packet of its own, after its head
                     (as h3's client may): the server cannot tell from the head that no body comes
    --hold S         after the requests keep the connection open up to S seconds, until the
                     server closes it; prints the close's error code and when it came
    --garbage        send datagrams that cannot be QUIC: 5 bytes, a long header claiming a
                     200-byte connection ID, a 300-byte version 1 Initial
Prints one JSON object: the responses (stream ID, informational heads (1xx) received before the
final one, in order, status, headers, body length, SHA-256 and its
first 4 KiB as text, the codes of a STOP_SENDING and a RESET_STREAM the server sent on the
request's stream), what the handshake did (resumed, early data accepted), and the stream IDs of
the GOAWAY frames the server sent (aioquic reads them but does not say).
"""
import asyncio
import hashlib
import json
import pickle
import socket
import ssl
import sys
import time

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.buffer import Buffer, BufferReadError
from aioquic.tls import Epoch
from aioquic.quic.events import StopSendingReceived, StreamDataReceived, StreamReset

BLOCK = bytes(i % 251 for i in range((1 << 20) + 251))


def pattern(offset, n):
    out = bytearray()
    while len(out) < n:
        k = min(n - len(out), 1 << 20)
        s = offset % 251
        out += BLOCK[s:s + k]
        offset += k
    return bytes(out)


class Client(QuicConnectionProtocol):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.h3 = H3Connection(self._quic)
        self.streams = {}
        # The server's unidirectional streams as received so far, to find GOAWAY on its control stream.
        self.server_uni = {}
        self.goaway = []
        self.goaway_seen = asyncio.Event()
        self.late_fin = False

    def control_frames(self, stream_id, data):
        raw = self.server_uni.setdefault(stream_id, bytearray())
        raw += data
        buf = Buffer(data=bytes(raw))
        try:
            if buf.pull_uint_var() != 0:  # not the control stream
                return
            ids = []
            while not buf.eof():
                kind, length = buf.pull_uint_var(), buf.pull_uint_var()
                payload = Buffer(data=buf.pull_bytes(length))
                if kind == 0x7:
                    ids.append(payload.pull_uint_var())
            self.goaway = ids
            if ids:
                self.goaway_seen.set()
        except BufferReadError:
            pass  # a frame not complete yet: the next data completes it

    def quic_event_received(self, event):
        sid = getattr(event, "stream_id", None)
        if isinstance(event, StopSendingReceived) and sid in self.streams:
            self.streams[sid]["stop_sending"] = event.error_code
        if isinstance(event, StreamDataReceived) and sid % 4 == 3:
            self.control_frames(sid, event.data)
        if isinstance(event, StreamReset) and sid in self.streams:
            self.streams[sid]["reset"] = event.error_code
            if not self.streams[sid]["done"].done():
                self.streams[sid]["done"].set_result(None)
        for ev in self.h3.handle_event(event):
            st = self.streams.get(getattr(ev, "stream_id", None))
            if st is None:
                continue
            if isinstance(ev, HeadersReceived):
                head = {k.decode(): v.decode() for k, v in ev.headers}
                if st["headers"] is None and head.get(":status", "").startswith("1"):
                    st["informational"].append(head)
                elif st["headers"] is None:
                    st["headers"] = head
            elif isinstance(ev, DataReceived):
                st["sha"].update(ev.data)
                st["length"] += len(ev.data)
                if len(st["text"]) < 4096:
                    st["text"] += ev.data[:4096]
            if getattr(ev, "stream_ended", False) and not st["done"].done():
                st["done"].set_result(None)

    async def request(self, method, path, authority, size, extra=()):
        sid = self._quic.get_next_available_stream_id()
        headers = [(b":method", method.encode()), (b":scheme", b"https"), (b":authority", authority.encode()),
                   (b":path", path_bytes(path)), (b"user-agent", b"edgewarm-test-aioquic")]
        headers += [(k.encode(), v.encode()) for k, v in extra]
        if size is not None:
            headers.append((b"content-length", str(size).encode()))
        st = {"headers": None, "informational": [], "sha": hashlib.sha256(), "length": 0, "text": b"", "stop_sending": None,
              "reset": None, "done": asyncio.get_running_loop().create_future()}
        self.streams[sid] = st
        # The head leaves with the body's first chunk, as a browser's does.
        late_fin = size is None and self.late_fin
        self.h3.send_headers(sid, headers, end_stream=size is None and not late_fin)
        if late_fin:
            self.transmit()
            await asyncio.sleep(0.05)
            self.h3.send_data(sid, b"", end_stream=True)
        if size is not None:
            at = 0
            # Until the server asks us to stop sending (it answered without the body).
            while at < size and st["stop_sending"] is None:
                n = min(size - at, 64 * 1024)
                self.h3.send_data(sid, pattern(at, n), end_stream=at + n == size)
                at += n
                self.transmit()
                # Let the connection drain what it may send before queueing more.
                await asyncio.sleep(0)
            if size == 0:
                self.h3.send_data(sid, b"", end_stream=True)
        self.transmit()
        # A guard against a hang, not a speed limit: aioquic moves a gibibyte at 7-10 MB/s on
        # the 2-core machine (under a parallel test run, less), so 120 s was too close.
        await asyncio.wait_for(st["done"], 600)
        h = st["headers"] or {}
        return {"stream": sid, "informational": st["informational"], "status": int(h.get(":status", "0")),
                "headers": h, "length": st["length"],
                "sha256": st["sha"].hexdigest(), "text": st["text"][:4096].decode("latin-1"),
                "stop_sending": st["stop_sending"], "reset": st["reset"]}


def path_bytes(path):
    return path if isinstance(path, bytes) else path.encode()


def configuration(args, tickets):
    c = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=args["sni"])
    c.load_verify_locations(args["ca"])
    if args.get("ticket_in"):
        with open(args["ticket_in"], "rb") as f:
            c.session_ticket = pickle.load(f)
    return c


def parse(argv):
    args = {"host": argv[0], "port": int(argv[1]), "sni": argv[2], "ca": argv[3], "requests": [], "clients": 1}
    headers = []
    hex_paths = False
    it = iter(argv[4:])
    for a in it:
        if a == "--header":
            headers = headers + [tuple(next(it).split("=", 1))]
        elif a == "--ticket-out":
            args["ticket_out"] = next(it)
        elif a == "--ticket-in":
            args["ticket_in"] = next(it)
        elif a == "--early":
            args["early"] = True
        elif a == "--key-update":
            args["key_update"] = True
        elif a == "--parallel":
            args["parallel"] = True
        elif a == "--clients":
            args["clients"] = int(next(it))
        elif a == "--capture":
            args["capture"] = next(it)
        elif a == "--replay":
            args["replay"] = next(it)
        elif a == "--flood":
            args["flood"] = int(next(it))
        elif a == "--garbage":
            args["garbage"] = True
        elif a == "--send-goaway":
            args["send_goaway"] = True
        elif a == "--after-goaway":
            args["after_goaway"] = True
        elif a == "--hold":
            args["hold"] = float(next(it))
        elif a == "--encoder":
            args["encoder"] = bytes.fromhex(next(it))
        elif a == "--late-fin":
            args["late_fin"] = True
        elif a == "--hex-paths":
            hex_paths = True
        else:
            parts = a.split(":")
            path = bytes.fromhex(parts[1]) if hex_paths else parts[1]
            args["requests"].append((parts[0], path, int(parts[2]) if len(parts) > 2 else None, headers))
    return args


async def one(args):
    tickets = []
    cfg = configuration(args, tickets)
    out = {"responses": []}
    async with connect(args["host"], args["port"], configuration=cfg, create_protocol=Client,
                       session_ticket_handler=tickets.append, wait_connected=not args.get("early")) as p:
        p.late_fin = bool(args.get("late_fin"))
        if args.get("after_goaway"):
            await asyncio.wait_for(p.goaway_seen.wait(), 30)
        if args.get("encoder"):
            p._quic.send_stream_data(p.h3._local_encoder_stream_id, args["encoder"])
            p.transmit()
        if args.get("parallel"):
            out["responses"] = list(await asyncio.gather(
                *(p.request(method, path, args["sni"], size, headers) for method, path, size, headers in args["requests"])))
        for i, (method, path, size, headers) in enumerate([] if args.get("parallel") else args["requests"]):
            if i and args.get("key_update"):
                # The request then goes out in the next key phase, and its answer must come back
                # in it: aioquic reads nothing sent under the keys it has dropped.
                p._quic.request_key_update()
            out["responses"].append(await p.request(method, path, args["sni"], size, headers))
            if args.get("key_update"):
                out.setdefault("key_phases", []).append(p._quic._cryptos[Epoch.ONE_RTT].key_phase)
        if args.get("send_goaway"):
            # aioquic has no call for it: the frame (type 7, length, push ID 0) on our control stream.
            p._quic.send_stream_data(p.h3._local_control_stream_id, bytes([0x07, 0x01, 0x00]))
            p.transmit()
        tls = p._quic.tls
        out["resumed"] = bool(tls.session_resumed)
        out["early_accepted"] = bool(tls.early_data_accepted)
        if args.get("hold"):
            held = time.monotonic()
            try:
                await asyncio.wait_for(p.wait_closed(), args["hold"])
                ev = p._quic._close_event
                out["closed"] = {"error_code": ev.error_code, "after_s": round(time.monotonic() - held, 3)}
            except asyncio.TimeoutError:
                out["closed"] = None
        out["goaway"] = p.goaway
        # A ticket may trail the response (its packet lost and resent): wait for it, bounded.
        for _ in range(40):
            if tickets or not args.get("ticket_out"):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.05)
    if args.get("ticket_out") and tickets:
        with open(args["ticket_out"], "wb") as f:
            pickle.dump(tickets[-1], f)
    return out


def capture(args):
    """The first flight of a resumed connection with a 0-RTT GET, written to a file unsent
    over the network by this function: an attacker's copy of it."""
    cfg = configuration(args, [])
    quic = QuicConnection(configuration=cfg)
    quic.connect((args["host"], args["port"]), now=time.time())
    h3 = H3Connection(quic)
    method, path, _, _ = args["requests"][0]
    sid = quic.get_next_available_stream_id()
    h3.send_headers(sid, [(b":method", method.encode()), (b":scheme", b"https"),
                          (b":authority", args["sni"].encode()), (b":path", path_bytes(path))], end_stream=True)
    datagrams = [d for d, _ in quic.datagrams_to_send(now=time.time())]
    with open(args["capture"], "wb") as f:
        pickle.dump(datagrams, f)
    return {"captured": len(datagrams)}


def replay(args):
    with open(args["replay"], "rb") as f:
        datagrams = pickle.load(f)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.2)
    for d in datagrams:
        s.sendto(d, (args["host"], args["port"]))
    answers, deadline = 0, time.time() + 1.0
    while time.time() < deadline:
        try:
            s.recvfrom(65536)
            answers += 1
        except socket.timeout:
            pass
    return {"sent": len(datagrams), "answers": answers}


def answers(s, seconds):
    got = []
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            got.append(s.recvfrom(65536)[0])
        except socket.timeout:
            pass
    return got


def flood(args):
    addr = (args["host"], args["port"])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.05)
    for _ in range(args["flood"]):
        cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=args["sni"])
        quic = QuicConnection(configuration=cfg)
        quic.connect(addr, now=time.time())
        for d, _ in quic.datagrams_to_send(now=time.time()):
            s.sendto(d, addr)
    got = answers(s, 1.0)
    retries = sum(1 for d in got if d[0] & 0x80 and d[0] & 0x30 == 0x30)
    return {"sent": args["flood"], "answers": len(got), "retries": retries}


def garbage(args):
    addr = (args["host"], args["port"])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.05)
    long_cid = bytes([0xC0, 0, 0, 0, 1, 200]) + bytes(1194)
    small_initial = bytes([0xC0, 0, 0, 0, 1, 8]) + bytes(8) + bytes([8]) + bytes(8) + bytes(277)
    sent = [b"\x00" * 5, long_cid, small_initial]
    for d in sent:
        s.sendto(d, addr)
    return {"sent": len(sent), "answers": len(answers(s, 0.3))}


async def main():
    args = parse(sys.argv[1:])
    if args.get("capture"):
        out = capture(args)
    elif args.get("replay"):
        out = replay(args)
    elif args.get("flood"):
        out = flood(args)
    elif args.get("garbage"):
        out = garbage(args)
    elif args["clients"] > 1:
        results = await asyncio.gather(*(one(args) for _ in range(args["clients"])), return_exceptions=True)
        out = {"clients": [r if isinstance(r, dict) else {"error": repr(r)} for r in results]}
    else:
        out = await one(args)
    print(json.dumps(out))


asyncio.run(main())
